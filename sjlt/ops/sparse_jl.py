"""``torch.ops.sjlt.sparse_jl`` and ``torch.ops.sjlt.sparse_jl_transpose``: dispatch and autograd;
and the autograd of a grouped launch (:class:`GroupedForward`).

Each op is the other's backward; both regenerate S from (key, nnz, column_offset), so autograd
saves no tensor at all. Inputs here are already validated 2-D real tensors (see
``sjlt.functional``). On CUDA the algorithm (``choice``) is the kernel of S's layout
(``layouts``) or the dense one (``dense``); elsewhere the CPU engine (``sjlt.cpu_engine``).
"""

from __future__ import annotations

import torch

from .. import cpu_engine, spec
from .._backend import use_triton
from . import choice, dense, layouts
from ._launch import KERNEL_DTYPES
from ._library import LIBRARY, define, register_autocast_like_linear
from .layouts import triton_forward, triton_transpose


def _forward_kernel(
    x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int, column_offset: int, backend: str
) -> torch.Tensor:
    if x.shape[0] == 0 or x.shape[1] == 0:
        return torch.zeros(x.shape[0], out_features, dtype=x.dtype, device=x.device)
    if use_triton(backend, x, supports_dtype=x.dtype in KERNEL_DTYPES):
        if choice.algorithm(x, x.shape[1], out_features, nnz, key0, key1, column_offset) == choice.DENSE:
            return dense.forward(x, out_features, key0, key1, nnz, column_offset)
        return triton_forward(x, out_features, key0, key1, nnz, column_offset)
    # Off CUDA the CPU engine runs (the oracle, sjlt.reference, is for tests). The op's contract
    # (checked by opcheck against the fake) is a contiguous output, and the engine accumulates in
    # float32 on purpose: an enclosing autocast must not recast it.
    with torch.autocast(x.device.type, enabled=False):
        return cpu_engine.sparse_jl_forward(
            x, out_features, seed=spec.seed_from_key(key0, key1), nnz=nnz, column_offset=column_offset
        ).contiguous()


def _transpose_kernel(
    y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int, column_offset: int, backend: str
) -> torch.Tensor:
    if y.shape[0] == 0 or in_features == 0:
        return torch.zeros(y.shape[0], in_features, dtype=y.dtype, device=y.device)
    if use_triton(backend, y, supports_dtype=y.dtype in KERNEL_DTYPES):
        if choice.algorithm(y, in_features, y.shape[1], nnz, key0, key1, column_offset, transpose=True) == choice.DENSE:
            return dense.transpose(y, in_features, key0, key1, nnz, column_offset)
        return triton_transpose(y, in_features, key0, key1, nnz, column_offset)
    with torch.autocast(y.device.type, enabled=False):
        return cpu_engine.sparse_jl_transpose(
            y, in_features, seed=spec.seed_from_key(key0, key1), nnz=nnz, column_offset=column_offset
        ).contiguous()


_SCHEMA = "(Tensor {0}, SymInt {1}, int key0, int key1, int nnz, int column_offset, str backend) -> Tensor"

sparse_jl_op = define(
    "sparse_jl",
    _SCHEMA.format("x", "out_features"),
    _forward_kernel,
    lambda x, out_features, *rest: x.new_empty(x.shape[0], out_features),
)
sparse_jl_transpose_op = define(
    "sparse_jl_transpose",
    _SCHEMA.format("y", "in_features"),
    _transpose_kernel,
    lambda y, in_features, *rest: y.new_empty(y.shape[0], in_features),
)


def _setup_context(ctx, inputs, output):
    tensor, features, key0, key1, nnz, column_offset, backend = inputs
    ctx.features = tensor.shape[1]
    ctx.args = (key0, key1, nnz, column_offset, backend)


def _forward_backward(ctx, grad):
    return (sparse_jl_transpose_op(grad, ctx.features, *ctx.args),) + (None,) * 6


def _transpose_backward(ctx, grad):
    return (sparse_jl_op(grad, ctx.features, *ctx.args),) + (None,) * 6


torch.library.register_autograd("sjlt::sparse_jl", _forward_backward, setup_context=_setup_context, lib=LIBRARY)
torch.library.register_autograd(
    "sjlt::sparse_jl_transpose", _transpose_backward, setup_context=_setup_context, lib=LIBRARY
)
# Like F.linear: under torch.autocast both run in the autocast dtype (float64 excepted).
register_autocast_like_linear(sparse_jl_op)
register_autocast_like_linear(sparse_jl_transpose_op)


class GroupedForward(torch.autograd.Function):
    """A grouped launch (``layouts.triton_forward_blocks``: the float32 sum of the blocks'
    projections) with autograd. Each block that needs a gradient gets the transpose op of the
    output's gradient at the block's columns, reshaped and cast to the block, S regenerated from the
    key: nothing is saved but shapes. Gradients of vmap's per-example gradients need this: TRAK
    differentiates with respect to parameters that require gradients, so its gradients do too."""

    @staticmethod
    def forward(ctx, grouped, out_features, settings, firsts, *blocks):
        key0, key1, nnz, column_offset, backend = settings
        ctx.settings, ctx.firsts = settings, firsts
        ctx.blocks = [(block.shape, block.dtype) for block in blocks]
        pairs = list(zip(firsts, blocks))
        return layouts.triton_forward_blocks(pairs, out_features, key0, key1, nnz, column_offset, grouped)

    @staticmethod
    def backward(ctx, grad):
        key0, key1, nnz, column_offset, backend = ctx.settings
        grads = []
        for needed, first, (shape, dtype) in zip(ctx.needs_input_grad[4:], ctx.firsts, ctx.blocks):
            if needed:
                columns = shape[1:].numel()
                z = sparse_jl_transpose_op(grad, columns, key0, key1, nnz, column_offset + first, backend)
                grads.append(z.reshape(shape).to(dtype))
            else:
                grads.append(None)
        return (None, None, None, None, *grads)
