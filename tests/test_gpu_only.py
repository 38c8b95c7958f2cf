"""Properties only a real GPU can show: no host syncs, CUDA-graph capture, inductor, > 2**31 elements.

Skipped on CPU machines (CI); run on the GPU machine with `make gpu-test` (see README).
"""

import pytest
import torch

import sjlt
from sjlt import functional as F
from sjlt import reference
from sjlt.ops import windowed
from sjlt.ops._launch import Tiling

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_no_hidden_host_syncs():
    x = torch.randn(300, 1000, device="cuda", requires_grad=True)
    F.sparse_jl(x, 128, seed=1)  # compile outside the checked region
    F.seeded_dropout(x, 0.2, seed=1)
    seeded, drawn = sjlt.SeededDropout(0.2, seed=3).cuda(), sjlt.SeededDropout(0.2).cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y = F.sparse_jl(x, 128, seed=1)
        z = F.seeded_dropout(y, 0.2, seed=2)
        (z.sum() + seeded(y).sum() + drawn(y).sum()).backward()
        F.sparse_jl(torch.randn(8, 2**20, device="cuda"), 256, seed=3)  # the split-d path
    finally:
        torch.cuda.set_sync_debug_mode(0)


def test_cuda_graph_with_fixed_int_seeds_replays_those_seeds():
    """An int seed names one matrix and one mask: replays reproduce the eager result. (Modules
    advance their seed on the device instead: see test_torch_integration.py.)"""
    x = torch.randn(64, 512, device="cuda")
    eager = F.seeded_dropout(F.sparse_jl(x, 64, seed=4), 0.3, seed=5)
    static_in = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        F.seeded_dropout(F.sparse_jl(static_in, 64, seed=4), 0.3, seed=5)  # warm up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = F.seeded_dropout(F.sparse_jl(static_in, 64, seed=4), 0.3, seed=5)
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, eager)


def test_inductor_compile_fullgraph():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), sjlt.SparseJL(256, 32, seed=3), torch.nn.ReLU()).cuda()
    x = torch.randn(16, 64, device="cuda")
    compiled = torch.compile(model, fullgraph=True)
    assert torch.allclose(compiled(x), model(x), atol=1e-5)
    fn = torch.compile(lambda t: F.seeded_dropout(t, 0.5, seed=9), fullgraph=True)
    assert torch.equal(fn(x), F.seeded_dropout(x, 0.5, seed=9))


