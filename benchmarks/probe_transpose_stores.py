"""Store probe for the transposes' misaligned output rows (NOTES.md, "Any d": who owns a sector).

Z = y S writes each 16-column chunk of Z from the program that owns the chunk's window. With rows
of Z off 16 bytes, a chunk's 32 bytes straddle two sectors, each shared with the program of the
neighbouring window: the L2 reads those sectors back from DRAM, and the stores are element stores.
The kernels here store only synthetic values, (row * 7 + column) mod 4093 / 1000, so they time the
store patterns alone, against the same stores into aligned rows:

- ``chunk``: the shipped ownership (a program per window writes one chunk of every group);
- ``group_elem``: a program owns whole groups (A chunks, 16 A columns; A = 8 unless ``--windows``
  says otherwise), element stores;
- ``group_shift``: whole groups stored as aligned 16-byte vectors, each row's values shifted into
  place by ``tl.gather`` (the previous group's last values fill the first vector);
- ``group_vec``: the same stores with the values computed in place, i.e. what a free shift reaches;
- ``pair_split`` / ``pair_joined``: a program owns windows 2p and 2p + 1 (the transpose's twin
  windows) and writes their two neighbouring chunks of each group as two [64, 16] stores one after
  the other, or as one [64, 32] store;
- ``pair_vec``: the pairs' 32 columns as aligned vectors, the values computed in place (a free
  shift): what vector stores would give the twins, whose outer sectors stay shared.

Every variant must write the same Z (checked first). Prediction: ``group_vec`` near the aligned
``chunk``, ``group_elem`` 2-3x it (NOTES: whole groups with element stores took 2.06 against 0.78
ms), and ``group_shift`` between them, since Triton 3.6 lowers each [64, 128] gather to 4 warp
shuffles per element (sm_90 PTX).

    python benchmarks/probe_transpose_stores.py                       # H100: the table
    python benchmarks/probe_transpose_stores.py --windows 2 4 8       # other group widths
    TRITON_INTERPRET=1 python benchmarks/probe_transpose_stores.py    # the equality check, on CPU
"""

import argparse

import torch
import triton
import triton.language as tl


@triton.jit
def _value(offs_m, cols):
    """The synthetic Z at rows offs_m [BM] and columns cols [BM or 1, columns]."""
    return ((offs_m[:, None] * 7 + cols) % 4093).to(tl.float32) * 0.001


@triton.jit
def chunk_kernel(z_ptr, n, d, G, BM: tl.constexpr, A: tl.constexpr):
    """The shipped ownership: a program per (rows, window a, range of G groups) writes chunk a of
    each group."""
    pid_m = tl.program_id(0)
    a = tl.program_id(1) % A
    r = tl.program_id(1) // A
    offs_m = pid_m * BM + tl.arange(0, BM)
    lanes = tl.arange(0, 16)
    groups = tl.cdiv(d, 16 * A)
    for g in range(r * G, tl.minimum(r * G + G, groups)):
        cols = g * 16 * A + a * 16 + lanes
        v = _value(offs_m, cols[None, :])
        mask = (offs_m[:, None] < n) & (cols[None, :] < d)
        tl.store(z_ptr + offs_m[:, None].to(tl.int64) * d + cols[None, :], v.to(z_ptr.dtype.element_ty), mask=mask)


@triton.jit
def group_elem_kernel(z_ptr, n, d, G, BM: tl.constexpr, W: tl.constexpr):
    """A program per (rows, range of G groups) writes whole groups, element by element."""
    pid_m = tl.program_id(0)
    r = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    j = tl.arange(0, W)
    groups = tl.cdiv(d, W)
    for g in range(r * G, tl.minimum(r * G + G, groups)):
        cols = g * W + j
        v = _value(offs_m, cols[None, :])
        mask = (offs_m[:, None] < n) & (cols[None, :] < d)
        tl.store(z_ptr + offs_m[:, None].to(tl.int64) * d + cols[None, :], v.to(z_ptr.dtype.element_ty), mask=mask)


