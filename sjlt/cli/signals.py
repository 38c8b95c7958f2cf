"""SIGINT and SIGTERM become an :class:`Interrupted` exception in the main thread.

Raising (rather than exiting) unwinds the stack, so every ``finally`` and context manager on the
way up runs: temporary outputs are deleted and worker threads told to stop.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

from .errors import Interrupted

_HANDLED = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupted(signum, frame):
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
    previous = {signum: signal.signal(signum, _raise_interrupted) for signum in _HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
