"""The CPU engine (sjlt.cpu_engine) against the oracle (sjlt.reference), on both of its paths.

Every test that takes ``engine_path`` runs on the numba kernels and on the torch fallback. Inputs
are drawn fresh from a random seed that each failure message prints; re-run one with
``SJLT_TEST_SEED=<seed>``. Tolerances, elementwise against the oracle, which also accumulates in
float32 (float64 for float64 inputs) and rounds once:

- float32: 2e-6 * sum |terms| (float32 sums in a different order);
- float64: 1e-14 * sum |terms|;
- float16 / bfloat16: one unit in the last place of the result, plus the float32 bound (the two
  float32 sums may round to neighbouring half-precision values).
"""

import math
import os
import platform
import sys
import threading

import pytest
import torch

from sjlt import cpu_engine, reference, spec

MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7}
RELATIVE_TO_ABS_SUM = {torch.float16: 2e-6, torch.bfloat16: 2e-6, torch.float32: 2e-6, torch.float64: 1e-14}
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

# Tile sizes patched down so that small inputs cross every boundary of both paths: several tables
# (numba) or column shards (torch) with a partial last one, row chunks, one-row chunks.
TILINGS = {  # name: (numba TABLE_COLUMNS, torch shard columns, torch chunk elements)
    "one_tile": (1 << 16, 1 << 13, 1 << 19),
    "column_shards": (16, 16, 1 << 19),
    "row_chunks": (1 << 16, 1 << 13, 600),
    "single_rows": (7, 7, 1),
}


@pytest.fixture
def seed():
    value = int(os.environ.get("SJLT_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"SJLT_TEST_SEED={value}")
    return value


@pytest.fixture
def rng(seed):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(params=["numba_windows", "numba_tiles", "torch"])
def engine_path(request, monkeypatch):
    """Runs the test on the numba kernels (windowed forwards by permutes where the CPU has AVX-512,
    and on the tile kernel that serves every other machine), then on the torch path that serves
    without numba."""
    if request.param == "torch":
        monkeypatch.setenv(cpu_engine.ENGINE_VARIABLE, "torch")
        return request.param
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)
    kernels = cpu_engine.numba_kernels()
    # numba is a test dependency: its absence is a failure here, not a skip.
    assert kernels is not None, "numba kernels unavailable"
    if request.param == "numba_windows" and not kernels.CAN_PERMUTE:
        pytest.skip("the permute kernel needs an x86-64 CPU with AVX-512F; this one runs the tile kernel")
    monkeypatch.setattr(kernels, "PERMUTES", request.param == "numba_windows")
    return request.param


@pytest.fixture(params=sorted(TILINGS))
def tiling(request, monkeypatch):
    table_columns, shard_columns, chunk_elements = TILINGS[request.param]
    monkeypatch.setattr(cpu_engine, "TABLE_COLUMNS", table_columns)
    monkeypatch.setitem(cpu_engine._SHARD_COLUMNS, "cpu", shard_columns)
    monkeypatch.setitem(cpu_engine._CHUNK_ELEMENTS, "cpu", chunk_elements)
    return request.param


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _dense_s(d, k, *, seed, nnz, column_offset=0):
    """S built densely from the spec's table: shares no code with either path under test."""
    rows, negative = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz, column_offset=column_offset)
    s = torch.zeros(k, d, dtype=torch.float64)
    columns = torch.arange(d).expand(nnz, d)
    s[rows, columns] = torch.where(negative, -1.0, 1.0).double() / math.sqrt(nnz)
    return s


def _assert_close(got, want, abs_terms, dtype, seed):
    """got (engine) against want (oracle), elementwise, within the module docstring's tolerance."""
    assert got.dtype == want.dtype == dtype and got.shape == want.shape, f"seed {seed}"
    got, want = got.double(), want.double()
    bound = RELATIVE_TO_ABS_SUM[dtype] * abs_terms
    if dtype in MANTISSA_BITS:
        magnitude = torch.maximum(got.abs(), want.abs()).clamp_min(1e-30)
        bound = bound + 2.0 ** (torch.floor(torch.log2(magnitude)) - MANTISSA_BITS[dtype])
    excess = (got - want).abs() - bound
    assert bool((excess <= 0).all()), f"seed {seed}: max error over the bound {excess.max().item():.3g}"


