"""Crash-safe outputs: write beside the target, fsync, then rename over it.

A reader of OUTPUT sees either nothing (or the previous file) or the complete new file, never a
partial one: the data goes to a temporary file in the same directory (so the rename stays on one
file system and is atomic), is flushed to disk, and only then replaces OUTPUT with
:func:`os.replace`. Any exception, including :class:`~sjlt.cli.errors.Interrupted` from a signal,
deletes the temporary files instead.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Iterator

#: Every temporary output ends with this, so a leftover from a killed process (SIGKILL, power
#: loss: the only ways to skip the cleanup) is easy to recognise and delete.
TEMP_SUFFIX = ".sjlt-tmp"


def _create_temporary_beside(path: Path) -> Path:
    """An empty new file next to ``path``, created exclusively, with default permissions."""
    while True:
        candidate = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            # 0o666 through the umask gives the permissions a plain open() would give OUTPUT.
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return candidate


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    """Makes a rename durable; some platforms cannot open directories, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_outputs(*paths: Path) -> Iterator[tuple[Path, ...]]:
    """Yields one temporary path per target; on a clean exit they replace the targets in order.

    The first path is the primary output and the others its companions (a JSON sidecar). Old
    companions are deleted before the primary is replaced, so a crash between the renames can
    leave a new primary without its sidecar, but never a sidecar describing different data.
    """
    targets = [Path(p) for p in paths]
    temporaries: list[Path] = []
    try:
        for target in targets:
            temporaries.append(_create_temporary_beside(target))
        yield tuple(temporaries)
        for temporary in temporaries:
            _fsync_path(temporary)
        for companion in targets[1:]:
            companion.unlink(missing_ok=True)
        for temporary, target in zip(temporaries, targets):
            os.replace(temporary, target)
        for directory in {target.parent for target in targets}:
            _fsync_directory(directory)
    except BaseException:
        for temporary in temporaries:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
        raise
