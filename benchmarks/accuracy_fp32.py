"""float32 accuracy of the forward kernels against float64, per precision mode and per promotion
run length (issue 12: <= 1e-5 relative error under "highest").

    python benchmarks/accuracy_fp32.py [--shapes all|large] [--promote-every 0 1 16] [--out FILE]

For each shape: the kernel of the default layout (and one classic-layout row) under each
torch.get_float32_matmul_precision() mode, with the launcher's rule; "highest" also with each
``--promote-every``: the loop steps a forward sums in one tensor-core accumulator before adding
them to the total with round-to-nearest ("all": 0, one accumulator), so the table shows what
promotion costs and buys. Error: the
max |Y - Y64| over the max |Y64| on 64 sampled rows, Y64 from the float64 reference. Time: median
of triton.testing.do_bench after warm-up, on random data; % of the memory floor (bytes of X and
Y over the measured copy bandwidth). Extra MiB: peak memory beyond X and Y (the split partials).
"""

from __future__ import annotations

import argparse
import datetime
import sys

import torch
import triton
from bench_gpu import copy_bandwidth, peak_extra
from triton.testing import do_bench

from sjlt import reference, spec
from sjlt.ops import classic, windowed
from sjlt.ops._launch import FP32_PASSES, Tiling

SEED = 20261122
SHAPES = [  # (n, d, k, nnz or None for the default): issue 12's shapes, and one classic pair
    (2**20, 1024, 64, None),
    (2**20, 1024, 256, None),
    (2**20, 1024, 1024, None),
    (2**18, 4096, 256, None),
    (2**18, 4096, 4096, None),
    (32, 2**24, 4096, None),
    (4096, 2**17, 4096, None),
    (2**16, 2**14, 1024, None),
    (1024, 2**20, 8192, None),
    (2**16, 2**14, 1024, 7),
]
LARGE = [shape for shape in SHAPES if shape[0] * shape[1] >= 2**31 or shape[1] >= 2**17]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", choices=("all", "large"), default="all")
    parser.add_argument(
        "--promote-every",
        type=int,
        nargs="*",
        default=[0, 64],
        help='run lengths to compare with the default under "highest"',
    )
    parser.add_argument("--out", help="also write the table here (rows are written as they come)")
    args = parser.parse_args(argv)
    bw = copy_bandwidth()
    lines = [
        f"# float32 forward accuracy ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"triton {triton.__version__}, copy {bw / 1e9:.0f} GB/s, {datetime.date.today()})",
        "",
        "command: python " + " ".join(sys.argv),
        "",
        "| n | d | k | layout, nnz | mode | steps per run | ms | % of memory floor | extra MiB | max rel. error vs float64 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    key = spec.philox_key(SEED)
    previous = torch.get_float32_matmul_precision()
    gen = torch.Generator(device="cuda").manual_seed(5)
    try:
        for n, d, k, nnz in SHAPES if args.shapes == "all" else LARGE:
            nnz = nnz or spec.default_nnz(k)
            layout = windowed if spec.is_windowed(k, nnz) else classic
            x = torch.randn(n, d, device="cuda", generator=gen)
            rows = torch.arange(0, n, max(1, n // 64), device="cuda")
            want = reference.sparse_jl_forward(x[rows].double(), k, seed=SEED, nnz=nnz)
            floor = (n * d + n * k) * 4 / bw * 1e3
            for mode in FP32_PASSES:
                torch.set_float32_matmul_precision(mode)
                others = [every for every in args.promote_every if mode == "highest"]
                for every in [None, *others]:  # None: the launcher's rule
                    tiling = Tiling(promote_every=every)
                    run = lambda: layout.forward(x, k, *key, nnz, 0, tiling)  # noqa: E731
                    err = float((run()[rows].double() - want).abs().max() / want.abs().max())
                    extra = peak_extra(run)
                    ms = do_bench(run, warmup=5, rep=20, return_mode="median")
                    lines.append(
                        f"| {n} | {d} | {k} | {layout.__name__.rsplit('.', 1)[-1]}, {nnz} | {mode} | "
                        f"{'default' if every is None else every or 'all'} | "
                        f"{ms:.3f} | {100 * floor / ms:.0f}% | {extra / 2**20:.0f} | {err:.1e} |"
                    )
                    print(lines[-1], flush=True)
                    if args.out:
                        with open(args.out, "w") as fh:
                            fh.write("\n".join(lines) + "\n")
            x = want = None  # not del: the timed closure names them
            torch.cuda.empty_cache()
    finally:
        torch.set_float32_matmul_precision(previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
