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
    The layout is windowed when out_features is a multiple of 16 * nnz, classic otherwise
    (``spec.is_windowed``); docs/spec.md defines both.
    """
    if spec.is_windowed(out_features, nnz):
        return _windowed_hash(in_features, out_features, seed=seed, nnz=nnz,
                              column_offset=column_offset, device=device)
    return _classic_hash(in_features, out_features, seed=seed, nnz=nnz,
                         column_offset=column_offset, device=device)


def _classic_hash(in_features, out_features, *, seed, nnz, column_offset, device):
    """Column j, nonzero t: (w0, w1, _, _) = Philox(counter=(j mod 2**32, j div 2**32, t,
    DOMAIN_SPARSE_JL), key=seed); row = start_t + (w0 * size_t) >> 32 inside block t
    [floor(t*k/s), floor((t+1)*k/s)); negative = top bit of w1."""
    k0, k1 = spec.philox_key(seed)
    cols = torch.arange(column_offset, column_offset + in_features, dtype=torch.int64, device=device)
    t = torch.arange(nnz, dtype=torch.int64, device=device)[:, None]
    w0, w1, _, _ = philox4x32_10(cols & _MASK32, cols >> 32, t, spec.DOMAIN_SPARSE_JL, k0, k1)
    starts = (t * out_features) // nnz
    sizes = ((t + 1) * out_features) // nnz - starts
    rows = starts + ((w0 * sizes) >> 32)  # w0 < 2**32 and size <= 2**31 keep this below 2**63
    negative = (w1 >> 31).bool()
    return rows, negative


def window_rotations(groups: torch.Tensor, windows: int, seed: int) -> torch.Tensor:
    """R_g in [0, A): word 0 of Philox(counter=(g mod 2**32, g div 2**32, 0, DOMAIN_SPARSE_JL_GROUP)),
    times A, >> 32. Chunk c = g*A + p of group g uses window (p + R_g) mod A in every block."""
    k0, k1 = spec.philox_key(seed)
    w0, _, _, _ = philox4x32_10(groups & _MASK32, groups >> 32, torch.zeros_like(groups),
                                spec.DOMAIN_SPARSE_JL_GROUP, k0, k1)
    return (w0 * windows) >> 32


def chunk_words(chunks: torch.Tensor, nnz: int, seed: int) -> torch.Tensor:
    """(nnz, len(chunks)) uint32 words: chunk c's word in block t. W_(c,t) = word t mod 4 of
    Philox(counter=(c mod 2**32, c div 2**32, t div 4, DOMAIN_SPARSE_JL_WINDOW)); bit 16 + i of it
    is the sign of the chunk's column i. The low 4 bits are replaced by the chunk's XOR mask in
    block t, m_(c,t) = (a_c * (t mod 16)) XOR b_c in GF(16), with b_c = bits 0-3 and a_c = bits
    4-7 of W_(c,0): two chunks whose a differ then collide column by column in at most one of any
    16 blocks."""
    k0, k1 = spec.philox_key(seed)
    t = torch.arange(nnz, dtype=torch.int64, device=chunks.device)[:, None]
    words = _philox_word(philox4x32_10(chunks & _MASK32, chunks >> 32, t >> 2, spec.DOMAIN_SPARSE_JL_WINDOW,
                                       k0, k1), t & 3)
    slope, intercept = (words[0] >> 4) & 15, words[0] & 15
    masks = _GF16_PRODUCTS.to(words.device)[slope, t % 16] ^ intercept
    return (words & ~15) | masks


# GF(16) products, _GF16_PRODUCTS[a, b] = a * b (spec.gf16_multiply): a lookup, obviously the spec's.
_GF16_PRODUCTS = torch.tensor([[spec.gf16_multiply(a, b) for b in range(16)] for a in range(16)],
                              dtype=torch.int64)


def _philox_word(words, lane: torch.Tensor) -> torch.Tensor:
    """Word ``lane`` (0-3, elementwise) of a Philox output: streams that use all four words of a call."""
    return torch.where(lane == 0, words[0], torch.where(lane == 1, words[1],
                       torch.where(lane == 2, words[2], words[3])))


def _windowed_hash(in_features, out_features, *, seed, nnz, column_offset, device):
    windows = spec.windows_per_block(out_features, nnz)
    # Philox once per chunk and per group; windowed_rows broadcasts them to the columns.
    first_chunk = column_offset // spec.WINDOW
    last_chunk = (column_offset + in_features - 1) // spec.WINDOW
    chunks = torch.arange(first_chunk, last_chunk + 1, dtype=torch.int64, device=device)
    groups = torch.arange(first_chunk // windows, last_chunk // windows + 1, dtype=torch.int64, device=device)
    return windowed_rows(in_features, column_offset, chunk_words(chunks, nnz, seed),
                         window_rotations(groups, windows, seed), first_chunk, first_chunk // windows,
                         out_features, nnz)


def windowed_rows(in_features: int, column_offset: int, words: torch.Tensor, rotations: torch.Tensor,
                  chunk_base: int, group_base: int, out_features: int, nnz: int):
    """(rows, negative) of the windowed layout for columns [column_offset, column_offset +
    in_features), from the chunk words (nnz, chunks from chunk_base) and the group rotations
    (groups from group_base), as uint32 values in int64. Column j = 16c + i (chunk c, i < 16),
    c = g*A + p (group g, p < A), A = k / (16 nnz): nonzero t sits at row
    t*16A + 16*((p + R_g) mod A) + (i XOR m), m = word & 15, negative = bit 16 + i of the word.
    Columns of a chunk never share a row within a block."""
    windows = spec.windows_per_block(out_features, nnz)
    cols = torch.arange(column_offset, column_offset + in_features, dtype=torch.int64, device=words.device)
    chunk, lane = cols // spec.WINDOW, cols % spec.WINDOW
    words = words[:, chunk - chunk_base]
    window = (chunk % windows + rotations[chunk // windows - group_base]) % windows
    t = torch.arange(nnz, dtype=torch.int64, device=cols.device)[:, None]
    rows = (t * windows + window) * spec.WINDOW + (lane ^ (words & (spec.WINDOW - 1)))
    negative = ((words >> (16 + lane)) & 1).bool()
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
    # Built in the target dtype: a float64 matrix must hold +-1/sqrt(nnz) exactly as the spec says,
    # not a value rounded through float32.
    scale = torch.full(negative.shape, 1.0 / math.sqrt(nnz), dtype=dtype, device=rows.device)
    values = torch.where(negative, -scale, scale)
    indices = torch.stack([rows.reshape(-1), cols.reshape(-1)])
    return torch.sparse_coo_tensor(indices, values.reshape(-1), (out_features, in_features)).coalesce()


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_matrix(tensor: torch.Tensor, name: str, function: str) -> None:
    if tensor.dim() != 2:
        raise ValueError(f"{function} takes a 2-D {name} of shape (rows, features), got shape "
                         f"{tuple(tensor.shape)}; flatten the leading dimensions first "
                         f"(sjlt.functional does this for you)")
    if not tensor.is_floating_point():
        raise TypeError(f"{function} takes a real floating-point {name}, got {tensor.dtype}; "
                        f"convert it with .float(), or pass complex data through sjlt.functional, "
                        f"which projects real and imaginary parts separately")


# Both directions are gathers of whole rows through ``embedding_bag`` (sum mode, signed weights)
# from a transposed row chunk: a row of x^T holds one input column for all samples of the chunk,
# so every gather moves a long contiguous vector. Columns are cut into shards, which bound the hash
# table and the scratch memory (S's columns are hashed independently, so shard results add up),
# and rows into chunks. On CPU (measured on a 2-core EPYC with 1 MiB of L2 per core) chunks of
# 2**18 to 2**20 elements ran fastest, and 8192-column shards kept wide inputs in chunks of tens of
# rows; elsewhere shards and chunks only bound the scratch memory.
_SHARD_COLUMNS = {"cpu": 1 << 13}
_CHUNK_ELEMENTS = {"cpu": 1 << 19}
_OTHER_SHARD_COLUMNS = 1 << 18
_OTHER_CHUNK_ELEMENTS = 1 << 24
_CACHE_LINE_BYTES = 64


def _odd_lines(count: int, dtype: torch.dtype, *, at_least: bool) -> int:
    """``count`` moved to an odd number of cache lines of ``dtype`` elements (the nearest above if
    ``at_least``, else below). Rows whose stride is a multiple of a large power of two compete for
    the same cache sets, which made transposed copies about 3x slower on CPU.
    """
    line = max(1, _CACHE_LINE_BYTES // dtype.itemsize)
    if at_least:
        return count + (line - count) % (2 * line)
    if count < line:
        return count
    return count - (count - line) % (2 * line)


def _tiling(n: int, width: int, other: int, device: torch.device, dtype: torch.dtype):
    """(columns per shard, rows per chunk) for n x width inputs gathered into ``other`` columns."""
    shard = min(width, _SHARD_COLUMNS.get(device.type, _OTHER_SHARD_COLUMNS))
    budget = _CHUNK_ELEMENTS.get(device.type, _OTHER_CHUNK_ELEMENTS)
    rows = _odd_lines(max(1, budget // (shard + other)), dtype, at_least=False)
    return shard, min(n, rows)


class _Transposer:
    """Contiguous transposed copies of row chunks, in reused buffers.

    x is first staged in rows padded to an odd number of cache lines (one copy that also converts
    the dtype and reads any strides); transposing from there runs on all threads, whereas torch
    sends a plain 2-D transpose of contiguous data to a single-threaded kernel, and strided reads
    of x itself collide in the cache when its row stride is a multiple of 4 KiB. Both buffers are
    reused because fresh megabyte-sized allocations page-faulted on every chunk, doubling the time.
    """

    def __init__(self, rows: int, columns: int, dtype: torch.dtype, device: torch.device):
        self._staged = torch.empty(rows, _odd_lines(columns, dtype, at_least=True), dtype=dtype,
                                   device=device)
        self._transposed = torch.empty(rows * columns, dtype=dtype, device=device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x^T (x: at most rows x columns) as a contiguous tensor, valid until the next call."""
        rows, columns = x.shape
        staged = self._staged[:rows, :columns]
        staged.copy_(x)
        transposed = self._transposed[: rows * columns].view(columns, rows)
        transposed.copy_(staged.t())
        return transposed


