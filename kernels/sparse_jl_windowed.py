"""Windowed sparse JL kernels: Y = X S^T and Z = Y S when S has the windowed layout (spec v5).

Layout (``docs/spec.md``): k = 16 * A * nnz rows, nnz blocks of A windows of 16 rows; blocks
[8b, 8b + 8) form band b. Input columns come in chunks of 16; chunk c = g*A + p of group g goes to
window (p + R_(g,b)) mod A of every block of band b, where its 16 columns land on 16 distinct
rows: column i on row i XOR m_(c,t), with a sign bit per column. One 32-bit word per (chunk,
block) holds m (bits 0-3) and the 16 signs (bits 16-31); the table kernel computes m, affine in t
over GF(16), and the rotations, so the projection kernels only read them.

Why this layout: the window a chunk lands in is the same in every block of a band, so a program
that owns window a of one band (16 * min(nnz, 8) output columns) reads each chunk of its groups
that lands there exactly once and multiplies it by a 16 x 16*min(nnz, 8) signed permutation tile.
Tensor-core work per input element is 2 * 16 * nnz flops whatever k is, where a one-hot over all
of k costs 2k. Each group of A neighbouring chunks is split among the A programs of a row tile
and band, so together they read X's rows whole, once per band.

Each loop step takes the chunks of several groups at once (``_stacked_tiles``): the forward as one
dot of depth 16 * GROUPS (or two unrolled dots), the transpose as z^T = tile @ y^T, whose tile of
four groups is a 64-row operand. One chunk per step left both latency-bound (benchmarks/NOTES.md,
design 4).

Each step is split into its loads (``_step_chunks``, ``_step_words``, ``_load_chunks``) and its
tile build (``_stacked_tile``), so that the pipelined loops issue a step's loads one or two steps
ahead, in registers (design 8). With one row tile of at most 32 rows (exact float32 or a half
type), where a tile would serve too few rows to pay for its build,
``sparse_jl_windowed_shuffle_forward_kernel`` computes the same forward on the CUDA cores,
permuting each chunk's columns with warp shuffles (design 9; one shuffle per element and band
since its accumulators follow the chunks' slopes). For half types with short runs on Hopper,
``sparse_jl_windowed_gluon.py`` computes the forward in Gluon, with the tile as the tensor cores'
register operand (design 11).

The tables (``window_table_kernel``) cost one Philox call per 4 (chunk, block) pairs and
4 * nnz / 16 bytes per input column; the projection kernels only load them.

Both forwards also run grouped launches (SEGMENTS): many column blocks of one virtual matrix, such
as a model's per-parameter gradients, in one launch over one table, each split running a list of
(block, group run) segments.
"""

import triton
import triton.language as tl

from .philox import philox4x32_10
from .sparse_jl import dot_exact, split_bf16x3

WINDOW = tl.constexpr(16)


@triton.jit
def _gf16_times(a, T: tl.constexpr):
    """a * T in GF(16) = GF(2)[x] / (x^4 + x + 1), for a uint32 tensor a < 16 and a constant T < 16."""
    product = tl.zeros_like(a)
    for bit in tl.static_range(4):
        if (T >> bit) & 1:
            product = product ^ a
        a = ((a << 1) & 15) ^ ((a >> 3) & 1) * 3  # x^4 = x + 1
    return product


@triton.jit
def _with_mask(word, mask):
    """W_(c,t) with its low 4 bits replaced by the chunk's XOR mask in block t (docs/spec.md, 2b)."""
    return ((word & 0xFFFFFFF0) | mask).to(tl.int32, bitcast=True)


