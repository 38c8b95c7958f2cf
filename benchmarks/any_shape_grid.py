"""The output sizes that the any-shape benchmarks cover (issue 25): every multiple of 16 up to 256,
round numbers users pick, and random k from a printed seed. ``bench_any_shape.py`` times them and
``quality.py --grid`` measures their distortion, so both print the same rows."""

from __future__ import annotations

import random

ROUND_KS = (100, 200, 300, 500, 768, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000, 10000, 12000, 16384)
RANDOM_KS = 20
GRID_SEED = 25


def grid_ks(seed: int = GRID_SEED, low: int = 16, high: int = 16384) -> list[int]:
    """Sorted distinct k of the grid within [low, high]."""
    draws = random.Random(seed).sample(range(16, 16385), RANDOM_KS)
    ks = set(range(16, 257, 16)) | set(ROUND_KS) | set(draws)
    return sorted(k for k in ks if low <= k <= high)
