"""Projecting rows that live in host memory, on the CPU or a GPU: the one host<->device pipeline.

Every adapter that projects host data goes through :class:`DeviceStream`: the batches of the file
pipeline (:mod:`.project`), scikit-learn's dense inputs and the blocks of Dask tasks (both through
:func:`project_rows`; the Dask side is :mod:`.blocks`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from .._memory import host_empty
from ..functional import sparse_jl

#: Bytes of input per chunk that :func:`project_rows` sends to a GPU when not told: large enough
#: for full-speed DMA, small enough that the pinned staging buffers stay modest.
GPU_CHUNK_BYTES = 64 << 20

#: Chunks in flight on a GPU: while one is copied and projected, the host stages the next.
STREAM_DEPTH = 2


def tensor_view(array: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing ``array``'s memory, copying only what torch cannot view (negative
    strides, misaligned data).

    Projections only read their input, so read-only arrays (memory maps, Arrow buffers,
    broadcasts) are fine; torch's warning about them is silenced here, once for the package.
    """
    if any(stride < 0 for stride in array.strides) or not array.flags.aligned:
        array = np.ascontiguousarray(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        return torch.from_numpy(array)


def compute_dtype(input_dtype: np.dtype, output_dtype: np.dtype) -> np.dtype:
    """The wider of the two: casting float64 to float16 after projecting, not before, keeps the
    sums accurate; widening float16 input before projecting costs nothing in accuracy."""
    return max(np.dtype(input_dtype), np.dtype(output_dtype), key=lambda d: d.itemsize)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype."""
    return torch.from_numpy(np.empty(0, np.dtype(dtype))).dtype


class Finished(NamedTuple):
    """A chunk's result on the host, with its ``tag`` and whether every value of it is finite
    (checked where it was computed)."""

    tag: object
    result: torch.Tensor
    finite: bool


class DeviceStream:
    """Applies ``project`` (a function of a 2-D tensor on ``device``) to host chunks; results come
    back on the host, in the order the chunks were submitted, each with a finiteness flag.

    On the CPU a chunk is projected when it is submitted. On a GPU up to ``depth`` chunks are in
    flight, each on its own CUDA stream: the chunk is copied to the GPU, projected and copied
    back asynchronously into a page-locked buffer, so while the GPU moves and projects one chunk
    the host prepares the next. A pageable chunk is first staged (a host copy into a page-locked
    buffer), since pageable memory blocks the DMA engines; a page-locked chunk is copied from
    directly, so its memory must stay unchanged until its result comes back. A buffer is reused
    only after the event of its previous chunk has fired.
    """

    def __init__(
        self, project: Callable[[torch.Tensor], torch.Tensor], device: torch.device, *, depth: int = STREAM_DEPTH
    ):
        self._project = project
        self.device = torch.device(device)
        self._gpu = self.device.type == "cuda"
        self._depth = depth
        self._submitted = 0
        if self._gpu:
            with torch.cuda.device(self.device):
                self._streams = [torch.cuda.Stream() for _ in range(depth)]
            self._staged_in: list[torch.Tensor | None] = [None] * depth
            self._staged_out: list[torch.Tensor | None] = [None] * depth
            self._finite = torch.empty(depth, dtype=torch.bool, pin_memory=True)
            self._in_flight: list[tuple | None] = [None] * depth

    def submit(self, chunk: torch.Tensor, tag=None, out: torch.Tensor | None = None) -> list[Finished]:
        """Queues the host tensor ``chunk`` (rows, features); returns the chunks finished
        meanwhile, oldest first. ``out``, a host tensor of the result's shape and dtype, receives
        the result; without it the result is a tensor of its own (page-locked on a GPU)."""
        if not self._gpu:
            result = self._project(chunk)
            finite = _confirmed_finite(bool(_sum_is_finite(result)), result)
            if out is None:
                return [Finished(tag, result.contiguous(), finite)]
            out.copy_(result)
            return [Finished(tag, out, finite)]
        slot = self._submitted % self._depth
        self._submitted += 1
        finished = [self._collect(slot)] if self._in_flight[slot] is not None else []
        rows = chunk.shape[0]
        if chunk.is_pinned():
            source = chunk
        else:
            source = self._staged_in[slot] = _fitting(self._staged_in[slot], chunk.shape, chunk.dtype)
            source = source[:rows]
            source.copy_(chunk)
        with torch.cuda.device(self.device), torch.cuda.stream(self._streams[slot]):
            x_device = source.to(self.device, non_blocking=True)
            y_device = self._project(x_device)
            staged_out = self._staged_out[slot] = _fitting(self._staged_out[slot], y_device.shape, y_device.dtype)
            staged_out[:rows].copy_(y_device, non_blocking=True)
            self._finite[slot].copy_(_sum_is_finite(y_device), non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        self._in_flight[slot] = (done, tag, rows, out)
        return finished

    def finish(self) -> list[Finished]:
        """Waits for every chunk in flight; returns them, oldest first."""
        if not self._gpu:
            return []
        finished = []
        for offset in range(self._depth):  # the slot submitted to least recently comes first
            slot = (self._submitted + offset) % self._depth
            if self._in_flight[slot] is not None:
                finished.append(self._collect(slot))
        return finished

    def _collect(self, slot: int) -> Finished:
        done, tag, rows, out = self._in_flight[slot]
        self._in_flight[slot] = None
        done.synchronize()
        staged = self._staged_out[slot][:rows]
        finite = _confirmed_finite(bool(self._finite[slot]), staged)
        if out is None:
            # The page-locked buffer itself is the result, and the slot takes a new one: torch's
            # pinned-memory cache hands back the buffers of results already dropped, so a stream
            # of chunks neither copies its results nor faults in fresh pages for them.
            self._staged_out[slot] = None
            return Finished(tag, staged, finite)
        out.copy_(staged)
        return Finished(tag, out, finite)


def _sum_is_finite(result: torch.Tensor) -> torch.Tensor:
    """Whether the sum of ``result`` is finite, as a bool tensor where ``result`` is: a screen, 30x
    faster than ``isfinite(result).all()`` on a CPU. A NaN or inf anywhere makes the sum
    non-finite, so True proves ``result`` finite; False may also be a finite overflow."""
    total = result.sum(dtype=torch.float32) if result.element_size() < 4 else result.sum()
    return torch.isfinite(total)


def _confirmed_finite(sum_is_finite: bool, result: torch.Tensor) -> bool:
    """The screen's answer, confirmed element by element (on the host) when it says no."""
    return sum_is_finite or bool(torch.isfinite(result).all())


def pinned_bytes(nbytes: int) -> np.ndarray:
    """A page-locked host buffer of ``nbytes`` as a numpy array (it keeps the memory alive), for
    pools whose batches :class:`DeviceStream` copies to a GPU without staging."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()


def _fitting(buffer: torch.Tensor | None, shape, dtype: torch.dtype) -> torch.Tensor:
    """``buffer`` if it holds ``shape`` (at most its rows) of ``dtype``, else a new pinned one."""
    if (
        buffer is not None
        and buffer.dtype == dtype
        and buffer.shape[1:] == tuple(shape[1:])
        and buffer.shape[0] >= shape[0]
    ):
        return buffer
    return torch.empty(tuple(shape), dtype=dtype, pin_memory=True)


def project_rows(
    array: np.ndarray,
    out_features: int,
    *,
    seed: int,
    nnz: int,
    device: torch.device,
    rows_per_chunk: int | None = None,
    output_dtype: np.dtype | None = None,
) -> tuple[np.ndarray, bool]:
    """``array @ S.T`` for a 2-D float array in host memory, projected on ``device``; returns the
    numpy result, of ``output_dtype`` (default: the input's), and whether all of it is finite.

    The input crosses to the device in its own dtype and is widened there (:func:`compute_dtype`),
    and the finiteness check runs there too, chunk by chunk: no host-side pass over the data
    besides the copies. ``rows_per_chunk`` bounds the rows projected at a time (None: all at
    once on the CPU, about :data:`GPU_CHUNK_BYTES` of input per chunk on a GPU).
    """
    x = tensor_view(np.asarray(array))
    n_rows, n_features = x.shape
    output = np.dtype(output_dtype or array.dtype)
    compute, result = torch_dtype(compute_dtype(array.dtype, output)), torch_dtype(output)
    device = torch.device(device)
    if rows_per_chunk is None:
        rows_per_chunk = n_rows if device.type == "cpu" else GPU_CHUNK_BYTES // max(1, n_features * x.element_size())
    rows_per_chunk = max(1, rows_per_chunk)
    stream = DeviceStream(
        lambda chunk: sparse_jl(chunk.to(compute), out_features, seed=seed, nnz=nnz).to(result), device
    )
    if device.type == "cpu" and rows_per_chunk >= n_rows:
        finished = stream.submit(x)
        projected = finished[0].result
    else:
        projected = host_empty(n_rows, out_features, result)
        finished = []
        for start in range(0, n_rows, rows_per_chunk):
            stop = min(start + rows_per_chunk, n_rows)
            finished += stream.submit(x[start:stop], out=projected[start:stop])
        finished += stream.finish()
    return projected.numpy(), all(chunk.finite for chunk in finished)
