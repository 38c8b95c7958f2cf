"""Streaming files of embeddings through the sparse JL projection (what ``sjlt project`` runs).

One input file becomes one output file, written crash-safely (:mod:`.atomic`) with its
provenance record (:mod:`.provenance`). :func:`plan_outputs` turns a directory or glob of inputs
into a directory of outputs with the same file names, each output complete or absent;
:mod:`.cluster` spreads those files over a Dask cluster. Every size is checked before anything
is allocated or written (:func:`check_memory`, :func:`check_disk_space`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import spec
from .._device import resolve_device
from .._memory import device_memory, format_bytes, host_memory
from ..functional import sparse_jl
from .atomic import atomic_outputs, check_replaceable
from .errors import FileProjectionError
from .formats import companion_paths, expand_inputs, format_of, open_sink, open_source
from .pipeline import QUEUE_DEPTH, Batch, BufferPool, Prefetcher, WriteBehind
from .provenance import projection_metadata
from .rows import STREAM_DEPTH, DeviceStream, compute_dtype, pinned_bytes, tensor_view, torch_dtype

#: Input bytes per batch when --batch-rows is not given: large enough to amortise per-batch
#: costs (a kernel launch, a syscall), small enough that the buffer pool stays near 256 MB.
DEFAULT_BATCH_BYTES = 64 << 20


@dataclass(frozen=True)
class Settings:
    """The projection and how to run it; picklable, so Dask workers receive it as is.

    ``device``: see :mod:`sjlt._device`. ``overwrite``: replace an existing output only if sjlt
    wrote it (:func:`~.atomic.check_replaceable`); other files are never replaced.
    """

    out_features: int
    seed: int = 0
    nnz: int | None = None
    device: str = "auto"
    batch_rows: int | None = None
    column: str | None = None
    dtype: str | None = None
    allow_nonfinite: bool = False
    overwrite: bool = False


@dataclass(frozen=True)
class FileResult:
    """What projecting one file did: rows and widths, input bytes read, seconds taken."""

    rows: int
    in_features: int | None
    out_features: int
    bytes_read: int
    seconds: float
    dropped_columns: tuple[str, ...] = ()  # input columns a .npy output could not keep


def default_batch_rows(features: int, itemsize: int) -> int:
    return max(1, DEFAULT_BATCH_BYTES // max(1, features * itemsize))


def batch_rows_for(settings: Settings, source) -> int:
    return settings.batch_rows or default_batch_rows(source.dim or 1, source.dtype.itemsize)


def plan_outputs(input_spec: str, output_spec: str, *, overwrite: bool) -> tuple[list[tuple[Path, Path]], bool]:
    """(input, output) pairs and whether INPUT named a collection; refuses existing outputs
    unless ``overwrite``, and any output that is its own input."""
    inputs, collection = expand_inputs(input_spec)
    output = Path(output_spec)
    if collection:
        if output.exists() and not output.is_dir():
            raise FileProjectionError(
                f"INPUT {input_spec!r} names several files, so OUTPUT must be a "
                f"directory (one output per input), but {output_spec!r} is a file"
            )
        names = [p.name for p in inputs]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise FileProjectionError(
                f"INPUT {input_spec!r} matches several files named {duplicate!r}; "
                f"their outputs would collide in OUTPUT: narrow the pattern"
            )
        pairs = [(p, output / p.name) for p in inputs]
    else:
        if output.is_dir():
            output = output / inputs[0].name
        if not output.parent.is_dir():
            raise FileProjectionError(
                f"the directory of OUTPUT, {str(output.parent)!r}, does not exist; create it first"
            )
        pairs = [(inputs[0], output)]
    for source, target in pairs:
        format_of(source, "INPUT")
        format_of(target, "OUTPUT")
        if target.exists() and os.path.samefile(source, target):
            raise FileProjectionError(
                f"OUTPUT {str(target)!r} is the INPUT file; sjlt never writes over its "
                f"input: choose another output path"
            )
        hint = _glob_hint(source)
        # A sibling of INPUT with its suffix is what a glob expansion looks like.
        sibling = source.parent == target.parent and source.suffix.lower() == target.suffix.lower()
        for path in (target, *companion_paths(target)):
            check_replaceable(
                path,
                "OUTPUT",
                overwrite=overwrite,
                foreign_hint=hint,
                own_hint=hint if sibling and not collection else "",
            )
    return pairs, collection


def _glob_hint(source: Path) -> str:
    """The likely cause when OUTPUT is an existing file: a shell that expanded an unquoted glob,
    so that INPUT and OUTPUT are two of the matched files."""
    pattern = str(source.parent / f"*{source.suffix}")
    return (
        f". If you typed an unquoted glob like {pattern}, the shell expanded it and OUTPUT "
        f"is one of the matched files: quote the pattern, '{pattern}'"
    )


def open_input(input_path: Path, output_path: Path, settings: Settings):
    """The source of ``input_path``. ``--column`` picks the column of a parquet INPUT, or names
    the output column when a .npy INPUT becomes a parquet OUTPUT."""
    if format_of(input_path, "INPUT") == "parquet":
        return open_source(input_path, settings.column)
    if settings.column is not None and format_of(output_path, "OUTPUT") == "npy":
        raise FileProjectionError(
            f"--column names a parquet column, but INPUT {str(input_path)!r} and "
            f"OUTPUT {str(output_path)!r} are both .npy; drop --column"
        )
    return open_source(input_path, None)


def _write_failure(error: OSError, output: Path) -> FileProjectionError:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return FileProjectionError(
            f"no space left on the device while writing OUTPUT {str(output)!r} "
            f"({error.strerror}); free some space or write to another disk. "
            f"Nothing was written"
        )
    return FileProjectionError(f"cannot write OUTPUT {str(output)!r}: {error.strerror or error}")


def _stream(
    source,
    sink,
    settings: Settings,
    nnz: int,
    device,
    output_dtype: np.dtype,
    pool: BufferPool,
    batch_rows: int,
    on_rows: Callable[[int], object] | None,
) -> None:
    """Reads, projects (:class:`~.rows.DeviceStream`) and writes every batch, the three
    overlapping; a batch's pool buffer is given back once its projection is checked."""
    compute, output = torch_dtype(compute_dtype(source.dtype, output_dtype)), torch_dtype(output_dtype)
    projector = DeviceStream(
        lambda x: sparse_jl(x.to(compute), settings.out_features, seed=settings.seed, nnz=nnz).to(output), device
    )
    reader = Prefetcher(
        lambda stop: source.batches(batch_rows, pool, stop), discard=lambda batch: pool.release(batch.buffer)
    )
    writer = WriteBehind(sink.write)

    def write(finished) -> None:
        for batch, projected, finite in finished:
            try:
                projected = projected.numpy()
                if not (finite or settings.allow_nonfinite):
                    check_finite(batch, projected, str(source.path))
            finally:
                pool.release(batch.buffer)
            writer.submit(projected, batch)
            if on_rows is not None:
                on_rows(len(batch.values))

    try:
        for batch in reader:
            write(projector.submit(tensor_view(batch.values), batch))
        write(projector.finish())
        writer.finish()
    except BaseException:
        writer.abort()
        raise
    finally:
        reader.close()