# (n, d, k, nnz, column_offset): both layouts, odd shapes, offsets across and above 2**32.
CASES = [
    (37, 45, 23, 3, 2**33 + 5),  # classic
    (70, 1100, 256, 8, 0),  # windowed (k = 256 = 16 * 8 * 2); d crosses a 1024-column shard
    (33, 300, 256, 7, 2**32 - 100),  # windowed off the lattice (whole-window folds); straddles 2**32
    (19, 777, 300, 7, 5),  # a cut last window, rows folded across it; chunks cut at both ends
    (40, 1000, 1000, 8, 2**32 - 3),  # whole-window and cut folds; a row of 8-row groups and a rest
    (9, 2100, 2500, 16, 17),  # nnz 16 (two bands), a cut window; d crosses two 1024-column shards
    (31, 200, 64, 4, 2**32 - 40),  # windowed, A = 1
    (1, 17, 16, 1, 3),  # tiny: one row, one windowed block
    (5, 1, 7, 7, 0),  # one column, classic with every row a block
    (65, 130, 1, 1, 2**40 + 1),  # k = 1
    (129, 64, 112, 7, 0),  # windowed with A = 1, nnz = 7 (112 = 16 * 7)
    (23, 500, 97, 6, 3),  # a window of one row: 15 lanes of its chunks fold onto the block's first
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda case: "n{}_d{}_k{}_nnz{}_off{}".format(*case))
def test_engine_matches_oracle(engine_path, threads, case, dtype, rng, seed):
    n, d, k, nnz, offset = case
    x = torch.randn(n, d, generator=rng, dtype=torch.float64).to(dtype)
    y = torch.randn(n, k, generator=rng, dtype=torch.float64).to(dtype)
    s = _dense_s(d, k, seed=seed, nnz=nnz, column_offset=offset)

    got = cpu_engine.sparse_jl_forward(x, k, seed=seed, nnz=nnz, column_offset=offset)
    want = reference.sparse_jl_forward(x, k, seed=seed, nnz=nnz, column_offset=offset)
    assert got.is_contiguous()
    _assert_close(got, want, x.double().abs() @ s.abs().T, dtype, seed)

    got_t = cpu_engine.sparse_jl_transpose(y, d, seed=seed, nnz=nnz, column_offset=offset)
    want_t = reference.sparse_jl_transpose(y, d, seed=seed, nnz=nnz, column_offset=offset)
    assert got_t.is_contiguous()
    _assert_close(got_t, want_t, y.double().abs() @ s.abs(), dtype, seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tilings_match_oracle(engine_path, tiling, threads, dtype, rng, seed):
    n, d, k, nnz, offset = 37, 45, 23, 3, 2**33 + 5
    x = torch.randn(n, d, generator=rng, dtype=torch.float64).to(dtype)
    y = torch.randn(n, k, generator=rng, dtype=torch.float64).to(dtype)
    s = _dense_s(d, k, seed=seed, nnz=nnz, column_offset=offset)
    got = cpu_engine.sparse_jl_forward(x, k, seed=seed, nnz=nnz, column_offset=offset)
    _assert_close(
        got,
        reference.sparse_jl_forward(x, k, seed=seed, nnz=nnz, column_offset=offset),
        x.double().abs() @ s.abs().T,
        dtype,
        seed,
    )
    got_t = cpu_engine.sparse_jl_transpose(y, d, seed=seed, nnz=nnz, column_offset=offset)
    _assert_close(
        got_t,
        reference.sparse_jl_transpose(y, d, seed=seed, nnz=nnz, column_offset=offset),
        y.double().abs() @ s.abs(),
        dtype,
        seed,
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_rows_many_tables(monkeypatch, threads, dtype, rng, seed):
    """At least _FEW_ROWS rows and several tables: threads split the rows, tables go in turn and
    the forward accumulates across them (through the float32 staging for half precision)."""
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)
    monkeypatch.setattr(cpu_engine, "TABLE_COLUMNS", 16)
    n, d, k, nnz = cpu_engine._FEW_ROWS + 37, 45, 32, 2
    x = torch.randn(n, d, generator=rng, dtype=torch.float64).to(dtype)
    y = torch.randn(n, k, generator=rng, dtype=torch.float64).to(dtype)
    s = _dense_s(d, k, seed=seed, nnz=nnz, column_offset=5)
    _assert_close(
        cpu_engine.sparse_jl_forward(x, k, seed=seed, nnz=nnz, column_offset=5),
        reference.sparse_jl_forward(x, k, seed=seed, nnz=nnz, column_offset=5),
        x.double().abs() @ s.abs().T,
        dtype,
        seed,
    )
    _assert_close(
        cpu_engine.sparse_jl_transpose(y, d, seed=seed, nnz=nnz, column_offset=5),
        reference.sparse_jl_transpose(y, d, seed=seed, nnz=nnz, column_offset=5),
        y.double().abs() @ s.abs(),
        dtype,
        seed,
    )


def test_few_rows_many_tables_split_columns_across_threads(monkeypatch, rng, seed):
    """n below one tile per thread: the numba path splits the columns, not the rows."""
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)
    monkeypatch.setattr(cpu_engine, "TABLE_COLUMNS", 16)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(5, 70, generator=rng, dtype=torch.float64)
        y = torch.randn(5, 32, generator=rng, dtype=torch.float64)
        s = _dense_s(70, 32, seed=seed, nnz=2)
        _assert_close(
            cpu_engine.sparse_jl_forward(x, 32, seed=seed, nnz=2), x @ s.T, x.abs() @ s.abs().T, torch.float64, seed
        )
        _assert_close(
            cpu_engine.sparse_jl_transpose(y, 70, seed=seed, nnz=2), y @ s, y.abs() @ s.abs(), torch.float64, seed
        )
    finally:
        torch.set_num_threads(before)


