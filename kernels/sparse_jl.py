"""Sparse JL transform kernels: Y = X S^T (forward), Z = Y S (transpose), and S's hash table.

S (k x d) is never stored: a pre-pass hashes each (nonzero, column) once into an nnz x d int32
table (O(d) memory), which the projection kernels read. Column j's t-th nonzero (t < s) sits in block t of the rows,
[floor(t*k/s), floor((t+1)*k/s)), at the row picked by one Philox call on counter
(j mod 2**32, j div 2**32, t, DOMAIN) and key (k0, k1); see ``docs/spec.md``.

The products run on tensor cores against a one-hot tile of S built in registers. float32
inputs are split exactly into three bfloat16 terms (hi + mid + lo carry 24 mantissa bits) so the
result is float32-accurate with no tf32 rounding; half-precision inputs take one pass. DOT_DTYPE
is bfloat16/float16 on a GPU and float32 under TRITON_INTERPRET=1, where low-precision tl.dot is
unreliable: the split is identical, only the dot's operand type differs.
"""

import triton
import triton.language as tl

from .philox import philox4x32_10


@triton.jit
def block_bounds(t, k, nnz):
    """First row and row count of block t: [floor(t*k/s), floor((t+1)*k/s)). Scalars only: integer
    division is expensive on a GPU and must not run per element."""
    t = tl.cast(t, tl.int64)  # t may be a plain int (static loop, or specialised to 1)
    start = (t * k) // nnz
    return start, ((t + 1) * k) // nnz - start


@triton.jit
def nonzero_row_and_sign(local_col, column_offset, t, start, size, key0, key1, DOMAIN: tl.constexpr):
    """Row (int64) and sign (+1/-1 float32) of nonzero t of global column local_col + column_offset,
    where block t is rows [start, start + size)."""
    col = local_col.to(tl.int64) + column_offset  # widen first: offsets pass 2**31
    zero = tl.zeros_like(col)
    c0 = (col & 0xFFFFFFFF).to(tl.uint32)
    c1 = (col >> 32).to(tl.uint32)
    w0, w1, _, _ = philox4x32_10(c0, c1, zero + t, zero + DOMAIN, key0, key1)
    # Lemire's multiply-shift, floor(w0 * size / 2**32), as one 32-bit high multiply.
    row = start + tl.umulhi(w0, (zero + size).to(tl.uint32)).to(tl.int64)
    sign = tl.where((w1 >> 31) != 0, -1.0, 1.0)
    return row, sign


@triton.jit
def sparse_jl_hash_kernel(table_ptr, d, k, nnz, column_offset, key0, key1, DOMAIN: tl.constexpr, BLOCK: tl.constexpr):
    """table[t, j] = row of nonzero t of column j, with bit 31 set when its sign is negative.

    Grid: (cdiv(d, BLOCK), nnz). Each (column, t) is hashed exactly once, one per thread; the
    projection kernels read this table (nnz * d int32, O(d) memory) instead of re-hashing in
    every program, where the column vector would be replicated across threads.
    """
    pid = tl.program_id(0)
    t = tl.program_id(1)
    j = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = j < d
    start, size = block_bounds(t, k, nnz)
    row, sign = nonzero_row_and_sign(j, column_offset, t, start, size, key0, key1, DOMAIN)
    packed = row.to(tl.int32) | tl.where(sign < 0, -2147483648, 0).to(tl.int32)
    tl.store(table_ptr + t.to(tl.int64) * d + j, packed, mask=mask)


@triton.jit
def unpack_row_and_sign(packed):
    """(row, sign) from a hash-table entry: rows fit in 31 bits (k < 2**31); bit 31 is the sign."""
    return packed & 0x7FFFFFFF, tl.where(packed < 0, -1.0, 1.0)


@triton.jit
def _block_of_row(row, k, nnz):
    # The block t holding row r is the largest t with floor(t*k/s) <= r.
    return ((row + 1) * nnz - 1) // k


