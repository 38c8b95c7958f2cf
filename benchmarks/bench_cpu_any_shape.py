"""The CPU engine at any k and any d: each ragged shape against its aligned neighbour, as markdown.

    python benchmarks/bench_cpu_any_shape.py                 # about 3 minutes on 2 cores
    python benchmarks/bench_cpu_any_shape.py --threads 1 --n 4000

For each k off the multiples of 16 it times the forward ``sparse_jl`` (through each numba forward
kernel this CPU can run: the window permutes where it has AVX-512, the tile kernel everywhere) and
the transpose ``sparse_jl_transpose``, and the same calls at the next multiple of 16 with the same
nnz (the ragged k's default), so that only the cut window differs; then, for
each row length d off the multiples of 16, the same against d rounded to 16. Every call runs
``--warmup`` times first (on the development VM a process's first calls into fresh huge pages are
several times slower), then ``--repeats`` interleaved rounds; the table gives medians and the
ratio to the neighbour (the GPU's any-shape target is 1.15x, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics

import torch
from bench_cpu import _interleaved

import sjlt
import sjlt.functional as F
from sjlt import cpu_engine

K_PAIRS = [(100, 112), (200, 208), (300, 304), (500, 512), (1000, 1008), (2500, 2512), (5000, 5008)]
D_PAIRS = [(1023, 1024), (1025, 1024), (1032, 1024), (4095, 4096), (769, 768)]


def _medians(calls: dict, warmup: int, repeats: int) -> dict:
    return {name: statistics.median(times) for name, times in _interleaved(calls, repeats, warmup).items()}


def _ratio_cells(median: dict, paths: list[str], ragged: int, aligned: int) -> list[str]:
    """ "ms | ratio" per path: the ragged shape's median and its ratio to the aligned one's."""
    return [f"{median[(p, ragged)] * 1e3:.1f} | {median[(p, ragged)] / median[(p, aligned)]:.2f}" for p in paths]


def _paths(kernels) -> list[str]:
    """The forward kernels this CPU runs, then the transpose."""
    forwards = ["permutes", "tiles"] if kernels is not None and kernels.CAN_PERMUTE else ["tiles"]
    return (forwards if kernels is not None else ["torch"]) + ["transpose"]


def _call(kernels, path: str, x: torch.Tensor, y: torch.Tensor, d: int, k: int, nnz: int):
    def run():
        if path == "transpose":
            return F.sparse_jl_transpose(y, d, seed=1, nnz=nnz)
        if kernels is not None:
            kernels.PERMUTES = path == "permutes"
        return F.sparse_jl(x, k, seed=1, nnz=nnz)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="rows")
    parser.add_argument("--d", type=int, default=4096, help="input features of the k table")
    parser.add_argument("--k", type=int, default=256, help="output features of the d table")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernels = cpu_engine.numba_kernels()
    chosen = kernels.PERMUTES if kernels is not None else None
    paths = _paths(kernels)
    print(
        f"{datetime.date.today()}, {platform.processor() or platform.machine()}"
        f" ({kernels._host_cpu() if kernels is not None else 'no numba'}), {args.threads} threads,"
        f" torch {torch.__version__}, sjlt {sjlt.__version__}; float32, medians of {args.repeats} rounds, ms"
    )
    print(f"\nn = {args.n}, d = {args.d}: ragged k / the multiple of 16 above")
    print("| k | nnz | " + " | ".join(f"{path} ms | ratio" for path in paths) + " |")
    print("|---|---|" + "---|---|" * len(paths))
    x = torch.randn(args.n, args.d)
    for ragged, aligned in K_PAIRS:
        nnz = sjlt.spec.default_nnz(ragged)
        ys = {k: torch.randn(args.n, k) for k in (ragged, aligned)}
        calls = {(p, k): _call(kernels, p, x, ys[k], args.d, k, nnz) for p in paths for k in (ragged, aligned)}
        cells = _ratio_cells(_medians(calls, args.warmup, args.repeats), paths, ragged, aligned)
        print(f"| {ragged} / {aligned} | {nnz} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nn = {args.n * 2}, k = {args.k}: ragged d / the aligned d")
    print("| d | " + " | ".join(f"{path} ms | ratio" for path in paths) + " |")
    print("|---|" + "---|---|" * len(paths))
    y = torch.randn(args.n * 2, args.k)
    for ragged, aligned in D_PAIRS:
        xs = {d: torch.randn(args.n * 2, d) for d in (ragged, aligned)}
        nnz = sjlt.spec.default_nnz(args.k)
        calls = {(p, d): _call(kernels, p, xs[d], y, d, args.k, nnz) for p in paths for d in (ragged, aligned)}
        cells = _ratio_cells(_medians(calls, args.warmup, args.repeats), paths, ragged, aligned)
        print(f"| {ragged} / {aligned} | " + " | ".join(cells) + " |", flush=True)
    if kernels is not None:
        kernels.PERMUTES = chosen


if __name__ == "__main__":
    main()
