"""The SJLT Triton kernels against the PyTorch reference: identical matrices, outputs within
per-dtype tolerances, on fresh random inputs of odd shapes, strides, offsets and splits."""

import itertools

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from tiers import SLOW, grid

from sjlt import reference, spec
from sjlt.kernels.sparse_jl import split_bf16x3
from sjlt.ops import classic, layouts, windowed
from sjlt.ops._launch import Tiling

# Max |kernel - float64 reference| / max |reference|. float32 must be float32-accurate (the issue's
# 1e-5 bar); half types are bounded by rounding the output to 8 (bf16) or 11 (fp16) bits.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

# (n, d, k, nnz, column_offset, seed)
SHAPES = [
    (1, 1, 1, 1, 0, 0),
    (37, 300, 64, 8, 0, 1),
    (5, 257, 100, 3, 2**33 + 5, 2**64 - 1),
    (70, 129, 17, 17, 0, 12345),
    (3, 1000, 200, 8, 7, 2**40 + 3),
    (33, 65, 256, 4, 2**31 - 3, 99),  # windowed, A = 4
    (5, 1000, 1024, 8, 7, 2**40 + 3),  # windowed, A = 8
    (9, 77, 48, 3, 2**33 + 5, 6),  # windowed, A = 1, nnz not a power of two
    (130, 40, 32, 2, 0, 31),  # windowed, several row tiles, d < one group
    (20, 600, 4096, 16, 2**33 + 1, 8),  # windowed, nnz 16 (two bands), A = 16
    (70, 333, 2048, 16, 5, 9),  # nnz 16, several row tiles: two bands
    (4, 300, 512, 32, 5, 77),  # nnz 32: masks repeat every 16 blocks (t mod 16), four bands
    (6, 500, 384, 12, 3, 21),  # nnz 12: a short last band (blocks 8-11)
    (6, 700, 300, 7, 2**36 + 3, 55),  # first table group below 2**31, its first chunk 2**32 - 1
]


# The two largest SHAPES (nnz 16 over several row tiles) run in half types in the thorough tier only.
BIG_SHAPES = {(20, 600, 4096, 16, 2**33 + 1, 8), (70, 333, 2048, 16, 5, 9)}
FAST_SHAPES = [shape for shape in SHAPES if shape not in BIG_SHAPES]
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


def _key(seed):
    return spec.philox_key(seed)


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double().cpu() - want).abs().max() / want.abs().max().clamp_min(1e-30))


@pytest.mark.parametrize("n,d,k,nnz,offset,seed", SHAPES)
def test_kernel_hash_table_equals_reference(kernel_device, n, d, k, nnz, offset, seed):
    rows, negative = layouts.triton_hash(d, k, *_key(seed), nnz, offset, kernel_device)
    ref_rows, ref_negative = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz, column_offset=offset)
    assert torch.equal(rows.cpu(), ref_rows)
    assert torch.equal(negative.cpu(), ref_negative)


@pytest.mark.parametrize(
    *grid(
        {"n,d,k,nnz,offset,seed": SHAPES, "dtype": [F32, BF16, F16]},
        fast=[{"dtype": F32}] + [{"n,d,k,nnz,offset,seed": shape} for shape in FAST_SHAPES],
    )
)
def test_forward_matches_reference(kernel_device, rng, dtype, n, d, k, nnz, offset, seed):
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    got = layouts.triton_forward(x.to(kernel_device), k, *_key(seed), nnz, offset)
    assert got.dtype == dtype and got.shape == (n, k)
    assert _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize("k", [96, 256])  # classic, windowed
@pytest.mark.parametrize("splits", [2, 3, 7])
def test_forward_column_splits_match_reference(kernel_device, rng, splits, k):
    """The split-d path (few rows, long rows) sums its partial tiles in a fixed order."""
    x = torch.randn(6, 700, generator=rng)
    want = reference.sparse_jl_forward(x.double(), k, seed=5, nnz=8)
    layout = windowed if spec.is_windowed(k, 8) else classic
    got = layout.forward(x.to(kernel_device), k, *_key(5), 8, 0, Tiling(splits=splits))
    assert _relative_error(got, want) <= TOLERANCE[torch.float32]


@pytest.mark.parametrize(
    *grid(
        {"splits": [1, 3], "dtype": [F32, BF16], "steps": [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 2)]},
        fast=[{"splits": 3, "dtype": F32}, {"splits": 1, "dtype": BF16, "steps": (4, 2)}],
    )
)
def test_windowed_forward_steps_match_reference(kernel_device, rng, steps, dtype, splits):
    """Several groups per dot and unrolled dots: group counts that no step size divides (19
    groups of 4 chunks at k = 512, nnz 8; offset mid-chunk), and splits that end mid-step."""
    n, d, k, nnz, offset, seed = 21, 1203, 512, 8, 2**33 + 9, 2**62 + 7
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.forward(x.to(kernel_device), k, *_key(seed), nnz, offset, Tiling(splits=splits, steps=steps))
    assert _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize(
    *grid(
        {
            "k,nnz,splits,paired": [
                (4096, 16, 3, False),
                (4096, 16, 3, True),
                (1152, 24, 1, None),
                (384, 12, 2, False),
                (384, 12, 2, True),
            ],
            "dtype": [F32, BF16],
        },
        fast=[
            {"k,nnz,splits,paired": (384, 12, 2, False), "dtype": F32},
            {"k,nnz,splits,paired": (384, 12, 2, True), "dtype": BF16},
        ],
    )
)
def test_windowed_bands_match_reference(kernel_device, rng, k, nnz, splits, paired, dtype):
    """Programs per band (spec v5: each band of 8 blocks has its own rotation), including a short
    last band, with d-splits: the forward, and the transpose as band passes adding in order or,
    for two bands, as one launch over the groups sorted by their shift."""
    n, d, offset, seed = 21, 1203, 2**33 + 9, 2**62 + 7
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.forward(x.to(kernel_device), k, *_key(seed), nnz, offset, Tiling(splits=splits))
    assert _relative_error(got, want) <= TOLERANCE[dtype]
    y = torch.randn(n, k, generator=rng).to(dtype)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.transpose(y.to(kernel_device), d, *_key(seed), nnz, offset, Tiling(splits=splits, paired=paired))
    assert got.dtype == dtype and _relative_error(got, want) <= TOLERANCE[dtype]


# (k, nnz) off the lattice k = 16 A nnz: each block's padded rows fold onto its first ones
# (docs/spec.md 2b). One block of 17 rows (A = 2), a whole window folded (100, 6), a few rows,
# a short last band (777, 12; 2100, 15) and two bands (4000, 16).
OFF_LATTICE = [(17, 1), (100, 6), (130, 5), (200, 7), (1000, 8), (777, 12), (2100, 15), (4000, 16)]
# (forward tiling, transpose tiling) by name: the fold through every forward kernel's store
# (tile, pipelined, CUDA-core; splits summed by the fold kernel) and the transposes' y loads.
OFF_LATTICE_TILINGS = {
    "default": (Tiling(), Tiling()),
    "splits": (Tiling(splits=3), Tiling(splits=3, paired=False)),
    "pipelined": (Tiling(splits=2, steps=(4, 1), pipelined=True), Tiling(splits=2, paired=True, pipelined=True)),
    "shuffle": (Tiling(splits=2, shuffle=True, blocks=(16,)), Tiling(steps=(1, False))),
}


@pytest.mark.parametrize(
    *grid(
        {"k,nnz": OFF_LATTICE, "dtype": [F32, BF16], "tiling": list(OFF_LATTICE_TILINGS)},
        # the float32 default at each k but 1000 and 4000 (two bands at 2100, the cheaper two-band k
        # in the interpreter), and k = 1000 through the tile, split and pipelined kernels; the
        # CUDA-core kernel at k = 17, its cheapest fold
        fast=[
            {"k,nnz": k_nnz, "dtype": F32, "tiling": "default"}
            for k_nnz in [(17, 1), (100, 6), (130, 5), (200, 7), (777, 12), (2100, 15)]
        ]
        + [
            {"k,nnz": (1000, 8), "dtype": BF16, "tiling": "default"},
            {"k,nnz": (1000, 8), "dtype": F32, "tiling": "splits"},
            {"k,nnz": (1000, 8), "dtype": BF16, "tiling": "pipelined"},
            {"k,nnz": (17, 1), "dtype": F32, "tiling": "shuffle"},
        ],
    )
)
def test_off_lattice_k_matches_reference(kernel_device, rng, k, nnz, dtype, tiling):
    assert spec.is_windowed(k, nnz) and spec.max_fold(k, nnz) > 0
    forward_tiling, transpose_tiling = OFF_LATTICE_TILINGS[tiling]
    if spec.band_count(nnz) != 2 and transpose_tiling.paired:
        transpose_tiling = transpose_tiling._replace(paired=None)
    n, d, offset, seed = 21, 1203, 2**33 + 9, 2**62 + 7
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.forward(x.to(kernel_device), k, *_key(seed), nnz, offset, forward_tiling)
    assert got.dtype == dtype and got.shape == (n, k)
    assert _relative_error(got, want) <= TOLERANCE[dtype]
    y = torch.randn(n, k, generator=rng).to(dtype)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.transpose(y.to(kernel_device), d, *_key(seed), nnz, offset, transpose_tiling)
    assert got.dtype == dtype and _relative_error(got, want) <= TOLERANCE[dtype]


# groups: the transpose's tile as z's right operand (1), then as z^T's left (4)
@pytest.mark.parametrize(
    *grid(
        {"dtype": [F32, BF16], "k,nnz,paired": [(512, 8, None), (1024, 16, True), (1024, 16, False)], "groups": [1, 4]},
        fast=[
            {"dtype": F32, "k,nnz,paired": (512, 8, None), "groups": 4},
        ],
    )
)
def test_windowed_pipelined_steps_match_reference(kernel_device, rng, groups, k, nnz, paired, dtype):
    """Steps whose loads are issued ahead (design 8): group counts and splits that no step divides,
    promoted runs that restart the pipeline (float32), and for the two-band transpose runs of
    groups sharing a shift, over which a step's prefetch must not run."""
    n, d, offset, seed = 21, 1203, 2**33 + 9, 2**62 + 7
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    for promote in (0, 2):
        got = windowed.forward(
            x.to(kernel_device),
            k,
            *_key(seed),
            nnz,
            offset,
            Tiling(splits=3, steps=(groups, 1), pipelined=True, promote_every=promote),
        )
        assert _relative_error(got, want) <= TOLERANCE[dtype]
    y = torch.randn(n, k, generator=rng).to(dtype)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.transpose(
        y.to(kernel_device),
        d,
        *_key(seed),
        nnz,
        offset,
        Tiling(splits=3, steps=(groups, groups == 4), paired=paired, pipelined=True),
    )
    assert got.dtype == dtype and _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize(
    *grid(
        {
            "n,rows": [(21, 32), (5, 16)],
            "k,nnz,splits": [(1024, 16, 3), (384, 12, 2), (512, 8, 1), (96, 3, 2)],
            "dtype": [F32, BF16, F16],
        },
        fast=[
            {"n,rows": (5, 16), "k,nnz,splits": (96, 3, 2), "dtype": F16},
            {"n,rows": (21, 32), "k,nnz,splits": (96, 3, 2), "dtype": BF16},
            {"n,rows": (21, 32), "k,nnz,splits": (512, 8, 1), "dtype": F32},
        ],
    )
)
def test_windowed_shuffle_forward_matches_reference(kernel_device, rng, k, nnz, splits, n, rows, dtype):
    """The forward on the CUDA cores (chunks permuted by warp shuffles): two bands, a short last
    band, one band, fewer blocks than a band; group counts and splits that end mid-run; fewer rows
    than the 32- or 16-row tile and an offset mid-chunk."""
    d, offset, seed = 1203, 2**33 + 9, 2**62 + 7
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.forward(
        x.to(kernel_device), k, *_key(seed), nnz, offset, Tiling(splits=splits, shuffle=True, blocks=(rows,))
    )
    assert got.dtype == dtype and _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize(
    *grid(
        {
            "k,nnz,splits,grouped,dtype,d": [
                (288, 9, 1, False, F32, 400),
                (288, 9, 1, False, F32, 1203),
                (1024, 16, 2, False, BF16, 1203),
                (1024, 16, 2, True, F32, None),
                (96, 3, 3, True, F16, None),
            ]
        },
        fast=[{"k,nnz,splits,grouped,dtype,d": (288, 9, 1, False, F32, 400)}],
    )
)
def test_shuffle_forward_sorts_runs_longer_than_its_slots(
    kernel_device, rng, monkeypatch, k, nnz, splits, grouped, dtype, d
):
    """The CUDA-core forward visits a program's groups a few slots at a time in order of their slope,
    moving its accumulators between frames (``_shuffle_run``). With 8 slots, runs of 10-38 groups
    take several sorts and many frames: splits that end mid-sort, grouped blocks whose segments
    start mid-sort, two bands, and a band of one block (nnz 9: any frame serves it). The sorts'
    counts (8 and 6 for nnz 9 at d = 1203; 5, 6, 4 and 7 grouped) leave every remainder of the
    three-slot passes; the fast tier's d = 400 makes runs of 13 groups."""
    monkeypatch.setattr(windowed, "_SHUFFLE_SLOTS", 8)
    n, offset, seed = 7, 2**33 + 9, 2**62 + 7
    tiling = Tiling(splits=splits, shuffle=True, blocks=(16,))
    if grouped:
        blocks, x = _blocks_side_by_side(rng, n, (300, 517, 386), dtype, kernel_device)
        got = windowed.forward_blocks(blocks, k, *_key(seed), nnz, offset, tiling)
    else:
        x = torch.randn(n, d, generator=rng).to(dtype)
        got = windowed.forward(x.to(kernel_device), k, *_key(seed), nnz, offset, tiling)
    want = reference.sparse_jl_forward(x.double().cpu(), k, seed=seed, nnz=nnz, column_offset=offset)
    assert _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize(*grid({"dtype": [BF16, F16]}, fast=[{"dtype": BF16}]))