def _write_transposed(out: torch.Tensor, x_t: torch.Tensor, *, accumulate: bool) -> None:
    """out = x_t^T (or out += x_t^T), converting to out's dtype.

    The leading unit dimension keeps copy_ off torch's single-threaded 2-D transpose kernel.
    """
    target, source = out.unsqueeze(0), x_t.t().unsqueeze(0)
    if accumulate:
        target.add_(source)
    else:
        target.copy_(source)


def _signed_scale(negative: torch.Tensor, nnz: int, dtype: torch.dtype) -> torch.Tensor:
    """+-1/sqrt(nnz) in ``dtype`` (built there: scalars would be rounded to float32 first)."""
    scale = torch.full(negative.shape, 1.0 / math.sqrt(nnz), dtype=dtype, device=negative.device)
    return torch.where(negative, -scale, scale)


def _forward_bags(in_features, out_features, *, seed, nnz, column_offset, dtype, device):
    """S's rows as bags over input columns: (columns, offsets, weights) for embedding_bag.

    Bag r lists the input columns with a nonzero in output row r, in ascending order; ``weights``
    holds their signed values. Each row lies in exactly one block, so every nonzero is in one bag.
    """
    rows, negative = sparse_jl_hash(in_features, out_features, seed=seed, nnz=nnz,
                                    column_offset=column_offset, device=device)
    order = torch.argsort(rows.reshape(-1), stable=True)  # entry t * in_features + j
    bag_sizes = torch.bincount(rows.reshape(-1), minlength=out_features)
    offsets = torch.cumsum(bag_sizes, 0) - bag_sizes
    weights = _signed_scale(negative.reshape(-1)[order], nnz, dtype)
    return order % in_features, offsets, weights


