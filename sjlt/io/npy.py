"""Streaming .npy reader and writer: row batches in, row batches out, bounded memory.

The reader does not memory-map the file: pages of a mapping count toward the process's resident
memory and address space until the kernel evicts them, so a 150 GB input could show 150 GB
resident. It reads each batch into a reusable buffer of a pool instead, in slices read
concurrently: one copy, as the mapping would make, with memory fixed by the batch size. The writer
maps one batch's part of the output at a time, where its space could be reserved, and unmaps it
once the batch is copied in, so its resident memory is bounded the same way.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.lib.format as npy_format

from .. import spec
from .._daemon_pool import DaemonPool
from .errors import FileProjectionError
from .pipeline import Batch, BufferPool

_MAX_HEADER_BYTES = 1 << 20


@dataclass(frozen=True)
class NpyHeader:
    shape: tuple[int, ...]
    dtype: np.dtype  # as stored, possibly non-native byte order
    fortran_order: bool
    data_offset: int


def read_npy_header(path: Path) -> NpyHeader:
    """The header of a .npy file; a clear :class:`FileProjectionError` for anything but a valid one."""
    try:
        with open(path, "rb") as f:
            try:
                version = npy_format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = npy_format.read_array_header_1_0(f, max_header_size=_MAX_HEADER_BYTES)
                elif version == (2, 0):
                    shape, fortran, dtype = npy_format.read_array_header_2_0(f, max_header_size=_MAX_HEADER_BYTES)
                else:
                    raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
            except (ValueError, SyntaxError, EOFError) as error:
                raise FileProjectionError(
                    f"INPUT {str(path)!r} is not a readable .npy file ({error}); write it with numpy.save"
                ) from None
            offset = f.tell()
    except OSError as error:
        raise FileProjectionError(f"cannot read INPUT {str(path)!r}: {error.strerror or error}") from None
    if any(int(size) < 0 for size in shape):
        raise FileProjectionError(
            f"INPUT {str(path)!r} has a damaged .npy header: its shape {tuple(shape)} "
            f"has a negative dimension; write the file again with numpy.save"
        )
    return NpyHeader(tuple(int(s) for s in shape), np.dtype(dtype), bool(fortran), offset)


def check_embedding_array(path: Path, header: NpyHeader) -> None:
    shape, dtype = header.shape, header.dtype
    name = repr(str(path))
    if dtype.name not in spec.NUMPY_FLOAT_DTYPES:
        raise FileProjectionError(
            f"INPUT {name} holds {dtype} values; sjlt projects floating-point "
            f"embeddings: save them as float16, float32 or float64, "
            f"e.g. numpy.save(path, a.astype(numpy.float32))"
        )
    if len(shape) < 2:
        raise FileProjectionError(
            f"INPUT {name} is a {len(shape)}-D array of shape {shape}; sjlt projects "
            f"the rows of a 2-D (rows, features) array: save one vector as "
            f"a.reshape(1, -1)"
        )
    if shape[-1] == 0:
        raise FileProjectionError(f"INPUT {name} has shape {shape}: 0 features per row, nothing to project")
    if header.fortran_order and len(shape) > 2:
        raise FileProjectionError(
            f"INPUT {name} is a {len(shape)}-D array in Fortran order; save it in C "
            f"order: numpy.save(path, numpy.ascontiguousarray(a))"
        )
    needed = header.data_offset + math.prod(shape) * dtype.itemsize
    actual = os.path.getsize(path)
    if actual < needed:
        raise FileProjectionError(
            f"INPUT {name} is truncated: its header promises {needed:,} bytes but the "
            f"file has {actual:,}; write it again"
        )
    if actual > needed:  # numpy.save writes exactly header + data: the shape is wrong
        raise FileProjectionError(
            f"INPUT {name} does not match its header: the shape {shape} accounts for "
            f"{needed:,} bytes but the file has {actual:,} ({actual - needed:,} more), "
            f"so the header is damaged or was edited; write the file again with "
            f"numpy.save"
        )


#: Batches are read and written as slices of this size, several at once: one thread copies
#: page-cached data at about 5 GB/s in and 2.5 GB/s out (H100 host), below the 7-9 GB/s at which
#: the GPU takes pageable data in. H100 host, `sjlt project` of 200000 x 1024 -> 256 from /dev/shm:
#: 1 / 2 / 8 / 64 MB slices took 199 / 177 / 159 / 270 ms in float32, 116 / 110 / 100 / 164 in float16.
SLICE_BYTES = 8 << 20
_SLICE_THREADS = min(8, os.cpu_count() or 1)
_POSITIONAL = hasattr(os, "preadv") and hasattr(os, "pwritev")
#: Outputs are written through memory maps of space reserved up front where the platform can: the
#: kernel serialises write() calls to one file, but not page faults in a shared mapping, so slices
#: copied by several threads add up (H100 host, 205 MB into /dev/shm: 75 ms by pwritev slices,
#: 16-25 ms into reserved space through maps). Reserving first also turns a full disk into an
#: ENOSPC error, where a write into an unreserved mapping would end the process with SIGBUS.
_MAPPED_WRITES = _POSITIONAL and hasattr(os, "posix_fallocate") and hasattr(mmap, "MAP_SHARED")
_NO_RESERVATION = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
#: Space is reserved in pieces of this size, in order, in a thread of its own, so the first batches
#: are written while the rest is reserved (reserving 205 MB of /dev/shm takes 36 ms on the H100 host).
RESERVE_BYTES = 32 << 20
#: A batch is copied into its map in slices of at least this size, one per write thread.
MAP_SLICE_BYTES = 1 << 20
# Reads and writes in separate pools, so a batch's write does not queue behind the next reads.
_slice_pools: dict[str, DaemonPool] = {}
_slice_pool_lock = threading.Lock()


def _slice_pool(kind: str, threads: int | None = None) -> DaemonPool:
    with _slice_pool_lock:
        pool = _slice_pools.get(kind)
        if pool is None:
            pool = _slice_pools[kind] = DaemonPool(threads or _SLICE_THREADS, f"sjlt-{kind}")
        return pool


def _read_slice(f, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        if _POSITIONAL:
            count = os.preadv(f.fileno(), [view[done:]], offset + done)
        else:
            f.seek(offset + done)
            count = f.readinto(view[done:])
        if not count:
            raise FileProjectionError(f"INPUT {f.name!r} ended early (was it truncated while being read?)")
        done += count


def _write_slice(f, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        if _POSITIONAL:
            done += os.pwritev(f.fileno(), [view[done:]], offset + done)
        else:
            f.seek(offset + done)
            done += f.write(view[done:])


def _in_slices(transfer, f, view: memoryview, offset: int, kind: str, slice_bytes: int | None = None) -> None:
    """``transfer(f, slice, its offset)`` over the slices of ``view`` (bytes at ``offset`` of the
    unbuffered file ``f``, SLICE_BYTES each unless given), concurrently where the platform reads and
    writes by position; returns once every slice is done, so the buffer can be handed on or given
    back."""
    slice_bytes = slice_bytes or SLICE_BYTES
    starts = range(0, len(view), slice_bytes)
    if len(starts) <= 1 or not _POSITIONAL or _SLICE_THREADS == 1:
        transfer(f, view, offset)
        return
    pool = _slice_pool(kind)
    slices = [pool.submit(transfer, f, view[a : a + slice_bytes], offset + a) for a in starts]
    for pending in slices:
        pending.exception()
    for pending in slices:
        pending.result()


def _copy_into_map(mapped: np.ndarray, view: memoryview, start: int) -> None:
    """Copies ``view`` into ``mapped[start:]``; numpy releases the GIL for the copy."""
    source = np.frombuffer(view, dtype=np.uint8)
    np.copyto(mapped[start : start + len(source)], source)


def _read_exactly(f, view: memoryview, offset: int) -> None:
    _in_slices(_read_slice, f, view, offset, "read")


class NpySource:
    """Rows of a .npy array of shape (..., features), read in batches; never writes the file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.header = read_npy_header(self.path)
        check_embedding_array(self.path, self.header)
        self.shape = self.header.shape
        self.dim = self.shape[-1]
        self.n_rows = math.prod(self.shape[:-1])
        self.dtype = self.header.dtype.newbyteorder("=")
        self.column = None
        self.carried_columns: list[str] = []

    @property
    def nbytes(self) -> int:
        return self.n_rows * self.dim * self.dtype.itemsize

    def batch_buffer_bytes(self, batch_rows: int) -> int:
        return min(batch_rows, max(self.n_rows, 1)) * self.dim * self.dtype.itemsize

    def take_rows(self, rows: np.ndarray) -> np.ndarray:
        """The given rows (sorted indices) as a native-order array, via a read-only memory map:
        only the pages holding those rows are touched."""
        mapped = np.load(self.path, mmap_mode="r").reshape(self.n_rows, self.dim)
        return np.asarray(mapped[rows], dtype=self.dtype)

    def batches(self, batch_rows: int, pool: BufferPool, stop: threading.Event) -> Iterator[Batch]:
        header, itemsize, dim = self.header, self.dtype.itemsize, self.dim
        with open(self.path, "rb", buffering=0) as f:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            for index, start in enumerate(range(0, self.n_rows, batch_rows)):
                rows = min(batch_rows, self.n_rows - start)
                buffer = pool.acquire(stop)
                if buffer is None:
                    return
                try:
                    raw = buffer[: rows * dim * itemsize]
                    if header.fortran_order:
                        # Column j of the batch is one contiguous run of the file.
                        columns = raw.view(header.dtype).reshape(dim, rows)
                        for j in range(dim):
                            _read_exactly(
                                f,
                                memoryview(columns[j]).cast("B"),
                                header.data_offset + (j * self.n_rows + start) * itemsize,
                            )
                        values = columns.T
                    else:
                        _read_exactly(f, memoryview(raw), header.data_offset + start * dim * itemsize)
                        values = raw.view(header.dtype).reshape(rows, dim)
                    if not header.dtype.isnative:
                        values = values.byteswap(inplace=True).view(self.dtype)
                except BaseException:
                    pool.release(buffer)
                    raise
                yield Batch(index, start, values, buffer=buffer)