def test_sparse_jl_beyond_2_31_elements():
    n, d, k = 2**21 + 3, 1024, 64
    x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
    y = F.sparse_jl(x, k, seed=6)
    rows = torch.tensor([0, n // 2, n - 1], device="cuda")
    nnz = sjlt.spec.default_nnz(k)
    want = reference.sparse_jl_forward(x[rows].double(), k, seed=6, nnz=nnz)
    assert float((y[rows].double() - want).abs().max() / want.abs().max()) < 1e-2
    z = F.sparse_jl_transpose(y, d, seed=6)
    want_z = reference.sparse_jl_transpose(y[rows].double(), d, seed=6, nnz=nnz)
    assert float((z[rows].double() - want_z).abs().max() / want_z.abs().max()) < 1e-2


def test_unfolded_transpose_beyond_2_31_elements(monkeypatch):
    """A folded two-band transpose whose unfolded y (n x k' = 2160) has more than 2**31 elements,
    read from an offset above 2**32: sampled rows match the reference."""
    widths = []
    launch = windowed._transpose_band
    monkeypatch.setattr(
        windowed, "_transpose_band", lambda y, *args, **kw: widths.append(y.shape[1]) or launch(y, *args, **kw)
    )
    n, d, k, offset = 2**20 + 3, 8400, 2100, 2**33 + 16
    nnz = sjlt.spec.default_nnz(k)
    y = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    z = F.sparse_jl_transpose(y, d, seed=6, column_offset=offset)
    assert set(widths) == {2160} and n * 2160 > 2**31
    rows = torch.tensor([0, n // 2, n - 1], device="cuda")
    want = reference.sparse_jl_transpose(y[rows].double(), d, seed=6, nnz=nnz, column_offset=offset)
    assert float((z[rows].double() - want).abs().max() / want.abs().max()) < 1e-2


@pytest.mark.parametrize(
    "k,n,dtype,tolerance",
    [
        (3000, 300, torch.bfloat16, 1e-2),
        (5000, 1000, torch.bfloat16, 1e-2),
        (10000, 64, torch.bfloat16, 1e-2),
        (1000, 4096, torch.bfloat16, 1e-2),
        (5000, 1000, torch.float32, 1e-5),
        (10443, 64, torch.float32, 1e-5),
    ],
)
def test_unfolded_transpose_equals_the_folding_kernel(monkeypatch, k, n, dtype, tolerance):
    """At the GPU's tilings (several row tiles, splits, one, two and four bands) the unfolded transpose
    equals the folding kernel's bitwise, and the reference within the dtype's tolerance."""
    d, offset = 2**16 + 48, 2**33 + 32
    nnz = sjlt.spec.default_nnz(k)
    y = torch.randn(n, k, device="cuda", dtype=dtype)
    key = sjlt.spec.philox_key(3)
    assert windowed._unfolds_y(y, d, sjlt.spec.band_count(nnz), nnz)
    z = windowed.transpose(y, d, *key, nnz, offset)
    want = reference.sparse_jl_transpose(y[:64].double(), d, seed=3, nnz=nnz, column_offset=offset)
    assert float((z[:64].double() - want).abs().max() / want.abs().max()) < tolerance
    monkeypatch.setattr(windowed, "_unfolds_y", lambda *args: False)
    assert torch.equal(z, windowed.transpose(y, d, *key, nnz, offset))


def _graph_replays_equal_eager(static_x: torch.Tensor, k: int, seed: int) -> None:
    """Capture ``F.sparse_jl(static_x, k)`` and its backward (after a warm-up on a side stream),
    then replay the graph twice on new inputs: each replay equals an eager call bitwise."""

    def eager(x_value, grad_value):
        x = x_value.clone().requires_grad_()
        y = F.sparse_jl(x, k, seed=seed)
        y.backward(grad_value)
        return y.detach(), x.grad

    static_grad = torch.randn(static_x.shape[0], k, device="cuda", dtype=static_x.dtype)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        F.sparse_jl(static_x, k, seed=seed).backward(static_grad)  # warm up
    torch.cuda.current_stream().wait_stream(stream)
    static_x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = F.sparse_jl(static_x, k, seed=seed)
        static_y.backward(static_grad)
    for _ in range(2):
        x_value, grad_value = torch.randn_like(static_x), torch.randn_like(static_grad)
        with torch.no_grad():
            static_x.copy_(x_value)
        static_grad.copy_(grad_value)
        graph.replay()
        torch.cuda.synchronize()
        want_y, want_grad = eager(x_value, grad_value)
        assert torch.equal(static_y, want_y) and torch.equal(static_x.grad, want_grad)


def test_cuda_graph_of_an_off_lattice_projection_and_its_backward(monkeypatch):
    """Off the lattice (k = 2100, two bands) a bfloat16 forward folds rows and its backward first
    unfolds the gradient (``windowed._unfolded``), whose scratch capture takes from the graph's
    pool. Replays on new inputs equal eager calls bitwise."""
    unfolded = []
    unfold = windowed._unfolded
    monkeypatch.setattr(windowed, "_unfolded", lambda y, nnz: unfolded.append(y.shape) or unfold(y, nnz))
    n, d, k = 64, 8448, 2100
    _graph_replays_equal_eager(torch.randn(n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True), k, 8)
    assert unfolded[:2] == [(n, k)] * 2  # the warm-up and the capture took the unfolded path


def test_cuda_graph_of_a_projection_whose_rows_split(monkeypatch):
    """527 rows split in both directions (512 + 15: ``windowed._forward_main_rows`` and
    ``_transpose_main_rows``), at ragged d and k; the graph of the forward and its backward replays
    on new inputs equal to eager calls, bitwise."""
    rows = []
    for name in ("_forward", "_transpose_rows"):
        launch = getattr(windowed, name)
        monkeypatch.setattr(
            windowed, name, lambda a, *args, _launch=launch, **kw: rows.append(a.shape[0]) or _launch(a, *args, **kw)
        )
    n, d, k = 527, 4001, 1000  # over the dense algorithm's launch-bound flops
    _graph_replays_equal_eager(torch.randn(n, d, device="cuda", requires_grad=True), k, 9)
    assert rows[:8] == [512, 15, 512, 15] * 2  # the warm-up and the capture split their rows


@pytest.mark.parametrize("n,d,k", [(16, 2**22, 4096), (256, 2**20, 8192)])
def test_float32_error_at_long_d(n, d, k):
    """Issue 12's bar, 1e-5 relative to float64, where thousands of tensor-core steps feed one
    output (the kernel adds runs of 64 steps apart: benchmarks/accuracy_fp32.py)."""
    x = torch.randn(n, d, device="cuda")
    y = F.sparse_jl(x, k, seed=4)
    want = reference.sparse_jl_forward(x.double(), k, seed=4, nnz=sjlt.spec.default_nnz(k))
    assert float((y.double() - want).abs().max() / want.abs().max()) <= 1e-5


@pytest.mark.parametrize("k", [1000, 3000])
@pytest.mark.parametrize("d", [2**15, 3000])
def test_folded_half_type_forward_in_wide_programs_matches_reference(monkeypatch, k, d):
    """Folded k with at least 128 rows, one band (k = 1000) and two (3000), in 128-row programs
    (``windowed._wide_rows``) with pipelined steps: long runs (d = 2**15: 256 and 171 groups in one
    split) and short ones (d = 3000: 24 and 16 groups); several row tiles and an aligned column
    offset. The interpreter's 16-row tiles reach none of them."""
    grids = []
    grid = windowed._grid
    monkeypatch.setattr(windowed, "_grid", lambda *args, **kwargs: grids.append(grid(*args, **kwargs)) or grids[-1])
    n, offset = 300, 2**33 + 16
    nnz = sjlt.spec.default_nnz(k)
    assert sjlt.spec.max_fold(k, nnz) > 0
    x = torch.randn(n, d, device="cuda").to(torch.bfloat16)
    key = sjlt.spec.philox_key(8)
    y = windowed.forward(x, k, *key, nnz, offset, Tiling(splits=1))
    assert grids[-1][0] == windowed._WIDE_ROWS  # the launch's BLOCK_M
    want = reference.sparse_jl_forward(x.double(), k, seed=8, nnz=nnz, column_offset=offset)
    assert float((y.double() - want).abs().max() / want.abs().max()) < 1e-2


@pytest.mark.parametrize("d", [2**18 - 1, 2**18 - 4, 2**18 - 2])
def test_misaligned_half_type_forward_with_few_row_tiles_runs_128_row_programs(monkeypatch, d):
    """Rows off 16 bytes (element loads, rows on 8 and on 4 bytes) whose 64-row programs would split
    d take 128-row programs by default (``windowed._widens_misaligned_rows``), with a last row tile
    of 64 rows, a NaN row and a column offset past 2**33."""
    grids = []
    grid = windowed._grid
    monkeypatch.setattr(windowed, "_grid", lambda *args, **kwargs: grids.append(grid(*args, **kwargs)) or grids[-1])
    n, k, offset = 320, 2048, 2**33 + 4
    nnz = sjlt.spec.default_nnz(k)
    x = torch.randn(n, d, device="cuda").to(torch.bfloat16)
    x[5, 7] = float("nan")
    key = sjlt.spec.philox_key(9)
    y = windowed.forward(x, k, *key, nnz, offset).double()
    assert grids[0][3] > 1 and grids[-1][0] == windowed._WIDE_ROWS  # 64 rows would split; 128 ran
    want = reference.sparse_jl_forward(x.double(), k, seed=9, nnz=nnz, column_offset=offset)
    finite = torch.isfinite(want).all(1)
    assert torch.equal(torch.isfinite(y).all(1), finite) and not finite[5]
    assert float((y[finite] - want[finite]).abs().max() / want[finite].abs().max()) < 1e-2


# Two bands with long runs (one launch over the sorted order table), two and three bands with
# short ones (a launch per band, through a float32 workspace).
@pytest.mark.parametrize("n,d,nnz", [(2048, 2**16, 16), (96, 3000, 16), (96, 3000, 24)])
def test_cuda_graph_of_a_multi_band_backward(n, d, nnz):
    """Capturing a projection whose transpose builds its tables in the graph (the two-band order
    table sorts on the device): replays match eager."""
    k = 16 * 8 * nnz
    x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    tables = windowed.window_tables(d, k, *sjlt.spec.philox_key(8), nnz, 0, "cuda")
    assert windowed._pairs_bands(torch.empty(n, k, device="cuda"), nnz, tables, Tiling()) == (d == 2**16)
    F.sparse_jl(x, k, seed=8, nnz=nnz).float().square().sum().backward()
    eager = x.grad.clone()
    static_in = x.detach().clone().requires_grad_()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        F.sparse_jl(static_in, k, seed=8, nnz=nnz).float().square().sum().backward()  # warm up
    torch.cuda.current_stream().wait_stream(stream)
    windowed._TABLE_CACHE.clear()  # the tables are made during capture
    graph = torch.cuda.CUDAGraph()
    static_in.grad = None
    with torch.cuda.graph(graph):
        F.sparse_jl(static_in, k, seed=8, nnz=nnz).float().square().sum().backward()
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_in.grad, eager)


GLUON = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0) and windowed._gluon_importable()),
    reason="the Gluon forward runs on sm_90 GPUs only",
)