def test_default_shape_matches_dense_s(engine_path, rng, seed):
    """The benchmark's shape class (d = 1024, k = 256, default nnz) with the real tile sizes."""
    x = torch.randn(300, 1024, generator=rng)
    s = _dense_s(1024, 256, seed=seed, nnz=8)
    _assert_close(
        cpu_engine.sparse_jl_forward(x, 256, seed=seed, nnz=8),
        (x.double() @ s.T).float(),
        x.double().abs() @ s.abs().T,
        torch.float32,
        seed,
    )
    y = torch.randn(300, 256, generator=rng)
    _assert_close(
        cpu_engine.sparse_jl_transpose(y, 1024, seed=seed, nnz=8),
        (y.double() @ s).float(),
        y.double().abs() @ s.abs(),
        torch.float32,
        seed,
    )


def _within_one_rounding(got, x, s, mantissa_bits):
    """|got - x s| <= 1 ulp of the result + a float32 accumulation bound (2**-20 sum |terms|).

    Accumulating in the half type itself would err by ~2**-(mantissa_bits + 1) sum |terms|.
    """
    want = x.double() @ s
    ulp = 2.0 ** (torch.floor(torch.log2(want.abs())) - mantissa_bits)
    bound = ulp + 2.0**-20 * (x.double().abs() @ s.abs())
    return bool(((got.double() - want).abs() <= bound).all())


