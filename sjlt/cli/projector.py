"""Projecting one batch of rows on the chosen device, with the non-finite check."""
from __future__ import annotations

import warnings

import numpy as np
import torch

from ..functional import sparse_jl
from .errors import CLIError
from .io import Batch


def compute_dtype(input_dtype: np.dtype, output_dtype: np.dtype) -> np.dtype:
    """The wider of the two: casting float64 to float16 after projecting, not before, keeps the
    sums accurate; widening float16 input before projecting costs nothing in accuracy."""
    return max(np.dtype(input_dtype), np.dtype(output_dtype), key=lambda d: d.itemsize)


class Projector:
    """Y = X S^T for numpy batches, computed on ``device``, returned as host numpy arrays."""

    def __init__(self, out_features: int, *, seed: int, nnz: int, device: torch.device,
                 input_dtype: np.dtype, output_dtype: np.dtype, allow_nonfinite: bool,
                 source_name: str):
        self.out_features = out_features
        self.seed = seed
        self.nnz = nnz
        self.device = device
        self.output_dtype = np.dtype(output_dtype)
        self._compute = torch.from_numpy(np.empty(0, compute_dtype(input_dtype, output_dtype))).dtype
        self._output = torch.from_numpy(np.empty(0, self.output_dtype)).dtype
        self._allow_nonfinite = allow_nonfinite
        self._source_name = source_name

    def __call__(self, batch: Batch) -> np.ndarray:
        with warnings.catch_warnings():
            # Arrow-backed batches are read-only; the projection only reads them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            x = torch.from_numpy(batch.values)
        if self.device.type == "cuda":
            x = x.to(self.device, non_blocking=True)
        y = sparse_jl(x.to(self._compute), self.out_features, seed=self.seed, nnz=self.nnz)
        y = y.to(self._output)
        if self.device.type == "cuda":
            host = torch.empty(y.shape, dtype=self._output, pin_memory=True)
            host.copy_(y, non_blocking=True)
            # After this both copies are done: the input buffer may be reused, the output read.
            torch.cuda.current_stream(self.device).synchronize()
            projected = host.numpy()
        else:
            projected = y.contiguous().numpy()
        if not self._allow_nonfinite:
            self._check_finite(batch, projected)
        return projected

    def _check_finite(self, batch: Batch, projected: np.ndarray) -> None:
        # A NaN or inf in a row always makes some output of that row non-finite, so checking the
        # (narrower) output finds every bad input row; the input is only scanned to name it.
        bad_outputs = ~np.isfinite(projected).all(axis=1)
        if not bad_outputs.any():
            return
        bad_inputs = np.flatnonzero(~np.isfinite(batch.values).all(axis=1))
        if bad_inputs.size:
            row = batch.start + int(bad_inputs[0])
            raise CLIError(
                f"row {row} of INPUT {self._source_name!r} holds NaN or inf (found in batch "
                f"{batch.index + 1}, rows {batch.start}-{batch.start + len(batch.values) - 1}); "
                f"clean the input, or pass --allow-nonfinite to write non-finite projections")
        row = batch.start + int(np.flatnonzero(bad_outputs)[0])
        raise CLIError(f"the projection of row {row} of INPUT {self._source_name!r} overflows "
                       f"{self.output_dtype}; pass --dtype float32 for a wider output")
