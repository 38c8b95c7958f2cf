"""Embedding columns in Arrow: a list of floats per row <-> a 2-D numpy matrix.

Shared by the parquet reader/writer (:mod:`.parquet`) and by :mod:`sjlt.dask` (whose list
columns are Arrow-backed pandas columns).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class ColumnError(ValueError):
    """An embedding column that cannot become a matrix: wrong type, nulls, or ragged rows."""


def is_list_type(arrow_type: pa.DataType) -> bool:
    return pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type)


def is_float_list_type(arrow_type: pa.DataType) -> bool:
    return is_list_type(arrow_type) and pa.types.is_floating(arrow_type.value_type)


def check_float_list_type(arrow_type: pa.DataType, name: str) -> None:
    if not is_list_type(arrow_type):
        raise ColumnError(
            f"column {name!r} has type {arrow_type}, not a list of floats; choose the embedding column with --column"
        )
    if not pa.types.is_floating(arrow_type.value_type):
        raise ColumnError(
            f"column {name!r} holds lists of {arrow_type.value_type}, not floats; "
            f"store the embeddings as float16, float32 or float64"
        )


def list_column_to_matrix(column, name: str, *, expected_dim: int | None = None, first_row: int = 0) -> np.ndarray:
    """The rows of a list-of-floats column as an (n, d) array, zero-copy where Arrow allows.

    ``expected_dim`` is the length every row must have (None: the first row's length);
    ``first_row`` is the global index of this chunk's first row, for error messages.
    The result may be read-only (it can share Arrow's buffers).
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    check_float_list_type(column.type, name)
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise ColumnError(f"column {name!r} has a missing (null) embedding at row {row}; drop or fill those rows first")
    if pa.types.is_fixed_size_list(column.type):
        dim = column.type.list_size
        if expected_dim is not None and dim != expected_dim:
            raise ColumnError(
                f"column {name!r} changes length from {expected_dim} to {dim} at row "
                f"{first_row}; every embedding must have the same length"
            )
    else:
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        dim = expected_dim if expected_dim is not None else (int(lengths[0]) if len(lengths) else 0)
        wrong = np.flatnonzero(lengths != dim)
        if wrong.size:
            row = int(wrong[0])
            raise ColumnError(
                f"column {name!r} is ragged: row {first_row + row} has {int(lengths[row])} values "
                f"where the embeddings have {dim}; every embedding must have the same length"
            )
    values = column.flatten()
    if values.null_count:
        flat = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise ColumnError(
            f"column {name!r} has a null value inside the embedding of row "
            f"{first_row + flat // max(dim, 1)}; fill or drop it first"
        )
    return values.to_numpy(zero_copy_only=True).reshape(len(column), dim)


def matrix_to_list_column(matrix: np.ndarray) -> pa.FixedSizeListArray:
    """An (n, k) array as a fixed-size-list column of k values per row, sharing its buffer."""
    matrix = np.ascontiguousarray(matrix)
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])
