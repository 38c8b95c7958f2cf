"""File formats of the command line: which reader/writer a path gets, and input expansion.

A *source* (``NpySource``, ``ParquetSource``) yields :class:`Batch` es of rows; a *sink*
(``NpySink``, ``ParquetSink``) writes projected batches. The format follows the extension.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CLIError

_FORMATS = {".npy": "npy", ".parquet": "parquet", ".pq": "parquet"}
_GLOB_CHARACTERS = set("*?[")


@dataclass
class Batch:
    """Rows [start, start + len(values)) of a source, numbered ``index`` from 0."""

    index: int
    start: int
    values: np.ndarray           # (rows, features); may be strided or read-only
    table: object | None = None  # the pyarrow.RecordBatch the rows came from (parquet), to carry
    buffer: np.ndarray | None = None  # the pool buffer ``values`` lives in, to give back


def format_of(path: Path, role: str) -> str:
    """'npy' or 'parquet' from the extension; ``role`` ('INPUT'/'OUTPUT') for the message."""
    fmt = _FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise CLIError(f"cannot tell the format of {role} {str(path)!r} from its extension "
                       f"{Path(path).suffix or '(none)'!r}; use a .npy or .parquet file")
    return fmt


def open_source(path: Path, column: str | None):
    fmt = format_of(path, "INPUT")
    if fmt == "npy":
        if column is not None:
            raise CLIError(f"--column picks a column of a parquet file, but INPUT {str(path)!r} "
                           f"is .npy; drop --column")
        from .npy import NpySource

        return NpySource(path)
    from .parquet import ParquetSource

    return ParquetSource(path, column)


def companion_paths(output: Path) -> tuple[Path, ...]:
    """Files written along with ``output``: the JSON sidecar of a .npy (parquet keeps its
    settings in its own schema metadata)."""
    if format_of(output, "OUTPUT") == "npy":
        return (output.with_name(output.name + ".json"),)
    return ()


def open_sink(output: Path, temporaries: tuple[Path, ...], source, *, out_features: int,
              dtype: np.dtype, column: str | None, metadata: dict):
    """The writer for ``output``, writing into its temporary files (see :mod:`.atomic`)."""
    if format_of(output, "OUTPUT") == "npy":
        from .npy import NpySink

        data_path, sidecar_path = temporaries
        shape = tuple(source.shape[:-1]) + (out_features,)
        return NpySink(data_path, shape, dtype, sidecar_path=sidecar_path, metadata=metadata)
    from .parquet import ParquetSink

    (data_path,) = temporaries
    return ParquetSink(data_path, source, out_features=out_features, dtype=dtype,
                       column=column, metadata=metadata)


def expand_inputs(spec: str) -> tuple[list[Path], bool]:
    """The input files named by ``spec`` and whether it named a collection (directory or glob).

    A directory contributes its .npy/.parquet files (not recursing); a glob its matches.
    """
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _FORMATS)
        if not files:
            raise CLIError(f"INPUT directory {spec!r} holds no .npy or .parquet files")
        return files, True
    if path.exists():
        return [path], False
    if _GLOB_CHARACTERS & set(spec):
        files = sorted(Path(p) for p in glob.glob(spec) if os.path.isfile(p))
        if not files:
            raise CLIError(f"no files match INPUT pattern {spec!r}; check the pattern (quote it "
                           f"so the shell does not expand it)")
        return files, True
    raise CLIError(f"INPUT {spec!r} does not exist; check the path")
