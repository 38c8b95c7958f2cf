"""Rows copied to a new width: cut to their first ``width_out`` elements, or padded with zeros.

The dense algorithm multiplies through S padded to 16-byte rows (``sjlt.ops.dense``), so its Y is
cut to k columns after and its transpose's y padded before; a windowed transpose copies y into
rows of a multiple of 16 elements. torch's strided copy ran at 33-43% of the copy rate there in
half types (H200, benchmarks/NOTES.md, "Any k", item 32). A program takes ROWS rows of the
contiguous output as one flat span: its whole steps store unmasked vectors whatever the widths
(ROWS a multiple of 8 starts each span on 16 bytes), and its loads gather.
"""

import triton
import triton.language as tl


@triton.jit
def resize_rows_kernel(
    x_ptr,
    out_ptr,
    n,
    width_in,
    width_out,
    inverse_width_out,
    stride_xm,
    stride_xk,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """out (n, width_out), contiguous: out[m, c] = x[m, c] for c < width_in, else 0.
    ``inverse_width_out`` is 1 / width_out in float32; ROWS * width_out + BLOCK <= 2**31 (the
    launcher's rule), so every flat position and row * width_out fit in 32 bits. Grid:
    cdiv(n, ROWS)."""
    first = tl.program_id(0).to(tl.int64) * ROWS
    span = (tl.minimum(n - first, ROWS) * width_out).to(tl.int32)
    x_rows = x_ptr + first * stride_xm
    out_rows = out_ptr + first * width_out
    whole = span // BLOCK
    for step in range(0, whole):
        flat = step * BLOCK + tl.arange(0, BLOCK)
        values = _gather(x_rows, flat, flat >= 0, width_in, width_out, inverse_width_out, stride_xm, stride_xk)
        tl.store(out_rows + flat, values)
    if whole * BLOCK < span:
        flat = whole * BLOCK + tl.arange(0, BLOCK)
        inside = flat < span
        values = _gather(x_rows, flat, inside, width_in, width_out, inverse_width_out, stride_xm, stride_xk)
        tl.store(out_rows + flat, values, mask=inside)


@triton.jit
def _gather(x_rows, flat, inside, width_in, width_out, inverse_width_out, stride_xm, stride_xk):
    """x's values at the program's flat output positions ``flat`` (0 past its rows' width_in), read
    where ``inside``.
    The row is flat // width_out from a float32 estimate, which is off by at most one over ROWS
    rows, and one correction: an integer division per element costs about as much as the copy."""
    row = (flat.to(tl.float32) * inverse_width_out).to(tl.int32)
    column = flat - row * width_out
    row = tl.where(column < 0, row - 1, tl.where(column >= width_out, row + 1, row))
    column = flat - row * width_out
    offsets = row.to(tl.int64) * stride_xm + column.to(tl.int64) * stride_xk
    return tl.load(x_rows + offsets, mask=inside & (column < width_in), other=0)
