"""``torch.ops.sjlt.seeded_dropout``: launch, dispatch, autograd (which saves the seed only).

Dropout is diagonal, so its backward is the same op applied to the gradient with the same seed.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from .. import _buffers, reference, spec
from .._backend import use_triton

_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _as_rows_and_cols(x: torch.Tensor, per_row_seed: bool):
    """A (rows, cols, stride_r, stride_c, contiguous, source) view of x for the kernel, copying only
    when the strides cannot be described by two numbers."""
    if per_row_seed:
        return x.shape[0], x.shape[1], x.stride(0), x.stride(1), False, x
    if x.is_contiguous():
        return 1, x.numel(), 0, 1, True, x
    if x.dim() == 2:
        return x.shape[0], x.shape[1], x.stride(0), x.stride(1), False, x
    try:
        flat = x.view(-1, x.shape[-1])
        return flat.shape[0], flat.shape[1], flat.stride(0), flat.stride(1), False, flat
    except RuntimeError:
        return 1, x.numel(), 0, 1, True, x.contiguous()


def triton_dropout(x: torch.Tensor, threshold: int, key0: int, key1: int,
                   row_seeds: Optional[torch.Tensor], scale: float) -> torch.Tensor:
    from ..kernels.dropout import seeded_dropout_kernel

    per_row = row_seeds is not None
    rows, cols, stride_r, stride_c, contiguous, source = _as_rows_and_cols(x, per_row)
    y = _buffers.empty(x.shape, x.dtype, x.device)
    compute = reference.dropout_compute_dtype(x.dtype)
    scale_t = torch.full((1,), scale, dtype=compute, device=x.device)
    block = 1024
    programs = rows * math.ceil(cols / block) if per_row else math.ceil(rows * cols / block)
    seeds = row_seeds if per_row else scale_t  # any pointer; unused without PER_ROW_SEED
    seeded_dropout_kernel[(programs,)](
        source, y, seeds, scale_t, rows, cols, stride_r, stride_c, key0, key1, threshold,
        DOMAIN=spec.DOMAIN_DROPOUT, PER_ROW_SEED=per_row, CONTIGUOUS=contiguous, BLOCK=block,
        num_warps=4,
    )
    return y


@torch.library.custom_op("sjlt::seeded_dropout", mutates_args=())
def seeded_dropout_op(x: torch.Tensor, p: float, key0: int, key1: int,
                      row_seeds: Optional[torch.Tensor], backend: str) -> torch.Tensor:
    if x.numel() == 0:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    if p >= 1.0:
        return torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    if use_triton(backend, x, supports_dtype=x.dtype in _KERNEL_DTYPES):
        return triton_dropout(x, spec.dropout_threshold(p), key0, key1, row_seeds,
                              reference.dropout_scale(p))
    seed = row_seeds if row_seeds is not None else key0 | (key1 << 32)
    return reference.seeded_dropout(x, p, seed=seed)


@seeded_dropout_op.register_fake
def _(x, p, key0, key1, row_seeds, backend):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _setup_context(ctx, inputs, output):
    x, p, key0, key1, row_seeds, backend = inputs
    ctx.args = (p, key0, key1)
    ctx.backend = backend
    ctx.save_for_backward(row_seeds)  # one int64 per row, or None: never anything of x's size


def _backward(ctx, grad):
    (row_seeds,) = ctx.saved_tensors
    p, key0, key1 = ctx.args
    return torch.ops.sjlt.seeded_dropout(grad, p, key0, key1, row_seeds, ctx.backend), None, None, None, None, None


seeded_dropout_op.register_autograd(_backward, setup_context=_setup_context)
