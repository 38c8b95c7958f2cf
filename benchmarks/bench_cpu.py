"""CPU speed of sjlt's projection against scikit-learn's random projections, as markdown.

    python benchmarks/bench_cpu.py                 # n=100000, d=1024, k=256: about a minute
    python benchmarks/bench_cpu.py --n 20000       # smaller input

Compares ``sjlt.functional.sparse_jl`` on a CPU tensor (the tiled reference path, nnz = 4 and 8)
with ``GaussianRandomProjection.transform`` and ``SparseRandomProjection.transform`` on the same
random float32 data, and times ``sparse_jl_transpose`` (n x k -> n x d). Every method runs in a
fresh process, one after another: one warm-up call, then the median (and minimum) of
``--repeats`` timed calls; its peak memory is the growth of the process's maximum resident set
(``resource.getrusage``) over the state after the input was made, the estimator fitted and a
2-row call made (which does lazy imports), so it counts the output, scratch buffers and copies.
The machine may be shared: the load average is printed before and after, and other processes
skew the timings.
"""
from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import time
import warnings

TARGETS = {"GaussianRandomProjection": 2.0, "SparseRandomProjection": 10.0}


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def _random_float32(rows: int, columns: int):
    import numpy as np

    return np.random.default_rng(0).standard_normal((rows, columns), dtype=np.float32)


def measure(method: str, n: int, d: int, k: int, nnz: int | None, repeats: int) -> dict:
    """Runs in a fresh process: times ``method`` and reports the peak memory it adds."""
    warnings.simplefilter("ignore")
    import torch

    import sjlt.functional as F

    if method == "sparse_jl":
        data = torch.from_numpy(_random_float32(n, d))
        project = lambda rows: F.sparse_jl(rows, k, seed=0, nnz=nnz)  # noqa: E731
    elif method == "sparse_jl_transpose":
        data = torch.from_numpy(_random_float32(n, k))
        project = lambda rows: F.sparse_jl_transpose(rows, d, seed=0, nnz=nnz)  # noqa: E731
    else:
        from sklearn import random_projection

        data = _random_float32(n, d)
        estimator = getattr(random_projection, method)(n_components=k, random_state=0)
        project = estimator.fit(data).transform
    call = lambda: project(data)  # noqa: E731
    project(data[:2])  # a first call's lazy imports (~140 MB for torch's custom ops) are not the method's
    baseline = _peak_rss_bytes()
    call()  # warm-up: first-call allocations and imports
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "min": min(times),
            "peak_bytes": _peak_rss_bytes() - baseline, "threads": torch.get_num_threads()}


def _in_fresh_process(*args) -> dict:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(measure, args)


def _environment() -> str:
    import numpy
    import sklearn
    import torch

    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')}; {cpu}, "
            f"{os.cpu_count()} logical cores; torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), scikit-learn {sklearn.__version__}, "
            f"numpy {numpy.__version__}, Python {platform.python_version()}")


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="rows of the input")
    parser.add_argument("--d", type=int, default=1024, help="input features")
    parser.add_argument("--k", type=int, default=256, help="output features")
    parser.add_argument("--nnz", type=int, nargs="+", default=[4, 8], help="sjlt nonzeros per column")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per method (>= 3)")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error(f"--repeats must be at least 3 for a meaningful median, got {args.repeats}")

    print(f"Environment: {_environment()}\n")
    print(f"Load average (1 min) before: {_load()}\n")
    n, d, k = args.n, args.d, args.k
    input_gb = n * d * 4 / 1e9
    forward = {f"sjlt sparse_jl, nnz={nnz}": _in_fresh_process("sparse_jl", n, d, k, nnz, args.repeats)
               for nnz in args.nnz}
    sklearn = {name: _in_fresh_process(name, n, d, k, None, args.repeats) for name in TARGETS}
    transpose = {f"sjlt sparse_jl_transpose, nnz={nnz}":
                 _in_fresh_process("sparse_jl_transpose", n, d, k, nnz, args.repeats) for nnz in args.nnz}
    load_after = _load()

    print(f"### Projection: float32 X {n} x {d} ({input_gb:.2f} GB) -> {k} columns\n")
    print("| method | median s | min s | GB/s of input (median) | peak MiB over input |")
    print("|---|---|---|---|---|")
    for name, result in {**forward, **sklearn}.items():
        print(f"| {name} | {result['median']:.3f} | {result['min']:.3f} | "
              f"{input_gb / result['median']:.2f} | {result['peak_bytes'] / 2**20:.0f} |")

    print("\n### Speed-up of sjlt over scikit-learn (ratio of medians)\n")
    print("| sjlt | " + " | ".join(f"over {name} (target >= {target:g}x)" for name, target in TARGETS.items()) + " |")
    print("|---|" + "---|" * len(TARGETS))
    for label, ours in forward.items():
        cells = []
        for name, target in TARGETS.items():
            ratio = sklearn[name]["median"] / ours["median"]
            cells.append(f"{ratio:.2f}x ({'meets' if ratio >= target else 'misses'})")
        print(f"| {label} | " + " | ".join(cells) + " |")

    output_gb = n * d * 4 / 1e9
    print(f"\n### Transpose: float32 Y {n} x {k} -> {d} columns ({output_gb:.2f} GB out)\n")
    print("| method | median s | min s | GB/s of output (median) | peak MiB over input |")
    print("|---|---|---|---|---|")
    for name, result in transpose.items():
        print(f"| {name} | {result['median']:.3f} | {result['min']:.3f} | "
              f"{output_gb / result['median']:.2f} | {result['peak_bytes'] / 2**20:.0f} |")

    threads = {result["threads"] for result in {**forward, **sklearn, **transpose}.values()}
    print(f"\ntorch threads in the measuring processes: {', '.join(map(str, sorted(threads)))}; "
          f"load average (1 min) after: {load_after}. Medians of {args.repeats} calls after one "
          f"warm-up, each method in its own process, run one after another.")


if __name__ == "__main__":
    main()
