"""The windowed forward for few rows of a half type, as per-lane tensor-core products (design 12).

It computes what ``sparse_jl_windowed_shuffle_forward_kernel`` computes (same grid, splits,
segments, sort and frames; the sums in another order): a program owns window a of one band for
one row tile and walks its groups SLOTS at a time, sorted by the slope a_c of the chunk that lands
in its window.

In the frame of a slope f (``_shuffle_run``), chunk c of slope f takes its column j XOR b_c into
lane j of every block of the band, signed by bit 16 + (j XOR b_c) of its word in that block. So
for each lane j, RUN chunks of one slope update the band's blocks by one product
(rows x chunks) @ (chunks x blocks) of x's permuted columns and the words' sign bits: a batched
tl.dot over the 16 lanes, [lane, row, chunk] @ [lane, chunk, block]. The CUDA-core forward spends
a warp shuffle and eight multiply-adds per element and band where this spends a share of one
tensor-core product, and needs no shuffle of x per block (benchmarks/NOTES.md, "Per-lane
tensor-core products").

Half types only: their values times +-1 are exact in the dot's operand type, and the tensor cores
sum them in float32. Exact float32 would take three bfloat16 pieces of x, which the probe found no
faster than the CUDA cores.
"""

import triton
import triton.language as tl

from .sparse_jl_windowed import (
    WINDOW,
    _program_tile,
    _segment,
    _sort_slots,
    _store_window,
)

#: Chunks per product, tl.dot's depth (its smallest).
RUN = tl.constexpr(16)
#: Blocks per product, tl.dot's width (its smallest): a band's eight blocks and eight unused.
PRODUCT_BLOCKS = tl.constexpr(16)


@triton.jit
def _gf16_product(a, b):
    """a * b in GF(16) = GF(2)[x] / (x^4 + x + 1), for int32 tensors a, b < 16 of broadcastable
    shapes (the tensor form of ``_gf16_times``, whose factor is a constant)."""
    product = tl.zeros_like(a ^ b)
    for bit in tl.static_range(4):
        product = product ^ tl.where(((b >> bit) & 1) != 0, a, 0)
        a = ((a << 1) & 15) ^ ((a >> 3) & 1) * 3  # x^4 = x + 1
    return product


@triton.jit
def _reframe_lanes(acc, slopes, block_times, lanes):
    """acc [lane, row, block] moved between frames whose slopes XOR to ``slopes``: block t's lane j
    takes the old lane j XOR slopes * (T mod 16) (``_reframe``, all blocks at once)."""
    source = lanes[:, None] ^ _gf16_product(slopes, block_times)[None, :]  # [lane, block]
    return tl.gather(acc, tl.broadcast_to(source[:, None, :], acc.shape), 0)