def sparse_jl_forward(x: torch.Tensor, out_features: int, *, seed: int, nnz: int,
                      column_offset: int = 0) -> torch.Tensor:
    """Y = X S^T for a 2-D x (n, d): rows of x projected to out_features, in x's dtype."""
    _check_matrix(x, "x", "sparse_jl_forward")
    acc = _accumulation_dtype(x.dtype)
    n, d = x.shape
    if n == 0 or d == 0:
        return torch.zeros(n, out_features, dtype=x.dtype, device=x.device)
    shard, chunk = _tiling(n, d, out_features, x.device, acc)
    transposed_chunk = _Transposer(chunk, shard, acc, x.device)
    y = torch.empty(n, out_features, dtype=acc, device=x.device)
    for start in range(0, d, shard):
        width = min(shard, d - start)
        columns, offsets, weights = _forward_bags(width, out_features, seed=seed, nnz=nnz,
                                                  column_offset=column_offset + start,
                                                  dtype=acc, device=x.device)
        for row in range(0, n, chunk):
            x_t = transposed_chunk(x[row:row + chunk, start:start + width])
            y_t = torch.nn.functional.embedding_bag(columns, x_t, offsets, mode="sum",
                                                    per_sample_weights=weights)
            _write_transposed(y[row:row + chunk], y_t, accumulate=start > 0)
    return y.to(x.dtype)