# (n, d, k, nnz, column_offset, splits, rows, groups per step, stages, dtype)
GLUON_CASES = [
    (150, 1200, 1024, 8, 0, 1, 128, 4, 2, torch.bfloat16),  # a partial second row tile; a partial last group
    (77, 4096 + 48, 4096, 16, 2**33 + 32, 3, 64, 4, 2, torch.float16),  # two bands, offset > 2**32, splits
    (300, 3008, 384, 12, 16, 2, 128, 2, 3, torch.bfloat16),  # a short last band, three stages
    (64, 2048, 64, 4, 0, 1, 64, 1, 2, torch.float16),  # A = 1, one group per step
    (40, 5008, 768, 24, 2**31 + 16, 1, 64, 4, 3, torch.bfloat16),  # three bands
    (129, 1024, 48, 3, 0, 1, 128, 4, 2, torch.bfloat16),  # nnz 3: WIDTH padded to the wgmma's 64
    (150, 1000, 1024, 8, 8, 1, 128, 4, 2, torch.bfloat16),  # width and offset 8 past 16: a partial last chunk
    (77, 4096 + 40, 4096, 16, 2**33 + 24, 3, 64, 4, 2, torch.float16),  # the same with two bands and splits
]


@GLUON
@pytest.mark.parametrize("n,d,k,nnz,offset,splits,rows,groups,stages,dtype", GLUON_CASES)
def test_gluon_forward_matches_triton_kernel_and_reference(n, d, k, nnz, offset, splits, rows, groups, stages, dtype):
    """The Gluon forward sums the same tiles in the same order as the Triton kernel: bitwise equal
    to it, and within the half type's tolerance of the float64 reference."""
    seed = 2**63 + n
    gen = torch.Generator().manual_seed(n * d)
    x = torch.randn(n, d, generator=gen).to(dtype).cuda()
    key = sjlt.spec.philox_key(seed)
    got = windowed.forward(
        x, k, *key, nnz, offset, Tiling(gluon=True, splits=splits, blocks=(rows,), steps=(groups, 1), num_stages=stages)
    )
    triton_kernel = windowed.forward(x, k, *key, nnz, offset, Tiling(gluon=False, splits=splits))
    assert torch.equal(got, triton_kernel)
    want = reference.sparse_jl_forward(x.double().cpu(), k, seed=seed, nnz=nnz, column_offset=offset)
    error = float((got.double().cpu() - want).abs().max() / want.abs().max())
    assert error <= {torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]


