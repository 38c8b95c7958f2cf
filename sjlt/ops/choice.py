"""Which algorithm computes a GPU projection: the Triton kernel of S's layout, or the dense one.

Both compute the same S; they agree to float tolerance. Like cuDNN's algorithm choice, it is
steered by two flags in :mod:`sjlt.backends`:

- ``deterministic`` (default True): the choice is a fixed rule of the call's configuration, so
  the same call gives the same bits run to run. The rule (justified by the sweep in
  benchmarks/RESULTS.md, "Algorithm choice"): the dense algorithm for launch-bound calls (little
  matmul work) whose S is small, and for half-precision inputs with k <= 512 (transposes with a
  column offset on 16: k <= 256; where k folds rows on short rows, to 1024 and 384) whose S fits
  the cache budget and whose rows (the forward's input, the transpose's output) are 16-byte
  aligned, where cuBLAS runs near the memory roofline; the kernel otherwise.
- ``benchmark`` (default False): with ``deterministic=False``, the first call of each
  configuration times every eligible algorithm and the fastest is used for that configuration for
  the rest of the process. Timing noise can then pick differently in another run, which is why
  ``deterministic=True`` takes precedence and the timing is skipped, as cuDNN's documentation says
  reproducibility needs ``benchmark=False``.
"""

from __future__ import annotations

import statistics

import torch

from .. import backends, spec
from . import dense
from .layouts import triton_forward, triton_transpose

#: Projections whose dense matmul is at most this much work (2 n d k flops) are launch-bound: cuBLAS
#: finishes it in about what the kernel path costs the host per call (its Python launcher, 50-150 µs
#: on the H100 host), so the dense algorithm's lighter launch decides. H100 (benchmarks/RESULTS.md,
#: "Algorithm choice" and "Small calls"): float32 2^31 flops take about 65 µs, half types 2^34 about
#: 20 µs on the tensor cores.
LAUNCH_BOUND_FLOPS = {torch.float32: 1 << 31, torch.float16: 1 << 34, torch.bfloat16: 1 << 34}
#: A launch-bound call reads all of S through the matmul, the kernel only x: beyond this S costs
#: more to read (and to build once) than the launch saves.
LAUNCH_BOUND_MATRIX_BYTES = 1 << 22
#: Half-precision projections up to this k run faster as a cuBLAS matmul than in the kernel: the
#: sweep measured dense 1.0-1.6x faster at k = 64-512 (93-97% of the copy floor at k <= 256) and the
#: kernel 1.1-1.4x faster at k = 1024 for n >= 65536. Transposes only up to the second k unless the
#: column offset is off 16 (the kernel's chunks then share sectors of Z): on the H200
#: (benchmarks/NOTES.md, "Algorithm choice on the H200") dense transposes ran 1.10-1.40x the
#: kernel's time at k = 512 and 1.04-1.11x at k = 384 with d >= 4096 (0.92x at d = 1024), against
#: 0.62-0.89x at k <= 256, and 0.62-0.70x at k = 384 and 512 with a column offset of 5; the
#: forwards stay mixed at k = 512 (0.83-1.23x) and dense below.
HALF_DENSE_MAX_FEATURES = 512
HALF_DENSE_MAX_TRANSPOSE_FEATURES = 256
#: Where k folds rows (docs/spec.md 2b) on short rows, half types run dense further: to k = 1024
#: (forwards) and 384 (transposes) while d k is at most the work bound. There the folding kernel
#: costs 1.5-2.1x its lattice time (rows of Y off 32 bytes, whose windows share sectors, and the spill),
#: while cuBLAS's time grows with d k. H200 (benchmarks/NOTES.md, "Any k", item 33), bfloat16, dense
#: time over the kernel's: forwards 2^20 x 768 -> 700 / 1000 0.69 / 0.60, 2^20 x 1024 0.76 / 0.80;
#: past the bound 2^19 x 1536 -> 700 / 1000 0.95 / 1.10, 2^19 x 2048 -> 700 1.04, 2^20 x 768 ->
#: 1500 1.04; transposes at k = 300 0.67-0.85 for d = 768-4096, at k = 500 0.99-1.19.
FOLDED_HALF_DENSE = {False: (1024, 1 << 20), True: (384, 4096 * 384)}  # transpose -> (max k, max d k)

DENSE, KERNEL = "dense", "kernel"

# (direction, n, d, k, nnz, dtype, device) -> the algorithm timed fastest (k and nnz fix the layout).
_BENCHMARKED: dict = {}


