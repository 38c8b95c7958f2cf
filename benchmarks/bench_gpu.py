"""GPU benchmark of the SJLT and seeded dropout against the copy roofline and their peers.

    python benchmarks/bench_gpu.py [--sections sjlt,transpose] [--out FILE]     (or: make bench-gpu)

RESULTS.md holds curated sections from several scripts: splice this script's tables into it.

Times are medians of triton.testing.do_bench after warm-up, on random data. The roofline is the
bytes an op must move (read input once, write output once) divided by the device-to-device copy
bandwidth measured in this run. Peak memory is torch.cuda.max_memory_allocated during the op,
minus its input and output.
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
import time

import torch
import triton
from triton.testing import do_bench

import sjlt
from sjlt import functional as F
from sjlt import reference, spec
from sjlt.ops import classic, windowed

SJLT_SHAPES = [  # (n, d, k): issue 12's shapes
    (2**20, 1024, 64),
    (2**20, 1024, 256),
    (2**20, 1024, 1024),
    (2**18, 4096, 256),
    (2**18, 4096, 4096),
    (32, 2**24, 4096),
    (4096, 2**17, 4096),
    (2**16, 2**14, 1024),
    (1024, 2**20, 8192),
]
DENSE_LIMIT_BYTES = 8 * 2**30  # skip peers whose materialised matrix or temporaries exceed this
SEED = 20261122


def bench(fn, warmup=25, rep=100) -> float:
    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def copy_bandwidth() -> float:
    src = torch.randn(2**28, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / (ms * 1e-3)


def peak_extra(fn) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - start - out.numel() * out.element_size()
    del out
    return max(extra, 0)


def fmt_ms(ms):
    return "n/a" if ms is None else f"{ms:.3f}"


def tensor_core_floor_ms(n: int, d: int, k: int, nnz: int, tflops: float, passes: int) -> float | None:
    """The default layout's own tile work at the measured bf16 GEMM rate: 2 * WIDTH flops per input
    element and band (WIDTH = 16 * min(nnz, 8) padded to a power of two) for each bfloat16 pass
    (three for exact float32: its second floor, issue 12; one for half types). None for the
    classic layout."""
    if not spec.is_windowed(k, nnz):
        return None
    width = windowed._width(nnz) * spec.band_count(nnz)
    return n * d * 2 * width * passes / (tflops * 1e12) * 1e3


def sjlt_section(bw: float, tflops: float, lines: list[str]) -> None:
    lines += [
        "## SJLT forward (Y = X S^T), default nnz",
        "",
        "`floor ms` is the memory floor (bytes over the copy bandwidth); `tc floor ms` is the time of the "
        f"tile work at the measured {tflops:.0f} TFLOP/s bf16 GEMM rate: three exact passes for float32, "
        "whose `% of floor` is against the larger of the two, one pass for bfloat16, shown only (its "
        "`% of floor` is against the memory floor). `classic ms` times the one-hot kernel of the "
        "classic layout (spec v1's design) on the same shape, for comparison.",
        "",
        "| dtype | n | d | k | layout, nnz | floor ms | tc floor ms | sjlt ms | % of floor | classic ms | cuBLAS dense ms | torch.sparse CSR ms | index_add_ ms | vs cuBLAS | vs CSR | vs index_add_ | extra peak MiB | fp32 rel err |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for n, d, k in SJLT_SHAPES:
            item = torch.finfo(dtype).bits // 8
            x = torch.randn(n, d, device="cuda", generator=gen, dtype=torch.float32).to(dtype)
            floor_ms = (n * d + n * k) * item / bw * 1e3
            ours = bench(lambda: F.sparse_jl(x, k, seed=SEED))
            extra = peak_extra(lambda: F.sparse_jl(x, k, seed=SEED))
            nnz = spec.resolve_nnz(None, k)
            layout = f"{'windowed' if spec.is_windowed(k, nnz) else 'classic'}, {nnz}"
            classic_ms = None
            if n * d * k <= 2**41:  # the one-hot kernel needs minutes beyond this
                classic_ms = bench(lambda: classic.forward(x, k, 1, 2, nnz, 0), warmup=2, rep=5)
            dense_ms = csr_ms = ia_ms = None
            if d * k * item <= DENSE_LIMIT_BYTES:
                s_dense = F.sparse_jl_matrix(d, k, seed=SEED, device="cuda", dtype=dtype).to_dense()
                dense_ms = bench(lambda: x @ s_dense.T)
                del s_dense
            if dtype == torch.float32:
                s_csr = F.sparse_jl_matrix(d, k, seed=SEED, device="cuda").to_sparse_csr()
                try:
                    csr_ms = bench(lambda: torch.sparse.mm(s_csr, x.T), warmup=3, rep=10)
                except RuntimeError:
                    csr_ms = None
                del s_csr
            if n * d * item * 2 <= DENSE_LIMIT_BYTES:
                rows, negative = reference.sparse_jl_hash(d, k, seed=SEED, nnz=nnz, device="cuda")
                signs = torch.where(negative, -1.0, 1.0).to(dtype) / math.sqrt(nnz)

                def index_add():
                    y = torch.zeros(n, k, device="cuda", dtype=dtype)
                    for t in range(nnz):
                        y.index_add_(1, rows[t], x * signs[t])
                    return y

                ia_ms = bench(index_add, warmup=3, rep=10)
            err = ""
            if dtype == torch.float32:
                rows_idx = torch.arange(0, n, max(1, n // 64), device="cuda")
                want = reference.sparse_jl_forward(x[rows_idx].double(), k, seed=SEED, nnz=nnz)
                got = F.sparse_jl(x, k, seed=SEED)[rows_idx].double()
                err = f"{float((got - want).abs().max() / want.abs().max()):.1e}"

            def ratio(peer, ours=ours):
                return "n/a" if peer is None else f"{peer / ours:.2f}x"

            exact = dtype == torch.float32
            tc_ms = tensor_core_floor_ms(n, d, k, nnz, tflops, 3 if exact else 1)
            floor = max(floor_ms, tc_ms or 0.0) if exact else floor_ms
            lines.append(
                f"| {str(dtype)[6:]} | {n} | {d} | {k} | {layout} | {floor_ms:.3f} | {fmt_ms(tc_ms)} | {ours:.3f} | {100 * floor / ours:.0f}% | "
                f"{fmt_ms(classic_ms)} | {fmt_ms(dense_ms)} | {fmt_ms(csr_ms)} | {fmt_ms(ia_ms)} | {ratio(dense_ms)} | {ratio(csr_ms)} | "
                f"{ratio(ia_ms)} | {extra / 2**20:.1f} | {err} |"
            )
            print(lines[-1], flush=True)
            x = None  # frees the input before the next shape (not del: the closures above name x)
            torch.cuda.empty_cache()
    lines.append("")


def transpose_section(bw: float, lines: list[str]) -> None:
    lines += [
        "## SJLT transpose (Z = Y S, the backward)",
        "",
        "| dtype | n | d | k | floor ms | sjlt ms | % of floor |",
        "|---|---|---|---|---|---|---|",
    ]
    gen = torch.Generator(device="cuda").manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        for n, d, k in SJLT_SHAPES:
            item = torch.finfo(dtype).bits // 8
            y = torch.randn(n, k, device="cuda", generator=gen).to(dtype)
            floor_ms = (n * d + n * k) * item / bw * 1e3
            ms = bench(lambda: F.sparse_jl_transpose(y, d, seed=SEED))
            lines.append(
                f"| {str(dtype)[6:]} | {n} | {d} | {k} | {floor_ms:.3f} | {ms:.3f} | {100 * floor_ms / ms:.0f}% |"
            )
            print(lines[-1], flush=True)
    lines.append("")


def small_and_first_call_section(lines: list[str]) -> None:
    lines += [
        "## Small inputs and first call (d = 1024, k = 256, float32)",
        "",
        "| n | sjlt us/call | empty-kernel launch us |",
        "|---|---|---|",
    ]
    noop = torch.empty(1, device="cuda")
    launch_us = bench(lambda: noop.add_(0)) * 1e3
    for n in (1, 64, 4096):
        x = torch.randn(n, 1024, device="cuda")
        us = bench(lambda: F.sparse_jl(x, 256, seed=SEED)) * 1e3
        lines.append(f"| {n} | {us:.1f} | {launch_us:.1f} |")
    lines.append("")


def tensor_core_rate() -> float:
    """The bf16 tensor-core rate, TFLOP/s: cuBLAS on 8192^3."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ a)
    return 2 * 8192**3 / ms / 1e9


