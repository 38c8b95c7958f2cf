"""Distance preservation of the two SJLT layouts against a Gaussian projection (CPU, float64).

    python benchmarks/quality.py

For each data family and k, the p99 of |‖Sx - Sy‖² / ‖x - y‖² - 1| over all pairs of 160 points,
averaged over 6 seeds, divided by the same for a dense Gaussian projection. The windowed layout
is what the default nnz selects where k is a multiple of 16 * nnz; the classic layout is forced
with k, nnz fixed, through its hash (the same construction spec v1 used for every k).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.datasets import load_digits

from sjlt import reference, spec
from sjlt.metrics import distortion_percentile

POINTS = 160
SEEDS = range(6)


def family(name: str, d: int, gen: torch.Generator) -> torch.Tensor:
    if name == "dense":
        return torch.randn(POINTS, d, generator=gen, dtype=torch.float64)
    if name == "real":  # handwritten digits tiled with jitter
        digits = torch.from_numpy(load_digits().data[:POINTS]).double()
        return digits.repeat(1, d // 64) + 0.1 * torch.randn(POINTS, d, generator=gen, dtype=torch.float64)
    x = torch.zeros(POINTS, d, dtype=torch.float64)
    for i in range(POINTS):
        if name == "very_sparse":  # 5 nonzeros anywhere
            x[i, torch.randperm(d, generator=gen)[:5]] = torch.randn(5, generator=gen, dtype=torch.float64)
        else:  # "window": all mass in 16 contiguous coordinates
            start = int(torch.randint(0, d - 16, (1,), generator=gen))
            x[i, start:start + 16] = torch.randn(16, generator=gen, dtype=torch.float64)
    return x


def project(x: torch.Tensor, k: int, seed: int, nnz: int, windowed: bool) -> torch.Tensor:
    d = x.shape[1]
    if windowed:
        rows, negative = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz)
    else:
        rows, negative = reference._classic_hash(d, k, seed=seed, nnz=nnz, column_offset=0, device=None)
    return x @ reference.sparse_matrix_from_hash(rows, negative, k, dtype=torch.float64).to_dense().T


def main() -> None:
    print("| data | d | k | windowed nnz | windowed / Gaussian | classic (nnz 8) / Gaussian | Gaussian p99 |")
    print("|---|---|---|---|---|---|---|")
    for d, ks in [(1024, [64, 256, 1024]), (8192, [1024, 4096])]:
        for name in ["dense", "real", "very_sparse", "window"]:
            x = family(name, d, torch.Generator().manual_seed(2024))
            for k in ks:
                gen = torch.Generator().manual_seed(7)
                gaussian = np.mean([distortion_percentile(x, x @ (torch.randn(k, d, generator=gen, dtype=torch.float64)
                                                                  / math.sqrt(k)).T, 99) for _ in SEEDS])
                nnz = spec.default_nnz(k)
                windowed = np.mean([distortion_percentile(x, project(x, k, s, nnz, True), 99) for s in SEEDS])
                classic = np.mean([distortion_percentile(x, project(x, k, s, 8, False), 99) for s in SEEDS])
                print(f"| {name} | {d} | {k} | {nnz} | {windowed / gaussian:.2f} | {classic / gaussian:.2f} | "
                      f"{gaussian:.3f} |", flush=True)


if __name__ == "__main__":
    main()
