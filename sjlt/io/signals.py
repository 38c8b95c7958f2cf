"""SIGINT and SIGTERM become an :class:`Interrupted` exception in the main thread.

Raising (rather than exiting) unwinds the stack, so every ``finally`` and context manager on the
way up runs: temporary outputs are deleted and worker threads told to stop. Only the first
signal raises; later ones are ignored until the block ends, so a second Ctrl-C cannot cut the
clean-up (or the one-line message) short. Within :func:`signals_deferred` (committing an output:
a few renames that must not be cut in two) a signal takes effect at the end of the block.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from .errors import Interrupted

_HANDLED = (signal.SIGINT, signal.SIGTERM)


class _State:
    raised = False  # the first signal has been raised: ignore the rest
    deferring = 0  # depth of signals_deferred blocks (main thread only)
    pending: int | None = None


_STATE = _State()


def _interrupted(signum: int) -> Interrupted:
    _STATE.raised = True
    return Interrupted(signum, signal.Signals(signum).name)


def _handle(signum, frame):
    if _STATE.raised:
        return  # already unwinding from the first signal: let the clean-up finish
    if _STATE.deferring:
        _STATE.pending = signum
        return
    raise _interrupted(signum)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A signal arriving inside the block is raised when the block ends, not in its middle."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STATE.deferring += 1
    try:
        yield
    finally:
        _STATE.deferring -= 1
    if not _STATE.deferring and _STATE.pending is not None:
        signum, _STATE.pending = _STATE.pending, None
        raise _interrupted(signum)


@contextlib.contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM raise :class:`Interrupted`; old handlers come back after.

    Python only lets the main thread install handlers; elsewhere (a Dask worker thread, say)
    the block runs with the handlers it already has.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STATE.raised, _STATE.pending = False, None
    previous = {signum: signal.signal(signum, _handle) for signum in _HANDLED}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        _STATE.pending = None