@triton.jit
def pair_kernel(z_ptr, n, d, G, BM: tl.constexpr, A: tl.constexpr, JOINED: tl.constexpr):
    """A program per (rows, windows 2p and 2p + 1, range of G groups) writes both chunks of each
    group: as one [BM, 32] store (JOINED) or as two [BM, 16] stores one after the other."""
    pid_m = tl.program_id(0)
    p = tl.program_id(1) % (A // 2)
    r = tl.program_id(1) // (A // 2)
    offs_m = pid_m * BM + tl.arange(0, BM)
    rows = offs_m[:, None].to(tl.int64) * d
    groups = tl.cdiv(d, 16 * A)
    for g in range(r * G, tl.minimum(r * G + G, groups)):
        for half in tl.static_range(1 if JOINED else 2):
            cols = g * 16 * A + p * 32 + half * 16 + tl.arange(0, 32 if JOINED else 16)
            v = _value(offs_m, cols[None, :])
            mask = (offs_m[:, None] < n) & (cols[None, :] < d)
            tl.store(z_ptr + rows + cols[None, :], v.to(z_ptr.dtype.element_ty), mask=mask)


@triton.jit
def pair_vec_kernel(z_ptr, n, d, G, BM: tl.constexpr, A: tl.constexpr, VEC: tl.constexpr):
    """``pair_kernel``'s ownership with the pair's 32 columns stored as aligned vectors, the values
    computed in place (a free shift): the body's whole vectors in one store, the first and last
    vector, which hold s values of the neighbouring pairs, element by element."""
    pid_m = tl.program_id(0)
    p = tl.program_id(1) % (A // 2)
    r = tl.program_id(1) // (A // 2)
    offs_m = pid_m * BM + tl.arange(0, BM)
    mask_m = offs_m < n
    row_start = offs_m.to(tl.int64) * d
    j = tl.arange(0, 32)
    e = tl.arange(0, VEC)
    groups = d // (16 * A)  # full groups only; ragged_tail_kernel writes the rest
    for g in range(r * G, tl.minimum(r * G + G, groups)):
        col0 = g * 16 * A + p * 32
        s = ((row_start + col0) % VEC).to(tl.int32)
        base = row_start + col0 - s  # the aligned vector holding the pair's first column
        body = tl.multiple_of(base + VEC, VEC)
        # vectors 1 .. 32 / VEC - 1 lie inside the pair for every s; the last position's vector is not stored
        cols = col0 - s[:, None] + VEC + j[None, :]
        inside = (j < 32 - VEC)[None, :] & mask_m[:, None]
        tl.store(z_ptr + body[:, None] + j[None, :], _value(offs_m, cols).to(z_ptr.dtype.element_ty), mask=inside)
        head = col0 - s[:, None] + e[None, :]
        tl.store(
            z_ptr + base[:, None] + e[None, :],
            _value(offs_m, head).to(z_ptr.dtype.element_ty),
            mask=mask_m[:, None] & (e[None, :] >= s[:, None]),
        )
        tail = col0 + 32 - s[:, None] + e[None, :]
        tl.store(
            z_ptr + base[:, None] + 32 + e[None, :],
            _value(offs_m, tail).to(z_ptr.dtype.element_ty),
            mask=mask_m[:, None] & (e[None, :] < s[:, None]),
        )


@triton.jit
def _group_range(n, d, G, BM: tl.constexpr, W: tl.constexpr, VEC: tl.constexpr):
    """This program's rows and its full groups [g0, g1), each row's misalignment s (the same for
    every group: W % VEC == 0) and shift [BM, W]: the source column of output column j'."""
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.arange(0, W)
    g0 = tl.program_id(1) * G
    g1 = tl.minimum(g0 + G, d // W)
    row_start = offs_m.to(tl.int64) * d
    s = ((row_start + g0 * W) % VEC).to(tl.int32)
    return offs_m, offs_m < n, j, g0, g1, row_start, s, j[None, :] - s[:, None]


@triton.jit
def group_shift_kernel(z_ptr, n, d, G, BM: tl.constexpr, W: tl.constexpr, VEC: tl.constexpr):
    """Whole groups, stored as aligned vectors: each row's values shifted right by its misalignment
    s (the previous group's last s values fill the first vector). Only full groups; the range's
    first vector and its tail go through masked element stores."""
    offs_m, mask_m, j, g0, g1, row_start, s, shift = _group_range(n, d, G, BM, W, VEC)
    # first group: its values land at [s, W) of the first span (masked), the rest carry over
    prev = _value(offs_m, (g0 * W + j)[None, :])
    first = tl.gather(prev, tl.maximum(shift, 0), axis=1)
    base = row_start + g0 * W - s
    tl.store(z_ptr + base[:, None] + j[None, :], first.to(z_ptr.dtype.element_ty), mask=mask_m[:, None] & (shift >= 0))
    for g in range(g0 + 1, g1):
        cur = _value(offs_m, (g * W + j)[None, :])
        a = tl.gather(cur, tl.maximum(shift, 0), axis=1)
        b = tl.gather(prev, tl.minimum(shift + W, W - 1), axis=1)
        out = tl.where(shift >= 0, a, b)
        base = tl.multiple_of(row_start + g * W - s, VEC)
        tl.store(z_ptr + base[:, None] + j[None, :], out.to(z_ptr.dtype.element_ty), mask=mask_m[:, None])
        prev = cur
    # tail: the last group's last s values
    tail = tl.gather(prev, tl.minimum(shift + W, W - 1), axis=1)
    base = row_start + g1 * W - s
    tl.store(z_ptr + base[:, None] + j[None, :], tail.to(z_ptr.dtype.element_ty), mask=mask_m[:, None] & (shift < 0))


@triton.jit
def group_vec_kernel(z_ptr, n, d, G, BM: tl.constexpr, W: tl.constexpr, VEC: tl.constexpr):
    """group_shift's stores with the values computed in place (no shift): the floor of whole-group
    ownership with aligned vector stores, what a free shift would reach."""
    offs_m, mask_m, j, g0, g1, row_start, s, shift = _group_range(n, d, G, BM, W, VEC)
    first = _value(offs_m, g0 * W + shift)
    base = row_start + g0 * W - s
    tl.store(z_ptr + base[:, None] + j[None, :], first.to(z_ptr.dtype.element_ty), mask=mask_m[:, None] & (shift >= 0))
    for g in range(g0 + 1, g1):
        out = _value(offs_m, g * W + shift)
        base = tl.multiple_of(row_start + g * W - s, VEC)
        tl.store(z_ptr + base[:, None] + j[None, :], out.to(z_ptr.dtype.element_ty), mask=mask_m[:, None])
    tail = _value(offs_m, g1 * W + shift)
    base = row_start + g1 * W - s
    tl.store(z_ptr + base[:, None] + j[None, :], tail.to(z_ptr.dtype.element_ty), mask=mask_m[:, None] & (shift < 0))


@triton.jit
def ragged_tail_kernel(z_ptr, n, d, BM: tl.constexpr, W: tl.constexpr):
    pid_m = tl.program_id(0)
    offs_m = pid_m * BM + tl.arange(0, BM)
    cols = (d // W) * W + tl.arange(0, W)
    v = _value(offs_m, cols[None, :])
    mask = (offs_m[:, None] < n) & (cols[None, :] < d)
    tl.store(z_ptr + offs_m[:, None].to(tl.int64) * d + cols[None, :], v.to(z_ptr.dtype.element_ty), mask=mask)


def run(variant, z, G, A=8, BM=64):
    n, d = z.shape
    W = 16 * A  # a group's columns
    vec = 16 // z.element_size()
    groups = triton.cdiv(d, W)
    ranges = triton.cdiv(groups, G)
    if variant == "chunk":
        chunk_kernel[(triton.cdiv(n, BM), A * ranges)](z, n, d, G, BM=BM, A=A)
    elif variant == "group_elem":
        group_elem_kernel[(triton.cdiv(n, BM), ranges)](z, n, d, G, BM=BM, W=W)
    elif variant == "pair_vec":
        pair_vec_kernel[(triton.cdiv(n, BM), A // 2 * ranges)](z, n, d, G, BM=BM, A=A, VEC=vec)
        if d % W:
            ragged_tail_kernel[(triton.cdiv(n, BM),)](z, n, d, BM=BM, W=W)
    elif variant.startswith("pair"):
        pair_kernel[(triton.cdiv(n, BM), A // 2 * ranges)](z, n, d, G, BM=BM, A=A, JOINED=variant == "pair_joined")
    else:
        full = d // W
        kernel = group_shift_kernel if variant == "group_shift" else group_vec_kernel
        kernel[(triton.cdiv(n, BM), triton.cdiv(full, G))](z, n, d, G, BM=BM, W=W, VEC=vec)
        if d % W:
            ragged_tail_kernel[(triton.cdiv(n, BM),)](z, n, d, BM=BM, W=W)


def _check_and_time(n: int, d: int, dtype: torch.dtype, device: str, variants, A: int = 8) -> dict:
    """Each variant's Z (all equal, or it raises) and its do_bench median in ms (CUDA only)."""
    m = torch.arange(n, device=device)[:, None]
    want = (((m * 7 + torch.arange(d, device=device)[None, :]) % 4093).float() * 0.001).to(dtype)
    groups = triton.cdiv(d, 16 * A)
    # about 1024 programs whatever the shape: fewer groups per program for fewer row tiles
    per_program = max(1, min(128, groups // max(1, 1024 // triton.cdiv(n, 64)))) if device == "cuda" else 3
    times, first = {}, None
    for variant in variants:
        z = torch.full((n, d), float("nan"), dtype=dtype, device=device)
        run(variant, z, per_program, A)
        first = z if first is None else first
        # the interpreter rounds to bfloat16 its own way: equal to each other, close to torch's
        if not torch.equal(z, first) or not torch.allclose(z.float(), want.float(), rtol=1e-2, atol=1e-2):
            raise AssertionError(f"{variant} wrote a different Z at {n} x {d} {dtype}")
        if device == "cuda":
            from triton.testing import do_bench

            times[variant] = do_bench(lambda z=z, v=variant: run(v, z, per_program, A), warmup=50, rep=300)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, nargs="+", default=[8], help="A, even: 16 A columns per group")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    variants = ("chunk", "pair_split", "pair_joined", "pair_vec", "group_elem", "group_shift", "group_vec")
    if device == "cpu":
        shapes = [(20, 256, 301), (17, 1024, 1029), (9, 2048, 2045)]
    else:
        shapes = [(65536, 16384, 16383), (4096, 131072, 131071), (1048576, 768, 769)]
    print(
        "| A | n x d (ragged) | dtype | aligned chunk ms | "
        + " | ".join(f"{v} ms (x aligned)" for v in variants)
        + " |"
    )
    print("|---|---|---|---|" + "---|" * len(variants))
    for A in args.windows:
        for dtype in (torch.bfloat16, torch.float32):
            for n, aligned, ragged in shapes:
                base = _check_and_time(n, aligned, dtype, device, ("chunk",), A)
                times = _check_and_time(n, ragged, dtype, device, variants, A)
                if device == "cpu":
                    cells = " | ".join("equal" for _ in variants)
                    print(f"| {A} | {n} x {ragged} | {str(dtype)[6:]} | equal | {cells} |")
                    continue
                ref = base["chunk"]
                cells = " | ".join(f"{times[v]:.3f} ({times[v] / ref:.2f})" for v in variants)
                print(f"| {A} | {n} x {ragged} | {str(dtype)[6:]} | {ref:.3f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
