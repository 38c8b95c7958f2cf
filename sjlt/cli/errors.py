"""The command line's own exception; problems found by the file layer below arrive as
:class:`sjlt.io.FileProjectionError` and are shown the same way."""

from __future__ import annotations


class CLIError(Exception):
    """A problem the user can fix: printed as ``sjlt: error: <message>``, exit status 1.

    The message names what is wrong and says what to do about it.
    """
