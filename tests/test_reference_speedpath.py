"""The reference projection's tiled embedding_bag path against a dense float64 oracle.

The oracle builds S densely from ``sparse_jl_hash`` (the spec's table), so it shares no code with
the gathers under test. Tile sizes are patched down so that small inputs cross every boundary:
several column shards with a partial last one, several row chunks with a partial last one, and
one-row chunks.
"""
import math

import pytest
import torch

from sjlt import reference

TILINGS = {
    "one_tile": (1 << 13, 1 << 19),
    "column_shards": (16, 1 << 19),
    "row_chunks": (1 << 13, 600),
    "single_rows": (7, 1),
}


@pytest.fixture(params=sorted(TILINGS))
def tiling(request, monkeypatch):
    shard_columns, chunk_elements = TILINGS[request.param]
    monkeypatch.setitem(reference._SHARD_COLUMNS, "cpu", shard_columns)
    monkeypatch.setitem(reference._CHUNK_ELEMENTS, "cpu", chunk_elements)
    return request.param


def _dense_s(d, k, *, seed, nnz, column_offset=0):
    rows, negative = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz, column_offset=column_offset)
    s = torch.zeros(k, d, dtype=torch.float64)
    columns = torch.arange(d).expand(nnz, d)
    s[rows, columns] = torch.where(negative, -1.0, 1.0).double() / math.sqrt(nnz)
    return s


def _relative_error(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-13}
N, D, K, NNZ, OFFSET, SEED = 37, 45, 23, 3, 2**33 + 5, 2024


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_matches_dense_oracle(tiling, dtype, rng):
    x = torch.randn(N, D, generator=rng, dtype=torch.float64).to(dtype)
    y = reference.sparse_jl_forward(x, K, seed=SEED, nnz=NNZ, column_offset=OFFSET)
    want = x.double() @ _dense_s(D, K, seed=SEED, nnz=NNZ, column_offset=OFFSET).T
    assert y.dtype == dtype and y.shape == (N, K) and y.is_contiguous()
    assert _relative_error(y, want) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_transpose_matches_dense_oracle(tiling, dtype, rng):
    y = torch.randn(N, K, generator=rng, dtype=torch.float64).to(dtype)
    z = reference.sparse_jl_transpose(y, D, seed=SEED, nnz=NNZ, column_offset=OFFSET)
    want = y.double() @ _dense_s(D, K, seed=SEED, nnz=NNZ, column_offset=OFFSET)
    assert z.dtype == dtype and z.shape == (N, D) and z.is_contiguous()
    assert _relative_error(z, want) < TOLERANCE[dtype]


def test_default_shape_matches_dense_oracle(rng):
    """The benchmark's shape class (d = 1024, k = 256, default nnz) with the real tile sizes."""
    x = torch.randn(300, 1024, generator=rng)
    s = _dense_s(1024, 256, seed=7, nnz=8)
    assert _relative_error(reference.sparse_jl_forward(x, 256, seed=7, nnz=8), x.double() @ s.T) < 1e-6
    y = torch.randn(300, 256, generator=rng)
    assert _relative_error(reference.sparse_jl_transpose(y, 1024, seed=7, nnz=8), y.double() @ s) < 1e-6


def _within_one_rounding(got, x, s, mantissa_bits):
    """|got - x s| <= 1 ulp of the result + a float32 accumulation bound (2**-20 sum |terms|).

    Accumulating in the half type itself would err by ~2**-(mantissa_bits + 1) sum |terms|.
    """
    want = x.double() @ s
    ulp = 2.0 ** (torch.floor(torch.log2(want.abs())) - mantissa_bits)
    bound = ulp + 2.0**-20 * (x.double().abs() @ s.abs())
    return bool(((got.double() - want).abs() <= bound).all())


@pytest.mark.parametrize("dtype, mantissa_bits", [(torch.float16, 10), (torch.bfloat16, 7)])
def test_half_precision_accumulates_in_float32(dtype, mantissa_bits, rng):
    """Bags of ~500 terms: only the final rounding to the half type may show."""
    d, k, nnz = 2000, 8, 2
    s = _dense_s(d, k, seed=3, nnz=nnz)
    x = torch.randn(16, d, generator=rng).to(dtype)
    y = reference.sparse_jl_forward(x, k, seed=3, nnz=nnz)
    assert y.dtype == dtype and _within_one_rounding(y, x, s.T, mantissa_bits)
    y_in = torch.randn(16, k, generator=rng).to(dtype)
    z = reference.sparse_jl_transpose(y_in, d, seed=3, nnz=nnz)
    assert z.dtype == dtype and _within_one_rounding(z, y_in, s, mantissa_bits)


def _strided_views(base):
    """Views of the same values with different strides (base has 2 * N rows, 2 * D columns)."""
    return {
        "transposed": base[:N, :D].t().contiguous().t(),
        "column_step": base[:N, ::2][:, :D],
        "row_step": base[::2, :D],
        "broadcast_row": base[:1, :D].expand(N, D),
    }


