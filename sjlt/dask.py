"""Lazy sparse JL projection of Dask arrays and DataFrames.

``project`` adds one task per block (or partition) to the graph. Each task regenerates S from the
seed on the worker that runs it, so nothing is broadcast and every worker, CPU or GPU, computes
the same projection as :func:`sjlt.sparse_jl` does in memory. With ``device="auto"`` a task runs
on its worker's GPU when that worker has one (decided on the worker, not on the client).

    import dask.array as da, sjlt.dask
    X = da.from_zarr("embeddings.zarr")                 # (n, 384), chunked by rows
    Y = sjlt.dask.project(X, 128, seed=0)               # lazy (n, 128)
    Y.to_zarr("projected.zarr")
"""

from __future__ import annotations

import numpy as np

from . import spec
from ._device import check_device
from .io.blocks import map_row_blocks, project_block


def output_column_names(out_features: int) -> list[str]:
    """Column names of a projected numeric DataFrame."""
    return [f"sjlt_{i}" for i in range(out_features)]


def _project_array(data, k: int, seed: int, nnz: int, device: str):
    if data.ndim != 2:
        raise ValueError(
            f"project takes a 2-D (rows, features) dask array, got {data.ndim}-D "
            f"with shape {data.shape}; reshape it to (rows, features)"
        )
    if data.dtype.name not in spec.NUMPY_FLOAT_DTYPES:
        raise TypeError(
            f"project needs a floating-point dask array (float16/32/64), got "
            f"{data.dtype}; convert it first, e.g. X.astype('float32')"
        )
    if data.shape[1] == 0 or data.shape[1] != data.shape[1]:  # 0 or NaN (unknown) features
        raise ValueError(
            f"the feature axis must have a known, nonzero length; got shape "
            f"{data.shape} (call X.compute_chunk_sizes() if it is unknown)"
        )
    return map_row_blocks(data, k, seed=seed, nnz=nnz, device=device)


def _list_column_matrix(series, out_name: str) -> np.ndarray:
    import pyarrow as pa

    from .io.arrow import list_column_to_matrix

    try:
        arrow = pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise TypeError(f"column {out_name!r} does not hold lists of floats ({error})") from None
    return list_column_to_matrix(arrow, out_name)


def _project_list_partition(part, column: str, k: int, seed: int, nnz: int, device: str):
    import pandas as pd

    from .io.arrow import matrix_to_list_column

    matrix = _list_column_matrix(part[column], column)
    projected = project_block(matrix, k, seed, nnz, device) if len(part) else np.empty((0, k), dtype=matrix.dtype)
    out = part.copy(deep=False)
    if isinstance(part[column].dtype, pd.ArrowDtype):
        values = pd.arrays.ArrowExtensionArray(matrix_to_list_column(projected))
    else:  # object in, object out: one numpy row per cell, as dask.dataframe.read_parquet gives
        values = np.empty(len(part), dtype=object)
        values[:] = list(projected)
    out[column] = pd.Series(values, index=part.index)
    return out


def _project_numeric_partition(part, k: int, seed: int, nnz: int, device: str, dtype):
    import pandas as pd

    values = part.to_numpy(dtype=dtype)
    projected = project_block(values, k, seed, nnz, device) if len(part) else np.empty((0, k), dtype=dtype)
    return pd.DataFrame(projected, index=part.index, columns=output_column_names(k))


def _is_list_candidate(dtype) -> bool:
    import pandas as pd

    if isinstance(dtype, pd.ArrowDtype):
        from .io.arrow import is_list_type

        return is_list_type(dtype.pyarrow_dtype)
    # dask.dataframe.read_parquet gives list columns object dtype; numpy dtypes equal object, not `is` it.
    return dtype == object  # noqa: E721


def _project_frame(frame, k: int, seed: int, nnz: int, device: str):
    import pandas as pd
    import pyarrow as pa

    dtypes = frame.dtypes
    list_columns = [name for name, dtype in dtypes.items() if _is_list_candidate(dtype)]
    if len(list_columns) > 1:
        raise ValueError(
            f"the DataFrame has several list (or object) columns {list_columns}; "
            f"select the one embedding column with the columns to keep, e.g. "
            f"df[['id', {list_columns[0]!r}]]"
        )
    if list_columns:
        column = list_columns[0]
        meta = frame._meta.copy()
        if isinstance(dtypes[column], pd.ArrowDtype):
            value_type = dtypes[column].pyarrow_dtype.value_type
            if not pa.types.is_floating(value_type):
                raise TypeError(
                    f"column {column!r} holds lists of {value_type}, not floats; cast it to lists of float32 first"
                )
            meta[column] = pd.Series(pd.array([], dtype=pd.ArrowDtype(pa.list_(value_type, k))), index=meta.index)
        return frame.map_partitions(
            _project_list_partition, column, k, seed, nnz, device, meta=meta, token="sjlt-project"
        )
    non_numeric = [
        name
        for name, dtype in dtypes.items()
        if not (pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype))
    ]
    if non_numeric:
        raise ValueError(
            f"columns {non_numeric} are neither numeric nor a list of floats; select "
            f"the feature columns first, e.g. df[feature_columns]"
        )
    if len(dtypes) == 0:
        raise ValueError("the DataFrame has no columns to project")
    # Integer columns become float64 (as numpy would promote them); float32 stays float32.
    dtype = np.result_type(*[np.dtype(d) for d in dtypes], np.float16)
    meta = pd.DataFrame({name: np.empty(0, dtype) for name in output_column_names(k)}, index=frame._meta.index)
    return frame.map_partitions(
        _project_numeric_partition, k, seed, nnz, device, dtype, meta=meta, token="sjlt-project"
    )


def project(data, n_components, *, seed, nnz=None, device="auto"):
    """Lazily project ``data`` to ``n_components`` columns with the sparse JL matrix of ``seed``.

    ``data`` is a 2-D dask array (rechunked, if needed, so that the feature axis is one chunk;
    row chunks are kept) or a dask DataFrame:

    - all columns numeric: the result has columns ``sjlt_0 .. sjlt_{k-1}``, same index
      (integer columns are promoted to float64);
    - one list column (lists/arrays of floats, object or Arrow list dtype): that column is
      replaced by its projection, other columns kept. An Arrow list column becomes a fixed-size
      Arrow list of k values of the same float type; an object column (what
      ``dask.dataframe.read_parquet`` gives for lists) holds one numpy array per row.

    Results equal :func:`sjlt.sparse_jl` on the same rows in memory (same dtype, accumulated in
    float32, float64 for float64). ``device``: 'auto' (each worker's GPU when it has one), 'cpu',
    'cuda', 'cuda:N' or a torch.device (see :mod:`sjlt._device`). Blocks must be numpy arrays.
    """
    k = spec.check_dimension(n_components, "n_components")
    seed = spec.check_seed(seed)
    nnz = spec.resolve_nnz(nnz, k)
    device = str(check_device(device))  # a name: resolved on each worker, where the task runs
    try:
        import dask.array as da
    except ImportError:
        raise ImportError("sjlt.dask needs dask; install it with pip install 'seeded-sjlt[dask]'") from None
    if isinstance(data, da.Array):
        return _project_array(data, k, seed, nnz, device)
    import dask.dataframe as dd

    if isinstance(data, dd.DataFrame):
        return _project_frame(data, k, seed, nnz, device)
    raise TypeError(
        f"data must be a dask.array.Array or a dask.dataframe.DataFrame, got "
        f"{type(data).__module__}.{type(data).__name__}; for in-memory numpy or torch "
        f"data use sjlt.sparse_jl"
    )
