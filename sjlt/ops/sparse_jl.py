"""``torch.ops.sjlt.sparse_jl`` and ``torch.ops.sjlt.sparse_jl_transpose``: launch, dispatch, autograd.

Each op is the other's backward; both regenerate S from (key, nnz, column_offset), so autograd
saves no tensor at all. Inputs here are already validated 2-D real tensors (see
``sjlt.functional``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

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


def _forward_output(n: int, k: int, splits: int, x: torch.Tensor):
    """(buffer, split stride): Y itself for one split, else float32 partials the caller sums."""
    if splits == 1:
        return _buffers.empty((n, k), x.dtype, x.device), 0
    out = _buffers.empty((splits, n, k), torch.float32, x.device)
    return out, out.stride(0)


def triton_forward(x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int,
                   column_offset: int, splits: int | None = None, blocks=None,
                   num_warps: int | None = None, num_stages: int | None = None) -> torch.Tensor:
    """Y = x S^T. ``splits``, ``blocks``, ``num_warps`` and ``num_stages`` override the tiling
    heuristics (tests and benchmark sweeps); the result's value does not depend on them. ``blocks``
    is (BLOCK_M, BLOCK_N, BLOCK_D) for the classic layout and (BLOCK_M,) for the windowed one;
    ``num_stages`` applies to the windowed kernel only."""
    if spec.is_windowed(out_features, nnz):
        return _windowed_forward(x, out_features, key0, key1, nnz, column_offset, splits, blocks, num_warps,
                                 num_stages)
    return classic_forward(x, out_features, key0, key1, nnz, column_offset, splits, blocks, num_warps)


def classic_forward(x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int,
                    column_offset: int, splits: int | None = None, blocks=None,
                    num_warps: int | None = None) -> torch.Tensor:
    """The one-hot kernel of the classic layout; also times the spec v1 design on any k
    (benchmarks), where its matrix differs from the windowed one."""
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
    out, stride_split = _forward_output(n, k, splits, x)
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
    if spec.is_windowed(y.shape[1], nnz):
        return _windowed_transpose(y, in_features, key0, key1, nnz, column_offset)
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
    """The kernels' own (rows, negative) table, for materialising S and for tests."""
    if spec.is_windowed(out_features, nnz):
        tables = window_tables(in_features, out_features, key0, key1, nnz, column_offset, device)
        return reference.windowed_rows(in_features, column_offset, tables.words.t().to(torch.int64) & 0xFFFFFFFF,
                                       tables.rotations.to(torch.int64), tables.group_base * tables.windows,
                                       tables.group_base, out_features, nnz)
    table = hash_table(in_features, out_features, key0, key1, nnz, column_offset, device)
    return (table & 0x7FFFFFFF).to(torch.int64), table < 0


# --------------------------------------------------------------------------------------------
# Windowed layout (spec v2): k = 16 * A * nnz
# --------------------------------------------------------------------------------------------

class WindowTables(NamedTuple):
    """Per-call tables of the windowed layout for whole groups [group_base, group_base + groups)."""
    words: torch.Tensor  # (groups * windows, nnz) int32: mask and signs of each (chunk, block)
    rotations: torch.Tensor  # (groups,) int32: R_g
    group_base: int
    groups: int
    windows: int


# Tables of recent small calls, reused: for a 1 x 1024 input the table launch is a third of the
# call. Only small tables are kept (they are O(in_features)), and none made during CUDA-graph
# capture, whose memory belongs to the graph's pool.
_TABLE_CACHE: dict = {}
_TABLE_CACHE_ENTRIES = 16
_TABLE_CACHE_MAX_BYTES = 1 << 20


def window_tables(in_features: int, out_features: int, key0: int, key1: int, nnz: int,
                  column_offset: int, device) -> WindowTables:
    device = torch.device(device)
    key = (in_features, out_features, key0, key1, nnz, column_offset, device)
    tables = _TABLE_CACHE.get(key)
    if tables is None:
        tables = _make_window_tables(in_features, out_features, key0, key1, nnz, column_offset, device)
        small = tables.words.numel() * 4 <= _TABLE_CACHE_MAX_BYTES
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if small and not capturing:
            if len(_TABLE_CACHE) >= _TABLE_CACHE_ENTRIES:
                _TABLE_CACHE.pop(next(iter(_TABLE_CACHE)))
            _TABLE_CACHE[key] = tables
    return tables


def _make_window_tables(in_features, out_features, key0, key1, nnz, column_offset, device) -> WindowTables:
    from ..kernels.sparse_jl_windowed import window_table_kernel

    windows = spec.windows_per_block(out_features, nnz)
    first_chunk = column_offset // spec.WINDOW
    last_chunk = (column_offset + in_features - 1) // spec.WINDOW
    group_base = first_chunk // windows
    groups = last_chunk // windows - group_base + 1
    words = _buffers.empty((groups * windows, nnz), torch.int32, device)
    rotations = _buffers.empty((groups,), torch.int32, device)
    block = 256
    window_table_kernel[(math.ceil(groups * windows / block),)](
        words, rotations, group_base, groups, windows, key0, key1, NNZ=nnz,
        DOMAIN_WINDOW=spec.DOMAIN_SPARSE_JL_WINDOW, DOMAIN_GROUP=spec.DOMAIN_SPARSE_JL_GROUP, BLOCK=block,
    )
    return WindowTables(words, rotations, group_base, groups, windows)