def test_wide_row_forward_matches_reference(kernel_device, rng, dtype):
    """128-row pipelined programs (half types, long runs): a partial second row tile, splits."""
    n, d, k, nnz, offset, seed = 150, 1203, 1024, 16, 2**33 + 9, 2**62 + 7
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.forward(
        x.to(kernel_device),
        k,
        *_key(seed),
        nnz,
        offset,
        Tiling(blocks=(windowed._WIDE_ROWS,), steps=(4, 1), pipelined=True, splits=2),
    )
    assert _relative_error(got, want) <= TOLERANCE[dtype]


def test_wide_rows_rule():
    """128-row programs for half-type forwards with at least 128 rows and pipelined steps, or folded
    rows whatever the steps."""
    rule = windowed._wide_rows
    assert rule(torch.bfloat16, 128, True) and rule(torch.float16, 10**6, True)
    assert not rule(torch.bfloat16, 127, True) and not rule(torch.bfloat16, 4096, False)
    assert not rule(torch.float32, 4096, True) and not rule(torch.float32, 4096, True, folded=True)
    assert rule(torch.bfloat16, 4096, True, folded=True) and rule(torch.bfloat16, 4096, False, folded=True)
    assert not rule(torch.bfloat16, 127, False, folded=True)


def test_forward_asks_the_wide_rows_rule_about_its_fold(kernel_device, rng, monkeypatch):
    """The forward tells ``_wide_rows`` whether it folds rows: k = 1000 (nnz 8) and 4000 (two
    bands) do, 1024 (the lattice) does not. The rule's question is recorded and its answer kept
    at 64 rows, so that the interpreter stays quick."""
    asked = []
    monkeypatch.setattr(windowed, "_wide_rows", lambda dtype, n, pipelined, folded=False: asked.append(folded))
    x = torch.randn(21, 64, generator=rng).to(BF16).to(kernel_device)
    for k in (1000, 1024, 4000):
        windowed.forward(x, k, *_key(5), spec.default_nnz(k), 0, Tiling(splits=1))
    assert asked == [True, False, True]


def test_shuffle_forward_rule():
    """At most 32 rows and runs of 240 groups or more, in any precision, except one float32 pass
    with more than 16 rows and nnz under 16."""
    rule = windowed._shuffles
    assert rule(torch.float32, 3, 32, 240, 16) and rule(torch.float32, 3, 17, 10**6, 8)
    assert rule(torch.float32, 3, 1, 240, 4)
    assert not rule(torch.float32, 3, 32, 239, 16) and not rule(torch.float32, 3, 16, 239, 16)
    assert not rule(torch.float32, 3, 33, 10**6, 16) and not rule(torch.float32, 2, 33, 10**6, 16)
    assert rule(torch.float32, 2, 32, 10**6, 8) and rule(torch.float32, 1, 16, 10**6, 8)
    assert rule(torch.float32, 1, 32, 10**6, 16) and not rule(torch.float32, 1, 17, 10**6, 8)
    assert not rule(torch.bfloat16, 0, 33, 10**6, 16) and not rule(torch.float16, 0, 33, 10**6, 16)
    assert rule(torch.bfloat16, 0, 32, 240, 8) and rule(torch.float16, 0, 17, 10**6, 8)
    assert rule(torch.bfloat16, 0, 16, 240, 16) and rule(torch.float16, 0, 1, 10**6, 16)
    assert not rule(torch.bfloat16, 0, 16, 239, 16)


def test_gluon_forward_rule(monkeypatch):
    """Half types with more than 32 rows and 16-128 groups per program, where the GPU can run it;
    the rest keep the Triton kernels. (The kernel itself runs in tests/test_gpu_only.py: Gluon has
    no interpreter.)"""
    x = torch.empty(64, 1024, dtype=torch.bfloat16)
    assert not windowed._gluon_supported(x, 0)  # not on a GPU
    monkeypatch.setattr(windowed, "_gluon_supported", lambda x, column_offset: x.dtype != torch.float32)
    rule = windowed._gluon_forward
    assert rule(x, 0, 16) and rule(x, 0, 128) and rule(x.half(), 0, 64)
    assert not rule(x, 0, 15) and not rule(x, 0, 129)
    assert not rule(x[:32], 0, 64) and not rule(x.float(), 0, 64)


@pytest.mark.parametrize(
    "k,d,dtype,after",
    [
        (100, 2304, F32, True),  # d = 12 k' (nnz 6, k' = 192)
        pytest.param(300, 4032, F32, True, marks=SLOW),  # d = 12 k' (nnz 7, k' = 336)
        (300, 4031, F32, False),
        pytest.param(1000, 12288, BF16, True, marks=SLOW),
        pytest.param(350, 12000, F32, True, marks=SLOW),
    ],
)
def test_forwards_of_few_rows_fold_after_the_lattice_forward(kernel_device, rng, monkeypatch, k, d, dtype, after):
    """A forward of at most 1024 rows whose k folds rows and whose d is at least 12 k' runs the
    lattice forward at k' = 16 A nnz and folds after; narrower x folds in the kernel. Both match
    the reference (strided x, a column offset past 2**32)."""
    folds = []
    fold_after = windowed._fold_after
    monkeypatch.setattr(
        windowed, "_fold_after", lambda y, k, nnz, out: folds.append(y.shape[1]) or fold_after(y, k, nnz, out)
    )
    nnz = spec.default_nnz(k)
    x = torch.randn(9, 2 * d, generator=rng).to(dtype)[:, ::2]
    offset = 2**32 + 5
    got = windowed.forward(x.to(kernel_device), k, *_key(4), nnz, offset)
    assert folds == ([16 * spec.windows_per_block(k, nnz) * nnz] if after else [])
    want = reference.sparse_jl_forward(x.double(), k, seed=4, nnz=nnz, column_offset=offset)
    assert got.dtype == dtype and _relative_error(got, want) <= TOLERANCE[dtype]
    # each output rounded once from its float32 sum (Y' is float32), not Y' rounded and then its sum
    sums = windowed.forward(x.to(kernel_device), k, *_key(4), nnz, offset, out_dtype=F32)
    if got.device.type == "cpu" and dtype == BF16:  # the interpreter rounds to bfloat16 toward zero
        torch.testing.assert_close(got.float().cpu(), sums.cpu(), rtol=2**-7, atol=0)
    else:
        assert torch.equal(got, sums.to(dtype))


def test_folds_after_rule():
    """Folded k folds after the lattice forward where d is at least 12 k', with at most 1024 rows,
    or in float32 with fewer than 8 blocks at any rows (the H100 measurements in
    benchmarks/NOTES.md)."""
    rule = windowed._folds_after
    assert rule(1024, 12288, BF16, 1000, 8) and rule(1, 12288, F32, 1000, 8)
    assert not rule(1025, 12288, BF16, 1000, 8) and not rule(1025, 12288, F32, 1000, 8)
    assert not rule(1024, 12287, BF16, 1000, 8)
    assert rule(10**6, 4032, F32, 300, 7) and not rule(10**6, 4032, BF16, 300, 7)
    assert not rule(16, 2**20, F32, 1024, 8)  # the lattice


def _folded_by_gathers(y_lattice: torch.Tensor, k: int, nnz: int) -> torch.Tensor:
    """The oracle of ``windowed._fold_after``, from the spec's block bounds by index gathers."""
    padded = spec.WINDOW * spec.windows_per_block(k, nnz)
    starts, _ = spec.windowed_block_rows(torch.arange(nnz), k, nnz)
    rows = torch.arange(k)
    block = torch.searchsorted(starts, rows, right=True) - 1
    start, size = spec.windowed_block_rows(block, k, nnz)
    offset, values = rows - start, y_lattice.cpu().float()
    extra = values[:, padded * block + (offset + size).clamp_max(padded - 1)]
    return (values[:, padded * block + offset] + torch.where(offset + size < padded, extra, 0.0)).to(y_lattice.dtype)


@pytest.mark.parametrize("k,nnz", [(17, 1), (100, 6), (300, 7), (300, 17), (1000, 8), (4205, 16), (13836, 31)])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_fold_after_sums_each_row_and_its_folded_padded_row(kernel_device, rng, k, nnz, dtype):
    """``_fold_after`` (one kernel) equals the spec's gathers bitwise, in float32 sums rounded once,
    on a strided Y' whose rows span more than one program each way (16 rows, 256 columns). Triton's
    interpreter rounds float32 to bfloat16 toward zero, so there bfloat16 is within one unit."""
    lattice = spec.WINDOW * spec.windows_per_block(k, nnz) * nnz
    y_lattice = torch.randn(19, 2 * lattice, generator=rng).to(dtype)[:, ::2]
    got = windowed._fold_after(y_lattice.to(kernel_device), k, nnz, dtype)
    want = _folded_by_gathers(y_lattice, k, nnz)
    assert got.shape == (19, k) and got.dtype == dtype
    if got.device.type == "cpu" and dtype == BF16:
        torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=0)
    else:
        assert torch.equal(got.cpu(), want)


def _folded_spill(spill: torch.Tensor, y: torch.Tensor, k: int, nnz: int) -> torch.Tensor:
    """The oracle of ``windowed._add_fold``: y with row r of each block's windows 0 and A - 1 set to
    the spill of padded row r plus, in window 0, that of padded row size_t + r where it exists,
    summed over the splits in order in float32 and rounded once; y's other columns as they were."""
    last = spec.WINDOW * (spec.windows_per_block(k, nnz) - 1)
    want = y.clone()
    for block in range(nnz):
        start, size = spec.windowed_block_rows(block, k, nnz)
        for slot, lane in itertools.product((0, 1), range(spec.WINDOW)):
            row = slot * last + lane
            if row >= size:
                continue
            total = torch.zeros(y.shape[0])
            for split in spill:
                extra = split[:, block, 1, size + row - last] if slot == 0 and size + row < last + spec.WINDOW else 0.0
                total = total + (split[:, block, slot, lane] + extra)
            want[:, start + row] = total.to(y.dtype)
    return want


@pytest.mark.parametrize("k,nnz", [(17, 1), (100, 6), (300, 7), (1000, 8), (4000, 16), (13836, 31)])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_fold_spill_sums_each_edge_row_and_its_folded_padded_row(kernel_device, rng, k, nnz, splits, dtype):
    """``_add_fold`` (``fold_spill_kernel``, a row of Y per program) equals the spec's sums of the
    forward's spill bitwise, on a strided Y, leaving the windows the forward stores itself alone.
    Triton's interpreter rounds float32 to bfloat16 toward zero, so there bfloat16 is within one unit."""
    n = 19
    spill = torch.randn(splits, n, nnz, 2, spec.WINDOW, generator=rng)
    y = torch.randn(n, k + 5, generator=rng).to(dtype)[:, :k]
    want = _folded_spill(spill, y, k, nnz)
    got = windowed._add_fold(y.to(kernel_device), spill.to(kernel_device), k, nnz, spec.max_fold(k, nnz))
    assert got.shape == (n, k) and got.dtype == dtype
    if got.device.type == "cpu" and dtype == BF16:
        torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=0)
    else:
        assert torch.equal(got.cpu(), want)


def test_folded_forwards_do_not_ask_for_the_gluon_kernel(kernel_device, rng, monkeypatch):
    """Only a forward with k on the lattice asks the Gluon rule (k = 1024, not 1000 or 2500), and
    Tiling(gluon=True) with folded rows says that the Gluon kernel runs lattice k only."""
    asked = []
    monkeypatch.setattr(windowed, "_gluon_forward", lambda *args: asked.append(args) and False)
    x = torch.randn(40, 64, generator=rng).to(BF16).to(kernel_device)
    for k in (1000, 1024, 2500):
        windowed.forward(x, k, *_key(2), spec.default_nnz(k), 0, Tiling(splits=1))
    assert len(asked) == 1
    with pytest.raises(ValueError, match="on the lattice"):
        windowed.forward(x, 1000, *_key(2), 8, 0, Tiling(gluon=True))


def test_gluon_forward_refuses_an_input_it_cannot_run(kernel_device):
    x = torch.randn(64, 1024, device=kernel_device)  # float32: never the Gluon kernel's
    with pytest.raises(ValueError, match="sm_90"):
        windowed.forward(x, 1024, *_key(1), 8, 0, Tiling(gluon=True))


def test_pipelined_forward_takes_one_dot_per_step(kernel_device):
    x = torch.randn(4, 256, device=kernel_device)
    with pytest.raises(ValueError, match="one dot per step"):
        windowed.forward(x, 256, *_key(1), 8, 0, Tiling(steps=(1, 2), pipelined=True))


def test_two_band_transpose_rule():
    """One launch for two bands once each program has 8 A groups, else a launch per band; never
    for three bands; a Tiling overrides."""
    y = torch.empty(100, 1024)
    tables = windowed.WindowTables(None, None, 0, 8 * 4, 4)  # A = 4 at k = 1024, nnz 16
    assert windowed._pairs_bands(y, 16, tables, Tiling())
    assert not windowed._pairs_bands(y, 16, tables._replace(groups=8 * 4 - 1), Tiling())
    assert not windowed._pairs_bands(y, 16, tables, Tiling(paired=False))
    assert not windowed._pairs_bands(y, 24, tables, Tiling()) and not windowed._pairs_bands(y, 8, tables, Tiling())
    # 32-row programs run 2 warps, but 4 when they sum two bands; 64 rows always 4
    assert windowed._num_warps(32) == 2 and windowed._num_warps(32, paired=True) == windowed._num_warps(64) == 4


# (d, k, nnz, column_offset): every count of Philox quads per chunk (1-10, padded to 1-16), a short
# last quad, chunk indices past 2**32, and tables past one program of chunks.
TABLE_SHAPES = [
    (16, 16, 1, 0),
    (5000, 300, 7, 2**36 + 3),
    (3000, 1000, 8, 5),
    (700, 384, 12, 2**33 + 1),
    (40000, 4096, 16, 2**40 + 9),
    (2000, 16384, 32, 0),
    (900, 1280, 40, 17),
]


