"""``torch.ops.sjlt.seeded_dropout``: launch, dispatch, autograd (which saves the seed only).

The seed is a device tensor, never a Python int: the kernel reads it at run time, so a CUDA graph
replays with whatever its seed tensor holds then, and ``torch.compile`` does not specialise on it.
Dropout is diagonal, so its backward is the same op applied to the gradient with the same seed.
"""

from __future__ import annotations

import math

import torch

from .. import _buffers, reference, spec
from .._backend import use_triton
from .._dtypes import TORCH_FLOAT_DTYPES  # the dropout kernel takes all of them
from ._library import LIBRARY, define

# The 1-element scale tensor of each (p, dtype, device): built once, not per call (it would cost a
# launch each time).
_SCALES: dict = {}
_CACHE_ENTRIES = 64


# 0-d seed tensors of recent int seeds, so that a fixed seed costs no launch per call; never filled
# while a CUDA graph owns new allocations, nor during tracing.
_SEEDS: dict = {}


def _bounded_put(cache: dict, key, value, device: torch.device) -> None:
    """Caches ``value`` unless a CUDA graph's pool owns it (``_buffers.may_keep``)."""
    if not _buffers.may_keep(device):
        return
    if len(cache) >= _CACHE_ENTRIES:
        cache.pop(next(iter(cache)))
    cache[key] = value


def seed_tensor(seed: int, device: torch.device) -> torch.Tensor:
    """The 0-d int64 tensor holding the bits of ``seed`` (an int in [0, 2**64)) on ``device``."""
    signed = spec.seed_as_int64(seed)
    if torch.compiler.is_compiling():  # a graph constant: no Python state in traced code
        return torch.full((), signed, dtype=torch.int64, device=device)
    key = (signed, device)
    tensor = _SEEDS.get(key)
    if tensor is None:
        tensor = torch.full((), signed, dtype=torch.int64, device=device)
        _bounded_put(_SEEDS, key, tensor, device)
    return tensor


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


def _scale_tensor(p: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    key = (p, dtype, device)
    scale = _SCALES.get(key)
    if scale is None:
        scale = torch.full((1,), reference.dropout_scale(p), dtype=dtype, device=device)
        _bounded_put(_SCALES, key, scale, device)
    return scale


def triton_dropout(x: torch.Tensor, p: float, seed: torch.Tensor) -> torch.Tensor:
    """``seed``: a 0-d int64 tensor (one key, elements by row-major index) or one seed per row."""
    from ..kernels.dropout import seeded_dropout_kernel

    per_row = seed.dim() == 1
    rows, cols, stride_r, stride_c, contiguous, source = _as_rows_and_cols(x, per_row)
    y = _buffers.empty(x.shape, x.dtype, x.device)
    scale = _scale_tensor(p, reference.accumulation_dtype(x.dtype), x.device)
    block = 1024
    programs = rows * math.ceil(cols / block) if per_row else math.ceil(rows * cols / block)
    seeded_dropout_kernel[(programs,)](
        source,
        y,
        seed,
        scale,
        rows,
        cols,
        stride_r,
        stride_c,
        spec.dropout_threshold(p),
        DOMAIN=spec.DOMAIN_DROPOUT,
        PER_ROW_SEED=per_row,
        CONTIGUOUS=contiguous,
        BLOCK=block,
        num_warps=4,
    )
    return y


def _dropout_kernel(x: torch.Tensor, p: float, seed: torch.Tensor, backend: str) -> torch.Tensor:
    if x.numel() == 0:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    if p >= 1.0:
        return torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    if use_triton(backend, x, supports_dtype=x.dtype in TORCH_FLOAT_DTYPES):
        return triton_dropout(x, p, seed)
    return reference.seeded_dropout(x, p, seed=seed)


seeded_dropout_op = define(
    "seeded_dropout",
    "(Tensor x, float p, Tensor seed, str backend) -> Tensor",
    _dropout_kernel,
    lambda x, p, seed, backend: torch.empty(x.shape, dtype=x.dtype, device=x.device),
)


def _setup_context(ctx, inputs, output):
    x, p, seed, backend = inputs
    ctx.p, ctx.backend = p, backend
    ctx.save_for_backward(seed)  # one int64, or one per row: never anything of x's size


def _backward(ctx, grad):
    (seed,) = ctx.saved_tensors
    return seeded_dropout_op(grad, ctx.p, seed, ctx.backend), None, None, None


torch.library.register_autograd("sjlt::seeded_dropout", _backward, setup_context=_setup_context, lib=LIBRARY)
