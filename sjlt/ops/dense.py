"""The dense algorithm: the signs of S materialised once and multiplied by cuBLAS.

S is materialised from the kernels' own tables as a dense (k, d) matrix of exact +-1 and
multiplied with ``torch.addmm(..., alpha=1/sqrt(nnz))``: the scale is applied once to the float32
accumulator, as the kernel does, so no entry of S is rounded. It is a plain torch op, with
torch's own autograd, and it follows torch's float32 matmul precision. The result matches the
kernel's to float tolerance, not bit for bit; ``sjlt.ops.choice`` decides which one runs.

Matrices are cached within ``sjlt.backends.dense_cache_bytes``, least recently used first out,
keyed by everything that defines S; none is cached while a CUDA graph owns new allocations
(``sjlt._buffers.may_keep``).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch

from .. import _buffers, backends
from . import rows as _rows
from ._launch import KERNEL_DTYPES
from .layouts import triton_hash  # the kernels' own tables: the dense S is the kernels' S

_CACHE: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_cached_bytes = 0

#: A transpose with at least this many multiply-adds (n k d) pads y to aligned rows
#: (:func:`aligned_features`): the pad is a launch of its own, which a launch-bound call does not win
#: back. H100: 64 x k -> 1024, k = 100-500: 12-26 us padded against 7-13 unpadded; bfloat16 65536 x
#: 267 -> 16384 1.33 ms against 4.76, and 4096 x 100 -> 131072 (a small y, a large z) unpadded 2.0x
#: the lattice k's time.
PADDED_TRANSPOSE_MIN_WORK = 1 << 30


def eligible(x: torch.Tensor, in_features: int, out_features: int, max_matrix_bytes: int) -> bool:
    """Whether the dense algorithm can run the (n, .) CUDA input ``x`` of a projection between
    in_features and out_features with S no larger than ``max_matrix_bytes`` and the cache budget."""
    budget = min(max_matrix_bytes, backends.byte_budget("dense_cache_bytes"))
    return (
        x.device.type == "cuda"
        and x.dtype in KERNEL_DTYPES
        and in_features * aligned_features(out_features, x) * x.element_size() <= budget
    )


def forward(x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int, column_offset: int) -> torch.Tensor:
    rows = aligned_features(out_features, x)
    signs = sign_matrix(x.shape[1], out_features, key0, key1, nnz, column_offset, x.dtype, x.device, rows)
    y = torch.addmm(_zero(x), x, signs.t(), beta=0, alpha=1.0 / math.sqrt(nnz))
    return y if rows == out_features else _rows.resize(y, out_features)


# Repeated launch-bound forwards cost more in Python than on the GPU (~20 µs of validation and
# dispatch against a ~15 µs matmul on the H100 host). ``functional.sparse_jl`` records a plan per
# call signature once a call has taken this algorithm: a closure over the cached matrix, already
# transposed, which costs one dict lookup and the addmm. A plan lives as long as its matrix: a
# matrix leaving the cache takes its plans with it, so a plan never holds memory beyond the budget.
_PLANS: dict = {}  # call signature -> planned forward, x -> y
_PLANNED_MATRIX: dict = {}  # call signature -> the key of the matrix its plan multiplies by
PLANS_MAX = 256


def planned(signature):
    """The planned forward of ``signature`` (a callable x -> y), or None."""
    return _PLANS.get(signature)


def plan_forward(signature, x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int, column_offset: int):
    """Records under ``signature`` how to repeat ``forward(x, ...)`` for inputs like ``x``, if its
    matrix is cached and tensors may be kept now (``_buffers.may_keep``: no plan holds a CUDA
    graph's memory)."""
    rows = aligned_features(out_features, x)
    key = _matrix_key(x.shape[1], out_features, rows, key0, key1, nnz, column_offset, x.dtype, x.device)
    signs = _CACHE.get(key)
    if signs is None or not _buffers.may_keep(x.device):
        return
    signs_t, zero, alpha, touch, addmm, resize = (
        signs.t(),
        _zero(x),
        1.0 / math.sqrt(nnz),
        _CACHE.move_to_end,
        torch.addmm,
        _rows.resize,
    )

    if rows == out_features:

        def forward_planned(x):
            touch(key)  # least recently used stays true for planned calls
            return addmm(zero, x, signs_t, beta=0, alpha=alpha)

    else:

        def forward_planned(x):
            touch(key)
            return resize(addmm(zero, x, signs_t, beta=0, alpha=alpha), out_features)

    if len(_PLANS) >= PLANS_MAX:
        _forget_plan(next(iter(_PLANS)))
    _PLANS[signature] = forward_planned
    _PLANNED_MATRIX[signature] = key


def _forget_plan(signature) -> None:
    del _PLANS[signature], _PLANNED_MATRIX[signature]


def transpose(y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int, column_offset: int) -> torch.Tensor:
    k = y.shape[1]
    rows = aligned_features(k, y) if y.numel() * in_features >= PADDED_TRANSPOSE_MIN_WORK else k
    signs = sign_matrix(in_features, k, key0, key1, nnz, column_offset, y.dtype, y.device, rows)
    if rows != k:
        y = _rows.resize(y, rows)
    return torch.addmm(_zero(y), y, signs, beta=0, alpha=1.0 / math.sqrt(nnz))


def aligned_features(k: int, like: torch.Tensor) -> int:
    """k rounded up to whole 16-byte rows of ``like``'s dtype. cuBLAS takes its slow, unvectorized
    kernels when a row of Y is not 16-byte aligned, so a misaligned k is multiplied through S padded
    with zero rows, and Y cut after or y padded before the transpose by ``rows.resize``. H100,
    bfloat16 2**16 x 2**14 -> 267: 0.84 ms padded against 7.67 unpadded and 0.80 at k = 288
    (benchmarks/RESULTS.md, "Any shape")."""
    step = 16 // like.element_size()
    return -(-k // step) * step


_ZEROS: dict = {}


def _zero(like: torch.Tensor) -> torch.Tensor:
    """addmm's input, ignored under beta=0 (NaNs included): a cached 0-d zero, which broadcasts
    for free and, made once, costs no fill launch per call. addmm never writes to it."""
    key = (like.dtype, like.device)
    zero = _ZEROS.get(key)
    if zero is None:
        zero = like.new_zeros(())
        if _buffers.may_keep(like.device):
            _ZEROS[key] = zero
    return zero


def sign_matrix(
    in_features: int,
    out_features: int,
    key0: int,
    key1: int,
    nnz: int,
    column_offset: int,
    dtype: torch.dtype,
    device: torch.device,
    padded_rows: int | None = None,
) -> torch.Tensor:
    """The (out_features, in_features) matrix sqrt(nnz) * S: entries 0 and +-1, exact in any dtype;
    with ``padded_rows`` > out_features, followed by rows of zeros up to ``padded_rows``."""
    global _cached_bytes
    padded_rows = out_features if padded_rows is None else padded_rows
    key = _matrix_key(in_features, out_features, padded_rows, key0, key1, nnz, column_offset, dtype, device)
    signs = _CACHE.get(key)
    if signs is not None:
        _CACHE.move_to_end(key)
        return signs

    rows, negative = triton_hash(in_features, out_features, key0, key1, nnz, column_offset, device)
    signs = torch.zeros(padded_rows, in_features, dtype=dtype, device=device)
    cols = torch.arange(in_features, device=device).expand_as(rows)
    values = 1.0 - 2.0 * negative.to(dtype)
    signs.index_put_((rows, cols), values)  # a column's nnz rows are distinct: no duplicates
    size = signs.numel() * signs.element_size()
    budget = backends.byte_budget("dense_cache_bytes")
    if size <= budget and _buffers.may_keep(device):
        while _CACHE and _cached_bytes + size > budget:
            _cached_bytes -= _evict()
        _CACHE[key] = signs
        _cached_bytes += size
    return signs


def _matrix_key(in_features, out_features, padded_rows, key0, key1, nnz, column_offset, dtype, device) -> tuple:
    """The cache key of a sign matrix: everything that defines it."""
    return (in_features, out_features, padded_rows, key0, key1, nnz, column_offset, dtype, device)


def _evict() -> int:
    key, oldest = _CACHE.popitem(last=False)
    for signature in [s for s, planned_key in _PLANNED_MATRIX.items() if planned_key == key]:
        _forget_plan(signature)
    return oldest.numel() * oldest.element_size()


def clear_cache() -> None:
    """Drops every cached matrix (tests; or to return the memory)."""
    global _cached_bytes
    _CACHE.clear()
    _PLANS.clear()
    _PLANNED_MATRIX.clear()
    _cached_bytes = 0