@GLUON
def test_gluon_forward_reads_a_padded_row_stride():
    x = torch.randn(200, 1024 + 64, device="cuda", dtype=torch.bfloat16)[:, :1024]
    key = sjlt.spec.philox_key(3)
    got = windowed.forward(x, 1024, *key, 8, 0, Tiling(gluon=True))
    assert torch.equal(got, windowed.forward(x.contiguous(), 1024, *key, 8, 0, Tiling(gluon=False)))


@GLUON
def test_gluon_forward_rule_on_the_gpu():
    """Taken by default for an eligible short-run input, including rows on 16 bytes but off 16
    elements; never for float32, strided inputs or rows off 16 bytes, which keep the Triton kernel
    (and Tiling(gluon=True) says why it cannot run)."""
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    assert windowed._gluon_forward(x, 0, 16) and windowed._gluon_forward(x, 2**33, 128)
    assert windowed._gluon_forward(x, 8, 16) and windowed._gluon_forward(x[:, 8:], 0, 16)  # on 16 bytes
    assert not windowed._gluon_forward(x, 4, 16)  # copies would start mid-vector
    assert not windowed._gluon_forward(x.float(), 0, 16)
    assert not windowed._gluon_forward(x[:, 4:], 0, 16)  # start and width on 8 bytes
    assert not windowed._gluon_forward(x[:, ::2], 0, 16)
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        windowed.forward(x[:, 4:], 4096, 1, 2, 16, 0, Tiling(gluon=True))
    with pytest.raises(ValueError, match="whole warpgroups"):
        windowed.forward(x, 4096, 1, 2, 16, 0, Tiling(gluon=True, num_warps=2))