@triton.jit
def split_bf16x3(a, FP32_PASSES: tl.constexpr):
    """float32 a as hi + mid + lo, three bfloat16 terms that carry all 24 mantissa bits: exact
    except for values so small that the low terms fall below bfloat16's subnormal range.

    With all three passes each term is the top 16 bits of what the terms before it leave: every
    step is exact (a truncated term leaves at most 16, then 8 significant bits), and takes a mask
    and a shift where a rounding conversion (F2F) and its widening took the forward's time (H200:
    30% of the float32 forward's stall samples on one such widening; benchmarks/NOTES.md, design
    13: float32 forwards 1-32% faster).
    With fewer passes the dropped terms are the error, so hi (and mid) are rounded to nearest,
    which halves it."""
    if FP32_PASSES == 3:
        hi = _top_half(a)
        rest = a - hi
        mid = _top_half(rest)
        return _as_bf16(hi), _as_bf16(mid), _as_bf16(rest - mid)
    hi = a.to(tl.bfloat16)
    rest = a - hi.to(tl.float32)
    mid = rest.to(tl.bfloat16)
    lo = (rest - mid.to(tl.float32)).to(tl.bfloat16)
    return hi, mid, lo


@triton.jit
def _top_half(a):
    """float32 a with its low 16 bits cleared: a bfloat16 value, truncated toward zero."""
    return (a.to(tl.uint32, bitcast=True) & 0xFFFF0000).to(tl.float32, bitcast=True)