def check_finite(batch: Batch, projected: np.ndarray, source_name: str) -> None:
    """Raises for a batch whose projection holds NaN or inf, naming the first bad input row.

    A NaN or inf in a row always makes some output of that row non-finite, so checking the
    (narrower) output finds every bad input row; the input is only scanned to name it.
    """
    bad_outputs = ~np.isfinite(projected).all(axis=1)
    if not bad_outputs.any():
        return
    bad_inputs = np.flatnonzero(~np.isfinite(batch.values).all(axis=1))
    if bad_inputs.size:
        row = batch.start + int(bad_inputs[0])
        raise FileProjectionError(
            f"row {row} of INPUT {source_name!r} holds NaN or inf (found in batch "
            f"{batch.index + 1}, rows {batch.start}-{batch.start + len(batch.values) - 1}); "
            f"clean the input, or pass --allow-nonfinite to write non-finite projections"
        )
    row = batch.start + int(np.flatnonzero(bad_outputs)[0])
    raise FileProjectionError(
        f"the projection of row {row} of INPUT {source_name!r} overflows "
        f"{projected.dtype}; pass --dtype float32 for a wider output"
    )


def project_file(
    input_path: Path, output_path: Path, settings: Settings, on_rows: Callable[[int], object] | None = None
) -> FileResult:
    """Projects one file into ``output_path``, which appears complete or not at all."""
    started = time.perf_counter()
    input_path, output_path = Path(input_path), Path(output_path)
    source = open_input(input_path, output_path, settings)
    output_dtype = np.dtype(settings.dtype) if settings.dtype else source.dtype
    nnz = spec.resolve_nnz(settings.nnz, settings.out_features)
    device = resolve_device(settings.device)
    batch_rows = batch_rows_for(settings, source)
    check_memory(
        source,
        settings.out_features,
        batch_rows,
        output_dtype,
        device,
        batch_rows_given=settings.batch_rows is not None,
    )
    column = source.column if source.column is not None else settings.column
    metadata = projection_metadata(
        seed=settings.seed,
        out_features=settings.out_features,
        nnz=nnz,
        input_path=input_path,
        input_shape=source.shape,
        input_dtype=source.dtype,
        output_dtype=output_dtype,
        column=column,
    )
    # On a GPU, batches are read straight into page-locked buffers: no staging copy.
    allocate = pinned_bytes if device.type == "cuda" else None
    pool = BufferPool(QUEUE_DEPTH + 2, source.batch_buffer_bytes(batch_rows), allocate)
    try:
        with atomic_outputs(output_path, *companion_paths(output_path), overwrite=settings.overwrite) as temporaries:
            sink = open_sink(
                output_path,
                temporaries,
                source,
                out_features=settings.out_features,
                dtype=output_dtype,
                column=column,
                metadata=metadata,
            )
            try:
                _stream(source, sink, settings, nnz, device, output_dtype, pool, batch_rows, on_rows)
                sink.close()
            except BaseException:
                sink.abort()
                raise
    except OSError as error:
        raise _write_failure(error, output_path) from None
    return FileResult(
        rows=source.n_rows,
        in_features=source.dim,
        out_features=settings.out_features,
        bytes_read=source.nbytes,
        seconds=time.perf_counter() - started,
        dropped_columns=tuple(source.carried_columns) if format_of(output_path, "OUTPUT") == "npy" else (),
    )