@pytest.mark.parametrize("dtype, mantissa_bits", [(torch.float16, 10), (torch.bfloat16, 7)])
def test_half_precision_accumulates_in_float32(engine_path, dtype, mantissa_bits, rng, seed):
    """Sums of ~500 terms: only the final rounding to the half type may show."""
    d, k, nnz = 2000, 8, 2
    s = _dense_s(d, k, seed=3, nnz=nnz)
    x = torch.randn(16, d, generator=rng).to(dtype)
    y = cpu_engine.sparse_jl_forward(x, k, seed=3, nnz=nnz)
    assert y.dtype == dtype and _within_one_rounding(y, x, s.T, mantissa_bits), f"seed {seed}"
    y_in = torch.randn(16, k, generator=rng).to(dtype)
    z = cpu_engine.sparse_jl_transpose(y_in, d, seed=3, nnz=nnz)
    assert z.dtype == dtype and _within_one_rounding(z, y_in, s, mantissa_bits), f"seed {seed}"


N, D, K, NNZ, OFFSET = 37, 45, 23, 3, 2**33 + 5


def _strided_views(base):
    """Views of the same values with different strides (base has 2 * N rows, 2 * D columns)."""
    return {
        "transposed": base[:N, :D].t().contiguous().t(),
        "column_step": base[:N, ::2][:, :D],
        "row_step": base[::2, :D],
        "broadcast_row": base[:1, :D].expand(N, D),
    }


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("view", ["transposed", "column_step", "row_step", "broadcast_row"])
@pytest.mark.parametrize("k, nnz", [(K, NNZ), (300, 7)], ids=["classic", "windowed"])
def test_strided_inputs_give_the_contiguous_result(engine_path, tiling, view, dtype, k, nnz, rng, seed):
    base = torch.randn(2 * N, 2 * D, generator=rng).to(dtype)
    x = _strided_views(base)[view]
    y = cpu_engine.sparse_jl_forward(x, k, seed=seed, nnz=nnz)
    assert torch.equal(y, cpu_engine.sparse_jl_forward(x.contiguous(), k, seed=seed, nnz=nnz)), f"seed {seed}"
    y_in = torch.randn(2 * N, 2 * k, generator=rng).to(dtype)[::2, 1::2]
    z = cpu_engine.sparse_jl_transpose(y_in, D, seed=seed, nnz=nnz)
    assert torch.equal(z, cpu_engine.sparse_jl_transpose(y_in.contiguous(), D, seed=seed, nnz=nnz)), f"seed {seed}"


def test_forward_and_transpose_are_adjoint(engine_path, tiling, rng, seed):
    x = torch.randn(N, D, generator=rng, dtype=torch.float64)
    y = torch.randn(N, K, generator=rng, dtype=torch.float64)
    left = (cpu_engine.sparse_jl_forward(x, K, seed=seed, nnz=NNZ) * y).sum()
    right = (x * cpu_engine.sparse_jl_transpose(y, D, seed=seed, nnz=NNZ)).sum()
    assert math.isclose(left.item(), right.item(), rel_tol=1e-12), f"seed {seed}"


def test_column_shards_sum_to_the_whole(engine_path, rng, seed):
    x = torch.randn(N, D, generator=rng, dtype=torch.float64)
    whole = cpu_engine.sparse_jl_forward(x, K, seed=seed, nnz=NNZ, column_offset=OFFSET)
    parts = cpu_engine.sparse_jl_forward(
        x[:, :20], K, seed=seed, nnz=NNZ, column_offset=OFFSET
    ) + cpu_engine.sparse_jl_forward(x[:, 20:], K, seed=seed, nnz=NNZ, column_offset=OFFSET + 20)
    assert torch.allclose(whole, parts, rtol=1e-12, atol=1e-12), f"seed {seed}"


@pytest.mark.parametrize("k, nnz", [(K, NNZ), (256, 8), (300, 7)])
def test_nan_reaches_only_the_outputs_its_column_feeds(engine_path, tiling, k, nnz, rng, seed):
    x = torch.randn(N, D, generator=rng)
    x[5, 11] = float("nan")
    y = cpu_engine.sparse_jl_forward(x, k, seed=seed, nnz=nnz)
    rows, _ = reference.sparse_jl_hash(D, k, seed=seed, nnz=nnz)
    expected = torch.zeros(N, k, dtype=torch.bool)
    expected[5, rows[:, 11]] = True
    assert torch.equal(~torch.isfinite(y), expected), f"seed {seed}"


