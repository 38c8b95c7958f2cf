"""The windowed transpose for half types with one band, in Gluon: a program owns whole groups.

It computes what ``sparse_jl_windowed_transpose_kernel`` computes (Z = y S, docs/spec.md 2b), with
the work cut the other way. The Triton kernel's program owns window a of a row tile and writes
the chunk of each of its groups that lands there: 16 columns of Z, whose 32-byte sectors it
shares with the programs of windows a - 1 and a + 1 wherever Z's rows are not 16-element aligned,
and such sectors cost a read of DRAM each (benchmarks/NOTES.md, "Any d"). Here a program owns a
row tile and a run of whole groups, so it writes each row's span of a group itself, chunk after
chunk:

- y's row tile, all A windows of the band, is copied once into shared memory ([A, BLOCK_M, WIDTH]);
- per chunk, the window it lands in is read from there as the tensor cores' A operand
  (``ldmatrix``), and its signed-permutation tile is built in registers as the B operand of an
  ``mma.sync`` (no shared-memory stores, which bound the Triton kernel);
- the chunk's [BLOCK_M, 16] of Z is stored at once.

Eligible calls (``sjlt.ops.windowed._gluon_transpose``): float16/bfloat16 y on sm_90 with one band
(nnz <= 8). Gluon kernels have no interpreter; CI compiles this one for sm_90
(tests/test_kernels_compile.py) and the GPU tests compare it with the reference.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from .sparse_jl_windowed import WINDOW, _band_words, _folded_rows, _window_columns

_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier


@gluon.jit
def _tile(word, lane_source, lane, DTYPE: gl.constexpr):
    """The step's signed-permutation tiles [WIDTH, 16 * WARPS] (one chunk per 16 columns) in the
    layout of ``lane_source``: row q = 16t + u holds +-1 in column i of its chunk where
    u = i XOR m_(c,t), i.e. where m = u XOR i (``lane_source``, loop-invariant), signed by bit 16 + i
    of the word (so the sign depends on the column, not on u), and zeros for blocks past NNZ and
    chunks past the groups (zero words)."""
    match = (word & (WINDOW - 1)) == lane_source
    negative = ((word >> (16 + lane[None, :])) & 1) != 0
    return gl.where(match, gl.where(negative, -1.0, 1.0), 0.0).to(DTYPE)


@gluon.jit
def _chunks(rotations_ptr, columns, first_group, g_end, window, WINDOWS: gl.constexpr):
    """For the step's output columns (16 per group, WARPS groups from ``first_group``): the table
    chunk of each column's group that lands in ``window`` (docs/spec.md 2b: position
    (a - R_g) mod A), and whether the group exists."""
    group = first_group + columns // WINDOW
    exists = group < g_end
    position = window - gl.load(rotations_ptr + group, mask=exists, other=0)
    position = gl.where(position < 0, position + WINDOWS, position)
    return group.to(gl.int64) * WINDOWS + position, exists


@gluon.jit
def sparse_jl_windowed_gluon_transpose_kernel(
    y_ptr,
    words_ptr,
    rotations_ptr,
    z_ptr,
    n,
    d,
    column_offset,
    group_base,
    groups,
    groups_per_split,
    scale,
    out_features,
    stride_ym,
    stride_yk,
    stride_zm,
    stride_zd,
    NNZ: gl.constexpr,
    WINDOWS: gl.constexpr,
    WIDTH: gl.constexpr,
    FOLDS: gl.constexpr,
    BLOCK_M: gl.constexpr,
    WARPS: gl.constexpr,
):
    """z[BLOCK_M rows, columns of groups [split * groups_per_split, ...)] (one band: NNZ <= 8 blocks,
    WIDTH = 16 * NNZ padded to a power of two, WINDOWS = A). Each step takes WARPS groups, one per
    warp, window by window: acc [BLOCK_M, 16 * WARPS] = y's window [BLOCK_M, WIDTH] (shared by the warps) @
    the WARPS chunks' tiles, so each warp writes its group's chunks one after the other."""
    DTYPE: gl.constexpr = y_ptr.dtype.element_ty
    STEP: gl.constexpr = WINDOW * WARPS
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, WARPS], instr_shape=[16, 8])
    y_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    tile_layout: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=acc_layout, k_width=2)
    COLUMN_THREADS: gl.constexpr = min(32, WIDTH // 8)
    load_layout: gl.constexpr = gl.BlockedLayout(
        size_per_thread=[1, 8],
        threads_per_warp=[32 // COLUMN_THREADS, COLUMN_THREADS],
        warps_per_cta=[WARPS, 1],
        order=[1, 0],
    )
    buffer_layout: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])

    row0 = gl.program_id(0).to(gl.int64) * BLOCK_M
    offs_m = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, load_layout))
    offs_q = gl.arange(0, WIDTH, layout=gl.SliceLayout(0, load_layout))
    buffer = gl.allocate_shared_memory(DTYPE, [WINDOWS, BLOCK_M, WIDTH], buffer_layout)
    y_mask = (offs_m < n)[:, None] & (offs_q < 16 * NNZ)[None, :]
    y_rows = y_ptr + offs_m[:, None] * stride_ym
    for loaded in gl.static_range(WINDOWS):
        if FOLDS:  # padded row u of block t holds y's column at the row u folds onto (docs/spec.md 2b)
            columns, _, beyond, offset, start = _folded_rows(offs_q, loaded, WINDOWS, 0, out_features, NNZ, NNZ, True)
            columns = gl.where(beyond, start + offset, columns)
        else:
            columns = _window_columns(offs_q, loaded, WINDOWS, 0, NNZ)
        buffer.index(loaded).store(gl.load(y_rows + columns[None, :] * stride_yk, mask=y_mask, other=0.0))
    _barrier()

    q = gl.arange(0, WIDTH, layout=gl.SliceLayout(1, tile_layout))
    tile_columns = gl.arange(0, STEP, layout=gl.SliceLayout(0, tile_layout))
    lane = tile_columns % WINDOW
    lane_source = (q % WINDOW)[:, None] ^ lane[None, :]
    block = (q // WINDOW)[:, None]
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    mask_m = rows < n
    out_columns = gl.arange(0, STEP, layout=gl.SliceLayout(0, acc_layout))
    zeros = gl.zeros([BLOCK_M, STEP], gl.float32, acc_layout)
    g_begin = gl.program_id(1) * groups_per_split
    g_end = gl.minimum(g_begin + groups_per_split, groups)
    for first_group in range(g_begin, g_end, WARPS):
        for window in gl.static_range(WINDOWS):
            chunk, exists = _chunks(rotations_ptr, tile_columns, first_group, g_end, window, WINDOWS)
            word = gl.load(words_ptr + chunk[None, :] * NNZ + block, mask=exists[None, :] & (block < NNZ), other=0)
            z = mma_v2(buffer.index(window).load(y_layout), _tile(word, lane_source, lane, DTYPE), zeros)
            chunk, exists = _chunks(rotations_ptr, out_columns, first_group, g_end, window, WINDOWS)
            cols = (group_base * WINDOWS + chunk) * WINDOW - column_offset + out_columns % WINDOW
            mask = mask_m[:, None] & (exists & (cols >= 0) & (cols < d))[None, :]
            gl.store(
                z_ptr + rows[:, None] * stride_zm + cols[None, :] * stride_zd,
                (z * scale).to(z_ptr.dtype.element_ty),
                mask=mask,
            )
