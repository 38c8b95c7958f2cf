"""Speed-of-light probe for the next few-row forward (NOTES.md, "Per-lane tensor-core products"):
in the frame of a slope, chunk column j of every block of a band lands in accumulator lane j, so
for each lane j a run of same-slope chunks updates the band's 8 blocks by a product
(rows x chunks) @ (chunks x blocks) of x's permuted columns and the words' sign bits: one
tensor-core product per lane per 16 chunks.

The probe is idealised: every chunk is taken to have slope 0 (no frame changes, no sort), chunks
come in memory order, and the two bands' chunks are separate runs whose products fill half of a
16-block accumulator each (tl.dot needs N >= 16; a band has 8 blocks). It times what the arithmetic
and the layout changes cost, against the shipped `F.sparse_jl` at the same shape, and checks its
bfloat16 sums against a torch oracle of the same products first. Exact float32 takes three
bfloat16 pieces of x (the accumulation order of the tensor cores is not the shipped kernel's).

    python benchmarks/probe_lane_products.py                        # H100
    TRITON_INTERPRET=1 python benchmarks/probe_lane_products.py     # the oracle check, on CPU
"""

import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

import sjlt.functional as F

# The interpreter multiplies bfloat16 operands as raw bits; it checks the float32 products instead.
DOT = tl.float32 if os.environ.get("TRITON_INTERPRET") == "1" else tl.bfloat16


@triton.jit
def _lane_products(x, w, acc, lanes, BAND: tl.constexpr, DOT: tl.constexpr, PIECES: tl.constexpr):
    """acc [lane, row, block] + the products of one run of chunks: x [row, chunk, column] and
    w [chunk, block] (block 0's low 4 bits are the chunk's XOR mask b_c)."""
    mask = tl.sum(tl.where(lanes[None, :] == 0, w, 0), 1) & 15
    source = lanes[None, None, :] ^ mask[None, :, None]
    moved = tl.gather(x, source + tl.zeros_like(x).to(tl.int32), 2)  # [row, chunk, lane]
    source_of_lane = lanes[:, None] ^ mask[None, :]  # [lane, chunk]
    negative = (w[None, :, :] >> (16 + source_of_lane[:, :, None])) & 1  # [lane, chunk, block]
    sign = tl.where(negative != 0, -1.0, 1.0)
    if BAND >= 0:  # this run's band: blocks 8 * BAND to 8 * BAND + 7 of the accumulator
        sign = tl.where(lanes[None, None, :] // 8 == BAND, sign, 0.0)
    signs = sign.to(DOT)
    rest = tl.permute(moved, (2, 0, 1)).to(tl.float32)  # [lane, row, chunk]
    for _ in tl.static_range(PIECES):
        piece = rest.to(DOT)
        acc = tl.dot(piece, signs, acc)
        rest = rest - piece.to(tl.float32)
    return acc


@triton.jit
def lane_products_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    stride_xm,
    ITERS: tl.constexpr,
    ROWS: tl.constexpr,
    CHUNKS: tl.constexpr,
    BANDS: tl.constexpr,
    DOT: tl.constexpr,
    PIECES: tl.constexpr,
):
    rows = tl.arange(0, ROWS)
    run = tl.arange(0, CHUNKS)
    lanes = tl.arange(0, 16)
    acc = tl.zeros((16, ROWS, 16), dtype=tl.float32)
    for step in range(ITERS):
        first = (tl.program_id(0) * ITERS + step) * CHUNKS * BANDS
        for band in tl.static_range(BANDS):
            chunks = first + band * CHUNKS + run
            x = tl.load(x_ptr + rows[:, None, None] * stride_xm + chunks[None, :, None] * 16 + lanes[None, None, :])
            w = tl.load(w_ptr + chunks[:, None] * 16 + lanes[None, :])
            acc = _lane_products(x, w, acc, lanes, band if BANDS > 1 else -1, DOT, PIECES)
    out = out_ptr + tl.program_id(0) * (16 * ROWS * 16)
    tl.store(out + lanes[:, None, None] * (ROWS * 16) + rows[None, :, None] * 16 + lanes[None, None, :], acc)


def oracle(x, w, iters, chunks_per_run, programs):
    """The kernel's sums with one band, in float64: [program, lane, row, block]."""
    n = x.shape[0]
    chunks = programs * iters * chunks_per_run
    columns = x[:, : chunks * 16].double().reshape(n, chunks, 16)
    lanes = torch.arange(16, device=x.device)
    source = lanes[None, :] ^ (w[:chunks, 0] & 15).long()[:, None]  # [chunk, lane]
    moved = torch.gather(columns, 2, source[None].expand(n, -1, -1))
    signs = 1.0 - 2.0 * ((w[:chunks, None, :].long() >> (16 + source[:, :, None])) & 1).double()
    terms = torch.einsum("rcj,cjt->crjt", moved, signs).reshape(programs, iters * chunks_per_run, n, 16, 16)
    return terms.sum(1).permute(0, 2, 1, 3)


def probe(n, d, dtype, chunks=16, iters=64, warps=4, bands=2, device="cuda", check=False):
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, d, device=device, generator=generator).to(dtype)
    words = torch.randint(-(2**31), 2**31 - 1, (d // 16, 16), device=device, generator=generator).to(torch.int32)
    programs = d // 16 // (iters * chunks * bands)
    out = torch.empty(programs, 16, n, 16, device=device)
    pieces = 3 if dtype == torch.float32 else 1

    def launch():
        lane_products_kernel[(programs,)](
            x, words, out, x.stride(0), iters, n, chunks, bands, DOT, pieces, num_warps=warps
        )

    launch()
    if check:
        want = oracle(x, words, iters, chunks, programs)
        error = float((out.double() - want).abs().max() / want.abs().max())
        assert error < 1e-5, error
        return error
    return do_bench(launch, return_mode="median")


def main() -> None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        for dtype in (torch.bfloat16, torch.float32):
            error = probe(16, 1024, dtype, iters=2, bands=1, device="cpu", check=True)
            print(f"{dtype}: products match the oracle (relative error {error:.1e})")
        return
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    probe(16, 2**16, torch.bfloat16, iters=4, bands=1, check=True)
    print("| n | d | dtype | sparse_jl k = 4096 ms | probe ms, 4 warps | probe ms, 8 warps |")
    print("|---|---|---|---|---|---|")
    for n in (16, 32):
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(n, 2**25, device="cuda").to(dtype)
            shipped = do_bench(lambda: F.sparse_jl(x, 4096, seed=1), return_mode="median")  # noqa: B023
            x = None
            cells = [probe(n, 2**25, dtype, warps=warps) for warps in (4, 8)]
            print(f"| {n} | 2^25 | {dtype} | {shipped:.3f} | {cells[0]:.3f} | {cells[1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
