"""Quality prototype: the windowed layout with a separate group rotation for each part of the
blocks, against a dense Gaussian projection (p99 pairwise distortion ratio, CPU). It led to spec v5.

    python benchmarks/quality_rotations.py --k 8192 --nnz 16 --parts 1 2 4 [--seeds 6]

``--parts 0`` is the spec's matrix (v5: a rotation per band of 8 blocks); ``--parts 1`` gives every
block one rotation (v4's layout: two chunks share their window in all blocks or in none). With P
parts, blocks [i nnz / P, (i + 1) nnz / P) use their own rotation per group, drawn here with numpy:
two chunks then share a window independently in each part. Results: benchmarks/NOTES.md, design 4's
"Next" and spec v5.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from quality import family, gaussian_p99

from sjlt import reference, spec
from sjlt.metrics import distortion_percentile


def project(x: torch.Tensor, k: int, nnz: int, seed: int, parts: int, interleave: int = 1) -> torch.Tensor:
    d = x.shape[1]
    windows, block = spec.windows_per_block(k, nnz), k // nnz
    rows, negative = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz)
    rows = rows.clone()
    if parts == 0:  # the spec's own matrix
        parts, interleave = 1, 1
    else:  # every block at band 0's window, (position + R_(g,0)) mod A: v4's layout
        rows += ((rows[:1] % block) // spec.WINDOW - (rows % block) // spec.WINDOW) * spec.WINDOW
    chunk = torch.arange(d) // spec.WINDOW
    group, position = chunk // windows, chunk % windows
    window = (rows[0] % block) // spec.WINDOW
    rng = np.random.default_rng(seed + 12345)
    if interleave > 1:  # chunk c of super-group c div (F A) joins its group (c mod F): F groups interleave
        span = interleave * windows
        group = (chunk // span) * interleave + chunk % interleave
        position = (chunk % span) // interleave
        rotation = torch.from_numpy(rng.integers(0, windows, size=int(group.max()) + 1))
        moved = (position + rotation[group]) % windows
        rows += ((moved - window) * spec.WINDOW)[None, :]
        window = moved
    for part in range(1, parts):
        rotation = torch.from_numpy(rng.integers(0, windows, size=int(group.max()) + 1))
        moved = (position + rotation[group]) % windows
        for t in range(part * nnz // parts, (part + 1) * nnz // parts):
            rows[t] += (moved - window) * spec.WINDOW
    sign = torch.where(negative, -1.0, 1.0).double() / math.sqrt(nnz)
    y = torch.zeros(x.shape[0], k, dtype=torch.float64)
    for t in range(nnz):
        y.index_add_(1, rows[t], x * sign[t])
    return y


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--nnz", type=int, default=16)
    parser.add_argument(
        "--parts", type=int, nargs="+", default=[0, 1, 2, 4], help="rotations per group (0: the spec's matrix)"
    )
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument(
        "--interleave",
        type=int,
        nargs="+",
        default=[1],
        help="F: groups made of every F-th chunk of a run of F * A chunks (1: the spec's)",
    )
    args = parser.parse_args(argv)
    if not spec.is_windowed(args.k, args.nnz):
        parser.error(f"k = {args.k}, nnz = {args.nnz} is not a windowed layout")
    d = 4 * args.k
    print("| k | d | nnz | rotations | interleave | data | sjlt / Gaussian |\n|---|---|---|---|---|---|---|")
    for name in ("window64", "sparse8"):
        x = family(name, d, torch.Generator().manual_seed(2024))
        gaussian = gaussian_p99(x, args.k, args.seeds)
        for parts in args.parts:
            for interleave in args.interleave:
                ours = np.mean(
                    [
                        distortion_percentile(x, project(x, args.k, args.nnz, s, parts, interleave), 99)
                        for s in range(args.seeds)
                    ]
                )
                print(
                    f"| {args.k} | {d} | {args.nnz} | {parts} | {interleave} | {name} | {ours / gaussian:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
