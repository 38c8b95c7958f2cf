"""Crash-safe outputs and the overwrite rule: the one way sjlt writes a file.

A reader of OUTPUT sees either nothing (or the previous file) or the complete new file, never a
partial one: the data goes to a temporary file in the same directory (so the final step stays on
one file system and is atomic), is flushed to disk, and only then becomes OUTPUT. Any exception,
including :class:`~sjlt.io.errors.Interrupted` from a signal, deletes the temporary files.

The overwrite rule (:func:`check_replaceable`), shared by ``sjlt project`` and ``sjlt evaluate``:

* an OUTPUT that does not exist is created *exclusively*: the finished temporary file is
  hard-linked to its final name (``os.link`` fails if the name exists; ``renameat2`` with
  RENAME_NOREPLACE where links are unsupported), so of two runs racing for one OUTPUT exactly
  one creates it and the other fails, removing its temporaries;
* an existing OUTPUT is replaced (``os.replace``) only under ``--overwrite`` and only if sjlt
  wrote it, as its own provenance record shows (:func:`~.provenance.written_by_sjlt`); any other
  file is refused, with or without ``--overwrite``.

The files of one output (a .npy and its JSON sidecar) are committed together while holding an
exclusive ``flock`` on their directory, so two runs never interleave their renames: the result
is one run's data with the same run's sidecar.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from .errors import FileProjectionError
from .provenance import written_by_sjlt
from .signals import signals_deferred

try:
    import fcntl
except ImportError:  # not POSIX: commits go unlocked
    fcntl = None

#: Every temporary output ends with this, so a leftover from a killed process (SIGKILL, power
#: loss: the only ways to skip the cleanup) is easy to recognise and delete.
TEMP_SUFFIX = ".sjlt-tmp"
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def check_replaceable(target: Path, role: str, *, overwrite: bool, foreign_hint: str = "", own_hint: str = "") -> None:
    """Refuses to go on if writing ``target`` would replace a file it must not replace.

    The hints name a likely cause: ``foreign_hint`` for a file sjlt did not write, ``own_hint``
    for an earlier sjlt output without --overwrite.
    """
    target = Path(target)
    if target.is_dir():
        raise FileProjectionError(f"{role} {str(target)!r} is a directory; give a file name")
    if not os.path.lexists(target):
        return
    if not written_by_sjlt(target):
        raise FileProjectionError(
            f"{role} {str(target)!r} already exists and was not written by sjlt (it "
            f"carries no sjlt settings record), so sjlt will not replace it, with or "
            f"without --overwrite{foreign_hint}. Choose another path, or delete the file "
            f"yourself if you really mean to replace it"
        )
    if not overwrite:
        raise FileProjectionError(
            f"{role} {str(target)!r} already exists (an earlier sjlt output); pass --overwrite to replace it{own_hint}"
        )


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
def _directory_locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on ``directory`` (every sjlt commit there takes it); where the file
    system cannot lock, the commit goes on unlocked."""
    fd = None
    try:
        fd = os.open(directory, os.O_RDONLY)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the lock


def _rename_noreplace(source: Path, target: Path) -> None:
    rename = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if rename is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if rename(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(target))


def _create_exclusively(temporary: Path, target: Path) -> None:
    """Gives the finished ``temporary`` the name ``target``; FileExistsError if it exists."""
    try:
        os.link(temporary, target)
        return
    except FileExistsError:
        raise
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
    try:
        _rename_noreplace(temporary, target)
    except OSError as error:
        if error.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "File exists", str(target)) from None
        raise FileProjectionError(
            f"the file system of {str(target)!r} supports neither hard links nor "
            f"rename-without-replace, so sjlt cannot create it safely; write to "
            f"another file system"
        ) from None


def _commit(temporaries: list[Path], targets: list[Path], role: str, overwrite: bool) -> None:
    with _directory_locked(targets[0].parent), signals_deferred():
        if overwrite:
            for target in targets:  # again, now that no other sjlt run can commit here
                check_replaceable(target, role, overwrite=True)
            for companion in targets[1:]:
                companion.unlink(missing_ok=True)
            for temporary, target in zip(temporaries, targets):
                os.replace(temporary, target)
        else:
            created: list[Path] = []
            try:
                for temporary, target in zip(temporaries, targets):
                    _create_exclusively(temporary, target)
                    created.append(target)
            except FileExistsError:
                for path in created:
                    path.unlink(missing_ok=True)
                raise FileProjectionError(
                    f"{role} {str(target)!r} appeared while this "
                    f"run was writing it (another run writing the same {role}?); it "
                    f"was left as it is and this run's output was discarded: pass "
                    f"--overwrite to replace it, or choose another path"
                ) from None
            for temporary in temporaries:
                temporary.unlink(missing_ok=True)
        _fsync_directory(targets[0].parent)


@contextlib.contextmanager
def atomic_outputs(*paths: Path, overwrite: bool, role: str = "OUTPUT") -> Iterator[tuple[Path, ...]]:
    """Yields one temporary path per target; on a clean exit they become the targets together.

    The first path is the primary output and the others its companions (a JSON sidecar), all in
    one directory. Under ``overwrite``, old companions are deleted before the primary is
    replaced, so even a crash (SIGKILL) between the renames can leave a new primary without its
    sidecar, but never a sidecar describing different data.
    """
    targets = [Path(p) for p in paths]
    assert len({t.parent for t in targets}) == 1, "the files of one output share a directory"
    temporaries: list[Path] = []
    try:
        for target in targets:
            # a signal between creating the file and recording it would leave it behind: it is
            # raised once the file is recorded, so the clean-up below deletes it
            with signals_deferred():
                temporaries.append(_create_temporary_beside(target))
        yield tuple(temporaries)
        for temporary in temporaries:
            _fsync_path(temporary)
        _commit(temporaries, targets, role, overwrite)
    except BaseException:
        for temporary in temporaries:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
        raise