@pytest.mark.parametrize("view", ["transposed", "column_step", "row_step", "broadcast_row"])
def test_strided_inputs_give_the_contiguous_result(tiling, view, rng):
    base = torch.randn(2 * N, 2 * D, generator=rng)
    x = _strided_views(base)[view]
    y = reference.sparse_jl_forward(x, K, seed=SEED, nnz=NNZ)
    assert torch.equal(y, reference.sparse_jl_forward(x.contiguous(), K, seed=SEED, nnz=NNZ))
    assert _relative_error(y, x.double() @ _dense_s(D, K, seed=SEED, nnz=NNZ).T) < 1e-6

    y_in = torch.randn(2 * N, 2 * K, generator=rng)[::2, 1::2]
    z = reference.sparse_jl_transpose(y_in, D, seed=SEED, nnz=NNZ)
    assert torch.equal(z, reference.sparse_jl_transpose(y_in.contiguous(), D, seed=SEED, nnz=NNZ))


def test_forward_and_transpose_are_adjoint(tiling, rng):
    x = torch.randn(N, D, generator=rng, dtype=torch.float64)
    y = torch.randn(N, K, generator=rng, dtype=torch.float64)
    left = (reference.sparse_jl_forward(x, K, seed=SEED, nnz=NNZ) * y).sum()
    right = (x * reference.sparse_jl_transpose(y, D, seed=SEED, nnz=NNZ)).sum()
    assert math.isclose(left.item(), right.item(), rel_tol=1e-12)


def test_column_shards_sum_to_the_whole(rng):
    x = torch.randn(N, D, generator=rng, dtype=torch.float64)
    whole = reference.sparse_jl_forward(x, K, seed=SEED, nnz=NNZ, column_offset=OFFSET)
    parts = (reference.sparse_jl_forward(x[:, :20], K, seed=SEED, nnz=NNZ, column_offset=OFFSET)
             + reference.sparse_jl_forward(x[:, 20:], K, seed=SEED, nnz=NNZ, column_offset=OFFSET + 20))
    assert torch.allclose(whole, parts, rtol=1e-12, atol=1e-12)


def test_nan_reaches_only_the_outputs_its_column_feeds(tiling, rng):
    x = torch.randn(N, D, generator=rng)
    x[5, 11] = float("nan")
    y = reference.sparse_jl_forward(x, K, seed=SEED, nnz=NNZ)
    rows, _ = reference.sparse_jl_hash(D, K, seed=SEED, nnz=NNZ)
    expected = torch.zeros(N, K, dtype=torch.bool)
    expected[5, rows[:, 11]] = True
    assert torch.equal(~torch.isfinite(y), expected)


def test_gradients_flow_through_the_reused_buffers(monkeypatch, rng):
    monkeypatch.setitem(reference._SHARD_COLUMNS, "cpu", 4)
    monkeypatch.setitem(reference._CHUNK_ELEMENTS, "cpu", 40)
    x = torch.randn(9, 10, generator=rng, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: reference.sparse_jl_forward(t, 6, seed=1, nnz=2), (x,))
    y = torch.randn(9, 6, generator=rng, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: reference.sparse_jl_transpose(t, 10, seed=1, nnz=2), (y,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_empty_inputs_give_zeros_of_the_input_dtype(dtype):
    assert reference.sparse_jl_forward(torch.empty(0, 5, dtype=dtype), 3, seed=0, nnz=2).shape == (0, 3)
    y = reference.sparse_jl_forward(torch.empty(4, 0, dtype=dtype), 3, seed=0, nnz=2)
    assert y.dtype == dtype and torch.equal(y, torch.zeros(4, 3, dtype=dtype))
    assert reference.sparse_jl_transpose(torch.empty(0, 3, dtype=dtype), 5, seed=0, nnz=2).shape == (0, 5)


@pytest.mark.parametrize("function, features", [(reference.sparse_jl_forward, 4),
                                                (reference.sparse_jl_transpose, 9)])
@pytest.mark.parametrize("bad, error, message", [
    (torch.ones(6), ValueError, "2-D"),
    (torch.ones(2, 3, 6), ValueError, "2-D"),
    (torch.ones(3, 6, dtype=torch.int64), TypeError, "floating-point"),
    (torch.ones(3, 6, dtype=torch.complex64), TypeError, "complex"),
])
def test_bad_inputs_raise_clear_errors(function, features, bad, error, message):
    with pytest.raises(error, match=message):
        function(bad, features, seed=0, nnz=2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_odd_lines_gives_an_odd_number_of_cache_lines(dtype):
    line = 64 // dtype.itemsize
    for count in range(1, 300):
        up = reference._odd_lines(count, dtype, at_least=True)
        assert count <= up < count + 2 * line and up % (2 * line) == line
        down = reference._odd_lines(count, dtype, at_least=False)
        if count < line:
            assert down == count
        else:
            assert count - 2 * line < down <= count and down % (2 * line) == line


@pytest.mark.parametrize("device", ["cpu", "cuda", "mps"])
@pytest.mark.parametrize("n, width, other", [(100_000, 1024, 256), (3, 50_000_000, 4096), (1, 1, 1),
                                             (10**6, 8, 4)])
def test_tiling_bounds_shards_and_chunks(device, n, width, other):
    device = torch.device(device)  # constructing a device object needs no such hardware
    shard, rows = reference._tiling(n, width, other, device, torch.float32)
    max_shard = reference._SHARD_COLUMNS.get(device.type, reference._OTHER_SHARD_COLUMNS)
    budget = reference._CHUNK_ELEMENTS.get(device.type, reference._OTHER_CHUNK_ELEMENTS)
    assert 1 <= shard <= min(width, max_shard)
    assert 1 <= rows <= n
    assert rows == 1 or rows * (shard + other) <= budget
