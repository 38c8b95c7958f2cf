"""Exceptions of the file-projection layer (no torch, no numpy: the command line imports this
module before parsing its arguments)."""

from __future__ import annotations


class FileProjectionError(Exception):
    """A problem with an input file, an output path or the environment that the caller can fix.

    The message names what is wrong and what to do; callers show it as it is (the command line
    prints ``sjlt: error: <message>`` and exits 1).
    """


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (see :mod:`sjlt.io.signals`). A BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way up swallows it before the
    output is cleaned up."""

    def __init__(self, signum: int, name: str):
        super().__init__(name)
        self.signum = signum
        self.name = name
