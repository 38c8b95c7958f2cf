"""TRAK data attribution with sjlt's projector, against exact scores and TRAK's own dense projector.

An MLP is trained on scikit-learn's handwritten digits (shipped with scikit-learn, no download).
For every test example, TRAK scores every training example; this script compares three sets of
scores:

- **exact**: TRAK's formula without a projection, from the full per-example gradients of the
  margin (computed with ``sjlt.attribution.per_example_gradients``):
  scores = diag(Q) (G G^T + lambda I)^{-1} G G_test^T, with G the (train, parameters) gradients,
  Q TRAK's out-to-loss weights and lambda = ``--ridge`` x the mean of diag(G G^T);
- **dense**: ``TRAKer`` with TRAK's ``BasicProjector`` (a dense Rademacher matrix);
- **sjlt**: ``TRAKer`` with ``sjlt.attribution.SJLTProjector``.

Projected runs pass TRAKer ``lambda_reg`` = lambda x k / grad_dim: a projection with unit-variance
entries, divided by sqrt(grad_dim) as TRAKer does, multiplies G G^T by k / grad_dim in
expectation, so both runs estimate the same exact scores. Reported: the Spearman correlation of
each test example's scores over the training set with the exact ones, averaged over test
examples, as mean +- standard deviation over projector seeds.

    python examples/trak_attribution.py                      # the table in benchmarks/RESULTS.md
    python examples/trak_attribution.py --ks 256 --seeds 1   # quick

Needs ``pip install traker`` (``seeded-sjlt[attribution]``). Runs on CPU in a few minutes;
``--device cuda`` runs TRAKer, both projectors and the exact scores on the GPU (the MLP is trained
on the CPU either way, so the setups are the same).
"""

from __future__ import annotations

import argparse
import logging
import math
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import spearmanr

import sjlt.attribution


