"""SparseJLProjection against scikit-learn's random projections: transform and fit time, peak memory.

    python benchmarks/bench_sklearn_cpu.py            # full size: about a minute on 2 cores
    python benchmarks/bench_sklearn_cpu.py --n 20000  # smaller transform input

Prints markdown. Every measurement runs in a fresh process, so each peak-memory figure (growth of
the process's maximum resident set over the input data, from ``resource.getrusage``) belongs to
one method alone. Times are medians of ``--repeats`` runs after one warm-up run, on random
float32 data. SparseJLProjection is pinned to ``device="cpu"`` for the CPU table. Peak memory
includes pages of libraries first touched by the measured call, so small inputs show a floor.

When CUDA is available it also reports, in the same run and for float32 and float16 input
(``--gpu-n`` rows), host-to-device copy speed (pinned and pageable) and the end-to-end throughput
of numpy in, numpy out on the GPU host: ``transform`` with the default device (its first call and
the median), the CPU engine on the same host, and ``sjlt project`` on a .npy held in /dev/shm.

    python benchmarks/bench_sklearn_cpu.py --gpu-only   # the GPU-host table alone
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import time
import warnings

TRANSFORM_TARGETS = {"GaussianRandomProjection": 2.0, "SparseRandomProjection": 10.0}
FIT_TARGET = 10.0
#: Estimator and command line on a GPU host, numpy in and out: this share of the pageable copy rate.
GPU_HOST_TARGET = 0.8
ESTIMATORS = ("SparseJLProjection", "GaussianRandomProjection", "SparseRandomProjection")
#: Extra SparseJLProjection rows of the transform table: (label, parameters).
SJLT_VARIANTS = (("SparseJLProjection, batch_size=8192", {"batch_size": 8192}),)


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def _make_estimator(name: str, k: int, **sjlt_params):
    if name == "SparseJLProjection":
        from sjlt.sklearn import SparseJLProjection

        return SparseJLProjection(k, random_state=0, **{"device": "cpu", **sjlt_params})
    from sklearn import random_projection

    return getattr(random_projection, name)(k, random_state=0)


def _timed(function, repeats: int) -> tuple[float, list[float]]:
    function()  # warm-up: imports, first-call allocations, kernel compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def _random_input(n: int, d: int):
    import numpy as np

    return np.random.default_rng(0).standard_normal((n, d), dtype=np.float32)


def measure_transform(name: str, n: int, d: int, k: int, repeats: int, sjlt_params=None) -> dict:
    """Median transform time of a fitted estimator and the peak memory it adds over X."""
    warnings.simplefilter("ignore")
    import numpy as np  # noqa: F401  (imported before the baseline is read)
    import sklearn.random_projection  # noqa: F401

    import sjlt.sklearn  # noqa: F401

    X = _random_input(n, d)
    estimator = _make_estimator(name, k, **(sjlt_params or {})).fit(X)
    baseline = _peak_rss_bytes()
    median, _ = _timed(lambda: estimator.transform(X), repeats)
    return {"seconds": median, "peak_bytes": _peak_rss_bytes() - baseline}


def measure_fit(name: str, n: int, d: int, k: int, repeats: int) -> dict:
    """Median fit time (a fresh estimator each run) and the peak memory it adds over X."""
    warnings.simplefilter("ignore")
    import sklearn.random_projection  # noqa: F401

    import sjlt.sklearn  # noqa: F401

    X = _random_input(n, d)
    baseline = _peak_rss_bytes()
    median, _ = _timed(lambda: _make_estimator(name, k).fit(X), repeats)
    return {"seconds": median, "peak_bytes": _peak_rss_bytes() - baseline}


def measure_gpu(n: int, d: int, k: int, repeats: int, dtype_name: str) -> dict:
    """Host-to-device copy speeds, and numpy-in, numpy-out projection on a GPU host: the estimator
    (default device, first call and median), the CPU engine on the same host, and the command line
    on a .npy in page-cached memory (/dev/shm)."""
    warnings.simplefilter("ignore")
    import tempfile
    from pathlib import Path

    import numpy as np
    import torch

    from sjlt.io import Settings, project_file
    from sjlt.sklearn import SparseJLProjection

    X = _random_input(n, d).astype(dtype_name)
    host = torch.from_numpy(X)
    pinned = torch.empty_like(host).pin_memory()
    pinned.copy_(host)

    def synchronized(function):
        def run():
            result = function()
            torch.cuda.synchronize()
            return result

        return run

    results = {"device_name": torch.cuda.get_device_name(), "bytes": X.nbytes}
    estimator = SparseJLProjection(k, random_state=0).fit(X)  # device="auto", as users leave it
    started = time.perf_counter()
    estimator.transform(X)
    results["transform_first"] = time.perf_counter() - started
    results["h2d_pinned"], _ = _timed(synchronized(lambda: pinned.to("cuda", non_blocking=True)), repeats)
    results["h2d_pageable"], _ = _timed(synchronized(lambda: host.to("cuda")), repeats)
    baseline = _peak_rss_bytes()
    torch.cuda.reset_peak_memory_stats()
    results["transform_numpy"], _ = _timed(lambda: estimator.transform(X), repeats)
    results["host_peak_bytes"] = _peak_rss_bytes() - baseline
    results["device_peak_bytes"] = torch.cuda.max_memory_allocated()
    results["transform_cpu"], _ = _timed(lambda: estimator.set_params(device="cpu").transform(X), repeats)
    on_device = host.cuda()
    results["transform_tensor"], _ = _timed(synchronized(lambda: estimator.transform(on_device)), repeats)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as scratch:
        source, target = Path(scratch) / "in.npy", Path(scratch) / "out.npy"
        np.save(source, X)
        settings = Settings(out_features=k, overwrite=True)
        results["cli_npy"], _ = _timed(lambda: project_file(source, target, settings), repeats)
        fresh = []  # a new OUTPUT each time, as a first run writes it: no old file to replace
        for _ in range(repeats):
            target.unlink()
            target.with_name(target.name + ".json").unlink()
            started = time.perf_counter()
            project_file(source, target, settings)
            fresh.append(time.perf_counter() - started)
        results["cli_npy_new"] = statistics.median(fresh)
    return results


def _in_fresh_process(function, *args):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def _environment() -> str:
    import numpy
    import sklearn
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), numpy {numpy.__version__}, "
        f"scikit-learn {sklearn.__version__}, Python {platform.python_version()}; load average "
        f"{os.getloadavg()[0]:.1f} at start (other processes skew CPU timings)"
    )


def _mib(value: int) -> str:
    return f"{value / 2**20:.0f}"


def _verdict(ratio: float, target: float) -> str:
    return f"{'meets' if ratio >= target else 'misses'} >= {target:g}x"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="rows of the transform input")
    parser.add_argument("--d", type=int, default=1024, help="features of the transform input")
    parser.add_argument("--k", type=int, default=256, help="output components")
    parser.add_argument("--fit-d", type=int, default=2**16, help="features of the fit input")
    parser.add_argument(
        "--fit-n",
        type=int,
        nargs="+",
        default=[16, 1000],
        help="rows of the fit input (fit validates X, so it scales with rows)",
    )
    parser.add_argument("--gpu-n", type=int, default=200_000, help="rows of the GPU-host input")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gpu-only", action="store_true", help="skip the CPU tables")
    args = parser.parse_args(argv)

    print(f"Environment: {_environment()}\n")
    gigabytes = args.n * args.d * 4 / 1e9
    if not args.gpu_only:
        _cpu_tables(args, gigabytes)
    _gpu_table(args)


def _cpu_tables(args, gigabytes: float) -> None:
    print(f"### transform: float32 X {args.n} x {args.d} ({gigabytes:.2f} GB) -> {args.k}\n")
    print("| estimator | median s | GB/s of input | SparseJLProjection speed-up over it | target | peak MiB over X |")
    print("|---|---|---|---|---|---|")
    cases = [
        (ESTIMATORS[0], ESTIMATORS[0], None),
        *((label, ESTIMATORS[0], params) for label, params in SJLT_VARIANTS),
        *((name, name, None) for name in ESTIMATORS[1:]),
    ]
    transform = {
        label: _in_fresh_process(measure_transform, name, args.n, args.d, args.k, args.repeats, params)
        for label, name, params in cases
    }
    ours = transform["SparseJLProjection"]["seconds"]
    for name, result in transform.items():
        ratio = result["seconds"] / ours
        target = _verdict(ratio, TRANSFORM_TARGETS[name]) if name in TRANSFORM_TARGETS else ""
        print(
            f"| {name} | {result['seconds']:.3f} | {gigabytes / result['seconds']:.2f} | "
            f"{ratio:.2f}x | {target} | {_mib(result['peak_bytes'])} |"
        )

    print(f"\n### fit: float32 X with d = {args.fit_d} -> {args.k}\n")
    print("| rows | estimator | median s | SparseJLProjection speed-up over it | target | peak MiB over X |")
    print("|---|---|---|---|---|---|")
    for rows in args.fit_n:
        fit = {
            name: _in_fresh_process(measure_fit, name, rows, args.fit_d, args.k, args.repeats) for name in ESTIMATORS
        }
        ours = fit["SparseJLProjection"]["seconds"]
        for name, result in fit.items():
            ratio = result["seconds"] / ours
            target = _verdict(ratio, FIT_TARGET) if name != "SparseJLProjection" else ""
            print(
                f"| {rows} | {name} | {result['seconds']:.5f} | {ratio:.1f}x | {target} | "
                f"{_mib(result['peak_bytes'])} |"
            )


def _gpu_table(args) -> None:
    import torch

    if not torch.cuda.is_available():
        print("\nNo CUDA device: GPU throughput not measured.")
        return
    print(
        f"\n### GPU host: numpy in, numpy out, X {args.gpu_n} x {args.d} -> {args.k}, default device "
        f"('auto'); target >= {GPU_HOST_TARGET:.0%} of the pageable copy rate\n"
    )
    print("| dtype | operation | median ms | GB/s of input | share of pageable H2D | target |")
    print("|---|---|---|---|---|---|")
    for dtype in ("float32", "float16"):
        gpu = _in_fresh_process(measure_gpu, args.gpu_n, args.d, args.k, args.repeats, dtype)
        gigabytes = gpu["bytes"] / 1e9
        pageable_rate = gigabytes / gpu["h2d_pageable"]
        rows = [
            ("host-to-device copy, pinned", gpu["h2d_pinned"], False),
            ("host-to-device copy, pageable", gpu["h2d_pageable"], False),
            ("transform(numpy), first call", gpu["transform_first"], False),
            ("transform(numpy)", gpu["transform_numpy"], True),
            ("sjlt project .npy -> new .npy (page cache)", gpu["cli_npy_new"], True),
            ("sjlt project .npy -> .npy --overwrite (page cache)", gpu["cli_npy"], True),
            ("transform(numpy), device='cpu' (16 threads)", gpu["transform_cpu"], False),
            ("transform(cuda tensor), no transfers", gpu["transform_tensor"], False),
        ]
        for label, seconds, has_target in rows:
            share = gigabytes / seconds / pageable_rate
            verdict = ("meets" if share >= GPU_HOST_TARGET else "misses") if has_target else ""
            print(f"| {dtype} | {label} | {seconds * 1e3:.1f} | {gigabytes / seconds:.1f} | {share:.0%} | {verdict} |")
    print(
        f"\nGPU: {gpu['device_name']}. Peak host memory over X during transform(numpy), float16: "
        f"{_mib(gpu['host_peak_bytes'])} MiB; peak GPU memory: {_mib(gpu['device_peak_bytes'])} MiB."
    )


if __name__ == "__main__":
    main()