@GLUON
def test_cuda_graph_replays_the_gluon_forward():
    x = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16)
    assert windowed._gluon_forward(x, 0, 16)  # 4096 columns at k = 4096: 16 groups per program
    eager = F.sparse_jl(x, 4096, seed=5)
    static_in = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        F.sparse_jl(static_in, 4096, seed=5)  # warm up: compile, tables
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = F.sparse_jl(static_in, 4096, seed=5)
    static_in.copy_(2 * x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, F.sparse_jl(2 * x, 4096, seed=5))
    assert torch.equal(F.sparse_jl(x, 4096, seed=5), eager)


@pytest.mark.parametrize("n", [16, 2**17], ids=["torch-copy", "kernel-copy"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dense_cut_and_pad_keep_autograd(n, dtype, monkeypatch):
    """A half-type k off 8 runs the dense algorithm through S padded to 16-byte rows: the forward's
    cut of Y and the transpose's pad of y (``rows.resize``: torch's copy on 16 rows, the kernel on
    2^17) pass gradients like the projection's own backward, on the full path and the planned one,
    and in a CUDA graph."""
    from sjlt.ops import dense

    monkeypatch.setattr(dense, "PADDED_TRANSPOSE_MIN_WORK", 0)  # the pad, on 16 rows too
    x = torch.randn(n, 1000, device="cuda", dtype=dtype, requires_grad=True)
    grad_y = torch.randn(n, 100, device="cuda", dtype=dtype)
    first = F.sparse_jl(x, 100, seed=2)
    assert first.shape == (n, 100) and first.is_contiguous()
    for y in (first, F.sparse_jl(x, 100, seed=2)):  # the second call takes the plan
        x.grad = None
        y.backward(grad_y)
        torch.testing.assert_close(x.grad, F.sparse_jl_transpose(grad_y, 1000, seed=2), rtol=1e-2, atol=1e-2)
    y = grad_y.clone().requires_grad_()
    grad_z = torch.randn(n, 1000, device="cuda", dtype=dtype)
    F.sparse_jl_transpose(y, 1000, seed=2).backward(grad_z)
    torch.testing.assert_close(y.grad, F.sparse_jl(grad_z, 100, seed=2), rtol=1e-2, atol=1e-2)

    static_x = x.detach().clone()
    F.sparse_jl(static_x, 100, seed=2)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = F.sparse_jl(static_x, 100, seed=2)
    static_x.mul_(2)
    graph.replay()
    assert torch.equal(static_y, F.sparse_jl(static_x, 100, seed=2))


def test_repeated_small_calls_take_the_dense_plan_and_honour_every_setting():
    """A launch-bound forward repeated with one signature skips validation and dispatch
    (dense.plan_forward), with the same result; it still takes the full path when the matrix
    left the cache, the flags changed, autocast is on, or an argument is wrong."""
    from sjlt import backends
    from sjlt.ops import dense

    x = torch.randn(16, 1000, device="cuda", requires_grad=True)

    def planned(seed):  # the plan key of sparse_jl(x, 100, seed=seed) under the flags of the moment
        return F._plan_key(x, 100, seed, None, 0, "auto")

    first = F.sparse_jl(x, 100, seed=1)
    assert planned(1) in dense._PLANS
    again = F.sparse_jl(x, 100, seed=1)
    assert torch.equal(first, again)
    again.sum().backward()  # the planned call is differentiable like the first
    assert torch.allclose(x.grad, F.sparse_jl_transpose(torch.ones(16, 100, device="cuda"), 1000, seed=1))
    dense.clear_cache()
    assert not dense._PLANS  # a plan leaves with its matrix
    assert torch.equal(F.sparse_jl(x, 100, seed=1), first)  # rebuilt by the full path
    with pytest.raises(TypeError, match="seed"):
        F.sparse_jl(x, 100, seed=True)  # True == 1 as a key, but not a seed
    old = backends.dense_cache_bytes
    backends.dense_cache_bytes = 0  # no dense algorithm: the kernel
    try:
        kernel = F.sparse_jl(x, 100, seed=1)
    finally:
        backends.dense_cache_bytes = old
    assert torch.allclose(kernel, first, atol=1e-5)
    backends.dense_cache_bytes = 100 * 1000 * 4  # room for one matrix
    try:
        F.sparse_jl(x, 100, seed=1)
        assert planned(1) in dense._PLANS
        F.sparse_jl(x, 100, seed=2)  # evicts seed 1's matrix, and the plans that multiply by it
        assert list(dense._PLANS) == [planned(2)]
    finally:
        backends.dense_cache_bytes = old
    assert torch.equal(F.sparse_jl(x, 100, seed=1), first)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert F.sparse_jl(x, 100, seed=1).dtype == torch.bfloat16  # autocast like F.linear
