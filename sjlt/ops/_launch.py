"""Launch rules shared by both layouts' launchers: dot configuration, d-splits, forward outputs."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .. import _buffers, backends
from .._backend import dot_dtype, multiprocessor_count
from .._dtypes import TORCH_FLOAT_DTYPES

#: Input dtypes the SJLT kernels take: sjlt's float dtypes but float64, which runs the reference.
KERNEL_DTYPES = tuple(dtype for dtype in TORCH_FLOAT_DTYPES if dtype != torch.float64)

#: bfloat16 terms of a float32 input's split per torch.get_float32_matmul_precision(): "highest"
#: (torch's default) is exact; "high" and "medium" trade bits for speed, as torch.matmul does.
FP32_PASSES = {"highest": 3, "high": 2, "medium": 1}


def dot_config(dtype):
    """(FP32_PASSES, DOT_DTYPE) of the kernels for an input of ``dtype``."""
    import triton.language as tl

    if dtype == torch.float32:
        return FP32_PASSES[torch.get_float32_matmul_precision()], dot_dtype(tl.bfloat16)
    return 0, dot_dtype(tl.float16 if dtype == torch.float16 else tl.bfloat16)


#: Below this many input bytes a call is bound by its host-side launch, not by the GPU: splitting
#: d to fill the SMs would only add the launches that sum the partials (benchmarks/RESULTS.md,
#: per-call cost)...
_SPLIT_MIN_BYTES = 1 << 22
#: ... unless its programs would run long: more than this many splits' minimum work each (a
#: windowed program's 16 groups) is a serial run that costs more than the sum launch. H100: 1 x 2**20
#: bfloat16 -> 2048, 4096 groups in each of 16 programs, took 2.3 ms unsplit (benchmarks/NOTES.md,
#: "Grouped launches").
_SHORT_RUN_SPLITS = 4


def splits_to_fill(
    programs: int,
    max_splits: int,
    per_sm: int,
    device: torch.device,
    summed: tuple[int, int] | None = None,
    resident_per_sm: int | None = None,
    fewest_waves: bool = False,
    partial_cost: bool = False,
) -> int:
    """Splits of the work over d that bring ``programs`` up to ``per_sm`` programs per SM, at most
    ``max_splits``. ``summed``: (input bytes, bytes of one split's float32 partial) when the splits
    produce partials that a second launch sums (the forward). Below _SPLIT_MIN_BYTES of input, with
    short programs (``max_splits`` at most _SHORT_RUN_SPLITS), that launch costs more than it saves;
    all partials together stay within ``sjlt.backends.workspace_bytes``. ``resident_per_sm``: the
    programs an SM holds at once, if known; summed splits are then dropped where the unsplit launch
    takes no more waves of resident programs per unit of work (:func:`_waves_per_work`) than the
    split one, which then only adds its partials; with ``fewest_waves``, the count up to that
    split's that takes the fewest waves per unit of work (the fewest splits among equals). With
    ``partial_cost``, the count up to the fill rule's that :func:`_split_cost` predicts fastest if
    that is COSTED_MIN_SPLITS or more, else enough for one program per SM."""
    if device.type != "cuda":
        return 1
    if summed is not None:
        input_bytes, partial_bytes = summed
        if input_bytes < _SPLIT_MIN_BYTES and max_splits <= _SHORT_RUN_SPLITS:
            return 1
        max_splits = min(max_splits, backends.byte_budget("workspace_bytes") // max(1, partial_bytes))
    index = device.index if device.index is not None else torch.cuda.current_device()
    target = per_sm * multiprocessor_count(index)
    if programs >= target:
        return 1
    splits = max(1, min(math.ceil(target / programs), max_splits))
    if summed is not None and partial_cost and splits > 1:
        sms = multiprocessor_count(index)
        best = min(range(1, splits + 1), key=lambda s: (_split_cost(programs, s, sms, *summed), s))
        return best if best >= COSTED_MIN_SPLITS else max(1, min(math.ceil(sms / programs), splits))
    if summed is not None and resident_per_sm and splits > 1:
        resident = resident_per_sm * multiprocessor_count(index)
        if fewest_waves:
            return min(range(1, splits + 1), key=lambda s: (_waves_per_work(programs, s, resident), s))
        if _waves_per_work(programs, 1, resident) <= _waves_per_work(programs, splits, resident):
            return 1
    return splits


def _waves_per_work(programs: int, splits: int, resident: int) -> float:
    """The waves of ``resident`` programs that ``programs`` row tiles in ``splits`` splits take,
    over the splits: the launch's time in units of one unsplit program's, where every program of a
    wave waits for the wave's longest. H100 (benchmarks/NOTES.md, "Forward splits by waves"): the
    tensor-core forward's d-splits of 256, 512 and 1024 programs into 2-5 ran 1.00-1.28x slower than
    one split (the waves tie, the partials cost), those of 24-160, 320 and 384 programs into 3-44
    1.14-6.2x faster."""
    return math.ceil(programs * splits / resident) / splits


#: How much slower a forward kernel runs split into float32 partials than unsplit, besides the
#: partials' bytes: the 128-row program writing partials compiles to a slower loop than the one
#: writing Y (benchmarks/NOTES.md, "Any k", items 13 and 22).
SPLIT_KERNEL_COST = 1.15
#: The fewest splits that :func:`_split_cost` may choose: its choices of 1-2 splits where the fill to
#: one program per SM took another ran 1.0-1.3x slower than that fill (H100, two-band folds at
#: 256-1024 rows, e.g. 1024 x 2**20 -> 3000 in 2 splits 2.65 ms against 2.21 in one), while every
#: choice of 4-15 ran 0.57-0.97x its time (NOTES.md, "Any k", item 22).
COSTED_MIN_SPLITS = 4


def _split_cost(programs: int, splits: int, sms: int, input_bytes: int, partial_bytes: int) -> float:
    """The predicted time of ``programs`` row tiles in ``splits`` splits, in units of the time to read
    the input at the full rate: each program streams its share on one SM, so the launch takes
    ceil(P s / SMs) waves of 1 / s of a program's work; a split launch runs SPLIT_KERNEL_COST slower
    and writes and reads ``splits`` partials of ``partial_bytes``. H100, bfloat16 forwards with two
    bands folding rows (NOTES.md, "Any k", item 22): it picks one split at 4096 x 2**17 and 4-8 at
    1024 x 2**20 and 2048 x 2**18 -> 2100, where they ran 0.72-0.85x one split's time."""
    waves = math.ceil(programs * splits / sms) * sms / (programs * splits)
    if splits == 1:
        return waves
    return waves * SPLIT_KERNEL_COST + 2 * splits * partial_bytes / input_bytes


def padded_row(k: int) -> int:
    """k rounded up to a multiple of 16: the row length of the buffers the launchers fill or read
    in rows of k elements, the forward's float32 partials and a transpose's copy of y. Rows of a k
    off 16 start inside a 32-byte sector, which neighbouring programs then write in part (the L2
    reads such sectors back from DRAM), and lose the kernels' specialisation on strides that 16
    divides: H100, bfloat16 4096 x 2**17 -> 2500 in two splits, 1.43 ms against 1.15 padded
    (benchmarks/NOTES.md, "Any k", items 13-14)."""
    return -(-k // 16) * 16


def forward_output(n: int, k: int, splits: int, x: torch.Tensor, dtype: torch.dtype | None = None):
    """(buffer, split stride): Y itself (x's dtype, or ``dtype``) for one split, else float32
    partials the caller sums, in rows of ``padded_row(k)`` elements."""
    if splits == 1:
        return _buffers.empty((n, k), dtype or x.dtype, x.device), 0
    out = _buffers.empty((splits, n, padded_row(k)), torch.float32, x.device)[:, :, :k]
    return out, out.stride(0)


class Tiling(NamedTuple):
    """Overrides of a launcher's tiling heuristics, for tests and benchmark sweeps only; a result's
    value never depends on them beyond float rounding. ``blocks``: (BLOCK_M, BLOCK_N, BLOCK_D) for
    the classic layout, (BLOCK_M,) for the windowed one; ``num_stages`` and ``steps``: the windowed
    kernels only, ``steps`` being (groups per dot, dots per loop step) for the forward and (groups
    per dot[, stacked tile as the left operand]) for the transpose; ``promote_every``: the
    forwards' steps per separately rounded run (:func:`promote_every`); ``paired``: whether the
    windowed transpose with two bands sums both in one launch (else one launch per band);
    ``pipelined``: whether the windowed kernels issue each step's loads a step ahead (the forward
    only with one dot per step); ``shuffle``: whether the windowed forward runs on the CUDA cores
    (``sparse_jl_windowed_shuffle_forward_kernel``) instead of multiplying tiles; ``gluon``: whether
    a half-type windowed forward runs the Gluon kernel (``sparse_jl_windowed_gluon_forward_kernel``;
    True needs an eligible input and GPU); ``twins``: whether a one-band windowed transpose gives
    each program two neighbouring windows (ignored with two bands)."""

    splits: int | None = None
    blocks: tuple | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    steps: tuple | None = None
    promote_every: int | None = None
    paired: bool | None = None
    pipelined: bool | None = None
    shuffle: bool | None = None
    gluon: bool | None = None
    twins: bool | None = None


#: Loop steps per run that a forward sums in its own tensor-core accumulator before adding the run
#: to the total on the CUDA cores (round to nearest). The tensor cores' float32 accumulation
#: truncates, so its error grows with the steps summed into one accumulator: up to 64 steps exact
#: float32 stayed within 4.5e-6 of float64 on an H100, but 171 and 512 steps reached 1.2-1.4e-5 and
#: 1.6-1.7e-5, over the 1e-5 bar. Runs of 64 bring those to 4-5e-6 at 0-5% more time; shorter runs
#: are more accurate but slower (1 step: 1.4-2.4x), and the nested loop costs 1.3-2x where a
#: program has few steps, hence runs only past 64 steps (benchmarks/NOTES.md, design 5).
PROMOTE_EVERY = 64


def promote_every(fp32_passes: int, steps: int, tiling: Tiling) -> int:
    """The PROMOTE_EVERY constexpr of a forward kernel whose programs take ``steps`` loop steps:
    runs for exact float32 past PROMOTE_EVERY steps, else 0 (one accumulator). "high", "medium"
    and half types round to far fewer bits than the truncation costs."""
    if tiling.promote_every is not None:
        return tiling.promote_every
    return PROMOTE_EVERY if fp32_passes == 3 and steps > PROMOTE_EVERY else 0


def sum_splits(out: torch.Tensor, splits: int, dtype: torch.dtype) -> torch.Tensor:
    """Y from the forward's output: itself for one split, else the partials summed in a fixed order."""
    return out if splits == 1 else out.sum(0).to(dtype)