class NpySink:
    """Writes a .npy of a known shape batch by batch, then its JSON sidecar of settings."""

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype, *, sidecar_path: Path, metadata: dict):
        self._dtype = np.dtype(dtype)
        self._expected = math.prod(shape) * self._dtype.itemsize
        self._written = 0
        self._sidecar_path = sidecar_path
        self._metadata = metadata
        self._file = open(path, "wb+" if _MAPPED_WRITES else "wb", buffering=0)
        header = {"descr": npy_format.dtype_to_descr(self._dtype), "fortran_order": False, "shape": tuple(shape)}
        # Format 1.0 stores the header length in 16 bits; only enormous shapes overflow it.
        if len(repr(header)) > 65000:
            npy_format.write_array_header_2_0(self._file, header)
        else:
            npy_format.write_array_header_1_0(self._file, header)
        self._data_offset = self._file.tell()
        # The space is reserved in the background, while the first batches are read and projected.
        self._mapping = _MAPPED_WRITES and self._expected > 0
        self._pieces: list = []  # (first byte, its reservation) in file order, until checked
        if self._mapping:
            end = self._data_offset + self._expected
            reserver = _slice_pool("reserve", threads=1)  # one thread: pieces in file order
            self._pieces = [
                (
                    start,
                    reserver.submit(os.posix_fallocate, self._file.fileno(), start, min(RESERVE_BYTES, end - start)),
                )
                for start in range(0, end, RESERVE_BYTES)
            ]

    def _reserved(self, end: int) -> bool:
        """Whether the output's first ``end`` bytes are reserved, so that a batch ending there can
        go through a map; raises a reservation's error (a full disk), except where the file system
        cannot reserve space: then batches are written by position from here on."""
        while self._pieces and self._pieces[0][0] < end:
            try:
                self._pieces[0][1].result()
            except OSError as error:
                if error.errno not in _NO_RESERVATION:
                    raise
                self._stop_reserving()
                self._mapping = False
            else:
                self._pieces.pop(0)
        return self._mapping

    def _stop_reserving(self) -> None:
        """Cancels the reservations not started and waits for the one running (before the file closes)."""
        for _, pending in self._pieces:
            pending.cancel()
        for _, pending in self._pieces:
            if not pending.cancelled():
                pending.exception()
        self._pieces = []

    def write(self, projected: np.ndarray, batch: Batch) -> None:
        projected = np.ascontiguousarray(projected, dtype=self._dtype)
        view = memoryview(projected).cast("B")
        offset = self._data_offset + self._written
        if projected.nbytes and self._reserved(offset + projected.nbytes):
            first_page = offset // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
            region = mmap.mmap(self._file.fileno(), offset + projected.nbytes - first_page, offset=first_page)
            mapped = np.frombuffer(region, dtype=np.uint8)
            share = max(MAP_SLICE_BYTES, -(-projected.nbytes // _SLICE_THREADS))  # every write thread busy
            try:
                _in_slices(_copy_into_map, mapped, view, offset - first_page, "write", share)
            finally:
                del mapped
                with contextlib.suppress(BufferError):  # a traceback still views it: closed when freed
                    region.close()
        else:
            _in_slices(_write_slice, self._file, view, offset, "write")
        self._written += projected.nbytes

    def close(self) -> None:
        if self._written != self._expected:
            raise RuntimeError(
                f"wrote {self._written} bytes of projections where the header "
                f"promises {self._expected}; this is a bug in sjlt"
            )
        self._file.close()
        with open(self._sidecar_path, "w", encoding="utf-8") as f:
            json.dump(self._metadata, f, indent=2)
            f.write("\n")

    def abort(self) -> None:
        self._stop_reserving()
        try:
            self._file.close()
        except OSError:
            pass