@pytest.mark.parametrize(
    "name,features,expected",
    [
        ("sapphirerapids", "+avx512f,+avx512vl", True),
        ("znver5", "+avx512f", True),
        ("znver4", "+avx512f", False),  # 512-bit permutes split in two halves: the tiles are faster
        ("skylake", "+avx2,-avx512f", False),  # no AVX-512: the permute intrinsic would abort LLVM
    ],
)
def test_the_permute_kernel_serves_cpus_with_full_width_avx512(monkeypatch, name, features, expected):
    numba = pytest.importorskip("numba")
    kernels = cpu_engine.numba_kernels()
    if kernels is None or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the permute kernel is for x86-64 CPUs under numba")
    monkeypatch.setattr(numba.config, "CPU_NAME", name)
    monkeypatch.setattr(numba.config, "CPU_FEATURES", features)
    assert kernels._host_cpu() == name
    assert kernels._prefers_permutes() is expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("offset", [0, 2**32 - 48])
def test_permute_and_tile_kernels_sum_in_the_same_order(monkeypatch, dtype, offset, rng, seed):
    """On the lattice no entry has a remainder, and each window sums its columns in ascending
    order, as the tile kernel sums a row's: the two forwards agree bit for bit."""
    kernels = cpu_engine.numba_kernels()
    assert kernels is not None, "numba kernels unavailable"  # a test dependency, as in engine_path
    if not kernels.CAN_PERMUTE:
        pytest.skip("the permute kernel needs an x86-64 CPU with AVX-512F")
    monkeypatch.setattr(kernels, "PERMUTES", True)
    x = torch.randn(45, 2100, generator=rng, dtype=dtype)
    windows = cpu_engine.sparse_jl_forward(x, 512, seed=seed, nnz=8, column_offset=offset)
    monkeypatch.setattr(kernels, "PERMUTES", False)
    tiles = cpu_engine.sparse_jl_forward(x, 512, seed=seed, nnz=8, column_offset=offset)
    assert torch.equal(windows, tiles), f"seed {seed}"


