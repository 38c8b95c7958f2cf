"""How well a projection preserves distances: the measures behind ``sjlt evaluate``, the
quality tests and ``benchmarks/quality.py``, in one place.

The distortion of a pair (x_i, x_j) projected to (y_i, y_j) is
``|‖y_i − y_j‖² / ‖x_i − x_j‖² − 1|``, over the pairs i < j whose original distance is nonzero
(identical rows have no ratio to preserve). Computed in float64 with torch, on the inputs' device.
"""
from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["squared_distances", "distinct_pairs", "pair_distortion", "pairwise_distortion",
           "distortion_percentile", "jl_bound_eps"]


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
        if middle * middle / 2 - middle ** 3 / 3 < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2
