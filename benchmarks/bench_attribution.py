"""Per-example gradient projection for data attribution on a 10^8-parameter model (GPU).

The model is GPT-2 small (``transformers.GPT2LMHeadModel(GPT2Config())``, 124M parameters,
random weights, no download), eager attention; each example is a sequence of ``--seq`` random
tokens with its language-model loss.

(a) **Featurize step vs projection.** TRAK's featurize step computes the per-example gradients of
    a batch with ``torch.func`` (``vmap`` over ``grad``, all parameters at once, a dict of
    (batch, ...) tensors), then projects them. The script times the gradient computation and
    ``SJLTProjector.project`` of that dict at each k (one grouped launch over all parameters, with
    their column offsets), beside one ``sparse_jl`` call per parameter, for float32 gradients
    (exact, and under ``torch.set_float32_matmul_precision("high")``) and a bfloat16 model, and
    reports the projection's share of the step: TRAK's goal is under 10%. Two ways: the
    projection timed alone (synchronised before and after, so its host work before the first
    launch counts in full), and its span in the step's own GPU timeline (CUDA events recorded
    before the gradients, after them and after the projection, with no synchronisation between:
    as in TRAK's loop, the projection's host work then overlaps the gradients still running, and
    any GPU idle time waiting on it still counts).
(c) **TRAKer end to end.** ``TRAKer.featurize`` as TRAK runs it, on GPT-2 small with a
    two-class head (``GPT2ForSequenceClassification``, 124M parameters) and TRAK's own
    ``text_classification`` model output, with ``SJLTProjector``: per step the per-example
    gradients of the margins (``vmap`` over ``grad``), the projection, the float16 copy of the
    features to the host, the out-to-loss weights (a batched forward) and TRAK's metadata file. The
    step is timed whole (synchronised before and after), the projection by CUDA events recorded
    around ``project`` (its span in the step's GPU timeline); then ``finalize_features`` and
    ``score`` run once on the featurized examples, so the pipeline is checked end to end.
(b) **Memory.** ``sjlt.attribution.project_per_example_gradients`` (one group of parameters at a
    time, ``--budget-mib`` of per-example gradients at once) against the naive path (all
    per-example gradients, flattened into (batch, 124M) with ``torch.cat``, then projected): peak
    GPU memory above the model's and time, per batch size; a run out of memory is reported as OOM.

CUDA times are medians of ``--repeats`` runs after a warm-up, synchronised around each run. The
script prints markdown tables and writes them to ``--out``.

    python benchmarks/bench_attribution.py --out bench_attribution.md            # GPU, ~3 min
    python benchmarks/bench_attribution.py --smoke --out /tmp/attribution.md      # CPU, tiny GPT-2

Needs transformers (and sjlt installed: ``pip install --no-deps --no-build-isolation -e .``); (c)
needs traker (``seeded-sjlt[attribution]``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

import sjlt
from sjlt.attribution import SJLTProjector, project_gradient_blocks, project_per_example_gradients

#: (label, model dtype, torch.get_float32_matmul_precision()) of the featurize table's rows.
VARIANTS = {
    "float32": (torch.float32, "highest"),
    "float32-high": (torch.float32, "high"),
    "bfloat16": (torch.bfloat16, "highest"),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny GPT-2 (1 layer, width 32) on CPU with tiny sizes: checks the script",
    )
    parser.add_argument("--device", default=None, help="default: cuda (cpu with --smoke)")
    parser.add_argument("--batches", default="16,32", help="examples per featurize step (a)")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"gradient dtypes and float32 precisions of (a): {list(VARIANTS)}",
    )
    parser.add_argument("--seq", type=int, default=128, help="tokens per example")
    parser.add_argument("--ks", default="2048,4096,8192", help="projection dimensions for (a)")
    parser.add_argument("--memory-batches", default="16,64", help="batch sizes for (b)")
    parser.add_argument("--memory-k", type=int, default=4096, help="projection dimension for (b)")
    parser.add_argument(
        "--budget-mib",
        type=int,
        default=4096,
        help="per-example gradient memory of project_per_example_gradients in (b)",
    )
    parser.add_argument(
        "--sections", default="featurize,memory", help="tables to make: featurize (a), memory (b), trak (c)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.device = args.device or "cpu"
        args.batches, args.seq, args.ks, args.memory_batches, args.memory_k = "3", 8, "16,32", "2,3", 16
        args.budget_mib, args.repeats = 1, 1
    args.device = torch.device(args.device or "cuda")
    args.ks = [int(k) for k in args.ks.split(",")]
    args.batches = [int(b) for b in args.batches.split(",")]
    args.variants = args.variants.split(",")
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants takes {list(VARIANTS)}, got {sorted(unknown)}")
    args.memory_batches = [int(b) for b in args.memory_batches.split(",")]
    args.sections = args.sections.split(",")
    if not args.sections or set(args.sections) - set(SECTIONS):
        parser.error(f"--sections takes {', '.join(SECTIONS)}, got {','.join(args.sections)}")
    return args


def gpt2_config(smoke: bool, **extra):
    from transformers import GPT2Config

    tiny = dict(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16, bos_token_id=0, eos_token_id=0)
    config = GPT2Config(**(tiny if smoke else {}), **extra)
    # Eager attention: vmap has batching rules for its ops (the fused attention backward has none).
    config._attn_implementation = "eager"
    return config


def build_model(smoke: bool, device: torch.device) -> torch.nn.Module:
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(gpt2_config(smoke)).to(device).eval()


class Classifier(torch.nn.Module):
    """GPT-2 with a two-class head, returning the logits: the model TRAK's ``text_classification``
    output calls (with input ids, token type ids and an attention mask)."""

    def __init__(self, smoke: bool):
        from transformers import GPT2ForSequenceClassification

        super().__init__()
        # Padding id 0, which the examples never hold: the head reads each sequence's last token.
        self.model = GPT2ForSequenceClassification(gpt2_config(smoke, num_labels=2, pad_token_id=0))

    def forward(self, input_ids, token_type_ids, attention_mask):
        return self.model(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask).logits


def lm_loss(model, tokens):
    """One example's language-model loss (tokens has no batch dimension)."""
    return model(input_ids=tokens[None], labels=tokens[None]).loss


