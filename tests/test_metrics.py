"""sjlt.metrics against scipy's pairwise distances: the one distortion measure of the package."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import pdist

import sjlt
from sjlt import metrics


def _scipy_distortion(x, y):
    before, after = pdist(np.asarray(x, np.float64), "sqeuclidean"), pdist(np.asarray(y, np.float64), "sqeuclidean")
    distinct = before > 0
    return np.abs(after[distinct] / before[distinct] - 1)


@pytest.mark.parametrize("to_input", [np.asarray, torch.from_numpy], ids=["numpy", "torch"])
def test_pairwise_distortion_matches_scipy(to_input):
    generator = np.random.default_rng(3)
    x = generator.standard_normal((40, 30))
    x[7] = x[3]  # an identical pair: no ratio, left out
    y = x @ generator.standard_normal((30, 8)) / np.sqrt(8)
    expected = _scipy_distortion(x, y)
    got = metrics.pairwise_distortion(to_input(x), to_input(y))
    assert got.dtype == torch.float64 and got.shape == expected.shape == (40 * 39 // 2 - 1,)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-12)
    p50, p99 = metrics.distortion_percentile(to_input(x), to_input(y), [50, 99])
    assert p99 == pytest.approx(np.percentile(expected, 99), rel=1e-9)
    assert p50 == pytest.approx(np.percentile(expected, 50), rel=1e-9)
    assert metrics.distortion_percentile(x, y) == pytest.approx(p99, rel=1e-12)


def test_distinct_pairs_are_the_nonzero_upper_triangle():
    x = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    original = metrics.squared_distances(x)
    before, after = metrics.distinct_pairs(original, 4 * original)
    assert before.tolist() == [25.0, 25.0] and after.tolist() == [100.0, 100.0]  # (0,1), (1,2)
    assert metrics.pair_distortion(original, 4 * original).tolist() == [3.0, 3.0]


def test_jl_bound_eps_is_none_below_24_ln_n():
    assert metrics.jl_bound_eps(1000, 100) is None
    assert 0 < metrics.jl_bound_eps(1000, 2000) < 1


def test_nearest_neighbors_excludes_the_row_itself():
    x = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    assert metrics.nearest_neighbors(metrics.squared_distances(x), 1).flatten().tolist() == [1, 0, 1, 2]


def test_evaluate_sample_reports_each_k_and_refuses_identical_rows():
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((60, 32)).astype(np.float32))
    reports, scatter = metrics.evaluate_sample(x, [8, 16], seed=1, nnz=None, neighbors=3, scatter_k=16)
    assert [r.k for r in reports] == [8, 16] and scatter.k == 16 and len(scatter.original) == 60 * 59 // 2
    y = sjlt.sparse_jl(x, 16, seed=1)
    assert reports[1].distortion_p99 == pytest.approx(metrics.distortion_percentile(x, y, 99), rel=1e-12)
    with pytest.raises(ValueError, match="every sampled row is identical"):
        metrics.evaluate_sample(torch.ones(5, 4), [4], seed=0, nnz=None, neighbors=2)