@triton.jit
def _as_bf16(a):
    """float32 a whose low 16 bits are zero, as the bfloat16 it holds (exact, no rounding)."""
    return (a.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def dot_exact(a, b, acc, FP32_PASSES: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """acc += a @ b where b holds small integers (exact in DOT_DTYPE).

    FP32_PASSES is 0 for half-precision a (one dot in its own type) and 1, 2 or 3 for float32 a:
    the number of bfloat16 terms of a's split that are multiplied. 3 carries all 24 mantissa bits
    (exact, torch's "highest" float32 matmul precision); 2 carries 16 and 1 carries 8, the cheaper
    "high" and "medium" modes."""
    if FP32_PASSES == 0:
        acc = tl.dot(a.to(DOT_DTYPE), b.to(DOT_DTYPE), acc)
    else:
        hi, mid, lo = split_bf16x3(a, FP32_PASSES)
        b = b.to(DOT_DTYPE)
        acc = tl.dot(hi.to(DOT_DTYPE), b, acc)
        if FP32_PASSES >= 2:
            acc = tl.dot(mid.to(DOT_DTYPE), b, acc)
        if FP32_PASSES >= 3:
            acc = tl.dot(lo.to(DOT_DTYPE), b, acc)
    return acc


@triton.jit
def _sum_one_hot_steps(
    acc,
    x_ptr,
    table_ptr,
    d_begin,
    d_end,
    d,
    offs_m,
    mask_m,
    offs_o,
    t_first,
    t_last,
    stride_xm,
    stride_xd,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """acc + x[:, d_begin:d_end] @ (the one-hot tile of S for these columns and output columns)."""
    for d0 in range(d_begin, d_end, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        mask_d = offs_d < d_end
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_d[None, :] * stride_xd,
            mask=mask_m[:, None] & mask_d[None, :],
            other=0.0,
        )
        one_hot = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
        for t in range(t_first, t_last + 1):
            packed = tl.load(table_ptr + tl.cast(t, tl.int64) * d + offs_d, mask=mask_d, other=0)
            row, sign = unpack_row_and_sign(packed)
            one_hot += tl.where(row[:, None] == offs_o[None, :], sign[:, None], 0.0)
        acc = dot_exact(x, one_hot, acc, FP32_PASSES, DOT_DTYPE)
    return acc


@triton.jit
def sparse_jl_forward_kernel(
    x_ptr,
    table_ptr,
    out_ptr,
    n,
    d,
    k,
    nnz,
    scale,
    stride_xm,
    stride_xd,
    stride_om,
    stride_ok,
    stride_split,
    cols_per_split,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PROMOTE_EVERY: tl.constexpr,
):
    """out[split, m, o] = scale * sum over this split's columns j of x[m, j] * sign * [row == o].

    Grid: (cdiv(n, BLOCK_M), cdiv(k, BLOCK_N), splits). With one split ``out`` is Y itself;
    otherwise a float32 workspace whose splits the caller sums in a fixed order (deterministic).
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_o = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < n
    first_o = pid_n * BLOCK_N
    last_o = tl.minimum(first_o + BLOCK_N, k) - 1
    t_first = _block_of_row(first_o, k, nnz)
    t_last = _block_of_row(last_o, k, nnz)

    d_begin = pid_s.to(tl.int64) * cols_per_split
    d_end = tl.minimum(d_begin + cols_per_split, d)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if PROMOTE_EVERY == 0:
        acc = _sum_one_hot_steps(
            acc,
            x_ptr,
            table_ptr,
            d_begin,
            d_end,
            d,
            offs_m,
            mask_m,
            offs_o,
            t_first,
            t_last,
            stride_xm,
            stride_xd,
            FP32_PASSES,
            DOT_DTYPE,
            BLOCK_N,
            BLOCK_D,
        )
    else:  # runs of steps summed apart and added rounding to nearest, as the windowed forward does
        for first in range(d_begin, d_end, BLOCK_D * PROMOTE_EVERY):
            acc += _sum_one_hot_steps(
                tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32),
                x_ptr,
                table_ptr,
                first,
                tl.minimum(first + BLOCK_D * PROMOTE_EVERY, d_end),
                d,
                offs_m,
                mask_m,
                offs_o,
                t_first,
                t_last,
                stride_xm,
                stride_xd,
                FP32_PASSES,
                DOT_DTYPE,
                BLOCK_N,
                BLOCK_D,
            )
    out = acc * scale
    out_ptrs = out_ptr + pid_s.to(tl.int64) * stride_split + offs_m[:, None] * stride_om + offs_o[None, :] * stride_ok
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & (offs_o[None, :] < k))


@triton.jit
def sparse_jl_transpose_kernel(
    y_ptr,
    table_ptr,
    z_ptr,
    n,
    d,
    k,
    nnz,
    scale,
    stride_ym,
    stride_yk,
    stride_zm,
    stride_zd,
    FP32_PASSES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """z[m, j] = scale * sum_t sign(j, t) * y[m, row(j, t)]. Grid: cdiv(n, BLOCK_M) * cdiv(d, BLOCK_D)
    programs on one axis (axis 1 would cap d at 65535 tiles); neighbours share rows of y in L2.

    Mirrors the forward: for each BLOCK_N chunk of y's columns, one one-hot tile holds every block
    that intersects the chunk, so small blocks (k / nnz < BLOCK_N) cost one dot, not one each.
    """
    tiles_d = tl.cdiv(d, BLOCK_D)
    pid = tl.program_id(0)
    pid_m = pid // tiles_d
    pid_d = pid - pid_m * tiles_d
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = pid_d.to(tl.int64) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_m = offs_m < n
    mask_d = offs_d < d
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for o0 in range(0, k, BLOCK_N):
        offs_o = o0 + tl.arange(0, BLOCK_N)
        y = tl.load(
            y_ptr + offs_m[:, None] * stride_ym + offs_o[None, :] * stride_yk,
            mask=mask_m[:, None] & (offs_o[None, :] < k),
            other=0.0,
        )
        t_first = _block_of_row(o0, k, nnz)
        t_last = _block_of_row(tl.minimum(o0 + BLOCK_N, k) - 1, k, nnz)
        one_hot_t = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
        for t in range(t_first, t_last + 1):
            packed = tl.load(table_ptr + tl.cast(t, tl.int64) * d + offs_d, mask=mask_d, other=0)
            row, sign = unpack_row_and_sign(packed)
            one_hot_t += tl.where(offs_o[:, None] == row[None, :], sign[None, :], 0.0)
        acc = dot_exact(y, one_hot_t, acc, FP32_PASSES, DOT_DTYPE)
    out = acc * scale
    tl.store(
        z_ptr + offs_m[:, None] * stride_zm + offs_d[None, :] * stride_zd,
        out.to(z_ptr.dtype.element_ty),
        mask=mask_m[:, None] & mask_d[None, :],
    )