@pytest.mark.parametrize(
    "k, nnz, width, lead",
    [(97, 6, 4096, 0), (108, 6, 777, 5), (300, 7, 2000, 3), (1000, 8, 4096, 0), (2500, 16, 1500, 11), (64, 4, 7, 12)],
)
def test_window_lists_hold_every_nonzero_as_entries(k, nnz, width, lead, seed):
    """The permute kernel's table (decoded here in numpy: output lane o of an entry takes its chunk's
    lane ((o + r) mod 16) XOR m) holds exactly S's nonzeros. The masked kernel's entries, last in
    each window, are those rotated by k mod 16 (lanes folded across the window cut at k) or of the
    chunks the table's ends cut; when those lanes were added one by one, off-16 k and d ran
    1.1-1.8x slower."""
    kernels = cpu_engine.numba_kernels()
    assert kernels is not None, "numba kernels unavailable"
    rows, weights = cpu_engine._table(k, seed=seed, nnz=nnz, column_offset=lead, width=width, dtype=torch.float32)
    table = kernels.window_lists(rows, weights, k, lead)
    cut_chunks = ({0} if lead else set()) | ({(width + lead) // 16} if (width + lead) % 16 else set())
    listed, rotated = [], 0
    for shard in range(table.starts.shape[0]):
        for window in range(table.starts.shape[1] - 1):
            first, split = table.starts[shard, window], table.masked_from[shard, window]
            for index, word in enumerate(table.entries[first : table.starts[shard, window + 1]].tolist()):
                chunk, mask, rotation = word & (2**24 - 1), (word >> 24) & 15, (word >> 28) & 15
                assert chunk // kernels.SHARD_CHUNKS == shard, f"seed {seed}"
                assert rotation in (0, k % 16), f"seed {seed}"
                masked = rotation != 0 or chunk in cut_chunks
                assert masked == (first + index >= split), f"seed {seed}"
                rotated += rotation != 0
                for lane in range(16):
                    if word >> (32 + lane) & 1:
                        column = 16 * chunk + (((lane + rotation) % 16) ^ mask) - lead
                        listed.append((16 * window + lane, column, -1 if word >> (48 + lane) & 1 else 1))
    want = [
        (row, column, 1 if w > 0 else -1) for column in range(width) for row, w in zip(rows[column], weights[column])
    ]
    assert sorted(listed) == sorted(want), f"seed {seed}"
    # only the last block cuts a window, so a chunk has at most one rotated entry (at k mod 16 = 8
    # every entry could be written rotated: m unrotated is m XOR 8 rotated)
    assert rotated <= -(-(width + lead) // 16), f"seed {seed}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_inputs_give_zeros_of_the_input_dtype(engine_path, dtype):
    for module in (cpu_engine, reference):
        assert module.sparse_jl_forward(torch.empty(0, 5, dtype=dtype), 3, seed=0, nnz=2).shape == (0, 3)
        y = module.sparse_jl_forward(torch.empty(4, 0, dtype=dtype), 3, seed=0, nnz=2)
        assert y.dtype == dtype and torch.equal(y, torch.zeros(4, 3, dtype=dtype))
        assert module.sparse_jl_transpose(torch.empty(0, 3, dtype=dtype), 5, seed=0, nnz=2).shape == (0, 5)
        z = module.sparse_jl_transpose(torch.empty(4, 3, dtype=dtype), 0, seed=0, nnz=2)
        assert z.dtype == dtype and z.shape == (4, 0)


@pytest.mark.parametrize(
    "function, features",
    [
        (cpu_engine.sparse_jl_forward, 4),
        (cpu_engine.sparse_jl_transpose, 9),
        (reference.sparse_jl_forward, 4),
        (reference.sparse_jl_transpose, 9),
    ],
)
@pytest.mark.parametrize(
    "bad, error, message",
    [
        (torch.ones(6), ValueError, "2-D"),
        (torch.ones(2, 3, 6), ValueError, "2-D"),
        (torch.ones(3, 6, dtype=torch.int64), TypeError, "floating-point"),
        (torch.ones(3, 6, dtype=torch.complex64), TypeError, "complex"),
    ],
)
def test_bad_inputs_raise_clear_errors(function, features, bad, error, message):
    with pytest.raises(error, match=message):
        function(bad, features, seed=0, nnz=2)


# --------------------------------------------------------------------------------------------
# Threads, tables, fallback and dispatch
# --------------------------------------------------------------------------------------------


def test_one_torch_thread_computes_in_the_calling_thread(monkeypatch, rng):
    """With torch.set_num_threads(1) in the caller (a Dask or joblib worker), no pool is used."""
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)

    def no_pool():
        raise AssertionError("the shared pool was used with one torch thread")

    monkeypatch.setattr(cpu_engine, "_shared_pool", no_pool)
    x = torch.randn(300, 200, generator=rng)
    results = {}

    def work():
        torch.set_num_threads(1)
        results["y"] = cpu_engine.sparse_jl_forward(x, 64, seed=1, nnz=4)
        results["z"] = cpu_engine.sparse_jl_transpose(results["y"], 200, seed=1, nnz=4)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert results["y"].shape == (300, 64) and results["z"].shape == (300, 200)


@pytest.mark.parametrize("n, table_columns", [(1000, 1 << 16), (5, 16)], ids=["row_split", "column_split"])
def test_thread_count_does_not_change_the_result(monkeypatch, n, table_columns, rng):
    """Rows are split at tile boundaries and column groups add in a fixed order, so the result is
    bitwise the same for any thread count."""
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)
    monkeypatch.setattr(cpu_engine, "TABLE_COLUMNS", table_columns)
    x = torch.randn(n, 300, generator=rng)
    y = torch.randn(n, 256, generator=rng)
    before = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results.append(
                (
                    cpu_engine.sparse_jl_forward(x, 256, seed=2, nnz=8),
                    cpu_engine.sparse_jl_transpose(y, 300, seed=2, nnz=8),
                )
            )
    finally:
        torch.set_num_threads(before)
    for forward, transpose in results[1:]:
        assert torch.equal(forward, results[0][0]) and torch.equal(transpose, results[0][1])


def test_concurrent_callers_share_one_bounded_pool(monkeypatch, rng):
    """Eight threads projecting at once (as under Dask's threaded scheduler) get correct results,
    and the engine never starts more worker threads than there are cores."""
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)
    x = torch.randn(400, 500, generator=rng)
    want = cpu_engine.sparse_jl_forward(x, 128, seed=4, nnz=8)
    results = [None] * 8

    def work(index):
        results[index] = cpu_engine.sparse_jl_forward(x, 128, seed=4, nnz=8)

    callers = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert all(torch.equal(result, want) for result in results)
    workers = [t for t in threading.enumerate() if t.name.startswith("sjlt-cpu-engine")]
    assert len(workers) <= (os.cpu_count() or 1)