def algorithm(
    x: torch.Tensor,
    in_features: int,
    out_features: int,
    nnz: int,
    key0: int,
    key1: int,
    column_offset: int,
    transpose: bool = False,
) -> str:
    """DENSE or KERNEL for the (n, .) CUDA input ``x`` (x is (n, d), or (n, k) for the transpose)."""
    rule = _rule(x, in_features, out_features, transpose, column_offset, nnz)
    if backends.deterministic or not backends.benchmark:
        return rule
    if not dense.eligible(x, in_features, out_features, backends.byte_budget("dense_cache_bytes")):
        return KERNEL
    key = ("transpose" if transpose else "forward", x.shape[0], in_features, out_features, nnz, x.dtype, x.device)
    winner = _BENCHMARKED.get(key)
    if winner is None:
        if torch.cuda.is_current_stream_capturing() or torch.compiler.is_compiling():
            return rule  # no timing inside a graph; the rule until an eager call has timed it
        winner = _time_and_pick(x, in_features, out_features, nnz, key0, key1, column_offset, transpose)
        _BENCHMARKED[key] = winner
    return winner


def _rule(
    x: torch.Tensor,
    in_features: int,
    out_features: int,
    transpose: bool = False,
    column_offset: int = 0,
    nnz: int | None = None,
) -> str:
    flops = 2 * x.shape[0] * in_features * out_features
    if flops <= LAUNCH_BOUND_FLOPS.get(x.dtype, 0) and dense.eligible(
        x, in_features, out_features, LAUNCH_BOUND_MATRIX_BYTES
    ):
        return DENSE
    if (
        x.dtype in (torch.float16, torch.bfloat16)
        and out_features <= _half_dense_max_features(in_features, out_features, nnz, transpose, column_offset)
        and (_aligned_output(in_features, x) if transpose else _aligned_rows(x))
        and dense.eligible(x, in_features, out_features, backends.byte_budget("dense_cache_bytes"))
    ):
        return DENSE
    return KERNEL


def _half_dense_max_features(
    in_features: int, out_features: int, nnz: int | None, transpose: bool, column_offset: int
) -> int:
    """The largest half-type k that runs dense (HALF_DENSE_MAX_FEATURES): for a transpose with the
    column offset on 16, HALF_DENSE_MAX_TRANSPOSE_FEATURES; FOLDED_HALF_DENSE's k where that is
    larger, k folds rows (``nnz``: the default's if None) and d k is within its bound."""
    most = HALF_DENSE_MAX_TRANSPOSE_FEATURES if transpose and column_offset % 16 == 0 else HALF_DENSE_MAX_FEATURES
    folded_most, most_work = FOLDED_HALF_DENSE[transpose]
    if most < out_features <= folded_most and in_features * out_features <= most_work:
        nnz = spec.default_nnz(out_features) if nnz is None else nnz
        if spec.is_windowed(out_features, nnz) and spec.max_fold(out_features, nnz):
            return folded_most
    return most


def _aligned_rows(x: torch.Tensor) -> bool:
    """Whether the forward's input rows start 16-byte aligned, as cuBLAS's fast kernels need: rows
    off it ran the dense algorithm 2.7x slower than the kernel's element loads (H100, bfloat16
    2^20 x 769 -> 256: 3.46 against 1.26 ms; benchmarks/NOTES.md, "Any d")."""
    return x.data_ptr() % 16 == 0 and (x.shape[0] == 1 or x.stride(0) * x.element_size() % 16 == 0)


def _aligned_output(in_features: int, y: torch.Tensor) -> bool:
    """Whether the transpose's output rows (in_features elements of y's dtype) are whole 16-byte
    vectors: cuBLAS writes misaligned rows 2.8x slower than the kernel does (H100, bfloat16
    2^20 x 256 -> 769: 4.43 against 1.56 ms; benchmarks/NOTES.md, "Any d")."""
    return dense.aligned_features(in_features, y) == in_features


def _time_and_pick(x, in_features, out_features, nnz, key0, key1, column_offset, transpose) -> str:
    if transpose:
        candidates = {
            DENSE: lambda: dense.transpose(x, in_features, key0, key1, nnz, column_offset),
            KERNEL: lambda: triton_transpose(x, in_features, key0, key1, nnz, column_offset),
        }
    else:
        candidates = {
            DENSE: lambda: dense.forward(x, out_features, key0, key1, nnz, column_offset),
            KERNEL: lambda: triton_forward(x, out_features, key0, key1, nnz, column_offset),
        }
    times = {name: time_ms(run) for name, run in candidates.items()}
    return min(times, key=times.get)


def time_ms(run, repeats: int = 5) -> float:
    """Median milliseconds of ``run`` on the current stream after one warm-up call (which also
    compiles the kernel or builds the dense S)."""
    with torch.no_grad():
        run()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def clear_benchmarks() -> None:
    """Forgets every timed choice (tests; or after changing the flags)."""
    _BENCHMARKED.clear()
