"""Per-call cost of small projections and dropouts on a GPU, layer by layer (issue 13).

    python benchmarks/bench_overhead.py [--out FILE]

Small inputs are launch-bound: the time is host work (validation, op dispatch, the Triton
launcher), not the GPU. Each row is the wall time of one call, the median over 7 runs of a loop
of back-to-back calls followed by one synchronize, so it is what a Python loop pays per call.
The layers, outermost first:
- ``F.sparse_jl`` / ``F.seeded_dropout``: the public functional API;
- ``torch.ops.sjlt.*``: the registered op (dispatcher, autograd, fake registrations);
- ``launcher``: sjlt's Python launcher (tables, tiling, allocation, kernel launch);
- ``empty Triton launch``: a Triton kernel that does nothing, with the same number of arguments.
The peers are ``torch.matmul`` against a pre-built dense S and ``F.dropout``. ``F.sparse_jl`` and
its peer are timed in alternating runs; "vs matmul" is the median of the per-run ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import pstats
import statistics
import time

import torch
import triton
import triton.language as tl

import sjlt
from sjlt import functional as F
from sjlt import spec
from sjlt.ops import layouts

D, K, SEED = 1024, 256, 7


@triton.jit
def _empty_kernel(
    a,
    b,
    c,
    d,
    e,
    f,
    g,
    h,
    i,
    j,
    k,
    l,  # noqa: E741 (eighteen arguments, as launches pass)
    m,
    n,
    o,
    p,
    q,
    r,
    X: tl.constexpr,
    Y: tl.constexpr,
    Z: tl.constexpr,
):
    pass


def wall_us(fn, calls: int = 2000, runs: int = 7) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def paired_us(first, second, calls: int = 2000, runs: int = 9) -> tuple[float, float, float]:
    """``wall_us`` of two functions measured in alternating runs, so that the host's drift (clock,
    other processes) falls on both alike: their medians and the median of the per-run ratios
    second / first."""
    for fn in (first, second):
        wall_us(fn, calls=200, runs=1)
    times = ([], [])
    for _ in range(runs):
        for fn, out in zip((first, second), times):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            out.append((time.perf_counter() - start) / calls * 1e6)
    ratios = [b / a for a, b in zip(*times)]
    return statistics.median(times[0]), statistics.median(times[1]), statistics.median(ratios)


def launcher(x, k, nnz):
    key0, key1 = spec.philox_key(SEED)
    return lambda: layouts.triton_forward(x, k, key0, key1, nnz, 0)


def sjlt_rows(lines: list[str]) -> None:
    lines += [
        "| dtype | n | grad | torch.matmul µs | F.sparse_jl µs | vs matmul | torch.ops.sjlt µs | launcher µs | empty Triton launch µs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    nnz = spec.resolve_nnz(None, K)
    t = torch.empty(1, device="cuda")
    empty = wall_us(
        lambda: _empty_kernel[(1,)](t, t, t, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, X=1, Y=2, Z=3)
    )
    for dtype in (torch.float32, torch.bfloat16):
        for n in (1, 64, 4096):
            for grad in (False, True):
                x = torch.randn(n, D, device="cuda", dtype=dtype, requires_grad=grad)
                dense = torch.randn(K, D, device="cuda", dtype=dtype)
                matmul, api, ratio = paired_us(lambda: torch.matmul(x, dense.t()), lambda: F.sparse_jl(x, K, seed=SEED))
                try:
                    key0, key1 = spec.philox_key(SEED)
                    op = wall_us(lambda: torch.ops.sjlt.sparse_jl(x, K, key0, key1, nnz, 0, "auto"))
                except Exception as error:  # the op's schema differs between versions
                    op = float("nan")
                    print("op row skipped:", error)
                with torch.no_grad():
                    launch = wall_us(launcher(x.detach(), K, nnz))
                lines.append(
                    f"| {str(dtype)[6:]} | {n} | {'yes' if grad else 'no'} | {matmul:.1f} | {api:.1f} | "
                    f"{ratio:.2f}x | {op:.1f} | {launch:.1f} | {empty:.1f} |"
                )


def dropout_rows(lines: list[str]) -> None:
    lines += [
        "",
        "| dtype | numel | grad | F.dropout µs | F.seeded_dropout µs | vs F.dropout | SeededDropout(seed=s) µs | SeededDropout() µs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dtype in (torch.float32, torch.bfloat16):
        for numel in (64, 65536):
            for grad in (False, True):
                x = torch.randn(numel, device="cuda", dtype=dtype, requires_grad=grad)
                peer = wall_us(lambda: torch.nn.functional.dropout(x, 0.1))
                ours = wall_us(lambda: F.seeded_dropout(x, 0.1, seed=SEED))
                seeded = sjlt.SeededDropout(0.1, seed=SEED).cuda()
                drawn = sjlt.SeededDropout(0.1).cuda()
                module_seeded = wall_us(lambda: seeded(x))
                module_drawn = wall_us(lambda: drawn(x))
                lines.append(
                    f"| {str(dtype)[6:]} | {numel} | {'yes' if grad else 'no'} | {peer:.1f} | {ours:.1f} | "
                    f"{ours / peer:.2f}x | {module_seeded:.1f} | {module_drawn:.1f} |"
                )


def profile(lines: list[str]) -> None:
    x = torch.randn(64, D, device="cuda")
    for _ in range(50):
        F.sparse_jl(x, K, seed=SEED)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2000):
        F.sparse_jl(x, K, seed=SEED)
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    body = text.getvalue()
    lines += [
        "",
        "cProfile of 2000 calls of `F.sparse_jl` (64 x 1024 float32 -> 256), by own time:",
        "",
        "```",
        *[line for line in body.splitlines()[6:] if line.strip()],
        "```",
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the tables to this file")
    args = parser.parse_args(argv)
    lines = [
        f"Per-call cost on {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
        f"sjlt {sjlt.__version__}, {datetime.date.today()}; d = {D}, k = {K}, default nnz. "
        "`python benchmarks/bench_overhead.py`",
        "",
    ]
    sjlt_rows(lines)
    dropout_rows(lines)
    profile(lines)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
