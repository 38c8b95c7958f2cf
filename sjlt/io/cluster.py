"""Projecting files on a Dask cluster (``sjlt project --scheduler ADDRESS``): one task per file.

Each worker runs :func:`~sjlt.io.project.project_file` on its file, regenerating the same
matrix from the seed (nothing is broadcast) and writing its output crash-safely. The paths must
mean the same on the client and on every worker (a shared file system).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .errors import FileProjectionError, Interrupted
from .project import FileResult, Settings, project_file

_CONNECT_TIMEOUT = "20s"


def _connect(address: str):
    try:
        from distributed import Client
    except ImportError:
        raise FileProjectionError(
            "--scheduler needs dask.distributed; install it with pip install 'seeded-sjlt[dask]'"
        ) from None
    try:
        return Client(address, timeout=_CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as error:
        raise FileProjectionError(
            f"cannot reach the Dask scheduler at {address!r} ({error}); start one with "
            f"`dask scheduler` and pass the address it prints (tcp://HOST:8786)"
        ) from None


def project_on_cluster(
    pairs: list[tuple[Path, Path]], settings: Settings, address: str, *, on_file: Callable[[], object] | None = None
) -> list[FileResult]:
    """Projects every (input, output) pair on the cluster at ``address``, calling ``on_file``
    as each file finishes; raises one FileProjectionError naming every file that failed (the
    others are complete). Ctrl-C (:class:`~.errors.Interrupted`) cancels the files not yet
    started."""
    client = _connect(address)  # first: it turns a missing dask.distributed into a clean error
    from distributed import as_completed

    try:
        inputs = [str(source) for source, _ in pairs]
        outputs = [str(target) for _, target in pairs]
        # pure=False: re-running the same command must recompute, not reuse a cached result.
        futures = client.map(project_file, inputs, outputs, settings=settings, pure=False)
        origin = {future.key: name for future, name in zip(futures, inputs)}
        results: list[FileResult] = []
        failures: list[str] = []
        try:
            for future in as_completed(futures, loop=client.loop):
                try:
                    results.append(future.result())
                except FileProjectionError as error:
                    failures.append(f"{origin[future.key]}: {error}")
                except Exception as error:  # a worker died, or an unexpected bug on one
                    failures.append(f"{origin[future.key]}: {type(error).__name__}: {error}")
                if on_file is not None:
                    on_file()
        except (Interrupted, KeyboardInterrupt):
            client.cancel(futures)
            raise
        if failures:
            raise FileProjectionError(
                f"{len(failures)} of {len(pairs)} files failed (the other outputs are "
                f"complete):\n  " + "\n  ".join(failures)
            )
        return results
    finally:
        client.close()