@triton.jit
def _lane_product(
    acc,
    slope,
    start,
    end,
    x_ptr,
    d,
    column_offset,
    stride_xm,
    stride_xd,
    words_ptr,
    slots_ptr,
    band,
    windows,
    group_base,
    offs_m,
    mask_m,
    lanes,
    blocks,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """acc [lane, row, block], in the frame of ``slope``, plus the terms of the sorted slots
    [start, min(start + RUN, end)), all of that slope: one product."""
    slot = start + tl.arange(0, RUN)
    valid = slot < end
    chunk = tl.load(slots_ptr + slot, mask=valid, other=0).to(tl.int64)
    base = words_ptr + chunk * NNZ + band * BLOCKS
    exists = (blocks < BLOCKS) & (band * BLOCKS + blocks < NNZ)
    words = tl.load(base[:, None] + blocks[None, :], mask=valid[:, None] & exists[None, :], other=0)  # [chunk, block]
    # b_c: block 0's mask less a_c * (T mod 16), the same for every block of the band
    shift = (tl.load(base, mask=valid, other=0) & (WINDOW - 1)) ^ _gf16_product(slope, (band * BLOCKS) % WINDOW)
    cols = (group_base * windows + chunk[:, None]) * WINDOW - column_offset + lanes[None, :]  # [chunk, column]
    mask_c = valid[:, None] & (cols >= 0) & (cols < d)
    x = tl.load(
        x_ptr + offs_m[:, None, None] * stride_xm + cols[None, :, :] * stride_xd,
        mask=mask_m[:, None, None] & mask_c[None, :, :],
        other=0.0,
    )  # [row, chunk, column]
    source = lanes[None, :] ^ shift[:, None]  # [chunk, lane]: the column each lane takes
    moved = tl.gather(x, tl.broadcast_to(source[None, :, :], x.shape), 2)  # [row, chunk, lane]
    terms = tl.permute(moved, (2, 0, 1)).to(DOT_DTYPE)  # [lane, row, chunk]
    negative = (words[None, :, :] >> (16 + tl.trans(source)[:, :, None])) & 1  # [lane, chunk, block]
    signs = tl.where(negative != 0, -1.0, 1.0).to(DOT_DTYPE)
    return tl.dot(terms, signs, acc)


@triton.jit
def _lanes_segment(
    acc,
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
    blocks,
    block_times,
    NNZ: tl.constexpr,
    BLOCKS: tl.constexpr,
    BANDS: tl.constexpr,
    SLOTS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """acc plus the terms of groups [g_begin, g_end) of x, and its frame: SLOTS groups per sort,
    then each slope's chunks in products of RUN, in that slope's frame."""
    for first in range(g_begin, g_end, SLOTS):
        tl.debug_barrier()  # the previous sort's slots are read
        _sort_slots(
            slots_ptr, rotations_ptr, words_ptr, first, g_end, window, windows, band, NNZ, BLOCKS, BANDS, SLOTS, True
        )
        tl.debug_barrier()  # the slots are written
        start = 0
        for slope in range(0, WINDOW):
            end = tl.load(slots_ptr + SLOTS + slope)
            if end > start:
                if slope != frame:
                    acc = _reframe_lanes(acc, slope ^ frame, block_times, lanes)
                    frame = slope
                for run in range(start, end, RUN):
                    acc = _lane_product(
                        acc,
                        slope,
                        run,
                        end,
                        x_ptr,
                        d,
                        column_offset,
                        stride_xm,
                        stride_xd,
                        words_ptr,
                        slots_ptr,
                        band,
                        windows,
                        group_base,
                        offs_m,
                        mask_m,
                        lanes,
                        blocks,
                        NNZ,
                        BLOCKS,
                        DOT_DTYPE,
                    )
            start = end
    return acc, frame


@triton.jit
def sparse_jl_windowed_lane_forward_kernel(
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
    SEGMENT_MULTIPLE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SLOTS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """The forward's output as ``sparse_jl_windowed_shuffle_forward_kernel`` writes it (same grid
    and arguments), by per-lane products (module docstring). ``slots_ptr``: SLOTS + 16 int32 of
    scratch per program, the sorted chunks and each slope's end."""
    window, band, pid_s, offs_m, mask_m = _program_tile(n, windows, BLOCK_M, BANDS)
    lanes = tl.arange(0, WINDOW)
    blocks = tl.arange(0, PRODUCT_BLOCKS)
    block_times = (band * BLOCKS + blocks) % WINDOW  # T mod 16 of the band's blocks
    acc = tl.zeros((WINDOW, BLOCK_M, PRODUCT_BLOCKS), dtype=tl.float32)
    frame = tl.zeros((), dtype=tl.int32)
    slots_ptr += (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)).to(tl.int64) * (SLOTS + WINDOW)
    run = (words_ptr, rotations_ptr, slots_ptr, window, windows, band, group_base, offs_m, mask_m)
    layout = (lanes, blocks, block_times)  # the constexprs apart: Triton 3.6 unpacks them as values
    if SEGMENTS:
        for segment in range(tl.load(split_segments_ptr + pid_s), tl.load(split_segments_ptr + pid_s + 1)):
            x_seg, d_seg, offset_seg, stride_seg, g_begin, g_end = _segment(
                segments_ptr, segment, x_ptr, SEGMENT_MULTIPLE
            )
            acc, frame = _lanes_segment(
                acc,
                frame,
                x_seg,
                g_begin,
                g_end,
                d_seg,
                offset_seg,
                stride_seg,
                1,
                *run,
                *layout,
                NNZ,
                BLOCKS,
                BANDS,
                SLOTS,
                DOT_DTYPE,
            )
    else:
        g_begin = pid_s * groups_per_split
        g_end = tl.minimum(g_begin + groups_per_split, groups)
        acc, frame = _lanes_segment(
            acc,
            frame,
            x_ptr,
            g_begin,
            g_end,
            d,
            column_offset,
            stride_xm,
            stride_xd,
            *run,
            *layout,
            NNZ,
            BLOCKS,
            BANDS,
            SLOTS,
            DOT_DTYPE,
        )
    acc = _reframe_lanes(acc, frame, block_times, lanes)  # back to the natural frame (slope 0)
    # column q = 16 t + j of the window's accumulator: lane j of block t
    values = tl.reshape(tl.permute(acc, (1, 2, 0)), (BLOCK_M, PRODUCT_BLOCKS * WINDOW))
    _store_window(
        out_ptr,
        spill_ptr,
        values,
        tl.arange(0, PRODUCT_BLOCKS * WINDOW),
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
