"""Seeded dropout: y = x * keep * scale, the keep mask regenerated from (seed, index), never stored.

Element i (its row-major index; or its column index when each row has its own seed) is kept iff
word (i mod 4) of Philox(counter=(g mod 2**32, g div 2**32, 0, DOMAIN), key) >= threshold, with
g = i div 4. One Philox call serves four consecutive elements, so programs start on multiples
of 4 (BLOCK is a multiple of 4). See ``docs/spec.md``.
"""

import triton
import triton.language as tl

from .philox import philox4x32_10


@triton.jit
def float32_to_bfloat16_rne(y):
    """float32 -> bfloat16 rounded to nearest even on the bits, as torch rounds; Triton's interpreter
    truncates a plain cast, and the masks' values must match the reference bit for bit there too."""
    bits = y.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    as_bf16 = rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return tl.where(y != y, y.to(tl.bfloat16), as_bf16)  # NaN payloads must not carry into the sign


@triton.jit
def seeded_dropout_kernel(
    x_ptr,
    y_ptr,
    seeds_ptr,
    scale_ptr,
    n_rows,
    n_cols,
    stride_xr,
    stride_xc,
    threshold,
    DOMAIN: tl.constexpr,
    PER_ROW_SEED: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """x is viewed as (n_rows, n_cols) with strides; y is contiguous of the same shape.

    PER_ROW_SEED: grid covers (row, column block) pairs; row r's key is seeds[r] (uint64 bits).
    Otherwise the grid covers the flat index range, BLOCK elements per program, under the key
    seeds[0]. The seed is read from device memory, never passed by value: a CUDA graph then
    replays with whatever seed its tensor holds at replay time, and a compiled graph does not
    specialise on it.
    """
    pid = tl.program_id(0).to(tl.int64)
    if PER_ROW_SEED:
        blocks_per_row = tl.cdiv(n_cols, BLOCK)
        row = pid // blocks_per_row
        first = (pid - row * blocks_per_row) * BLOCK
        cols = first + tl.arange(0, BLOCK)
        mask = cols < n_cols
        seed = tl.load(seeds_ptr + row)
        x_offs = row * stride_xr + cols * stride_xc
        y_offs = row * n_cols + cols
    else:
        first = pid * BLOCK
        idx = first + tl.arange(0, BLOCK)
        mask = idx < n_rows * n_cols
        seed = tl.load(seeds_ptr)
        if CONTIGUOUS:
            x_offs = idx
        else:
            r = idx // n_cols
            x_offs = r * stride_xr + (idx - r * n_cols) * stride_xc
        y_offs = idx
    k0 = seed & 0xFFFFFFFF
    k1 = (seed >> 32) & 0xFFFFFFFF
    group = (first >> 2) + tl.arange(0, BLOCK // 4).to(tl.int64)
    zero = tl.zeros_like(group)
    w0, w1, w2, w3 = philox4x32_10(group & 0xFFFFFFFF, group >> 32, zero, zero + DOMAIN, k0, k1)
    # join() adds a trailing axis: [g, a, b] = (w0, w2 | w1, w3)[b][a], which flattens to w0 w1 w2 w3.
    words = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), [BLOCK])
    keep = words.to(tl.int64) >= threshold
    x = tl.load(x_ptr + x_offs, mask=mask, other=0.0)
    scale = tl.load(scale_ptr)
    y = tl.where(keep, x.to(scale.dtype) * scale, 0.0)
    if y_ptr.dtype.element_ty == tl.bfloat16:
        y = float32_to_bfloat16_rne(y)
    tl.store(y_ptr + y_offs, y.to(y_ptr.dtype.element_ty), mask=mask)
