"""The windowed forward for half types on Hopper, in Gluon (Triton's dialect with explicit layouts).

It computes what ``sparse_jl_windowed_forward_kernel`` computes, bit for bit (the same tiles,
summed in the same order on the tensor cores): a program owns window a of one band for a row tile
and, step by step, multiplies the chunks of GROUPS groups that land there by their
signed-permutation tiles (docs/spec.md 2b). Two things differ, and both need control of layouts
that Triton's language does not give (benchmarks/NOTES.md, design 11):

- the product is taken transposed, acc^T [WIDTH, BLOCK_N] += tile^T [WIDTH, 16] @ x^T [16, BLOCK_N],
  one depth-16 wgmma per group, so the tile is the register (A) operand and is built directly in
  that operand's layout: it never touches shared memory, where the Triton kernel writes every
  tile element with a 2-byte store (its profile's largest use of the load-store pipe);
- X's chunks go straight from global to shared memory with cp.async (16-byte copies, no
  registers), STAGES steps in flight, into the buffer the wgmma reads as its K-major B operand.

Eligible inputs (``sjlt.ops.windowed._gluon_forward``): float16/bfloat16 on sm_90, rows of unit
column stride whose start, width, row stride and column offset keep every 8 columns 16-byte aligned, and k on
the lattice (k = 16 A nnz: folded rows take the Triton kernel, which ran them faster). Gluon
kernels have no interpreter; CI compiles this one for sm_90 (tests/test_kernels_compile.py) and
the GPU tests compare it with the Triton kernel and the reference.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

# The layout-free steps are the Triton kernel's own (a Gluon kernel may call them): the same chunk
# indices, words, signed permutations and output columns.
from .sparse_jl_windowed import (
    WINDOW,
    _band_blocks,
    _multiple,
    _signed_permutation,
    _stacked_columns,
    _step_chunks,
    _step_words,
    _window_columns,
)

# Names that moved between the Triton releases sjlt supports (3.6 on the H100 image, 3.9 in CI).
_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
_copy_to_shared = async_copy.async_load if hasattr(async_copy, "async_load") else async_copy.async_copy_global_to_shared


@gluon.jit
def _copy_step(
    buffer,
    x_ptr,
    c0,
    c1,
    c2,
    c3,
    first_group,
    g_end,
    windows,
    group_base,
    column_offset,
    d,
    offs_n,
    mask_n,
    lanes,
    stride_xm,
):
    """Start copying X's chunks of the step side by side into ``buffer`` ([BLOCK_N, 16 * GROUPS];
    zeros for rows past n, columns outside [0, d) and positions past g_end) as one copy group."""
    cols, exists = _stacked_columns(c0, c1, c2, c3, lanes, first_group, g_end, windows, group_base, column_offset, d)
    _copy_to_shared(buffer, x_ptr + offs_n[:, None] * stride_xm + cols[None, :], mask=mask_n[:, None] & exists[None, :])
    async_copy.commit_group()


@gluon.jit
def _tile(word, q, lane, band, NNZ: gl.constexpr, BLOCKS: gl.constexpr, DTYPE: gl.constexpr):
    """One chunk's tile^T [WIDTH, 16] in the layout of q[:, None] and lane[None, :] (the wgmma A
    operand's): row q = 16t + u holds +-1 at chunk column u XOR m_(c,t), the sign being bit 16 + that
    column of the word, and zeros for blocks that do not exist."""
    source, value = _signed_permutation(word, q, band, NNZ, BLOCKS)
    return gl.where(source[:, None] == lane[None, :], value[:, None], 0.0).to(DTYPE)


@gluon.jit
def _multiply_step(
    acc,
    w0,
    w1,
    w2,
    w3,
    buffer,
    q,
    lane,
    band,
    NNZ: gl.constexpr,
    BLOCKS: gl.constexpr,
    GROUPS: gl.constexpr,
    DTYPE: gl.constexpr,
):
    """acc + the step's products: per group a depth-16 wgmma, issued while the next group's tile is
    built, then waited for (the buffer is refilled STAGES - 1 steps later)."""
    x_t = buffer.permute((1, 0))
    acc = warpgroup_mma(_tile(w0, q, lane, band, NNZ, BLOCKS, DTYPE), x_t.slice(0, WINDOW), acc, is_async=True)
    if GROUPS > 1:
        acc = warpgroup_mma(_tile(w1, q, lane, band, NNZ, BLOCKS, DTYPE), x_t.slice(WINDOW, WINDOW), acc, is_async=True)
    if GROUPS > 2:
        acc = warpgroup_mma(
            _tile(w2, q, lane, band, NNZ, BLOCKS, DTYPE), x_t.slice(2 * WINDOW, WINDOW), acc, is_async=True
        )
    if GROUPS > 3:
        acc = warpgroup_mma(
            _tile(w3, q, lane, band, NNZ, BLOCKS, DTYPE), x_t.slice(3 * WINDOW, WINDOW), acc, is_async=True
        )
    return warpgroup_mma_wait(0, deps=[acc])


@gluon.jit
def sparse_jl_windowed_gluon_forward_kernel(
    x_ptr,
    words_ptr,
    rotations_ptr,
    out_ptr,
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
    stride_om,
    stride_ok,
    stride_split,
    NNZ: gl.constexpr,
    BLOCKS: gl.constexpr,
    BANDS: gl.constexpr,
    BLOCK_N: gl.constexpr,
    WIDTH: gl.constexpr,
    GROUPS: gl.constexpr,
    STAGES: gl.constexpr,
    WARPS: gl.constexpr,
    MULTIPLE: gl.constexpr,
):
    """out[split, rows, window a of every block of one band], as the Triton forward writes it (same
    grid, splits and output). BLOCK_N rows (the wgmma's N), split between WARPS // 4 warpgroups
    (one by default: two ran slower, benchmarks/NOTES.md, design 11); WIDTH = 16 * BLOCKS padded to
    a power of two and to at least 64 (the wgmma's M). k is on the lattice (no folded rows), so
    Y's rows and the partials' are 16-element aligned. MULTIPLE divides d, the column offset and
    x's row stride (``_multiple``): 8 or 16, so that every copy moves 16 bytes."""
    d = _multiple(d, MULTIPLE)
    column_offset = _multiple(column_offset, MULTIPLE)
    stride_xm = _multiple(stride_xm, MULTIPLE)
    DTYPE: gl.constexpr = x_ptr.dtype.element_ty
    STEP_COLUMNS: gl.constexpr = WINDOW * GROUPS
    # WARPS // 4 warpgroups, each with BLOCK_N / (WARPS // 4) of the rows.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, WARPS // 4], instr_shape=[16, BLOCK_N // (WARPS // 4), 16]
    )
    tile_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    # Eight consecutive columns (16 bytes) per thread: one cp.async each.
    copy_layout: gl.constexpr = gl.BlockedLayout(
        size_per_thread=[1, 8],
        threads_per_warp=[32 // (STEP_COLUMNS // 8), STEP_COLUMNS // 8],
        warps_per_cta=[WARPS, 1],
        order=[1, 0],
    )
    buffer_layout: gl.constexpr = gl.NVMMASharedLayout(
        swizzle_byte_width=min(128, 2 * STEP_COLUMNS), element_bitwidth=16, rank=2
    )
    # Eight consecutive output columns per thread for the store.
    store_layout: gl.constexpr = gl.BlockedLayout(
        size_per_thread=[8, 1], threads_per_warp=[2, 16], warps_per_cta=[1, WARPS], order=[0, 1]
    )

    pid = gl.program_id(0)  # (row tile * A + a) * BANDS + band, as in the Triton forward
    tile_index = pid // BANDS
    band = pid % BANDS
    window = tile_index % windows
    row0 = (tile_index // windows).to(gl.int64) * BLOCK_N
    pid_s = gl.program_id(1)
    offs_n = row0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, copy_layout))
    mask_n = offs_n < n
    lanes = gl.arange(0, STEP_COLUMNS, layout=gl.SliceLayout(0, copy_layout))
    q = gl.arange(0, WIDTH, layout=gl.SliceLayout(1, tile_layout))
    lane = gl.arange(0, WINDOW, layout=gl.SliceLayout(0, tile_layout))
    buffers = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, STEP_COLUMNS], buffer_layout)
    acc = gl.zeros([WIDTH, BLOCK_N], gl.float32, layout=acc_layout)

    g_begin = pid_s * groups_per_split
    g_end = gl.minimum(g_begin + groups_per_split, groups)
    for stage in gl.static_range(STAGES - 1):
        c0, c1, c2, c3 = _step_chunks(
            rotations_ptr, rotations_ptr, g_begin + stage * GROUPS, g_end, window, windows, band, BANDS, GROUPS, False
        )
        _copy_step(
            buffers.index(stage),
            x_ptr,
            c0,
            c1,
            c2,
            c3,
            g_begin + stage * GROUPS,
            g_end,
            windows,
            group_base,
            column_offset,
            d,
            offs_n,
            mask_n,
            lanes,
            stride_xm,
        )
    c0, c1, c2, c3 = _step_chunks(
        rotations_ptr,
        rotations_ptr,
        g_begin + (STAGES - 1) * GROUPS,
        g_end,
        window,
        windows,
        band,
        BANDS,
        GROUPS,
        False,
    )
    e0, e1, e2, e3 = _step_chunks(
        rotations_ptr, rotations_ptr, g_begin, g_end, window, windows, band, BANDS, GROUPS, False
    )
    w0, w1, w2, w3 = _step_words(words_ptr, e0, e1, e2, e3, q, band, NNZ, BLOCKS, GROUPS)
    step = 0
    for first_group in range(g_begin, g_end, GROUPS):
        # This step's copies are done in every thread, and the last step's wgmmas (which read the
        # buffer refilled next) are waited for in every warp.
        async_copy.wait_group(STAGES - 2)
        fence_async_shared()
        _barrier()
        _copy_step(
            buffers.index((step + STAGES - 1) % STAGES),
            x_ptr,
            c0,
            c1,
            c2,
            c3,
            first_group + (STAGES - 1) * GROUPS,
            g_end,
            windows,
            group_base,
            column_offset,
            d,
            offs_n,
            mask_n,
            lanes,
            stride_xm,
        )
        c0, c1, c2, c3 = _step_chunks(
            rotations_ptr,
            rotations_ptr,
            first_group + STAGES * GROUPS,
            g_end,
            window,
            windows,
            band,
            BANDS,
            GROUPS,
            False,
        )
        # The next step's words, in flight during this step's products.
        e0, e1, e2, e3 = _step_chunks(
            rotations_ptr, rotations_ptr, first_group + GROUPS, g_end, window, windows, band, BANDS, GROUPS, False
        )
        v0, v1, v2, v3 = _step_words(words_ptr, e0, e1, e2, e3, q, band, NNZ, BLOCKS, GROUPS)
        acc = _multiply_step(
            acc, w0, w1, w2, w3, buffers.index(step % STAGES), q, lane, band, NNZ, BLOCKS, GROUPS, DTYPE
        )
        w0, w1, w2, w3 = v0, v1, v2, v3
        step += 1
    async_copy.wait_group(0)

    out = gl.convert_layout(acc * scale, store_layout)
    q_out = gl.arange(0, WIDTH, layout=gl.SliceLayout(1, store_layout))
    rows = row0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, store_layout))
    _, exists = _band_blocks(q_out, band, NNZ, BLOCKS)
    cols = _window_columns(q_out, window, windows, band, BLOCKS)
    gl.store(
        out_ptr + pid_s.to(gl.int64) * stride_split + rows[None, :] * stride_om + cols[:, None] * stride_ok,
        out.to(out_ptr.dtype.element_ty),
        mask=exists[:, None] & (rows < n)[None, :],
    )
