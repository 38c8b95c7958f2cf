"""``sjlt project``: stream files of embeddings through the sparse JL projection.

One input file becomes one output file, written crash-safely (:mod:`.atomic`). A directory or
glob of inputs becomes a directory of outputs with the same file names, each output complete or
absent; ``--scheduler`` spreads those files over a Dask cluster (:mod:`.cluster`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .. import spec
from .._memory import device_memory, format_bytes, host_memory
from .atomic import atomic_outputs, check_replaceable
from .device import resolve_device
from .errors import CLIError
from .io import companion_paths, expand_inputs, format_of, open_sink, open_source
from .pipeline import QUEUE_DEPTH, BufferPool, Prefetcher, WriteBehind
from .progress import FileResult, progress_bar, summary_line
from .projector import Projector, compute_dtype
from .provenance import projection_metadata

#: Input bytes per batch when --batch-rows is not given: large enough to amortise per-batch
#: costs (a kernel launch, a syscall), small enough that the buffer pool stays near 256 MB.
DEFAULT_BATCH_BYTES = 64 << 20


@dataclass(frozen=True)
class Settings:
    """The projection and how to run it; picklable, so Dask workers receive it as is."""

    out_features: int
    seed: int = 0
    nnz: int | None = None
    device: str = "auto"
    batch_rows: int | None = None
    column: str | None = None
    dtype: str | None = None
    allow_nonfinite: bool = False
    overwrite: bool = False


def default_batch_rows(features: int, itemsize: int) -> int:
    return max(1, DEFAULT_BATCH_BYTES // max(1, features * itemsize))


def _batch_rows(settings: Settings, source) -> int:
    return settings.batch_rows or default_batch_rows(source.dim or 1, source.dtype.itemsize)


def plan_outputs(input_spec: str, output_spec: str, *, overwrite: bool) -> tuple[list[tuple[Path, Path]], bool]:
    """(input, output) pairs and whether INPUT named a collection; refuses existing outputs
    unless ``overwrite``, and any output that is its own input."""
    inputs, collection = expand_inputs(input_spec)
    output = Path(output_spec)
    if collection:
        if output.exists() and not output.is_dir():
            raise CLIError(f"INPUT {input_spec!r} names several files, so OUTPUT must be a "
                           f"directory (one output per input), but {output_spec!r} is a file")
        names = [p.name for p in inputs]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise CLIError(f"INPUT {input_spec!r} matches several files named {duplicate!r}; "
                           f"their outputs would collide in OUTPUT: narrow the pattern")
        pairs = [(p, output / p.name) for p in inputs]
    else:
        if output.is_dir():
            output = output / inputs[0].name
        if not output.parent.is_dir():
            raise CLIError(f"the directory of OUTPUT, {str(output.parent)!r}, does not exist; "
                           f"create it first")
        pairs = [(inputs[0], output)]
    for source, target in pairs:
        format_of(source, "INPUT")
        format_of(target, "OUTPUT")
        if target.exists() and os.path.samefile(source, target):
            raise CLIError(f"OUTPUT {str(target)!r} is the INPUT file; sjlt never writes over its "
                           f"input: choose another output path")
        hint = _glob_hint(source)
        # A sibling of INPUT with its suffix is what a glob expansion looks like.
        sibling = source.parent == target.parent and source.suffix.lower() == target.suffix.lower()
        for path in (target, *companion_paths(target)):
            check_replaceable(path, "OUTPUT", overwrite=overwrite, foreign_hint=hint,
                              own_hint=hint if sibling and not collection else "")
    return pairs, collection


def _glob_hint(source: Path) -> str:
    """The likely cause when OUTPUT is an existing file: a shell that expanded an unquoted glob,
    so that INPUT and OUTPUT are two of the matched files."""
    pattern = str(source.parent / f"*{source.suffix}")
    return (f". If you typed an unquoted glob like {pattern}, the shell expanded it and OUTPUT "
            f"is one of the matched files: quote the pattern, '{pattern}'")


def _open_input(input_path: Path, output_path: Path, settings: Settings):
    """The source of ``input_path``. ``--column`` picks the column of a parquet INPUT, or names
    the output column when a .npy INPUT becomes a parquet OUTPUT."""
    if format_of(input_path, "INPUT") == "parquet":
        return open_source(input_path, settings.column)
    if settings.column is not None and format_of(output_path, "OUTPUT") == "npy":
        raise CLIError(f"--column names a parquet column, but INPUT {str(input_path)!r} and "
                       f"OUTPUT {str(output_path)!r} are both .npy; drop --column")
    return open_source(input_path, None)


def _write_failure(error: OSError, output: Path) -> CLIError:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return CLIError(f"no space left on the device while writing OUTPUT {str(output)!r} "
                        f"({error.strerror}); free some space or write to another disk. "
                        f"Nothing was written")
    return CLIError(f"cannot write OUTPUT {str(output)!r}: {error.strerror or error}")


def _stream(source, sink, projector: Projector, pool: BufferPool, batch_rows: int,
            on_rows: Callable[[int], object] | None) -> None:
    reader = Prefetcher(lambda stop: source.batches(batch_rows, pool, stop),
                        discard=lambda batch: pool.release(batch.buffer))
    writer = WriteBehind(sink.write)
    try:
        for batch in reader:
            try:
                projected = projector(batch)
            finally:
                pool.release(batch.buffer)
            writer.submit(projected, batch)
            if on_rows is not None:
                on_rows(len(batch.values))
        writer.finish()
    except BaseException:
        writer.abort()
        raise
    finally:
        reader.close()


def project_file(input_path: Path, output_path: Path, settings: Settings,
                 on_rows: Callable[[int], object] | None = None) -> FileResult:
    """Projects one file into ``output_path``, which appears complete or not at all."""
    started = time.perf_counter()
    input_path, output_path = Path(input_path), Path(output_path)
    source = _open_input(input_path, output_path, settings)
    output_dtype = np.dtype(settings.dtype) if settings.dtype else source.dtype
    nnz = spec.resolve_nnz(settings.nnz, settings.out_features)
    device = resolve_device(settings.device)
    batch_rows = _batch_rows(settings, source)
    check_memory(source, settings.out_features, batch_rows, output_dtype, device,
                 batch_rows_given=settings.batch_rows is not None)
    column = source.column if source.column is not None else settings.column
    metadata = projection_metadata(
        seed=settings.seed, out_features=settings.out_features, nnz=nnz, input_path=input_path,
        input_shape=source.shape, input_dtype=source.dtype, output_dtype=output_dtype, column=column)
    projector = Projector(settings.out_features, seed=settings.seed, nnz=nnz, device=device,
                          input_dtype=source.dtype, output_dtype=output_dtype,
                          allow_nonfinite=settings.allow_nonfinite, source_name=str(input_path))
    pool = BufferPool(QUEUE_DEPTH + 2, source.batch_buffer_bytes(batch_rows),
                      pinned=device.type == "cuda")
    try:
        with atomic_outputs(output_path, *companion_paths(output_path),
                            overwrite=settings.overwrite) as temporaries:
            sink = open_sink(output_path, temporaries, source, out_features=settings.out_features,
                             dtype=output_dtype, column=column, metadata=metadata)
            try:
                _stream(source, sink, projector, pool, batch_rows, on_rows)
                sink.close()
            except BaseException:
                sink.abort()
                raise
    except OSError as error:
        raise _write_failure(error, output_path) from None
    return FileResult(rows=source.n_rows, in_features=source.dim,
                      out_features=settings.out_features, bytes_read=source.nbytes,
                      seconds=time.perf_counter() - started,
                      dropped_columns=tuple(source.carried_columns)
                      if format_of(output_path, "OUTPUT") == "npy" else ())


def check_memory(source, out_features: int, batch_rows: int, output_dtype, device, *,
                 batch_rows_given: bool) -> None:
    """Refuses a batch plan that cannot fit in memory, before anything is allocated.

    Host memory holds the buffer pool (QUEUE_DEPTH + 2 input batches), a compute-dtype copy of
    the batch, and up to QUEUE_DEPTH + 3 output batches (being computed, cast, queued, written);
    a GPU holds the input batch and two output batches (compute and output dtype).
    """
    rows, dim = min(batch_rows, max(source.n_rows, 1)), source.dim or 0
    compute = compute_dtype(source.dtype, output_dtype).itemsize
    in_row = dim * source.dtype.itemsize
    out_row = out_features * max(compute, np.dtype(output_dtype).itemsize)
    plans = [(host_memory(), (QUEUE_DEPTH + 2) * in_row + dim * compute + (QUEUE_DEPTH + 3) * out_row)]
    if device.type == "cuda":
        plans.append((device_memory(device), dim * compute + 2 * out_row))
    for memory, per_row in plans:
        if memory.available is None or rows * per_row <= memory.available:
            continue
        needed = format_bytes(rows * per_row)
        available = f"{memory.where} has {format_bytes(memory.available)} available"
        fitting = int(memory.available * 0.8) // per_row
        if fitting < 1:
            raise CLIError(f"--dim {out_features:,} needs {format_bytes(per_row)} per row of "
                           f"{source.path.name!r} ({needed} for batches of {rows:,} rows), but "
                           f"{available}; use a smaller --dim")
        batch = "--batch-rows" if batch_rows_given else "batches (default about 64 MB of input)"
        raise CLIError(f"projecting {source.path.name!r} to --dim {out_features:,} in {batch} of "
                       f"{rows:,} rows needs about {needed} of memory, but {available}; use "
                       f"--batch-rows {fitting:,} or fewer (or a smaller --dim)")


def check_disk_space(npy_outputs: list[tuple[Path, int]]) -> None:
    """Refuses .npy outputs, given as (path, bytes), larger than the free space of their file
    system, before writing. (A parquet output's compressed size is not known ahead.)"""
    needed: dict[Path, int] = {}
    for target, size in npy_outputs:
        needed[target.parent] = needed.get(target.parent, 0) + size
    for directory, size in needed.items():
        probe = directory
        while not probe.exists():  # a collection's OUTPUT directory is not created yet
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if size > free:
            raise CLIError(f"the output needs {format_bytes(size)} in {str(directory)!r} but its "
                           f"file system has {format_bytes(free)} free; free some space, write "
                           f"elsewhere, or use a smaller --dim (or --dtype float16)")


@contextlib.contextmanager
def output_directory(path: Path) -> Iterator[None]:
    """Creates the directory OUTPUT of a collection (and missing parents) for the block; on
    failure, removes the directories this run created if they are still empty."""
    created = []
    for directory in [path, *path.parents]:
        if directory.exists():
            break
        created.append(directory)
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for directory in created:  # deepest first; rmdir removes only empty directories
            try:
                directory.rmdir()
            except OSError:
                break
        raise


def run(args) -> int:
    """The ``sjlt project`` command, from parsed arguments."""
    settings = Settings(out_features=args.dim, seed=args.seed, nnz=args.nnz, device=args.device,
                        batch_rows=args.batch_rows, column=args.column, dtype=args.dtype,
                        allow_nonfinite=args.allow_nonfinite, overwrite=args.overwrite)
    pairs, collection = plan_outputs(args.input, args.output, overwrite=args.overwrite)
    # Every input is opened, and every size checked, before any output (or directory) is made.
    device = None if args.scheduler else resolve_device(settings.device)
    total_rows, npy_outputs = 0, []
    for input_path, target in pairs:
        source = _open_input(input_path, target, settings)
        output_dtype = np.dtype(settings.dtype or source.dtype)
        total_rows += source.n_rows
        if device is not None:  # on a cluster, each worker checks its own memory
            check_memory(source, settings.out_features, _batch_rows(settings, source), output_dtype,
                         device, batch_rows_given=settings.batch_rows is not None)
        if format_of(target, "OUTPUT") == "npy":
            npy_outputs.append((target, source.n_rows * settings.out_features * output_dtype.itemsize))
    check_disk_space(npy_outputs)
    started = time.perf_counter()
    with output_directory(Path(args.output)) if collection else contextlib.nullcontext():
        if args.scheduler:
            from .cluster import project_on_cluster

            results = project_on_cluster(pairs, settings, args.scheduler, quiet=args.quiet)
        else:
            with progress_bar(total_rows, quiet=args.quiet) as bar:
                results = [project_file(source, target, settings, on_rows=bar.update)
                           for source, target in pairs]
    seconds = time.perf_counter() - started
    if not args.quiet:
        dropped = sorted({name for result in results for name in result.dropped_columns})
        if dropped:
            print(f"sjlt: note: the .npy output keeps only the projections; columns "
                  f"{', '.join(dropped)} were not written (use a .parquet OUTPUT to keep them)",
                  file=sys.stderr)
        destination = args.output if collection else str(pairs[0][1])
        print(summary_line(results, seconds, destination))
    return 0
