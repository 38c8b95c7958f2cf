"""``torch.ops.sjlt.sparse_jl`` and ``torch.ops.sjlt.sparse_jl_transpose``: launch, dispatch, autograd.

Each op is the other's backward; both regenerate S from (key, nnz, column_offset), so autograd
saves no tensor at all. Inputs here are already validated 2-D real tensors (see
``sjlt.functional``).
"""
from __future__ import annotations

import math

import torch

from .. import _buffers, reference, spec
from .._backend import dot_dtype, multiprocessor_count, triton_interpreting, use_triton

_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _block_sizes(n: int):
    """(BLOCK_M, BLOCK_N, BLOCK_D). The one-hot tile of S is built per (d-tile, k-tile) and shared by
    the BLOCK_M rows; the H100 sweep in benchmarks/RESULTS.md measured (128, 64, 64) fastest at
    n = 2**20, d = 1024, k = 64 and 256 in float32 and bfloat16."""
    if triton_interpreting():
        return 32, 32, 64
    if n >= 4096:
        return 128, 64, 64
    return (16 if n <= 16 else 32 if n <= 32 else 64), 64, 64


def _num_warps(dtype) -> int:
    # Measured: float32 (three dots per tile) prefers 4 warps, half types 8.
    return 4 if dtype == torch.float32 else 8


def _dot_config(dtype):
    import triton.language as tl

    if dtype == torch.float32:
        return True, dot_dtype(tl.bfloat16)
    return False, dot_dtype(tl.float16 if dtype == torch.float16 else tl.bfloat16)


def default_splits(n: int, d: int, k: int, device: torch.device) -> int:
    """Column splits of the forward: enough programs to fill the GPU when n*k alone cannot."""
    if device.type != "cuda":
        return 1
    block_m, block_n, block_d = _block_sizes(n)
    programs = math.ceil(n / block_m) * math.ceil(k / block_n)
    target = 4 * multiprocessor_count(device.index if device.index is not None else torch.cuda.current_device())
    if programs >= target:
        return 1
    return max(1, min(math.ceil(target / programs), math.ceil(d / (8 * block_d))))


def triton_forward(x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int,
                   column_offset: int, splits: int | None = None, blocks=None,
                   num_warps: int | None = None) -> torch.Tensor:
    """Y = x S^T. ``splits``, ``blocks`` (BLOCK_M, BLOCK_N, BLOCK_D) and ``num_warps`` override the
    tiling heuristics (tests and benchmark sweeps); the result's value does not depend on them."""
    from ..kernels.sparse_jl import sparse_jl_forward_kernel

    n, d = x.shape
    table = hash_table(d, out_features, key0, key1, nnz, column_offset, x.device)
    k = out_features
    block_m, block_n, block_d = blocks or _block_sizes(n)
    if splits is None:
        splits = default_splits(n, d, k, x.device)
    cols_per_split = math.ceil(math.ceil(d / splits) / block_d) * block_d
    splits = math.ceil(d / cols_per_split)
    split_fp32, dot_type = _dot_config(x.dtype)
    if splits == 1:
        out = _buffers.empty((n, k), x.dtype, x.device)
        stride_split = 0
    else:
        out = _buffers.empty((splits, n, k), torch.float32, x.device)
        stride_split = out.stride(0)
    grid = (math.ceil(n / block_m), math.ceil(k / block_n), splits)
    sparse_jl_forward_kernel[grid](
        x, table, out, n, d, k, nnz, 1.0 / math.sqrt(nnz),
        x.stride(0), x.stride(1), out.stride(-2), out.stride(-1), stride_split, cols_per_split,
        SPLIT_FP32=split_fp32, DOT_DTYPE=dot_type,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=num_warps or _num_warps(x.dtype),
    )
    if splits == 1:
        return out
    return out.sum(0).to(x.dtype)


