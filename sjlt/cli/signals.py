"""SIGINT and SIGTERM become an :class:`Interrupted` exception in the main thread.

Raising (rather than exiting) unwinds the stack, so every ``finally`` and context manager on the
way up runs: temporary outputs are deleted and worker threads told to stop. Only the first
signal raises; later ones are ignored until the block ends, so a second Ctrl-C cannot cut the
clean-up (or the one-line message) short.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

from .errors import Interrupted

_HANDLED = (signal.SIGINT, signal.SIGTERM)


class _RaiseOnce:
    def __init__(self):
        self.received: int | None = None

    def __call__(self, signum, frame):
        if self.received is not None:
            return  # already unwinding from the first signal: let the clean-up finish
        self.received = signum
        raise Interrupted(signum, signal.Signals(signum).name)


@contextlib.contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM raise :class:`Interrupted`; old handlers come back after.

    Python only lets the main thread install handlers; elsewhere (a Dask worker thread, say)
    the block runs with the handlers it already has.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _RaiseOnce()
    previous = {signum: signal.signal(signum, handler) for signum in _HANDLED}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