def all_gradients(model, tokens) -> dict[str, torch.Tensor]:
    """What TRAK's gradient computer does: per-example gradients of every parameter at once."""
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss_of(params, example):
        return functional_call(model, params, (), {"input_ids": example[None], "labels": example[None]}).loss

    return vmap(grad(loss_of), in_dims=(None, 0))(params, tokens)


def timed(fn, device: torch.device, repeats: int):
    """(median seconds over repeats after one warm-up, last result)."""
    result = fn()
    seconds = []
    for _ in range(repeats):
        del result
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def step_spans(gradients, project, device: torch.device, repeats: int):
    """(median ms of the projection's span in a featurize step's GPU timeline, its median share of
    the step): events before the gradients, after them and after the projection, no
    synchronisation in between. None off CUDA."""
    if device.type != "cuda":
        return None
    spans, shares = [], []
    for index in range(repeats + 1):  # the first is a warm-up
        torch.cuda.synchronize(device)
        start, middle, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        grads = gradients()
        middle.record()
        project(grads)
        end.record()
        end.synchronize()
        grads = None
        if index:
            spans.append(middle.elapsed_time(end))
            shares.append(spans[-1] / start.elapsed_time(end))
    return statistics.median(spans), statistics.median(shares)


def copy_bandwidth(device: torch.device) -> float | None:
    """Bytes per second of a 1 GiB device-to-device copy (read + write), median of 5, or None off CUDA."""
    if device.type != "cuda":
        return None
    src = torch.randn(2**28, device=device)
    dst = torch.empty_like(src)
    seconds, _ = timed(lambda: dst.copy_(src), device, 5)
    return 2 * src.numel() * 4 / seconds


