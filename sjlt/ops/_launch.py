"""Launch rules shared by both layouts' launchers: dot configuration, d-splits, forward outputs."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .. import _buffers
from .._dtypes import TORCH_FLOAT_DTYPES
from .._backend import dot_dtype, multiprocessor_count

#: Input dtypes the SJLT kernels take: sjlt's float dtypes but float64, which runs the reference.
KERNEL_DTYPES = tuple(dtype for dtype in TORCH_FLOAT_DTYPES if dtype != torch.float64)

#: bfloat16 terms of a float32 input's split per torch.get_float32_matmul_precision(): "highest"
#: (torch's default) is exact; "high" and "medium" trade bits for speed, as torch.matmul does.
FP32_PASSES = {"highest": 3, "high": 2, "medium": 1}


def dot_config(dtype):
    """(FP32_PASSES, DOT_DTYPE) of the kernels for an input of ``dtype``."""
    import triton.language as tl

    if dtype == torch.float32:
        return FP32_PASSES[torch.get_float32_matmul_precision()], dot_dtype(tl.bfloat16)
    return 0, dot_dtype(tl.float16 if dtype == torch.float16 else tl.bfloat16)


#: Below this many input bytes a call is bound by its host-side launch, not by the GPU: splitting
#: d to fill the SMs would only add the launches that sum the partials (benchmarks/RESULTS.md,
#: per-call cost).
_SPLIT_MIN_BYTES = 1 << 22


def splits_to_fill(programs: int, max_splits: int, per_sm: int, device: torch.device,
                   summed_bytes: int | None = None) -> int:
    """Splits of the work over d that bring ``programs`` up to ``per_sm`` programs per SM, at most
    ``max_splits``. ``summed_bytes``: the input size, when the splits produce partials that a
    second launch sums (the forward); below _SPLIT_MIN_BYTES that launch costs more than it saves."""
    if device.type != "cuda" or (summed_bytes is not None and summed_bytes < _SPLIT_MIN_BYTES):
        return 1
    index = device.index if device.index is not None else torch.cuda.current_device()
    target = per_sm * multiprocessor_count(index)
    if programs >= target:
        return 1
    return max(1, min(math.ceil(target / programs), max_splits))


def forward_output(n: int, k: int, splits: int, x: torch.Tensor):
    """(buffer, split stride): Y itself for one split, else float32 partials the caller sums."""
    if splits == 1:
        return _buffers.empty((n, k), x.dtype, x.device), 0
    out = _buffers.empty((splits, n, k), torch.float32, x.device)
    return out, out.stride(0)


class Tiling(NamedTuple):
    """Overrides of a launcher's tiling heuristics, for tests and benchmark sweeps only; a result's
    value never depends on them beyond float rounding. ``blocks``: (BLOCK_M, BLOCK_N, BLOCK_D) for
    the classic layout, (BLOCK_M,) for the windowed one; ``num_stages`` and ``steps``: the windowed
    kernels only, ``steps`` being (groups per dot, dots per loop step) for the forward and (groups
    per dot[, stacked tile as the left operand]) for the transpose."""
    splits: int | None = None
    blocks: tuple | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    steps: tuple | None = None


def sum_splits(out: torch.Tensor, splits: int, dtype: torch.dtype) -> torch.Tensor:
    """Y from the forward's output: itself for one split, else the partials summed in a fixed order."""
    return out if splits == 1 else out.sum(0).to(dtype)