def test_tables_are_cached_per_shape(monkeypatch, rng):
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)
    cpu_engine.table_cache.clear()
    calls = []
    real_hash = reference.sparse_jl_hash

    def counting_hash(*args, **kwargs):
        calls.append(args)
        return real_hash(*args, **kwargs)

    monkeypatch.setattr(reference, "sparse_jl_hash", counting_hash)
    x = torch.randn(50, 100, generator=rng)
    first = cpu_engine.sparse_jl_forward(x, 64, seed=9, nnz=4)
    hashed = len(calls)
    assert hashed == 1
    assert torch.equal(cpu_engine.sparse_jl_forward(x, 64, seed=9, nnz=4), first)
    assert len(calls) == hashed  # same (seed, k, nnz, columns): no second hash
    cpu_engine.sparse_jl_forward(x, 64, seed=10, nnz=4)
    assert len(calls) == hashed + 1  # another seed is another table


def test_table_cache_stays_within_its_byte_budget():
    cache = cpu_engine._TableCache(max_bytes=1000)
    import numpy as np

    for key in range(10):
        cache.get(key, lambda: (np.zeros(100, dtype=np.int32),))  # 400 bytes each
    assert cache._bytes <= 1000 and len(cache._entries) == 2
    assert cache.get("big", lambda: (np.zeros(1000, dtype=np.int32),))[0].nbytes == 4000  # served, not kept
    assert "big" not in cache._entries


def test_without_numba_the_torch_path_runs_and_warns_once(monkeypatch, rng):
    monkeypatch.delenv(cpu_engine.ENGINE_VARIABLE, raising=False)
    monkeypatch.setattr(cpu_engine, "_kernel_module", None)
    monkeypatch.setattr(cpu_engine, "_kernel_import_failed", False)
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now fails, as if not installed
    monkeypatch.delitem(sys.modules, "sjlt._cpu_kernels", raising=False)
    x = torch.randn(20, 40, generator=rng, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="numba is not available") as warned:
        first = cpu_engine.sparse_jl_forward(x, 16, seed=5, nnz=1)
        second = cpu_engine.sparse_jl_transpose(first, 40, seed=5, nnz=1)
    assert len([w for w in warned if "numba" in str(w.message)]) == 1
    assert cpu_engine.numba_kernels() is None
    assert torch.allclose(first, reference.sparse_jl_forward(x, 16, seed=5, nnz=1), rtol=1e-12, atol=1e-12)
    assert torch.allclose(second, reference.sparse_jl_transpose(first, 40, seed=5, nnz=1), rtol=1e-12, atol=1e-12)


def test_unknown_engine_choice_is_an_error(monkeypatch):
    monkeypatch.setenv(cpu_engine.ENGINE_VARIABLE, "fortran")
    with pytest.raises(ValueError, match=cpu_engine.ENGINE_VARIABLE):
        cpu_engine.sparse_jl_forward(torch.ones(2, 3), 4, seed=0, nnz=1)