def triton_transpose(y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int,
                     column_offset: int) -> torch.Tensor:
    from ..kernels.sparse_jl import sparse_jl_transpose_kernel

    n, k = y.shape
    d = in_features
    table = hash_table(d, k, key0, key1, nnz, column_offset, y.device)
    block_m, block_n, block_d = _block_sizes(n)
    split_fp32, dot_type = _dot_config(y.dtype)
    z = _buffers.empty((n, d), y.dtype, y.device)
    grid = (math.ceil(n / block_m) * math.ceil(d / block_d),)
    sparse_jl_transpose_kernel[grid](
        y, table, z, n, d, k, nnz, 1.0 / math.sqrt(nnz),
        y.stride(0), y.stride(1), z.stride(0), z.stride(1),
        SPLIT_FP32=split_fp32, DOT_DTYPE=dot_type,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=_num_warps(y.dtype),
    )
    return z


def hash_table(in_features: int, out_features: int, key0: int, key1: int, nnz: int,
               column_offset: int, device) -> torch.Tensor:
    """The (nnz, in_features) int32 table of S: row | (negative << 31), one Philox call per entry."""
    from ..kernels.sparse_jl import sparse_jl_hash_kernel

    table = _buffers.empty((nnz, in_features), torch.int32, device)
    block = 256
    if in_features > 0:
        sparse_jl_hash_kernel[(math.ceil(in_features / block), nnz)](
            table, in_features, out_features, nnz, column_offset, key0, key1,
            DOMAIN=spec.DOMAIN_SPARSE_JL, BLOCK=block,
        )
    return table


def triton_hash(in_features: int, out_features: int, key0: int, key1: int, nnz: int,
                column_offset: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's own (rows, negative) table, for materialising S and for tests."""
    table = hash_table(in_features, out_features, key0, key1, nnz, column_offset, device)
    return (table & 0x7FFFFFFF).to(torch.int64), table < 0


def _seed(key0: int, key1: int) -> int:
    return key0 | (key1 << 32)


@torch.library.custom_op("sjlt::sparse_jl", mutates_args=())
def sparse_jl_op(x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int,
                 column_offset: int, backend: str) -> torch.Tensor:
    if x.shape[0] == 0 or x.shape[1] == 0:
        return torch.zeros(x.shape[0], out_features, dtype=x.dtype, device=x.device)
    if use_triton(backend, x, supports_dtype=x.dtype in _KERNEL_DTYPES):
        return triton_forward(x, out_features, key0, key1, nnz, column_offset)
    # The op's contract (checked by opcheck against the fake) is a contiguous output, and autocast
    # must not recast the reference's float32 accumulation from inside.
    with torch.autocast(x.device.type, enabled=False):
        return reference.sparse_jl_forward(x, out_features, seed=_seed(key0, key1), nnz=nnz,
                                           column_offset=column_offset).contiguous()


@sparse_jl_op.register_fake
def _(x, out_features, key0, key1, nnz, column_offset, backend):
    return x.new_empty(x.shape[0], out_features)


@torch.library.custom_op("sjlt::sparse_jl_transpose", mutates_args=())
def sparse_jl_transpose_op(y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int,
                           column_offset: int, backend: str) -> torch.Tensor:
    if y.shape[0] == 0 or in_features == 0:
        return torch.zeros(y.shape[0], in_features, dtype=y.dtype, device=y.device)
    if use_triton(backend, y, supports_dtype=y.dtype in _KERNEL_DTYPES):
        return triton_transpose(y, in_features, key0, key1, nnz, column_offset)
    with torch.autocast(y.device.type, enabled=False):
        return reference.sparse_jl_transpose(y, in_features, seed=_seed(key0, key1), nnz=nnz,
                                             column_offset=column_offset).contiguous()


@sparse_jl_transpose_op.register_fake
def _(y, in_features, key0, key1, nnz, column_offset, backend):
    return y.new_empty(y.shape[0], in_features)


def _setup_context(ctx, inputs, output):
    tensor, features, key0, key1, nnz, column_offset, backend = inputs
    ctx.features = tensor.shape[1]
    ctx.args = (key0, key1, nnz, column_offset, backend)


def _forward_backward(ctx, grad):
    return (torch.ops.sjlt.sparse_jl_transpose(grad, ctx.features, *ctx.args),) + (None,) * 6


def _transpose_backward(ctx, grad):
    return (torch.ops.sjlt.sparse_jl(grad, ctx.features, *ctx.args),) + (None,) * 6


sparse_jl_op.register_autograd(_forward_backward, setup_context=_setup_context)
sparse_jl_transpose_op.register_autograd(_transpose_backward, setup_context=_setup_context)
