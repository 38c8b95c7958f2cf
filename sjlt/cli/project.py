"""``sjlt project``: the command over :mod:`sjlt.io.project`, with a progress bar and a summary.

One input file becomes one output file, written crash-safely. A directory or glob of inputs
becomes a directory of outputs with the same file names, each output complete or absent;
``--scheduler`` spreads those files over a Dask cluster (:mod:`sjlt.io.cluster`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import numpy as np

from .._device import resolve_device
from ..io.cluster import project_on_cluster
from ..io.formats import format_of
from ..io.project import (
    Settings,
    batch_rows_for,
    check_disk_space,
    check_memory,
    open_input,
    output_directory,
    plan_outputs,
    project_file,
)
from .progress import progress_bar, summary_line


def run(args) -> int:
    """The ``sjlt project`` command, from parsed arguments."""
    settings = Settings(
        out_features=args.dim,
        seed=args.seed,
        nnz=args.nnz,
        device=args.device,
        batch_rows=args.batch_rows,
        column=args.column,
        dtype=args.dtype,
        allow_nonfinite=args.allow_nonfinite,
        overwrite=args.overwrite,
    )
    pairs, collection = plan_outputs(args.input, args.output, overwrite=args.overwrite)
    # Every input is opened, and every size checked, before any output (or directory) is made.
    device = None if args.scheduler else resolve_device(settings.device)
    total_rows, npy_outputs = 0, []
    for input_path, target in pairs:
        source = open_input(input_path, target, settings)
        output_dtype = np.dtype(settings.dtype or source.dtype)
        total_rows += source.n_rows
        if device is not None:  # on a cluster, each worker checks its own memory
            check_memory(
                source,
                settings.out_features,
                batch_rows_for(settings, source),
                output_dtype,
                device,
                batch_rows_given=settings.batch_rows is not None,
            )
        if format_of(target, "OUTPUT") == "npy":
            npy_outputs.append((target, source.n_rows * settings.out_features * output_dtype.itemsize))
    check_disk_space(npy_outputs)
    started = time.perf_counter()
    with output_directory(Path(args.output)) if collection else contextlib.nullcontext():
        if args.scheduler:
            with progress_bar(len(pairs), quiet=args.quiet) as bar:
                bar.unit = "files"
                results = project_on_cluster(pairs, settings, args.scheduler, on_file=lambda: bar.update(1))
        else:
            with progress_bar(total_rows, quiet=args.quiet) as bar:
                results = [project_file(source, target, settings, on_rows=bar.update) for source, target in pairs]
    seconds = time.perf_counter() - started
    if not args.quiet:
        dropped = sorted({name for result in results for name in result.dropped_columns})
        if dropped:
            print(
                f"sjlt: note: the .npy output keeps only the projections; columns "
                f"{', '.join(dropped)} were not written (use a .parquet OUTPUT to keep them)",
                file=sys.stderr,
            )
        destination = args.output if collection else str(pairs[0][1])
        print(summary_line(results, seconds, destination))
    return 0