def test_ops_run_the_engine_on_cpu_tensors(monkeypatch, rng):
    import sjlt.functional as F

    calls = []
    real_forward, real_transpose = cpu_engine.sparse_jl_forward, cpu_engine.sparse_jl_transpose
    monkeypatch.setattr(
        cpu_engine, "sparse_jl_forward", lambda *a, **k: calls.append("forward") or real_forward(*a, **k)
    )
    monkeypatch.setattr(
        cpu_engine, "sparse_jl_transpose", lambda *a, **k: calls.append("transpose") or real_transpose(*a, **k)
    )
    x = torch.randn(4, 30, generator=rng, requires_grad=True)
    F.sparse_jl(x, 16, seed=3).sum().backward()
    assert calls == ["forward", "transpose"]


def test_importing_the_engine_does_not_import_numba():
    import subprocess

    code = (
        "import sys, torch, sjlt.cpu_engine, sjlt.functional; "
        "assert 'numba' not in sys.modules, 'numba imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------
# The oracle itself, and the torch path's tiling helpers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k, nnz", [(23, 3), (64, 4)])
def test_oracle_is_the_dense_product(k, nnz, rng, seed):
    x = torch.randn(N, D, generator=rng, dtype=torch.float64)
    s = _dense_s(D, k, seed=seed, nnz=nnz, column_offset=OFFSET)
    assert torch.allclose(
        reference.sparse_jl_forward(x, k, seed=seed, nnz=nnz, column_offset=OFFSET), x @ s.T, rtol=1e-12, atol=1e-12
    ), f"seed {seed}"
    y = torch.randn(N, k, generator=rng, dtype=torch.float64)
    assert torch.allclose(
        reference.sparse_jl_transpose(y, D, seed=seed, nnz=nnz, column_offset=OFFSET), y @ s, rtol=1e-12, atol=1e-12
    ), f"seed {seed}"


def test_oracle_is_differentiable(rng):
    x = torch.randn(9, 10, generator=rng, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: reference.sparse_jl_forward(t, 6, seed=1, nnz=2), (x,))
    y = torch.randn(9, 6, generator=rng, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: reference.sparse_jl_transpose(t, 10, seed=1, nnz=2), (y,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_odd_lines_gives_an_odd_number_of_cache_lines(dtype):
    line = 64 // dtype.itemsize
    for count in range(1, 300):
        up = cpu_engine._odd_lines(count, dtype, at_least=True)
        assert count <= up < count + 2 * line and up % (2 * line) == line
        down = cpu_engine._odd_lines(count, dtype, at_least=False)
        if count < line:
            assert down == count
        else:
            assert count - 2 * line < down <= count and down % (2 * line) == line


@pytest.mark.parametrize("device", ["cpu", "cuda", "mps"])
@pytest.mark.parametrize("n, width, other", [(100_000, 1024, 256), (3, 50_000_000, 4096), (1, 1, 1), (10**6, 8, 4)])
def test_tiling_bounds_shards_and_chunks(device, n, width, other):
    device = torch.device(device)  # constructing a device object needs no such hardware
    shard, rows = cpu_engine._tiling(n, width, other, device, torch.float32)
    max_shard = cpu_engine._SHARD_COLUMNS.get(device.type, cpu_engine._OTHER_SHARD_COLUMNS)
    budget = cpu_engine._CHUNK_ELEMENTS.get(device.type, cpu_engine._OTHER_CHUNK_ELEMENTS)
    assert 1 <= shard <= min(width, max_shard)
    assert 1 <= rows <= n
    assert rows == 1 or rows * (shard + other) <= budget


def test_spec_layouts_cover_both_paths():
    """The cases above include both layouts (the spec's windowed and classic matrices)."""
    layouts = {spec.is_windowed(k, nnz) for _, _, k, nnz, _ in CASES}
    assert layouts == {True, False}
