"""Pure-PyTorch mirror of every sjlt kernel: the specification in executable form.

Everything here runs natively on any torch device (CPU, CUDA, MPS, ...) with no host round trip,
and produces bit-identical random streams to the Triton kernels in ``sjlt.kernels``. Integer
arithmetic is done on int64 tensors holding uint32 values, split so that no product overflows.
This module is also sjlt's CPU backend.
"""
from __future__ import annotations

import math

import torch

from . import spec

_MASK32 = 0xFFFFFFFF
_PHILOX_M0 = 0xD2511F53
_PHILOX_M1 = 0xCD9E8D57
_PHILOX_W0 = 0x9E3779B9
_PHILOX_W1 = 0xBB67AE85


def _mulhilo32(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of a * b for a uint32 constant a and a uint32 tensor b.

    a is split into 16-bit halves so every intermediate stays below 2**49 (no int64 overflow).
    """
    a_hi, a_lo = a >> 16, a & 0xFFFF
    hi_part = b * a_hi  # < 2**48
    lo_part = b * a_lo  # < 2**48
    hi = (hi_part + (lo_part >> 16)) >> 16
    lo = (((hi_part & 0xFFFF) << 16) + lo_part) & _MASK32
    return hi, lo


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on int64 tensors holding uint32 values; returns 4 such tensors.

    Inputs broadcast against each other; keys may be Python ints. Matches Random123 and the
    Triton core ``sjlt.kernels.philox.philox4x32_10`` bit for bit.
    """
    tensors = [v for v in (c0, c1, c2, c3, k0, k1) if isinstance(v, torch.Tensor)]
    if not tensors:
        raise TypeError("philox4x32_10 needs at least one tensor argument")
    device = tensors[0].device

    def as_u32(v):
        if isinstance(v, torch.Tensor):
            if v.dtype != torch.int64:
                raise TypeError(f"philox4x32_10 takes int64 tensors holding uint32 values, got {v.dtype}")
            return v
        return torch.tensor(int(v) & _MASK32, dtype=torch.int64, device=device)

    c0, c1, c2, c3, k0, k1 = (as_u32(v) for v in (c0, c1, c2, c3, k0, k1))
    c0, c1, c2, c3 = torch.broadcast_tensors(c0, c1, c2, c3, k0, k1)[:4]
    for _ in range(10):
        hi0, lo0 = _mulhilo32(_PHILOX_M0, c0)
        hi1, lo1 = _mulhilo32(_PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + _PHILOX_W0) & _MASK32
        k1 = (k1 + _PHILOX_W1) & _MASK32
    return c0, c1, c2, c3


# --------------------------------------------------------------------------------------------
# Sparse JL transform
# --------------------------------------------------------------------------------------------

def sparse_jl_hash(in_features: int, out_features: int, *, seed: int, nnz: int,
                   column_offset: int = 0, device=None):
    """Rows and signs of the nonzeros of columns [column_offset, column_offset + in_features).

    Returns ``rows`` (int64, shape (nnz, in_features)) and ``negative`` (bool, same shape): the
    t-th nonzero of column j sits at row ``rows[t, j]`` with value ``(-1 if negative else 1)/sqrt(nnz)``.
    Column j, nonzero t: (w0, w1, _, _) = Philox(counter=(j mod 2**32, j div 2**32, t, DOMAIN_SPARSE_JL),
    key=seed); row = start_t + (w0 * size_t) >> 32 inside block t; negative = top bit of w1.
    """
    k0, k1 = spec.philox_key(seed)
    cols = torch.arange(column_offset, column_offset + in_features, dtype=torch.int64, device=device)
    t = torch.arange(nnz, dtype=torch.int64, device=device)[:, None]
    w0, w1, _, _ = philox4x32_10(cols & _MASK32, cols >> 32, t, spec.DOMAIN_SPARSE_JL, k0, k1)
    starts = (t * out_features) // nnz
    sizes = ((t + 1) * out_features) // nnz - starts
    rows = starts + ((w0 * sizes) >> 32)  # w0 < 2**32 and size <= 2**31 keep this below 2**63
    negative = (w1 >> 31).bool()
    return rows, negative


def sparse_jl_matrix(in_features: int, out_features: int, *, seed: int, nnz: int,
                     column_offset: int = 0, dtype=torch.float32, device=None) -> torch.Tensor:
    """S as a coalesced sparse COO tensor of shape (out_features, in_features)."""
    rows, negative = sparse_jl_hash(in_features, out_features, seed=seed, nnz=nnz,
                                    column_offset=column_offset, device=device)
    return sparse_matrix_from_hash(rows, negative, out_features, dtype=dtype)


def sparse_matrix_from_hash(rows: torch.Tensor, negative: torch.Tensor, out_features: int, *,
                            dtype=torch.float32) -> torch.Tensor:
    """S as sparse COO from its (rows, negative) table of shape (nnz, in_features)."""
    nnz, in_features = rows.shape
    cols = torch.arange(in_features, device=rows.device).expand(nnz, in_features)
    scale = 1.0 / math.sqrt(nnz)
    values = torch.where(negative, -scale, scale).to(dtype)
    indices = torch.stack([rows.reshape(-1), cols.reshape(-1)])
    return torch.sparse_coo_tensor(indices, values.reshape(-1), (out_features, in_features)).coalesce()


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _transposed_csr(in_features, out_features, *, seed, nnz, column_offset, dtype, device):
    """S^T (in_features x out_features) in CSR: row j lists the nnz outputs of input column j."""
    rows, negative = sparse_jl_hash(in_features, out_features, seed=seed, nnz=nnz,
                                    column_offset=column_offset, device=device)
    scale = 1.0 / math.sqrt(nnz)
    col_indices = rows.t().contiguous().reshape(-1)
    values = torch.where(negative.t(), -scale, scale).to(dtype).contiguous().reshape(-1)
    crow = torch.arange(0, in_features * nnz + 1, nnz, dtype=torch.int64, device=rows.device)
    return torch.sparse_csr_tensor(crow, col_indices, values, (in_features, out_features))


def sparse_jl_forward(x: torch.Tensor, out_features: int, *, seed: int, nnz: int,
                      column_offset: int = 0) -> torch.Tensor:
    """Y = X S^T for a 2-D x (n, d): rows of x projected to out_features, in x's dtype."""
    acc = _accumulation_dtype(x.dtype)
    n, d = x.shape
    if n == 0 or d == 0:
        return torch.zeros(n, out_features, dtype=x.dtype, device=x.device)
    s_t = _transposed_csr(d, out_features, seed=seed, nnz=nnz, column_offset=column_offset,
                          dtype=acc, device=x.device)
    # (S^T)^T X^T = S X^T, computed as sparse(d x k)^T @ dense; torch runs CSR @ dense natively.
    y_t = torch.sparse.mm(s_t.t().to_sparse_csr(), x.to(acc).t())
    return y_t.t().to(x.dtype)


def sparse_jl_transpose(y: torch.Tensor, in_features: int, *, seed: int, nnz: int,
                        column_offset: int = 0) -> torch.Tensor:
    """Z = Y S for a 2-D y (n, k): the adjoint of :func:`sparse_jl_forward`, in y's dtype."""
    acc = _accumulation_dtype(y.dtype)
    n, k = y.shape
    if n == 0 or in_features == 0:
        return torch.zeros(n, in_features, dtype=y.dtype, device=y.device)
    s_t = _transposed_csr(in_features, k, seed=seed, nnz=nnz, column_offset=column_offset,
                          dtype=acc, device=y.device)
    z_t = torch.sparse.mm(s_t, y.to(acc).t())
    return z_t.t().to(y.dtype)


# --------------------------------------------------------------------------------------------
# Seeded dropout
# --------------------------------------------------------------------------------------------

def dropout_keep_mask(shape, p: float, *, seed, device=None) -> torch.Tensor:
    """The keep mask of seeded dropout: bool tensor of ``shape``.

    Element i (row-major index, or the column index within its row when ``seed`` is a tensor of
    one seed per row) is kept iff word (i mod 4) of Philox(counter=(g mod 2**32, g div 2**32, 0,
    DOMAIN_DROPOUT), key) is >= round(p * 2**32), with g = i div 4.
    """
    threshold = spec.dropout_threshold(p)
    shape = tuple(shape)
    if isinstance(seed, torch.Tensor):
        if len(shape) != 2 or seed.shape != (shape[0],):
            raise ValueError(f"a seed tensor needs a 2-D input with one seed per row; got seeds of "
                             f"shape {tuple(seed.shape)} for an input of shape {shape}")
        device = seed.device
        seeds = seed.to(torch.int64)[:, None]
        k0, k1 = seeds & _MASK32, (seeds >> 32) & _MASK32
        index = torch.arange(shape[1], dtype=torch.int64, device=device)[None, :]
    else:
        k0, k1 = spec.philox_key(seed)
        numel = math.prod(shape)
        index = torch.arange(numel, dtype=torch.int64, device=device)
    group = index >> 2
    words = philox4x32_10(group & _MASK32, group >> 32, torch.zeros_like(group),
                          spec.DOMAIN_DROPOUT, k0, k1)
    lane = index & 3
    word = torch.where(lane == 0, words[0], torch.where(lane == 1, words[1],
                       torch.where(lane == 2, words[2], words[3])))
    return (word >= threshold).reshape(shape)


def dropout_scale(p: float, dtype: torch.dtype):
    """The multiplier of kept elements: 1/(1-p), held in the compute dtype of ``dtype``."""
    return 1.0 / (1.0 - p)


def dropout_compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision inputs are scaled in float32 and rounded once; others in their own dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def seeded_dropout(x: torch.Tensor, p: float, *, seed) -> torch.Tensor:
    """y = x * keep / (1 - p), the product taken in float32 (float64 for float64) and rounded once."""
    if p >= 1.0:
        return torch.zeros_like(x)
    keep = dropout_keep_mask(x.shape, p, seed=seed, device=x.device)
    compute = dropout_compute_dtype(x.dtype)
    scale = torch.tensor(dropout_scale(p, x.dtype), dtype=compute, device=x.device)
    y = torch.where(keep, x.to(compute) * scale, torch.zeros((), dtype=compute, device=x.device))
    return y.to(x.dtype)
