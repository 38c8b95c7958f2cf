"""A fixed pool of daemon worker threads, for work that a signal may abandon.

``concurrent.futures.ThreadPoolExecutor`` starts its (non-daemon) workers inside ``submit``. A
signal handler that raises there (the CLI turns Ctrl-C into an exception) can cut ``submit``
between a worker's start and its registration, and the interpreter then waits forever at exit for
a worker that nothing will wake. Here every worker starts in the constructor and is a daemon, so an
exception at any moment leaves nothing that blocks the exit. Callers wait for the work they need
through the returned futures, so nothing a daemon drops at exit is ever needed.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future


class DaemonPool:
    """``submit(fn, *args)`` runs ``fn(*args)`` on one of ``threads`` daemon threads."""

    def __init__(self, threads: int, name: str):
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        for index in range(threads):
            threading.Thread(target=self._serve, name=f"{name}_{index}", daemon=True).start()

    def submit(self, fn, *args) -> Future:
        future = Future()
        self._work.put((future, fn, args))
        return future

    def _serve(self) -> None:
        while True:
            future, fn, args = self._work.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as error:  # the caller's future raises it
                future.set_exception(error)
            else:
                future.set_result(result)
            del future, fn, args  # hold no reference to the work while idle