def check_memory(source, out_features: int, batch_rows: int, output_dtype, device, *, batch_rows_given: bool) -> None:
    """Refuses a batch plan that cannot fit in memory, before anything is allocated.

    Host memory holds the buffer pool (QUEUE_DEPTH + 2 input batches), a compute-dtype copy of
    the batch, and up to QUEUE_DEPTH + 3 output batches (being computed, cast, queued, written);
    with a GPU the pool is page-locked, plus the page-locked output buffers of STREAM_DEPTH
    batches. A GPU
    holds, for each of the STREAM_DEPTH batches in flight, the input batch and two output
    batches (compute and output dtype).
    """
    rows, dim = min(batch_rows, max(source.n_rows, 1)), source.dim or 0
    compute = compute_dtype(source.dtype, output_dtype).itemsize
    in_row = dim * source.dtype.itemsize
    out_row = out_features * max(compute, np.dtype(output_dtype).itemsize)
    host = (QUEUE_DEPTH + 2) * in_row + dim * compute + (QUEUE_DEPTH + 3) * out_row
    if device.type != "cuda":
        plans = [(host_memory(), host)]
    else:
        plans = [
            (host_memory(), host + STREAM_DEPTH * out_row),
            (device_memory(device), STREAM_DEPTH * (dim * compute + 2 * out_row)),
        ]
    for memory, per_row in plans:
        if memory.available is None or rows * per_row <= memory.available:
            continue
        needed = format_bytes(rows * per_row)
        available = f"{memory.where} has {format_bytes(memory.available)} available"
        fitting = int(memory.available * 0.8) // per_row
        if fitting < 1:
            raise FileProjectionError(
                f"--dim {out_features:,} needs {format_bytes(per_row)} per row of "
                f"{source.path.name!r} ({needed} for batches of {rows:,} rows), but "
                f"{available}; use a smaller --dim"
            )
        batch = "--batch-rows" if batch_rows_given else "batches (default about 64 MB of input)"
        raise FileProjectionError(
            f"projecting {source.path.name!r} to --dim {out_features:,} in {batch} of "
            f"{rows:,} rows needs about {needed} of memory, but {available}; use "
            f"--batch-rows {fitting:,} or fewer (or a smaller --dim)"
        )


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
            raise FileProjectionError(
                f"the output needs {format_bytes(size)} in {str(directory)!r} but its "
                f"file system has {format_bytes(free)} free; free some space, write "
                f"elsewhere, or use a smaller --dim (or --dtype float16)"
            )


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
