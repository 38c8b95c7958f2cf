"""How well a projection preserves distances: the measures behind ``sjlt evaluate``
(:func:`evaluate_sample`), the quality tests and ``benchmarks/quality.py``, in one place.

The distortion of a pair (x_i, x_j) projected to (y_i, y_j) is
``|‖y_i − y_j‖² / ‖x_i − x_j‖² − 1|``, over the pairs i < j whose original distance is nonzero
(identical rows have no ratio to preserve). Computed in float64 with torch, on the inputs' device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .functional import sparse_jl

__all__ = [
    "squared_distances",
    "distinct_pairs",
    "pair_distortion",
    "pairwise_distortion",
    "distortion_percentile",
    "jl_bound_eps",
    "nearest_neighbors",
    "evaluate_sample",
    "DimensionReport",
    "Scatter",
]


def squared_distances(x) -> torch.Tensor:
    """The (m, m) float64 matrix of squared Euclidean distances between the rows of ``x`` (m, d),
    a tensor or an array.

    Computed from the differences, not as ‖x‖² + ‖y‖² − 2x·y (torch's faster default above 25
    rows): that form leaves rounding noise where a distance is 0, so identical rows would count
    as a distinct pair with a meaningless ratio.
    """
    x = torch.as_tensor(x).double()
    return torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").pow_(2)


def distinct_pairs(original: torch.Tensor, projected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The squared distances of every pair i < j with ``original[i, j] > 0``, before and after
    projecting, as two 1-D tensors in row-major pair order, from the two (m, m) matrices of
    :func:`squared_distances`."""
    m = original.shape[0]
    upper = torch.triu_indices(m, m, offset=1, device=original.device)
    before = original[upper[0], upper[1]]
    after = projected[upper[0], upper[1]]
    del upper
    distinct = before > 0
    return before[distinct], after[distinct]


def pair_distortion(original: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
    """The distortion of every pair of :func:`distinct_pairs`, as a 1-D float64 tensor."""
    before, after = distinct_pairs(original, projected)
    return after.div_(before).sub_(1).abs_()


def pairwise_distortion(x, projected) -> torch.Tensor:
    """The distortion of every pair of distinct rows of ``x`` (m, d) mapped to ``projected``
    (m, k), as a 1-D float64 tensor; see the module docstring."""
    return pair_distortion(squared_distances(x), squared_distances(projected))


def distortion_percentile(x, projected, q=99.0):
    """The ``q``-th percentile (a number or a sequence of them, in [0, 100]) of
    :func:`pairwise_distortion`, linearly interpolated as ``numpy.percentile`` does."""
    values = np.percentile(pairwise_distortion(x, projected).cpu().numpy(), q)
    return float(values) if np.ndim(values) == 0 else [float(v) for v in values]


def jl_bound_eps(n_samples: int, k: int) -> float | None:
    """The eps of the JL bound at k: the eps for which
    ``sklearn.random_projection.johnson_lindenstrauss_min_dim(n_samples, eps=eps)`` is k, i.e.
    the root in (0, 1) of k = 4 ln n / (eps²/2 − eps³/3). None when there is none: eps²/2 −
    eps³/3 rises from 0 to 1/6 on (0, 1), so k < 24 ln n leaves the bound vacuous."""
    target = 4.0 * math.log(n_samples) / k
    if target >= 1.0 / 6.0:
        return None
    low, high = 0.0, 1.0
    for _ in range(200):  # bisection on an increasing function; 200 halvings reach float precision
        middle = (low + high) / 2
        if middle * middle / 2 - middle**3 / 3 < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


#: Pairs kept for the scatter panel of the plot; more only blur into a blob.
SCATTER_PAIRS = 5000
#: Bytes per pair of sampled rows that evaluate_sample holds at its peak: the float64 distance
#: matrices before and after projecting and a copy of one, the int64 indices of the upper
#: triangle, the pair vectors, mask and distortions. Measured peak on CPU: 57-63 bytes per pair
#: (sample 4000-6000 rows, 2 dims).
BYTES_PER_PAIR = 64


@dataclass(frozen=True)
class DimensionReport:
    k: int
    distortion_p50: float
    distortion_p99: float
    recall: float
    jl_bound_eps: float | None  # None: the bound guarantees nothing at this k (eps >= 1)


@dataclass(frozen=True)
class Scatter:
    """Squared distances of a random subset of pairs, before and after projecting to k."""

    k: int
    original: np.ndarray
    projected: np.ndarray


def nearest_neighbors(squared: torch.Tensor, neighbors: int) -> torch.Tensor:
    """Indices (m, neighbors) of each row's nearest other rows, from the (m, m) matrix of
    :func:`squared_distances` (the row itself excluded)."""
    squared = squared.clone()
    squared.fill_diagonal_(math.inf)
    return squared.topk(neighbors, dim=1, largest=False).indices


def evaluate_sample(
    x: torch.Tensor,
    dims: list[int],
    *,
    seed: int,
    nnz: int | None,
    neighbors: int,
    scatter_k: int | None = None,
    scatter_seed: int = 0,
) -> tuple[list[DimensionReport], Scatter | None]:
    """The quality of projecting the rows of ``x`` (m, d) to each k of ``dims`` with the matrix of
    ``seed``: the median and 99th percentile of :func:`pair_distortion`, the recall of each row's
    ``neighbors`` nearest neighbours, and :func:`jl_bound_eps`; with ``scatter_k``, also
    :data:`SCATTER_PAIRS` random pairs' distances at that k (drawn with ``scatter_seed``).
    Memory grows as m² (:data:`BYTES_PER_PAIR`). What ``sjlt evaluate`` reports."""
    m = x.shape[0]
    original = squared_distances(x)
    distinct_count = distinct_pairs(original, original)[0].numel()
    if not distinct_count:  # identical rows have no ratio to preserve
        raise ValueError("every sampled row is identical; there are no distances to compare")
    true_neighbors = nearest_neighbors(original, neighbors)
    pair_pick = torch.randperm(distinct_count, generator=torch.Generator().manual_seed(scatter_seed))
    pair_pick = pair_pick[:SCATTER_PAIRS].to(x.device)
    reports, scatter = [], None
    for k in dims:
        projected = squared_distances(sparse_jl(x, k, seed=seed, nnz=nnz))
        distortion = pair_distortion(original, projected)
        p50, p99 = np.percentile(distortion.cpu().numpy(), [50, 99])
        del distortion
        found = nearest_neighbors(projected, neighbors)
        hits = (true_neighbors[:, :, None] == found[:, None, :]).any(dim=2).sum().item()
        reports.append(
            DimensionReport(
                k=k,
                distortion_p50=float(p50),
                distortion_p99=float(p99),
                recall=hits / (m * neighbors),
                jl_bound_eps=jl_bound_eps(m, k),
            )
        )
        if k == scatter_k:
            before, after = distinct_pairs(original, projected)
            scatter = Scatter(k, before[pair_pick].cpu().numpy(), after[pair_pick].cpu().numpy())
    return reports, scatter