def featurize_table(model, args) -> str:
    grad_dim = sum(p.numel() for p in model.parameters())
    bandwidth = copy_bandwidth(args.device)
    lines = [
        f"(a) featurize step: per-example gradients of {args.seq}-token examples (torch.func, all "
        f"{grad_dim:,} parameters, a dict of {len(list(model.parameters()))} tensors), then "
        f"`SJLTProjector.project` of the dict: one grouped launch (`sparse_jl_blocks`), and, for "
        f"comparison, one `sparse_jl` per parameter (`project_gradient_blocks`). Floor: the "
        f"gradients' bytes over the measured copy bandwidth"
        + (f" ({bandwidth / 1e9:.0f} GB/s)" if bandwidth else "")
        + "; share: projection / (gradients + projection), TRAK's goal under 10%. Alone: timed with a "
        "synchronisation before and after. In the step: the projection's span in the step's GPU timeline "
        "(events after the gradients and after the projection, none between), and its median share of the step.",
        "",
        "| gradients | batch | gradients ms | k | alone ms | % of floor | share | in the step ms | share "
        "| per parameter ms | share |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label in args.variants:
        dtype, precision = VARIANTS[label]
        typed = model.to(dtype)
        for batch in args.batches:
            tokens = torch.randint(0, model.config.vocab_size, (batch, args.seq), device=args.device)
            previous = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision(precision)  # the gradients' matmuls follow it too
            try:
                gradient_seconds, grads = timed(lambda: all_gradients(typed, tokens), args.device, args.repeats)
                floor = sum(g.numel() * g.element_size() for g in grads.values()) / bandwidth if bandwidth else None
                for k in args.ks:
                    projector = SJLTProjector(grad_dim, k, seed=0, device=args.device)
                    seconds, _ = timed(lambda: projector.project(grads, 0), args.device, args.repeats)
                    grads = blocks = None  # the step makes its own gradients: one set alive at a time
                    in_step = step_spans(
                        lambda: all_gradients(typed, tokens),
                        lambda g: projector.project(g, 0),
                        args.device,
                        args.repeats,
                    )
                    grads = all_gradients(typed, tokens)
                    blocks = projector._blocks(grads)
                    per_parameter, _ = timed(
                        lambda: project_gradient_blocks(blocks, k, seed=0, device=args.device),
                        args.device,
                        args.repeats,
                    )
                    lines.append(
                        f"| {label} | {batch} | {gradient_seconds * 1e3:.1f} | {k} | {seconds * 1e3:.2f} | "
                        + (f"{100 * floor / seconds:.0f}%" if floor else "n/a")
                        + f" | {100 * seconds / (seconds + gradient_seconds):.1f}% | "
                        + (f"{in_step[0]:.2f} | {100 * in_step[1]:.1f}%" if in_step else "n/a | n/a")
                        + f" | {per_parameter * 1e3:.1f} | "
                        f"{100 * per_parameter / (per_parameter + gradient_seconds):.1f}% |"
                    )
            finally:
                torch.set_float32_matmul_precision(previous)
            grads = blocks = None  # before the next batch's gradients
    model.to(torch.float32)
    return "\n".join(lines)


def _peak(fn, device: torch.device):
    """(seconds, peak bytes above what was allocated before, or None where memory is not measured)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    start = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else None
    del result
    return seconds, peak


def naive_projection(model, tokens, k):
    grads = all_gradients(model, tokens)
    flat = torch.cat([g.reshape(tokens.shape[0], -1) for g in grads.values()], 1)
    del grads
    return sjlt.sparse_jl(flat, k, seed=0)


def memory_table(model, args) -> str:
    budget = args.budget_mib << 20
    lines = [
        f"(b) project_per_example_gradients (budget {args.budget_mib} MiB of per-example gradients) against "
        f"all gradients, flattened, then projected; k = {args.memory_k}, {args.seq} tokens; peak memory above "
        f"the model's",
        "",
        "| batch | ours GiB | ours s | naive GiB | naive s |",
        "|---|---|---|---|---|",
    ]

    def fmt(measured):
        if measured == "OOM":
            return "OOM", "–"
        seconds, peak = measured
        return ("n/a" if peak is None else f"{peak / 2**30:.2f}"), f"{seconds:.2f}"

    for batch in args.memory_batches:
        tokens = torch.randint(0, model.config.vocab_size, (batch, args.seq), device=args.device)
        row = []
        for fn in (
            lambda: project_per_example_gradients(
                model, lm_loss, tokens, args.memory_k, seed=0, max_gradient_bytes=budget
            ),
            lambda: naive_projection(model, tokens, args.memory_k),
        ):
            try:
                row += fmt(_peak(fn, args.device))
            except torch.cuda.OutOfMemoryError:
                row += fmt("OOM")
            if args.device.type == "cuda":
                torch.cuda.empty_cache()
        lines.append(f"| {batch} | " + " | ".join(row) + " |")
    return "\n".join(lines)


class EventTimedProjector(SJLTProjector):
    """``SJLTProjector`` that records CUDA events around each ``project``, with no synchronisation:
    the projection's span in the step's GPU timeline."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.spans = []

    def project(self, grads, model_id):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        projected = super().project(grads, model_id)
        end.record()
        self.spans.append((start, end))
        return projected


def classification_batch(batch: int, seq: int, vocab_size: int, device: torch.device):
    """(input ids, token type ids, attention mask, labels) of random sequences, as TRAK's text
    classification output takes them; ids from 1, since 0 pads."""
    ids = torch.randint(1, vocab_size, (batch, seq), device=device)
    return ids, torch.zeros_like(ids), torch.ones_like(ids), torch.randint(0, 2, (batch,), device=device)


def featurize_step(traker, examples, projector, device: torch.device) -> tuple:
    """One ``TRAKer.featurize`` of ``examples``: (its ms, synchronised before and after; on CUDA also
    the ms from the step's start to the projection's and the projection's span)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.Event(enable_timing=True)
        before.record()
    started = time.perf_counter()
    traker.featurize(batch=examples, num_samples=len(examples[0]))
    if not cuda:
        return ((time.perf_counter() - started) * 1e3,)
    torch.cuda.synchronize(device)
    step_ms = (time.perf_counter() - started) * 1e3
    start, end = projector.spans[-1]
    return step_ms, before.elapsed_time(start), start.elapsed_time(end)


def trak_table(_model, args) -> str:
    import logging
    import tempfile

    from trak import TRAKer

    torch.manual_seed(0)
    model = Classifier(args.smoke).to(args.device).eval()
    grad_dim = sum(p.numel() for p in model.parameters())
    vocab_size = model.model.config.vocab_size
    lines = [
        f"(c) TRAKer end to end: `TRAKer.featurize` of {args.seq}-token examples on GPT-2 with a two-class "
        f"head ({grad_dim:,} parameters), TRAK's `text_classification` output, float16 features, `SJLTProjector`; "
        "one warm-up step, then the median of the timed ones (each synchronised before and after). Gradients and "
        "projection: spans in the step's GPU timeline (CUDA events before the step, at the start and the end of "
        "`project`). Share: projection / featurize step, TRAK's goal under 10%. Then `finalize_features` and one "
        "`score` of a batch of targets; scores: whether all are finite.",
        "",
        "| gradients | batch | k | featurize step ms | gradients ms | projection ms | share | scores |",
        "|---|---|---|---|---|---|---|---|",
    ]
    timed_steps = args.repeats
    for label in args.variants:
        dtype, precision = VARIANTS[label]
        typed = model.to(dtype)
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(precision)
        try:
            for batch in args.batches:
                for k in args.ks:
                    cuda = args.device.type == "cuda"
                    projector = (EventTimedProjector if cuda else SJLTProjector)(
                        grad_dim, k, seed=0, device=args.device
                    )
                    timed = []
                    with tempfile.TemporaryDirectory() as save_dir:
                        traker = TRAKer(
                            model=typed,
                            task="text_classification",
                            train_set_size=batch * (timed_steps + 1),
                            projector=projector,
                            save_dir=save_dir,
                            device=str(args.device),
                            logging_level=logging.ERROR,
                        )
                        traker.load_checkpoint(typed.state_dict(), model_id=0)
                        for step in range(timed_steps + 1):  # the first is a warm-up
                            examples = classification_batch(batch, args.seq, vocab_size, args.device)
                            timings = featurize_step(traker, examples, projector, args.device)
                            if step:
                                timed.append(timings)
                        traker.finalize_features()
                        traker.start_scoring_checkpoint(
                            exp_name="targets", checkpoint=typed.state_dict(), model_id=0, num_targets=batch
                        )
                        targets = classification_batch(batch, args.seq, vocab_size, args.device)
                        traker.score(batch=targets, num_samples=batch)
                        scores = np.asarray(traker.finalize_scores(exp_name="targets"), dtype=np.float64)
                    step_ms, *spans = (statistics.median(column) for column in zip(*timed))
                    timings = (
                        f"{spans[0]:.1f} | {spans[1]:.2f} | {100 * spans[1] / step_ms:.1f}%"
                        if spans
                        else "n/a | n/a | n/a"
                    )
                    finite = (
                        "finite"
                        if scores.shape == (batch * (timed_steps + 1), batch) and np.isfinite(scores).all()
                        else "NOT FINITE"
                    )
                    lines.append(f"| {label} | {batch} | {k} | {step_ms:.1f} | {timings} | {finite} |")
        finally:
            torch.set_float32_matmul_precision(previous)
    return "\n".join(lines)


#: The tables, in the order they are printed.
SECTIONS = {"featurize": featurize_table, "memory": memory_table, "trak": trak_table}


def main(argv=None) -> str:
    args = parse_args(argv)
    model = build_model(args.smoke, args.device)
    where = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else platform.processor() or "CPU"
    import transformers

    header = (
        f"GPT-2{' (tiny, smoke test)' if args.smoke else ''}, random weights; {where}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, sjlt {sjlt.__version__}; {date.today()}; "
        f"`python {' '.join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])])}`"
    )
    tables = [SECTIONS[name](model, args) for name in SECTIONS if name in args.sections]
    report = "\n\n".join([header, *tables]) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")
    return report


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