@pytest.mark.parametrize("d, k, nnz, column_offset", TABLE_SHAPES)
def test_window_tables_equal_the_reference_words_and_rotations(kernel_device, rng, d, k, nnz, column_offset):
    high, low = torch.randint(0, 2**32, (2,), generator=rng).tolist()
    seed = high << 32 | low  # any 64-bit seed
    tables = windowed.window_tables(d, k, *spec.philox_key(seed), nnz, column_offset, kernel_device)
    groups = tables.group_base + torch.arange(tables.groups, dtype=torch.int64)
    chunks = tables.group_base * tables.windows + torch.arange(tables.groups * tables.windows, dtype=torch.int64)
    words = tables.words.cpu().long() & 0xFFFFFFFF  # int32 storage of the uint32 words
    assert torch.equal(words, reference.chunk_words(chunks, nnz, seed).T)
    assert torch.equal(tables.rotations.cpu().long(), reference.window_rotations(groups, tables.windows, seed, nnz))


def test_two_band_order_table_sorts_groups_by_their_shift(kernel_device):
    """The two-band transpose visits groups sorted by delta_g = (R_(g,1) - R_(g,0)) mod A, cut into
    A runs: within run delta, a group's chunk at window a in band 0 is at window a + delta in
    band 1. Checked on the reference's rows."""
    d, k, nnz, seed = 3000, 1024, 16, 4
    windows = spec.windows_per_block(k, nnz)
    tables = windowed.window_tables(d, k, *spec.philox_key(seed), nnz, 0, kernel_device)
    rows, _ = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz)
    window = (rows % (k // nnz)) // 16  # (block, column)
    order, starts = (table.long().cpu() for table in windowed.shift_order(tables))
    assert torch.equal(order.sort().values, torch.arange(tables.groups)) and int(starts[-1]) == tables.groups
    for delta in range(windows):
        for group in order[starts[delta] : starts[delta + 1]].tolist():
            columns = slice(16 * windows * group, min(d, 16 * windows * (group + 1)))
            assert bool(((window[0, columns] + delta) % windows == window[8, columns]).all())


# (n, d, groups): 150 x 1100 in the thorough tier, 70 x 150 in the fast one; offset 37, k = 768
# and nnz 24 make a group 32 columns (2 windows), so 35 or 5 groups hold the input: slabs of 64
# rows and of 4 groups divide neither.
@pytest.mark.parametrize(
    "n,d,groups,budget,slab",
    [
        pytest.param(150, 1100, 35, 0, (64, 1), marks=SLOW),
        pytest.param(150, 1100, 35, 40_000, (64, 4), marks=SLOW),
        pytest.param(150, 1100, 35, 1 << 30, (150, 35), marks=SLOW),
        (70, 150, 5, 0, (64, 1)),
        (70, 150, 5, 40_000, (64, 4)),
        (70, 150, 5, 1 << 30, (70, 5)),
    ],
)
def test_half_type_transpose_band_sums_fit_the_workspace(kernel_device, rng, monkeypatch, n, d, groups, budget, slab):
    """A bfloat16 transpose with three bands keeps its float32 band sums in slabs of rows and groups
    within sjlt.backends.workspace_bytes (at least 64 rows of one group): every slab shape gives
    the reference's Z, and no slab exceeds the budget or that minimum."""
    monkeypatch.setattr("sjlt.backends.workspace_bytes", budget)
    k, nnz, offset, seed = 768, 24, 37, 5
    windows = spec.windows_per_block(k, nnz)
    assert windows == 2 and groups == -(-(offset % 32 + d) // 32)
    assert windowed._transpose_slab(n, windows, groups) == slab
    rows, slab_groups = slab
    assert rows * slab_groups * 16 * windows * 4 <= max(budget, 64 * 16 * windows * 4)
    y = torch.randn(n, k, generator=rng).to(torch.bfloat16)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.transpose(y.to(kernel_device), d, *_key(seed), nnz, offset)
    assert _relative_error(got, want) <= TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize(
    *grid(
        {
            "k,nnz,steps": [(96, 8, None), (512, 8, (1, 2)), (4096, 16, (4, 1))],
            "dtype": [F32, BF16],
            "promote_every": [0, 1, 3],
        },
        fast=[
            {"k,nnz,steps": (96, 8, None), "dtype": F32},
            {"k,nnz,steps": (512, 8, (1, 2)), "dtype": BF16, "promote_every": 3},
        ],
    )
)
def test_forward_promotion_matches_reference(kernel_device, rng, k, nnz, steps, dtype, promote_every):
    """Runs of steps summed in a fresh accumulator and added to the total (exact float32's
    default), runs of one step, or one accumulator: both layouts, unrolled and stacked steps, runs
    that d does not divide."""
    n, d, offset, seed = 19, 2100, 2**33 + 9, 2**62 + 7
    x = torch.randn(n, d, generator=rng).to(dtype)
    want = reference.sparse_jl_forward(x.double(), k, seed=seed, nnz=nnz, column_offset=offset)
    layout = windowed if spec.is_windowed(k, nnz) else classic
    tiling = Tiling(steps=steps, promote_every=promote_every)
    got = layout.forward(x.to(kernel_device), k, *_key(seed), nnz, offset, tiling)
    assert _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize(
    *grid(
        {"k,nnz": [(512, 8), (1024, 16)], "splits": [1, 3], "groups": [1, 2, 4], "tile_left": [False, True]},
        fast=[
            {"k,nnz": (512, 8), "splits": 3, "groups": 2},
            {"k,nnz": (512, 8), "splits": 3, "groups": 4},
            {"k,nnz": (1024, 16), "splits": 3, "groups": 4, "tile_left": True},
        ],
    )
)
def test_windowed_transpose_groups_match_reference(kernel_device, rng, groups, splits, tile_left, k, nnz):
    """Several groups' chunks per transpose dot, as z or z^T, with group counts and splits no step
    divides; with two bands, over runs of groups that share their band-1 shift, which neither
    steps nor splits divide."""
    n, d, offset, seed = 21, 1203, 2**33 + 9, 2**62 + 7
    y = torch.randn(n, k, generator=rng)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.transpose(
        y.to(kernel_device),
        d,
        *_key(seed),
        nnz,
        offset,
        Tiling(splits=splits, steps=(groups, tile_left), paired=nnz == 16 or None),
    )
    assert _relative_error(got, want) <= TOLERANCE[torch.float32]


@pytest.mark.parametrize(
    *grid(
        {"n,d,k,nnz,offset,seed": SHAPES, "dtype": [F32, BF16]},
        fast=[{"dtype": F32}] + [{"n,d,k,nnz,offset,seed": shape} for shape in FAST_SHAPES if shape[1] < 1000],
    )
)
def test_transpose_matches_reference(kernel_device, rng, dtype, n, d, k, nnz, offset, seed):
    y = torch.randn(n, k, generator=rng).to(dtype)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    got = layouts.triton_transpose(y.to(kernel_device), d, *_key(seed), nnz, offset)
    assert got.dtype == dtype and got.shape == (n, d)
    assert _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize(
    "dtype,k,d,padded",
    [(BF16, 100, 1600, 112), (BF16, 100, 1599, None), (BF16, 96, 4000, None), (F32, 100, 1600, None)],
)
def test_transpose_pads_y_rows_off_16_when_z_is_16x_larger(kernel_device, rng, monkeypatch, dtype, k, d, padded):
    """A half-type y whose row stride is not a multiple of 16 elements reaches the kernel as a copy
    with rows padded to 16 when Z has at least 16x its columns (k = 100, d = 1600), else as given
    (d = 1599, or k = 96 on 16; float32 with one band); Z matches the reference either way. y is a
    strided view, so that the copy also has to follow its strides."""
    strides = []
    launch = windowed._transpose_band
    monkeypatch.setattr(
        windowed, "_transpose_band", lambda y, *args, **kw: strides.append(y.stride()) or launch(y, *args, **kw)
    )
    y = torch.randn(6, 2 * k, generator=rng).to(dtype).to(kernel_device)[:, ::2]
    nnz = spec.default_nnz(k)
    want = reference.sparse_jl_transpose(y.cpu().double(), d, seed=4, nnz=nnz)
    got = windowed.transpose(y, d, *_key(4), nnz, 0)
    assert strides and set(strides) == {(padded, 1) if padded else (2 * k, 2)}
    assert _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize(
    "dtype,k,d,nnz,unfolded,n",
    [
        (BF16, 150, 700, 9, 288, 21),  # two bands, A = 2: every block folds a window
        pytest.param(F16, 300, 1300, 16, 512, 21, marks=SLOW),  # two bands, the last block cut at k
        pytest.param(BF16, 300, 1300, 17, 544, 21, marks=SLOW),  # three bands
        (BF16, 150, 299, 9, None, 21),  # Z under 2x y's columns
        (F32, 150, 700, 9, 288, 21),  # float32, two bands, y's rows off 16
        (F32, 150, 299, 9, None, 21),  # float32, two bands, Z under 2x y's columns
        pytest.param(F32, 150, 2400, 9, None, 40, marks=SLOW),  # float32, from 33 rows y padded instead
        pytest.param(F32, 150, 2400, 9, 288, 21, marks=SLOW),  # float32, few rows: unfolded, not padded
        pytest.param(F32, 300, 1300, 17, 544, 21, marks=SLOW),  # float32, three bands, y's rows off 16
        pytest.param(F32, 304, 1300, 17, None, 21, marks=SLOW),  # float32, y's rows on 16
        pytest.param(BF16, 288, 1300, 9, None, 21, marks=SLOW),  # the lattice
    ],
)
def test_transpose_unfolds_folded_y_for_the_lattice_kernel(
    kernel_device, rng, monkeypatch, dtype, k, d, nnz, unfolded, n
):
    """A folded transpose that ``_unfolds_y`` picks runs the lattice kernel on y unfolded to
    k' = 16 A nnz columns; Z matches the reference, and equals bitwise what the folding kernel
    gives. y is a strided view over more than one program of the unfold kernel in both directions
    (16 rows, 256 columns), read from a column offset."""
    widths = []
    launch = windowed._transpose_band
    monkeypatch.setattr(
        windowed, "_transpose_band", lambda y, *args, **kw: widths.append(y.shape[1]) or launch(y, *args, **kw)
    )
    y = torch.randn(n, 2 * k, generator=rng).to(dtype).to(kernel_device)[:, ::2]
    offset = 2**32 + 48
    want = reference.sparse_jl_transpose(y.cpu().double(), d, seed=5, nnz=nnz, column_offset=offset)
    got = windowed.transpose(y, d, *_key(5), nnz, offset)
    assert set(widths) == {unfolded or k}
    assert _relative_error(got, want) <= TOLERANCE[dtype]
    monkeypatch.setattr(windowed, "_unfolds_y", lambda *args: False)
    assert torch.equal(got, windowed.transpose(y, d, *_key(5), nnz, offset))


@pytest.mark.parametrize(
    *grid(
        {"dtype,k,nnz": [(BF16, 100, 6), (F16, 2100, 15), (BF16, 778, 12)], "view": ["contiguous", "rows", "offset"]},
        fast=[{"dtype,k,nnz": (F16, 2100, 15), "view": "offset"}, {"dtype,k,nnz": (BF16, 778, 12), "view": "rows"}],
    )
)
def test_unfold_moves_column_pairs(kernel_device, rng, monkeypatch, dtype, k, nnz, view):
    """A half-type y with an even k and row stride is unfolded in column pairs (4-byte words; the
    rule's minimum row length set to 0): the same bits as column by column, on contiguous rows, rows
    on a stride of k + 2, and columns read from 2 in (4-byte aligned); from 1 in (2-byte aligned) it
    goes column by column. One fold (100, 6), a short last band (2100, 15), a last block cut at an
    even k off 16 (778, 12)."""
    monkeypatch.setattr(windowed, "_PAIRED_UNFOLD_MIN_WORDS", 0)
    base = torch.randn(37, k + 2, generator=rng).to(dtype).to(kernel_device)
    y = {"contiguous": base[:, :k].contiguous(), "rows": base[:, :k], "offset": base[:, 2:]}[view]
    assert windowed._moves_pairs(y, k) and not windowed._moves_pairs(base[:, 1 : k + 1], k)
    pairs = windowed._unfolded(y, nnz)
    monkeypatch.setattr(windowed, "_moves_pairs", lambda y, lattice_k: False)
    assert torch.equal(pairs, windowed._unfolded(y, nnz))


def test_paired_unfold_rule():
    """Column pairs from 2048 words per unfolded row (k' = 4096), for 2-byte values with an even k
    and row stride, unit column stride and a 4-byte aligned start."""
    rule = windowed._moves_pairs
    y = torch.empty(4, 4002, dtype=torch.bfloat16)
    assert rule(y[:, :4000], 4096) and not rule(y[:, :4000], 4095) and rule(y.half()[:, 2:], 4096)
    assert not rule(y[:, 1:4001], 4096) and not rule(y[:, :3999], 4096) and not rule(y.float(), 4096)
    assert not rule(y[:, ::2], 4096) and not rule(torch.empty(4, 4001, dtype=torch.bfloat16)[:, :4000], 4096)


def test_transpose_through_unfolded_pairs(kernel_device, rng, monkeypatch):
    """The transpose through a y unfolded in column pairs is the reference's."""
    n, d, k, nnz, offset = 21, 3000, 100, 6, 2**32 + 48
    monkeypatch.setattr(windowed, "_PAIRED_UNFOLD_MIN_WORDS", 0)
    y = torch.randn(n, k + 2, generator=rng).to(BF16).to(kernel_device)[:, :k]
    assert windowed._moves_pairs(y, k)
    monkeypatch.setattr(windowed, "_unfolds_y", lambda *args: True)
    want = reference.sparse_jl_transpose(y.cpu().double(), d, seed=5, nnz=nnz, column_offset=offset)
    assert _relative_error(windowed.transpose(y, d, *_key(5), nnz, offset), want) <= TOLERANCE[BF16]


def test_row_split_rules():
    """The forward splits off a last 64-row tile of fewer than 16 rows where there are 4-32 full
    tiles; the transpose splits off the rows past a multiple of 16 from 512 rows on."""
    forward_rows = {255: 255, 257: 256, 271: 256, 272: 272, 1023: 1023, 1025: 1024, 1039: 1024, 2049: 2048, 2113: 2113}
    assert {n: windowed._forward_main_rows(n) for n in forward_rows} == forward_rows
    transpose_rows = {511: 511, 512: 512, 513: 512, 4095: 4080, 4097: 4096, 65551: 65536}
    assert {n: windowed._transpose_main_rows(n) for n in transpose_rows} == transpose_rows


@pytest.mark.parametrize(
    *grid(
        {"op,n,main": [("forward", 257, 256), ("forward", 271, 256), ("transpose", 527, 512)], "dtype": [F32, BF16]},
        fast=[{"op,n,main": ("forward", 257, 256)}, {"op,n,main": ("forward", 271, 256), "dtype": BF16}]
        + [{"op,n,main": ("transpose", 527, 512), "dtype": F32}],
    )
)
def test_rows_split_off_a_multiple_of_16_match_reference(kernel_device, rng, monkeypatch, op, n, main, dtype):
    """A call whose rows split (the rules above) runs one launch on the first rows and one on the
    rest, and matches the reference: a strided input, a column offset past 2**32, k off the lattice."""
    seen = []
    name = "_forward" if op == "forward" else "_transpose_rows"
    launch = getattr(windowed, name)
    monkeypatch.setattr(windowed, name, lambda a, *args, **kw: seen.append(a.shape[0]) or launch(a, *args, **kw))
    d, k, nnz, offset = 70, 100, 3, 2**32 + 9
    if op == "forward":
        x = torch.randn(n, 2 * d, generator=rng).to(dtype)[:, ::2]
        want = reference.sparse_jl_forward(x.double(), k, seed=7, nnz=nnz, column_offset=offset)
        got = windowed.forward(x.to(kernel_device), k, *_key(7), nnz, offset)
    else:
        y = torch.randn(n, 2 * k, generator=rng).to(dtype)[:, ::2]
        want = reference.sparse_jl_transpose(y.double(), d, seed=7, nnz=nnz, column_offset=offset)
        got = windowed.transpose(y.to(kernel_device), d, *_key(7), nnz, offset)
    assert seen == [main, n - main]
    assert got.shape == want.shape and got.dtype == dtype
    assert _relative_error(got, want) <= TOLERANCE[dtype]


@pytest.mark.parametrize("k", [40, 64])  # classic, windowed
def test_kernels_read_strided_inputs(kernel_device, rng, k):
    base = torch.randn(90, 2 * 150, generator=rng)
    x = base[::3, ::2]  # strides (900, 2): no copy is made by the launcher
    assert not x.is_contiguous()
    want = reference.sparse_jl_forward(x.double(), k, seed=3, nnz=4)
    assert _relative_error(layouts.triton_forward(x.to(kernel_device), k, *_key(3), 4, 0), want) <= 1e-5
    y = torch.randn(k, 30, generator=rng).t()  # (30, k) column-major
    want_t = reference.sparse_jl_transpose(y.double(), 150, seed=3, nnz=4)
    assert _relative_error(layouts.triton_transpose(y.to(kernel_device), 150, *_key(3), 4, 0), want_t) <= 1e-5


def test_forward_steps_of_rows_off_16_bytes():
    """Chunks the compiler cannot prove 16-byte aligned are loaded element by element, with their own
    steps: half types pipelined with two groups per dot (four where rows fold), float32 with one band
    and up to 128 groups per program as pipelined four-group dots, longer runs unpipelined, with two
    bands and 256 groups or more as pipelined two-group steps; float32 short runs and aligned rows
    keep the aligned steps."""
    assert windowed._aligned_chunks(torch.zeros(4, 768, dtype=BF16), 0)
    for x, offset in [
        (torch.zeros(4, 769, dtype=BF16), 0),  # width
        (torch.zeros(4, 784, dtype=BF16)[:, :768], 5),  # column offset
        (torch.zeros(4, 784, dtype=BF16)[:, 1:], 0),  # start and width
        (torch.zeros(4, 800, dtype=BF16)[:, ::2], 0),  # column stride
        (torch.zeros(4, 300, dtype=BF16), 0),  # 8 bytes: a multiple of 4 elements, not of 8
        (torch.zeros(4, 1000, dtype=F32), 2),  # a column offset of 8 bytes
    ]:
        assert not windowed._aligned_chunks(x, offset)
    # 16 bytes without 16 elements: widths, row strides and offsets of 8 half-type or 4 float32 elements
    for x, offset, multiple in [
        (torch.zeros(4, 1000, dtype=BF16), 0, 8),
        (torch.zeros(4, 1008, dtype=BF16)[:, :1000], 24, 8),
        (torch.zeros(4, 300, dtype=F32), 4, 4),
        (torch.zeros(4, 1000, dtype=F32), 8, 8),
        (torch.zeros(4, 1024, dtype=F32)[:, 4:], 0, 4),
    ]:
        assert windowed._aligned_chunks(x, offset) and windowed._row_multiple(x, offset) == multiple
    long = 10**6
    assert windowed._forward_steps(BF16, long, False) == windowed._forward_steps(BF16, 1, False) == (2, 1, 1, True)
    assert windowed._forward_steps(F32, long, False) == (4, 1, 1, False)
    assert windowed._forward_steps(F32, 256, False, bands=2) == windowed._forward_steps(F32, long, False, bands=4)
    assert windowed._forward_steps(F32, 256, False, bands=2) == (2, 1, 1, True)
    assert windowed._forward_steps(F32, 255, False, bands=2) == (4, 1, 1, False)
    assert windowed._forward_steps(F32, 128, False) == windowed._forward_steps(F32, 16, False) == (4, 1, 1, True)
    assert windowed._forward_steps(F32, 129, False) == (4, 1, 1, False)
    assert windowed._forward_steps(BF16, long, False, folded=True) == (4, 1, 1, True)
    assert windowed._forward_steps(BF16, long, True) == (4, 1, 1, True)
    assert windowed._forward_steps(BF16, 1, True) == (4, 1, 1, False)
    assert windowed._forward_steps(F32, long, True) == (2, 1, 1, True)
    assert windowed._forward_steps(F32, 1, False) == windowed._forward_steps(F32, 1, True)
    assert windowed._forward_steps(BF16, long, False, wide_vector_rows=True) == (4, 1, 1, True)


def test_misaligned_half_type_rows_widen_where_64_row_programs_split_d():
    """Half-type forwards of rows off 16 bytes take 128-row programs where their 64-row launch
    would split d (too few programs to fill the GPU); float32, aligned rows (their own rule,
    ``_wide_rows``), folded k and launches that fill the GPU unsplit keep theirs."""
    assert windowed._widens_misaligned_rows(BF16, aligned=False, folded=False, splits=2)
    assert windowed._widens_misaligned_rows(F16, aligned=False, folded=False, splits=17)
    assert not windowed._widens_misaligned_rows(BF16, aligned=False, folded=False, splits=1)
    assert not windowed._widens_misaligned_rows(F32, aligned=False, folded=False, splits=17)
    assert not windowed._widens_misaligned_rows(BF16, aligned=True, folded=False, splits=17)
    assert not windowed._widens_misaligned_rows(BF16, aligned=False, folded=True, splits=17)


# (n, d, k, row_pad, offset, view_start, steps): steps are (groups, dots, pipelined), None the default
OFF_16_BYTE_CASES = [
    (70, 37, 256, 0, 0, 0, None),  # odd rows
    (40, 100, 512, 3, 5, 1, None),  # padded rows, a column offset and a start off 16 bytes
    (66, 161, 1000, 0, 2**33 + 21, 3, None),  # folded k, an offset above 2^32
    (65, 48, 2048, 0, 0, 2, None),  # aligned widths at a misaligned start; two bands
    (21, 1203, 512, 0, 0, 0, (2, 1, True)),  # the long runs' steps: two groups pipelined (half types)
    (21, 1203, 512, 0, 0, 0, (4, 1, False)),  # four groups unpipelined (float32)
]
# float32's steps for two bands with long runs and one band with short ones (half types reach the
# latter's steps by default where rows fold: test_off_lattice_k_matches_reference)
OFF_16_BYTE_FLOAT32_CASES = [
    (21, 1203, 2048, 0, 0, 0, (2, 1, True)),
    (21, 1203, 1000, 0, 0, 0, (4, 1, True)),
]


@pytest.mark.parametrize(
    *grid(
        {
            "n,d,k,row_pad,offset,view_start,steps": OFF_16_BYTE_CASES + OFF_16_BYTE_FLOAT32_CASES,
            "dtype": [BF16, F16, F32],
        },
        fast=[{"n,d,k,row_pad,offset,view_start,steps": case} for case in OFF_16_BYTE_CASES]
        + [{"n,d,k,row_pad,offset,view_start,steps": case, "dtype": F32} for case in OFF_16_BYTE_FLOAT32_CASES],
    )
)
def test_forward_of_rows_off_16_bytes(kernel_device, rng, dtype, n, d, k, row_pad, offset, view_start, steps):
    """Rows whose start, width, stride or column offset is off 16 bytes are loaded element by element
    (``windowed._aligned_chunks``): the result matches the reference, with the steps long runs of
    such rows take, and a NaN stays in its own row."""
    storage = torch.randn(view_start + n * (d + row_pad) + 5, generator=rng).to(dtype).to(kernel_device)
    x = storage[view_start : view_start + n * (d + row_pad)].view(n, d + row_pad)[:, :d]
    x[1, d // 2] = float("nan")
    x[2, d - 1] = float("nan")
    assert not windowed._aligned_chunks(x, offset)
    nnz = spec.default_nnz(k)
    if steps is None:
        got = layouts.triton_forward(x, k, *_key(7), nnz, offset)
    else:
        groups, dots, pipelined = steps
        tiling = Tiling(
            splits=2, steps=(groups, dots), pipelined=pipelined, blocks=(16 if kernel_device == "cpu" else 64,)
        )
        got = windowed.forward(x, k, *_key(7), nnz, offset, tiling)
    got = got.double().cpu()
    want = reference.sparse_jl_forward(x.double().cpu(), k, seed=7, nnz=nnz, column_offset=offset)
    finite = torch.isfinite(want).all(1)
    assert torch.equal(torch.isfinite(got).all(1), finite) and not finite[1] and not finite[2]
    assert _relative_error(got[finite], want[finite]) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("d,groups", [(1203, 2), (1204, 4)])
def test_forward_of_rows_off_16_bytes_in_128_row_programs(kernel_device, rng, dtype, d, groups):
    """The steps of 128-row programs over rows off 16 bytes (``windowed._widens_misaligned_rows``):
    two groups pipelined for rows loaded element by element (d = 1203), four for rows on 8 bytes
    (d = 1204), split over d, with a last row tile of 2 rows; the result matches the reference and a
    NaN stays in its own row."""
    n, k = 130, 512
    x = torch.randn(n, d, generator=rng).to(dtype).to(kernel_device)
    x[1, d // 2] = float("nan")
    x[129, 0] = float("nan")
    assert not windowed._aligned_chunks(x, 0)
    tiling = Tiling(splits=2, steps=(groups, 1), pipelined=True, blocks=(windowed._WIDE_ROWS,))
    got = windowed.forward(x, k, *_key(7), spec.default_nnz(k), 0, tiling).double().cpu()
    want = reference.sparse_jl_forward(x.double().cpu(), k, seed=7, nnz=spec.default_nnz(k))
    finite = torch.isfinite(want).all(1)
    assert torch.equal(torch.isfinite(got).all(1), finite) and not finite[1] and not finite[129]
    assert _relative_error(got[finite], want[finite]) <= TOLERANCE[dtype]


def test_transpose_stores_vectors_in_float32_and_half_types_with_two_bands_or_short_runs():
    """The transpose's MULTIPLE (``windowed._z_multiple``): every power of two that z's width, offset,
    row strides and first columns share, for float32; for half types with more than 16 groups per
    program 16 or nothing, but with two bands on rows on 16 bytes, since their vector stores on half
    sectors ran slower than element stores elsewhere."""
    for width, offset, multiple_f32, multiple_half, two_bands_half in [
        (1024, 0, 16, 16, 16),
        (1000, 0, 8, 1, 8),  # 16 bytes
        (300, 4, 4, 1, 1),  # 8 bytes
        (769, 0, 1, 1, 1),
    ]:
        for dtype, want, want_two_bands in (
            (F32, multiple_f32, multiple_f32),
            (BF16, multiple_half, two_bands_half),
            (F16, multiple_half, two_bands_half),
        ):
            z = torch.empty(3, width, dtype=dtype)
            rows = windowed._z_row_multiple(width, offset, z, 0, z, 0)
            size = z.element_size()
            assert windowed._z_multiple(rows, size, 1, 17) == want, (width, offset, dtype)
            assert windowed._z_multiple(rows, size, 2, 17) == want_two_bands, (width, offset, dtype)
            assert windowed._z_multiple(rows, size, 2, 16) == multiple_f32, (width, offset, dtype)
            assert windowed._z_multiple(rows, size, 1, 16) == multiple_f32, (width, offset, dtype)
    z, sums = torch.empty(3, 1024), torch.empty(3, 1000)
    assert windowed._z_row_multiple(1024, 0, z, 0, sums, 24) == 8  # the partials' stride and first column count


@triton.jit
def _split_kernel(x_ptr, out_ptr, n, PASSES: tl.constexpr, BLOCK: tl.constexpr):
    """x's float32 split into its three bfloat16 terms, as float32 rows hi, mid, lo of ``out``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    hi, mid, lo = split_bf16x3(tl.load(x_ptr + offs, mask=mask, other=0.0), PASSES)
    tl.store(out_ptr + offs, hi.to(tl.float32), mask=mask)
    tl.store(out_ptr + n + offs, mid.to(tl.float32), mask=mask)
    tl.store(out_ptr + 2 * n + offs, lo.to(tl.float32), mask=mask)


@pytest.mark.parametrize("passes", [1, 2, 3])
def test_float32_split_is_exact_and_rounds_only_where_terms_are_dropped(kernel_device, rng, passes):
    """``split_bf16x3``: hi + mid + lo is x exactly (x well above bfloat16's subnormals), with all
    three passes by truncation (|hi| <= |x|, no conversion instruction), with fewer by rounding to
    nearest (hi is x rounded to bfloat16, checked on a GPU: the interpreter's conversion truncates),
    which halves the error of the dropped terms."""
    scales = 2.0 ** torch.randint(-60, 60, (2000,), generator=rng)
    x = torch.randn(2000, generator=rng) * scales
    x = torch.cat([x, torch.tensor([0.0, -0.0, 1.0, -3.0, 1 + 2**-8, 1 + 2**-9, 1 + 2**-8 + 2**-23, -(2**-100)])])
    n = x.numel()
    out = torch.full((3, n), float("nan")).to(kernel_device)
    _split_kernel[(triton.cdiv(n, 256),)](x.to(kernel_device), out, n, PASSES=passes, BLOCK=256)
    hi, mid, lo = out.cpu().double()
    assert torch.equal(hi + mid + lo, x.double())
    for term in (hi, mid, lo):
        assert torch.equal(term.float().to(BF16).float().double(), term)  # each term is a bfloat16 value
    if passes == 3:
        assert bool((hi.abs() <= x.double().abs()).all())
    elif kernel_device != "cpu":  # the interpreter's float32 -> bfloat16 conversion truncates
        assert torch.equal(hi, x.to(BF16).double())


# (n, d, k, row_pad, offset, view_start)
VECTOR_ROW_CASES = [
    (70, 1000, 512, 8, 24, 8),  # 8 elements past 16 in the width, offset and start: 16-byte vectors
    (40, 300, 1000, 4, 4, 4),  # 4 past 16: 16-byte vectors in float32, 8-byte in half types; folded k
    (21, 200, 2048, 8, 2**33 + 8, 8),  # two bands, an offset above 2^32
    (66, 1000, 2048, 0, 2**33 + 8, 0),  # two bands, longer runs
    (65, 600, 4096, 8, 8, 8),  # two bands, several row tiles
]


@pytest.mark.parametrize(
    *grid(
        {"n,d,k,row_pad,offset,view_start": VECTOR_ROW_CASES, "dtype": [BF16, F16, F32]},
        fast=[{"n,d,k,row_pad,offset,view_start": case} for case in VECTOR_ROW_CASES[1:3]],
    )
)
def test_rows_off_16_elements_in_vectors(kernel_device, rng, n, d, k, row_pad, offset, view_start, dtype):
    """Rows whose width, row stride, start and column offset are multiples of 4 or 8 elements but not
    of 16 move in vectors (the kernels' MULTIPLE, ``windowed._row_multiple``), with a partial last
    chunk: forward and transpose match the reference, and a NaN in the last column of a row or the
    first of the next stays in its row."""
    storage = torch.randn(view_start + n * (d + row_pad) + 8, generator=rng).to(dtype).to(kernel_device)
    x = storage[view_start : view_start + n * (d + row_pad)].view(n, d + row_pad)[:, :d]
    x[1, d - 1] = float("nan")
    x[3, 0] = float("nan")
    assert windowed._row_multiple(x, offset) in (4, 8)
    nnz = spec.default_nnz(k)
    got = layouts.triton_forward(x, k, *_key(11), nnz, offset).double().cpu()
    want = reference.sparse_jl_forward(x.double().cpu(), k, seed=11, nnz=nnz, column_offset=offset)
    finite = torch.isfinite(want).all(1)
    assert torch.equal(torch.isfinite(got).all(1), finite) and finite.sum() == n - 2
    assert _relative_error(got[finite], want[finite]) <= TOLERANCE[dtype]
    y = torch.randn(n, k, generator=rng).to(dtype)
    got_t = layouts.triton_transpose(y.to(kernel_device), d, *_key(11), nnz, offset)
    want_t = reference.sparse_jl_transpose(y.double(), d, seed=11, nnz=nnz, column_offset=offset)
    assert _relative_error(got_t, want_t) <= TOLERANCE[dtype]


@pytest.mark.parametrize("k", [80, 128])  # classic, windowed
def test_forward_is_bitwise_deterministic(kernel_device, rng, k):
    x = torch.randn(50, 333, generator=rng).to(kernel_device)
    first = layouts.triton_forward(x, k, *_key(11), 8, 0)
    assert torch.equal(first, layouts.triton_forward(x, k, *_key(11), 8, 0))
    layout = windowed if spec.is_windowed(k, 8) else classic
    split = layout.forward(x, k, *_key(11), 8, 0, Tiling(splits=3))
    assert torch.equal(split, layout.forward(x, k, *_key(11), 8, 0, Tiling(splits=3)))


@pytest.mark.parametrize("k", [15, 16])  # classic, windowed
def test_float32_is_not_rounded_through_tf32(kernel_device, k):
    """Inputs with more than 10 mantissa bits survive: tf32 would lose the 2**-20 term."""
    x = torch.full((16, 64), 1.0 + 2**-20, dtype=torch.float32)
    x[:, 1::2] = 3.0 + 2**-21
    want = reference.sparse_jl_forward(x.double(), k, seed=1, nnz=1)
    got = layouts.triton_forward(x.to(kernel_device), k, *_key(1), 1, 0)
    assert _relative_error(got, want) <= 1e-6


@pytest.mark.parametrize(
    "n, width_in, width_out, rows_per_program",
    [
        (1, 300, 304, 8),  # one row, padded
        (37, 304, 300, 8),  # a last program of 5 rows; spans of 2400 elements, 3 steps of 1024
        (70, 267, 272, 32),
        (9, 1000, 13, 1),  # cut deep, a row per program
        (33, 17, 1100, 32),  # padded past a step in one row
        (65, 5, 5, 8),  # the same width: a copy
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "columns"])
def test_resize_rows_cuts_and_pads_like_torch(
    n, width_in, width_out, rows_per_program, dtype, layout, kernel_device, rng
):
    """``rows.resized`` (the dense algorithm's Y cut and y pad, the windowed transpose's padded y)
    gives torch's cut or zero pad exactly, into a contiguous tensor, from strided rows too."""
    from sjlt.ops import rows

    x = torch.randn(n, width_in + 3, generator=rng).to(dtype).to(kernel_device)
    if layout == "contiguous":
        x = x[:, :width_in].contiguous()
    elif layout == "strided":
        x = x[:, 2 : width_in + 2]  # rows 3 elements apart, not 16-byte aligned
    else:
        x = torch.randn(width_in, n, generator=rng).to(dtype).to(kernel_device).t()  # column stride n
    got = rows.resized(x, width_out, rows_per_program)
    want = x[:, :width_out] if width_out <= width_in else torch.nn.functional.pad(x, (0, width_out - width_in))
    assert got.is_contiguous() and got.shape == (n, width_out)
    assert torch.equal(got, want)


def test_resize_rows_is_differentiable_to_any_order(kernel_device, rng):
    """``rows.resize``: a cut's gradient is the gradient padded with zeros and a pad's is it cut, so
    the dense algorithm keeps torch's autograd through its cut of Y and its pad of y; an expanded
    gradient (of a sum: strides 0) reads right."""
    from sjlt.ops import rows

    x = torch.randn(11, 13, generator=rng, dtype=torch.float64).to(kernel_device).requires_grad_()
    for width in (5, 13, 20):
        assert torch.autograd.gradcheck(rows._Resize.apply, (x, width))
        assert torch.autograd.gradgradcheck(rows._Resize.apply, (x, width))
        x.grad = None
        rows._Resize.apply(x, width).sum().backward()
        assert torch.equal(x.grad, (torch.arange(13, device=kernel_device) < width).double().expand(11, 13))


def test_resize_rows_leaves_launch_bound_copies_to_torch(monkeypatch):
    """Below _LAUNCH_BOUND_ELEMENTS torch's copy, which launches cheaper, does the cut or pad (with
    its own autograd); above it the kernel (``_Resize``)."""
    from sjlt.ops import rows

    launched = []
    monkeypatch.setattr(rows, "_LAUNCH_BOUND_ELEMENTS", 64)
    monkeypatch.setattr(rows, "resized", lambda x, width: launched.append(x.shape) or rows._torch_resized(x, width))
    small = torch.randn(3, 15, requires_grad=True)
    assert torch.equal(rows.resize(small, 16)[:, :15], small) and not launched  # 3 x 16 < 64: torch's
    large = torch.randn(5, 15, requires_grad=True)
    rows.resize(large, 13).sum().backward()
    assert launched == [(5, 15), (5, 13)]  # the cut, then its gradient's pad
    assert torch.equal(large.grad[:, 13:], torch.zeros(5, 2))


@pytest.mark.parametrize(
    "k, nnz", [(256, 8), (64, 4), (40, 3), (267, 6)], ids=["windowed", "windowed-A1", "classic", "misaligned-k"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dense_algorithm_matches_the_reference(k, nnz, dtype, kernel_device, rng, monkeypatch):
    """The dense algorithm of launch-bound inputs (sjlt.ops.dense) builds S from the kernels' tables;
    a k whose rows are not 16-byte aligned goes through S padded with zero rows, and the result is
    (n, k) and contiguous."""
    from sjlt.ops import dense

    monkeypatch.setattr(dense, "PADDED_TRANSPOSE_MIN_WORK", 0)  # the large-call path, on 7 rows
    d, offset = 300, 2**33 + 5
    x = torch.randn(7, d, generator=rng, dtype=torch.float64)
    key0, key1 = spec.philox_key(99)
    got = dense.forward(x.to(dtype).to(kernel_device), k, key0, key1, nnz, offset)
    want = reference.sparse_jl_forward(x.to(dtype).double(), k, seed=99, nnz=nnz, column_offset=offset)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.double().cpu(), want, rtol=tol, atol=tol * float(want.abs().max()))
    assert got.shape == (7, k) and got.is_contiguous()
    y = torch.randn(7, k, generator=rng, dtype=torch.float64)
    got_t = dense.transpose(y.to(dtype).to(kernel_device), d, key0, key1, nnz, offset)
    want_t = reference.sparse_jl_transpose(y.to(dtype).double(), d, seed=99, nnz=nnz, column_offset=offset)
    torch.testing.assert_close(got_t.double().cpu(), want_t, rtol=tol, atol=tol * float(want_t.abs().max()))
    signs = dense.sign_matrix(d, k, key0, key1, nnz, offset, dtype, torch.device(kernel_device))
    assert set(signs.unique().tolist()) <= {-1.0, 0.0, 1.0} and int((signs != 0).sum()) == nnz * d
    dense.clear_cache()


def test_algorithm_rule(monkeypatch):
    """The fixed rule of sjlt.ops.choice: dense for launch-bound inputs with a small S and for half
    types with k <= 512 (transposes with a column offset on 16: k <= 256; where k folds rows and d k
    is small, 1024 and 384) within the cache budget and with 16-byte aligned rows (the forward's
    input, the transpose's output); the kernel otherwise, and always off CUDA."""
    from sjlt import backends
    from sjlt.ops import choice

    def pick(n, d, k, dtype):
        return choice._rule(_FakeCuda(n, d, dtype), d, k)

    assert choice._rule(torch.empty(64, 1024, device="meta"), 1024, 256) == choice.KERNEL  # not CUDA
    assert pick(64, 1024, 256, torch.float32) == choice.DENSE  # launch-bound, S = 1 MiB
    assert pick(4096, 1024, 256, torch.float32) == choice.DENSE  # 2^31 flops: still launch-bound
    assert pick(4097, 1024, 256, torch.float32) == choice.KERNEL
    assert pick(4096, 1024, 1024, torch.bfloat16) == choice.DENSE  # 2^33 flops on tensor cores
    assert pick(64, 1024, 8192, torch.float32) == choice.KERNEL  # S = 32 MiB: too big to read per call
    assert pick(2**20, 1024, 256, torch.float32) == choice.KERNEL
    assert pick(2**20, 1024, 256, torch.bfloat16) == choice.DENSE
    assert pick(2**20, 1024, 512, torch.float16) == choice.DENSE
    assert pick(2**20, 1024, 1024, torch.bfloat16) == choice.KERNEL
    assert pick(2**20, 1024, 256, torch.float64) == choice.KERNEL
    # half-type rows off 16 bytes, which cuBLAS reads and writes slowly: the forward's input rows
    # and the transpose's output rows; the transpose's y rows are padded by the dense algorithm itself
    assert choice._rule(_FakeCuda(2**20, 769, torch.bfloat16), 769, 256) == choice.KERNEL
    assert choice._rule(_FakeCuda(2**20, 768, torch.bfloat16, row_stride=771), 768, 256) == choice.KERNEL
    assert choice._rule(_FakeCuda(2**20, 768, torch.bfloat16, start=2), 768, 256) == choice.KERNEL
    assert choice._rule(_FakeCuda(2**20, 769, torch.bfloat16, row_stride=776), 769, 256) == choice.DENSE
    assert choice._rule(_FakeCuda(2**20, 250, torch.bfloat16), 768, 250, transpose=True) == choice.DENSE
    assert choice._rule(_FakeCuda(2**20, 256, torch.bfloat16), 769, 256, transpose=True) == choice.KERNEL
    # transposes: dense only to k = 256, where cuBLAS is not yet bound by the tensor cores
    assert choice._rule(_FakeCuda(65536, 256, torch.bfloat16), 4096, 256, transpose=True) == choice.DENSE
    assert choice._rule(_FakeCuda(65536, 257, torch.float16), 16384, 257, transpose=True) == choice.KERNEL
    assert choice._rule(_FakeCuda(65536, 512, torch.bfloat16), 4096, 512, transpose=True) == choice.KERNEL
    # ... unless the column offset is off 16: the kernel's chunks then share sectors of Z
    assert choice._rule(_FakeCuda(65536, 512, torch.bfloat16), 4096, 512, True, column_offset=5) == choice.DENSE
    assert choice._rule(_FakeCuda(65536, 384, torch.bfloat16), 4096, 384, True, column_offset=32) == choice.KERNEL
    # where k folds rows on short rows: forwards to k = 1024 and transposes to 384 while d k is small
    assert pick(2**20, 768, 1000, torch.bfloat16) == choice.DENSE  # 16 rows fold per block
    assert pick(2**20, 1024, 700, torch.float16) == choice.DENSE
    assert choice._rule(_FakeCuda(2**20, 768, torch.bfloat16), 768, 1000, nnz=4) == choice.DENSE
    assert pick(2**19, 1536, 700, torch.bfloat16) == choice.KERNEL  # d k past 2^20
    assert pick(2**20, 768, 1500, torch.bfloat16) == choice.KERNEL  # k past 1024
    assert pick(2**20, 768, 1000, torch.float32) == choice.KERNEL
    assert choice._rule(_FakeCuda(2**20, 768, torch.bfloat16), 768, 1024, nnz=8) == choice.KERNEL  # no fold
    assert choice._rule(_FakeCuda(2**20, 768, torch.bfloat16), 768, 1000, nnz=64) == choice.KERNEL  # classic
    assert choice._rule(_FakeCuda(2**20, 300, torch.bfloat16), 4096, 300, transpose=True) == choice.DENSE
    assert choice._rule(_FakeCuda(2**16, 300, torch.bfloat16), 16384, 300, transpose=True) == choice.KERNEL
    assert choice._rule(_FakeCuda(2**20, 500, torch.bfloat16), 768, 500, transpose=True) == choice.KERNEL
    assert choice._rule(_FakeCuda(2**20, 336, torch.bfloat16), 768, 336, transpose=True) == choice.KERNEL  # no fold
    monkeypatch.setattr(backends, "dense_cache_bytes", 0)
    assert pick(64, 1024, 256, torch.float32) == choice.KERNEL  # the dense algorithm turned off


def test_split_partials_stay_within_the_workspace_budget(monkeypatch):
    """Forward d-splits fill the SMs, but their float32 partials never exceed
    sjlt.backends.workspace_bytes; the transpose's splits write Z directly and are not bounded."""
    from sjlt import backends
    from sjlt.ops import _launch

    monkeypatch.setattr(_launch, "multiprocessor_count", lambda index: 132)
    cuda = torch.device("cuda", 0)
    n, k = 32, 4096
    partial = n * k * 4  # 512 KiB per split
    summed = (n * 2**24 * 4, partial)
    assert _launch.splits_to_fill(64, 4096, 8, cuda, summed) == 17  # 8 * 132 / 64 programs
    small = (_launch._SPLIT_MIN_BYTES - 1, 4)
    assert _launch.splits_to_fill(64, _launch._SHORT_RUN_SPLITS, 8, cuda, small) == 1  # launch-bound
    assert _launch.splits_to_fill(64, 4096, 8, cuda, small) == 17  # small, but each program would run long
    monkeypatch.setattr(backends, "workspace_bytes", 4 * partial + 1)
    assert _launch.splits_to_fill(64, 4096, 8, cuda, summed) == 4
    monkeypatch.setattr(backends, "workspace_bytes", 0)
    assert _launch.splits_to_fill(64, 4096, 8, cuda, summed) == 1
    assert _launch.splits_to_fill(64, 4096, 8, cuda) == 17
    assert _launch.splits_to_fill(64, 4096, 8, torch.device("cpu"), summed) == 1


def test_summed_splits_are_dropped_where_the_waves_tie(monkeypatch):
    """With two programs resident per SM (264 on 132 SMs), the forward keeps its d-splits only where
    they take fewer waves per unit of work: 256, 512 and 1024 programs run unsplit (1, 2 and 4
    waves either way), 96, 192, 320, 384 and 640 keep theirs; the transpose's splits (not summed)
    are unchanged. Weighed for the fewest waves (one-band folded forwards), each takes the count
    up to the fill rule's with the fewest waves per unit of work."""
    from sjlt.ops import _launch

    monkeypatch.setattr(_launch, "multiprocessor_count", lambda index: 132)
    cuda = torch.device("cuda", 0)
    summed = (2**30, 1024 * 1024 * 4)
    programs = [96, 192, 256, 320, 384, 512, 640, 1024]
    old = [_launch.splits_to_fill(p, 512, 8, cuda, summed) for p in programs]
    assert old == [11, 6, 5, 4, 3, 3, 2, 2]
    new = [_launch.splits_to_fill(p, 512, 8, cuda, summed, resident_per_sm=2) for p in programs]
    assert new == [11, 6, 1, 4, 3, 1, 2, 1]
    assert _launch.splits_to_fill(256, 512, 8, cuda, None, resident_per_sm=2) == 5
    programs = [96, 128, 192, 256, 320, 384, 512, 640, 1024]
    fewest = [_launch.splits_to_fill(p, 512, 8, cuda, summed, 2, fewest_waves=True) for p in programs]
    assert fewest == [11, 2, 4, 1, 4, 2, 1, 2, 1]  # e.g. 128 programs: 2 splits, 1 wave of half the work


def test_vector_stores_rule():
    """Vectorised output stores everywhere but in wide programs that write Y itself (not float32
    partials of splits or of a grouped launch)."""
    rule = windowed._vector_stores
    assert rule(64, writes_y=True) and rule(64, writes_y=False) and rule(16, writes_y=True)
    assert not rule(windowed._WIDE_ROWS, writes_y=True) and rule(windowed._WIDE_ROWS, writes_y=False)


@pytest.mark.parametrize(
    "wide,splits,grouped,vector",
    [(True, 1, False, False), (True, 2, False, True), (True, 1, True, True), (False, 1, False, True)],
)
def test_forward_stores_as_the_vector_stores_rule_says(kernel_device, rng, monkeypatch, wide, splits, grouped, vector):
    """The forward passes the rule's VECTOR_STORES to the tile kernel (element stores only where a
    wide program writes Y: one split, not a grouped launch), and both store paths give the
    reference's Y (bfloat16, k = 4096 with two bands; wide programs forced, as in a long run)."""
    import sjlt.kernels.sparse_jl_windowed as kernels

    monkeypatch.setattr(windowed, "_wide_rows", lambda dtype, n, pipelined, folded=False: wide)
    passed = []
    kernel = kernels.sparse_jl_windowed_forward_kernel

    class Recorded:
        def __getitem__(self, grid):
            launch = kernel[grid]

            def run(*args, **kwargs):
                passed.append(kwargs["VECTOR_STORES"])
                return launch(*args, **kwargs)

            return run

    monkeypatch.setattr(kernels, "sparse_jl_windowed_forward_kernel", Recorded())
    x = torch.randn(21, 512, generator=rng).to(BF16)
    want = reference.sparse_jl_forward(x.double(), 4096, seed=6, nnz=16)
    if grouped:  # two blocks of columns, one launch
        blocks = [(0, x[:, :200].to(kernel_device)), (200, x[:, 200:].to(kernel_device))]
        got = windowed.forward_blocks(blocks, 4096, *_key(6), 16, 0, Tiling(splits=splits))
    else:
        got = windowed.forward(x.to(kernel_device), 4096, *_key(6), 16, 0, Tiling(splits=splits))
    assert passed == [vector]
    assert _relative_error(got, want) <= TOLERANCE[BF16]


def test_split_partials_pad_their_rows_to_16_elements():
    """The forward's float32 partials start each row on a 64-byte boundary whatever k is, so that
    no two programs write parts of one 32-byte sector; Y itself (one split) is not padded."""
    from sjlt.ops import _launch

    x = torch.empty(0, dtype=torch.bfloat16)
    for k, padded in ((2500, 2512), (2512, 2512), (17, 32)):
        assert _launch.padded_row(k) == padded
        out, stride_split = _launch.forward_output(3, k, 2, x)
        assert out.shape == (2, 3, k) and out.dtype == torch.float32
        assert out.stride() == (3 * padded, padded, 1) and stride_split == 3 * padded
    y, stride_split = _launch.forward_output(3, 2500, 1, x)
    assert y.shape == (3, 2500) and y.is_contiguous() and y.dtype == torch.bfloat16 and stride_split == 0


def test_forward_splits_budget_the_padded_partials(monkeypatch):
    """The forward's splits count each float32 partial at its padded rows (k = 17 -> 32 elements),
    so that all of them stay within sjlt.backends.workspace_bytes."""
    from sjlt.ops import _launch

    summed = []
    fill = _launch.splits_to_fill
    monkeypatch.setattr(windowed, "splits_to_fill", lambda *args: summed.append(args[4]) or fill(*args))
    x = torch.empty(16, 1024)
    windowed._grid(x, 1, 64, 1, out_features=17)
    assert summed == [(16 * 1024 * 4, 16 * _launch.padded_row(17) * 4)] and _launch.padded_row(17) == 32


def test_folded_wide_forward_splits(kernel_device, rng, monkeypatch):
    """How the wide programs' grid weighs its splits, as (programs per SM, resident per SM, fewest
    waves, partial cost): a two-band fold (k = 4000) by their partials' cost, a one-band fold
    (k = 1000) by the fewest waves of 2 resident, the lattice (k = 4096) by the wave rule. The wide
    rows are forced; each forward's grids are recorded after the first."""
    monkeypatch.setattr(windowed, "_wide_rows", lambda dtype, n, pipelined, folded=False: True)
    asked = []
    grid = windowed._grid

    def recorded(*args, fewest_waves=False, partial_cost=False):
        asked[-1].append((args[9], args[10], fewest_waves, partial_cost))
        return grid(*args, fewest_waves=fewest_waves, partial_cost=partial_cost)

    monkeypatch.setattr(windowed, "_grid", recorded)
    x = torch.randn(21, 256, generator=rng).to(BF16).to(kernel_device)
    for k in (4000, 1000, 4096):
        asked.append([])
        y = windowed.forward(x, k, *_key(5), spec.default_nnz(k), 0)
        assert y.shape == (21, k)
    resident = windowed._TILE_PROGRAMS_RESIDENT_PER_SM
    assert [grids[1] for grids in asked] == [
        (8, None, False, True),
        (8, resident, True, False),
        (8, resident, False, False),
    ]


def test_float32_forward_splits_by_the_fewest_waves(kernel_device, rng, monkeypatch):
    """The tile forward weighs float32 splits by the fewest waves of 2 resident programs per SM (the
    half types' 64-row programs by the fill rule alone): 256 x (2**24 - 1) -> 2048 ran 1.10x faster
    at 4 splits than at the fill rule's 17 on an H200."""
    asked = []
    grid = windowed._grid

    def recorded(*args, fewest_waves=False, partial_cost=False):
        asked.append((args[10], fewest_waves))
        return grid(*args, fewest_waves=fewest_waves, partial_cost=partial_cost)

    monkeypatch.setattr(windowed, "_grid", recorded)
    for dtype in (F32, BF16):
        x = torch.randn(40, 256, generator=rng).to(dtype).to(kernel_device)
        assert windowed.forward(x, 256, *_key(5), 8, 0).shape == (40, 256)
    assert asked == [(windowed._TILE_PROGRAMS_RESIDENT_PER_SM, True), (None, False)]


def test_splits_weighed_against_their_partials(monkeypatch):
    """``partial_cost``: SM-waves of the work, split launches 15% slower plus their partials' bytes
    (H100, two-band folds): 1024 x 2**20 -> 2100 (144 programs) 8 splits, 2048 x 2**18 (288) 4,
    4096 x 2**17 (576) one; small partials against a large input favour the split that fills whole
    waves. A choice under 4 splits falls back to one program per SM."""
    from sjlt.ops import _launch

    monkeypatch.setattr(_launch, "multiprocessor_count", lambda index: 132)
    cuda = torch.device("cuda", 0)

    def splits(programs, n, d):
        return _launch.splits_to_fill(programs, 512, 8, cuda, (n * d * 2, n * 2112 * 4), partial_cost=True)

    assert [splits(144, 1024, 2**20), splits(288, 2048, 2**18), splits(576, 4096, 2**17)] == [8, 4, 1]
    # where the cost picks fewer than COSTED_MIN_SPLITS, one program per SM: 112 programs -> 2
    assert splits(192, 1024, 2**20) == 1 and splits(112, 512, 2**21) == 2 and _launch.COSTED_MIN_SPLITS == 4
    assert _launch._split_cost(132, 1, 132, 2**30, 2**20) == 1.0
    assert _launch._split_cost(66, 2, 132, 2**30, 2**20) == pytest.approx(_launch.SPLIT_KERNEL_COST + 4 / 1024)


@pytest.mark.parametrize("name", ["workspace_bytes", "dense_cache_bytes"])
@pytest.mark.parametrize("value,error", [(-1, ValueError), (1.5e8, TypeError), (True, TypeError), ("64MB", TypeError)])
def test_bad_byte_budgets_are_clear_errors(monkeypatch, name, value, error):
    """A budget set by hand to a non-int or a negative number fails where the engine reads it,
    naming the setting, before anything is launched or cached."""
    from sjlt import backends
    from sjlt.ops import _launch, choice

    monkeypatch.setattr(_launch, "multiprocessor_count", lambda index: 132)
    monkeypatch.setattr(backends, name, value)
    with pytest.raises(error, match=f"sjlt.backends.{name}"):
        if name == "workspace_bytes":
            _launch.splits_to_fill(64, 4096, 8, torch.device("cuda", 0), (2**31, 2**19))
        else:
            choice._rule(_FakeCuda(2**20, 1024, torch.bfloat16), 1024, 256)
    monkeypatch.setattr(backends, name, 0)  # 0 is valid: no workspace, no dense cache
    assert backends.byte_budget(name) == 0


def test_forward_steps_rule():
    """Half types take four groups per dot, pipelined from 128 groups per program, or at any run
    length where rows fold; float32 two unpipelined one-group dots per step below 16 groups, then
    pipelined two-group steps (the H100 sweep in benchmarks/RESULTS.md; folds: the H200 in
    benchmarks/NOTES.md)."""
    rule = windowed._forward_steps
    assert rule(torch.bfloat16, 127) == (4, 1, 1, False) and rule(torch.float16, 128) == (4, 1, 1, True)
    assert rule(torch.bfloat16, 1, folded=True) == rule(torch.float16, 127, folded=True) == (4, 1, 1, True)
    assert rule(torch.float32, 15, folded=True) == (1, 2, 3, False)
    assert rule(torch.float32, 15) == (1, 2, 3, False) and rule(torch.float32, 16) == (2, 1, 1, True)


def test_partial_first_rule():
    """Band launches after the first read the earlier bands' sums at the start of each step in float32
    only (the H100 comparison in benchmarks/RESULTS.md)."""
    assert windowed._partial_first(torch.float32)
    assert not windowed._partial_first(torch.bfloat16) and not windowed._partial_first(torch.float16)


@pytest.mark.parametrize(*grid({"dtype": [F32, BF16]}, fast=[{"dtype": BF16}]))
def test_transposes_of_shared_sectors_cut_long_runs(kernel_device, rng, dtype):
    """A one-band transpose whose rows of Z are off 16 bytes cuts runs of over 64 groups into runs
    of 16 (``_cuts_shared_sector_runs``): on a GPU the same bits as the uncut launch, and the
    reference's values. k = 512 (nnz 8) has 4 windows, so d = 4417 makes 70 groups per program; odd
    offset. The cut moves groups to other places in a step's stacked tile; the interpreter's numpy
    matmul may round a row differently by its place (float32: 6e-8 at 5 of 22085 values for one
    seed), so there the two may differ by a rounding of the terms' sums: 4 ulp of the largest value."""
    n, d, k, nnz, offset, seed = 5, 4417, 512, 8, 2**33 + 3, 2**61 + 5
    assert spec.default_nnz(k) == nnz and spec.windows_per_block(k, nnz) == 4
    z = torch.empty(n, d, dtype=dtype)
    assert windowed._cuts_shared_sector_runs(
        windowed._z_row_multiple(d, offset, z, 0, z, 0), z.element_size(), nnz, 4, 70
    )
    y = torch.randn(n, k, generator=rng).to(dtype)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    got = windowed.transpose(y.to(kernel_device), d, *_key(seed), nnz, offset)
    uncut = windowed.transpose(y.to(kernel_device), d, *_key(seed), nnz, offset, Tiling(splits=1))
    assert _relative_error(got, want) <= TOLERANCE[dtype]
    if kernel_device == "cuda":
        assert torch.equal(got, uncut)
    else:
        ulp = torch.finfo(dtype).eps * uncut.float().abs().max().item()
        torch.testing.assert_close(got.float(), uncut.float(), rtol=0, atol=4 * ulp)


def test_shared_sector_rule():
    """Runs are cut with one band, at least 4 windows, over 64 groups per program, and Z's chunks
    off 16 bytes: rows (or their stride, offset or first column) off 4 float32 or 8 half-type
    elements."""

    def rule(width, offset, z, out_col0, nnz, windows, groups):
        multiple = windowed._z_row_multiple(width, offset, z, out_col0, z, out_col0)
        return windowed._cuts_shared_sector_runs(multiple, z.element_size(), nnz, windows, groups)

    f32, b16 = torch.empty(4, 16383), torch.empty(4, 16383, dtype=torch.bfloat16)
    assert rule(16383, 0, f32, 0, 8, 8, 128) and rule(16383, 0, b16, 0, 8, 4, 128)
    assert not rule(16383, 0, f32, 0, 8, 8, 64) and not rule(16383, 0, f32, 0, 16, 8, 128)  # short runs, two bands
    assert not rule(16383, 0, b16, 0, 8, 2, 128)  # two windows
    rows = torch.empty(4, 16392)
    assert not rule(16384, 0, rows, 0, 8, 8, 128) and not rule(16384, 4, rows, 0, 8, 8, 128)  # on 16 bytes
    assert not rule(16392, 0, rows.bfloat16(), 0, 8, 8, 128) and rule(16384, 4, rows.bfloat16(), 0, 8, 8, 128)
    assert rule(16384, 2, rows, 0, 8, 8, 128) and rule(16384, 0, rows, 2, 8, 8, 128)


@pytest.mark.parametrize(
    *grid(
        {
            "dtype": [F32, BF16],
            "k,d,offset": [
                (256, 4095, 2**33 + 3),
                (384, 2083, 2**33 + 3),
                (512, 4099, 2**33 + 3),
                (1000, 2101, 2**33 + 3),
                (1024, 4098, 2**33 + 2),
                (512, 4100, 2**33 + 4),
            ],
            "pipelined": [None, True, False],
            "steps": [None, (2, False)],
        },
        fast=[
            {"dtype": F32, "k,d,offset": (256, 4095, 2**33 + 3), "pipelined": None, "steps": None},
            {"dtype": BF16, "k,d,offset": (384, 2083, 2**33 + 3), "pipelined": True, "steps": None},
            {"dtype": BF16, "k,d,offset": (256, 4095, 2**33 + 3), "pipelined": False, "steps": (2, False)},
            {"dtype": F32, "k,d,offset": (512, 4099, 2**33 + 3), "pipelined": None, "steps": None},
            {"dtype": F32, "k,d,offset": (1024, 4098, 2**33 + 2), "pipelined": None, "steps": None},
            {"dtype": BF16, "k,d,offset": (512, 4100, 2**33 + 4), "pipelined": None, "steps": None},
        ],
    )
)
def test_twin_window_transposes_match_reference(kernel_device, rng, dtype, k, d, offset, pipelined, steps):
    """Programs over windows 2a and 2a + 1 (TWINS) write every column once, with the reference's
    values, and the bits of one window per program over the same groups. k = 256 has two windows
    (the pair is the whole group), k = 384 three (the last program's twin lies past the last window
    and stores nothing), k = 512 four, k = 1000 eight with folded rows, k = 1024 eight; the default
    twins them all where runs are long in 64-row programs. Rows on 8 bytes or off them store each
    pair's two chunks at once (JOINED_PAIRS), but not with z untransposed (``steps`` (2, False));
    offsets past 2**33, odd, or even with rows on 8 bytes in float32 and 4 in bfloat16 (k = 1024),
    on 16 and 8 (k = 512), where the stores are vectors. Outputs start as NaN (``poison_outputs``)."""
    n, seed = 5, 2**61 + 5
    nnz = spec.default_nnz(k)
    z = torch.empty(n, d, dtype=dtype)
    windows = spec.windows_per_block(k, nnz)
    row_multiple = windowed._z_row_multiple(d, offset, z, 0, z, 0)
    assert windowed._twins_windows(row_multiple, z.element_size(), nnz, windows, 257, 64)
    y = torch.randn(n, k, generator=rng).to(dtype)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    twinned = windowed.transpose(
        y.to(kernel_device), d, *_key(seed), nnz, offset, Tiling(twins=True, pipelined=pipelined, steps=steps)
    )
    assert _relative_error(twinned, want) <= TOLERANCE[dtype]
    # bitwise with the same groups per program: the interpreter's float32 matmul may round a chunk
    # differently in another position of a stacked dot (the GPU's tensor cores do not)
    twinned, single = (
        windowed.transpose(
            y.to(kernel_device),
            d,
            *_key(seed),
            nnz,
            offset,
            Tiling(splits=2, twins=twins, pipelined=pipelined, steps=steps),
        )
        for twins in (True, False)
    )
    assert torch.equal(twinned, single)


@pytest.mark.parametrize(
    *grid(
        {
            "dtype": [F32, BF16, F16],
            "n,d,offset,splits": [
                (70, 4095, 2**33 + 3, 2),
                (33, 2083, 0, None),
                (19, 8190, 2**33 + 40, 3),
            ],
        },
        fast=[
            {"dtype": F32, "n,d,offset,splits": (70, 4095, 2**33 + 3, 2)},
            {"dtype": BF16, "n,d,offset,splits": (19, 8190, 2**33 + 40, 3)},
            {"dtype": F16, "n,d,offset,splits": (33, 2083, 0, None)},
        ],
    )
)
def test_whole_group_transposes_match_reference(kernel_device, rng, dtype, n, d, offset, splits):
    """Two windows per block: twins own whole groups and store each group's 32 columns at once
    (WHOLE_GROUPS). Rows of every residue past 16 bytes (n over a 64-row tile, d odd or on 4 bytes),
    a column offset that cuts the first group (odd, and 40 past 2**33: 8 past a group of 32), a
    ragged last group, and runs cut mid-row by splits; the bits equal one window per program's over
    the same groups. Outputs start as NaN (``poison_outputs``), so a column left unwritten fails."""
    seed = 2**40 + 11
    nnz = spec.default_nnz(256)
    assert spec.windows_per_block(256, nnz) == 2
    y = torch.randn(n, 256, generator=rng).to(dtype)
    want = reference.sparse_jl_transpose(y.double(), d, seed=seed, nnz=nnz, column_offset=offset)
    twinned, single = (
        windowed.transpose(
            y.to(kernel_device), d, *_key(seed), nnz, offset, Tiling(splits=splits, twins=twins, steps=(4, True))
        )
        for twins in (True, False)
    )
    assert _relative_error(twinned, want) <= TOLERANCE[dtype]
    assert torch.equal(twinned, single)


def test_twin_windows_rule():
    """Twin windows with one band, untwinned runs of over 64 groups, Z's chunks off 32-byte sectors,
    and either two windows (float32, or half types on rows off 8 bytes), three or more on rows on 8
    bytes or off them in programs of 64 rows, or float32 rows on 16 bytes; a Tiling overrides where
    a block has two windows or more. Twins join each pair's chunks in one store with two windows or
    rows on 8 bytes or off them."""

    def rule(width, dtype, windows, groups, nnz=8, block_m=64):
        z = torch.empty(4, width, dtype=dtype)
        multiple = windowed._z_row_multiple(width, 0, z, 0, z, 0)
        return windowed._twins_windows(multiple, z.element_size(), nnz, windows, groups, block_m)

    assert rule(4095, F32, 2, 128) and rule(4094, F32, 2, 65) and rule(4092, F32, 2, 512)
    assert rule(4095, BF16, 2, 128) and rule(4094, BF16, 2, 128)
    assert not rule(4092, BF16, 2, 128) and not rule(4088, BF16, 2, 128)  # half-type rows on 8 or 16 bytes
    assert not rule(4096, F32, 2, 128) and not rule(4088, F32, 2, 128)  # chunks on 32 bytes
    assert not rule(4095, F32, 2, 64)  # short runs
    assert rule(16380, F32, 8, 128) and rule(16380, F32, 3, 128)  # float32 rows on 16 bytes
    assert not rule(16376, BF16, 8, 128) and not rule(16376, BF16, 4, 128)  # half types on 16 bytes
    assert rule(16383, F32, 8, 128) and rule(16383, BF16, 15, 65) and rule(16383, F32, 3, 65)  # rows off 8 bytes
    assert rule(16382, F32, 4, 128) and rule(16380, BF16, 8, 128) and rule(16380, BF16, 3, 128)  # on 8 bytes
    assert not rule(16383, BF16, 4, 64) and not rule(16382, F32, 8, 64)  # short runs
    assert not rule(16383, F32, 8, 128, block_m=32) and not rule(16380, BF16, 3, 128, block_m=16)  # few rows
    assert rule(4095, BF16, 2, 128, block_m=16) and rule(16380, F32, 8, 128, block_m=32)
    assert windowed._joins_twin_pairs(2, 16) and windowed._joins_twin_pairs(8, 4) and windowed._joins_twin_pairs(3, 2)
    assert windowed._joins_twin_pairs(4, 8) and not windowed._joins_twin_pairs(3, 16)
    assert not rule(4095, F32, 2, 128, nnz=16) and not rule(4095, F32, 1, 128)  # two bands, one window
    assert windowed._twins_windows(1, 4, 8, 8, 1, 16, Tiling(twins=True))
    assert not windowed._twins_windows(1, 4, 8, 2, 128, 64, Tiling(twins=False))
    assert not windowed._twins_windows(1, 4, 16, 8, 128, 64, Tiling(twins=True))


def test_unfolds_y_rule():
    """y is unfolded where S folds rows (the H100 and H200 measurements in benchmarks/NOTES.md). A half type:
    with two bands or more where Z has 2x y's columns, with one band where it has 8x and y at least
    4096 rows. float32 with y's row stride off 16: with two bands where Z has 2x y's columns but
    under the 16x from which y is padded instead (at any growth with up to 32 rows), with more
    where Z has at least y's columns."""
    rule = windowed._unfolds_y
    y16, y32 = torch.empty(4, 2500, dtype=torch.bfloat16), torch.empty(4, 2500)
    assert rule(y16, 5000, 2, 16) and rule(y16.half(), 5000, 2, 16) and rule(y16, 5000, 4, 32)
    assert not rule(y16, 4999, 2, 16) and not rule(y32, 4999, 2, 16)
    one_band = torch.empty(4096, 1000, dtype=torch.bfloat16)
    assert rule(one_band, 8000, 1, 8) and not rule(one_band, 7999, 1, 8)
    assert not rule(one_band[:4095], 8000, 1, 8) and not rule(one_band.float(), 8000, 1, 8)
    assert not rule(torch.empty(4, 2560, dtype=torch.bfloat16), 10240, 2, 16)  # the lattice

    def rows(n, k, stride=None):  # the rule reads shapes and strides only
        return torch.empty_strided((n, k), (stride or k, 1), device="meta")

    assert rule(rows(4, 2500), 5000, 2, 16) and rule(rows(65536, 2500), 39999, 2, 16)
    assert not rule(rows(4, 2500), 4999, 2, 16) and not rule(rows(33, 2500), 40000, 2, 16)  # padded
    assert rule(rows(32, 2500), 40000, 2, 16) and rule(rows(1, 2500), 2**24, 2, 16)  # few rows
    assert not rule(rows(65536, 2500, stride=2512), 16384, 2, 16)  # rows on 16
    assert not rule(rows(65536, 6000), 16384, 2, 16)  # k on 16
    assert not rule(rows(65536, 1000), 16384, 1, 8)  # one band
    assert rule(rows(4, 10443), 10443, 4, 32) and rule(rows(65536, 9268), 16384, 4, 31)
    assert not rule(rows(4, 10443), 10442, 4, 32) and not rule(rows(262144, 9268), 4096, 4, 31)


def test_pads_y_rule():
    """y is padded where its row stride is off 16, Z has 16x its columns, and it is a half type or
    S has two bands (the H100 measurements in benchmarks/NOTES.md)."""
    rule = windowed._pads_y
    y32, y16 = torch.empty(4, 2500), torch.empty(4, 2500, dtype=torch.bfloat16)
    assert rule(y32, 40000, 2) and rule(y16, 40000, 1) and rule(y16, 40000, 2)
    assert not rule(y32, 40000, 1) and not rule(y16, 39999, 2)
    assert not rule(torch.empty(4, 2512, dtype=torch.bfloat16), 40192, 2)
    assert rule(torch.empty(4, 2512, dtype=torch.bfloat16)[:, :2500], 40000, 2) is False  # stride 2512


def test_transpose_pipelined_rule():
    """One-band launches pipelined but with twin windows; launches per band never; the two-band
    launch in float32 with 64-row programs only."""
    rule = windowed._transpose_pipelined
    assert rule(torch.bfloat16, 1, False, 32) and rule(torch.float32, 1, False, 64)
    assert not rule(torch.float32, 2, False, 64) and not rule(torch.float32, 3, False, 64)
    assert rule(torch.float32, 2, True, 64)
    assert not rule(torch.float32, 2, True, 32) and not rule(torch.bfloat16, 2, True, 64)
    assert not rule(torch.float32, 1, False, 64, twins=True) and not rule(torch.bfloat16, 1, False, 64, twins=True)


def test_promotion_rule():
    """Exact float32 adds runs of PROMOTE_EVERY steps apart once a program has more steps than that;
    other modes and half types keep one accumulator; a Tiling overrides."""
    from sjlt.ops._launch import PROMOTE_EVERY, promote_every

    assert promote_every(3, PROMOTE_EVERY, Tiling()) == 0
    assert promote_every(3, PROMOTE_EVERY + 1, Tiling()) == PROMOTE_EVERY
    assert promote_every(2, 10**6, Tiling()) == promote_every(0, 10**6, Tiling()) == 0
    assert promote_every(3, 10**6, Tiling(promote_every=0)) == 0
    assert promote_every(0, 1, Tiling(promote_every=3)) == 3


class _FakeCuda:
    """Shape, dtype and a CUDA device: all the rule reads of an input."""

    def __init__(self, n, d, dtype, row_stride=None, start=0):
        self.shape, self.dtype, self.device = (n, d), dtype, torch.device("cuda", 0)
        self.row_stride, self.start = d if row_stride is None else row_stride, start

    def data_ptr(self):
        return 2**20 + self.start

    def stride(self, dim):
        return (self.row_stride, 1)[dim]

    def numel(self):
        return self.shape[0] * self.shape[1]

    def element_size(self):
        return torch.empty(0, dtype=self.dtype).element_size()


def test_benchmark_flag_times_once_and_deterministic_overrides_it(monkeypatch):
    from sjlt import backends
    from sjlt.ops import choice

    timed = []
    monkeypatch.setattr(choice, "_time_and_pick", lambda *args: timed.append(args) or choice.KERNEL)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    x = _FakeCuda(2**20, 1024, torch.bfloat16)
    choice.clear_benchmarks()
    monkeypatch.setattr(backends, "benchmark", True)
    assert choice.algorithm(x, 1024, 256, 8, 1, 2, 0) == choice.DENSE and not timed  # deterministic wins
    monkeypatch.setattr(backends, "deterministic", False)
    assert choice.algorithm(x, 1024, 256, 8, 1, 2, 0) == choice.KERNEL and len(timed) == 1  # timed
    assert choice.algorithm(x, 1024, 256, 8, 1, 2, 0) == choice.KERNEL and len(timed) == 1  # cached
    assert choice.algorithm(x, 1024, 256, 8, 1, 2, 0, transpose=True) == choice.KERNEL and len(timed) == 2
    monkeypatch.setattr(backends, "benchmark", False)
    assert choice.algorithm(x, 1024, 256, 8, 1, 2, 0) == choice.DENSE  # back to the rule
    choice.clear_benchmarks()


# torch.get_float32_matmul_precision() -> the stated bound on max |kernel - float64| / max |float64|
# for float32 inputs: 3, 2 and 1 bfloat16 passes carry 24, 16 and 8 mantissa bits.
PRECISION_TOLERANCE = {"highest": 1e-5, "high": 1e-4, "medium": 1e-2}


@pytest.mark.parametrize("k, nnz", [(256, 8), (40, 3)], ids=["windowed", "classic"])
def test_float32_precision_modes(k, nnz, kernel_device, rng, monkeypatch):
    x = torch.randn(70, 200, generator=rng, dtype=torch.float64)
    y = torch.randn(70, k, generator=rng, dtype=torch.float64)
    want = reference.sparse_jl_forward(x, k, seed=5, nnz=nnz)
    want_t = reference.sparse_jl_transpose(y, 200, seed=5, nnz=nnz)
    key0, key1 = spec.philox_key(5)
    errors = {}
    previous = torch.get_float32_matmul_precision()
    try:
        for mode, tolerance in PRECISION_TOLERANCE.items():
            torch.set_float32_matmul_precision(mode)
            got = layouts.triton_forward(x.float().to(kernel_device), k, key0, key1, nnz, 0).double().cpu()
            got_t = layouts.triton_transpose(y.float().to(kernel_device), 200, key0, key1, nnz, 0).double().cpu()
            errors[mode] = max(
                float((got - want).abs().max() / want.abs().max()),
                float((got_t - want_t).abs().max() / want_t.abs().max()),
            )
            assert errors[mode] <= tolerance, (mode, errors)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert errors["medium"] > 10 * errors["highest"], errors  # the modes really change the arithmetic


def test_few_rows_stay_exact_in_every_precision(kernel_device, rng, monkeypatch):
    """Few rows with long runs take the CUDA-core forward, exact in float32 whatever the precision
    (faster there than the tile kernel's fewer passes, ``windowed._shuffles``); its run-length
    threshold lowered so that a small input has long runs."""
    monkeypatch.setattr(windowed, "_SHUFFLE_RUN_GROUPS", 1)
    x = torch.randn(16, 300, generator=rng, dtype=torch.float64)
    want = reference.sparse_jl_forward(x, 256, seed=5, nnz=8)
    key0, key1 = spec.philox_key(5)
    previous = torch.get_float32_matmul_precision()
    try:
        for mode in ("high", "medium"):
            torch.set_float32_matmul_precision(mode)
            got = layouts.triton_forward(x.float().to(kernel_device), 256, key0, key1, 8, 0).double().cpu()
            assert float((got - want).abs().max() / want.abs().max()) <= PRECISION_TOLERANCE["highest"], mode
    finally:
        torch.set_float32_matmul_precision(previous)


# Grouped launches (windowed.forward_blocks): (n, k, nnz, block widths, column offset, seed). Blocks
# sit side by side from column 7, with a gap of three columns before the last.
BLOCK_SHAPES = [
    (3, 64, 4, (43, 320, 1, 264), 5, 11),  # A = 1, a one-column block
    (5, 100, 2, (135, 320, 244), 2**33 + 7, 2**64 - 1),  # folded rows, offset above 2**32
    (2, 300, 16, (400, 16, 33, 512), 3, 21),  # two bands, folded rows
    (40, 256, 4, (700, 5), 2**31 - 3, 99),  # two row tiles
    (4, 1000, 8, (300, 17, 1024), 2**40 + 3, 5),  # a round k off the lattice: A = 8, folded rows
    (3, 100, 2, (700, 900, 45), 2**33 + 7, 3),  # folded rows, d >= 12 k': folded after the launch
]


def _blocks_side_by_side(rng, n, widths, dtype, device, aligned=False):
    """(blocks, the (n, end) matrix they are columns of, zeros elsewhere): each block a slice of a
    wider buffer (row stride > d, unaligned start) unless ``aligned``."""
    blocks, first = [], 7 if not aligned else 16
    full = torch.zeros(n, first + sum(widths) + 3, dtype=torch.float64)
    for index, width in enumerate(widths):
        first += 3 if index == len(widths) - 1 and not aligned else 0
        start = 0 if aligned else int(torch.randint(0, 3, (), generator=rng))
        buffer = torch.randn(n, width + (0 if aligned else 5), generator=rng).to(dtype)
        block = buffer[:, start : start + width]
        full[:, first : first + width] = block.double()
        blocks.append((first, block.to(device) if aligned else buffer.to(device)[:, start : start + width]))
        first += width
    return blocks, full


@pytest.mark.parametrize(
    *grid(
        {
            "n,k,nnz,widths,offset,seed": BLOCK_SHAPES,
            "dtype,shuffle,splits": [
                (F32, None, None),
                (F32, False, 3),
                (F32, True, 4),
                (BF16, None, None),
                (BF16, False, 3),
                (BF16, True, 2),
                (F16, False, 2),
            ],
        },
        fast=[{"dtype,shuffle,splits": (BF16, False, 3)}]
        + [{"dtype,shuffle,splits": (F32, True, 4), "n,k,nnz,widths,offset,seed": BLOCK_SHAPES[i]} for i in (0, 1, 5)],
    )
)
def test_grouped_forward_matches_reference(kernel_device, rng, dtype, shuffle, splits, n, k, nnz, widths, offset, seed):
    """One launch over ragged blocks at their column offsets equals the projection of the matrix
    they are columns of, split runs crossing block boundaries included, on either kernel."""
    blocks, full = _blocks_side_by_side(rng, n, widths, dtype, kernel_device)
    want = reference.sparse_jl_forward(full, k, seed=seed, nnz=nnz, column_offset=offset)
    tiling = Tiling(splits=splits, shuffle=shuffle)
    got = windowed.forward_blocks(blocks, k, *_key(seed), nnz, offset, tiling)
    assert got.dtype == torch.float32 and got.shape == (n, k)
    assert _relative_error(got, want) <= TOLERANCE[dtype]


def test_grouped_forward_of_few_rows_folds_after_the_launch(kernel_device, rng, monkeypatch):
    """A grouped launch of few rows over 12 k' columns or more runs at the lattice k' and folds after
    (``_folds_after``), with the reference's result; fewer columns fold in the kernel."""
    folds = []
    fold_after = windowed._fold_after
    monkeypatch.setattr(
        windowed, "_fold_after", lambda y, k, nnz, out: folds.append(y.shape[1]) or fold_after(y, k, nnz, out)
    )
    for widths, after in (((700, 900, 45), True), ((700, 700, 45), False)):
        blocks, full = _blocks_side_by_side(rng, 3, widths, F32, kernel_device)
        assert windowed._folds_after(3, sum(widths) + 3, F32, 100, 2) is after
        got = windowed.forward_blocks(blocks, 100, *_key(3), 2, 5, Tiling())
        want = reference.sparse_jl_forward(full, 100, seed=3, nnz=2, column_offset=5)
        assert _relative_error(got, want) <= TOLERANCE[F32]
        assert folds == ([128] if after else []) and got.shape == (3, 100)
        folds.clear()


@pytest.mark.parametrize("shuffle", [False, pytest.param(True, marks=SLOW)])
def test_grouped_forward_of_aligned_blocks(kernel_device, rng, shuffle):
    """Blocks whose offsets, widths, column offsets and row strides are multiples of 16 take the
    variant that tells the compiler so, with the same result."""
    blocks, full = _blocks_side_by_side(rng, 6, (32, 1024, 16, 512), F32, kernel_device, aligned=True)
    grouped = windowed.GroupedBlocks(blocks, 32, spec.windows_per_block(1024, 8))
    x = blocks[0][1]
    assert grouped.segments(1, grouped.offsets(blocks, x), x.device).multiple == 16
    want = reference.sparse_jl_forward(full, 1024, seed=3, nnz=8, column_offset=32)
    got = windowed.forward_blocks(blocks, 1024, *_key(3), 8, 32, Tiling(splits=3, shuffle=shuffle))
    assert _relative_error(got, want) <= TOLERANCE[F32]


def _segments_oracle(spans, per_split):
    """``windowed._segments``'s rows and split starts, one piece at a time."""
    rows, starts, filled = [], [0], 0
    for offset, width, column, stride, g_begin, g_end in spans.tolist():
        while g_begin < g_end:
            take = min(g_end - g_begin, per_split - filled)
            rows.append([offset, width, column, stride, g_begin, g_begin + take])
            g_begin, filled = g_begin + take, filled + take
            if filled == per_split:
                starts.append(len(rows))
                filled = 0
    return rows, starts + ([len(rows)] if filled else [])


@pytest.mark.parametrize("seed", range(6))
def test_grouped_segments_cut_the_spans_at_every_split(seed):
    """The vectorised segment table equals the piece-by-piece cut, for runs of spans of 1-40 groups
    (gaps between them included) and splits shorter, longer and aligned with them."""
    gen = np.random.default_rng(seed)
    count = int(gen.integers(1, 30))
    lengths = gen.integers(1, 41, count)
    g_begin = np.cumsum(gen.integers(0, 3, count)) + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    values = gen.integers(0, 1 << 40, (count, 4))
    spans = np.column_stack([values, g_begin, g_begin + lengths]).astype(np.int64)
    for per_split in {1, 3, int(lengths[0]), 16, int(lengths.sum()), int(lengths.sum()) + 5}:
        got_rows, got_starts = windowed._cut_spans(spans, per_split)
        rows, starts = _segments_oracle(spans, per_split)
        assert got_rows.tolist() == rows, f"seed={seed}, per_split={per_split}"
        assert got_starts.tolist() == starts, f"seed={seed}, per_split={per_split}"


@pytest.mark.parametrize(
    "shape,strides,spans",
    [
        ((4, 3, 5), (15, 5, 1), ([0], 15)),  # contiguous: one span
        ((4, 6, 5), (5, 20, 1), ([0, 20, 40, 60, 80, 100], 5)),  # vmap's embedding gradient
        ((4, 3, 2, 8), (60, 20, 10, 1), ([0, 10, 20, 30, 40, 50], 8)),  # tails sliced from wider rows
        ((4, 2, 1, 8), (99, 40, 7, 1), ([0, 40], 8)),  # a dimension of one with any stride
        ((4, 1, 8), (8, 3, 1), ([0], 8)),
        ((4, 7), (50, 1), ([0], 7)),  # rows of a wider matrix
        ((4, 3, 5), (15, 1, 3), None),  # strided last dimension
        ((4, 4097, 2), (2, 8, 1), None),  # more spans than one launch should take
    ],
)
def test_block_spans(shape, strides, spans):
    block = torch.empty(0).new_empty(1 << 16).as_strided(shape, strides)
    got = windowed.block_spans(block)
    assert (got if got is None else (got[0].tolist(), got[1])) == spans
    assert windowed.joins_grouped_launch(block) is (spans is not None)


def test_grouped_blocks_off_their_elements_are_refused():
    """A block whose data starts between two of the first block's elements (a view reinterpreted
    at an odd byte offset) cannot be an element offset of the launch: a clear error, no launch."""
    memory = bytearray(4 * 96)
    first = torch.frombuffer(memory, dtype=torch.float32, count=32).view(2, 16)
    odd = torch.frombuffer(memory, dtype=torch.float32, offset=130, count=32).view(2, 16)
    with pytest.raises(ValueError, match="2 bytes off its torch.float32 elements.*block.clone"):
        windowed.GroupedBlocks([(0, first), (16, odd)], 0, 2).offsets([(0, first), (16, odd)], first)
