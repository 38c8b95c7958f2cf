"""Exceptions the command line turns into one-line messages and exit codes."""
from __future__ import annotations


class CLIError(Exception):
    """A problem the user can fix: printed as ``sjlt: error: <message>``, exit status 1.

    The message names what is wrong and says what to do about it.
    """


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way up swallows it before the output is cleaned up."""

    def __init__(self, signum: int, name: str):
        super().__init__(name)
        self.signum = signum
        self.name = name
