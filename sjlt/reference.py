"""Pure-PyTorch mirror of every sjlt kernel: the specification in executable form.

Everything here runs natively on any torch device (CPU, CUDA, MPS, ...) with no host round trip,
and produces bit-identical random streams to the Triton kernels in ``sjlt.kernels``. Integer
arithmetic is done on int64 tensors holding uint32 values, split so that no product overflows.
This module is the oracle that tests trust: read straight from docs/spec.md, not tuned. Users'
projections run in ``sjlt.cpu_engine`` (which takes its tables from here) or the Triton kernels.
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


def sparse_jl_hash(in_features: int, out_features: int, *, seed: int, nnz: int, column_offset: int = 0, device=None):
    """Rows and signs of the nonzeros of columns [column_offset, column_offset + in_features).

    Returns ``rows`` (int64, shape (nnz, in_features)) and ``negative`` (bool, same shape): the
    t-th nonzero of column j sits at row ``rows[t, j]`` with value ``(-1 if negative else 1)/sqrt(nnz)``.
    The layout is windowed when out_features is a multiple of 16 * nnz, classic otherwise
    (``spec.is_windowed``); docs/spec.md defines both.
    """
    if spec.is_windowed(out_features, nnz):
        return _windowed_hash(in_features, out_features, seed=seed, nnz=nnz, column_offset=column_offset, device=device)
    return _classic_hash(in_features, out_features, seed=seed, nnz=nnz, column_offset=column_offset, device=device)


def _classic_hash(in_features, out_features, *, seed, nnz, column_offset, device):
    """Column j, nonzero t: (w0, w1, _, _) = Philox(counter=(j mod 2**32, j div 2**32, t,
    DOMAIN_SPARSE_JL), key=seed); row = start_t + (w0 * size_t) >> 32 inside block t
    [floor(t*k/s), floor((t+1)*k/s)); negative = top bit of w1."""
    k0, k1 = spec.philox_key(seed)
    cols = torch.arange(column_offset, column_offset + in_features, dtype=torch.int64, device=device)
    t = torch.arange(nnz, dtype=torch.int64, device=device)[:, None]
    w0, w1, _, _ = philox4x32_10(cols & _MASK32, cols >> 32, t, spec.DOMAIN_SPARSE_JL, k0, k1)
    starts = spec.block_start(t, out_features, nnz)
    sizes = spec.block_start(t + 1, out_features, nnz) - starts
    rows = starts + ((w0 * sizes) >> 32)  # w0 < 2**32 and size <= 2**31 keep this below 2**63
    negative = (w1 >> 31).bool()
    return rows, negative


def window_rotations(groups: torch.Tensor, windows: int, seed: int, nnz: int) -> torch.Tensor:
    """(len(groups), bands) rotations in [0, A): R_(g,b) = word (b mod 4) of Philox(counter=(g mod
    2**32, g div 2**32, b div 4, DOMAIN_SPARSE_JL_GROUP)), times A, >> 32. In block t, chunk
    c = g*A + p of group g uses window (p + R_(g, t div 8)) mod A: band b = blocks [8b, 8b + 8)."""
    k0, k1 = spec.philox_key(seed)
    band = torch.arange(spec.band_count(nnz), dtype=torch.int64, device=groups.device)
    groups = groups[:, None]
    words = _philox_word(
        philox4x32_10(groups & _MASK32, groups >> 32, band >> 2, spec.DOMAIN_SPARSE_JL_GROUP, k0, k1), band & 3
    )
    return (words * windows) >> 32


def chunk_words(chunks: torch.Tensor, nnz: int, seed: int) -> torch.Tensor:
    """(nnz, len(chunks)) uint32 words: chunk c's word in block t. W_(c,t) = word t mod 4 of
    Philox(counter=(c mod 2**32, c div 2**32, t div 4, DOMAIN_SPARSE_JL_WINDOW)); bit 16 + i of it
    is the sign of the chunk's column i. The low 4 bits are replaced by the chunk's XOR mask in
    block t, m_(c,t) = (a_c * (t mod 16)) XOR b_c in GF(16), with b_c = bits 0-3 and a_c = bits
    4-7 of W_(c,0): two chunks whose a differ then collide column by column in at most one of any
    16 blocks."""
    k0, k1 = spec.philox_key(seed)
    t = torch.arange(nnz, dtype=torch.int64, device=chunks.device)[:, None]
    words = _philox_word(
        philox4x32_10(chunks & _MASK32, chunks >> 32, t >> 2, spec.DOMAIN_SPARSE_JL_WINDOW, k0, k1), t & 3
    )
    slope, intercept = (words[0] >> 4) & 15, words[0] & 15
    masks = _GF16_PRODUCTS.to(words.device)[slope, t % 16] ^ intercept
    return (words & ~15) | masks


# GF(16) products, _GF16_PRODUCTS[a, b] = a * b (spec.gf16_multiply): a lookup, obviously the spec's.
_GF16_PRODUCTS = torch.tensor([[spec.gf16_multiply(a, b) for b in range(16)] for a in range(16)], dtype=torch.int64)


def _philox_word(words, lane: torch.Tensor) -> torch.Tensor:
    """Word ``lane`` (0-3, elementwise) of a Philox output: streams that use all four words of a call."""
    return torch.where(
        lane == 0, words[0], torch.where(lane == 1, words[1], torch.where(lane == 2, words[2], words[3]))
    )


def _windowed_hash(in_features, out_features, *, seed, nnz, column_offset, device):
    windows = spec.windows_per_block(out_features, nnz)
    # Philox once per chunk and per group; windowed_rows broadcasts them to the columns.
    first_chunk = column_offset // spec.WINDOW
    last_chunk = (column_offset + in_features - 1) // spec.WINDOW
    chunks = torch.arange(first_chunk, last_chunk + 1, dtype=torch.int64, device=device)
    groups = torch.arange(first_chunk // windows, last_chunk // windows + 1, dtype=torch.int64, device=device)
    return windowed_rows(
        in_features,
        column_offset,
        chunk_words(chunks, nnz, seed),
        window_rotations(groups, windows, seed, nnz),
        first_chunk,
        first_chunk // windows,
        out_features,
        nnz,
    )


def windowed_rows(
    in_features: int,
    column_offset: int,
    words: torch.Tensor,
    rotations: torch.Tensor,
    chunk_base: int,
    group_base: int,
    out_features: int,
    nnz: int,
):
    """(rows, negative) of the windowed layout for columns [column_offset, column_offset +
    in_features), from the chunk words (nnz, chunks from chunk_base) and the group rotations
    (groups from group_base, bands), as uint32 values in int64. Column j = 16c + i (chunk c,
    i < 16), c = g*A + p (group g, p < A), A = k / (16 nnz): nonzero t sits at row
    t*16A + 16*((p + R_(g, t div 8)) mod A) + (i XOR m), m = word & 15, negative = bit 16 + i of
    the word. Columns of a chunk never share a row within a block."""
    windows = spec.windows_per_block(out_features, nnz)
    cols = torch.arange(column_offset, column_offset + in_features, dtype=torch.int64, device=words.device)
    chunk, lane = cols // spec.WINDOW, cols % spec.WINDOW
    words = words[:, chunk - chunk_base]
    t = torch.arange(nnz, dtype=torch.int64, device=cols.device)[:, None]
    rotation = rotations[chunk[None, :] // windows - group_base, t // spec.BAND]  # (nnz, columns), row-major
    window = (chunk % windows + rotation) % windows
    padded = window * spec.WINDOW + (lane ^ (words & (spec.WINDOW - 1)))  # u in [0, 16A)
    start, size = spec.windowed_block_rows(t, out_features, nnz)
    rows = start + torch.where(padded >= size, padded - size, padded)  # the fold into the block
    negative = ((words >> (16 + lane)) & 1).bool()
    return rows, negative


def sparse_jl_matrix(
    in_features: int,
    out_features: int,
    *,
    seed: int,
    nnz: int,
    column_offset: int = 0,
    dtype=torch.float32,
    device=None,
) -> torch.Tensor:
    """S as a coalesced sparse COO tensor of shape (out_features, in_features)."""
    rows, negative = sparse_jl_hash(
        in_features, out_features, seed=seed, nnz=nnz, column_offset=column_offset, device=device
    )
    return sparse_matrix_from_hash(rows, negative, out_features, dtype=dtype)


def sparse_matrix_from_hash(
    rows: torch.Tensor, negative: torch.Tensor, out_features: int, *, dtype=torch.float32
) -> torch.Tensor:
    """S as sparse COO from its (rows, negative) table of shape (nnz, in_features)."""
    nnz, in_features = rows.shape
    cols = torch.arange(in_features, device=rows.device).expand(nnz, in_features)
    values = _signed_scale(negative, nnz, dtype)
    indices = torch.stack([rows.reshape(-1), cols.reshape(-1)])
    return torch.sparse_coo_tensor(indices, values.reshape(-1), (out_features, in_features)).coalesce()


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """What sjlt accumulates (projections) or scales (dropout) an input of ``dtype`` in: float64 for
    float64, float32 for every other float type, rounded once to the input's dtype at the end."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_matrix(tensor: torch.Tensor, name: str, function: str) -> None:
    if tensor.dim() != 2:
        raise ValueError(
            f"{function} takes a 2-D {name} of shape (rows, features), got shape "
            f"{tuple(tensor.shape)}; flatten the leading dimensions first "
            f"(sjlt.functional does this for you)"
        )
    if not tensor.is_floating_point():
        raise TypeError(
            f"{function} takes a real floating-point {name}, got {tensor.dtype}; "
            f"convert it with .float(), or pass complex data through sjlt.functional, "
            f"which projects real and imaginary parts separately"
        )