def _windowed_width(nnz: int) -> int:
    """Accumulator columns per program: one window per block, padded to a power of two."""
    return spec.WINDOW * (1 << (nnz - 1).bit_length())


def _windowed_block_m(n: int, width: int) -> int:
    """Rows per program: the accumulator is BLOCK_M x width float32, kept near 64 KiB of registers."""
    if triton_interpreting():
        return 16
    rows = 64 if n > 32 else 32 if n > 16 else 16
    return max(16, min(rows, (64 * 128) // width))


def _windowed_num_warps(block_m: int) -> int:
    # The H100 sweep in benchmarks/RESULTS.md: 64 rows and 4 warps beat 128 rows (with 4 or 8 warps)
    # by 5-20%; 32 rows run best with 2 warps.
    return 4 if block_m >= 64 else 2


def _windowed_splits(tiles: int, groups: int, device: torch.device) -> int:
    """Group splits: enough programs to fill the GPU when the row tiles alone cannot, each split
    keeping at least 16 groups of work. 8 programs per SM: the n = 32, d = 2**24 sweep ran 1.4x
    faster with 32 splits than with 16."""
    if device.type != "cuda":
        return 1
    target = 8 * multiprocessor_count(device.index if device.index is not None else torch.cuda.current_device())
    if tiles >= target:
        return 1
    return max(1, min(math.ceil(target / tiles), groups // 16))


def _windowed_grid(n: int, nnz: int, tables: WindowTables, device, splits=None, block_m=None):
    """(BLOCK_M, WIDTH, row tiles * A, splits, groups per split)."""
    width = _windowed_width(nnz)
    block_m = block_m or _windowed_block_m(n, width)
    tiles = math.ceil(n / block_m) * tables.windows
    if splits is None:
        splits = _windowed_splits(tiles, tables.groups, device)
    per_split = math.ceil(tables.groups / splits)
    return block_m, width, tiles, math.ceil(tables.groups / per_split), per_split


def _windowed_forward(x, out_features, key0, key1, nnz, column_offset, splits, blocks, num_warps,
                      num_stages=None):
    from ..kernels.sparse_jl_windowed import sparse_jl_windowed_forward_kernel

    n, d = x.shape
    tables = window_tables(d, out_features, key0, key1, nnz, column_offset, x.device)
    block_m, width, tiles, splits, per_split = _windowed_grid(
        n, nnz, tables, x.device, splits, blocks[0] if blocks else None)
    out, stride_split = _forward_output(n, out_features, splits, x)
    split_fp32, dot_type = _dot_config(x.dtype)
    sparse_jl_windowed_forward_kernel[(tiles, splits)](
        x, tables.words, tables.rotations, out, n, d, column_offset, tables.group_base, tables.groups,
        per_split, tables.windows, 1.0 / math.sqrt(nnz),
        x.stride(0), x.stride(1), out.stride(-2), out.stride(-1), stride_split,
        NNZ=nnz, SPLIT_FP32=split_fp32, DOT_DTYPE=dot_type, BLOCK_M=block_m, WIDTH=width,
        num_warps=num_warps or _windowed_num_warps(block_m), **({"num_stages": num_stages} if num_stages else {}),
    )
    if splits == 1:
        return out
    return out.sum(0).to(x.dtype)


def _windowed_transpose(y, in_features, key0, key1, nnz, column_offset):
    from ..kernels.sparse_jl_windowed import sparse_jl_windowed_transpose_kernel

    n, k = y.shape
    tables = window_tables(in_features, k, key0, key1, nnz, column_offset, y.device)
    block_m, width, tiles, splits, per_split = _windowed_grid(n, nnz, tables, y.device)
    z = _buffers.empty((n, in_features), y.dtype, y.device)
    split_fp32, dot_type = _dot_config(y.dtype)
    sparse_jl_windowed_transpose_kernel[(tiles, splits)](
        y, tables.words, tables.rotations, z, n, in_features, column_offset, tables.group_base,
        tables.groups, per_split, tables.windows, 1.0 / math.sqrt(nnz),
        y.stride(0), y.stride(1), z.stride(0), z.stride(1),
        NNZ=nnz, SPLIT_FP32=split_fp32, DOT_DTYPE=dot_type, BLOCK_M=block_m, WIDTH=width,
        num_warps=_windowed_num_warps(block_m),
    )
    return z


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
        from .. import cpu_engine  # the engine users run; reference is the oracle tests trust
        return cpu_engine.sparse_jl_forward(x, out_features, seed=_seed(key0, key1), nnz=nnz,
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
        from .. import cpu_engine
        return cpu_engine.sparse_jl_transpose(y, in_features, seed=_seed(key0, key1), nnz=nnz,
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
