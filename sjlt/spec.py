"""The random streams of sjlt, as constants and small pure functions (no torch, no triton).

``docs/spec.md`` is the prose version of this module; the two change together, and any change
to how (seed, index) becomes rows, signs or keep-bits bumps :data:`SPEC_VERSION`.
"""

from __future__ import annotations

import math
import numbers

#: Format version of every stream below. Bump it on any change to the distribution.
SPEC_VERSION = 7
#: The versions whose seeded-dropout stream is the current one (it has not changed since v1).
DROPOUT_SAME_SINCE = (1, 2, 3, 4, 5, 6, 7)

#: Philox counter word c3 for each consumer: distinct values keep the SJLT and dropout streams
#: disjoint under the same seed. ASCII 'SJLT' and 'DROP'.
DOMAIN_SPARSE_JL = 0x534A4C54
DOMAIN_DROPOUT = 0x44524F50
#: The windowed SJLT layout's two streams: 'SJLW' (per-chunk masks and signs) and 'SJLG' (per-group
#: window rotations).
DOMAIN_SPARSE_JL_WINDOW = 0x534A4C57
DOMAIN_SPARSE_JL_GROUP = 0x534A4C47

#: Default nonzeros per column of the SJLT (fewer when out_features is small, more when it is
#: large, see default_nnz).
DEFAULT_NNZ = 8
#: From this many output rows on the default is LARGE_K_NNZ where the windowed layout takes it:
#: with 8 nonzeros the tails of sparse and window-concentrated inputs exceed a Gaussian
#: projection's by 1.1-1.4x there (docs/spec.md, 2b).
LARGE_K = 2048
LARGE_K_NNZ = 16
#: From this many output rows on (k > 8192; 8192 itself keeps 16) the default is VERY_LARGE_K_NNZ:
#: with 16 nonzeros the tails of sparse and window-concentrated inputs reach 1.11-1.27x a Gaussian
#: projection's there (the worse of the two), with 32 0.98-1.05x (docs/spec.md, 2b). 32 rather than
#: 24 keeps power-of-two k on the lattice (multiples of 512).
VERY_LARGE_K = 8193
VERY_LARGE_K_NNZ = 32
#: The windowed layout's XOR masks are affine in the block index over GF(16) (x^4 + x + 1).
GF16_POLYNOMIAL = 0b10011

#: Columns per chunk and rows per window of the windowed layout.
WINDOW = 16
#: Blocks per band of the windowed layout: each band of a group has its own window rotation (v5).
BAND = 8

#: The floating-point dtypes sjlt projects, by name: the one list of the package (torch's dtypes
#: of these names are in ``sjlt._dtypes``).
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: Those that numpy, and so ``.npy`` and parquet files, can hold.
NUMPY_FLOAT_DTYPES = tuple(name for name in FLOAT_DTYPES if name != "bfloat16")

_UINT32 = 0xFFFFFFFF
_SEED_LIMIT = 1 << 64

#: Odd 64-bit Weyl increment that derives a family of seeds from one: member i of seed s is
#: (s + i * SEED_STEP) mod 2**64 (SeededDropout's calls, an attribution projector's model ids).
#: The map is a bijection mod 2**64, so members 0, 1, 2, ... of one seed never coincide.
SEED_STEP = 0x9E3779B97F4A7C15


def check_seed(seed, name: str = "seed") -> int:
    """Returns ``seed`` as a Python int in [0, 2**64), or raises TypeError / ValueError."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"{name} must be a Python int in [0, 2**64), got {type(seed).__name__}; "
            f"pass e.g. {name}=0 (use int(...) to convert numpy or torch scalars)"
        )
    seed = int(seed)
    if not 0 <= seed < _SEED_LIMIT:
        raise ValueError(f"{name} must lie in [0, 2**64), got {seed}; reduce it modulo 2**64")
    return seed


def philox_key(seed: int) -> tuple[int, int]:
    """The Philox key (k0, k1) of a seed: its low and high 32-bit words."""
    seed = check_seed(seed)
    return seed & _UINT32, seed >> 32


def seed_from_key(key0: int, key1: int) -> int:
    """The seed of a Philox key: the inverse of :func:`philox_key`."""
    return (int(key0) & _UINT32) | ((int(key1) & _UINT32) << 32)


def stepped_seed(seed: int, index: int) -> int:
    """Member ``index`` of ``seed``'s family: (seed + index * SEED_STEP) mod 2**64 (docs/spec.md, 3)."""
    return (check_seed(seed) + int(index) * SEED_STEP) % _SEED_LIMIT


def seed_as_int64(seed: int) -> int:
    """The int64 holding the 64 bits of ``seed`` in [0, 2**64) (two's complement), as device
    tensors store seeds."""
    return seed - _SEED_LIMIT if seed >= _SEED_LIMIT >> 1 else seed


