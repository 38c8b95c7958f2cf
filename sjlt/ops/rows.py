"""Rows to a new width, cut or padded with zeros (``resize_rows_kernel``), and its autograd.

The dense algorithm cuts its Y from rows of S padded to 16 bytes and pads a transpose's y to them
(``dense``); the windowed transpose pads y to rows of 16 elements. Each is one copy at 68-91% of
the copy rate, where torch's strided copy ran at 33-67% (benchmarks/NOTES.md, "Any k", item 32).
"""

from __future__ import annotations

import torch

from .. import _buffers
from .._backend import multiprocessor_count

#: Elements per step of a program's flat span.
_BLOCK = 1024
#: Below this many elements (of the wider side) a copy is bound by its host-side launch, and torch's
#: strided copy launches cheaper than the Triton kernel: H200, a planned bfloat16 64 x 1024 -> 100
#: forward took 30 us with torch's cut and 54 with the kernel (the cut alone 12 against 22 us),
#: while at 65536 x 304 -> 300 the kernel's copy rate wins (48 -> 30 us).
_LAUNCH_BOUND_ELEMENTS = 1 << 23


def resized(x: torch.Tensor, width: int, rows_per_program: int | None = None) -> torch.Tensor:
    """A contiguous (n, width) tensor: x's rows (n, k) cut to their first ``width`` elements, or
    padded with zeros to ``width``; by torch's copy where that is launch-bound. Not differentiable
    (see :func:`resize`); ``rows_per_program`` runs the kernel with that many rows per program, for
    tests."""
    if rows_per_program is None and _launch_bound(x, width):
        return _torch_resized(x, width)
    from ..kernels.resize_rows import resize_rows_kernel

    n = x.shape[0]
    out = _buffers.empty((n, width), x.dtype, x.device)
    if out.numel() == 0:
        return out
    rows = rows_per_program or _rows_per_program(n, width, x.device)
    resize_rows_kernel[(-(-n // rows),)](
        x, out, n, x.shape[1], width, 1.0 / width, x.stride(0), x.stride(1), ROWS=rows, BLOCK=_BLOCK, num_warps=4
    )
    return out


def _launch_bound(x: torch.Tensor, width: int) -> bool:
    return x.shape[0] * max(width, x.shape[1]) < _LAUNCH_BOUND_ELEMENTS


def _torch_resized(x: torch.Tensor, width: int) -> torch.Tensor:
    """:func:`resized` by torch's ops, which carry their own autograd."""
    k = x.shape[1]
    return x[:, :width].contiguous() if width <= k else torch.nn.functional.pad(x, (0, width - k))


def _rows_per_program(n: int, width: int, device: torch.device) -> int:
    """32 rows per program where that still gives every SM four programs, else 8; a multiple of 8
    keeps each program's span on 16 bytes. H200, bfloat16 2**20 x 304 -> 300: 32 rows 0.37 ms
    against 0.50 with 8; 4096 rows: 8 rows 0.007 ms against 0.011. Rows too wide for 32 such rows'
    offsets to fit in 32 bits take one row per program."""
    if 32 * width + _BLOCK > 1 << 31:
        return 1
    if device.type != "cuda":  # the interpreter
        return 8
    index = device.index if device.index is not None else torch.cuda.current_device()
    return 32 if n >= 32 * 4 * multiprocessor_count(index) else 8


class _Resize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, width):
        ctx.width_in = x.shape[1]
        return resized(x, width)

    @staticmethod
    def backward(ctx, grad):
        # A cut's gradient is the gradient padded with zeros, a pad's the gradient cut.
        return _Resize.apply(grad, ctx.width_in), None


def resize(x: torch.Tensor, width: int) -> torch.Tensor:
    """:func:`resized`, differentiable to any order."""
    return _torch_resized(x, width) if _launch_bound(x, width) else _Resize.apply(x, width)
