"""Streaming parquet reader and writer for a table with one embedding column.

The embedding column (a list or fixed-size list of floats) is projected; every other column is
carried through unchanged. Batches are decoded incrementally with ``iter_batches`` and written
one row group per batch, so memory follows the batch size, not the file size.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .arrow import ColumnError, check_float_list_type, is_float_list_type, list_column_to_matrix, matrix_to_list_column
from .errors import FileProjectionError
from .pipeline import Batch, BufferPool
from .provenance import PARQUET_METADATA_KEY

#: Column name used when a .npy input becomes a parquet output.
DEFAULT_COLUMN = "embedding"
_READ_BUFFER_BYTES = 8 << 20


def _choose_column(path: Path, schema: pa.Schema, column: str | None) -> str:
    described = ", ".join(f"{f.name} ({f.type})" for f in schema)
    if column is not None:
        if column not in schema.names:
            raise FileProjectionError(f"INPUT {str(path)!r} has no column {column!r}; its columns are: {described}")
        try:
            check_float_list_type(schema.field(column).type, column)
        except ColumnError as error:
            raise FileProjectionError(f"INPUT {str(path)!r}: {error}") from None
        return column
    candidates = [f.name for f in schema if is_float_list_type(f.type)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise FileProjectionError(
            f"INPUT {str(path)!r} has no list-of-floats column to project; its columns "
            f"are: {described}. Store each embedding as a list of floats"
        )
    raise FileProjectionError(
        f"INPUT {str(path)!r} has several embedding columns ({', '.join(candidates)}); choose one with --column"
    )


class ParquetSource:
    """Rows of one embedding column of a parquet file, with the other columns alongside."""

    def __init__(self, path: Path, column: str | None):
        self.path = Path(path)
        try:
            self._file = pq.ParquetFile(self.path, buffer_size=_READ_BUFFER_BYTES, pre_buffer=False)
        except OSError as error:
            if isinstance(error, (FileNotFoundError, PermissionError)):
                raise FileProjectionError(f"cannot read INPUT {str(path)!r}: {error.strerror}") from None
            raise FileProjectionError(
                f"INPUT {str(path)!r} is not a readable parquet file ({error}); "
                f"check that it is a complete parquet file"
            ) from None
        except pa.ArrowException as error:
            raise FileProjectionError(
                f"INPUT {str(path)!r} is not a readable parquet file ({error}); "
                f"check that it is a complete parquet file"
            ) from None
        self.schema = self._file.schema_arrow
        self.column = _choose_column(self.path, self.schema, column)
        self.column_index = self.schema.get_field_index(self.column)
        self.carried_columns = [name for name in self.schema.names if name != self.column]
        self.n_rows = self._file.metadata.num_rows
        field_type = self.schema.field(self.column).type
        self.dtype = np.dtype(field_type.value_type.to_pandas_dtype())
        self.dim = self._peek_dim(field_type)
        self.shape = (self.n_rows, self.dim)

    def _peek_dim(self, field_type: pa.DataType) -> int | None:
        """Features per row: the fixed size, or the first row's length (None when empty)."""
        if pa.types.is_fixed_size_list(field_type):
            return field_type.list_size
        for batch in self._file.iter_batches(batch_size=1, columns=[self.column]):
            if batch.num_rows:
                return len(batch.column(0)[0])
        return None

    @property
    def nbytes(self) -> int:
        return self.n_rows * (self.dim or 0) * self.dtype.itemsize

    def batch_buffer_bytes(self, batch_rows: int) -> int:
        return min(batch_rows, max(self.n_rows, 1)) * (self.dim or 0) * self.dtype.itemsize

    def take_rows(self, rows: np.ndarray) -> np.ndarray:
        """The given rows (sorted indices), reading only the embedding column."""
        picked = []
        start = 0
        for table in self._file.iter_batches(batch_size=65536, columns=[self.column]):
            stop = start + table.num_rows
            lo, hi = np.searchsorted(rows, [start, stop])
            if hi > lo:
                try:
                    values = list_column_to_matrix(table.column(0), self.column, expected_dim=self.dim, first_row=start)
                except ColumnError as error:
                    raise FileProjectionError(f"INPUT {str(self.path)!r}: {error}") from None
                picked.append(values[rows[lo:hi] - start])
            start = stop
        if not picked:
            return np.empty((0, self.dim or 0), dtype=self.dtype)
        return np.concatenate(picked)

    def batches(self, batch_rows: int, pool: BufferPool, stop: threading.Event) -> Iterator[Batch]:
        start = 0
        index = 0
        try:
            for table in self._file.iter_batches(batch_size=batch_rows):
                if stop.is_set():
                    return
                if table.num_rows == 0:
                    continue
                try:
                    values = list_column_to_matrix(
                        table.column(self.column_index), self.column, expected_dim=self.dim, first_row=start
                    )
                except ColumnError as error:
                    raise FileProjectionError(f"INPUT {str(self.path)!r}: {error}") from None
                yield Batch(index, start, values, table=table)
                start += table.num_rows
                index += 1
        except pa.ArrowException as error:
            raise FileProjectionError(
                f"INPUT {str(self.path)!r} could not be decoded at row {start} ({error}); the file may be corrupt"
            ) from None


class ParquetSink:
    """Writes the projected column in place of the embedding column, other columns unchanged,
    with the projection settings in the schema metadata under ``b"sjlt"``."""

    def __init__(self, path: Path, source, *, out_features: int, dtype: np.dtype, column: str | None, metadata: dict):
        value_type = pa.from_numpy_dtype(np.dtype(dtype))
        projected_type = pa.list_(value_type, out_features)
        if isinstance(source, ParquetSource):
            self._column_index = source.column_index
            old = source.schema.field(source.column_index)
            schema = source.schema.set(
                self._column_index, pa.field(old.name, projected_type, old.nullable, old.metadata)
            )
        else:
            self._column_index = None
            schema = pa.schema([pa.field(column or DEFAULT_COLUMN, projected_type, nullable=False)])
        existing = dict(schema.metadata or {})
        existing[PARQUET_METADATA_KEY] = json.dumps(metadata).encode()
        self.schema = schema.with_metadata(existing)
        self._writer = pq.ParquetWriter(path, self.schema)

    def write(self, projected: np.ndarray, batch: Batch) -> None:
        column = matrix_to_list_column(projected)
        if self._column_index is None:
            arrays = [column]
        else:
            arrays = list(batch.table.columns)
            arrays[self._column_index] = column
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))

    def close(self) -> None:
        self._writer.close()

    def abort(self) -> None:
        try:
            self._writer.close()
        except (OSError, pa.ArrowException):
            pass
