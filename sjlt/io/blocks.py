"""Dask arrays of rows, projected block by block: the graph side of :func:`.rows.project_rows`.

Used by :mod:`sjlt.dask` and by the scikit-learn estimator's dask path. This module imports
neither dask (it only calls the array's own methods) nor torch (the tasks import it where they
run), so building a graph on the client stays cheap.
"""

from __future__ import annotations

import numpy as np


def project_block(block, out_features: int, seed: int, nnz: int, device: str) -> np.ndarray:
    """The task of one block (rows, features): its rows projected on the device ``device``
    names on the worker running the task ('auto': that worker's GPU when it has one)."""
    from .._device import resolve_device
    from .rows import project_rows

    projected, _ = project_rows(np.asarray(block), out_features, seed=seed, nnz=nnz, device=resolve_device(device))
    return projected


def map_row_blocks(data, out_features: int, *, seed: int, nnz: int, device: str):
    """The lazy projection of a 2-D float dask array: one task per row chunk."""
    if len(data.chunks[1]) > 1:
        # Each task needs whole rows: one chunk across the features, row chunks unchanged.
        data = data.rechunk({1: -1})
    return data.map_blocks(
        project_block,
        out_features,
        seed,
        nnz,
        device,
        dtype=data.dtype,
        chunks=(data.chunks[0], (out_features,)),
        meta=np.empty((0, 0), data.dtype),
        token="sjlt-project",
    )