def _signed_scale(negative: torch.Tensor, nnz: int, dtype: torch.dtype) -> torch.Tensor:
    """+-1/sqrt(nnz) in ``dtype``, built there: a float64 matrix must hold the value exactly as the
    spec says, not one rounded through float32."""
    scale = torch.full(negative.shape, 1.0 / math.sqrt(nnz), dtype=dtype, device=negative.device)
    return torch.where(negative, -scale, scale)


# The oracle's products, straight from the definition: nonzero t of column j adds
# +-x[:, j] / sqrt(nnz) to y[:, rows[t, j]]. Simple, differentiable and correct on any device, at
# the price of an (n, d) temporary per block; users run sjlt.cpu_engine (or the Triton kernels).


def sparse_jl_forward(
    x: torch.Tensor, out_features: int, *, seed: int, nnz: int, column_offset: int = 0
) -> torch.Tensor:
    """Y = X S^T for a 2-D x (n, d): rows of x projected to out_features, in x's dtype."""
    _check_matrix(x, "x", "sparse_jl_forward")
    acc = accumulation_dtype(x.dtype)
    n, d = x.shape
    if n == 0 or d == 0:
        return torch.zeros(n, out_features, dtype=x.dtype, device=x.device)
    rows, negative = sparse_jl_hash(d, out_features, seed=seed, nnz=nnz, column_offset=column_offset, device=x.device)
    weights = _signed_scale(negative, nnz, acc)
    y = torch.zeros(n, out_features, dtype=acc, device=x.device)
    for t in range(nnz):
        y = y.index_add(1, rows[t], x.to(acc) * weights[t])
    return y.to(x.dtype)


