"""Launchers of the windowed layout's kernels (k = 16 * A * nnz, docs/spec.md 2b) and its per-call tables."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .. import _buffers, spec
from .._backend import triton_interpreting
from ._launch import Tiling, dot_config, forward_output, promote_every, splits_to_fill, sum_splits


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


def _width(nnz: int) -> int:
    """Accumulator columns per program: one window per block, padded to a power of two."""
    return spec.WINDOW * (1 << (nnz - 1).bit_length())


def _block_m(n: int, width: int, float32_transpose: bool = False) -> int:
    """Rows per program: the accumulator (the forward's Y tile, the transpose's y tile) is
    BLOCK_M x width float32, at most 64 KiB of registers; 32 KiB in a float32 transpose, which also
    holds the y tile's three-way split. H100 sweeps (benchmarks/RESULTS.md): at nnz 16 the forward
    runs 1.2-1.6x faster with 64 rows than with 32, and 128 rows with 8 warps gain nothing; the
    bfloat16 transpose runs 1.3-1.7x faster with 64 rows (and 4 warps) than with 32 at n >= 1024,
    the float32 one 1.15x slower."""
    if triton_interpreting():
        return 16
    rows = 64 if n > 32 else 32 if n > 16 else 16
    return max(16, min(rows, (32 if float32_transpose else 64) * 256 // width))


def _forward_steps(dtype: torch.dtype, nnz: int, block_m: int) -> tuple[int, int, int]:
    """(groups per dot, dots per loop step, pipeline stages) of the forward, from the H100 sweep
    (``python benchmarks/sweep_windowed.py``, benchmarks/RESULTS.md): half types run fastest with
    four groups in one dot and no software pipelining; float32, whose three-pass split already
    fills the step, with two one-group dots at nnz <= 8 and one four-group dot up to 16 when a
    program has 64 rows (with 32 rows and two warps the four-group dot pipelined ran 3x slower, and
    two one-group dots run fastest). Beyond nnz 16 (WIDTH 512) a four-group tile spills: 24-26x
    slower than the steps below."""
    if dtype != torch.float32:
        return (4, 1, 1) if nnz <= 16 else (2, 1, 1)
    if nnz <= 8:
        return 1, 2, 3
    if nnz <= 16:  # 32-row programs (n <= 32): two one-group dots, 1.12x faster than four groups
        return (4, 1, 3) if block_m >= 64 else (1, 2, 3)
    return 1, 1, 3


#: The transpose's step: four groups' chunks per dot, computed as z^T = tile @ y^T so that the
#: stacked tile is a 64-row register operand, without software pipelining. H100 sweep
#: (benchmarks/RESULTS.md): 1.35-2.3x faster than one group per dot as z = y @ tile^T.
_TRANSPOSE_GROUPS = 4
_TRANSPOSE_TILE_LEFT = True
_TRANSPOSE_STAGES = 1


def _num_warps(block_m: int, width: int, transpose: bool = False) -> int:
    # The H100 sweeps in benchmarks/RESULTS.md: 64 rows and 4 warps beat 128 rows (with 4 or 8 warps)
    # by 5-20%; 32 rows run best with 2 warps, except the transpose at nnz 16, whose 32-row programs
    # run 1.1-1.4x faster with 4 (and slower with 8 at any row count).
    return 4 if block_m >= 64 or (transpose and width >= 256) else 2


def _forward_parts(dtype: torch.dtype, nnz: int, n: int) -> int:
    """Programs per (row tile, window) in the forward, each owning nnz / parts of the blocks. The
    half-type forward at nnz 16 holds a 64 x 256 accumulator and tile (253 registers a thread, two
    programs per SM, latency-bound: benchmarks/NOTES.md, design 6); two programs of 128 columns,
    which read the same chunks through L2, ran 1.06-1.36x faster at n >= 1024 rows (H100 sweep,
    ``sweep_windowed.py --parts 2``). float32, nnz 8, four parts and n <= 32 ran slower."""
    if dtype != torch.float32 and 8 < nnz <= 16 and nnz % 2 == 0 and n > 32:
        return 2
    return 1


def _grid(x: torch.Tensor, nnz: int, tables: WindowTables, splits=None, block_m=None,
          out_features: int | None = None, parts: int = 1):
    """(BLOCK_M, WIDTH, row tiles * A * parts, splits, groups per split) for the (n, .) input
    ``x``; ``out_features``: k for the forward, whose splits produce (n, k) partials to be summed;
    ``parts``: programs per (row tile, window), each owning nnz / parts of the blocks."""
    summed = out_features is not None
    n = x.shape[0]
    width = _width(nnz // parts)
    block_m = block_m or _block_m(n, width, float32_transpose=not summed and x.dtype == torch.float32)
    tiles = math.ceil(n / block_m) * tables.windows * parts
    if splits is None:
        # Group splits keep at least 16 groups of work each. 8 programs per SM: the n = 32,
        # d = 2**24 sweep ran 1.4x faster with 32 splits than with 16.
        splits = splits_to_fill(tiles, tables.groups // 16, 8, x.device,
                                (x.numel() * x.element_size(), n * out_features * 4) if summed else None)
    per_split = math.ceil(tables.groups / splits)
    return block_m, width, tiles, math.ceil(tables.groups / per_split), per_split


def forward(x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int, column_offset: int,
            tiling: Tiling = Tiling()) -> torch.Tensor:
    """Y = x S^T: a program owns window a of every block (or of nnz / parts of them) for a row tile
    and multiplies, per group, the one chunk that lands there by its signed-permutation tile,
    several groups per step."""
    from ..kernels.sparse_jl_windowed import sparse_jl_windowed_forward_kernel

    n, d = x.shape
    tables = window_tables(d, out_features, key0, key1, nnz, column_offset, x.device)
    parts = tiling.parts or _forward_parts(x.dtype, nnz, n)
    if nnz % parts:
        raise ValueError(f"Tiling.parts={parts} must divide nnz={nnz}")
    block_m, width, tiles, splits, per_split = _grid(
        x, nnz, tables, tiling.splits, tiling.blocks[0] if tiling.blocks else None, out_features, parts)
    out, stride_split = forward_output(n, out_features, splits, x)
    fp32_passes, dot_type = dot_config(x.dtype)
    groups_per_dot, unroll, stages = _forward_steps(x.dtype, nnz // parts, block_m)
    groups_per_dot, unroll = tiling.steps or (groups_per_dot, unroll)
    sparse_jl_windowed_forward_kernel[(tiles, splits)](
        x, tables.words, tables.rotations, out, n, d, column_offset, tables.group_base, tables.groups,
        per_split, tables.windows, 1.0 / math.sqrt(nnz),
        x.stride(0), x.stride(1), out.stride(-2), out.stride(-1), stride_split,
        NNZ=nnz, FP32_PASSES=fp32_passes, DOT_DTYPE=dot_type, BLOCK_M=block_m, WIDTH=width,
        GROUPS=groups_per_dot, UNROLL=unroll, PARTS=parts,
        PROMOTE_EVERY=promote_every(fp32_passes, math.ceil(per_split / (groups_per_dot * unroll)), tiling),
        num_warps=tiling.num_warps or _num_warps(block_m, width),
        num_stages=tiling.num_stages or stages,
    )
    return sum_splits(out, splits, x.dtype)


def transpose(y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int,
              column_offset: int, tiling: Tiling = Tiling()) -> torch.Tensor:
    """Z = y S: splits own disjoint groups, so every column of Z is written by one program."""
    from ..kernels.sparse_jl_windowed import sparse_jl_windowed_transpose_kernel

    n, k = y.shape
    tables = window_tables(in_features, k, key0, key1, nnz, column_offset, y.device)
    block_m, width, tiles, splits, per_split = _grid(y, nnz, tables, tiling.splits,
                                                     tiling.blocks[0] if tiling.blocks else None)
    z = _buffers.empty((n, in_features), y.dtype, y.device)
    fp32_passes, dot_type = dot_config(y.dtype)
    steps = tiling.steps or (_TRANSPOSE_GROUPS,)  # (groups per dot[, tile on the left])
    groups_per_dot = steps[0]
    tile_left = bool(steps[1]) if len(steps) > 1 else _TRANSPOSE_TILE_LEFT
    sparse_jl_windowed_transpose_kernel[(tiles, splits)](
        y, tables.words, tables.rotations, z, n, in_features, column_offset, tables.group_base,
        tables.groups, per_split, tables.windows, 1.0 / math.sqrt(nnz),
        y.stride(0), y.stride(1), z.stride(0), z.stride(1),
        NNZ=nnz, FP32_PASSES=fp32_passes, DOT_DTYPE=dot_type, BLOCK_M=block_m, WIDTH=width,
        GROUPS=groups_per_dot, TILE_LEFT=tile_left,
        num_warps=tiling.num_warps or _num_warps(block_m, width, transpose=True),
        num_stages=tiling.num_stages or _TRANSPOSE_STAGES,
    )
    return z