def dropout_section(bw: float, lines: list[str]) -> None:
    lines += [
        "## Seeded dropout forward, p = 0.1",
        "",
        "| dtype | elements | floor ms | sjlt ms | % of floor | F.dropout ms | vs F.dropout |",
        "|---|---|---|---|---|---|---|",
    ]
    numel = 2**28
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(numel, device="cuda").to(dtype)
        item = x.element_size()
        floor_ms = 2 * numel * item / bw * 1e3
        ours = bench(lambda: F.seeded_dropout(x, 0.1, seed=SEED))
        theirs = bench(lambda: torch.nn.functional.dropout(x, 0.1, training=True))
        lines.append(
            f"| {str(dtype)[6:]} | 2^28 | {floor_ms:.3f} | {ours:.3f} | {100 * floor_ms / ours:.0f}% | {theirs:.3f} | {theirs / ours:.2f}x |"
        )
        print(lines[-1], flush=True)
        x = None  # not del: the closures above name x
    lines.append("")
    # Memory for backward: an MLP with dropout after each layer, forward + backward.
    lines += [
        "### Peak memory, MLP 4 x Linear(4096, 4096) with dropout after each, batch 16384, bf16",
        "",
        "| dropout | peak MiB | time fwd+bwd ms |",
        "|---|---|---|",
    ]
    for name, make in [
        ("torch.nn.Dropout", lambda: torch.nn.Dropout(0.1)),
        ("sjlt.SeededDropout", lambda: sjlt.SeededDropout(0.1)),
    ]:
        torch.manual_seed(0)
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU(), make()]
        model = torch.nn.Sequential(*layers).cuda().bfloat16()
        x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)

        def step():
            model(x).float().square().mean().backward()
            return x

        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
        ms = bench(step, warmup=3, rep=10)
        lines.append(f"| {name} | {peak:.0f} | {ms:.2f} |")
        print(lines[-1], flush=True)
        model = x = None  # not del: step() names them
        torch.cuda.empty_cache()
    lines.append("")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="write the markdown tables here")
    parser.add_argument("--sections", default="sjlt,transpose,small,dropout")
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))
    first = time.perf_counter()
    F.sparse_jl(torch.randn(4, 1024, device="cuda"), 256, seed=1)
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - first) * 1e3
    bw = copy_bandwidth()
    lines = [
        "# sjlt GPU benchmark",
        "",
        f"- date: {datetime.date.today()}",
        f"- device: {torch.cuda.get_device_name()}",
        f"- torch {torch.__version__}, triton {triton.__version__}, python {platform.python_version()}, sjlt {sjlt.__version__}, spec v{sjlt.SPEC_VERSION}",
        f"- measured device-to-device copy bandwidth (read + write): {bw / 1e9:.0f} GB/s",
        f"- first call in this process (Triton compile or cache load): {first_ms:.0f} ms",
        f"- command: `python benchmarks/bench_gpu.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        "",
    ]
    print("\n".join(lines), flush=True)
    tflops = tensor_core_rate()
    lines += [f"cuBLAS bf16 GEMM 8192^3: {tflops:.0f} TFLOP/s", ""]
    if "sjlt" in sections:
        sjlt_section(bw, tflops, lines)
    if "transpose" in sections:
        transpose_section(bw, lines)
    if "small" in sections:
        small_and_first_call_section(lines)
    if "dropout" in sections:
        dropout_section(bw, lines)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
