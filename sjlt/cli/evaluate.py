"""``sjlt evaluate``: how well does each k preserve this data? Measured on a sample of rows.

Measured by :func:`sjlt.metrics.evaluate_sample`. For each k: the distortion of squared pairwise
distances, |‖Sx − Sy‖² / ‖x − y‖² − 1| (median and 99th percentile over all pairs of the
sample), the recall of the exact nearest neighbours
(the share of each row's true neighbours still among its neighbours after projection), and the
eps the Johnson-Lindenstrauss bound guarantees for n = sample size, for comparison.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from .. import __version__
from .._device import resolve_device
from .._memory import device_memory, format_bytes, host_memory
from ..io.atomic import atomic_outputs, check_replaceable
from ..io.formats import expand_inputs, open_source
from ..io.provenance import EVALUATE_WRITER, PLOT_FORMATS
from ..metrics import BYTES_PER_PAIR, DimensionReport, evaluate_sample
from .errors import CLIError


def check_sample_fits(m: int, features: int, dims: list[int], device, requested: int) -> None:
    """Refuses a sample whose m x m distance matrices, or whose projections to the largest k,
    cannot fit, before computing anything."""
    pairs = BYTES_PER_PAIR * m * m + 3 * 8 * m * features
    projections = 12 * m * max(dims)  # float32 projection and its float64 copy
    memories = [host_memory()] + ([device_memory(device)] if device.type == "cuda" else [])
    for memory in memories:
        if memory.available is None or pairs + projections <= memory.available:
            continue
        available = f"{memory.where} has {format_bytes(memory.available)} available"
        if projections > memory.available // 2:
            raise CLIError(
                f"--dims {max(dims):,} needs about {format_bytes(projections)} for the "
                f"projections of {m:,} sampled rows, but {available}; use smaller --dims"
            )
        fitting = math.isqrt(int(memory.available * 0.8) // BYTES_PER_PAIR)
        raise CLIError(
            f"--sample {requested:,} needs about {format_bytes(pairs)} of memory "
            f"(the pairwise distances of {m:,} rows grow as rows²), but {available}; "
            f"use --sample {fitting:,} or fewer"
        )


def load_sample(source, size: int, seed: int) -> np.ndarray:
    """``size`` rows drawn without replacement (all rows if fewer)."""
    count = min(size, source.n_rows)
    rows = np.sort(np.random.default_rng(seed).choice(source.n_rows, size=count, replace=False))
    return source.take_rows(rows)


def format_table(reports: list[DimensionReport], *, neighbors: int, n_samples: int) -> str:
    bound_header = f"JL-bound eps (n={n_samples})"
    lines = [f"{'k':>6}  {'distortion p50':>14}  {'distortion p99':>14}  {f'recall@{neighbors}':>10}  {bound_header}"]
    for r in reports:
        bound = (
            f"{r.jl_bound_eps:.3f}"
            if r.jl_bound_eps is not None
            else f"none (needs k >= {math.ceil(24 * math.log(n_samples))})"
        )
        lines.append(f"{r.k:>6}  {r.distortion_p50:>14.4f}  {r.distortion_p99:>14.4f}  {r.recall:>10.3f}  {bound}")
    return "\n".join(lines)


def check_outputs(args, input_path: Path) -> None:
    """Every output path and format, checked before any work: the directory exists, the plot's
    format is one matplotlib draws, and an existing file follows project's overwrite rule."""
    outputs = []
    if args.json:
        outputs.append(("--json", Path(args.json)))
    if args.plot:
        plot = Path(args.plot)
        if plot.suffix.lstrip(".").lower() not in PLOT_FORMATS:
            raise CLIError(
                f"--plot {args.plot!r}: cannot tell which image to draw from the "
                f"extension {plot.suffix or '(none)'!r}; give a .png, .svg or .pdf path"
            )
        from .plot import require_matplotlib

        require_matplotlib()
        outputs.append(("--plot", plot))
    if len(outputs) == 2 and os.path.abspath(outputs[0][1]) == os.path.abspath(outputs[1][1]):
        raise CLIError(f"--json and --plot name the same file {args.json!r}; give two paths")
    for flag, path in outputs:
        if not path.parent.is_dir():
            raise CLIError(f"{flag} {str(path)!r}: its directory {str(path.parent)!r} does not exist; create it first")
        if path.exists() and os.path.samefile(path, input_path):
            raise CLIError(f"{flag} {str(path)!r} is the INPUT file; choose another path")
        check_replaceable(path, flag, overwrite=args.overwrite)


def run(args) -> int:
    """The ``sjlt evaluate`` command, from parsed arguments."""
    inputs, collection = expand_inputs(args.input)
    if collection:
        raise CLIError(f"sjlt evaluate reads one file; {args.input!r} names {len(inputs)} — pass one of them")
    check_outputs(args, inputs[0])
    device = resolve_device(args.device)
    source = open_source(inputs[0], args.column)
    total = source.n_rows
    check_sample_fits(min(args.sample, total), source.dim or 0, args.dims, device, args.sample)
    sample = load_sample(source, args.sample, args.seed)
    if len(sample) <= args.neighbors:
        raise CLIError(
            f"recall@{args.neighbors} needs more than {args.neighbors} rows, but "
            f"{str(inputs[0])!r} has {total}; use a larger file or a smaller --neighbors"
        )
    bad = np.flatnonzero(~np.isfinite(sample).all(axis=1))
    if bad.size:
        raise CLIError(f"the sample from {str(inputs[0])!r} has {bad.size} rows with NaN or inf; clean the input first")
    x = torch.from_numpy(sample).to(device=device, dtype=torch.float32)
    scatter_k = args.plot_k if args.plot_k is not None else args.dims[len(args.dims) // 2]
    try:
        reports, scatter = evaluate_sample(
            x,
            args.dims,
            seed=args.seed,
            nnz=args.nnz,
            neighbors=args.neighbors,
            scatter_k=scatter_k,
            scatter_seed=args.seed,
        )
    except ValueError as error:  # e.g. every sampled row is identical
        raise CLIError(str(error)) from None
    print(
        f"sjlt evaluate: {len(sample):,} of {total:,} rows of {str(inputs[0])!r} "
        f"({sample.shape[1]} dims), seed {args.seed}"
    )
    print(format_table(reports, neighbors=args.neighbors, n_samples=len(sample)))
    if args.json:
        record = {
            "written_by": EVALUATE_WRITER,
            "sjlt_version": __version__,
            "input": str(inputs[0]),
            "rows": total,
            "sample": len(sample),
            "features": int(sample.shape[1]),
            "seed": args.seed,
            "neighbors": args.neighbors,
            "dims": [asdict(r) for r in reports],
        }
        with atomic_outputs(Path(args.json), overwrite=args.overwrite, role="--json") as (temporary,):
            temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        from .plot import write_report

        write_report(
            Path(args.plot), reports, scatter, neighbors=args.neighbors, n_samples=len(sample), overwrite=args.overwrite
        )
        print(f"sjlt evaluate: wrote {args.plot}", file=sys.stderr)
    return 0
