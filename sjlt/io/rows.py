"""Projecting rows that live in host memory, on the CPU or a GPU: the one host<->device pipeline.

Every adapter that projects host data goes through :class:`DeviceStream`: the batches of the file
pipeline (:mod:`.project`), scikit-learn's dense inputs and the blocks of Dask tasks (both through
:func:`project_rows`; the Dask side is :mod:`.blocks`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch

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


class DeviceStream:
    """Applies ``project`` (a function of a 2-D tensor on ``device``) to host chunks; results come
    back on the host, in the order the chunks were submitted.

    On the CPU a chunk is projected when it is submitted. On a GPU up to ``depth`` chunks are in
    flight, each on its own CUDA stream with a pair of page-locked staging buffers: the chunk is
    staged (a host copy), copied to the GPU, projected and copied back asynchronously, so while
    the GPU moves and projects one chunk the host stages the next, and pageable memory never
    blocks the DMA engines. A staging buffer is reused only after the event of its previous
    chunk has fired.
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
            self._in_flight: list[tuple | None] = [None] * depth

    def submit(self, chunk: torch.Tensor, tag=None, out: torch.Tensor | None = None) -> list[tuple]:
        """Queues the host tensor ``chunk`` (rows, features); returns ``(tag, result)`` for each
        chunk finished meanwhile, oldest first. ``out``, a host tensor of the result's shape and
        dtype, receives the result; without it the result is a new tensor."""
        if not self._gpu:
            result = self._project(chunk)
            if out is None:
                return [(tag, result.contiguous())]
            out.copy_(result)
            return [(tag, out)]
        slot = self._submitted % self._depth
        self._submitted += 1
        finished = [self._collect(slot)] if self._in_flight[slot] is not None else []
        rows = chunk.shape[0]
        staged_in = self._staged_in[slot] = _fitting(self._staged_in[slot], chunk.shape, chunk.dtype)
        staged_in[:rows].copy_(chunk)
        with torch.cuda.device(self.device), torch.cuda.stream(self._streams[slot]):
            x_device = staged_in[:rows].to(self.device, non_blocking=True)
            y_device = self._project(x_device)
            staged_out = self._staged_out[slot] = _fitting(self._staged_out[slot], y_device.shape, y_device.dtype)
            staged_out[:rows].copy_(y_device, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        self._in_flight[slot] = (done, tag, rows, out)
        return finished

    def finish(self) -> list[tuple]:
        """Waits for every chunk in flight; returns their ``(tag, result)``, oldest first."""
        if not self._gpu:
            return []
        finished = []
        for offset in range(self._depth):  # the slot submitted to least recently comes first
            slot = (self._submitted + offset) % self._depth
            if self._in_flight[slot] is not None:
                finished.append(self._collect(slot))
        return finished

    def _collect(self, slot: int) -> tuple:
        done, tag, rows, out = self._in_flight[slot]
        self._in_flight[slot] = None
        done.synchronize()
        staged = self._staged_out[slot][:rows]
        if out is None:
            return tag, staged.clone()  # the staging buffer is reused by a later chunk
        out.copy_(staged)
        return tag, out


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
) -> np.ndarray:
    """``array @ S.T`` for a 2-D float array in host memory, projected on ``device`` and returned
    as a numpy array of the input's dtype.

    ``rows_per_chunk`` bounds the rows projected at a time (None: all at once on the CPU, about
    :data:`GPU_CHUNK_BYTES` of input per chunk on a GPU).
    """
    x = tensor_view(np.asarray(array))
    n_rows, n_features = x.shape
    device = torch.device(device)
    if rows_per_chunk is None:
        rows_per_chunk = n_rows if device.type == "cpu" else GPU_CHUNK_BYTES // max(1, n_features * x.element_size())
    rows_per_chunk = max(1, rows_per_chunk)
    stream = DeviceStream(lambda chunk: sparse_jl(chunk, out_features, seed=seed, nnz=nnz), device)
    if device.type == "cpu" and rows_per_chunk >= n_rows:
        ((_, projected),) = stream.submit(x)
        return projected.numpy()
    out = torch.empty((n_rows, out_features), dtype=x.dtype)
    for start in range(0, n_rows, rows_per_chunk):
        stop = min(start + rows_per_chunk, n_rows)
        stream.submit(x[start:stop], out=out[start:stop])
    stream.finish()
    return out.numpy()