def check_dimension(value, name: str) -> int:
    """Returns ``value`` as an int >= 1 (a feature count), or raises TypeError / ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def default_nnz(out_features: int) -> int:
    """8 nonzeros (16 from k = 2048 on, 32 from k = 8193 on), trimmed to the fewest blocks of
    A = ceil(k / 128) (ceil(k / 256), ceil(k / 512)) windows that still cover k, and to at most
    k / 16 so that each block holds 16 rows: the windowed layout for every k from 16 on, with few
    folded rows (docs/spec.md 2b). Below 16, min(8, k) (classic)."""
    if out_features < WINDOW:
        return min(DEFAULT_NNZ, out_features)
    if out_features >= VERY_LARGE_K:
        most = VERY_LARGE_K_NNZ
    elif out_features >= LARGE_K:
        most = LARGE_K_NNZ
    else:
        most = DEFAULT_NNZ
    windows = -(-out_features // (WINDOW * most))
    return min(out_features // WINDOW, -(-out_features // (WINDOW * windows)))


def gf16_multiply(a: int, b: int) -> int:
    """a * b in GF(16) = GF(2)[x] / (x^4 + x + 1), for a, b in [0, 16)."""
    product = 0
    for bit in range(4):
        if (b >> bit) & 1:
            product ^= a
        a <<= 1
        if a & 0x10:
            a ^= GF16_POLYNOMIAL
    return product


def is_windowed(out_features: int, nnz: int) -> bool:
    """Whether S uses the windowed layout: every block holds at least 16 rows, 16 * nnz <= k.
    Otherwise the classic block layout applies (see docs/spec.md)."""
    return WINDOW * nnz <= out_features


def windows_per_block(out_features: int, nnz: int) -> int:
    """A = ceil(W / nnz), W = ceil(k / 16): the 16-row windows of the largest block of the windowed
    layout, and the padded windows every block draws from (docs/spec.md 2b)."""
    windows = -(-out_features // WINDOW)
    return -(-windows // nnz)


def windowed_block_rows(t, out_features: int, nnz: int):
    """(first row, rows) of block t of the windowed layout (ints, or integer tensors of them):
    windows [floor(t W / nnz), floor((t + 1) W / nnz)) of the W = ceil(k / 16) windows of 16 rows,
    the last window cut at row k."""
    windows = -(-out_features // WINDOW)
    start = WINDOW * ((t * windows) // nnz)
    end = WINDOW * (((t + 1) * windows) // nnz)
    end = min(end, out_features) if isinstance(end, int) else end.clamp_max(out_features)
    return start, end - start


def max_fold(out_features: int, nnz: int) -> int:
    """The most padded rows that fold within one block of the windowed layout: 16 A - (its fewest
    rows). 0 on the lattice k = 16 A nnz, at most 16."""
    padded = WINDOW * windows_per_block(out_features, nnz)
    return max(padded - windowed_block_rows(t, out_features, nnz)[1] for t in range(nnz))


def band_count(nnz: int) -> int:
    """Bands of the windowed layout: blocks [8b, 8b + 8) form band b, whose window rotation is
    drawn apart from the other bands' (docs/spec.md, 2b)."""
    return -(-nnz // BAND)


def sparse_jl_same_since(out_features: int, nnz: int) -> tuple[int, ...]:
    """The spec versions whose SJLT matrix for this (out_features, nnz), at a given seed, is the
    current one: saved modules and outputs of other versions must refuse to load. v3 redrew the
    windowed masks; v4 changed only the default nnz, which saves record; v5 gave each band of 8
    blocks its own rotation, which changes windowed matrices with nnz > 8 only; v6 made every
    (k, nnz) with 16 nnz <= k windowed, which changes those off the lattice k = 16 A nnz (classic
    before); v7 changed only the default nnz beyond k = 8192, which saves record. Malformed values
    trust the current version alone."""
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for v in (out_features, nnz)):
        return (SPEC_VERSION,)
    if is_windowed(out_features, nnz) and out_features % (WINDOW * nnz):
        return (6, 7)
    if is_windowed(out_features, nnz) and nnz > BAND:
        return (5, 6, 7)
    return (3, 4, 5, 6, 7)


def resolve_nnz(nnz, out_features: int) -> int:
    """Validated nonzeros per column: ``nnz`` or :func:`default_nnz`, within [1, out_features]."""
    out_features = check_dimension(out_features, "out_features")
    if nnz is None:
        return default_nnz(out_features)
    if isinstance(nnz, bool) or not isinstance(nnz, numbers.Integral):
        raise TypeError(f"nnz must be an int or None, got {type(nnz).__name__}")
    if not 1 <= nnz <= out_features:
        raise ValueError(
            f"nnz must lie in [1, out_features={out_features}], got {nnz}; each column has nnz distinct nonzero rows"
        )
    return int(nnz)


def block_start(t: int, out_features: int, nnz: int) -> int:
    """First row of block t (an int, or an integer tensor of them): rows are split into nnz blocks,
    [floor(t*k/s), floor((t+1)*k/s))."""
    return (t * out_features) // nnz


def check_row_seeds(seeds_shape: tuple, input_shape: tuple) -> None:
    """Raises ValueError unless one seed per row (a 1-D seeds_shape) matches a 2-D input_shape."""
    if len(input_shape) != 2 or tuple(seeds_shape) != (input_shape[0],):
        raise ValueError(
            f"a 1-D seed tensor needs a 2-D input with one seed per row: the input has shape "
            f"{tuple(input_shape)}, the seeds shape {tuple(seeds_shape)}"
        )


def dropout_threshold(p: float) -> int:
    """The integer keep threshold T of drop probability p: element kept iff its uint32 >= T.

    T = round(p * 2**32), exact: p * 2**32 is exact in binary floating point. P(keep) = 1 - T/2**32.
    """
    t = round(float(p) * 4294967296.0)
    return min(max(t, 0), 1 << 32)


def check_probability(p) -> float:
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"p must be a float in [0, 1], got {type(p).__name__}")
    p = float(p)
    if math.isnan(p) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability p must lie in [0, 1], got {p}")
    return p
