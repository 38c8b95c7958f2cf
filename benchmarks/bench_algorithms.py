"""The sweep behind sjlt's algorithm rule (sjlt/ops/choice.py), and the float32 precision modes.

    python benchmarks/bench_algorithms.py [--sections sweep,precision] [--dtypes bfloat16,...]
        [--shapes 1048576x768,...] [--ks 300,700,...] [--out FILE]

For each shape and dtype: the Triton kernel of the default layout and the dense algorithm (a cached
+-1 matrix of the same S, one cuBLAS addmm) timed side by side (triton.testing.do_bench medians
after warm-up, random data), the faster one, and what the fixed rule picks in each direction. By
default the H100 sweep's shapes and k; ``--shapes`` and ``--ks`` give others (the H200 sweep of
half types on short rows where k folds: benchmarks/NOTES.md, "Any k", item 33). Then float32 under
each torch.get_float32_matmul_precision() mode: time and max relative error against float64.
"""

from __future__ import annotations

import argparse
import datetime
import sys

import torch
import triton
from triton.testing import do_bench

from sjlt import backends, reference, spec
from sjlt.ops import choice, dense, layouts
from sjlt.ops._launch import FP32_PASSES

SEED = 11
SHAPES = [(2**20, 1024), (2**18, 4096), (2**16, 1024), (4096, 1024), (64, 1024)]
FEATURES = (64, 128, 256, 512, 1024)


def bench(fn) -> float:
    return do_bench(fn, warmup=10, rep=50, return_mode="median")


def copy_bandwidth() -> float:
    src = torch.randn(2**28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / (bench(lambda: dst.copy_(src)) * 1e-3)


DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def sweep(lines: list[str], bw: float, dtypes, shapes, features) -> None:
    lines += [
        "## Algorithm choice: kernel against dense cuBLAS (forward and transpose, default nnz)",
        "",
        "| dtype | n | d | k | floor ms | kernel ms | dense ms | transpose kernel ms | transpose dense ms | faster (fwd/T) | rule picks (fwd/T) | rule right |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    key0, key1 = spec.philox_key(SEED)
    right = right_t = total = 0
    for dtype in dtypes:
        for n, d in shapes:
            x = torch.randn(n, d, device="cuda", dtype=dtype)
            for k in features:
                nnz = spec.resolve_nnz(None, k)
                y = torch.randn(n, k, device="cuda", dtype=dtype)
                floor = (n * d + n * k) * x.element_size() / bw * 1e3
                kernel = bench(lambda: layouts.triton_forward(x, k, key0, key1, nnz, 0))
                kernel_t = bench(lambda: layouts.triton_transpose(y, d, key0, key1, nnz, 0))
                fits = d * k * x.element_size() <= backends.dense_cache_bytes
                dense_ms = bench(lambda: dense.forward(x, k, key0, key1, nnz, 0)) if fits else float("nan")
                dense_t = bench(lambda: dense.transpose(y, d, key0, key1, nnz, 0)) if fits else float("nan")
                faster = "/".join("dense" if b < a else "kernel" for a, b in ((kernel, dense_ms), (kernel_t, dense_t)))
                picks = (choice._rule(x, d, k), choice._rule(y, d, k, transpose=True))
                oks = [pick == faster_one for pick, faster_one in zip(picks, faster.split("/"))]
                right += oks[0]
                right_t += oks[1]
                total += 1
                lines.append(
                    f"| {str(dtype)[6:]} | {n} | {d} | {k} | {floor:.3f} | {kernel:.3f} | {dense_ms:.3f} | "
                    f"{kernel_t:.3f} | {dense_t:.3f} | {faster} | {'/'.join(picks)} | "
                    f"{'/'.join('yes' if ok else 'NO' for ok in oks)} |"
                )
                dense.clear_cache()
    lines += [
        "",
        f"The rule picks the faster forward algorithm in {right} of {total} configurations, the faster "
        f"transpose in {right_t}.",
        "",
    ]


def precision(lines: list[str], bw: float) -> None:
    lines += [
        "## float32 precision modes (kernel, default nnz)",
        "",
        "| n | d | k | mode | bf16 passes | ms | % of memory floor | max rel. error vs float64 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    key0, key1 = spec.philox_key(SEED)
    previous = torch.get_float32_matmul_precision()
    for n, d, k in [(2**20, 1024, 256), (2**20, 1024, 1024), (2**18, 4096, 4096)]:
        x = torch.randn(n, d, device="cuda")
        nnz = spec.resolve_nnz(None, k)
        rows = torch.arange(0, n, n // 64, device="cuda")
        want = reference.sparse_jl_forward(x[rows].double(), k, seed=SEED, nnz=nnz)
        floor = (n * d + n * k) * 4 / bw * 1e3
        for mode, passes in FP32_PASSES.items():
            torch.set_float32_matmul_precision(mode)
            ms = bench(lambda: layouts.triton_forward(x, k, key0, key1, nnz, 0))
            got = layouts.triton_forward(x, k, key0, key1, nnz, 0)[rows].double()
            error = float((got - want).abs().max() / want.abs().max())
            lines.append(f"| {n} | {d} | {k} | {mode} | {passes} | {ms:.3f} | {100 * floor / ms:.0f}% | {error:.1e} |")
    torch.set_float32_matmul_precision(previous)
    lines.append("")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="sweep,precision")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="the sweep's dtypes")
    parser.add_argument("--shapes", help="the sweep's n x d, e.g. 1048576x768,262144x4096")
    parser.add_argument("--ks", help="the sweep's k, e.g. 300,700,1000")
    parser.add_argument("--out")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    dtypes = [DTYPES[name] for name in args.dtypes.split(",")]
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")] if args.shapes else SHAPES
    features = [int(k) for k in args.ks.split(",")] if args.ks else FEATURES
    bw = copy_bandwidth()
    lines = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
        f"{datetime.date.today()}, copy {bw / 1e9:.0f} GB/s. `python benchmarks/bench_algorithms.py {' '.join(argv)}`",
        "",
    ]
    if "sweep" in sections:
        sweep(lines, bw, dtypes, shapes, features)
    if "precision" in sections:
        precision(lines, bw)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
