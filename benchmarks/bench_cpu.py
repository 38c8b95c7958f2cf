"""CPU engine against scikit-learn's random projections and dense matmuls, as markdown.

    python benchmarks/bench_cpu.py                     # n=100000, d=1024: about 4 minutes on 2 cores
    python benchmarks/bench_cpu.py --n 20000 --k 256   # quicker
    SJLT_CPU_ENGINE=torch python benchmarks/bench_cpu.py   # the torch path (no numba) instead

For each dtype and k it times, interleaved in one process so that other load on a shared machine
hits every method alike, ``--repeats`` rounds of: ``sjlt.functional.sparse_jl`` on a tensor,
``SparseJLProjection.transform`` on numpy, ``GaussianRandomProjection.transform`` and
``SparseRandomProjection.transform`` (fitted with the same k), then the adjoint direction:
``sparse_jl_transpose`` against the transpose of a dense matmul (``Y @ G`` with the Gaussian
estimator's k x d components, numpy) and of the sparse one (``Y @ components_`` of
SparseRandomProjection, scipy). Ratios are medians of the per-round ratios; ``--warmup`` rounds
come first (numba compile or cache load, table hashing, lazy imports, and the first touches of
fresh huge pages: on the development VM the first 6-8 calls that allocate a 100 MB output took
130 ms instead of 26, benchmarks/RESULTS.md).

Each round also times a torch copy of an array of X's size (all threads); "% of copy" is the
median over rounds of copy time / sjlt time, i.e. sjlt's input (forward) or output (transpose)
bytes per second as a share of the copy's bytes per second measured under the same load. It also
prints the speed-up from 1 thread to all (``torch.set_num_threads``), the windowed forward by
permutes against the tile kernel on one thread where the CPU has AVX-512 (``_cpu_kernels``);
and the peak resident memory each method adds, measured in a fresh process per method.
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

TARGETS = {"Gaussian": 4.0, "SparseRP": 30.0, "dense T": 4.0, "sparse T": 30.0}


def _peak_rss_bytes() -> int:
    """This process image's peak resident set. On Linux VmHWM, not ru_maxrss: a spawned child
    inherits its parent's ru_maxrss through fork and exec, which hid the child's own peak."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def _data(n: int, columns: int, dtype: str, salt: int = 0):
    import numpy as np

    # Drawn in the target dtype: a float64 draw cast down would raise the peak memory baseline.
    return np.random.default_rng(salt).standard_normal((n, columns), dtype=dtype)


def _methods(n: int, d: int, k: int, dtype: str) -> dict:
    """name -> zero-argument callable, every input made and every estimator fitted up front."""
    import torch
    from sklearn.random_projection import GaussianRandomProjection, SparseRandomProjection

    import sjlt.functional as F
    from sjlt.sklearn import SparseJLProjection

    x = _data(n, d, dtype)
    y = _data(n, k, dtype, salt=1)
    x_tensor, y_tensor = torch.from_numpy(x), torch.from_numpy(y)
    gaussian = GaussianRandomProjection(k, random_state=0).fit(x[:2])
    sparse = SparseRandomProjection(k, random_state=0).fit(x[:2])
    ours = SparseJLProjection(k, random_state=0, device="cpu").fit(x[:2])
    dense_components = gaussian.components_.astype(dtype)  # k x d
    sparse_components = sparse.components_.astype(dtype)  # scipy CSR, k x d
    copy_target = torch.empty_like(x_tensor)
    return {
        "copy": lambda: copy_target.copy_(x_tensor),  # the bandwidth yardstick, same bytes as X
        "sjlt": lambda: F.sparse_jl(x_tensor, k, seed=0),
        "SparseJLProjection": lambda: ours.transform(x),
        "Gaussian": lambda: gaussian.transform(x),
        "SparseRP": lambda: sparse.transform(x),
        "sjlt T": lambda: F.sparse_jl_transpose(y_tensor, d, seed=0),
        "dense T": lambda: y @ dense_components,
        "sparse T": lambda: (sparse_components.T @ y.T).T,  # Y S for a CSR S, as scipy computes it
    }


def _interleaved(methods: dict, repeats: int, warmup: int) -> dict:
    """name -> list of seconds, one per round; each round runs every method once."""
    for _ in range(warmup):
        for method in methods.values():
            method()
    times = {name: [] for name in methods}
    for _ in range(repeats):
        for name, method in methods.items():
            start = time.perf_counter()
            method()
            times[name].append(time.perf_counter() - start)
    return times


