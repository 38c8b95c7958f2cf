"""Overlap of reading, projecting and writing: a prefetch thread and a write-behind thread.

The main thread projects; one thread reads the next batches into a bounded queue and another
writes finished ones, so disk and compute run at the same time. Memory stays bounded: the
queues are short and input batches live in a fixed pool of reusable buffers (the copy to a GPU
is staged by :class:`~sjlt.io.rows.DeviceStream`, or made directly from page-locked pool
buffers). File I/O, Arrow decoding and torch kernels
release the GIL, so the threads do run in parallel.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

#: Batches waiting in each queue; with the one being read and the one being projected, the
#: pool needs this many plus two buffers.
QUEUE_DEPTH = 2
_POLL_SECONDS = 0.1


@dataclass
class Batch:
    """Rows [start, start + len(values)) of a source, numbered ``index`` from 0."""

    index: int
    start: int
    values: np.ndarray  # (rows, features); may be strided or read-only
    table: object | None = None  # the pyarrow.RecordBatch the rows came from (parquet), to carry
    buffer: np.ndarray | None = None  # the pool buffer ``values`` lives in, to give back


class BufferPool:
    """A fixed set of byte buffers handed out and given back; readers view them as any array.

    ``allocate(nbytes)``, if given, makes each buffer (page-locked ones let a GPU copy batches
    directly); by default they are numpy's.
    """

    def __init__(self, count: int, nbytes: int, allocate: Callable[[int], np.ndarray] | None = None):
        self._free: queue.Queue = queue.Queue()
        for _ in range(count):
            size = max(nbytes, 1)
            self._free.put(allocate(size) if allocate else np.empty(size, dtype=np.uint8))

    def acquire(self, stop: threading.Event) -> np.ndarray | None:
        """A free buffer, or None once ``stop`` is set."""
        while not stop.is_set():
            try:
                return self._free.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
        return None

    def release(self, buffer: np.ndarray | None) -> None:
        if buffer is not None:
            self._free.put(buffer)


class _Done:
    pass


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def _put_unless_stopped(q: queue.Queue, item, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


class Prefetcher:
    """Runs ``produce(stop)`` (a generator of batches) in a thread, QUEUE_DEPTH batches ahead.

    Iterate it in the main thread; an exception in the reader is re-raised there. ``close()``
    stops the reader and hands every queued batch to ``discard`` (to return its buffer).
    """

    def __init__(self, produce: Callable[[threading.Event], Iterator], discard: Callable):
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        self._discard = discard
        self._thread = threading.Thread(target=self._run, args=(produce,), name="sjlt-reader", daemon=True)
        self._thread.start()

    def _run(self, produce) -> None:
        batches = produce(self._stop)
        try:
            for batch in batches:
                if not _put_unless_stopped(self._queue, batch, self._stop):
                    self._discard(batch)
                    return
            _put_unless_stopped(self._queue, _Done(), self._stop)
        except BaseException as error:  # handed to the main thread, which decides
            _put_unless_stopped(self._queue, _Failed(error), self._stop)
        finally:
            batches.close()

    def __iter__(self):
        while True:
            item = self._queue.get()
            if isinstance(item, _Done):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if not isinstance(item, (_Done, _Failed)):
                self._discard(item)


class WriteBehind:
    """Calls ``write(*args)`` in a thread for each :meth:`submit`, at most QUEUE_DEPTH behind.

    A write error stops the thread and is re-raised by the next :meth:`submit` or by
    :meth:`finish`.
    """

    def __init__(self, write: Callable):
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(write,), name="sjlt-writer", daemon=True)
        self._thread.start()

    def _run(self, write) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, _Done):
                return
            try:
                write(*item)
            except BaseException as error:
                self._error = error
                self._stop.set()
                return

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, *args) -> None:
        self._raise_if_failed()
        if not _put_unless_stopped(self._queue, args, self._stop):
            self._raise_if_failed()

    def finish(self) -> None:
        """Waits for every submitted write; raises the first write error."""
        _put_unless_stopped(self._queue, _Done(), self._stop)
        self._thread.join()
        self._raise_if_failed()

    def abort(self) -> None:
        """Drops pending writes and waits for the one in progress, so the file can be removed."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(_Done())
        self._thread.join(timeout=30)