@dataclass
class Setup:
    model: torch.nn.Module
    train: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor]

    @property
    def grad_dim(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def margin(model: torch.nn.Module, example) -> torch.Tensor:
    """TRAK's model output for classification: the correct logit minus the log-sum-exp of the
    others, for one (features, label) example."""
    features, label = example
    logits = model(features[None])[0]
    correct = torch.arange(logits.shape[-1], device=logits.device) == label
    # vmap-friendly: no indexing by the (batched) label, no boolean masks of dynamic shape
    return torch.where(correct, logits, 0.0).sum() - logits.masked_fill(correct, -math.inf).logsumexp(-1)


def build(hidden: tuple[int, ...], train_size: int, test_size: int, data_seed: int, epochs: int, device="cpu") -> Setup:
    """Digits (standardised), split at random, and an MLP trained on the training split (on the CPU),
    then moved with the data to ``device``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    features = torch.tensor(digits.data, dtype=torch.float32)
    features = (features - features.mean(0)) / (features.std(0) + 1e-6)
    labels = torch.tensor(digits.target)
    generator = torch.Generator().manual_seed(data_seed)
    order = torch.randperm(len(labels), generator=generator)
    if train_size + test_size > len(order):
        raise ValueError(f"--train + --test must be at most {len(order)} (the digits), got {train_size + test_size}")
    train, test = order[:train_size], order[train_size : train_size + test_size]
    torch.manual_seed(data_seed)
    widths = (features.shape[1], *hidden, 10)
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for _ in range(epochs):
        for batch in torch.randperm(train_size, generator=generator).split(64):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(features[train[batch]]), labels[train[batch]])
            loss.backward()
            optimizer.step()
    splits = [(features[rows].to(device), labels[rows].to(device)) for rows in (train, test)]
    return Setup(model.eval().to(device), *splits)


def out_to_loss(setup: Setup) -> torch.Tensor:
    """TRAK's Q for classification: 1 - the softmax probability of the correct class."""
    features, labels = setup.train
    with torch.no_grad():
        probabilities = setup.model(features).softmax(-1)
    return 1 - probabilities[torch.arange(len(labels), device=labels.device), labels]


def full_gradients(setup: Setup, split) -> torch.Tensor:
    blocks = [g for _, _, g in sjlt.attribution.per_example_gradients(setup.model, margin, split)]
    return torch.cat(blocks, 1).double()


def exact_scores(setup: Setup, ridge: float) -> tuple[np.ndarray, float]:
    """(train, test) exact TRAK scores and the lambda they used."""
    train, test = full_gradients(setup, setup.train), full_gradients(setup, setup.test)
    gram = train @ train.T
    lam = ridge * float(gram.diagonal().mean())
    solved = torch.linalg.solve(gram + lam * torch.eye(len(gram), dtype=gram.dtype, device=gram.device), train @ test.T)
    return (out_to_loss(setup).double()[:, None] * solved).cpu().numpy(), lam


def trak_scores(setup: Setup, projector, lambda_reg: float, batch_size: int = 100) -> np.ndarray:
    """(train, test) scores from TRAKer with ``projector`` (float32, one checkpoint)."""
    from trak import TRAKer

    train_x, train_y = setup.train
    test_x, test_y = setup.test
    with tempfile.TemporaryDirectory() as save_dir:
        traker = TRAKer(
            model=setup.model,
            task="image_classification",
            train_set_size=len(train_y),
            projector=projector,
            save_dir=save_dir,
            device=str(setup.device),
            use_half_precision=False,
            lambda_reg=lambda_reg,
            logging_level=logging.ERROR,
        )
        checkpoint = setup.model.state_dict()
        traker.load_checkpoint(checkpoint, model_id=0)
        for start in range(0, len(train_y), batch_size):
            batch = (train_x[start : start + batch_size], train_y[start : start + batch_size])
            traker.featurize(batch=batch, num_samples=len(batch[1]))
        traker.finalize_features()
        traker.start_scoring_checkpoint(exp_name="test", checkpoint=checkpoint, model_id=0, num_targets=len(test_y))
        for start in range(0, len(test_y), batch_size):
            batch = (test_x[start : start + batch_size], test_y[start : start + batch_size])
            traker.score(batch=batch, num_samples=len(batch[1]))
        return np.asarray(traker.finalize_scores(exp_name="test"), dtype=np.float64)


def mean_spearman(approx: np.ndarray, exact: np.ndarray) -> float:
    """Spearman correlation over training examples, averaged over test examples (columns)."""
    return float(np.mean([spearmanr(approx[:, j], exact[:, j]).statistic for j in range(exact.shape[1])]))


def make_projector(kind: str, grad_dim: int, k: int, seed: int, device="cpu"):
    if kind == "sjlt":
        return sjlt.attribution.SJLTProjector(grad_dim, k, seed=seed, device=device)
    from trak.projectors import BasicProjector, ProjectionType

    return BasicProjector(grad_dim, k, seed, ProjectionType.rademacher, torch.device(device), dtype=torch.float32)


def compare(setup: Setup, ks, seeds, ridge: float, kinds=("dense", "sjlt")) -> dict:
    """{(kind, k): [mean Spearman per seed]} and the exact scores' lambda."""
    exact, lam = exact_scores(setup, ridge)
    results = {}
    for k in ks:
        if k >= setup.grad_dim:
            raise ValueError(f"k = {k} must be below grad_dim = {setup.grad_dim}")
        for kind in kinds:
            results[kind, k] = [
                mean_spearman(
                    trak_scores(
                        setup, make_projector(kind, setup.grad_dim, k, seed, setup.device), lam * k / setup.grad_dim
                    ),
                    exact,
                )
                for seed in seeds
            ]
    return results


def table(results: dict, ks, kinds=("dense", "sjlt")) -> str:
    lines = ["| k | " + " | ".join(f"{kind} Spearman" for kind in kinds) + " |", "|---|" + "---|" * len(kinds)]
    for k in ks:
        cells = [f"{np.mean(results[kind, k]):.3f} ± {np.std(results[kind, k]):.3f}" for kind in kinds]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", default="256,1024,4096", help="projection dimensions, comma-separated")
    parser.add_argument("--seeds", type=int, default=5, help="projector seeds per k")
    parser.add_argument("--hidden", default="128,64", help="hidden widths of the MLP")
    parser.add_argument("--train", type=int, default=1500, help="training examples")
    parser.add_argument("--test", type=int, default=100, help="test examples")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--ridge", type=float, default=0.1, help="lambda / mean diag(G G^T)")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="where TRAK, the projectors and the exact scores run")
    return parser.parse_args(argv)


def run(argv=None) -> dict:
    args = parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    started = time.perf_counter()
    hidden = tuple(int(w) for w in args.hidden.split(","))
    setup = build(hidden, args.train, args.test, args.data_seed, args.epochs, args.device)
    with torch.no_grad():
        accuracy = float((setup.model(setup.test[0]).argmax(-1) == setup.test[1]).float().mean())
    results = compare(setup, ks, range(args.seeds), args.ridge)
    print(
        f"digits MLP {args.hidden}: grad_dim {setup.grad_dim:,}, {args.train} train / {args.test} test "
        f"examples (test accuracy {accuracy:.3f}), ridge {args.ridge}, {args.seeds} projector seed(s), "
        f"{setup.device}, {time.perf_counter() - started:.0f} s"
    )
    print("Spearman correlation with exact TRAK scores, mean over test examples, mean ± sd over seeds:\n")
    print(table(results, ks))
    return results


if __name__ == "__main__":
    run()