def _scaling(n: int, d: int, k: int, dtype: str, repeats: int) -> dict:
    """Medians at 1 thread and at all threads, interleaved, for both directions."""
    import torch

    import sjlt.functional as F

    x = torch.from_numpy(_data(n, d, dtype))
    y = torch.from_numpy(_data(n, k, dtype, salt=1))
    all_threads = torch.get_num_threads()
    result = {}
    for label, call in {
        "forward": lambda: F.sparse_jl(x, k, seed=0),
        "transpose": lambda: F.sparse_jl_transpose(y, d, seed=0),
    }.items():
        times = {1: [], all_threads: []}
        call()
        for _ in range(repeats):
            for threads in times:
                torch.set_num_threads(threads)
                start = time.perf_counter()
                call()
                times[threads].append(time.perf_counter() - start)
        torch.set_num_threads(all_threads)
        result[label] = {threads: statistics.median(values) for threads, values in times.items()}
    return result


def _forward_kernels(n: int, d: int, k: int, dtype: str, repeats: int) -> dict | None:
    """One thread, interleaved: the windowed forward by permutes and by tiles (``PERMUTES`` on and
    off), medians in seconds; None where numba is off or the CPU cannot permute."""
    import torch

    import sjlt.functional as F
    from sjlt import cpu_engine

    kernels = cpu_engine.numba_kernels() if cpu_engine.engine_choice() == "auto" else None
    if kernels is None or not kernels.CAN_PERMUTE:
        return None
    x = torch.from_numpy(_data(n, d, dtype))
    default, threads = kernels.PERMUTES, torch.get_num_threads()
    times = {True: [], False: []}
    torch.set_num_threads(1)
    try:
        for permutes in times:  # compile, hash the table, touch the output's pages
            kernels.PERMUTES = permutes
            F.sparse_jl(x, k, seed=0)
        for _ in range(repeats):
            for permutes in times:
                kernels.PERMUTES = permutes
                start = time.perf_counter()
                F.sparse_jl(x, k, seed=0)
                times[permutes].append(time.perf_counter() - start)
    finally:
        kernels.PERMUTES = default
        torch.set_num_threads(threads)
    return {"permutes": statistics.median(times[True]), "tiles": statistics.median(times[False]), "default": default}


def measure_peak(method: str, n: int, d: int, k: int, dtype: str) -> float:
    """Runs in a fresh process: the peak resident bytes one call of ``method`` adds."""
    warnings.simplefilter("ignore")
    for warm_up in _methods(2, d, k, dtype).values():  # lazy imports, numba compile or cache load, tables
        warm_up()
    methods = _methods(n, d, k, dtype)  # all inputs made (and kept alive) before the baseline
    baseline = _peak_rss_bytes()
    methods[method]()
    return _peak_rss_bytes() - baseline


def _in_fresh_process(*args) -> float:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(measure_peak, args)


def _environment() -> str:
    import numpy
    import sklearn
    import torch

    from sjlt import cpu_engine

    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import numba

        numba_version = f"numba {numba.__version__}"
    except ImportError:
        numba_version = "no numba"
    path = "numba" if cpu_engine.engine_choice() == "auto" and cpu_engine.numba_kernels() else "torch"
    return (
        f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}; {cpu}, "
        f"{os.cpu_count()} logical cores; torch {torch.__version__} ({torch.get_num_threads()} "
        f"threads), {numba_version}, scikit-learn {sklearn.__version__}, numpy {numpy.__version__}, "
        f"Python {platform.python_version()}; CPU engine path: {path}"
    )


