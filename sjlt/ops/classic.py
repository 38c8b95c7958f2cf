"""Launchers of the classic layout's kernels (one-hot tiles built from a per-call hash table)."""

from __future__ import annotations

import math

import torch

from .. import _buffers, spec
from .._backend import triton_interpreting
from ._launch import Tiling, dot_config, forward_output, padded_row, promote_every, splits_to_fill, sum_splits


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


def forward(
    x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int, column_offset: int, tiling: Tiling = Tiling()
) -> torch.Tensor:
    """Y = x S^T with the one-hot kernel; also times the spec v1 design on windowed k (benchmarks),
    where its matrix differs from the windowed one."""
    from ..kernels.sparse_jl import sparse_jl_forward_kernel

    n, d = x.shape
    table = hash_table(d, out_features, key0, key1, nnz, column_offset, x.device)
    k = out_features
    block_m, block_n, block_d = tiling.blocks or _block_sizes(n)
    splits = tiling.splits
    if splits is None:  # 4 programs per SM
        splits = splits_to_fill(
            math.ceil(n / block_m) * math.ceil(k / block_n),
            math.ceil(d / (8 * block_d)),
            4,
            x.device,
            (x.numel() * x.element_size(), n * padded_row(k) * 4),
        )
    cols_per_split = math.ceil(math.ceil(d / splits) / block_d) * block_d
    splits = math.ceil(d / cols_per_split)
    fp32_passes, dot_type = dot_config(x.dtype)
    out, stride_split = forward_output(n, k, splits, x)
    grid = (math.ceil(n / block_m), math.ceil(k / block_n), splits)
    sparse_jl_forward_kernel[grid](
        x,
        table,
        out,
        n,
        d,
        k,
        nnz,
        1.0 / math.sqrt(nnz),
        x.stride(0),
        x.stride(1),
        out.stride(-2),
        out.stride(-1),
        stride_split,
        cols_per_split,
        FP32_PASSES=fp32_passes,
        DOT_DTYPE=dot_type,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        PROMOTE_EVERY=promote_every(fp32_passes, cols_per_split // block_d, tiling),
        num_warps=tiling.num_warps or _num_warps(x.dtype),
    )
    return sum_splits(out, splits, x.dtype)


def transpose(y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int, column_offset: int) -> torch.Tensor:
    """Z = y S with the one-hot kernel; each program writes its own columns of Z."""
    from ..kernels.sparse_jl import sparse_jl_transpose_kernel

    n, k = y.shape
    d = in_features
    table = hash_table(d, k, key0, key1, nnz, column_offset, y.device)
    block_m, block_n, block_d = _block_sizes(n)
    fp32_passes, dot_type = dot_config(y.dtype)
    z = _buffers.empty((n, d), y.dtype, y.device)
    grid = (math.ceil(n / block_m) * math.ceil(d / block_d),)
    sparse_jl_transpose_kernel[grid](
        y,
        table,
        z,
        n,
        d,
        k,
        nnz,
        1.0 / math.sqrt(nnz),
        y.stride(0),
        y.stride(1),
        z.stride(0),
        z.stride(1),
        FP32_PASSES=fp32_passes,
        DOT_DTYPE=dot_type,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        num_warps=_num_warps(y.dtype),
    )
    return z


def hash_table(
    in_features: int, out_features: int, key0: int, key1: int, nnz: int, column_offset: int, device
) -> torch.Tensor:
    """The (nnz, in_features) int32 table of S: row | (negative << 31), one Philox call per entry."""
    from ..kernels.sparse_jl import sparse_jl_hash_kernel

    table = _buffers.empty((nnz, in_features), torch.int32, device)
    block = 256
    if in_features > 0:
        sparse_jl_hash_kernel[(math.ceil(in_features / block), nnz)](
            table,
            in_features,
            out_features,
            nnz,
            column_offset,
            key0,
            key1,
            DOMAIN=spec.DOMAIN_SPARSE_JL,
            BLOCK=block,
        )
    return table
