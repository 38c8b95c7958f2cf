"""A small CPU training loop with sjlt.nn.SparseJL and sjlt.nn.SeededDropout on scikit-learn's digits.

Each 8x8 digit (64 pixels) is expanded with its pairwise pixel products p_i * p_j, i <= j
(64 + 2080 = 2144 features), which a SparseJL module sketches down to 256; an MLP with SeededDropout classifies the
sketch. Neither sjlt module has parameters: the projection is fixed by its seed, and each dropout
call draws a fresh seed from torch's default generator, regenerating the mask in the backward
instead of storing it. So ``torch.manual_seed`` alone makes the whole run reproducible: the
weights' initialisation, the data split and shuffling, and every dropout mask.

    python examples/train_loop.py --epochs 5 --seed 0

Runs in seconds on a CPU; prints the training loss and test accuracy of each epoch.
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits

import sjlt


class SketchedPairwiseMLP(torch.nn.Module):
    """Pixels and their pairwise products -> SparseJL sketch -> Linear, ReLU, SeededDropout, Linear."""

    def __init__(
        self, pixels: int, sketch_dim: int, hidden: int, classes: int, *, projection_seed: int, dropout: float
    ):
        super().__init__()
        self.register_buffer("pairs", torch.triu_indices(pixels, pixels), persistent=False)
        self.sketch = sjlt.nn.SparseJL(pixels + self.pairs.shape[1], sketch_dim, seed=projection_seed)
        self.classifier = torch.nn.Sequential(
            torch.nn.Linear(sketch_dim, hidden),
            torch.nn.ReLU(),
            sjlt.nn.SeededDropout(dropout),
            torch.nn.Linear(hidden, classes),
        )

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        pairwise = pixels[:, self.pairs[0]] * pixels[:, self.pairs[1]]
        return self.classifier(self.sketch(torch.cat([pixels, pairwise], dim=1)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--sketch-dim", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed for the whole run")
    parser.add_argument("--projection-seed", type=int, default=1234, help="seed of the SparseJL matrix")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "sketch_dim", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def run(argv=None) -> dict:
    """Trains and returns {"losses": mean training loss per epoch, "accuracies": test accuracy per epoch}."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    digits = load_digits()
    images = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # pixel values are 0..16
    labels = torch.tensor(digits.target)
    order = torch.randperm(len(labels))
    test_size = len(labels) // 5
    test, train = order[:test_size], order[test_size:]

    model = SketchedPairwiseMLP(
        images.shape[1], args.sketch_dim, args.hidden, 10, projection_seed=args.projection_seed, dropout=args.dropout
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses, accuracies = [], []
    for epoch in range(args.epochs):
        model.train()
        total, seen = 0.0, 0
        for batch in train[torch.randperm(len(train))].split(args.batch_size):
            loss = torch.nn.functional.cross_entropy(model(images[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
            seen += len(batch)
        model.eval()
        with torch.no_grad():
            accuracy = (model(images[test]).argmax(1) == labels[test]).float().mean().item()
        losses.append(total / seen)
        accuracies.append(accuracy)
        print(f"epoch {epoch + 1}: training loss {losses[-1]:.4f}, test accuracy {accuracy:.3f}")
    return {"losses": losses, "accuracies": accuracies}


if __name__ == "__main__":
    run()