def _fmt_ratio(ratio: float, target: float) -> str:
    return f"{ratio:.1f}x ({'meets' if ratio >= target else 'misses'} {target:g}x)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="rows of the input")
    parser.add_argument("--d", type=int, default=1024, help="input features")
    parser.add_argument("--k", type=int, nargs="+", default=[64, 256, 1024], help="output features")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (>= 3)")
    parser.add_argument("--warmup", type=int, default=4, help="untimed rounds first (>= 1)")
    parser.add_argument("--no-memory", action="store_true", help="skip the fresh-process peak memory runs")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error(f"--repeats must be at least 3 for a meaningful median, got {args.repeats}")
    warnings.simplefilter("ignore")
    import torch

    n, d = args.n, args.d
    print(f"Environment: {_environment()}\n")
    print(f"Load average (1 min) before: {os.getloadavg()[0]:.2f}\n")

    rows = []
    for dtype in args.dtypes:
        for k in args.k:
            times = _interleaved(_methods(n, d, k, dtype), args.repeats, max(1, args.warmup))
            median = {name: statistics.median(values) for name, values in times.items()}

            def ratio(slow, fast):
                return statistics.median(s / f for s, f in zip(times[slow], times[fast]))

            rows.append(
                (
                    dtype,
                    k,
                    median,
                    {
                        "Gaussian": ratio("Gaussian", "sjlt"),
                        "SparseRP": ratio("SparseRP", "sjlt"),
                        "est Gaussian": ratio("Gaussian", "SparseJLProjection"),
                        "est SparseRP": ratio("SparseRP", "SparseJLProjection"),
                        "dense T": ratio("dense T", "sjlt T"),
                        "sparse T": ratio("sparse T", "sjlt T"),
                        "copy": ratio("copy", "sjlt"),
                        "copy T": ratio("copy", "sjlt T"),
                    },
                )
            )

    print(f"### Forward: X {n} x {d} -> k, default nnz; medians of {args.repeats} interleaved rounds\n")
    print(
        "| dtype | k | copy s | sjlt s | SparseJLProjection s | Gaussian s | SparseRP s | sjlt GB/s in | % of copy "
        "| sjlt vs Gaussian | sjlt vs SparseRP | SparseJLProjection vs Gaussian | vs SparseRP |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dtype, k, median, ratios in rows:
        in_bytes = n * d * (4 if dtype == "float32" else 8)
        rate = in_bytes / median["sjlt"]
        print(
            f"| {dtype} | {k} | {median['copy']:.4f} | {median['sjlt']:.4f} | "
            f"{median['SparseJLProjection']:.4f} | {median['Gaussian']:.4f} | {median['SparseRP']:.3f} | "
            f"{rate / 1e9:.2f} | {100 * ratios['copy']:.0f}% | {_fmt_ratio(ratios['Gaussian'], TARGETS['Gaussian'])} | "
            f"{_fmt_ratio(ratios['SparseRP'], TARGETS['SparseRP'])} | "
            f"{_fmt_ratio(ratios['est Gaussian'], TARGETS['Gaussian'])} | "
            f"{_fmt_ratio(ratios['est SparseRP'], TARGETS['SparseRP'])} |"
        )

    print(
        f"\n### Transpose: Y {n} x k -> {d}; against Y @ G (dense k x {d}, numpy) and Y @ S "
        f"(SparseRandomProjection's CSR components, scipy)\n"
    )
    print("| dtype | k | sjlt T s | dense T s | sparse T s | sjlt GB/s out | % of copy | vs dense | vs sparse |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype, k, median, ratios in rows:
        out_bytes = n * d * (4 if dtype == "float32" else 8)
        rate = out_bytes / median["sjlt T"]
        print(
            f"| {dtype} | {k} | {median['sjlt T']:.4f} | {median['dense T']:.4f} | "
            f"{median['sparse T']:.3f} | {rate / 1e9:.2f} | {100 * ratios['copy T']:.0f}% | "
            f"{_fmt_ratio(ratios['dense T'], TARGETS['dense T'])} | "
            f"{_fmt_ratio(ratios['sparse T'], TARGETS['sparse T'])} |"
        )

    print(f"\n### Scaling from 1 thread to {torch.get_num_threads()} (torch.set_num_threads), float32\n")
    print("| k | direction | 1 thread s | all threads s | speed-up |")
    print("|---|---|---|---|---|")
    for k in args.k:
        for direction, result in _scaling(n, d, k, "float32", args.repeats).items():
            one, every = result[1], result[max(result)]
            print(f"| {k} | {direction} | {one:.4f} | {every:.4f} | {one / every:.2f}x |")

    kernel_rows = [
        (dtype, k, _forward_kernels(n // 2, d, k, dtype, args.repeats)) for dtype in args.dtypes for k in args.k
    ]
    if all(result is not None for _, _, result in kernel_rows):
        from sjlt import _cpu_kernels

        print(f"\n### Windowed forward kernels on this CPU ({_cpu_kernels._host_cpu()}), 1 thread, X {n // 2} x {d}\n")
        print("| dtype | k | permutes s | tiles s | permutes speed-up | default here |")
        print("|---|---|---|---|---|---|")
        for dtype, k, result in kernel_rows:
            print(
                f"| {dtype} | {k} | {result['permutes']:.4f} | {result['tiles']:.4f} | "
                f"{result['tiles'] / result['permutes']:.2f}x | {'permutes' if result['default'] else 'tiles'} |"
            )

    if not args.no_memory:
        k = 256 if 256 in args.k else args.k[0]
        print(f"\n### Peak resident memory a call adds (fresh process each), float32, k = {k}\n")
        out_mib = {
            "sjlt": n * k * 4 / 2**20,
            "SparseJLProjection": n * k * 4 / 2**20,
            "Gaussian": n * k * 4 / 2**20,
            "SparseRP": n * k * 4 / 2**20,
            "sjlt T": n * d * 4 / 2**20,
            "dense T": n * d * 4 / 2**20,
        }
        print("| method | peak MiB added | output MiB |")
        print("|---|---|---|")
        for method, output in out_mib.items():
            peak = _in_fresh_process(method, n, d, k, "float32")
            print(f"| {method} | {peak / 2**20:.0f} | {output:.0f} |")

    print(
        f"\nLoad average (1 min) after: {os.getloadavg()[0]:.2f}. Ratios are medians of per-round "
        f"ratios (each round runs every method once, back to back)."
    )


if __name__ == "__main__":
    main()
