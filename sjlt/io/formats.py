"""File formats: which reader/writer a path gets, and input expansion.

A *source* (``NpySource``, ``ParquetSource``) yields :class:`~.pipeline.Batch` es of rows; a
*sink* (``NpySink``, ``ParquetSink``) writes projected batches. The format follows the extension.
The parquet module is imported only for a parquet path: pyarrow is an optional dependency.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np

from .errors import FileProjectionError
from .npy import NpySink, NpySource

_FORMATS = {".npy": "npy", ".parquet": "parquet", ".pq": "parquet"}
_GLOB_CHARACTERS = set("*?[")


def format_of(path: Path, role: str) -> str:
    """'npy' or 'parquet' from the extension; ``role`` ('INPUT'/'OUTPUT') for the message."""
    fmt = _FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise FileProjectionError(
            f"cannot tell the format of {role} {str(path)!r} from its extension "
            f"{Path(path).suffix or '(none)'!r}; use a .npy or .parquet file"
        )
    return fmt


def open_source(path: Path, column: str | None):
    fmt = format_of(path, "INPUT")
    if fmt == "npy":
        if column is not None:
            raise FileProjectionError(
                f"--column picks a column of a parquet file, but INPUT {str(path)!r} is .npy; drop --column"
            )
        return NpySource(path)
    from .parquet import ParquetSource

    return ParquetSource(path, column)


def companion_paths(output: Path) -> tuple[Path, ...]:
    """Files written along with ``output``: the JSON sidecar of a .npy (parquet keeps its
    settings in its own schema metadata)."""
    if format_of(output, "OUTPUT") == "npy":
        return (output.with_name(output.name + ".json"),)
    return ()


def open_sink(
    output: Path,
    temporaries: tuple[Path, ...],
    source,
    *,
    out_features: int,
    dtype: np.dtype,
    column: str | None,
    metadata: dict,
):
    """The writer for ``output``, writing into its temporary files (see :mod:`.atomic`)."""
    if format_of(output, "OUTPUT") == "npy":
        data_path, sidecar_path = temporaries
        shape = tuple(source.shape[:-1]) + (out_features,)
        return NpySink(data_path, shape, dtype, sidecar_path=sidecar_path, metadata=metadata)
    from .parquet import ParquetSink

    (data_path,) = temporaries
    return ParquetSink(data_path, source, out_features=out_features, dtype=dtype, column=column, metadata=metadata)


def expand_inputs(spec: str) -> tuple[list[Path], bool]:
    """The input files named by ``spec`` and whether it named a collection (directory or glob).

    A directory contributes its .npy/.parquet files (not recursing); a glob its matches.
    """
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _FORMATS)
        if not files:
            raise FileProjectionError(f"INPUT directory {spec!r} holds no .npy or .parquet files")
        return files, True
    if path.exists():
        return [path], False
    if _GLOB_CHARACTERS & set(spec):
        files = sorted(Path(p) for p in glob.glob(spec) if os.path.isfile(p))
        if not files:
            raise FileProjectionError(
                f"no files match INPUT pattern {spec!r}; check the pattern (quote it so the shell does not expand it)"
            )
        return files, True
    raise FileProjectionError(f"INPUT {spec!r} does not exist; check the path")
