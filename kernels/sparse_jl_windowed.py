"""Windowed sparse JL kernels: Y = X S^T and Z = Y S when S has the windowed layout (spec v3; v4
changed only the default nnz).

Layout (``docs/spec.md``): k = 16 * A * nnz rows, nnz blocks of A windows of 16 rows. Input columns
come in chunks of 16; chunk c = g*A + p of group g goes to window (p + R_g) mod A of every block,
where its 16 columns land on 16 distinct rows: column i on row i XOR m_(c,t), with a sign bit per
column. One 32-bit word per (chunk, block) holds m (bits 0-3) and the 16 signs (bits 16-31); the
table kernel computes m, affine in t over GF(16), so the projection kernels only read it.

Why this layout: the window a chunk lands in is the same in every block, so a program that owns
window a of all blocks (16 * nnz output columns) reads each chunk of its groups exactly once and
multiplies it by a 16 x 16*nnz signed permutation tile. Tensor-core work per input element is
2 * 16 * nnz flops whatever k is, where a one-hot over all of k costs 2k. Each group of A
neighbouring chunks is split among the A programs of a row tile, so together they read X's rows
whole.

Each loop step takes the chunks of several groups at once (``_stacked_tiles``): the forward as one
dot of depth 16 * GROUPS (or two unrolled dots), the transpose as z^T = tile @ y^T, whose tile of
four groups is a 64-row operand. One chunk per step left both latency-bound (benchmarks/NOTES.md,
design 4).

The tables (``window_table_kernel``) cost one Philox call per 4 (chunk, block) pairs and
4 * nnz / 16 bytes per input column; the projection kernels only load them.
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
def _with_mask(word, slope, intercept, T: tl.constexpr):
    """W_(c,t) with its low 4 bits replaced by the chunk's XOR mask in block t: slope * (t mod 16)
    XOR intercept (docs/spec.md, 2b)."""
    return ((word & 0xFFFFFFF0) | (_gf16_times(slope, T % 16) ^ intercept)).to(tl.int32, bitcast=True)


@triton.jit
def window_table_kernel(words_ptr, rotations_ptr, group_base, groups, windows, key0, key1,
                        NNZ: tl.constexpr, DOMAIN_WINDOW: tl.constexpr, DOMAIN_GROUP: tl.constexpr,
                        BLOCK: tl.constexpr):
    """words[c, t] for the groups*windows chunks of groups [group_base, group_base + groups), and
    rotations[g] = R_(group_base + g). Grid: cdiv(groups * windows, BLOCK)."""
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    chunk = group_base * windows + idx
    in_table = idx < groups * windows
    lo = (chunk & 0xFFFFFFFF).to(tl.uint32)
    hi = (chunk >> 32).to(tl.uint32)
    zero = tl.zeros_like(lo)
    # a_c and b_c come from W_(c,0): Philox block 0 of the chunk, computed first.
    w0, w1, w2, w3 = philox4x32_10(lo, hi, zero, zero + DOMAIN_WINDOW, key0, key1)
    slope = (w0 >> 4) & 15
    intercept = w0 & 15
    for quad in tl.static_range(0, (NNZ + 3) // 4):
        if quad > 0:
            w0, w1, w2, w3 = philox4x32_10(lo, hi, zero + quad, zero + DOMAIN_WINDOW, key0, key1)
        base = words_ptr + idx * NNZ + 4 * quad
        tl.store(base, _with_mask(w0, slope, intercept, 4 * quad), mask=in_table)
        if 4 * quad + 1 < NNZ:
            tl.store(base + 1, _with_mask(w1, slope, intercept, 4 * quad + 1), mask=in_table)
        if 4 * quad + 2 < NNZ:
            tl.store(base + 2, _with_mask(w2, slope, intercept, 4 * quad + 2), mask=in_table)
        if 4 * quad + 3 < NNZ:
            tl.store(base + 3, _with_mask(w3, slope, intercept, 4 * quad + 3), mask=in_table)
    group = group_base + idx
    r0, _, _, _ = philox4x32_10((group & 0xFFFFFFFF).to(tl.uint32), (group >> 32).to(tl.uint32),
                                zero, zero + DOMAIN_GROUP, key0, key1)
    rotation = tl.umulhi(r0, (zero + windows).to(tl.uint32))
    tl.store(rotations_ptr + idx, rotation.to(tl.int32), mask=idx < groups)


@triton.jit
def _window_chunk(rotations_ptr, group, window, windows):
    """The table index of the chunk of table group ``group`` that lands in ``window``."""
    rotation = tl.load(rotations_ptr + group)
    return tl.cast(group, tl.int64) * windows + (window - rotation + windows) % windows


@triton.jit
def _signed_permutation(words_ptr, table_chunk, offs_q, first_block, NNZ: tl.constexpr, BLOCKS: tl.constexpr):
    """For accumulator column q = 16t + u (block first_block + t): the chunk column i* = u XOR m
    that lands there, and its value +-1 (0 for the padding columns t >= BLOCKS)."""
    t = offs_q // WINDOW
    u = offs_q % WINDOW
    valid = t < BLOCKS
    word = tl.load(words_ptr + table_chunk * NNZ + first_block + t, mask=valid, other=0)
    source = u ^ (word & (WINDOW - 1))
    negative = (word >> (16 + source)) & 1
    value = tl.where(valid, tl.where(negative != 0, -1.0, 1.0), 0.0)
    return source, value


@triton.jit
def _program_tile(n, windows, BLOCK_M: tl.constexpr, PARTS: tl.constexpr):
    """(window a, part, split, rows, row mask) of this program; grid axis 0 is
    (row tile * A + a) * PARTS + part, so the programs sharing a row tile run together."""
    pid = tl.program_id(0)
    tile = pid // PARTS
    offs_m = (tile // windows).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    return tile % windows, pid % PARTS, tl.program_id(1), offs_m, offs_m < n


@triton.jit
def _window_columns(offs_q, window, windows, first_block):
    """Output column of accumulator column q = 16t + u: row u of window a in block first_block + t."""
    return ((first_block + offs_q // WINDOW) * windows + window) * WINDOW + offs_q % WINDOW


@triton.jit
def _stacked_tiles(words_ptr, rotations_ptr, first_group, g_end, window, windows, group_base, column_offset,
                   d, offs_q, first_block, NNZ: tl.constexpr, BLOCKS: tl.constexpr, GROUPS: tl.constexpr,
                   TRANSPOSED: tl.constexpr):
    """The chunks at ``window`` of groups first_group .. first_group + GROUPS - 1, side by side:
    their 16 * GROUPS local columns, which of them exist (in [0, d), group before g_end), and
    their signed-permutation tiles stacked to match ([16 * GROUPS, WIDTH], or its transpose), so
    one dot of depth (or width) 16 * GROUPS takes them all. Built with 2-D selects only: a 3-D
    reshape costs a shared-memory round trip (benchmarks/NOTES.md)."""
    lanes = tl.arange(0, WINDOW * GROUPS)
    lane = lanes % WINDOW
    stacked = lanes // WINDOW
    last = g_end - 1
    chunk_0 = _window_chunk(rotations_ptr, tl.minimum(first_group, last), window, windows)
    source_0, value_0 = _signed_permutation(words_ptr, chunk_0, offs_q, first_block, NNZ, BLOCKS)
    none = tl.zeros_like(stacked)
    chunk = chunk_0 + none.to(tl.int64)
    if TRANSPOSED:
        source = source_0[:, None] + none[None, :]
        value = value_0[:, None] + none[None, :].to(tl.float32)
    else:
        source = source_0[None, :] + none[:, None]
        value = value_0[None, :] + none[:, None].to(tl.float32)
    for g in tl.static_range(1, GROUPS):
        chunk_g = _window_chunk(rotations_ptr, tl.minimum(first_group + g, last), window, windows)
        source_g, value_g = _signed_permutation(words_ptr, chunk_g, offs_q, first_block, NNZ, BLOCKS)
        chunk = tl.where(stacked == g, chunk_g, chunk)
        if TRANSPOSED:
            source = tl.where(stacked[None, :] == g, source_g[:, None], source)
            value = tl.where(stacked[None, :] == g, value_g[:, None], value)
        else:
            source = tl.where(stacked[:, None] == g, source_g[None, :], source)
            value = tl.where(stacked[:, None] == g, value_g[None, :], value)
    cols = (group_base * windows + chunk) * WINDOW - column_offset + lane
    mask_d = (first_group + stacked < g_end) & (cols >= 0) & (cols < d)
    if TRANSPOSED:
        tile = tl.where(source == lane[None, :], value, 0.0)
    else:
        tile = tl.where(lane[:, None] == source, value, 0.0)
    return cols, mask_d, tile


@triton.jit
def _stacked_chunks(x_ptr, words_ptr, rotations_ptr, first_group, g_end, window, windows, group_base,
                    column_offset, d, offs_m, mask_m, offs_q, first_block, stride_xm, stride_xd,
                    NNZ: tl.constexpr, BLOCKS: tl.constexpr, GROUPS: tl.constexpr):
    """X's chunks at ``window`` of GROUPS groups ([BLOCK_M, 16 * GROUPS], zeros where they do not
    exist) and their stacked tile."""
    cols, mask_d, tile = _stacked_tiles(words_ptr, rotations_ptr, first_group, g_end, window, windows,
                                        group_base, column_offset, d, offs_q, first_block, NNZ, BLOCKS, GROUPS,
                                        False)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + cols[None, :] * stride_xd,
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)
    return x, tile


@triton.jit
def _sum_steps(acc, x_ptr, words_ptr, rotations_ptr, first_group, g_end, window, windows, group_base,
               column_offset, d, offs_m, mask_m, offs_q, first_block, stride_xm, stride_xd, NNZ: tl.constexpr,
               BLOCKS: tl.constexpr, FP32_PASSES: tl.constexpr, DOT_DTYPE: tl.constexpr, GROUPS: tl.constexpr,
               UNROLL: tl.constexpr):
    """acc + the products of the chunks at ``window`` of groups [first_group, g_end), GROUPS groups
    per dot and UNROLL dots per step, whose loads are all issued first."""
    for group in range(first_group, g_end, GROUPS * UNROLL):
        x, tile = _stacked_chunks(x_ptr, words_ptr, rotations_ptr, group, g_end, window, windows, group_base,
                                  column_offset, d, offs_m, mask_m, offs_q, first_block, stride_xm, stride_xd,
                                  NNZ, BLOCKS, GROUPS)
        if UNROLL == 2:
            x_next, tile_next = _stacked_chunks(x_ptr, words_ptr, rotations_ptr, group + GROUPS, g_end, window,
                                                windows, group_base, column_offset, d, offs_m, mask_m, offs_q,
                                                first_block, stride_xm, stride_xd, NNZ, BLOCKS, GROUPS)
        acc = dot_exact(x, tile, acc, FP32_PASSES, DOT_DTYPE)
        if UNROLL == 2:
            acc = dot_exact(x_next, tile_next, acc, FP32_PASSES, DOT_DTYPE)
    return acc


@triton.jit
def sparse_jl_windowed_forward_kernel(
    x_ptr, words_ptr, rotations_ptr, out_ptr, n, d, column_offset, group_base, groups,
    groups_per_split, windows, scale,
    stride_xm, stride_xd, stride_om, stride_ok, stride_split,
    NNZ: tl.constexpr, FP32_PASSES: tl.constexpr, DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, WIDTH: tl.constexpr, GROUPS: tl.constexpr, UNROLL: tl.constexpr,
    PROMOTE_EVERY: tl.constexpr, PARTS: tl.constexpr,
):
    """out[split, m, window a of every block] for this split's groups. Grid: (cdiv(n, BLOCK_M) * A
    * PARTS, splits); A and the part are the fastest axes so the programs sharing a row tile run
    together. With PARTS > 1 a program owns window a of NNZ / PARTS consecutive blocks only, so its
    accumulator and tile are PARTS times narrower; its siblings read the same chunks (through L2).
    WIDTH is 16 * NNZ / PARTS rounded up to a power of two. Each step takes GROUPS groups in one
    dot and UNROLL (1 or 2) such dots: a lone 16-column chunk per step left the kernel
    latency-bound (benchmarks/NOTES.md). With one split ``out`` is Y; otherwise a float32 workspace
    the caller sums in a fixed order.

    PROMOTE_EVERY > 0 sums runs of that many steps in a fresh tensor-core accumulator and adds each
    run to the total on the CUDA cores, rounding to nearest. The tensor cores' float32 accumulation
    truncates, so over hundreds of steps into one accumulator its error grows to 1.7e-5 of the
    output (benchmarks/NOTES.md, design 5); a run per step would wait on every dot."""
    window, part, pid_s, offs_m, mask_m = _program_tile(n, windows, BLOCK_M, PARTS)
    BLOCKS = NNZ // PARTS  # blocks per program (a constexpr)
    first_block = part * BLOCKS
    offs_q = tl.arange(0, WIDTH)
    acc = tl.zeros((BLOCK_M, WIDTH), dtype=tl.float32)
    g_begin = pid_s * groups_per_split
    g_end = tl.minimum(g_begin + groups_per_split, groups)
    if PROMOTE_EVERY == 0:
        acc = _sum_steps(acc, x_ptr, words_ptr, rotations_ptr, g_begin, g_end, window, windows, group_base,
                         column_offset, d, offs_m, mask_m, offs_q, first_block, stride_xm, stride_xd, NNZ,
                         BLOCKS, FP32_PASSES, DOT_DTYPE, GROUPS, UNROLL)
    else:
        for first in range(g_begin, g_end, GROUPS * UNROLL * PROMOTE_EVERY):
            run_end = tl.minimum(first + GROUPS * UNROLL * PROMOTE_EVERY, g_end)
            acc += _sum_steps(tl.zeros((BLOCK_M, WIDTH), dtype=tl.float32), x_ptr, words_ptr, rotations_ptr,
                              first, run_end, window, windows, group_base, column_offset, d, offs_m, mask_m,
                              offs_q, first_block, stride_xm, stride_xd, NNZ, BLOCKS, FP32_PASSES, DOT_DTYPE,
                              GROUPS, UNROLL)
    out_ptrs = (out_ptr + pid_s.to(tl.int64) * stride_split + offs_m[:, None] * stride_om
                + _window_columns(offs_q, window, windows, first_block)[None, :] * stride_ok)
    tl.store(out_ptrs, (acc * scale).to(out_ptr.dtype.element_ty),
             mask=mask_m[:, None] & (offs_q // WINDOW < BLOCKS)[None, :])


@triton.jit
def sparse_jl_windowed_transpose_kernel(
    y_ptr, words_ptr, rotations_ptr, z_ptr, n, d, column_offset, group_base, groups,
    groups_per_split, windows, scale,
    stride_ym, stride_yk, stride_zm, stride_zd,
    NNZ: tl.constexpr, FP32_PASSES: tl.constexpr, DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, WIDTH: tl.constexpr, GROUPS: tl.constexpr, TILE_LEFT: tl.constexpr,
):
    """z[m, chunk columns] = scale * y[m, window a of every block] @ tile^T for each chunk that lands
    in window a, GROUPS groups' chunks per dot. Grid as the forward's; splits own disjoint groups,
    so every column of z is written by exactly one program and no reduction follows.

    TILE_LEFT computes z^T = tile @ y^T instead: the stacked tile ([16 GROUPS, WIDTH]) is then the
    register operand, whose M = 16 GROUPS fits the tensor cores' 64-row shape at four groups, and
    the loop-invariant y^T the other; otherwise the [BLOCK_M, WIDTH] x [WIDTH, 16 GROUPS] product
    has an N of 16 per group and a tile to stage through shared memory on every step."""
    window, _, pid_s, offs_m, mask_m = _program_tile(n, windows, BLOCK_M, 1)
    offs_q = tl.arange(0, WIDTH)
    columns = _window_columns(offs_q, window, windows, 0)
    y = tl.load(y_ptr + offs_m[:, None] * stride_ym + columns[None, :] * stride_yk,
                mask=mask_m[:, None] & (offs_q // WINDOW < NNZ)[None, :], other=0.0)
    # The y tile is loop-invariant: split (and transpose) it once.
    if FP32_PASSES > 0:
        hi, mid, lo = split_bf16x3(y)
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
    g_begin = pid_s * groups_per_split
    g_end = tl.minimum(g_begin + groups_per_split, groups)
    for group in range(g_begin, g_end, GROUPS):
        cols, mask_d, tile = _stacked_tiles(words_ptr, rotations_ptr, group, g_end, window, windows, group_base,
                                            column_offset, d, offs_q, 0, NNZ, NNZ, GROUPS, not TILE_LEFT)
        tile = tile.to(DOT_DTYPE)
        if TILE_LEFT:
            z = tl.dot(tile, hi)
            if FP32_PASSES >= 2:
                z = tl.dot(tile, mid, z)
            if FP32_PASSES >= 3:
                z = tl.dot(tile, lo, z)
            tl.store(z_ptr + offs_m[None, :] * stride_zm + cols[:, None] * stride_zd,
                     (z * scale).to(z_ptr.dtype.element_ty), mask=mask_m[None, :] & mask_d[:, None])
        else:
            z = tl.dot(hi, tile)
            if FP32_PASSES >= 2:
                z = tl.dot(mid, tile, z)
            if FP32_PASSES >= 3:
                z = tl.dot(lo, tile, z)
            tl.store(z_ptr + offs_m[:, None] * stride_zm + cols[None, :] * stride_zd,
                     (z * scale).to(z_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])