def sparse_jl_transpose(y: torch.Tensor, in_features: int, *, seed: int, nnz: int,
                        column_offset: int = 0) -> torch.Tensor:
    """Z = Y S for a 2-D y (n, k): the adjoint of :func:`sparse_jl_forward`, in y's dtype."""
    _check_matrix(y, "y", "sparse_jl_transpose")
    acc = _accumulation_dtype(y.dtype)
    n, k = y.shape
    if n == 0 or in_features == 0:
        return torch.zeros(n, in_features, dtype=y.dtype, device=y.device)
    shard, chunk = _tiling(n, in_features, k, y.device, acc)
    transposed_chunk = _Transposer(chunk, k, acc, y.device)
    z = torch.empty(n, in_features, dtype=y.dtype, device=y.device)
    for start in range(0, in_features, shard):
        width = min(shard, in_features - start)
        rows, negative = sparse_jl_hash(width, k, seed=seed, nnz=nnz,
                                        column_offset=column_offset + start, device=y.device)
        # Column j of S is the bag of its nnz rows: one bag per output column, all of size nnz.
        bags = rows.t().contiguous()
        weights = _signed_scale(negative.t(), nnz, acc)
        for row in range(0, n, chunk):
            y_t = transposed_chunk(y[row:row + chunk])
            z_t = torch.nn.functional.embedding_bag(bags, y_t, mode="sum", per_sample_weights=weights)
            _write_transposed(z[row:row + chunk, start:start + width], z_t, accumulate=False)
    return z


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
        if len(shape) != 2 or seed.shape != (shape[0],):
            raise ValueError(f"a seed tensor needs a 2-D input with one seed per row; got seeds of "
                             f"shape {tuple(seed.shape)} for an input of shape {shape}")
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
    words = philox4x32_10(group & _MASK32, group >> 32, torch.zeros_like(group),
                          spec.DOMAIN_DROPOUT, k0, k1)
    word = _philox_word(words, index & 3)
    return (word >= threshold).reshape(shape)


def dropout_scale(p: float) -> float:
    """The multiplier of kept elements, 1/(1-p); callers hold it in :func:`dropout_compute_dtype`."""
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
    scale = torch.tensor(dropout_scale(p), dtype=compute, device=x.device)
    y = torch.where(keep, x.to(compute) * scale, torch.zeros((), dtype=compute, device=x.device))
    return y.to(x.dtype)