@triton.jit
def window_table_kernel(
    words_ptr,
    rotations_ptr,
    group_base,
    groups,
    windows,
    key0,
    key1,
    NNZ: tl.constexpr,
    BANDS: tl.constexpr,
    DOMAIN_WINDOW: tl.constexpr,
    DOMAIN_GROUP: tl.constexpr,
    BLOCK: tl.constexpr,
    QUADS: tl.constexpr,
):
    """words[c, t] for the groups*windows chunks of groups [group_base, group_base + groups), and
    rotations[g, b] = R_(group_base + g, b). Grid: cdiv(groups * windows, BLOCK); QUADS is
    ceil(NNZ / 4) rounded up to a power of two.

    Each (chunk, quad) pair of the program's [BLOCK, QUADS] tile draws one Philox counter, the
    chunk's words in blocks 4 quad .. 4 quad + 3, and holds them side by side, so that a warp writes
    whole rows. With the chunks' words in one [BLOCK, NNZ] tile built from [BLOCK] vectors, the
    compiler spread each row over four threads (eight at nnz 32) and every thread computed the
    Philox rounds of its row: four times the work in a kernel bound by its instructions
    (benchmarks/NOTES.md, "The window table")."""
    chunks = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    quad = tl.arange(0, QUADS)[None, :]
    in_table = (chunks < groups * windows)[:, None]
    # in int64 first: Triton passes a group_base below 2**31 as int32, and the product can pass 2**31
    chunk = tl.cast(group_base, tl.int64) * windows + chunks[:, None] + quad * 0
    w0, w1, w2, w3 = philox4x32_10(
        (chunk & 0xFFFFFFFF).to(tl.uint32), (chunk >> 32).to(tl.uint32), quad, DOMAIN_WINDOW + quad * 0, key0, key1
    )
    # a_c and b_c are bits of W_(c,0), word 0 of quad 0; block t's mask is a_c * (t mod 16) XOR b_c,
    # a sum over the bits of t mod 16 = 4 (quad mod 4) + j of a_c * x^i (GF(16) adds by XOR).
    first = tl.sum(tl.where(quad == 0, w0, 0), axis=1)[:, None]
    slope = (first >> 4) & 15
    slope_x1 = _gf16_times(slope, 2)
    slope_x2 = _gf16_times(slope, 4)
    slope_x3 = _gf16_times(slope, 8)
    mask = (first & 15) ^ tl.where((quad & 1) != 0, slope_x2, 0) ^ tl.where((quad & 2) != 0, slope_x3, 0)
    # join stacks along a new last axis: join(join(a, c), join(b, d)) is (a, b, c, d) in row-major order
    words = tl.join(
        tl.join(_with_mask(w0, mask), _with_mask(w2, mask ^ slope_x1)),
        tl.join(_with_mask(w1, mask ^ slope), _with_mask(w3, mask ^ slope ^ slope_x1)),
    ).reshape(BLOCK, 4 * QUADS)
    block = tl.arange(0, 4 * QUADS)[None, :]
    tl.store(words_ptr + chunks[:, None] * NNZ + block, words, mask=in_table & (block < NNZ))
    if tl.program_id(0).to(tl.int64) * BLOCK < groups:  # the programs whose indices include groups
        zero = tl.zeros((BLOCK,), dtype=tl.uint32)
        group = group_base + chunks
        group_lo = (group & 0xFFFFFFFF).to(tl.uint32)
        group_hi = (group >> 32).to(tl.uint32)
        in_groups = chunks < groups
        size = (zero + windows).to(tl.uint32)
        for band_quad in tl.static_range(0, (BANDS + 3) // 4):  # R_(g,b) = word b mod 4 of counter (g, b div 4)
            r0, r1, r2, r3 = philox4x32_10(group_lo, group_hi, zero + band_quad, zero + DOMAIN_GROUP, key0, key1)
            base = rotations_ptr + chunks * BANDS + 4 * band_quad
            tl.store(base, tl.umulhi(r0, size).to(tl.int32), mask=in_groups)
            if 4 * band_quad + 1 < BANDS:
                tl.store(base + 1, tl.umulhi(r1, size).to(tl.int32), mask=in_groups)
            if 4 * band_quad + 2 < BANDS:
                tl.store(base + 2, tl.umulhi(r2, size).to(tl.int32), mask=in_groups)
            if 4 * band_quad + 3 < BANDS:
                tl.store(base + 3, tl.umulhi(r3, size).to(tl.int32), mask=in_groups)


@triton.jit
def _window_chunk(rotations_ptr, group, window, windows, band, BANDS: tl.constexpr):
    """The table index of the chunk of table group ``group`` that lands in ``window`` in ``band``."""
    rotation = tl.load(rotations_ptr + tl.cast(group, tl.int64) * BANDS + band)
    return tl.cast(group, tl.int64) * windows + (window - rotation + windows) % windows


@triton.jit
def _band_blocks(offs_q, band, NNZ: tl.constexpr, BLOCKS: tl.constexpr):
    """For accumulator column q = 16t + u: t, and whether block band * BLOCKS + t exists (the
    padding columns t >= BLOCKS and a short last band's missing blocks do not)."""
    t = offs_q // WINDOW
    return t, (t < BLOCKS) & (band * BLOCKS + t < NNZ)


@triton.jit
def _band_words(words_ptr, table_chunk, offs_q, band, NNZ: tl.constexpr, BLOCKS: tl.constexpr):
    """For accumulator column q = 16t + u: the chunk's word in block band * BLOCKS + t (0 where the
    block does not exist)."""
    t, valid = _band_blocks(offs_q, band, NNZ, BLOCKS)
    return tl.load(words_ptr + table_chunk * NNZ + band * BLOCKS + t, mask=valid, other=0)


@triton.jit
def _signed_permutation(word, offs_q, band, NNZ: tl.constexpr, BLOCKS: tl.constexpr):
    """For accumulator column q = 16t + u, from the chunk's word in that block (``_band_words``): the
    chunk column i* = u XOR m that lands there, and its value +-1 (0 where the block does not exist)."""
    _, valid = _band_blocks(offs_q, band, NNZ, BLOCKS)
    source = (offs_q % WINDOW) ^ (word & (WINDOW - 1))
    negative = (word >> (16 + source)) & 1
    value = tl.where(valid, tl.where(negative != 0, -1.0, 1.0), 0.0)
    return source, value


@triton.jit
def _program_tile(n, windows, BLOCK_M: tl.constexpr, BANDS: tl.constexpr):
    """(window a, band, split, rows, row mask) of this program; grid axis 0 is
    (row tile * A + a) * BANDS + band, so the programs sharing a row tile run together."""
    pid = tl.program_id(0)
    tile = pid // BANDS
    offs_m = (tile // windows).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    return tile % windows, pid % BANDS, tl.program_id(1), offs_m, offs_m < n


@triton.jit
def _window_columns(offs_q, window, windows, band, BLOCKS: tl.constexpr):
    """Output column of accumulator column q = 16t + u: row u of window a in block band * BLOCKS + t."""
    return ((band * BLOCKS + offs_q // WINDOW) * windows + window) * WINDOW + offs_q % WINDOW


@triton.jit
def _cut_program(window, windows, band, out_features, BANDS: tl.constexpr):
    """Whether this program meets the last block's window cut at k (k not a multiple of 16): the
    last band's windows 0 and A - 1, whose fold flags are per row (``_folded_rows``)."""
    return (out_features % WINDOW != 0) & (band == BANDS - 1) & ((window == 0) | (window == windows - 1))


@triton.jit
def _folded_rows(
    offs_q, window, windows, band, out_features, NNZ: tl.constexpr, BLOCKS: tl.constexpr, PER_ROW: tl.constexpr
):
    """For accumulator column q = 16t + v of a program off the lattice (docs/spec.md 2b), with
    block t' = band * BLOCKS + t and padded row u = 16 a + v in [0, 16 A) of that block: the output
    column of u where u < size, whether u is a row that padded rows fold onto (``first``), whether
    it folds (``beyond``: u >= size), the folded row's offset in the block (u or u - size) and the
    block's first row.

    Blocks are whole windows from 16 floor(t' W / nnz) (W = ceil(k / 16)); one of A - 1 windows
    folds its padded window A - 1 onto its window 0, and the last block's last window is cut at k,
    its rows beyond folding onto its first ones. The column is 16 * (a window index) + v, and the
    flags are per window unless PER_ROW (a ``_cut_program``), so that the compiler sees whole
    aligned windows in masks and addresses; the transpose branches on PER_ROW around its loads,
    since values merged after a branch lose that alignment (the forwards use the column only)."""
    block = band * BLOCKS + offs_q // WINDOW
    padded = window * WINDOW + offs_q % WINDOW
    total = (out_features + WINDOW - 1) // WINDOW
    first_window = (block * total) // NNZ
    block_windows = ((block + 1) * total) // NNZ - first_window
    start = first_window * WINDOW  # tensors on the left: constexpr * tensor stays a constexpr
    size = tl.minimum((first_window + block_windows) * WINDOW, out_features) - start
    column = (first_window + tl.where(window < block_windows, window, 0)) * WINDOW + offs_q % WINDOW
    if PER_ROW:
        first = padded < windows * WINDOW - size
        beyond = padded >= size
    else:
        first = (padded < WINDOW) & (block_windows < windows) & (block < NNZ)  # window 0
        beyond = (window >= block_windows) & (block < NNZ)
    return column, first, beyond, tl.where(beyond, padded - size, padded), start


@triton.jit
def _slot_group(order_ptr, slot, last, SORTED: tl.constexpr):
    """The table group at position ``slot`` (clamped to ``last``): the slot itself, or with SORTED
    its entry in the order table."""
    slot = tl.minimum(slot, last)
    if SORTED:
        slot = tl.load(order_ptr + slot)
    return slot


@triton.jit
def _step_chunks(
    rotations_ptr,
    order_ptr,
    first_group,
    g_end,
    window,
    windows,
    band,
    BANDS: tl.constexpr,
    GROUPS: tl.constexpr,
    SORTED: tl.constexpr,
):
    """The table chunks at ``window`` in ``band`` of the groups at positions first_group ..
    first_group + GROUPS - 1 (the groups themselves, or with SORTED those the order table lists
    there; positions past g_end - 1 are clamped to it and masked by ``_step_columns``), one scalar
    per group; GROUPS <= 4, and the unused ones repeat the first."""
    tl.static_assert(GROUPS <= 4)
    last = g_end - 1
    c0 = _window_chunk(rotations_ptr, _slot_group(order_ptr, first_group, last, SORTED), window, windows, band, BANDS)
    c1 = c0
    c2 = c0
    c3 = c0
    if GROUPS > 1:
        c1 = _window_chunk(
            rotations_ptr, _slot_group(order_ptr, first_group + 1, last, SORTED), window, windows, band, BANDS
        )
    if GROUPS > 2:
        c2 = _window_chunk(
            rotations_ptr, _slot_group(order_ptr, first_group + 2, last, SORTED), window, windows, band, BANDS
        )
    if GROUPS > 3:
        c3 = _window_chunk(
            rotations_ptr, _slot_group(order_ptr, first_group + 3, last, SORTED), window, windows, band, BANDS
        )
    return c0, c1, c2, c3


@triton.jit
def _step_columns(c0, c1, c2, c3, first_group, g_end, windows, group_base, column_offset, d, GROUPS: tl.constexpr):
    """The step's chunks side by side: their 16 * GROUPS local columns and which of them exist (in
    [0, d), position before g_end)."""
    return _stacked_columns(
        c0, c1, c2, c3, tl.arange(0, WINDOW * GROUPS), first_group, g_end, windows, group_base, column_offset, d
    )


@triton.jit
def _stacked_columns(c0, c1, c2, c3, lanes, first_group, g_end, windows, group_base, column_offset, d):
    """``_step_columns`` for the step's lanes 0 .. 16 * GROUPS - 1 in any layout (the Gluon forward's)."""
    stacked = lanes // WINDOW
    chunk = tl.where(stacked == 1, c1, c0)  # scalars broadcast to the lanes' shape and layout
    chunk = tl.where(stacked == 2, c2, chunk)
    chunk = tl.where(stacked == 3, c3, chunk)
    cols = (tl.cast(group_base, tl.int64) * windows + chunk) * WINDOW - column_offset + lanes % WINDOW
    return cols, (first_group + stacked < g_end) & (cols >= 0) & (cols < d)


@triton.jit
def _step_words(words_ptr, c0, c1, c2, c3, offs_q, band, NNZ: tl.constexpr, BLOCKS: tl.constexpr, GROUPS: tl.constexpr):
    """The step's chunks' words in the blocks of ``band`` (``_band_words``), one [WIDTH] vector per group."""
    w0 = _band_words(words_ptr, c0, offs_q, band, NNZ, BLOCKS)
    w1 = w0
    w2 = w0
    w3 = w0
    if GROUPS > 1:
        w1 = _band_words(words_ptr, c1, offs_q, band, NNZ, BLOCKS)
    if GROUPS > 2:
        w2 = _band_words(words_ptr, c2, offs_q, band, NNZ, BLOCKS)
    if GROUPS > 3:
        w3 = _band_words(words_ptr, c3, offs_q, band, NNZ, BLOCKS)
    return w0, w1, w2, w3


@triton.jit
def _stack_group(
    source,
    value,
    word,
    g: tl.constexpr,
    stacked,
    offs_q,
    band,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    TRANSPOSED: tl.constexpr,
):
    """``source`` and ``value`` with group g's rows (columns when TRANSPOSED) taken from ``word``."""
    source_g, value_g = _signed_permutation(word, offs_q, band, NNZ, BLOCKS)
    if TRANSPOSED:
        source = tl.where(stacked[None, :] == g, source_g[:, None], source)
        value = tl.where(stacked[None, :] == g, value_g[:, None], value)
    else:
        source = tl.where(stacked[:, None] == g, source_g[None, :], source)
        value = tl.where(stacked[:, None] == g, value_g[None, :], value)
    return source, value


@triton.jit
def _stacked_tile(
    w0,
    w1,
    w2,
    w3,
    offs_q,
    band,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    GROUPS: tl.constexpr,
    TRANSPOSED: tl.constexpr,
):
    """The step's signed-permutation tiles stacked to match its columns ([16 * GROUPS, WIDTH], or
    its transpose), so one dot of depth (or width) 16 * GROUPS takes them all. Built with 2-D
    selects only: a 3-D reshape costs a shared-memory round trip (benchmarks/NOTES.md)."""
    lanes = tl.arange(0, WINDOW * GROUPS)
    lane = lanes % WINDOW
    stacked = lanes // WINDOW
    source_0, value_0 = _signed_permutation(w0, offs_q, band, NNZ, BLOCKS)
    none = tl.zeros_like(stacked)
    if TRANSPOSED:
        source = source_0[:, None] + none[None, :]
        value = value_0[:, None] + none[None, :].to(tl.float32)
    else:
        source = source_0[None, :] + none[:, None]
        value = value_0[None, :] + none[:, None].to(tl.float32)
    if GROUPS > 1:
        source, value = _stack_group(source, value, w1, 1, stacked, offs_q, band, NNZ, BLOCKS, TRANSPOSED)
    if GROUPS > 2:
        source, value = _stack_group(source, value, w2, 2, stacked, offs_q, band, NNZ, BLOCKS, TRANSPOSED)
    if GROUPS > 3:
        source, value = _stack_group(source, value, w3, 3, stacked, offs_q, band, NNZ, BLOCKS, TRANSPOSED)
    if TRANSPOSED:
        tile = tl.where(source == lane[None, :], value, 0.0)
    else:
        tile = tl.where(lane[:, None] == source, value, 0.0)
    return tile


@triton.jit
def _load_chunks(x_ptr, cols, mask_d, offs_m, mask_m, stride_xm, stride_xd):
    """X's columns ``cols`` of the tile's rows ([BLOCK_M, 16 * GROUPS], zeros where they do not exist)."""
    return tl.load(
        x_ptr + offs_m[:, None] * stride_xm + cols[None, :] * stride_xd,
        mask=mask_m[:, None] & mask_d[None, :],
        other=0.0,
    )


@triton.jit
def _fetch_step(
    x_ptr,
    words_ptr,
    c0,
    c1,
    c2,
    c3,
    first_group,
    g_end,
    windows,
    band,
    group_base,
    column_offset,
    d,
    offs_m,
    mask_m,
    offs_q,
    stride_xm,
    stride_xd,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    GROUPS: tl.constexpr,
):
    """The forward step's loads once its chunk indices are known: X's chunks and their words."""
    cols, mask_d = _step_columns(c0, c1, c2, c3, first_group, g_end, windows, group_base, column_offset, d, GROUPS)
    w0, w1, w2, w3 = _step_words(words_ptr, c0, c1, c2, c3, offs_q, band, NNZ, BLOCKS, GROUPS)
    return _load_chunks(x_ptr, cols, mask_d, offs_m, mask_m, stride_xm, stride_xd), w0, w1, w2, w3


@triton.jit
def _stacked_chunks(
    x_ptr,
    words_ptr,
    rotations_ptr,
    first_group,
    g_end,
    window,
    windows,
    band,
    group_base,
    column_offset,
    d,
    offs_m,
    mask_m,
    offs_q,
    stride_xm,
    stride_xd,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    GROUPS: tl.constexpr,
):
    """X's chunks at ``window`` in ``band`` of GROUPS groups and their stacked tile, in one go."""
    c0, c1, c2, c3 = _step_chunks(
        rotations_ptr, rotations_ptr, first_group, g_end, window, windows, band, BANDS, GROUPS, False
    )
    x, w0, w1, w2, w3 = _fetch_step(
        x_ptr,
        words_ptr,
        c0,
        c1,
        c2,
        c3,
        first_group,
        g_end,
        windows,
        band,
        group_base,
        column_offset,
        d,
        offs_m,
        mask_m,
        offs_q,
        stride_xm,
        stride_xd,
        NNZ,
        BLOCKS,
        GROUPS,
    )
    return x, _stacked_tile(w0, w1, w2, w3, offs_q, band, NNZ, BLOCKS, GROUPS, False)


@triton.jit
def _sum_steps_pipelined(
    acc,
    x_ptr,
    words_ptr,
    rotations_ptr,
    first_group,
    g_end,
    window,
    windows,
    band,
    group_base,
    column_offset,
    d,
    offs_m,
    mask_m,
    offs_q,
    stride_xm,
    stride_xd,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    GROUPS: tl.constexpr,
):
    """``_sum_steps`` with one dot per step, pipelined in registers: while step i's tile is built and
    its dot runs, step i + 1's chunks and words are in flight, and step i + 2's chunk indices (the
    rotations they wait on). Without it every step waits on its own dependent loads (rotation, then
    words and X) before any tile work (benchmarks/NOTES.md, design 8)."""
    c0, c1, c2, c3 = _step_chunks(
        rotations_ptr, rotations_ptr, first_group, g_end, window, windows, band, BANDS, GROUPS, False
    )
    x, w0, w1, w2, w3 = _fetch_step(
        x_ptr,
        words_ptr,
        c0,
        c1,
        c2,
        c3,
        first_group,
        g_end,
        windows,
        band,
        group_base,
        column_offset,
        d,
        offs_m,
        mask_m,
        offs_q,
        stride_xm,
        stride_xd,
        NNZ,
        BLOCKS,
        GROUPS,
    )
    c0, c1, c2, c3 = _step_chunks(
        rotations_ptr, rotations_ptr, first_group + GROUPS, g_end, window, windows, band, BANDS, GROUPS, False
    )
    for group in range(first_group, g_end, GROUPS):
        tile = _stacked_tile(w0, w1, w2, w3, offs_q, band, NNZ, BLOCKS, GROUPS, False)
        x_next, w0, w1, w2, w3 = _fetch_step(
            x_ptr,
            words_ptr,
            c0,
            c1,
            c2,
            c3,
            group + GROUPS,
            g_end,
            windows,
            band,
            group_base,
            column_offset,
            d,
            offs_m,
            mask_m,
            offs_q,
            stride_xm,
            stride_xd,
            NNZ,
            BLOCKS,
            GROUPS,
        )
        c0, c1, c2, c3 = _step_chunks(
            rotations_ptr, rotations_ptr, group + 2 * GROUPS, g_end, window, windows, band, BANDS, GROUPS, False
        )
        acc = dot_exact(x, tile, acc, FP32_PASSES, DOT_DTYPE)
        x = x_next
    return acc


@triton.jit
def _sum_steps(
    acc,
    x_ptr,
    words_ptr,
    rotations_ptr,
    first_group,
    g_end,
    window,
    windows,
    band,
    group_base,
    column_offset,
    d,
    offs_m,
    mask_m,
    offs_q,
    stride_xm,
    stride_xd,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    GROUPS: tl.constexpr,
    UNROLL: tl.constexpr,
    PIPELINED: tl.constexpr,
):
    """acc + the products of the chunks at ``window`` in ``band`` of groups [first_group, g_end),
    GROUPS groups per dot and UNROLL dots per step, whose loads are all issued first; or with
    PIPELINED (UNROLL 1) each step's loads issued a step ahead (``_sum_steps_pipelined``)."""
    if PIPELINED:
        tl.static_assert(UNROLL == 1)
        acc = _sum_steps_pipelined(
            acc,
            x_ptr,
            words_ptr,
            rotations_ptr,
            first_group,
            g_end,
            window,
            windows,
            band,
            group_base,
            column_offset,
            d,
            offs_m,
            mask_m,
            offs_q,
            stride_xm,
            stride_xd,
            NNZ,
            BLOCKS,
            BANDS,
            FP32_PASSES,
            DOT_DTYPE,
            GROUPS,
        )
    else:
        for group in range(first_group, g_end, GROUPS * UNROLL):
            x, tile = _stacked_chunks(
                x_ptr,
                words_ptr,
                rotations_ptr,
                group,
                g_end,
                window,
                windows,
                band,
                group_base,
                column_offset,
                d,
                offs_m,
                mask_m,
                offs_q,
                stride_xm,
                stride_xd,
                NNZ,
                BLOCKS,
                BANDS,
                GROUPS,
            )
            if UNROLL == 2:
                x_next, tile_next = _stacked_chunks(
                    x_ptr,
                    words_ptr,
                    rotations_ptr,
                    group + GROUPS,
                    g_end,
                    window,
                    windows,
                    band,
                    group_base,
                    column_offset,
                    d,
                    offs_m,
                    mask_m,
                    offs_q,
                    stride_xm,
                    stride_xd,
                    NNZ,
                    BLOCKS,
                    BANDS,
                    GROUPS,
                )
            acc = dot_exact(x, tile, acc, FP32_PASSES, DOT_DTYPE)
            if UNROLL == 2:
                acc = dot_exact(x_next, tile_next, acc, FP32_PASSES, DOT_DTYPE)
    return acc


@triton.jit
def _store_window(
    out_ptr,
    spill_ptr,
    acc,
    offs_q,
    pid_s,
    offs_m,
    mask_m,
    window,
    windows,
    band,
    scale,
    n,
    out_features,
    stride_om,
    stride_ok,
    stride_split,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    FOLDS: tl.constexpr,
):
    """scale * acc into window a of this split's output, acc's column q = 16t + u being row u of the
    window in block band * BLOCKS + t (blocks that do not exist are not written). FOLDS: k is off
    the lattice, so each block's padded rows [size, 16 A) add onto its first rows (docs/spec.md 2b).
    Those rows lie in windows 0 and A - 1, which go whole to a float32 spill of (splits, n, NNZ, 2,
    16) instead, from which ``fold_spill_kernel`` writes their rows of Y, folded, summed over the
    splits and rounded once. A whole window keeps one store per program: storing the folded rows
    to the spill beside the rest to Y took a second layout conversion of the accumulator, and 234
    registers against 167 in bfloat16 (benchmarks/NOTES.md, "Any k", design 11)."""
    _, exists = _band_blocks(offs_q, band, NNZ, BLOCKS)
    mask = mask_m[:, None] & exists[None, :]
    values = acc * scale
    if FOLDS:
        if (window == 0) | (window == windows - 1):
            spill_columns = _spill_columns(offs_q, window, band, BLOCKS)
            tl.store(
                spill_ptr + ((pid_s.to(tl.int64) * n + offs_m[:, None]) * NNZ) * (2 * WINDOW) + spill_columns[None, :],
                values,
                mask=mask,
            )
        else:
            columns = _folded_rows(offs_q, window, windows, band, out_features, NNZ, BLOCKS, False)[0]
            tl.store(
                out_ptr
                + pid_s.to(tl.int64) * stride_split
                + offs_m[:, None] * stride_om
                + columns[None, :] * stride_ok,
                values.to(out_ptr.dtype.element_ty),
                mask=mask,
            )
    else:
        columns = _window_columns(offs_q, window, windows, band, BLOCKS)
        tl.store(
            out_ptr + pid_s.to(tl.int64) * stride_split + offs_m[:, None] * stride_om + columns[None, :] * stride_ok,
            values.to(out_ptr.dtype.element_ty),
            mask=mask,
        )


@triton.jit
def _spill_columns(offs_q, window, band, BLOCKS: tl.constexpr):
    """A spill row's column of accumulator column q = 16t + u in window 0 (slot 0) or A - 1 (slot 1)
    of block band * BLOCKS + t: (2 block + slot) * 16 + u."""
    block = band * BLOCKS + offs_q // WINDOW
    return (block * 2 + (window != 0).to(tl.int32)) * WINDOW + offs_q % WINDOW


@triton.jit
def _multiple(value, MULTIPLE: tl.constexpr):
    """Kernel argument ``value``, which MULTIPLE (a power of two up to 16) divides, written so that
    the compiler knows it: it proves the chunks' alignment from x's start, d, column offset and row
    stride, so rows whose length is off 16 but a multiple of 4 float32 or 8 half-type elements still
    move in vectors. ``tl.multiple_of`` marks the op that defines a value, which an argument has
    none of (loaded values, as in ``_segment``, take it); the product below is one. Triton marks the
    arguments that 16 divides itself, so at 16 the kernels stay as they were."""
    if MULTIPLE > 1 and MULTIPLE < 16:
        value = value // MULTIPLE * MULTIPLE
    return value


@triton.jit
def _segment(segments_ptr, segment, x_ptr, MULTIPLE: tl.constexpr):
    """Segment ``segment`` of a grouped launch (``windowed.forward_blocks``): (its block's x, d,
    column offset, row stride, first group, end group). A row of the int64 segment table holds the
    block's element offset from ``x_ptr``, then those values; MULTIPLE (a power of two up to 16)
    divides every offset, d, column offset and row stride of the launch, which keeps the loads
    vectorised."""
    row = segments_ptr + segment * 6
    x = x_ptr + tl.multiple_of(tl.load(row), MULTIPLE)
    d = tl.multiple_of(tl.load(row + 1), MULTIPLE)
    column_offset = tl.multiple_of(tl.load(row + 2), MULTIPLE)
    stride_xm = tl.multiple_of(tl.load(row + 3), MULTIPLE)
    return x, d, column_offset, stride_xm, tl.load(row + 4).to(tl.int32), tl.load(row + 5).to(tl.int32)


@triton.jit
def _forward_run(
    acc,
    x_ptr,
    g_begin,
    g_end,
    d,
    column_offset,
    stride_xm,
    stride_xd,
    words_ptr,
    rotations_ptr,
    window,
    windows,
    band,
    group_base,
    offs_m,
    mask_m,
    offs_q,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    GROUPS: tl.constexpr,
    UNROLL: tl.constexpr,
    PROMOTE_EVERY: tl.constexpr,
    PIPELINED: tl.constexpr,
):
    """acc + the tile products of groups [g_begin, g_end) of x (see the forward kernel)."""
    if PROMOTE_EVERY == 0:
        acc = _sum_steps(
            acc,
            x_ptr,
            words_ptr,
            rotations_ptr,
            g_begin,
            g_end,
            window,
            windows,
            band,
            group_base,
            column_offset,
            d,
            offs_m,
            mask_m,
            offs_q,
            stride_xm,
            stride_xd,
            NNZ,
            BLOCKS,
            BANDS,
            FP32_PASSES,
            DOT_DTYPE,
            GROUPS,
            UNROLL,
            PIPELINED,
        )
    else:
        for first in range(g_begin, g_end, GROUPS * UNROLL * PROMOTE_EVERY):
            run_end = tl.minimum(first + GROUPS * UNROLL * PROMOTE_EVERY, g_end)
            acc += _sum_steps(
                tl.zeros_like(acc),
                x_ptr,
                words_ptr,
                rotations_ptr,
                first,
                run_end,
                window,
                windows,
                band,
                group_base,
                column_offset,
                d,
                offs_m,
                mask_m,
                offs_q,
                stride_xm,
                stride_xd,
                NNZ,
                BLOCKS,
                BANDS,
                FP32_PASSES,
                DOT_DTYPE,
                GROUPS,
                UNROLL,
                PIPELINED,
            )
    return acc


@triton.jit(do_not_specialize=["stride_om_plain"])
def sparse_jl_windowed_forward_kernel(
    x_ptr,
    words_ptr,
    rotations_ptr,
    out_ptr,
    spill_ptr,
    segments_ptr,
    split_segments_ptr,
    n,
    d,
    column_offset,
    group_base,
    groups,
    groups_per_split,
    windows,
    scale,
    out_features,
    stride_xm,
    stride_xd,
    stride_om,
    stride_ok,
    stride_split,
    stride_om_plain,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FOLDS: tl.constexpr,
    SEGMENTS: tl.constexpr,
    MULTIPLE: tl.constexpr,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    WIDTH: tl.constexpr,
    GROUPS: tl.constexpr,
    UNROLL: tl.constexpr,
    PROMOTE_EVERY: tl.constexpr,
    PIPELINED: tl.constexpr,
    VECTOR_STORES: tl.constexpr,
):
    """out[split, m, window a of every block of one band] for this split's groups. Grid:
    (cdiv(n, BLOCK_M) * A * BANDS, splits); A and the band are the fastest axes so the programs
    sharing a row tile run together (the BANDS siblings of a window read X's chunks in a different
    order, through L2). BLOCKS = min(NNZ, 8) blocks per band; WIDTH is 16 * BLOCKS rounded up to a
    power of two. Each step takes GROUPS groups in one dot and UNROLL (1 or 2) such dots: a lone
    16-column chunk per step left the kernel latency-bound (benchmarks/NOTES.md). With one split
    ``out`` is Y; otherwise a float32 workspace the caller sums in a fixed order. With SEGMENTS (a
    grouped launch over many blocks, ``windowed.forward_blocks``) split s runs segments
    [split_segments[s], split_segments[s + 1]) of the segment table (``_segment``) in turn instead
    of its share of one x's groups. MULTIPLE divides d, the column offset and x's row stride (each
    segment's, and its offset, with SEGMENTS): :func:`_multiple`.

    PROMOTE_EVERY > 0 sums runs of that many steps in a fresh tensor-core accumulator and adds each
    run to the total on the CUDA cores, rounding to nearest. The tensor cores' float32 accumulation
    truncates, so over hundreds of steps into one accumulator its error grows to 1.7e-5 of the
    output (benchmarks/NOTES.md, design 5); a run per step would wait on every dot.

    ``stride_om_plain`` is ``stride_om`` again, which Triton never specialises. Without
    VECTOR_STORES the output tile is stored through it, element by element, whatever the stride:
    vectorising those stores (from a stride that 16 divides) made the loop of the 128-row programs
    that write Y (255 registers) spill and repack X (``windowed._vector_stores``)."""
    if not VECTOR_STORES:
        stride_om = stride_om_plain
    window, band, pid_s, offs_m, mask_m = _program_tile(n, windows, BLOCK_M, BANDS)
    offs_q = tl.arange(0, WIDTH)
    acc = tl.zeros((BLOCK_M, WIDTH), dtype=tl.float32)
    run = (words_ptr, rotations_ptr, window, windows, band, group_base, offs_m, mask_m, offs_q)
    if SEGMENTS:
        for segment in range(tl.load(split_segments_ptr + pid_s), tl.load(split_segments_ptr + pid_s + 1)):
            x_seg, d_seg, offset_seg, stride_seg, g_begin, g_end = _segment(segments_ptr, segment, x_ptr, MULTIPLE)
            acc = _forward_run(
                acc,
                x_seg,
                g_begin,
                g_end,
                d_seg,
                offset_seg,
                stride_seg,
                1,
                *run,
                NNZ,
                BLOCKS,
                BANDS,
                FP32_PASSES,
                DOT_DTYPE,
                GROUPS,
                UNROLL,
                PROMOTE_EVERY,
                PIPELINED,
            )
    else:
        g_begin = pid_s * groups_per_split
        g_end = tl.minimum(g_begin + groups_per_split, groups)
        acc = _forward_run(
            acc,
            x_ptr,
            g_begin,
            g_end,
            _multiple(d, MULTIPLE),
            _multiple(column_offset, MULTIPLE),
            _multiple(stride_xm, MULTIPLE),
            stride_xd,
            *run,
            NNZ,
            BLOCKS,
            BANDS,
            FP32_PASSES,
            DOT_DTYPE,
            GROUPS,
            UNROLL,
            PROMOTE_EVERY,
            PIPELINED,
        )
    _store_window(
        out_ptr,
        spill_ptr,
        acc,
        offs_q,
        pid_s,
        offs_m,
        mask_m,
        window,
        windows,
        band,
        scale,
        n,
        out_features,
        stride_om,
        stride_ok,
        stride_split,
        NNZ,
        BLOCKS,
        FOLDS,
    )


@triton.jit
def _block_bounds(block, out_features, NNZ: tl.constexpr):
    """(first row, rows) of block ``block`` of the windowed layout off the lattice: windows
    [floor(t W / NNZ), floor((t + 1) W / NNZ)) of the W = ceil(k / 16), the last cut at k
    (docs/spec.md 2b, ``sjlt.spec.windowed_block_rows``)."""
    total_windows = (out_features + WINDOW - 1) // WINDOW
    start = WINDOW * ((block * total_windows) // NNZ)
    return start, tl.minimum(WINDOW * (((block + 1) * total_windows) // NNZ), out_features) - start


@triton.jit
def fold_spill_kernel(
    spill_ptr,
    out_ptr,
    n,
    out_features,
    windows,
    splits,
    stride_om,
    stride_ok,
    NNZ: tl.constexpr,
    COLUMNS: tl.constexpr,
):
    """Y's rows in windows 0 and A - 1 of every block t, from the forward's float32 spill of those
    windows (splits, n, NNZ, 2, 16): row r of the block is the spill of padded row r, plus, for its
    first 16 A - size_t rows, that of padded row size_t + r (docs/spec.md 2b), summed over the
    splits in order and rounded once. A program takes one row of Y, its spill's (block, window,
    lane) along COLUMNS (NNZ * 32 rounded up to a power of two): the block bounds are worked out
    once per row, not per entry, and the spill moves in vectors. Grid: n."""
    m = tl.program_id(0).to(tl.int64)
    column = tl.arange(0, COLUMNS)
    block = column // (2 * WINDOW)
    slot = (column // WINDOW) % 2
    start, size = _block_bounds(block, out_features, NNZ)
    last = WINDOW * (windows - 1)  # window A - 1's first padded row
    row = slot * last + column % WINDOW
    valid = (row < size) & (block < NNZ)
    folded_onto = valid & (slot == 0) & (row < WINDOW * windows - size)
    folded_from = block * (2 * WINDOW) + WINDOW + (size + row - last)  # window A - 1's entry of row size_t + r
    total = tl.zeros((COLUMNS,), dtype=tl.float32)
    for split in range(splits):
        spill_row = spill_ptr + (split * n + m) * (NNZ * 2 * WINDOW)
        # only whole blocks mask the loads, so they are vectors: entries past size_t stay inside the
        # row and are loaded but never stored
        own = tl.load(spill_row + column, mask=block < NNZ, other=0.0)
        total += own + tl.load(spill_row + folded_from, mask=folded_onto, other=0.0)
    # Stored one element at a time: unmarked, the stores became vectors where k is a multiple of 16
    # and ran 1.2-2.3x slower in bfloat16 (k = 4000, 12000; H200, benchmarks/NOTES.md "Any k", item
    # 31). The mark is also what kept the kernel before this one clear of a triton 3.6 failure in its
    # layout pass (TritonGPURemoveLayoutConversions) at such k.
    rows = tl.max_contiguous(start + row, 1)
    tl.store(out_ptr + m * stride_om + rows * stride_ok, total.to(out_ptr.dtype.element_ty), mask=valid)


@triton.jit
def unfold_rows_kernel(
    y_ptr,
    out_ptr,
    n,
    out_features,
    windows,
    stride_ym,
    stride_yk,
    NNZ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_U: tl.constexpr,
    PAIRS: tl.constexpr,
):
    """out (n, 16 A NNZ, contiguous): column 16 A t + u of out is the column of y at the row that
    padded row u of block t folds onto (docs/spec.md 2b), so the lattice transpose of out at
    k' = 16 A NNZ is y S. Grid: (cdiv(n, BLOCK_M), cdiv(16 A NNZ / PAIRS, BLOCK_U)).

    PAIRS = 2: y and out are 2-byte values viewed as 4-byte words (strides in words), each word a
    pair of columns, which the caller allows where k and y's row stride are even: every block
    start, fold and cut is then even, so pairs move whole, and in half the loads."""
    offs_m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = tl.program_id(1) * BLOCK_U + tl.arange(0, BLOCK_U)
    offs_u = offs_c * PAIRS
    block_rows = WINDOW * windows
    block = offs_u // block_rows
    padded = offs_u % block_rows
    start, size = _block_bounds(block, out_features, NNZ)
    row = start + tl.where(padded >= size, padded - size, padded)
    mask = (offs_m < n)[:, None] & (block < NNZ)[None, :]
    values = tl.load(y_ptr + offs_m[:, None] * stride_ym + (row // PAIRS)[None, :] * stride_yk, mask=mask)
    tl.store(out_ptr + offs_m[:, None] * (block_rows * NNZ // PAIRS) + offs_c[None, :], values, mask=mask)


@triton.jit
def fold_rows_kernel(
    y_ptr,
    out_ptr,
    n,
    out_features,
    windows,
    stride_ym,
    stride_yk,
    stride_om,
    stride_ok,
    NNZ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """out (n, k) from y (n, 16 A NNZ), the forward at the lattice k' = 16 A NNZ: row r of block t
    is y's column 16 A t + r - start_t, plus column 16 A t + r - start_t + size_t where that padded
    row exists (docs/spec.md 2b: padded row u lands on row u mod size_t), summed in float32 and
    rounded once. The mirror of ``unfold_rows_kernel``. Grid: (cdiv(n, BLOCK_M), cdiv(k, BLOCK_K))."""
    offs_m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_r = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    block_rows = WINDOW * windows
    total_windows = (out_features + WINDOW - 1) // WINDOW
    # the block whose windows [floor(t W / NNZ), floor((t + 1) W / NNZ)) hold row r's window w
    block = ((offs_r // WINDOW + 1) * NNZ - 1) // total_windows
    start, size = _block_bounds(block, out_features, NNZ)
    padded = offs_r - start
    column = block * block_rows + padded
    mask_m = (offs_m < n)[:, None]
    mask_r = offs_r < out_features
    rows = y_ptr + offs_m[:, None] * stride_ym
    value = tl.load(rows + column[None, :] * stride_yk, mask=mask_m & mask_r[None, :], other=0.0)
    folds = mask_r & (padded + size < block_rows)
    extra = tl.load(rows + (column + size)[None, :] * stride_yk, mask=mask_m & folds[None, :], other=0.0)
    total = value.to(tl.float32) + extra.to(tl.float32)
    out = out_ptr + offs_m[:, None] * stride_om + offs_r[None, :] * stride_ok
    tl.store(out, total.to(out_ptr.dtype.element_ty), mask=mask_m & mask_r[None, :])


@triton.jit
def _shuffle_fetch(
    x_ptr,
    words_ptr,
    chunk,
    position,
    g_end,
    windows,
    band,
    group_base,
    column_offset,
    d,
    offs_m,
    mask_m,
    lanes,
    stride_xm,
    stride_xd,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
):
    """X's chunk ``chunk`` in column order ([BLOCK_M, 16]; zeros past g_end and outside [0, d)) and
    its words in the blocks of ``band`` (0 for blocks that do not exist), one scalar per block."""
    cols, mask_c = _step_columns(chunk, chunk, chunk, chunk, position, g_end, windows, group_base, column_offset, d, 1)
    x = _load_chunks(x_ptr, cols, mask_c, offs_m, mask_m, stride_xm, stride_xd)
    base = words_ptr + chunk * NNZ + band * BLOCKS
    return (
        x,
        _block_word(base, 0, band, NNZ, BLOCKS),
        _block_word(base, 1, band, NNZ, BLOCKS),
        _block_word(base, 2, band, NNZ, BLOCKS),
        _block_word(base, 3, band, NNZ, BLOCKS),
        _block_word(base, 4, band, NNZ, BLOCKS),
        _block_word(base, 5, band, NNZ, BLOCKS),
        _block_word(base, 6, band, NNZ, BLOCKS),
        _block_word(base, 7, band, NNZ, BLOCKS),
    )


@triton.jit
def _block_word(base, t: tl.constexpr, band, NNZ: tl.constexpr, BLOCKS: tl.constexpr):
    """The chunk's word in block band * BLOCKS + t, 0 where that block does not exist."""
    word = tl.zeros((), dtype=tl.int32)
    if t < BLOCKS:
        word = tl.load(base + t, mask=band * BLOCKS + t < NNZ, other=0)
    return word


@triton.jit
def _slope(word0, word1, band, NNZ: tl.constexpr, BLOCKS: tl.constexpr):
    """a_c of a chunk from its words in the band's first two blocks, whose masks differ by a_c * 1
    (docs/spec.md 2b: the blocks' t mod 16 are 2j and 2j + 1); 0 for a band of one block, where any
    frame serves."""
    slope = tl.zeros_like(word0)
    if BLOCKS > 1:
        slope = tl.where(band * BLOCKS + 1 < NNZ, (word0 ^ word1) & (WINDOW - 1), 0)
    return slope


@triton.jit
def _band_times(a, t: tl.constexpr, band, BLOCKS: tl.constexpr):
    """a * (T mod 16) in GF(16) for block T = band * BLOCKS + t: GF(16) adds by XOR, and
    band * BLOCKS mod 16 is 0 or 8 (with one band, always 0)."""
    return _gf16_times(a, t) ^ tl.where((band * BLOCKS) % 16 == 8, _gf16_times(a, 8), 0)


@triton.jit
def _sort_slots(
    slots_ptr,
    rotations_ptr,
    words_ptr,
    first,
    g_end,
    window,
    windows,
    band,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    SLOTS: tl.constexpr,
):
    """Write the table chunks at ``window`` of groups [first, min(first + SLOTS, g_end)) to
    ``slots_ptr``, ordered by slope a_c (stably), and return how many there are."""
    groups = first + tl.arange(0, SLOTS)
    valid = groups < g_end
    chunk = _window_chunk(rotations_ptr, tl.minimum(groups, g_end - 1), window, windows, band, BANDS)
    base = words_ptr + chunk * NNZ + band * BLOCKS
    word0 = tl.load(base, mask=valid, other=0)
    word1 = word0
    if BLOCKS > 1:  # block 1 of the band, if it has one (the scalar test widened to the vector's shape)
        word1 = tl.load(base + 1, mask=valid & (groups * 0 + band * BLOCKS + 1 < NNZ), other=0)
    key = tl.where(valid, _slope(word0, word1, band, NNZ, BLOCKS), WINDOW)  # past the end: none
    rank = tl.zeros_like(key)
    start = 0
    for slope in tl.static_range(WINDOW):  # one slope at a time: [SLOTS] vectors, few registers
        member = (key == slope).to(tl.int32)
        rank += member * (start + tl.cumsum(member, 0) - 1)
        start += tl.sum(member, 0)
    tl.store(slots_ptr + rank, chunk.to(tl.int32), mask=valid)
    return tl.minimum(g_end - first, SLOTS)


@triton.jit
def _reframe(acc, slopes, t: tl.constexpr, band, lanes, zeros_m, BLOCKS: tl.constexpr):
    """Block t's accumulator moved from one frame to another (``_shuffle_run``): ``slopes`` is the
    XOR of the two frames' slopes."""
    if t < BLOCKS:
        source = lanes ^ _band_times(slopes, t, band, BLOCKS)
        acc = tl.gather(acc, source[None, :] + zeros_m[:, None], 1)
    return acc


@triton.jit
def _reframe_band(a0, a1, a2, a3, a4, a5, a6, a7, slopes, band, lanes, zeros_m, BLOCKS: tl.constexpr):
    """The band's eight block accumulators moved between frames whose slopes XOR to ``slopes``."""
    return (
        _reframe(a0, slopes, 0, band, lanes, zeros_m, BLOCKS),
        _reframe(a1, slopes, 1, band, lanes, zeros_m, BLOCKS),
        _reframe(a2, slopes, 2, band, lanes, zeros_m, BLOCKS),
        _reframe(a3, slopes, 3, band, lanes, zeros_m, BLOCKS),
        _reframe(a4, slopes, 4, band, lanes, zeros_m, BLOCKS),
        _reframe(a5, slopes, 5, band, lanes, zeros_m, BLOCKS),
        _reframe(a6, slopes, 6, band, lanes, zeros_m, BLOCKS),
        _reframe(a7, slopes, 7, band, lanes, zeros_m, BLOCKS),
    )


@triton.jit
def _shuffle_term(acc, moved, word, source, t: tl.constexpr, BLOCKS: tl.constexpr):
    """acc + the chunk's signed terms in block t of the band (if the band has it): ``moved`` holds
    chunk column ``source`` in each lane, its sign bit 16 + source of the block's word."""
    if t < BLOCKS:
        negative = (word >> (16 + source)) & 1
        acc = acc + moved.to(tl.float32) * tl.where(negative != 0, -1.0, 1.0)[None, :]
    return acc


@triton.jit
def _store_block(
    out_ptr,
    spill_ptr,
    acc,
    t: tl.constexpr,
    pid_s,
    offs_m,
    mask_m,
    lanes,
    window,
    windows,
    band,
    scale,
    n,
    out_features,
    stride_om,
    stride_ok,
    stride_split,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    FOLDS: tl.constexpr,
):
    """Window a of block band * BLOCKS + t of this split's output, if the block exists."""
    if t < BLOCKS:  # the block's columns of a one-band accumulator
        _store_window(
            out_ptr,
            spill_ptr,
            acc,
            t * WINDOW + lanes,
            pid_s,
            offs_m,
            mask_m,
            window,
            windows,
            band,
            scale,
            n,
            out_features,
            stride_om,
            stride_ok,
            stride_split,
            NNZ,
            BLOCKS,
            FOLDS,
        )


@triton.jit
def _shuffle_step(
    a0,
    a1,
    a2,
    a3,
    a4,
    a5,
    a6,
    a7,
    frame,
    x,
    w0,
    w1,
    w2,
    w3,
    w4,
    w5,
    w6,
    w7,
    band,
    lanes,
    zeros_m,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
):
    """The band's eight block accumulators plus one chunk's terms (x and its words in the band's
    blocks), moved first into the frame of the chunk's slope if they are not in it; and that frame."""
    slope = _slope(w0, w1, band, NNZ, BLOCKS)
    if slope != frame:
        a0, a1, a2, a3, a4, a5, a6, a7 = _reframe_band(
            a0, a1, a2, a3, a4, a5, a6, a7, slope ^ frame, band, lanes, zeros_m, BLOCKS
        )
        frame = slope
    source = lanes ^ (w0 & (WINDOW - 1)) ^ _band_times(slope, 0, band, BLOCKS)
    moved = tl.gather(x, source[None, :] + zeros_m[:, None], 1)
    a0 = _shuffle_term(a0, moved, w0, source, 0, BLOCKS)
    a1 = _shuffle_term(a1, moved, w1, source, 1, BLOCKS)
    a2 = _shuffle_term(a2, moved, w2, source, 2, BLOCKS)
    a3 = _shuffle_term(a3, moved, w3, source, 3, BLOCKS)
    a4 = _shuffle_term(a4, moved, w4, source, 4, BLOCKS)
    a5 = _shuffle_term(a5, moved, w5, source, 5, BLOCKS)
    a6 = _shuffle_term(a6, moved, w6, source, 6, BLOCKS)
    a7 = _shuffle_term(a7, moved, w7, source, 7, BLOCKS)
    return a0, a1, a2, a3, a4, a5, a6, a7, frame


@triton.jit
def _shuffle_run(
    a0,
    a1,
    a2,
    a3,
    a4,
    a5,
    a6,
    a7,
    frame,
    x_ptr,
    g_begin,
    g_end,
    d,
    column_offset,
    stride_xm,
    stride_xd,
    words_ptr,
    rotations_ptr,
    slots_ptr,
    window,
    windows,
    band,
    group_base,
    offs_m,
    mask_m,
    lanes,
    zeros_m,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    SLOTS: tl.constexpr,
):
    """The eight block accumulators plus the terms of groups [g_begin, g_end) of x (see the
    CUDA-core forward kernel), and the frame they end in.

    Frames: chunk c's column i lands on lane i XOR m_(c,T) of its window in block T, with
    m_(c,T) = a_c * (T mod 16) XOR b_c. The accumulators are kept in the frame of a slope f: block
    T's lane j holds output lane j XOR f * (T mod 16). In the frame f = a_c every block of the band
    takes column j XOR b_c' into lane j, b_c' = m_(c,T) XOR a_c * (T mod 16) being the same for every
    T, so one warp shuffle per element moves the chunk for all the band's blocks, where each block
    would need its own. The groups are visited SLOTS at a time, sorted by slope (``_sort_slots``),
    so the frame changes (a shuffle of every accumulator) at most 16 times per SLOTS groups.
    Loads run two slots ahead (chunk and words; the chunk index three): one group ahead left the
    loop waiting on them (benchmarks/NOTES.md, "Grouped launches")."""
    fetch = (windows, band, group_base, column_offset, d, offs_m, mask_m, lanes, stride_xm, stride_xd, NNZ, BLOCKS)
    step = (band, lanes, zeros_m, NNZ, BLOCKS)
    for first in range(g_begin, g_end, SLOTS):
        tl.debug_barrier()  # the previous window's slots are read
        count = _sort_slots(
            slots_ptr, rotations_ptr, words_ptr, first, g_end, window, windows, band, NNZ, BLOCKS, BANDS, SLOTS
        )
        tl.debug_barrier()  # the slots are written
        last = count - 1
        chunk = tl.load(slots_ptr).to(tl.int64)
        x, w0, w1, w2, w3, w4, w5, w6, w7 = _shuffle_fetch(x_ptr, words_ptr, chunk, 0, count, *fetch)
        chunk = tl.load(slots_ptr + tl.minimum(1, last)).to(tl.int64)
        x_1, v0, v1, v2, v3, v4, v5, v6, v7 = _shuffle_fetch(x_ptr, words_ptr, chunk, 1, count, *fetch)
        chunk = tl.load(slots_ptr + tl.minimum(2, last)).to(tl.int64)
        # three slots per pass, one buffer each, so no buffer is copied into another; the slots past
        # the count are skipped, their (masked) loads having been issued
        for slot in range(0, count, 3):
            x_2, u0, u1, u2, u3, u4, u5, u6, u7 = _shuffle_fetch(x_ptr, words_ptr, chunk, slot + 2, count, *fetch)
            chunk = tl.load(slots_ptr + tl.minimum(slot + 3, last)).to(tl.int64)
            a0, a1, a2, a3, a4, a5, a6, a7, frame = _shuffle_step(
                a0, a1, a2, a3, a4, a5, a6, a7, frame, x, w0, w1, w2, w3, w4, w5, w6, w7, *step
            )
            x, w0, w1, w2, w3, w4, w5, w6, w7 = _shuffle_fetch(x_ptr, words_ptr, chunk, slot + 3, count, *fetch)
            chunk = tl.load(slots_ptr + tl.minimum(slot + 4, last)).to(tl.int64)
            if slot + 1 < count:
                a0, a1, a2, a3, a4, a5, a6, a7, frame = _shuffle_step(
                    a0, a1, a2, a3, a4, a5, a6, a7, frame, x_1, v0, v1, v2, v3, v4, v5, v6, v7, *step
                )
            x_1, v0, v1, v2, v3, v4, v5, v6, v7 = _shuffle_fetch(x_ptr, words_ptr, chunk, slot + 4, count, *fetch)
            chunk = tl.load(slots_ptr + tl.minimum(slot + 5, last)).to(tl.int64)
            if slot + 2 < count:
                a0, a1, a2, a3, a4, a5, a6, a7, frame = _shuffle_step(
                    a0, a1, a2, a3, a4, a5, a6, a7, frame, x_2, u0, u1, u2, u3, u4, u5, u6, u7, *step
                )
    return a0, a1, a2, a3, a4, a5, a6, a7, frame


@triton.jit
def sparse_jl_windowed_shuffle_forward_kernel(
    x_ptr,
    words_ptr,
    rotations_ptr,
    out_ptr,
    spill_ptr,
    segments_ptr,
    split_segments_ptr,
    slots_ptr,
    n,
    d,
    column_offset,
    group_base,
    groups,
    groups_per_split,
    windows,
    scale,
    out_features,
    stride_xm,
    stride_xd,
    stride_om,
    stride_ok,
    stride_split,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FOLDS: tl.constexpr,
    SEGMENTS: tl.constexpr,
    MULTIPLE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SLOTS: tl.constexpr,
):
    """The forward's output as ``sparse_jl_windowed_forward_kernel`` writes it (same grid, same
    splits and segments), on the CUDA cores. A block's signed-permutation tile only moves and signs
    a chunk's 16 columns, so a program loads each chunk once and for every block of its band adds
    sign * x[:, i] to lane i XOR m of that block's 16 accumulator columns, moving the values between
    the lanes that hold a row with warp shuffles: one per element for the whole band, the
    accumulators being kept in the frame of the chunk's slope (``_shuffle_run``). No tile is built
    and no dot taken: the work per input element (a shuffle and 8 multiply-adds per band) does not
    depend on the rows per program, where the tile kernel's tile build serves only BLOCK_M rows;
    and float32 sums are exact float32 additions, with no three-way split and no truncating
    tensor-core accumulator. ``slots_ptr``: SLOTS int32 of scratch per program. Loading X's columns
    in permuted order instead ran 10-35x slower (benchmarks/NOTES.md)."""
    window, band, pid_s, offs_m, mask_m = _program_tile(n, windows, BLOCK_M, BANDS)
    lanes = tl.arange(0, WINDOW)
    zeros_m = tl.zeros_like(offs_m).to(tl.int32)
    a0 = tl.zeros((BLOCK_M, WINDOW), dtype=tl.float32)
    a1 = a0
    a2 = a0
    a3 = a0
    a4 = a0
    a5 = a0
    a6 = a0
    a7 = a0
    frame = tl.zeros((), dtype=tl.int32)
    accs = (a0, a1, a2, a3, a4, a5, a6, a7, frame)
    slots_ptr += (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)).to(tl.int64) * SLOTS
    run = (words_ptr, rotations_ptr, slots_ptr, window, windows, band, group_base, offs_m, mask_m, lanes, zeros_m)
    if SEGMENTS:
        for segment in range(tl.load(split_segments_ptr + pid_s), tl.load(split_segments_ptr + pid_s + 1)):
            x_seg, d_seg, offset_seg, stride_seg, g_begin, g_end = _segment(segments_ptr, segment, x_ptr, MULTIPLE)
            a0, a1, a2, a3, a4, a5, a6, a7, frame = _shuffle_run(
                a0,
                a1,
                a2,
                a3,
                a4,
                a5,
                a6,
                a7,
                frame,
                x_seg,
                g_begin,
                g_end,
                d_seg,
                offset_seg,
                stride_seg,
                1,
                *run,
                NNZ,
                BLOCKS,
                BANDS,
                SLOTS,
            )
    else:
        g_begin = pid_s * groups_per_split
        g_end = tl.minimum(g_begin + groups_per_split, groups)
        a0, a1, a2, a3, a4, a5, a6, a7, frame = _shuffle_run(
            *accs,
            x_ptr,
            g_begin,
            g_end,
            _multiple(d, MULTIPLE),
            _multiple(column_offset, MULTIPLE),
            _multiple(stride_xm, MULTIPLE),
            stride_xd,
            *run,
            NNZ,
            BLOCKS,
            BANDS,
            SLOTS,
        )
    # back to the natural frame (slope 0)
    a0, a1, a2, a3, a4, a5, a6, a7 = _reframe_band(a0, a1, a2, a3, a4, a5, a6, a7, frame, band, lanes, zeros_m, BLOCKS)
    # eight accumulators and stores, one per block: Triton has no arrays of tensors
    tile = (pid_s, offs_m, mask_m, lanes, window, windows, band, scale, n, out_features)
    tile = tile + (stride_om, stride_ok, stride_split)
    _store_block(out_ptr, spill_ptr, a0, 0, *tile, NNZ, BLOCKS, FOLDS)
    _store_block(out_ptr, spill_ptr, a1, 1, *tile, NNZ, BLOCKS, FOLDS)
    _store_block(out_ptr, spill_ptr, a2, 2, *tile, NNZ, BLOCKS, FOLDS)
    _store_block(out_ptr, spill_ptr, a3, 3, *tile, NNZ, BLOCKS, FOLDS)
    _store_block(out_ptr, spill_ptr, a4, 4, *tile, NNZ, BLOCKS, FOLDS)
    _store_block(out_ptr, spill_ptr, a5, 5, *tile, NNZ, BLOCKS, FOLDS)
    _store_block(out_ptr, spill_ptr, a6, 6, *tile, NNZ, BLOCKS, FOLDS)
    _store_block(out_ptr, spill_ptr, a7, 7, *tile, NNZ, BLOCKS, FOLDS)


@triton.jit
def _split_operand(y, FP32_PASSES: tl.constexpr, DOT_DTYPE: tl.constexpr, TILE_LEFT: tl.constexpr):
    """A loop-invariant y tile as the dot operands of its exact passes (hi, mid, lo; all three the
    same tile for one pass), transposed for TILE_LEFT."""
    if FP32_PASSES > 0:
        hi, mid, lo = split_bf16x3(y, FP32_PASSES)
        hi = hi.to(DOT_DTYPE)
        mid = mid.to(DOT_DTYPE)
        lo = lo.to(DOT_DTYPE)
    else:
        hi = y.to(DOT_DTYPE)
        mid = hi
        lo = hi
    if TILE_LEFT:
        hi = tl.trans(hi)
        mid = tl.trans(mid)
        lo = tl.trans(lo)
    return hi, mid, lo


@triton.jit
def _load_folded(
    y_ptr,
    offs_m,
    mask,
    offs_q,
    window,
    windows,
    band,
    out_features,
    stride_ym,
    stride_yk,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    PER_ROW: tl.constexpr,
):
    """y's columns of ``window`` off the lattice: aligned whole windows in one load, the rows that
    fold (window A - 1 only) in another."""
    columns, _, beyond, offset, start = _folded_rows(offs_q, window, windows, band, out_features, NNZ, BLOCKS, PER_ROW)
    y = tl.load(
        y_ptr + offs_m[:, None] * stride_ym + columns[None, :] * stride_yk, mask=mask & ~beyond[None, :], other=0.0
    )
    if window == windows - 1:
        y += tl.load(
            y_ptr + offs_m[:, None] * stride_ym + (start + offset)[None, :] * stride_yk,
            mask=mask & beyond[None, :],
            other=0.0,
        )
    return y


@triton.jit
def _band_operand(
    y_ptr,
    offs_m,
    mask_m,
    offs_q,
    window,
    windows,
    band,
    stride_ym,
    stride_yk,
    out_features,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FOLDS: tl.constexpr,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    TILE_LEFT: tl.constexpr,
):
    """y's columns of ``window`` in the blocks of ``band`` ([BLOCK_M, WIDTH], zeros for missing
    blocks), as dot operands (_split_operand). FOLDS: through the fold of padded rows into each
    block (docs/spec.md 2b)."""
    _, block_exists = _band_blocks(offs_q, band, NNZ, BLOCKS)
    mask = mask_m[:, None] & block_exists[None, :]
    if FOLDS:
        if _cut_program(window, windows, band, out_features, BANDS):
            y = _load_folded(
                y_ptr,
                offs_m,
                mask,
                offs_q,
                window,
                windows,
                band,
                out_features,
                stride_ym,
                stride_yk,
                NNZ,
                BLOCKS,
                True,
            )
        else:
            y = _load_folded(
                y_ptr,
                offs_m,
                mask,
                offs_q,
                window,
                windows,
                band,
                out_features,
                stride_ym,
                stride_yk,
                NNZ,
                BLOCKS,
                False,
            )
    else:
        columns = _window_columns(offs_q, window, windows, band, BLOCKS)
        y = tl.load(y_ptr + offs_m[:, None] * stride_ym + columns[None, :] * stride_yk, mask=mask, other=0.0)
    return _split_operand(y, FP32_PASSES, DOT_DTYPE, TILE_LEFT)


@triton.jit
def _tile_dot(tile, hi, mid, lo, z, FP32_PASSES: tl.constexpr, TILE_LEFT: tl.constexpr):
    """z + tile @ y^T (TILE_LEFT) or z + y @ tile, over the exact passes."""
    if TILE_LEFT:
        z = tl.dot(tile, hi, z)
        if FP32_PASSES >= 2:
            z = tl.dot(tile, mid, z)
        if FP32_PASSES >= 3:
            z = tl.dot(tile, lo, z)
    else:
        z = tl.dot(hi, tile, z)
        if FP32_PASSES >= 2:
            z = tl.dot(mid, tile, z)
        if FP32_PASSES >= 3:
            z = tl.dot(lo, tile, z)
    return z


@triton.jit
def _chunk_elements(offs_m, mask_m, cols, mask_d, TILE_LEFT: tl.constexpr):
    """(rows, columns, mask) of the step's z: [16 GROUPS, BLOCK_M] with TILE_LEFT, else its transpose."""
    if TILE_LEFT:
        rows = offs_m[None, :]
        columns = cols[:, None]
        mask = mask_m[None, :] & mask_d[:, None]
    else:
        rows = offs_m[:, None]
        columns = cols[None, :]
        mask = mask_m[:, None] & mask_d[None, :]
    return rows, columns, mask


@triton.jit
def _load_partial(
    partial_ptr,
    zeros,
    offs_m,
    mask_m,
    cols,
    mask_d,
    partial_col0,
    stride_pm,
    stride_pd,
    TILE_LEFT: tl.constexpr,
    ADD_PARTIAL: tl.constexpr,
):
    """With ADD_PARTIAL, the earlier bands' float32 sums at the step's columns (else ``zeros``)."""
    partial = zeros
    if ADD_PARTIAL:
        rows, columns, mask = _chunk_elements(offs_m, mask_m, cols, mask_d, TILE_LEFT)
        partial = tl.load(
            partial_ptr + rows * stride_pm + (columns - partial_col0) * stride_pd, mask=mask, other=0.0
        ).to(tl.float32)
    return partial


@triton.jit
def _store_chunks(
    out_ptr,
    partial_ptr,
    partial,
    z,
    offs_m,
    mask_m,
    cols,
    mask_d,
    out_col0,
    partial_col0,
    scale,
    stride_om,
    stride_od,
    stride_pm,
    stride_pd,
    TILE_LEFT: tl.constexpr,
    ADD_PARTIAL: tl.constexpr,
    PARTIAL_FIRST: tl.constexpr,
):
    """out[m, cols] = (partial[m, cols] +) scale * z, z being [16 GROUPS, BLOCK_M] with TILE_LEFT; with
    PARTIAL_FIRST ``partial`` holds the partial sums, loaded by the caller before the step's tile and
    dot (``_load_partial``) so that their latency overlaps them, else they are loaded here."""
    z = z * scale
    if ADD_PARTIAL:
        if not PARTIAL_FIRST:
            partial = _load_partial(
                partial_ptr, z, offs_m, mask_m, cols, mask_d, partial_col0, stride_pm, stride_pd, TILE_LEFT, True
            )
        z += partial
    rows, columns, mask = _chunk_elements(offs_m, mask_m, cols, mask_d, TILE_LEFT)
    tl.store(out_ptr + rows * stride_om + (columns - out_col0) * stride_od, z.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _store_groups(
    out_ptr,
    z,
    twin_z,
    offs_m,
    mask_m,
    cols,
    mask_d,
    twin_cols,
    twin_mask_d,
    out_col0,
    scale,
    stride_om,
    stride_od,
    WHOLE_GROUPS: tl.constexpr,
):
    """out = scale * z at ``cols`` and scale * twin_z at ``twin_cols`` (both z^T, [16 GROUPS,
    BLOCK_M]) as one store of each group's two chunks, in column order ([GROUPS, 32, BLOCK_M]), so
    that each sector between the two is written in one instruction, however far off 32 bytes the
    rows start (a chunk stored alone writes parts of two sectors whose other parts come from another
    store: benchmarks/NOTES.md, "Any d", the store probe on pairs). The addresses read as runs of
    16 contiguous columns, so that the store's lanes run along a row's 32 columns: with an address
    per column they ran down 32 rows, one element each (H200, four windows: 1.90-2.14x the aligned d
    against 1.55-1.96x). WHOLE_GROUPS (two windows per block): the pair is the whole group, whose 32
    contiguous columns the addresses say (1.34-1.38x against 1.39-1.50x as two runs of 16)."""
    GROUPS: tl.constexpr = z.shape[0] // WINDOW
    BLOCK_M: tl.constexpr = z.shape[1]
    first = cols < twin_cols  # window a's chunk comes first in the group (per row of z^T)
    lead = tl.reshape(tl.where(first[:, None], z, twin_z), (GROUPS, WINDOW, BLOCK_M))
    follow = tl.reshape(tl.where(first[:, None], twin_z, z), (GROUPS, WINDOW, BLOCK_M))
    values = tl.reshape(tl.permute(tl.join(lead, follow), (0, 3, 1, 2)), (GROUPS, 2 * WINDOW, BLOCK_M))
    lead_mask = tl.reshape(tl.where(first, mask_d, twin_mask_d).to(tl.int8), (GROUPS, WINDOW))
    follow_mask = tl.reshape(tl.where(first, twin_mask_d, mask_d).to(tl.int8), (GROUPS, WINDOW))
    mask = tl.reshape(tl.permute(tl.join(lead_mask, follow_mask), (0, 2, 1)), (GROUPS, 2 * WINDOW)) != 0
    lanes = tl.arange(0, 2 * WINDOW)
    lead_start = tl.min(tl.reshape(tl.minimum(cols, twin_cols), (GROUPS, WINDOW)), axis=1)
    columns = lead_start[:, None] + lanes[None, :]
    if not WHOLE_GROUPS:  # the follow chunk jumps away where window a's chunk is its group's last
        follow_start = tl.min(tl.reshape(tl.maximum(cols, twin_cols), (GROUPS, WINDOW)), axis=1)
        columns += (follow_start - lead_start - WINDOW)[:, None] * (lanes[None, :] >= WINDOW)
    tl.store(
        out_ptr + offs_m[None, None, :] * stride_om + (columns[:, :, None] - out_col0) * stride_od,
        (values * scale).to(out_ptr.dtype.element_ty),
        mask=mask[:, :, None] & mask_m[None, None, :],
    )


@triton.jit
def _store_step(
    out_ptr,
    partial_ptr,
    partial,
    z,
    twin_z,
    offs_m,
    mask_m,
    cols,
    mask_d,
    twin_cols,
    twin_mask_d,
    out_col0,
    partial_col0,
    scale,
    stride_om,
    stride_od,
    stride_pm,
    stride_pd,
    TILE_LEFT: tl.constexpr,
    ADD_PARTIAL: tl.constexpr,
    PARTIAL_FIRST: tl.constexpr,
    TWINS: tl.constexpr,
    JOINED_PAIRS: tl.constexpr,
    WHOLE_GROUPS: tl.constexpr,
):
    """A transpose step's stores (``_store_chunks``): its chunks, then with TWINS the twin window's,
    which add no partial; with JOINED_PAIRS both as one (``_store_groups``)."""
    if JOINED_PAIRS:
        tl.static_assert(TWINS and TILE_LEFT)
        _store_groups(
            out_ptr,
            z,
            twin_z,
            offs_m,
            mask_m,
            cols,
            mask_d,
            twin_cols,
            twin_mask_d,
            out_col0,
            scale,
            stride_om,
            stride_od,
            WHOLE_GROUPS,
        )
        return
    _store_chunks(
        out_ptr,
        partial_ptr,
        partial,
        z,
        offs_m,
        mask_m,
        cols,
        mask_d,
        out_col0,
        partial_col0,
        scale,
        stride_om,
        stride_od,
        stride_pm,
        stride_pd,
        TILE_LEFT,
        ADD_PARTIAL,
        PARTIAL_FIRST,
    )
    if TWINS:
        _store_chunks(
            out_ptr,
            partial_ptr,
            partial,  # unread: ADD_PARTIAL is off
            twin_z,
            offs_m,
            mask_m,
            twin_cols,
            twin_mask_d,
            out_col0,
            partial_col0,
            scale,
            stride_om,
            stride_od,
            stride_pm,
            stride_pd,
            TILE_LEFT,
            False,
            False,
        )


@triton.jit
def _transpose_steps(
    hi,
    mid,
    lo,
    hi1,
    mid1,
    lo1,
    words_ptr,
    rotations_ptr,
    order_ptr,
    out_ptr,
    partial_ptr,
    first_group,
    g_end,
    window,
    windows,
    band,
    group_base,
    column_offset,
    d,
    offs_m,
    mask_m,
    offs_q,
    out_col0,
    partial_col0,
    scale,
    stride_om,
    stride_od,
    stride_pm,
    stride_pd,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    GROUPS: tl.constexpr,
    TILE_LEFT: tl.constexpr,
    ADD_PARTIAL: tl.constexpr,
    PAIRED: tl.constexpr,
    PIPELINED: tl.constexpr,
    PARTIAL_FIRST: tl.constexpr,
    TWINS: tl.constexpr,
    JOINED_PAIRS: tl.constexpr,
    WHOLE_GROUPS: tl.constexpr,
):
    """Z's chunks at ``window`` in ``band`` of the groups at positions [first_group, g_end), GROUPS
    per step, from the loop-invariant y operands (hi, mid, lo). With PAIRED (band 0, positions in
    the order table's order, all sharing one shift) the same chunks' band-1 terms too, from
    (hi1, mid1, lo1): a chunk's band-1 window differs from its band-0 one, the chunk does not. With
    TWINS (one band, no partial) also the chunks at window + 1, from (hi1, mid1, lo1), so that one
    program writes both parts of the 32-byte sectors the two share (none past the last window);
    ``_store_step`` stores them after window a's, or with JOINED_PAIRS together.
    With PIPELINED a step's loads (the order table and rotations, then the words) are issued one
    and two steps ahead, as in ``_sum_steps_pipelined``."""
    tl.static_assert(not TWINS or not (PAIRED or ADD_PARTIAL))
    zeros = tl.zeros((WINDOW * GROUPS, BLOCK_M) if TILE_LEFT else (BLOCK_M, WINDOW * GROUPS), dtype=tl.float32)
    twin = window + 1
    twin_end = tl.where(twin < windows, g_end, 0)  # no twin past the last window
    if PIPELINED:
        c0, c1, c2, c3 = _step_chunks(
            rotations_ptr, order_ptr, first_group, g_end, window, windows, band, BANDS, GROUPS, PAIRED
        )
        cols, mask_d = _step_columns(c0, c1, c2, c3, first_group, g_end, windows, group_base, column_offset, d, GROUPS)
        w0, w1, w2, w3 = _step_words(words_ptr, c0, c1, c2, c3, offs_q, band, NNZ, BLOCKS, GROUPS)
        v0, v1, v2, v3 = w0, w1, w2, w3
        e0, e1, e2, e3 = c0, c1, c2, c3
        twin_cols, twin_mask_d = cols, mask_d
        if PAIRED:
            v0, v1, v2, v3 = _step_words(words_ptr, c0, c1, c2, c3, offs_q, 1, NNZ, BLOCKS, GROUPS)
        if TWINS:
            e0, e1, e2, e3 = _step_chunks(
                rotations_ptr, order_ptr, first_group, g_end, twin, windows, band, BANDS, GROUPS, False
            )
            twin_cols, twin_mask_d = _step_columns(
                e0, e1, e2, e3, first_group, twin_end, windows, group_base, column_offset, d, GROUPS
            )
            v0, v1, v2, v3 = _step_words(words_ptr, e0, e1, e2, e3, offs_q, band, NNZ, BLOCKS, GROUPS)
            e0, e1, e2, e3 = _step_chunks(
                rotations_ptr, order_ptr, first_group + GROUPS, g_end, twin, windows, band, BANDS, GROUPS, False
            )
        c0, c1, c2, c3 = _step_chunks(
            rotations_ptr, order_ptr, first_group + GROUPS, g_end, window, windows, band, BANDS, GROUPS, PAIRED
        )
        for first in range(first_group, g_end, GROUPS):
            partial = _load_partial(
                partial_ptr,
                zeros,
                offs_m,
                mask_m,
                cols,
                mask_d,
                partial_col0,
                stride_pm,
                stride_pd,
                TILE_LEFT,
                ADD_PARTIAL and PARTIAL_FIRST,
            )
            tile = _stacked_tile(w0, w1, w2, w3, offs_q, band, NNZ, BLOCKS, GROUPS, not TILE_LEFT)
            tile1 = tile
            if PAIRED:
                tile1 = _stacked_tile(v0, v1, v2, v3, offs_q, 1, NNZ, BLOCKS, GROUPS, not TILE_LEFT)
            if TWINS:
                tile1 = _stacked_tile(v0, v1, v2, v3, offs_q, band, NNZ, BLOCKS, GROUPS, not TILE_LEFT)
            next_cols, next_mask_d = _step_columns(
                c0, c1, c2, c3, first + GROUPS, g_end, windows, group_base, column_offset, d, GROUPS
            )
            next_twin_cols, next_twin_mask_d = next_cols, next_mask_d
            w0, w1, w2, w3 = _step_words(words_ptr, c0, c1, c2, c3, offs_q, band, NNZ, BLOCKS, GROUPS)
            if PAIRED:
                v0, v1, v2, v3 = _step_words(words_ptr, c0, c1, c2, c3, offs_q, 1, NNZ, BLOCKS, GROUPS)
            if TWINS:
                next_twin_cols, next_twin_mask_d = _step_columns(
                    e0, e1, e2, e3, first + GROUPS, twin_end, windows, group_base, column_offset, d, GROUPS
                )
                v0, v1, v2, v3 = _step_words(words_ptr, e0, e1, e2, e3, offs_q, band, NNZ, BLOCKS, GROUPS)
                e0, e1, e2, e3 = _step_chunks(
                    rotations_ptr, order_ptr, first + 2 * GROUPS, g_end, twin, windows, band, BANDS, GROUPS, False
                )
            c0, c1, c2, c3 = _step_chunks(
                rotations_ptr, order_ptr, first + 2 * GROUPS, g_end, window, windows, band, BANDS, GROUPS, PAIRED
            )
            z = _tile_dot(tile.to(DOT_DTYPE), hi, mid, lo, zeros, FP32_PASSES, TILE_LEFT)
            if PAIRED:
                z = _tile_dot(tile1.to(DOT_DTYPE), hi1, mid1, lo1, z, FP32_PASSES, TILE_LEFT)
            z1 = zeros
            if TWINS:
                z1 = _tile_dot(tile1.to(DOT_DTYPE), hi1, mid1, lo1, zeros, FP32_PASSES, TILE_LEFT)
            _store_step(
                out_ptr,
                partial_ptr,
                partial,
                z,
                z1,
                offs_m,
                mask_m,
                cols,
                mask_d,
                twin_cols,
                twin_mask_d,
                out_col0,
                partial_col0,
                scale,
                stride_om,
                stride_od,
                stride_pm,
                stride_pd,
                TILE_LEFT,
                ADD_PARTIAL,
                PARTIAL_FIRST,
                TWINS,
                JOINED_PAIRS,
                WHOLE_GROUPS,
            )
            cols = next_cols
            mask_d = next_mask_d
            twin_cols = next_twin_cols
            twin_mask_d = next_twin_mask_d
    else:
        for first in range(first_group, g_end, GROUPS):
            c0, c1, c2, c3 = _step_chunks(
                rotations_ptr, order_ptr, first, g_end, window, windows, band, BANDS, GROUPS, PAIRED
            )
            cols, mask_d = _step_columns(c0, c1, c2, c3, first, g_end, windows, group_base, column_offset, d, GROUPS)
            partial = _load_partial(
                partial_ptr,
                zeros,
                offs_m,
                mask_m,
                cols,
                mask_d,
                partial_col0,
                stride_pm,
                stride_pd,
                TILE_LEFT,
                ADD_PARTIAL and PARTIAL_FIRST,
            )
            w0, w1, w2, w3 = _step_words(words_ptr, c0, c1, c2, c3, offs_q, band, NNZ, BLOCKS, GROUPS)
            tile = _stacked_tile(w0, w1, w2, w3, offs_q, band, NNZ, BLOCKS, GROUPS, not TILE_LEFT)
            z = _tile_dot(tile.to(DOT_DTYPE), hi, mid, lo, zeros, FP32_PASSES, TILE_LEFT)
            if PAIRED:
                v0, v1, v2, v3 = _step_words(words_ptr, c0, c1, c2, c3, offs_q, 1, NNZ, BLOCKS, GROUPS)
                tile1 = _stacked_tile(v0, v1, v2, v3, offs_q, 1, NNZ, BLOCKS, GROUPS, not TILE_LEFT)
                z = _tile_dot(tile1.to(DOT_DTYPE), hi1, mid1, lo1, z, FP32_PASSES, TILE_LEFT)
            z1 = zeros
            twin_cols, twin_mask_d = cols, mask_d
            if TWINS:
                e0, e1, e2, e3 = _step_chunks(
                    rotations_ptr, order_ptr, first, g_end, twin, windows, band, BANDS, GROUPS, False
                )
                twin_cols, twin_mask_d = _step_columns(
                    e0, e1, e2, e3, first, twin_end, windows, group_base, column_offset, d, GROUPS
                )
                v0, v1, v2, v3 = _step_words(words_ptr, e0, e1, e2, e3, offs_q, band, NNZ, BLOCKS, GROUPS)
                tile1 = _stacked_tile(v0, v1, v2, v3, offs_q, band, NNZ, BLOCKS, GROUPS, not TILE_LEFT)
                z1 = _tile_dot(tile1.to(DOT_DTYPE), hi1, mid1, lo1, zeros, FP32_PASSES, TILE_LEFT)
            _store_step(
                out_ptr,
                partial_ptr,
                partial,
                z,
                z1,
                offs_m,
                mask_m,
                cols,
                mask_d,
                twin_cols,
                twin_mask_d,
                out_col0,
                partial_col0,
                scale,
                stride_om,
                stride_od,
                stride_pm,
                stride_pd,
                TILE_LEFT,
                ADD_PARTIAL,
                PARTIAL_FIRST,
                TWINS,
                JOINED_PAIRS,
                WHOLE_GROUPS,
            )


@triton.jit
def sparse_jl_windowed_transpose_kernel(
    y_ptr,
    words_ptr,
    rotations_ptr,
    order_ptr,
    starts_ptr,
    out_ptr,
    partial_ptr,
    n,
    d,
    column_offset,
    group_base,
    g_first,
    g_last,
    groups_per_split,
    windows,
    band,
    out_col0,
    partial_col0,
    scale,
    out_features,
    stride_ym,
    stride_yk,
    stride_om,
    stride_od,
    stride_pm,
    stride_pd,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    FOLDS: tl.constexpr,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    WIDTH: tl.constexpr,
    GROUPS: tl.constexpr,
    TILE_LEFT: tl.constexpr,
    ADD_PARTIAL: tl.constexpr,
    PAIRED: tl.constexpr,
    PIPELINED: tl.constexpr,
    PARTIAL_FIRST: tl.constexpr,
    MULTIPLE: tl.constexpr,
    TWINS: tl.constexpr,
    JOINED_PAIRS: tl.constexpr,
    WHOLE_GROUPS: tl.constexpr,
):
    """Z = Y S for the chunks that land in window a, GROUPS groups' chunks per dot. Grid:
    (cdiv(n, BLOCK_M) * A, splits); splits own disjoint ranges of groups, so every output column is
    written by exactly one program. Column c of Z is column c - out_col0 of ``out``.

    A chunk lands in a different window in each band, so the y columns of its terms depend on the
    band. With PAIRED (two bands) the groups are visited in the order table's order, sorted by
    delta_g = (R_(g,1) - R_(g,0)) mod A, which ``starts`` cuts into A runs: within run delta, the
    chunk at window a in band 0 is at window (a + delta) mod A in band 1, so both bands' y tiles are
    loop-invariant over the run and one program sums the chunk's two bands. Otherwise the program
    takes only the terms of ``band`` over groups [g_first, g_last), adds them to ``partial`` (c -
    partial_col0) when ADD_PARTIAL (reading them at the start of each step with PARTIAL_FIRST), and the
    caller launches the bands in order.

    TILE_LEFT computes z^T = tile @ y^T instead: the stacked tile ([16 GROUPS, WIDTH]) is then the
    register operand, whose M = 16 GROUPS fits the tensor cores' 64-row shape at four groups, and
    the loop-invariant y^T the other; otherwise the [BLOCK_M, WIDTH] x [WIDTH, 16 GROUPS] product
    has an N of 16 per group and a tile to stage through shared memory on every step.

    MULTIPLE divides d, the column offset, out_col0, partial_col0 and the row strides of ``out`` and
    ``partial`` (:func:`_multiple`), so Z's rows store in vectors where those allow.

    TWINS (one band): each program takes windows 2a and 2a + 1 (``_transpose_steps``); grid axis 0
    is then cdiv(n, BLOCK_M) * cdiv(A, 2). JOINED_PAIRS (TWINS, TILE_LEFT): each group's two chunks of
    the pair go out in one store (``_store_groups``); WHOLE_GROUPS with it where A = 2, the pair
    being the whole group."""
    d = _multiple(d, MULTIPLE)
    column_offset = _multiple(column_offset, MULTIPLE)
    out_col0 = _multiple(out_col0, MULTIPLE)
    partial_col0 = _multiple(partial_col0, MULTIPLE)
    stride_om = _multiple(stride_om, MULTIPLE)
    stride_pm = _multiple(stride_pm, MULTIPLE)
    if TWINS:
        pair, _, pid_s, offs_m, mask_m = _program_tile(n, (windows + 1) // 2, BLOCK_M, 1)
        window = 2 * pair
    else:
        window, _, pid_s, offs_m, mask_m = _program_tile(n, windows, BLOCK_M, 1)
    offs_q = tl.arange(0, WIDTH)
    g_begin = g_first + pid_s * groups_per_split
    g_end = tl.minimum(g_begin + groups_per_split, g_last)
    if PAIRED:
        hi, mid, lo = _band_operand(
            y_ptr,
            offs_m,
            mask_m,
            offs_q,
            window,
            windows,
            0,
            stride_ym,
            stride_yk,
            out_features,
            NNZ,
            BLOCKS,
            BANDS,
            FOLDS,
            FP32_PASSES,
            DOT_DTYPE,
            TILE_LEFT,
        )
        for delta in range(0, windows):
            run_begin = tl.maximum(g_begin, tl.load(starts_ptr + delta))
            run_end = tl.minimum(g_end, tl.load(starts_ptr + delta + 1))
            if run_begin < run_end:
                hi1, mid1, lo1 = _band_operand(
                    y_ptr,
                    offs_m,
                    mask_m,
                    offs_q,
                    (window + delta) % windows,
                    windows,
                    1,
                    stride_ym,
                    stride_yk,
                    out_features,
                    NNZ,
                    BLOCKS,
                    BANDS,
                    FOLDS,
                    FP32_PASSES,
                    DOT_DTYPE,
                    TILE_LEFT,
                )
                _transpose_steps(
                    hi,
                    mid,
                    lo,
                    hi1,
                    mid1,
                    lo1,
                    words_ptr,
                    rotations_ptr,
                    order_ptr,
                    out_ptr,
                    partial_ptr,
                    run_begin,
                    run_end,
                    window,
                    windows,
                    0,
                    group_base,
                    column_offset,
                    d,
                    offs_m,
                    mask_m,
                    offs_q,
                    out_col0,
                    partial_col0,
                    scale,
                    stride_om,
                    stride_od,
                    stride_pm,
                    stride_pd,
                    NNZ,
                    BLOCKS,
                    BANDS,
                    FP32_PASSES,
                    DOT_DTYPE,
                    BLOCK_M,
                    GROUPS,
                    TILE_LEFT,
                    False,
                    True,
                    PIPELINED,
                    False,
                    False,
                    False,
                    False,
                )
    else:
        hi, mid, lo = _band_operand(
            y_ptr,
            offs_m,
            mask_m,
            offs_q,
            window,
            windows,
            band,
            stride_ym,
            stride_yk,
            out_features,
            NNZ,
            BLOCKS,
            BANDS,
            FOLDS,
            FP32_PASSES,
            DOT_DTYPE,
            TILE_LEFT,
        )
        hi1, mid1, lo1 = hi, mid, lo
        if TWINS:  # past the last window the twin reads window a again; its stores are masked
            hi1, mid1, lo1 = _band_operand(
                y_ptr,
                offs_m,
                mask_m,
                offs_q,
                tl.minimum(window + 1, windows - 1),
                windows,
                band,
                stride_ym,
                stride_yk,
                out_features,
                NNZ,
                BLOCKS,
                BANDS,
                FOLDS,
                FP32_PASSES,
                DOT_DTYPE,
                TILE_LEFT,
            )
        _transpose_steps(
            hi,
            mid,
            lo,
            hi1,
            mid1,
            lo1,
            words_ptr,
            rotations_ptr,
            order_ptr,
            out_ptr,
            partial_ptr,
            g_begin,
            g_end,
            window,
            windows,
            band,
            group_base,
            column_offset,
            d,
            offs_m,
            mask_m,
            offs_q,
            out_col0,
            partial_col0,
            scale,
            stride_om,
            stride_od,
            stride_pm,
            stride_pd,
            NNZ,
            BLOCKS,
            BANDS,
            FP32_PASSES,
            DOT_DTYPE,
            BLOCK_M,
            GROUPS,
            TILE_LEFT,
            ADD_PARTIAL,
            False,
            PIPELINED,
            PARTIAL_FIRST,
            TWINS,
            JOINED_PAIRS,
            WHOLE_GROUPS,
        )
