"""Launchers of the windowed layout's kernels (k' = 16 * A * nnz padded rows folded onto k, docs/spec.md
2b) and its per-call tables."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import torch

from .. import _buffers, backends, spec
from .._backend import device_capability, triton_interpreting
from ._launch import Tiling, dot_config, forward_output, padded_row, promote_every, splits_to_fill, sum_splits
from .rows import resized


class WindowTables(NamedTuple):
    """Per-call tables of the windowed layout for whole groups [group_base, group_base + groups)."""

    words: torch.Tensor  # (groups * windows, nnz) int32: mask and signs of each (chunk, block)
    rotations: torch.Tensor  # (groups, bands) int32: R_(g,b)
    group_base: int
    groups: int
    windows: int


# Tables of recent small calls, reused: for a 1 x 1024 input the table launch is a third of the
# call. Only small tables are kept (they are O(in_features)), and none made during CUDA-graph
# capture, whose memory belongs to the graph's pool.
_TABLE_CACHE: dict = {}
_TABLE_CACHE_ENTRIES = 16
_TABLE_CACHE_MAX_BYTES = 1 << 20


def window_tables(
    in_features: int, out_features: int, key0: int, key1: int, nnz: int, column_offset: int, device
) -> WindowTables:
    device = torch.device(device)
    key = (in_features, out_features, key0, key1, nnz, column_offset, device)
    tables = _TABLE_CACHE.get(key)
    if tables is None:
        tables = _make_window_tables(in_features, out_features, key0, key1, nnz, column_offset, device)
        small = tables.words.numel() * 4 <= _TABLE_CACHE_MAX_BYTES
        if small and _buffers.may_keep(device):
            if len(_TABLE_CACHE) >= _TABLE_CACHE_ENTRIES:
                _TABLE_CACHE.pop(next(iter(_TABLE_CACHE)))
            _TABLE_CACHE[key] = tables
    return tables


def _group_of(column, windows: int):
    """The table group that holds input column ``column`` (A chunks of 16 columns per group); an
    int, or an integer array of them."""
    return column // spec.WINDOW // windows


def _make_window_tables(in_features, out_features, key0, key1, nnz, column_offset, device) -> WindowTables:
    from ..kernels.sparse_jl_windowed import window_table_kernel

    windows = spec.windows_per_block(out_features, nnz)
    group_base = _group_of(column_offset, windows)
    groups = _group_of(column_offset + in_features - 1, windows) - group_base + 1
    words = _buffers.empty((groups * windows, nnz), torch.int32, device)
    rotations = _buffers.empty((groups, spec.band_count(nnz)), torch.int32, device)
    block, quads = table_tiling(nnz)
    window_table_kernel[(math.ceil(groups * windows / block),)](
        words,
        rotations,
        group_base,
        groups,
        windows,
        key0,
        key1,
        NNZ=nnz,
        BANDS=spec.band_count(nnz),
        DOMAIN_WINDOW=spec.DOMAIN_SPARSE_JL_WINDOW,
        DOMAIN_GROUP=spec.DOMAIN_SPARSE_JL_GROUP,
        BLOCK=block,
        QUADS=quads,
    )
    return WindowTables(words, rotations, group_base, groups, windows)


def table_tiling(nnz: int) -> tuple[int, int]:
    """(chunks per program, quads) of ``window_table_kernel``: a chunk's ceil(nnz / 4) Philox
    counters rounded up to a power of two, and 512 counters per program (four per thread)."""
    quads = 1 << ((nnz + 3) // 4 - 1).bit_length()
    return max(1, 512 // quads), quads


def shift_order(tables: WindowTables) -> tuple[torch.Tensor, torch.Tensor]:
    """For the two-band transpose: the table groups sorted by delta_g = (R_(g,1) - R_(g,0)) mod A
    ((groups,) int32; a stable device sort, so capturable and deterministic), and where each
    delta's run starts ((A + 1,) int32). Made per paired launch, whose inputs are large, so the
    forward and other calls never pay for it."""
    delta, order = torch.sort((tables.rotations[:, 1] - tables.rotations[:, 0]) % tables.windows, stable=True)
    starts = torch.searchsorted(delta, torch.arange(tables.windows + 1, dtype=delta.dtype, device=delta.device))
    return order.to(torch.int32), starts.to(torch.int32)


def _band_blocks(nnz: int) -> int:
    """Blocks per program: a program owns one band (spec v5, docs/spec.md 2b)."""
    return min(nnz, spec.BAND)


@functools.lru_cache(maxsize=1024)
def _fold(out_features: int, nnz: int) -> int:
    """The most padded rows that fold within one block (0 on the lattice k = 16 A nnz)."""
    return spec.max_fold(out_features, nnz)


def _spill(n: int, splits: int, nnz: int, fold: int, like: torch.Tensor) -> torch.Tensor:
    """The forward kernels' float32 spill of (splits, n, nnz, 2, 16): windows 0 and A - 1 of each
    block, which hold its folded rows and the rows they fold onto, stored apart so that each output
    is rounded once (:func:`_add_fold`). Without a fold, ``like`` stands in for the unread pointer."""
    return _buffers.empty((splits, n, nnz, 2, spec.WINDOW), torch.float32, like.device) if fold else like


def _add_fold(y: torch.Tensor, spill: torch.Tensor, out_features: int, nnz: int, fold: int) -> torch.Tensor:
    """y with the rows of each block's windows 0 and A - 1 set from the spill, folded
    (``fold_spill_kernel``)."""
    if fold:
        from ..kernels.sparse_jl_windowed import fold_spill_kernel

        n = y.shape[0]
        fold_spill_kernel[(n,)](
            spill,
            y,
            n,
            out_features,
            spec.windows_per_block(out_features, nnz),
            spill.shape[0],
            y.stride(0),
            y.stride(1),
            NNZ=nnz,
            COLUMNS=1 << (nnz * 2 * spec.WINDOW - 1).bit_length(),
        )
    return y


def _width(nnz: int) -> int:
    """Accumulator columns per program: one window per block of a band, padded to a power of two."""
    return spec.WINDOW * (1 << (_band_blocks(nnz) - 1).bit_length())


def _block_m(n: int, width: int, float32_transpose: bool = False) -> int:
    """Rows per program: the accumulator (the forward's Y tile, the transpose's y tile) is
    BLOCK_M x width float32, at most 64 KiB of registers; 32 KiB in a float32 transpose, which also
    holds the y tile's three-way split. With one band per program (width <= 128) that is 64 rows
    from n = 33 on. H100 sweeps (benchmarks/RESULTS.md): the one-band forward and the two-band
    transpose run 1.1-1.8x faster with 64 rows than with 32 at n >= 1024 (the float32 launch per
    band at d = 4096 1.08x slower), and 128 rows gain nothing, except in half-type forwards with
    pipelined steps (:func:`_wide_rows`, chosen by the forward)."""
    if triton_interpreting():
        return 16
    rows = 64 if n > 32 else 32 if n > 16 else 16
    return max(16, min(rows, (32 if float32_transpose else 64) * 256 // width))


def _forward_steps(
    dtype: torch.dtype,
    groups_per_program: int,
    aligned: bool = True,
    folded: bool = False,
    bands: int = 1,
    wide_vector_rows: bool = False,
) -> tuple[int, int, int, bool]:
    """(groups per dot, dots per loop step, pipeline stages, pipelined) of the forward, whose
    programs own at most 8 blocks (one band). H100 sweep (``python benchmarks/sweep_windowed.py
    --pipelined``, benchmarks/RESULTS.md): each step's loads issued a step ahead in registers
    (design 8) pay where a program has a long run of steps: half types with four groups per dot
    gain 1.04-1.14x from 256 groups per program and lose up to 1.15x at 8-32 (d = 1024 and 4096);
    at 128 groups they gain 1.05-1.06x once pipelining brings 128-row programs (:func:`_wide_rows`);
    float32 with two groups per dot gains 1.00-1.26x from 16 groups on (1.22-1.26x at d = 2**17 and
    beyond), and below that (d = k = 1024) runs best as two unpipelined one-group dots with
    Triton's three-stage pipeline.

    Chunks the compiler cannot prove 16-byte aligned (not ``aligned``: :func:`_aligned_chunks`) are
    loaded element by element and take other steps, in 64-row programs. H100 sweeps
    (benchmarks/NOTES.md, "Any d", element loads): half types pipelined with two groups per dot,
    for long and short runs alike, run at most 1.43x the kernel on aligned rows (four groups,
    pipelined and 128 rows as for aligned rows: 3.9-4.6x; unpipelined at short runs up to 1.86x;
    the shifted aligned vectors this replaced: 1.9-2.1x); float32 long runs as one unpipelined dot
    of four groups 1.12-1.42x (its aligned steps 1.32-1.42x). On the H200 (benchmarks/NOTES.md, "Any
    d", 2026-11-28) float32 with two bands (``bands``) and 256 groups per program or more runs them
    as pipelined two-group steps, 1.03-1.14x faster (4096 x (2**17 - 1) -> 4096 1.23 -> 1.16x the
    aligned call, 1024 x (2**20 - 1) -> 8192 1.31 -> 1.15x), where one band loses 1.03-1.17x; one
    band with at most 128 groups pipelines its four-group dots, 1.02-1.07x faster (65536 x 16383 ->
    1024 1.27-1.30 -> 1.21-1.22x), and loses 1.2-1.3x with longer runs.

    Half-type forwards that fold rows (``folded``: k off the lattice) pipeline four-group dots at
    every run length, on rows aligned or not. H200 (benchmarks/NOTES.md, "Any k", item 28, and
    "Any d"), bfloat16, ratio to the lattice k above: 65536 x 2**14 -> 1000-8000 1.06-1.23 ->
    0.95-1.06, 16384 x 2**15 0.94-1.13 -> 0.89-1.06, 262144 x 4096 1.13-1.42 -> 1.09-1.33, unchanged
    where runs were already long; misaligned, to the aligned call, 65536 x 16383 -> 1000 1.94 ->
    1.59.

    ``wide_vector_rows``: half-type rows on 8 bytes in 128-row programs (:func:`_widens_misaligned_rows`),
    which take the aligned rows' four-group steps."""
    if dtype != torch.float32:
        if folded:
            return 4, 1, 1, True
        if not aligned:
            return (4 if wide_vector_rows else 2), 1, 1, True
        return 4, 1, 1, groups_per_program >= _HALF_PIPELINED_GROUPS
    if groups_per_program >= _FLOAT32_PIPELINED_GROUPS:
        if aligned or (bands >= 2 and groups_per_program >= _FLOAT32_ELEMENT_TWO_BAND_MIN_GROUPS):
            return 2, 1, 1, True
        return 4, 1, 1, bands == 1 and groups_per_program <= _FLOAT32_ELEMENT_ONE_BAND_MAX_GROUPS
    return 1, 2, 3, False


#: Groups per program from which the half-type forward pipelines its steps.
_HALF_PIPELINED_GROUPS = 128
#: Groups per program from which the float32 forward takes pipelined two-group steps.
_FLOAT32_PIPELINED_GROUPS = 16
#: Rows loaded element by element in float32: groups per program from which two bands take pipelined
#: two-group steps, and up to which one band pipelines its four-group dots.
_FLOAT32_ELEMENT_TWO_BAND_MIN_GROUPS = 256
_FLOAT32_ELEMENT_ONE_BAND_MAX_GROUPS = 128


#: The transpose's step: four groups' chunks per dot, computed as z^T = tile @ y^T so that the
#: stacked tile is a 64-row register operand, without software pipelining. H100 sweep
#: (benchmarks/RESULTS.md): 1.35-2.3x faster than one group per dot as z = y @ tile^T.
_TRANSPOSE_GROUPS = 4
_TRANSPOSE_TILE_LEFT = True
_TRANSPOSE_STAGES = 1


def _transpose_pipelined(dtype: torch.dtype, bands: int, paired: bool, block_m: int, twins: bool = False) -> bool:
    """Whether a transpose launch issues each step's loads a step ahead (design 8). H100 sweep
    (``sweep_windowed.py --pipelined``, benchmarks/RESULTS.md): one-band transposes gain up to 1.17x
    (none loses more than 1%); launches per band at d = 4096 (four steps per program) lose 1.04-1.11x;
    the two-band launch gains 1.09-1.12x in float32 with 64-row programs, but loses with 32 rows
    (1.07x, n = 32) and in bfloat16 (1.25-1.35x). Twin windows (:func:`_twins_windows`) run out of
    registers pipelined (255 and spills in float32): H200, float32 with 8 windows 1.62-1.77 ->
    1.45-1.65x the aligned d unpipelined, two windows within 2% but at d = 4092 (1.22 -> 1.32x)."""
    if bands == 1:
        return not twins
    return paired and dtype == torch.float32 and block_m >= 64


def _partial_first(dtype: torch.dtype) -> bool:
    """Whether a band launch after the first reads the earlier bands' sums at the start of each step
    (before its tile and dot) rather than after the dot. H100 (benchmarks/RESULTS.md, "The earlier
    bands' sums read first"): float32 launches per band 1.12-1.18x faster (d = k = 4096: 9.97 ->
    8.44 ms), where the band-1 launch waited on that read; bfloat16 (64-row programs, which then hold
    a float32 workspace tile through the step) 1.03-1.05x slower."""
    return dtype == torch.float32


def _wide_rows(dtype: torch.dtype, n: int, pipelined: bool, folded: bool = False) -> bool:
    """Whether a half-type forward takes 128-row programs (still 4 warps): with pipelined steps
    (long runs), or wherever it folds rows (k off the lattice). H100 (``sweep_windowed.py
    --block-m 128 --warps 4 --pipelined``, benchmarks/RESULTS.md): 1.07x faster at 4096 x 2**17 and
    1.30x at 1024 x 2**20 -> 8192 than 64 rows, as the tile built per step serves twice the rows;
    float32 (whose three-pass step holds more registers) and 8 warps run slower. Folded forwards
    gain from them at short runs too (benchmarks/NOTES.md, "Any k", item 21: bfloat16 65536 x 2**14
    -> 1000-3500, 73-128 groups per program, 0.89-0.92x the time of 64 rows; 262144 x 4096 -> 8000,
    8 groups, 1.11x). Fewer rows than 128 would only fill the tile with masked rows."""
    return dtype != torch.float32 and n >= _WIDE_ROWS and (pipelined or folded)


#: Rows of a wide half-type forward program (:func:`_wide_rows`).
_WIDE_ROWS = 128


def _widens_misaligned_rows(dtype: torch.dtype, aligned: bool, folded: bool, splits: int) -> bool:
    """Whether a half-type forward of rows off 16 bytes (not ``aligned``, k on the lattice) takes
    128-row programs: where its 64-row programs are too few to fill the GPU, so that the launch would
    split d (``splits`` > 1), as with few rows and long ones. There the tile built per step serves
    twice the rows. H200 (benchmarks/NOTES.md, "Any d", "Few long rows"), ratio to the aligned call:
    rows loaded element by element, two-group steps and splits weighed in waves, 256 x (2**24 - 1) ->
    2048 2.23 -> 1.71x, 2048 x (2**18 - 1) -> 4096 2.07 -> 1.61x, 4096 x (2**17 - 1) -> 1024 2.04 ->
    1.56x, 1024 x (2**20 - 1) -> 8192 2.05 -> 1.62x; rows on 8 bytes, the aligned rows' four-group
    steps and splits that fill the GPU, 256 x (2**24 - 4) -> 2048 1.65 -> 1.13x, 1024 x (2**20 - 4) ->
    8192 1.47 -> 1.25x. Where 64-row programs fill it they stay as fast or faster (8192 x 65537 ->
    4096 1.55x against 1.61x; rows on 8 bytes at 16384-2**20 rows 1.13-1.31x against 1.18-1.45x,
    4096 x (2**17 - 4) -> 4096 1.37x against 1.34x)."""
    return dtype != torch.float32 and not aligned and not folded and splits > 1


def _vector_stores(block_m: int, writes_y: bool) -> bool:
    """Whether the tile forward stores its output tile in vectors (the kernel's VECTOR_STORES), as
    it may where the output's row stride allows. Not in wide programs that write Y itself (one
    split, and not a grouped launch, whose output is float32 partials): there, at 255 registers,
    the vectorised epilogue made the loop spill and repack X, and element stores took 0.68-1.01x
    the time (H100, bfloat16: 4096 x 2**17 -> 5120 1.07 -> 0.87 ms, 8192 x 2**16 -> 2160
    1.28 -> 0.87, -> 4096 1.07 -> 0.87; folded k within 1% or faster). Where they write float32
    partials, element stores leave sectors partly written and took 1.2-1.6x the time
    (4096 x 2**17 -> 4096 1.02 -> 1.47 ms, 1024 x 2**20 -> 8192 1.84 -> 2.87), so those keep
    vectors (benchmarks/NOTES.md, "Any k", item 15)."""
    return block_m < _WIDE_ROWS or not writes_y


def _shuffles(dtype: torch.dtype, fp32_passes: int, n: int, groups_per_program: int, nnz: int) -> bool:
    """Whether the forward runs on the CUDA cores (``sparse_jl_windowed_shuffle_forward_kernel``):
    one row tile (n <= 32, :data:`_SHUFFLE_MAX_ROWS`) and long runs of groups. H100
    (benchmarks/RESULTS.md, "The forward on the CUDA cores" and "Few rows on the CUDA cores"): at
    n = 32, d = 2**24 float32 takes 2.23 ms against the tile kernel's 3.16 (whose tile build serves
    only 32 rows there), and with n = 1-16 (16-row programs) it is 1.33-1.67x faster than the tile
    kernel on every shape measured (241-1986 groups per program); with more rows it is 1.0-1.4x
    slower than the tile kernel in float32. Half types with 17-32 rows (benchmarks/NOTES.md,
    "Grouped launches"): 1.08-1.66x faster than the tile kernel at d = 2**25, 0.91-1.24x at
    d = 2**22. Short runs are launch-bound and stay on the tile kernel.

    It is exact in float32, and also serves "high" and "medium" (``fp32_passes`` 2 and 1), which
    allow the tile kernel fewer bfloat16 passes: with one row tile their tile build still costs
    more (``python benchmarks/sweep_few_rows.py --precision high medium``: 1.1-2.7x slower where
    runs are long, GPT-2's grouped launch 1.7x under "high"; 0.93x at 32 x 2**22 -> 1024 under
    "high"), except one pass with 17-32 rows and nnz 8, whose tile kernel ran 1.3x faster at
    32 x 2**22 -> 1024."""
    if dtype == torch.float32 and fp32_passes == 1 and n > 16 and nnz < 16:
        return False
    return n <= _SHUFFLE_MAX_ROWS.get(dtype, 0) and groups_per_program >= _SHUFFLE_RUN_GROUPS


#: Most rows for which the CUDA-core forward runs: one row tile. Half types went to 16 before its
#: accumulators followed the chunks' slopes (1.27-1.51x faster at n = 1-16, 0.75-0.97x at 32 then).
_SHUFFLE_MAX_ROWS = {torch.float32: 32, torch.bfloat16: 32, torch.float16: 32}


#: Groups per program from which the CUDA-core forward runs (:func:`_shuffles`): it won at every
#: shape measured, down to 241.
_SHUFFLE_RUN_GROUPS = 240


def _gluon_forward(x: torch.Tensor, column_offset: int, groups_per_program: int) -> bool:
    """Whether a forward with k on the lattice runs the Gluon kernel
    (``sparse_jl_windowed_gluon_forward_kernel``): half types with more than 32 rows and 16-128
    groups per program, where it wins (design 11; H100, ``python benchmarks/sweep_gluon.py``,
    benchmarks/RESULTS.md "The forward in Gluon"): 1.04-1.11x at 16-128 groups per program (2**20 x
    1024 -> 64 / 256, 2**18 x 4096 -> 256 / 4096, 2**16 x 2**14 -> 1024, 2**16 x 2**13 -> 2048, 2**17
    x 2048 -> 512), 0.98-0.99x at 8 (2**20 x 1024 -> 1024), and 0.76-0.84x with runs of 512 groups
    and more, where the Triton kernel's pipelined 128-row programs are faster. And only where it
    can run (:func:`_gluon_supported`). Forwards that fold rows keep the Triton kernel, whose
    128-row programs ran them in 0.79-1.05x the Gluon kernel's time (H100, bfloat16, k = 1000-8000
    on 65536 x 2**14, 16384 x 2**15, 8192 x 2**16 and 262144 x 4096; benchmarks/NOTES.md, "Any k",
    item 21)."""
    return (
        x.shape[0] > 32
        and _GLUON_GROUPS[0] <= groups_per_program <= _GLUON_GROUPS[1]
        and _gluon_supported(x, column_offset)
    )


#: Groups per program, inclusive, over which half-type forwards run the Gluon kernel.
_GLUON_GROUPS = (16, 128)
#: (groups per step, copy stages) of the Gluon forward, in 128-row programs (64 below 128 rows): the
#: H100 sweep's best or within 6% of it on every shape that takes the kernel, where two groups and
#: three stages, best elsewhere by 1-5%, run 1.18-1.23x slower at A = 1 and at 2**16 x 2**14 -> 1024
#: (benchmarks/RESULTS.md, "The forward in Gluon").
_GLUON_STEPS = (4, 2)


def _gluon_supported(x: torch.Tensor, column_offset: int) -> bool:
    """Whether the Gluon forward can run on ``x``: a half type on an sm_90 GPU (its wgmma), compiled
    rather than interpreted, with triton's Gluon, and 16-byte aligned chunks for its cp.async
    copies (:func:`_aligned_chunks`)."""
    return (
        x.dtype in (torch.float16, torch.bfloat16)
        and x.device.type == "cuda"
        and not triton_interpreting()
        and _aligned_chunks(x, column_offset)
        and _sm90(x.device)
        and _gluon_importable()
    )


def _row_multiple(x: torch.Tensor, column_offset: int) -> int:
    """The kernels' MULTIPLE for x: the largest power of two up to 16 that divides its width, row
    stride and column offset (1 without unit column stride). The compiler proves the chunks'
    alignment from it (``_multiple`` in the kernels)."""
    return math.gcd(16, x.shape[1], x.stride(0), column_offset) if x.stride(1) == 1 else 1


def _aligned_chunks(x: torch.Tensor, column_offset: int) -> bool:
    """Whether x's chunks load as 16-byte vectors: x starts 16-byte aligned and its width, row stride
    and column offset keep every row so, whether or not they are multiples of 16 elements (a
    multiple of 8 half-type or 4 float32 elements is enough: :func:`_row_multiple`). Otherwise the
    chunks load element by element."""
    return x.data_ptr() % 16 == 0 and _row_multiple(x, column_offset) * x.element_size() >= 16


def _sm90(device: torch.device) -> bool:
    return device_capability(device.index if device.index is not None else torch.cuda.current_device()) == (9, 0)


@functools.cache
def _gluon_importable() -> bool:
    try:
        from ..kernels import sparse_jl_windowed_gluon  # noqa: F401
    except (ImportError, AttributeError):  # a Triton without Gluon or without its Hopper ops
        return False
    return True


def _forward_gluon(
    x: torch.Tensor,
    tables: WindowTables,
    out_features: int,
    nnz: int,
    column_offset: int,
    tiling: Tiling,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The forward through ``sparse_jl_windowed_gluon_forward_kernel``: the Triton forward's grid,
    splits and output, with 128-row programs (64 below 128 rows), one warpgroup each by default."""
    from ..kernels.sparse_jl_windowed_gluon import sparse_jl_windowed_gluon_forward_kernel

    if _fold(out_features, nnz):
        raise ValueError(
            f"Tiling(gluon=True) runs k on the lattice (16 * A * nnz); k = {out_features} with nnz = {nnz} "
            "folds rows, which the Triton kernel runs"
        )
    if not _gluon_supported(x, column_offset):
        raise ValueError(
            "Tiling(gluon=True) needs a float16/bfloat16 input on an sm_90 GPU with triton's Gluon, "
            "unit column stride, and its start, row stride, width and column offset multiples of 16 bytes"
        )
    n, d = x.shape
    bands = spec.band_count(nnz)
    block_n = tiling.blocks[0] if tiling.blocks else (128 if n >= 128 else 64)
    _, width, tiles, splits, per_split = _grid(
        x, nnz, tables.groups, tables.windows, tiling.splits, block_n, out_features, bands
    )
    groups_per_step = tiling.steps[0] if tiling.steps else _GLUON_STEPS[0]
    stages = tiling.num_stages or _GLUON_STEPS[1]
    warps = tiling.num_warps or 4
    if warps % 4 or block_n % (warps // 4 * 32):
        raise ValueError(
            f"Tiling(gluon=True) runs whole warpgroups over 32-row multiples: num_warps={warps} with {block_n} rows"
        )
    out, stride_split = forward_output(n, out_features, splits, x, out_dtype)
    sparse_jl_windowed_gluon_forward_kernel[(tiles, splits)](
        x,
        tables.words,
        tables.rotations,
        out,
        n,
        d,
        column_offset,
        tables.group_base,
        tables.groups,
        per_split,
        tables.windows,
        1.0 / math.sqrt(nnz),
        out_features,
        x.stride(0),
        out.stride(-2),
        out.stride(-1),
        stride_split,
        NNZ=nnz,
        BLOCKS=_band_blocks(nnz),
        BANDS=bands,
        BLOCK_N=block_n,
        WIDTH=max(width, _GLUON_MIN_WIDTH),
        GROUPS=groups_per_step,
        STAGES=stages,
        WARPS=warps,
        MULTIPLE=_row_multiple(x, column_offset),
        num_warps=warps,
    )
    return sum_splits(out, splits, out_dtype or x.dtype)


#: The wgmma's M: a warpgroup's accumulator has at least 64 rows (padding columns are not stored).
_GLUON_MIN_WIDTH = 64


def _num_warps(block_m: int, paired: bool = False) -> int:
    # The H100 sweeps in benchmarks/RESULTS.md: 64 rows and 4 warps beat 128 rows (with 4 or 8 warps)
    # by 5-20%, except in pipelined half-type forwards, whose 128-row programs run best with 4; 32
    # rows run best with 2 warps, except the transpose that sums two bands (two y
    # tiles, two dots a step): at n = 32, d = 2**24 it runs 1.43x (float32) and 1.08x (bfloat16)
    # faster with 4, and slower with 8.
    return 4 if block_m >= 64 or paired else 2


def _grid(
    x: torch.Tensor,
    nnz: int,
    groups: int,
    windows: int,
    splits=None,
    block_m=None,
    out_features: int | None = None,
    bands: int = 1,
    input_bytes: int | None = None,
    per_sm: int = 8,
    resident_per_sm: int | None = None,
    fewest_waves: bool = False,
    partial_cost: bool = False,
):
    """(BLOCK_M, WIDTH, row tiles * A * bands, splits, groups per split) for the (n, .) input
    ``x`` and ``groups`` table groups; ``out_features``: k for the forward, whose splits produce
    (n, k) partials to be summed; ``bands``: programs per (row tile, window); ``input_bytes``:
    the bytes the launch reads (default: x's); ``per_sm``: the programs per SM that the splits
    aim for; ``resident_per_sm``, ``fewest_waves`` and ``partial_cost``: see ``splits_to_fill``."""
    summed = out_features is not None
    n = x.shape[0]
    width = _width(nnz)
    block_m = block_m or _block_m(n, width, float32_transpose=not summed and x.dtype == torch.float32)
    tiles = math.ceil(n / block_m) * windows * bands
    if splits is None:
        # Group splits keep at least 16 groups of work each. 8 programs per SM: the n = 32,
        # d = 2**24 sweep ran 1.4x faster with 32 splits than with 16.
        splits = splits_to_fill(
            tiles,
            groups // 16,
            per_sm,
            x.device,
            (input_bytes or x.numel() * x.element_size(), n * padded_row(out_features) * 4) if summed else None,
            resident_per_sm,
            fewest_waves,
            partial_cost,
        )
    per_split = math.ceil(groups / splits)
    return block_m, width, tiles, math.ceil(groups / per_split), per_split


def forward(
    x: torch.Tensor,
    out_features: int,
    key0: int,
    key1: int,
    nnz: int,
    column_offset: int,
    tiling: Tiling = Tiling(),
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Y = x S^T: a program owns window a of one band's blocks for a row tile and multiplies, per
    group, the one chunk that lands there by its signed-permutation tile, several groups per step
    (for half types with short runs on Hopper, in Gluon: :func:`_gluon_forward`); or (one row tile
    of exact float32 or a half type, long runs: :func:`_shuffles`) permutes and adds the chunk's
    columns on the CUDA cores. A last row tile of few rows takes a launch of its own
    (:func:`_forward_main_rows`). Y is x's dtype, or ``out_dtype``."""
    if _folds_after(x.shape[0], x.shape[1], x.dtype, out_features, nnz):
        # Y' in float32, so that a folded row is rounded once, as the spec says, not twice
        lattice = _lattice_features(out_features, nnz)
        y_lattice = forward(x, lattice, key0, key1, nnz, column_offset, tiling, torch.float32)
        return _fold_after(y_lattice, out_features, nnz, out_dtype or x.dtype)
    tables = window_tables(x.shape[1], out_features, key0, key1, nnz, column_offset, x.device)
    main = _forward_main_rows(x.shape[0])
    y = _forward(x[:main], tables, out_features, nnz, column_offset, tiling, out_dtype=out_dtype)
    if main < x.shape[0]:  # the concatenation copies Y once: k / d of the bytes the launches read
        rest = _forward(x[main:], tables, out_features, nnz, column_offset, tiling, out_dtype=out_dtype)
        y = torch.cat((y, rest))
    return y


def _lattice_features(out_features: int, nnz: int) -> int:
    """k' = 16 A nnz: the lattice k whose blocks hold every padded row of k's (docs/spec.md 2b)."""
    return spec.WINDOW * spec.windows_per_block(out_features, nnz) * nnz


def _folds_after(rows: int, columns: int, dtype: torch.dtype, out_features: int, nnz: int) -> bool:
    """Whether a forward of ``rows`` x ``columns`` runs the lattice forward at k' = 16 A nnz and folds
    its padded rows after (:func:`_fold_after`), where k folds rows and the input has at least 12x
    k' columns (Y' and its fold move about 3 k' / d of the input's bytes): with at most 1024 rows,
    and in float32 with fewer than 8 blocks. There the folding kernel costs more than the fold:
    H100 (benchmarks/NOTES.md, "Any k", items 17, 24 and 26), time over the lattice k above,
    folding kernel -> lattice forward and fold. bfloat16, k = 1000-5000: 16 and 32 x 2**24
    1.09-2.14 -> 1.00, 256 x 2**22 and 512 x 2**21 1.10-1.57 -> 0.99-1.01, 1024 x 2**20 (k =
    300-13836) 0.79-1.33 -> 0.87-1.02; float32 16 x 2**24 k = 200 / 1000 / 3000 5.18 / 1.96 / 1.24
    -> 1.00-1.01; float32 with nnz 5-7 1.12-1.50 -> 0.99-1.12 on 65536 x 2**14, 4096 x 2**17 and
    262144 x 4096 (d = 12-26 k' there). Not taken: 2048 rows and more, where the fold ran 0.97-1.06x
    the folding kernel's time at 2048 and 4096 rows (1.9x at 4096 x 2**17 -> 1500), up to 1.55x at
    262144 x 4096 in bfloat16, and up to 1.41x in float32 with 8 blocks or more (65536 x 2**14,
    262144 x 4096)."""
    if _fold(out_features, nnz) == 0 or columns < _FOLDS_AFTER_MIN_GROWTH * _lattice_features(out_features, nnz):
        return False
    return rows <= _FOLDS_AFTER_MAX_ROWS or (dtype == torch.float32 and nnz < _FOLDS_AFTER_BELOW_NNZ)


#: Rows up to which every forward with folded rows folds them after the lattice forward; blocks
#: below which float32 does at any rows; how many times the lattice k' the input's columns must be.
_FOLDS_AFTER_MAX_ROWS = 1024
_FOLDS_AFTER_BELOW_NNZ = spec.BAND
_FOLDS_AFTER_MIN_GROWTH = 12


def _fold_after(y_lattice: torch.Tensor, out_features: int, nnz: int, dtype: torch.dtype) -> torch.Tensor:
    """Y (``dtype``) at k from Y' at the lattice k' = 16 A nnz (the same words and rotations): row r
    of block t is padded row r of that block, plus padded row r + size_t where that is under 16 A
    (docs/spec.md 2b: padded row u lands on row u mod size_t), summed in float32 and rounded once,
    in one pass (``fold_rows_kernel``), which CUDA graphs capture; each row takes at most one fold,
    so the result is deterministic."""
    from ..kernels.sparse_jl_windowed import fold_rows_kernel

    n = y_lattice.shape[0]
    out = _buffers.empty((n, out_features), dtype, y_lattice.device)
    block_m, block_k = 16, 256
    fold_rows_kernel[(math.ceil(n / block_m), math.ceil(out_features / block_k))](
        y_lattice,
        out,
        n,
        out_features,
        spec.windows_per_block(out_features, nnz),
        y_lattice.stride(0),
        y_lattice.stride(1),
        out.stride(0),
        out.stride(1),
        NNZ=nnz,
        BLOCK_M=block_m,
        BLOCK_K=block_k,
    )
    return out


def _forward_main_rows(n: int) -> int:
    """The rows of a forward's first launch; a second takes the rest. A last row tile (64 rows) of
    fewer than 16 rows costs its programs' whole work, over 3% of the launch with at most 32 full
    tiles; a launch of the full tiles plus one of the few rows left (on the few-row paths) is
    cheaper. H100 (benchmarks/NOTES.md, "Any n"), 1024 x 2**20 -> 2560-4096, n = 1025 and 1039:
    float32 1.17-1.21x the time at n = 1024 in one launch, 1.03-1.04x in two; bfloat16 1.12x and
    1.06x; at 65536 rows the nearly empty tile costs nothing measurable."""
    tail = n % 64
    return n - tail if 0 < tail < 16 and 64 * 4 <= n < 64 * 33 else n


def forward_blocks(
    blocks: list[tuple[int, torch.Tensor]],
    out_features: int,
    key0: int,
    key1: int,
    nnz: int,
    column_offset: int,
    tiling: Tiling = Tiling(),
    grouped: GroupedBlocks | None = None,
) -> torch.Tensor:
    """float32 (n, k): the sum over ``blocks`` of ``forward(x, ..., column_offset + first)``, pairs
    (first column, x) of a virtual (n, columns) matrix, in one table launch and one forward launch.
    Each split of the launch runs its share of the blocks' groups as segments (``_segment``) and the
    splits' partials are summed in a fixed order, so the result is bitwise reproducible but rounds
    differently from the per-block sum. The caller (``sjlt.functional.sparse_jl_blocks``) passes
    CUDA blocks (n, ...) of one dtype and row count n that :func:`joins_grouped_launch`, with their
    ``grouped`` plan where it keeps one for blocks like these; x_ptr of the launch is the first
    block, the others are element offsets from it. Where k folds rows, few rows fold after the
    launch at the lattice k' (:func:`_folds_after`)."""
    windows = spec.windows_per_block(out_features, nnz)
    if grouped is None:
        grouped = GroupedBlocks(blocks, column_offset, windows)
    base = blocks[0][1]
    n = base.shape[0]
    x = base.as_strided((n, 1), (base.stride(0), 1))  # the launch's base address, rows and dtype
    offsets = grouped.offsets(blocks, x)
    folds_after = _folds_after(n, grouped.end - grouped.first, x.dtype, out_features, nnz)
    launched = _lattice_features(out_features, nnz) if folds_after else out_features  # the same A and tables
    tables = window_tables(grouped.end - grouped.first, launched, key0, key1, nnz, grouped.first, x.device)
    y = _forward(x, tables, launched, nnz, column_offset, tiling, (grouped, offsets))
    return _fold_after(y, out_features, nnz, torch.float32) if folds_after else y  # grouped sums are float32


#: Most spans a block may add to a grouped launch (``block_spans``): each costs at least one group
#: of the launch and a row of its segment table, so a block cut finer takes ``sparse_jl`` on its
#: reshape (a copy) instead. A guard against tables of millions of rows, not a measured crossover.
_MAX_SPANS_PER_BLOCK = 4096


def block_spans(block: torch.Tensor) -> tuple[np.ndarray, int] | None:
    """A block's columns (its entries past the first dimension, in row-major order) as spans, runs
    of columns contiguous in every row: (each span's element offset from the block's start, the
    spans' width), or None where its last dimension is strided or it would take more than
    _MAX_SPANS_PER_BLOCK spans. One span for a contiguous block; otherwise one per index of the
    dimensions left of its contiguous tail: vmap lays an embedding's per-example gradient out as
    (batch, rows, width) with the batch between the rows."""
    shape, strides = block.shape[1:], block.stride()[1:]
    dim, width = len(shape), 1
    while dim and (shape[dim - 1] == 1 or strides[dim - 1] == width):
        dim -= 1
        width *= shape[dim]
    if dim == len(shape) and shape:
        return None
    if math.prod(shape[:dim]) > _MAX_SPANS_PER_BLOCK:
        return None
    starts = np.zeros(1, dtype=np.int64)
    for size, stride in zip(shape[:dim], strides[:dim]):
        starts = (starts[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return starts, width


def joins_grouped_launch(block: torch.Tensor) -> bool:
    """Whether a non-empty (n, ...) block can be read by a grouped launch: its columns are spans
    (:func:`block_spans`), each row x.stride(0) after the previous one."""
    return block.is_contiguous() or block_spans(block) is not None


class GroupedBlocks:
    """The blocks of a grouped launch as the kernel reads them, fixed by their shapes, strides and
    first columns but not their addresses: a grouped call repeated with blocks like these (TRAK's
    gradients, every step) keeps this plan (``sjlt.functional``) and fills in the addresses per
    call (:meth:`offsets`). ``spans``: (spans, 6) int64 rows of index, width, first column of S,
    row stride, and first and end group of the table (``windows`` chunks of 16 columns per group);
    the index becomes the span's element offset in the segment table (:meth:`segments`)."""

    def __init__(self, blocks: list, column_offset: int, windows: int):
        owners, starts, widths, columns, strides = [], [], [], [], []
        for index, (first, block) in enumerate(blocks):
            span_starts, width = block_spans(block)  # not None: the caller's blocks join grouped launches
            owners.append(np.full(len(span_starts), index, dtype=np.int64))
            starts.append(span_starts)
            widths.append(np.full(len(span_starts), width, dtype=np.int64))
            columns.append(first + column_offset + width * np.arange(len(span_starts), dtype=np.int64))
            strides.append(np.full(len(span_starts), block.stride(0), dtype=np.int64))
        self.owners, self.starts = np.concatenate(owners), np.concatenate(starts)
        widths, columns, strides = np.concatenate(widths), np.concatenate(columns), np.concatenate(strides)
        self.first, self.end = int(columns.min()), int((columns + widths).max())
        group_base = _group_of(self.first, windows)  # window_tables' for [first, end)
        g_begin = _group_of(columns, windows) - group_base
        g_end = _group_of(columns + widths - 1, windows) + 1 - group_base
        self.spans = np.stack([np.arange(len(widths)), widths, columns, strides, g_begin, g_end], axis=1)
        self.groups = int((g_end - g_begin).sum())
        self.columns = int(widths.sum())
        self._multiple = math.gcd(spec.WINDOW, int(np.gcd.reduce(self.spans[:, 1:4].ravel())))
        self._cuts: dict = {}  # groups per split -> (segment rows with span indices, split starts)

    def offsets(self, blocks: list, x: torch.Tensor) -> np.ndarray:
        """Each span's element offset from x (the first block) for these blocks' addresses."""
        addresses = np.fromiter((block.data_ptr() for _, block in blocks), dtype=np.int64, count=len(blocks))
        offsets, remainders = np.divmod(addresses - x.data_ptr(), x.element_size())
        if remainders.any():  # a view reinterpreted from another dtype at an odd byte offset
            raise ValueError(
                f"a block's data starts {int(remainders[remainders != 0][0])} bytes off its {x.dtype} elements "
                f"relative to the first block's; pass a copy of it (block.clone())"
            )
        return offsets[self.owners] + self.starts

    def segments(self, per_split: int, offsets: np.ndarray, device: torch.device) -> _Segments:
        """The segment table of a launch whose splits take ``per_split`` groups each, with the
        spans' ``offsets``, uploaded in one copy."""
        cut = self._cuts.get(per_split)
        if cut is None:
            cut = self._cuts[per_split] = _cut_spans(self.spans, per_split)
        rows, starts = cut
        table = rows.copy()
        table[:, 0] = offsets[rows[:, 0]]
        packed = _upload(np.concatenate([table.ravel(), starts]), device)
        multiple = math.gcd(self._multiple, int(np.gcd.reduce(offsets)))
        return _Segments(packed[: table.size].view(-1, 6), packed[table.size :], multiple)


#: Tensor-core forward programs an SM holds at once (float32 and the half types' 128-row programs:
#: 255 registers a thread, 4 warps, so two fit its register file), from which their d-splits are
#: weighed in waves (``splits_to_fill``; H100, benchmarks/NOTES.md "Forward splits by waves").
_TILE_PROGRAMS_RESIDENT_PER_SM = 2

#: Programs per SM that the one-warp CUDA-core forward's splits aim for: H100 (benchmarks/NOTES.md,
#: "Grouped launches"), n = 16 and 32 at d = 2**25, k = 2048 and 8192, with loads two groups ahead:
#: 1.0-1.2x faster than with 8, and 1.12-1.47x in all against the previous kernel (8 per SM, one
#: group ahead, two warps at n = 32 and k = 8192).
_SHUFFLE_PROGRAMS_PER_SM = 64
#: Groups the CUDA-core forward sorts by slope at a time (``_shuffle_run``), each program's scratch
#: of int32 chunk indices: about 16 frame changes per sort. H100 (benchmarks/NOTES.md, "Grouped
#: launches"): 64 keeps the previous kernel's 168 registers at 16 rows; 256 sorted in one [256, 16]
#: one-hot took 253 and ran no faster than before.
_SHUFFLE_SLOTS = 64
#: Programs per SM that a grouped launch's splits aim for. H100, GPT-2 small's 148 gradients
#: (benchmarks/NOTES.md, "Grouped launches"): n = 16 float32 ran 1.25-1.4x faster with 32-64 than
#: with 8 (k = 2048: 14.8 -> 10.7 ms; 8192: 13.3 -> 10.6), bfloat16 1.02-1.2x, n = 32 1.0-1.23x;
#: 512 lost 1.6x at k = 8192.
_GROUPED_PROGRAMS_PER_SM = 64


class _Segments(NamedTuple):
    """A grouped forward's work (``_segment`` in the kernels): the (segments, 6) int64 table, each
    split's first segment ((splits + 1,) int64) and the kernels' MULTIPLE: the largest power of two
    up to 16 dividing every offset, length, column offset and row stride."""

    table: torch.Tensor
    split_starts: torch.Tensor
    multiple: int


def _cut_spans(spans: np.ndarray, per_split: int) -> tuple[np.ndarray, np.ndarray]:
    """The spans (``GroupedBlocks.spans``) cut into runs of ``per_split`` groups in order: split s
    runs groups [s * per_split, (s + 1) * per_split) of their concatenation. Returns the segments'
    rows (a span's row, its groups cut) and each split's first segment ((splits + 1,) int64).
    Vectorised: a Python loop over the pieces took about 1 ms of the host's time per GPT-2 call."""
    lengths = spans[:, 5] - spans[:, 4]
    firsts = np.cumsum(lengths) - lengths  # each span's first group in the concatenation
    total = int(firsts[-1] + lengths[-1])
    split_firsts = np.arange(0, total, per_split, dtype=np.int64)
    cuts = np.union1d(firsts, split_firsts)  # where a segment starts: a span's or a split's start
    span = np.searchsorted(firsts, cuts, side="right") - 1
    rows = spans[span]
    rows[:, 4] += cuts - firsts[span]
    rows[:, 5] = rows[:, 4] + np.diff(cuts, append=total)
    return rows, np.append(np.searchsorted(cuts, split_firsts), len(cuts))


def _upload(values: np.ndarray, device: torch.device) -> torch.Tensor:
    """``values`` as a tensor on ``device``; to a GPU from pinned memory, asynchronously: a copy
    from pageable memory would make the host wait for the work already queued (the table launch)."""
    host = torch.from_numpy(values)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _forward(
    x: torch.Tensor,
    tables: WindowTables,
    out_features: int,
    nnz: int,
    column_offset: int,
    tiling: Tiling,
    grouped: tuple[GroupedBlocks, np.ndarray] | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The forward's launch over x (with ``grouped``, the blocks' plan and their spans' offsets from
    x: over the blocks, see :func:`forward_blocks`); Y in x's dtype or ``out_dtype``."""
    from ..kernels.sparse_jl_windowed import (
        sparse_jl_windowed_forward_kernel,
        sparse_jl_windowed_shuffle_forward_kernel,
    )

    n, d = x.shape
    plan = grouped[0] if grouped is not None else None
    groups = tables.groups if plan is None else plan.groups
    input_bytes = None if plan is None else plan.columns * n * x.element_size()
    per_sm = 8 if plan is None else _GROUPED_PROGRAMS_PER_SM
    # the half types' 64-row programs are not weighed in waves: unsplit they ran 1.02-1.07x slower
    resident = _TILE_PROGRAMS_RESIDENT_PER_SM if plan is None and x.dtype == torch.float32 else None
    bands = spec.band_count(nnz)
    fp32_passes, dot_type = dot_config(x.dtype)

    def grid(block_m, programs_per_sm=per_sm, resident_per_sm=None, **weighing):
        """This launch's ``_grid`` at BLOCK_M ``block_m`` (None: the default)."""
        return _grid(
            x,
            nnz,
            groups,
            tables.windows,
            tiling.splits,
            block_m,
            out_features,
            bands,
            input_bytes,
            programs_per_sm,
            resident_per_sm,
            **weighing,
        )

    block_m, width, tiles, splits, per_split = grid(
        tiling.blocks[0] if tiling.blocks else None, resident_per_sm=resident, fewest_waves=resident is not None
    )
    fold = _fold(out_features, nnz)
    if plan is None and (
        not fold and _gluon_forward(x, column_offset, per_split) if tiling.gluon is None else tiling.gluon
    ):
        return _forward_gluon(x, tables, out_features, nnz, column_offset, tiling, out_dtype)
    shuffles = _shuffles(x.dtype, fp32_passes, n, per_split, nnz) if tiling.shuffle is None else tiling.shuffle
    if shuffles and per_sm != _SHUFFLE_PROGRAMS_PER_SM:
        block_m, width, tiles, splits, per_split = grid(block_m, _SHUFFLE_PROGRAMS_PER_SM)
    if not shuffles:
        # a grouped launch keeps the aligned steps: its misaligned segments were not measured
        aligned = plan is not None or _aligned_chunks(x, column_offset)
        folded = fold > 0 and plan is None
        groups_per_dot, unroll, stages, pipelined = _forward_steps(x.dtype, per_split, aligned, folded, bands)
        if not tiling.blocks and aligned and _wide_rows(x.dtype, n, pipelined, folded):
            # Splits: a fold over two bands or more weighs its splits against their partials'
            # cost (its kernel writing partials is slow), one band in waves, the lattice and
            # grouped launches as the rest of the forward.
            one_band_fold = folded and bands == 1
            block_m, width, tiles, splits, per_split = grid(
                _WIDE_ROWS,
                resident_per_sm=(
                    None if plan is not None or (folded and not one_band_fold) else _TILE_PROGRAMS_RESIDENT_PER_SM
                ),
                fewest_waves=one_band_fold,
                partial_cost=folded and not one_band_fold,
            )
        elif not tiling.blocks and plan is None and _widens_misaligned_rows(x.dtype, aligned, folded, splits):
            # rows on 8 bytes move in vectors and split as the aligned rows' four-group steps;
            # element loads lose more to partials, so their splits are weighed in waves
            vector_rows = _row_multiple(x, column_offset) * x.element_size() >= 8
            groups_per_dot, unroll, stages, pipelined = _forward_steps(
                x.dtype, per_split, aligned, folded, bands, wide_vector_rows=vector_rows
            )
            block_m, width, tiles, splits, per_split = grid(
                _WIDE_ROWS,
                resident_per_sm=None if vector_rows else _TILE_PROGRAMS_RESIDENT_PER_SM,
                fewest_waves=not vector_rows,
            )
    if plan is None:
        out, stride_split = forward_output(n, out_features, splits, x, out_dtype)
        segments = _Segments(tables.words, tables.words, 1)  # unread
    else:
        out = _buffers.empty((splits, n, out_features), torch.float32, x.device)
        stride_split = out.stride(0)
        segments = plan.segments(per_split, grouped[1], x.device)
    spill = _spill(n, splits, nnz, fold, out)
    arguments = (
        x,
        tables.words,
        tables.rotations,
        out,
        spill,
        segments.table,
        segments.split_starts,
        n,
        d,
        column_offset,
        tables.group_base,
        tables.groups,
        per_split,
        tables.windows,
        1.0 / math.sqrt(nnz),
        out_features,
        x.stride(0),
        x.stride(1),
        out.stride(-2),
        out.stride(-1),
        stride_split,
    )
    layout = dict(
        NNZ=nnz,
        BLOCKS=_band_blocks(nnz),
        BANDS=bands,
        FOLDS=fold > 0,
        SEGMENTS=plan is not None,
        MULTIPLE=segments.multiple if plan is not None else _row_multiple(x, column_offset),
    )
    if shuffles:
        slots = _buffers.empty((tiles * splits * _SHUFFLE_SLOTS,), torch.int32, x.device)
        sparse_jl_windowed_shuffle_forward_kernel[(tiles, splits)](
            *arguments[:7],
            slots,
            *arguments[7:],
            **layout,
            BLOCK_M=block_m,
            SLOTS=_SHUFFLE_SLOTS,
            num_warps=tiling.num_warps or 1,
            num_stages=1,
        )
    else:
        groups_per_dot, unroll = tiling.steps or (groups_per_dot, unroll)
        pipelined = (pipelined and unroll == 1) if tiling.pipelined is None else tiling.pipelined
        if pipelined and unroll != 1:
            raise ValueError(f"Tiling(pipelined=True) takes one dot per step, not steps={tiling.steps}")
        sparse_jl_windowed_forward_kernel[(tiles, splits)](
            *arguments,
            out.stride(-2),
            **layout,
            FP32_PASSES=fp32_passes,
            DOT_DTYPE=dot_type,
            BLOCK_M=block_m,
            WIDTH=width,
            GROUPS=groups_per_dot,
            UNROLL=unroll,
            PROMOTE_EVERY=promote_every(fp32_passes, math.ceil(per_split / (groups_per_dot * unroll)), tiling),
            PIPELINED=pipelined,
            VECTOR_STORES=_vector_stores(block_m, writes_y=plan is None and splits == 1),
            num_warps=tiling.num_warps or _num_warps(block_m),
            num_stages=tiling.num_stages or stages,
        )
    y = sum_splits(out, splits, out_dtype or x.dtype) if plan is None else out.sum(0) if splits > 1 else out[0]
    return _add_fold(y, spill, out_features, nnz, fold)


def transpose(
    y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int, column_offset: int, tiling: Tiling = Tiling()
) -> torch.Tensor:
    """Z = y S. A chunk lands in a different window in each band. With one band, or two when the
    programs have long runs of groups (:func:`_pairs_bands`), one launch computes every column
    whole (two bands: the groups in order of their band-1 shift, so both y tiles stay
    loop-invariant); otherwise one launch per band adds its terms to the bands before it in
    float32: in Z itself for float32, else in a float32 workspace of at most
    ``sjlt.backends.workspace_bytes`` per slab of rows and groups, the last band rounding into Z.
    Splits own disjoint groups, so every column is written by one program per launch. Off the
    lattice y is first unfolded to the lattice's k' where that pays (:func:`_unfolds_y`);
    elsewhere the kernel folds the padded rows itself. Rows past a multiple of 16 take launches of
    their own (:func:`_transpose_main_rows`)."""
    bands = spec.band_count(nnz)
    if _unfolds_y(y, in_features, bands, nnz):
        y = _unfolded(y, nnz)
    n, k = y.shape
    tables = window_tables(in_features, k, key0, key1, nnz, column_offset, y.device)
    z = _buffers.empty((n, in_features), y.dtype, y.device)
    main = _transpose_main_rows(n)
    _transpose_rows(y[:main], z[:main], tables, nnz, in_features, column_offset, tiling)
    if main < n:
        _transpose_rows(y[main:], z[main:], tables, nnz, in_features, column_offset, tiling)
    return z


def _transpose_main_rows(n: int) -> int:
    """The rows of a transpose's first launch, a multiple of 16 from 512 rows on; a second takes the
    rest. The kernel specialises on a row count that 16 divides: bfloat16 at n = 4095 compiles to
    145 registers against 128 at 4096, 3 programs per SM against 4 (benchmarks/NOTES.md, "Any k",
    item 19). H100 ("Any n"), n = m - 1, m + 1, m + 15 against m: one launch 1.11-1.31x at
    m = 1024-4096 (both dtypes, d = 2**17-2**20), two launches 1.00-1.06x; at m = 256 two lost
    (1.02-1.07x -> 1.13-1.19x at n = 255), at 65536 neither mattered."""
    return n - n % 16 if n >= 512 else n


def _transpose_rows(
    y: torch.Tensor,
    z: torch.Tensor,
    tables: WindowTables,
    nnz: int,
    in_features: int,
    column_offset: int,
    tiling: Tiling,
):
    """z = y S for rows of y and z (see :func:`transpose`)."""
    n, k = y.shape
    bands = spec.band_count(nnz)
    if _pads_y(y, in_features, bands):
        y = resized(y, padded_row(k))[:, :k]
    if bands == 1 or _pairs_bands(y, nnz, tables, tiling):
        _transpose_band(
            y, z, z, 0, 0, tables, 0, nnz, in_features, column_offset, 0, tables.groups, tiling, paired=bands == 2
        )
        return
    if y.dtype == torch.float32:
        for band in range(bands):
            _transpose_band(y, z, z, 0, 0, tables, band, nnz, in_features, column_offset, 0, tables.groups, tiling)
        return
    rows, groups = _transpose_slab(n, tables.windows, tables.groups)
    chunk = spec.WINDOW * tables.windows  # input columns per group
    first_column = tables.group_base * chunk - column_offset  # of table group 0, in z (may be < 0)
    for r0 in range(0, n, rows):
        y_rows, z_rows = y[r0 : r0 + rows], z[r0 : r0 + rows]
        for g0 in range(0, tables.groups, groups):
            g1 = min(g0 + groups, tables.groups)
            col0 = max(0, first_column + g0 * chunk)
            width = min(in_features, first_column + g1 * chunk) - col0
            sums = _buffers.empty((y_rows.shape[0], width), torch.float32, y.device)
            for band in range(bands):
                last = band == bands - 1
                _transpose_band(
                    y_rows,
                    z_rows if last else sums,
                    sums,
                    0 if last else col0,
                    col0,
                    tables,
                    band,
                    nnz,
                    in_features,
                    column_offset,
                    g0,
                    g1,
                    tiling,
                )


def _unfolds_y(y: torch.Tensor, in_features: int, bands: int, nnz: int) -> bool:
    """Whether a transpose unfolds y (:func:`_unfolded`) and runs the lattice kernel on the copy,
    where S folds rows (k off the lattice):

    - a half-type y, where Z has at least 2x y's columns with two bands or more, or, with one band,
      8x them and at least 4096 rows: there the kernel's fold cost more than the copy;
    - a float32 y whose row stride is off 16 (k off 16: the kernel then loads y element by
      element), with two bands where Z has 2x y's columns but, from 33 rows, under the 16x from
      which y is padded instead (:func:`_pads_y`), or with three bands or more where Z has at
      least y's columns: there the copy into aligned rows pays for itself.

    H100 (benchmarks/NOTES.md, "Any k", items 16, 23 and 25), unfolded / folded time with the copy.
    bfloat16: two bands, 4096 x 2**17 k = 2500-7000 0.69-0.79, 65536 x 2**14 k = 2100-3500
    0.85-0.91 and 4205-8000 (Z 2.0-3.9x y's columns) 0.88-0.98, 1024 x 2**20 0.65-0.68; one band,
    65536 x 2**14 k = 500-1500 0.95-0.96, 16384 x 2**15 0.96-0.97. Not taken there: Z under 2x y's
    columns (262144 x 4096 -> 2100-5000: 1.02-1.14x), one band with Z under 8x (262144 x 4096 ->
    1000 / 1500: 1.08x / 1.15x) or few rows (1024 x 2**20 -> 1000: 1.06x). float32: two bands,
    65536 x 2**14 k = 2500-5000 0.92-0.98, 32768 x 2**15 k = 2500-7774 0.92-0.99, 16384 x 2**15
    k = 3000 / 5000 0.95 / 0.93, 8192 x 2**16 k = 4205-7774 0.91-0.95; four bands (k = 9268-13836),
    32768 x 2**15 0.89-0.97, 16384 x 2**15 0.89-0.96, 8192 x 2**16 0.89-0.96, 4096 x 2**17 0.91-0.96,
    1024 x 2**20 0.87-0.95. Not taken there: y's rows on 16 (k = 6000 / 8000 on 65536 x 2**14:
    1.12x / 1.13x), one band (k = 1000 / 1500: 1.03x / 1.05x), two bands with y padded (8192 x
    2**16 k = 2500 / 3000, 4096 x 2**17, 1024 x 2**20: 1.10-1.27x, the padded folding kernel
    beating the lattice one) or Z under 2x y's columns (262144 x 4096: 1.08-1.43x), four bands
    with Z under y's columns (262144 x 4096 1.17x). float32 with y padded, two bands, k =
    2500-7000 (NOTES.md, "Any k", item 27): 16 and 32 x 2**24 unfolded 0.98-1.03x the lattice k
    above, padded 1.02-1.34x; 64-256 rows unfolded 0.99-1.03x, padded 0.80-0.85x. H200 (NOTES.md,
    "Any k", items 29 and 30): four bands with Z 1.05-1.77x y's columns, 65536 x 2**14 k =
    9268-15629, 0.86-0.98 (the H100 had measured 0.92-1.04 there); two bands with Z 2.05-2.98x y's
    columns and y's rows off 16, 65536 x 2**14 k = 5500-7774, 16384 x 12000 k = 4500 / 5800 and
    131072 x 8192 k = 3000 / 3522, 0.89-0.96 (the H100 1.07 at k = 7774)."""
    if _fold(y.shape[1], nnz) == 0:
        return False
    n, k = y.shape
    if y.dtype == torch.float32:
        if bands == 1 or y.stride(0) % spec.WINDOW == 0:
            return False
        if bands == 2:
            few_rows = n <= _UNFOLDED_FLOAT32_MAX_PADDED_ROWS
            return k * _UNFOLDED_Y_MIN_GROWTH <= in_features and (few_rows or not _pads_y(y, in_features, bands))
        return k <= in_features
    if bands == 1:
        return k * _UNFOLDED_ONE_BAND_MIN_GROWTH <= in_features and n >= _UNFOLDED_ONE_BAND_MIN_ROWS
    return k * _UNFOLDED_Y_MIN_GROWTH <= in_features


#: How many times y's columns Z must have for a transpose to unfold y (:func:`_unfolds_y`): half
#: types with two bands or more and float32 with two; half types with one band; and the rows a
#: one-band transpose needs to.
_UNFOLDED_Y_MIN_GROWTH = 2
_UNFOLDED_ONE_BAND_MIN_GROWTH = 8
_UNFOLDED_ONE_BAND_MIN_ROWS = 4096
#: The most rows with which a float32 two-band transpose unfolds y rather than pad it where Z has
#: _PADDED_Y_MIN_GROWTH times y's columns.
_UNFOLDED_FLOAT32_MAX_PADDED_ROWS = 32


def _unfolded(y: torch.Tensor, nnz: int) -> torch.Tensor:
    """y as the (n, k' = 16 A nnz) input of the lattice transpose: column 16 A t + u holds y's column
    at the row that padded row u of block t folds onto, so that its lattice transpose is y S
    (``unfold_rows_kernel``). Half types with an even k and row stride and long rows move column
    pairs as 4-byte words (:func:`_moves_pairs`)."""
    from ..kernels.sparse_jl_windowed import unfold_rows_kernel

    n, k = y.shape
    out = _buffers.empty((n, _lattice_features(k, nnz)), y.dtype, y.device)
    pairs = 2 if _moves_pairs(y, out.shape[1]) else 1
    source, target = (y.view(torch.int32), out.view(torch.int32)) if pairs == 2 else (y, out)
    block_m, block_u = _UNFOLD_TILES[source.element_size()]
    unfold_rows_kernel[(math.ceil(n / block_m), math.ceil(target.shape[1] / block_u))](
        source,
        target,
        n,
        k,
        spec.windows_per_block(k, nnz),
        source.stride(0),
        source.stride(1),
        NNZ=nnz,
        BLOCK_M=block_m,
        BLOCK_U=block_u,
        PAIRS=pairs,
    )
    return out


def _moves_pairs(y: torch.Tensor, lattice_k: int) -> bool:
    """Whether ``unfold_rows_kernel`` moves y's columns in pairs, as 4-byte words in 1 x 1024 tiles:
    2-byte values, k and the row stride even, unit column stride, a 4-byte aligned start, and
    unfolded rows of at least _PAIRED_UNFOLD_MIN_WORDS words. H200 (benchmarks/NOTES.md, "Any k",
    item 30), bfloat16 unfolds into 3200-3968 words: 65536 x 6192 / 7774 0.72 / 0.91 -> 0.60 ms
    (the copy floor 0.39 / 0.49); into 512 and 1280 words, whose 1024-word tiles run part empty,
    1.07-1.29x slower (65536 x 1000, 262144 x 2500)."""
    return (
        lattice_k // 2 >= _PAIRED_UNFOLD_MIN_WORDS
        and y.element_size() == 2
        and y.shape[1] % 2 == 0
        and y.stride(0) % 2 == 0
        and y.stride(1) == 1
        and y.data_ptr() % 4 == 0
    )


#: (rows, columns) per program of ``unfold_rows_kernel`` by the bytes of the values it moves. H200
#: (NOTES.md, "Any k", item 30): float32 4-20% faster in 1 x 1024 than in 16 x 256 tiles (65536 x
#: 7774 -> k' = 7936 1.27 -> 1.07 ms, 1000 -> 1024 0.167 -> 0.134), 2-byte values 5-16% slower.
_UNFOLD_TILES = {4: (1, 1024), 2: (16, 256)}
#: The unfolded row length, in 4-byte words, from which half types move column pairs.
_PAIRED_UNFOLD_MIN_WORDS = 2048


def _pads_y(y: torch.Tensor, in_features: int, bands: int) -> bool:
    """Whether a transpose copies y into rows padded to 16 elements: where y's row stride is not a
    multiple of 16 (k off 16), Z has at least 16x y's columns, and y is a half type or S has two
    bands. The kernels specialise on strides that 16 divides. H100 (benchmarks/NOTES.md, "Any k",
    item 14), 4096 x 2**17: bfloat16 k = 1000 0.71 -> 0.64 ms and 2100 1.91 -> 1.32, float32
    k = 2100-7000 1.06-1.16x faster, the copy included; float32 with one band gained nothing and
    lost 1.2x at k = 500; on 65536 x 2**14, where y is 6-43% of Z's size, the copy cost more than
    it saved."""
    return (
        bool(y.stride(0) % spec.WINDOW)
        and y.shape[1] * _PADDED_Y_MIN_GROWTH <= in_features
        and (y.dtype != torch.float32 or bands > 1)
    )


#: How many times y's columns Z must have for a transpose to pad y (:func:`_pads_y`).
_PADDED_Y_MIN_GROWTH = 16


#: Groups per window and program from which the two-band transpose runs in one launch: its
#: program loads and splits a band-1 y tile per run of groups sharing a shift, A runs in all, so
#: it needs runs of a few groups to pay off. H100 (benchmarks/RESULTS.md): at 16 groups per
#: program and A = 16 (d = k = 4096) one launch took 16.1 / 8.3 ms (float32 / bfloat16) against
#: 10.2 / 5.1 ms for a launch per band; at 32 A and more it took 0.5-1.0x their time.
_PAIRED_MIN_RUN = 8


def _pairs_bands(y: torch.Tensor, nnz: int, tables: WindowTables, tiling: Tiling) -> bool:
    """Whether a two-band transpose sums both bands in one launch (else one launch per band)."""
    if spec.band_count(nnz) != 2:
        return False
    if tiling.paired is not None:
        return tiling.paired
    per_split = _grid(
        y, nnz, tables.groups, tables.windows, tiling.splits, tiling.blocks[0] if tiling.blocks else None
    )[4]
    return per_split >= _PAIRED_MIN_RUN * tables.windows


def _transpose_slab(n: int, windows: int, groups: int) -> tuple[int, int]:
    """(rows, groups) of a slab of the half-type transpose whose float32 band sums fit
    ``sjlt.backends.workspace_bytes``: all rows and as many groups as fit, else fewer rows (at
    least 64) and one group."""
    budget = backends.byte_budget("workspace_bytes")
    group_bytes = spec.WINDOW * windows * 4  # one row of one group's columns
    rows = min(n, max(64, budget // (group_bytes * groups)))
    rows = n if rows >= n else max(64, rows // 64 * 64)
    return rows, max(1, min(groups, budget // (group_bytes * rows)))


def _z_multiple(row_multiple: int, element_size: int, bands: int, groups: int) -> int:
    """The transpose kernel's MULTIPLE: ``row_multiple`` (:func:`_z_row_multiple`, where Z's chunks
    start), so that Z's rows store in vectors of elements of ``element_size`` bytes. Half types
    below 16 only with at most 16 groups per program (``groups``), or with two bands or more on
    rows on 16 bytes; otherwise element stores. H200 (benchmarks/NOTES.md,
    "Any d"): float32 rows off 16 elements took 0.88-0.96x the time of element stores in 16- and
    32-byte vectors; half-type ones 0.73-0.91x with short runs (2**20 x 300 -> 256 1.41 -> 1.09x the
    kernel on aligned rows, 2**20 x 1000 -> 1024 1.50 -> 1.06x) or two bands on 16 bytes (65536 x
    5000 -> 4096 1.18 -> 1.06x, 4096 x (2**17 - 8) -> 4096 1.33 -> 1.21x), but 1.17-1.74x with one
    band and 40-128 groups (65536 x 16376 -> 1024 1.32 -> 2.29x), their 32-byte chunks then writing
    two sectors half each with one store, and 1.18-1.36x with two bands on 8 bytes and 256-3972
    groups (256 x 2048 -> 2**24 - 4 1.67 -> 2.11x, 4096 x 4096 -> 2**17 - 4 1.40 -> 1.70x)."""
    if element_size == 4 or row_multiple == 16 or groups <= _HALF_VECTOR_STORES_MAX_GROUPS:
        return row_multiple
    return row_multiple if bands >= 2 and row_multiple * element_size >= _ROW_ALIGNMENT_BYTES else 1


def _z_row_multiple(in_features: int, column_offset: int, out, out_col0: int, partial, partial_col0: int) -> int:
    """The largest power of two up to 16 dividing z's width, the column offset and the row strides
    and first columns of ``out`` and ``partial``: where Z's chunks start, in elements."""
    return math.gcd(16, in_features, column_offset, out_col0, partial_col0, out.stride(0), partial.stride(0))


#: Groups per program up to which a half-type transpose stores rows off 16 elements in vectors.
_HALF_VECTOR_STORES_MAX_GROUPS = 16


def _cuts_shared_sector_runs(row_multiple: int, element_size: int, nnz: int, windows: int, groups: int) -> bool:
    """Whether a one-band transpose cuts its programs' runs of groups to _SHARED_SECTOR_RUN: where
    they are longer than _SHARED_SECTOR_MAX_RUN, a block has at least _SHARED_SECTOR_MIN_WINDOWS
    windows, and Z's chunks start off 16 bytes (``row_multiple`` elements of ``element_size``
    bytes: :func:`_z_row_multiple`), so that each 32-byte sector of Z is
    written partly by the programs of windows a and a + 1. A sector whose parts are written far
    apart in time costs a read from DRAM; sibling programs that walk fewer groups write its parts
    closer together. H200 (benchmarks/NOTES.md, "Any d"), ratio to the aligned d, uncut -> cut:
    runs of 80-8192 groups with 4-8 windows, bfloat16 2.53-3.34 -> 2.18-2.57x, float32 2.29-3.12 ->
    1.94-2.23x. Not cut: 2 windows (262144 x 256 -> 4095: bfloat16 1.82 -> 2.12x, float32 2.00 ->
    1.96x), rows on 16 bytes (65536 x 1024 -> 16376 bfloat16 1.28 -> 1.75x; float32 there has whole
    sectors), runs of 40 (65536 x 1024 -> 5000 bfloat16 0.54 -> 0.62 ms)."""
    if spec.band_count(nnz) != 1 or windows < _SHARED_SECTOR_MIN_WINDOWS or groups <= _SHARED_SECTOR_MAX_RUN:
        return False
    return row_multiple * element_size < _ROW_ALIGNMENT_BYTES


def _twins_windows(
    row_multiple: int, element_size: int, nnz: int, windows: int, groups: int, block_m: int, tiling: Tiling = Tiling()
) -> bool:
    """Whether a one-band transpose gives each program windows 2a and 2a + 1 (the kernel's TWINS),
    so that the 32-byte sectors between their chunks are written by one program: where Z's chunks
    start off 32 bytes (``row_multiple`` elements of ``element_size`` bytes:
    :func:`_z_row_multiple`), untwinned programs would walk over _SHARED_SECTOR_MAX_RUN groups
    (``groups``), and either a block has two windows (twins then own whole groups: no sector is
    shared, and each group goes out in one store), or three or more with rows on 8 bytes or off them
    in programs of _JOINED_PAIRS_MIN_ROWS rows (``block_m``; the pair's chunks go out in one store:
    :func:`_joins_twin_pairs`), or Z is float32 with rows on 16 bytes (vector stores). H200
    (benchmarks/NOTES.md, "Any d"), ratio to the aligned d, untwinned -> twins: two windows float32
    1.46-2.42 -> 1.28-1.58x, bfloat16 1.44-2.30 -> 1.34-1.45x; float32 rows on 16 bytes with 3-8
    windows 1.58-2.50 -> 1.51-1.81x; 4-15 windows off 8 bytes float32 1.98-2.33 -> 1.62-2.18x,
    bfloat16 2.02-2.73 -> 1.51-2.09x; on 8 bytes (4-8 windows) float32 2.15-2.25 -> 1.70-1.77x,
    bfloat16 2.18-2.35 -> 1.52-1.66x; three windows 0.91-1.02x the untwinned time with 86-341
    groups, 0.67-0.73x with 1366. Not twinned: half types on 8 bytes with two windows (1.34 -> 1.46x
    at 262144 x 256 -> 4092) and on 16 bytes (65536 x 1024 -> 16376 1.37 -> 1.47x), runs of 64
    groups or fewer (float32 1.09 -> 1.25x at 2**20 x 256 -> 2052), programs of 16 or 32 rows
    (n <= 32 at d = 2**22 - 1 and 2**24 - 1, k = 512 and 1024: float32 1.13-1.28 -> 1.20-1.62x,
    bfloat16 0.75-1.44 -> 1.02-1.56x; n = 64-2048 1.72-2.90 -> 1.56-1.96x, n = 48 within 4% either
    way)."""
    if spec.band_count(nnz) != 1 or windows < 2:
        return False
    if tiling.twins is not None:
        return tiling.twins
    start_bytes = row_multiple * element_size
    if groups <= _SHARED_SECTOR_MAX_RUN or start_bytes >= _SECTOR_BYTES:
        return False
    if windows == 2:
        return element_size == 4 or start_bytes < 8
    if _joins_twin_pairs(windows, start_bytes):
        return block_m >= _JOINED_PAIRS_MIN_ROWS
    return element_size == 4 and start_bytes == _ROW_ALIGNMENT_BYTES


def _joins_twin_pairs(windows: int, start_bytes: int) -> bool:
    """Whether twins store each group's two chunks in one store (the kernel's JOINED_PAIRS), with Z's
    chunks starting ``start_bytes`` past 32 bytes: with two windows (the whole group) or rows on 8
    bytes or off them. float32 rows on 16 bytes keep two stores (H200, 4-8 windows: 1.49-1.73x the
    aligned d, joined 1.59-1.74x)."""
    return windows == 2 or start_bytes <= _JOINED_PAIRS_MAX_START_BYTES


#: Z's bytes that the L2 writes back whole; chunks starting off them share sectors with neighbours.
_SECTOR_BYTES = 32
#: Where Z's chunks start at most this far past 32 bytes, twins join their pairs
#: (:func:`_twins_windows`); the rows per program they need with three windows or more, and the
#: groups per program of such twins where runs are longer.
_JOINED_PAIRS_MAX_START_BYTES = 8
_JOINED_PAIRS_MIN_ROWS = 64
_JOINED_PAIRS_RUN = 32


_ROW_ALIGNMENT_BYTES = 16
#: The groups per one-band program beyond which a transpose of rows off 16 bytes cuts its runs,
#: the groups per cut run, and the windows per block it needs (:func:`_cuts_shared_sector_runs`).
_SHARED_SECTOR_MAX_RUN = 64
_SHARED_SECTOR_RUN = 16
_SHARED_SECTOR_MIN_WINDOWS = 4


def _transpose_band(
    y,
    out,
    partial,
    out_col0,
    partial_col0,
    tables: WindowTables,
    band: int,
    nnz: int,
    in_features: int,
    column_offset: int,
    g_first: int,
    g_last: int,
    tiling: Tiling,
    paired: bool = False,
):
    """One launch of the transpose kernel: band ``band``'s terms of z's columns of table groups
    [g_first, g_last), added (after band 0) to ``partial`` and written to ``out``; z's column c is
    column c - out_col0 of ``out`` and c - partial_col0 of ``partial``. ``paired``: both bands'
    terms of every group, in the two-band order table's order."""
    from ..kernels.sparse_jl_windowed import sparse_jl_windowed_transpose_kernel

    n = y.shape[0]
    block = tiling.blocks[0] if tiling.blocks else None
    row_multiple = _z_row_multiple(in_features, column_offset, out, out_col0, partial, partial_col0)
    block_m, width, tiles, splits, per_split = _grid(y, nnz, g_last - g_first, tables.windows, tiling.splits, block)
    twins = _twins_windows(row_multiple, out.element_size(), nnz, tables.windows, per_split, block_m, tiling)
    joined = twins and _joins_twin_pairs(tables.windows, row_multiple * out.element_size())
    if twins:
        twin_count = math.ceil(tables.windows / 2)
        splits = tiling.splits
        if splits is None and tables.windows > 2 and joined:
            splits = max(1, math.ceil((g_last - g_first) / _JOINED_PAIRS_RUN))
        block_m, width, tiles, splits, per_split = _grid(y, nnz, g_last - g_first, twin_count, splits, block)
    elif tiling.splits is None and _cuts_shared_sector_runs(
        row_multiple, out.element_size(), nnz, tables.windows, per_split
    ):
        splits = math.ceil((g_last - g_first) / _SHARED_SECTOR_RUN)
        block_m, width, tiles, splits, per_split = _grid(y, nnz, g_last - g_first, tables.windows, splits, block)
    order, starts = shift_order(tables) if paired else (tables.rotations, tables.rotations)  # unread if unpaired
    fp32_passes, dot_type = dot_config(y.dtype)
    steps = tiling.steps or (_TRANSPOSE_GROUPS,)  # (groups per dot[, tile on the left])
    tile_left = bool(steps[1]) if len(steps) > 1 else _TRANSPOSE_TILE_LEFT
    pipelined = tiling.pipelined
    if pipelined is None:
        pipelined = _transpose_pipelined(y.dtype, spec.band_count(nnz), paired, block_m, twins)
    sparse_jl_windowed_transpose_kernel[(tiles, splits)](
        y,
        tables.words,
        tables.rotations,
        order,
        starts,
        out,
        partial,
        n,
        in_features,
        column_offset,
        tables.group_base,
        g_first,
        g_last,
        per_split,
        tables.windows,
        band,
        out_col0,
        partial_col0,
        1.0 / math.sqrt(nnz),
        y.shape[1],
        y.stride(0),
        y.stride(1),
        out.stride(0),
        out.stride(1),
        partial.stride(0),
        partial.stride(1),
        NNZ=nnz,
        BLOCKS=_band_blocks(nnz),
        BANDS=spec.band_count(nnz),
        FOLDS=_fold(y.shape[1], nnz) > 0,
        FP32_PASSES=fp32_passes,
        DOT_DTYPE=dot_type,
        BLOCK_M=block_m,
        WIDTH=width,
        GROUPS=steps[0],
        TILE_LEFT=tile_left,
        ADD_PARTIAL=band > 0,
        PAIRED=paired,
        PIPELINED=pipelined,
        PARTIAL_FIRST=_partial_first(y.dtype),
        MULTIPLE=_z_multiple(row_multiple, out.element_size(), spec.band_count(nnz), per_split),
        TWINS=twins,
        JOINED_PAIRS=joined and tile_left,
        WHOLE_GROUPS=joined and tile_left and tables.windows == 2,
        num_warps=tiling.num_warps or _num_warps(block_m, paired),
        num_stages=tiling.num_stages or _TRANSPOSE_STAGES,
    )