def sparse_jl_transpose(
    y: torch.Tensor, in_features: int, *, seed: int, nnz: int, column_offset: int = 0
) -> torch.Tensor:
    """Z = Y S for a 2-D y (n, k): the adjoint of :func:`sparse_jl_forward`, in y's dtype."""
    _check_matrix(y, "y", "sparse_jl_transpose")
    acc = accumulation_dtype(y.dtype)
    if y.shape[0] == 0 or in_features == 0:
        return torch.zeros(y.shape[0], in_features, dtype=y.dtype, device=y.device)
    rows, negative = sparse_jl_hash(
        in_features, y.shape[1], seed=seed, nnz=nnz, column_offset=column_offset, device=y.device
    )
    weights = _signed_scale(negative, nnz, acc)
    z = torch.zeros(y.shape[0], in_features, dtype=acc, device=y.device)
    for t in range(nnz):
        z = z + y.to(acc)[:, rows[t]] * weights[t]
    return z.to(y.dtype)


# --------------------------------------------------------------------------------------------
# Seeded dropout
# --------------------------------------------------------------------------------------------


def dropout_keep_mask(shape, p: float, *, seed, device=None) -> torch.Tensor:
    """The keep mask of seeded dropout: bool tensor of ``shape``.

    Element i (row-major index, or the column index within its row when ``seed`` is a 1-D tensor
    of one seed per row) is kept iff word (i mod 4) of Philox(counter=(g mod 2**32, g div 2**32, 0,
    DOMAIN_DROPOUT), key) is >= round(p * 2**32), with g = i div 4. ``seed`` is an int, a 0-d
    int64 tensor (its bits read as uint64; the mask is then built on its device with no host
    round trip), or the 1-D tensor of row seeds.
    """
    threshold = spec.dropout_threshold(p)
    shape = tuple(shape)
    if isinstance(seed, torch.Tensor) and seed.dim() == 1:
        spec.check_row_seeds(seed.shape, shape)
        device = seed.device
        seeds = seed.to(torch.int64)[:, None]
        k0, k1 = seeds & _MASK32, (seeds >> 32) & _MASK32
        index = torch.arange(shape[1], dtype=torch.int64, device=device)[None, :]
    else:
        if isinstance(seed, torch.Tensor):
            device = seed.device
            k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
        else:
            k0, k1 = spec.philox_key(seed)
        numel = math.prod(shape)
        index = torch.arange(numel, dtype=torch.int64, device=device)
    group = index >> 2
    words = philox4x32_10(group & _MASK32, group >> 32, torch.zeros_like(group), spec.DOMAIN_DROPOUT, k0, k1)
    word = _philox_word(words, index & 3)
    return (word >= threshold).reshape(shape)


def dropout_scale(p: float) -> float:
    """The multiplier of kept elements, 1/(1-p); callers hold it in :func:`accumulation_dtype`."""
    return 1.0 / (1.0 - p)


def seeded_dropout(x: torch.Tensor, p: float, *, seed) -> torch.Tensor:
    """y = x * keep / (1 - p), the product taken in float32 (float64 for float64) and rounded once."""
    if p >= 1.0:
        return torch.zeros_like(x)
    keep = dropout_keep_mask(x.shape, p, seed=seed, device=x.device)
    compute = accumulation_dtype(x.dtype)
    scale = torch.tensor(dropout_scale(p), dtype=compute, device=x.device)
    y = torch.where(keep, x.to(compute) * scale, torch.zeros((), dtype=compute, device=x.device))
    return y.to(x.dtype)
