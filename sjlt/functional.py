"""The public functional API: validation, shapes and dtypes around the registered ops."""

from __future__ import annotations

import functools
import numbers
from typing import NamedTuple

import torch

from . import backends, reference, spec
from ._backend import check_backend, triton_interpreting, use_triton
from ._dtypes import TORCH_COMPLEX_DTYPES, TORCH_FLOAT_DTYPES
from ._memory import check_output_fits
from .ops import choice, dense, layouts
from .ops import dropout as _dropout_ops  # noqa: F401  (registers torch.ops.sjlt.seeded_dropout)
from .ops import sparse_jl as _sparse_jl_ops
from .ops._launch import KERNEL_DTYPES

__all__ = ["sparse_jl", "sparse_jl_blocks", "sparse_jl_transpose", "sparse_jl_matrix", "seeded_dropout"]


def check_input(x, name: str, *, complex_ok: bool) -> None:
    """Raises unless ``x`` is a tensor sjlt can project (or, without ``complex_ok``, drop out):
    floating point (or complex), at least 1-D. ``name`` is the argument, for the message.
    Public for wrappers that check before a collective (:mod:`sjlt.distributed`)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    allowed = TORCH_FLOAT_DTYPES + (TORCH_COMPLEX_DTYPES if complex_ok else ())
    if x.dtype not in allowed:
        raise TypeError(
            f"{name} must be a floating-point tensor ({', '.join(str(d) for d in allowed)}), "
            f"got {x.dtype}; convert it first, e.g. {name}.float()"
        )
    if x.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension (..., features), got a 0-d tensor")


def check_column_offset(column_offset) -> int:
    """Returns ``column_offset`` as an int in [0, 2**62), or raises TypeError / ValueError."""
    if type(column_offset) is int and 0 <= column_offset < 1 << 62:  # the common case, cheaply
        return column_offset
    if isinstance(column_offset, bool) or not isinstance(column_offset, numbers.Integral):
        raise TypeError(f"column_offset must be an int, got {type(column_offset).__name__}")
    if not 0 <= column_offset < 1 << 62:
        raise ValueError(f"column_offset must lie in [0, 2**62), got {column_offset}")
    return int(column_offset)


def _settings(seed, nnz, k_for_nnz, column_offset, backend):
    """The validated (key0, key1, nnz, column_offset) of a projection's arguments."""
    key0, key1 = spec.philox_key(seed)
    nnz = spec.resolve_nnz(nnz, k_for_nnz)
    column_offset = check_column_offset(column_offset)
    check_backend(backend)
    return key0, key1, nnz, column_offset


# Validation costs several µs per call, as much as a small projection's GPU time: the same
# arguments are validated once (typed: True is not taken for 1).
_cached_settings = functools.lru_cache(maxsize=1024, typed=True)(_settings)


def _chosen_algorithm(op, flat, features, nnz, key0, key1, column_offset) -> str:
    if op is _sparse_jl_ops.sparse_jl_transpose_op:
        return choice.algorithm(flat, features, flat.shape[1], nnz, key0, key1, column_offset, transpose=True)
    return choice.algorithm(flat, flat.shape[1], features, nnz, key0, key1, column_offset)


# A launch-bound forward repeated with one signature goes straight to the dense algorithm's plan
# (dense.plan_forward): the signature holds everything validation and the rule depend on.
def _plan_key(x, out_features, seed, nnz, column_offset, backend) -> tuple:
    return (x.shape, x.dtype, x.device, *_settings_key(out_features, seed, nnz, column_offset, backend))


def _settings_key(out_features, seed, nnz, column_offset, backend) -> tuple:
    """The arguments and ``sjlt.backends`` flags that a planned call's checks and algorithm rule
    read, as part of its key. The types too: True == 1, but a bool seed is an error (``_settings``)."""
    return (
        out_features,
        type(out_features),
        seed,
        type(seed),
        nnz,
        type(nnz),
        column_offset,
        type(column_offset),
        backend,
        backends.deterministic,
        backends.benchmark,
        backends.dense_cache_bytes,
    )


def _projection(op, dense_fn, tensor, features, seed, nnz, column_offset, backend, k_for_nnz, plan_key=None):
    try:
        key0, key1, nnz, column_offset = _cached_settings(seed, nnz, k_for_nnz, column_offset, backend)
    except TypeError:  # an unhashable argument: validate it uncached, for the message
        key0, key1, nnz, column_offset = _settings(seed, nnz, k_for_nnz, column_offset, backend)
    if tensor.is_complex():
        real = _projection(op, dense_fn, tensor.real, features, seed, nnz, column_offset, backend, k_for_nnz)
        imag = _projection(op, dense_fn, tensor.imag, features, seed, nnz, column_offset, backend, k_for_nnz)
        return torch.complex(real, imag)
    lead = tensor.shape[:-1]
    flat = tensor if tensor.dim() == 2 else tensor.reshape(lead.numel(), tensor.shape[-1])  # not -1: d may be 0
    if (
        use_triton(backend, flat, supports_dtype=flat.dtype in KERNEL_DTYPES)
        and not torch.compiler.is_compiling()
        and not torch.is_autocast_enabled(flat.device.type)
        and _chosen_algorithm(op, flat, features, nnz, key0, key1, column_offset) == choice.DENSE
    ):
        # The op's own dispatch (use_triton, then choice) picks the same dense algorithm, a plain
        # torch op with torch's autograd: calling it here skips the op's dispatch, which costs
        # more than the matmul at this size.
        out = dense_fn(flat, features, key0, key1, nnz, column_offset)
        if plan_key is not None:
            dense.plan_forward(plan_key, flat, features, key0, key1, nnz, column_offset)
    else:
        out = op(flat, features, key0, key1, nnz, column_offset, backend)
    return out if tensor.dim() == 2 else out.reshape(*lead, features)


def sparse_jl(
    x: torch.Tensor,
    out_features: int,
    *,
    seed: int,
    nnz: int | None = None,
    column_offset: int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    """Project the last dimension of ``x`` (..., d) to ``out_features``: y = x S^T.

    S is the k x d sparse JL matrix of ``seed`` (``docs/spec.md``): ``nnz`` nonzeros of
    +-1/sqrt(nnz) per column, one in each of nnz row blocks. ``column_offset`` says that x holds
    columns [offset, offset + d) of a wider input, so projections of column shards sum to the
    projection of the whole. Output dtype = input dtype, accumulated in float32 (float64 for
    float64); complex inputs project real and imaginary parts. Differentiable: the backward is
    :func:`sparse_jl_transpose`, regenerated from the seed. A NaN or inf in a row makes that row's
    output non-finite (the Triton kernel spreads it over the whole row, the reference over the
    affected outputs).
    """
    plan_key = None
    if type(x) is torch.Tensor:
        try:
            plan_key = _plan_key(x, out_features, seed, nnz, column_offset, backend)
            planned = dense.planned(plan_key)
        except TypeError:  # an unhashable argument: the full path says what is wrong with it
            plan_key = planned = None
        # Only 2-D real CUDA inputs have plans, and the signature holds shape, dtype and device.
        if planned is not None and not torch.is_autocast_enabled("cuda") and not torch.compiler.is_compiling():
            return planned(x)
        if not (x.is_cuda and x.dim() == 2):
            plan_key = None
    check_input(x, "x", complex_ok=True)
    k = spec.check_dimension(out_features, "out_features")
    check_output_fits(x, k, "out_features")
    return _projection(_sparse_jl_ops.sparse_jl_op, dense.forward, x, k, seed, nnz, column_offset, backend, k, plan_key)


def sparse_jl_blocks(
    blocks,
    out_features: int,
    *,
    seed: int,
    nnz: int | None = None,
    column_offset: int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    """The float32 (n, out_features) projection of a (n, columns) matrix given as column blocks,
    which is never built: ``blocks`` are pairs (first column, (n, ...) tensor), a block's columns
    being its entries past the first dimension in row-major order, and the result is the sum over
    them of ``sparse_jl(x.reshape(n, -1), out_features, seed=seed, nnz=nnz,
    column_offset=column_offset + first)``, accumulated in float32. For per-parameter gradients
    (``sjlt.attribution``) and other inputs that live in many tensors.

    On a GPU the blocks of one dtype whose S has the windowed layout share one table launch and one
    kernel launch (a grouped launch), where a call per block would pay its host-side cost per block.
    The grouped sum rounds differently from the per-block one but is bitwise reproducible. Blocks
    whose last dimension is strided, lone blocks, and other devices take ``sparse_jl`` per block.
    Both are differentiable: a block that needs a gradient gets ``sparse_jl_transpose`` of the
    result's gradient at its columns. A call repeated with
    blocks of the same shapes, strides, dtypes and devices (at any addresses) reuses the first
    call's checks and launch plan.
    """
    if isinstance(blocks, torch.Tensor) or not hasattr(blocks, "__iter__"):
        raise TypeError(f"blocks must be a sequence of (first column, tensor) pairs, got {type(blocks).__name__}")
    blocks = list(blocks)
    if not blocks:
        raise ValueError("blocks is empty; pass at least one (first column, tensor) pair")
    compiling = torch.compiler.is_compiling()  # no grouped launches then (``_groupable``)
    key = None if compiling else _blocks_key(blocks, out_features, seed, nnz, column_offset, backend)
    plan = _BLOCK_PLANS.get(key) if key is not None else None
    if plan is None:
        plan = _plan_blocks(blocks, out_features, seed, nnz, column_offset, backend)
        if key is not None:
            if len(_BLOCK_PLANS) >= _BLOCK_PLANS_MAX:
                _BLOCK_PLANS.pop(next(iter(_BLOCK_PLANS)))
            _BLOCK_PLANS[key] = plan
    out = torch.zeros(plan.rows, plan.out_features, dtype=torch.float32, device=plan.device)
    key0, key1, nnz, column_offset = plan.settings
    for indices, grouped, differentiable in plan.grouped:
        if differentiable:  # a block needs a gradient: the launch under autograd
            firsts = [blocks[index][0] for index in indices]
            tensors = [blocks[index][1] for index in indices]
            settings = (key0, key1, nnz, column_offset, backend)
            out += _sparse_jl_ops.GroupedForward.apply(grouped, plan.out_features, settings, firsts, *tensors)
        else:
            run = [blocks[index] for index in indices]
            out += layouts.triton_forward_blocks(run, plan.out_features, key0, key1, nnz, column_offset, grouped)
    for index in plan.alone:
        first, x = blocks[index]
        flat = x if x.dim() == 2 else x.reshape(plan.rows, -1)
        out += sparse_jl(
            flat, plan.out_features, seed=seed, nnz=nnz, column_offset=column_offset + first, backend=backend
        )
    return out


class _BlocksPlan(NamedTuple):
    """How :func:`sparse_jl_blocks` projects blocks of one signature: the result's shape and
    device, the validated settings (key0, key1, nnz, column_offset), the grouped launches (block
    indices in column order, their ``windowed.GroupedBlocks``, whether a block needs a gradient)
    and the blocks projected alone. It holds no tensors."""

    rows: int
    out_features: int
    device: torch.device
    settings: tuple
    grouped: list
    alone: list


#: Plans of recent grouped calls (:func:`sparse_jl_blocks`), by signature; the oldest goes first.
_BLOCK_PLANS: dict = {}
_BLOCK_PLANS_MAX = 64


def _blocks_key(blocks: list, out_features, seed, nnz, column_offset, backend) -> tuple | None:
    """What the checks and the plan of a grouped call depend on, or None where an argument is not
    hashable or a block is not a (first column, tensor) pair (the checks then say what is wrong)."""
    try:
        key = (
            tuple(
                (first, type(first), type(x), x.shape, x.stride(), x.dtype, x.device, x.requires_grad)
                for first, x in blocks
            ),
            _settings_key(out_features, seed, nnz, column_offset, backend),
            backends.workspace_bytes,
            triton_interpreting(),
            torch.is_grad_enabled(),
            torch.get_float32_matmul_precision(),
        )
        hash(key)
    except (TypeError, ValueError, AttributeError, RuntimeError):  # RuntimeError: a sparse tensor's strides
        return None
    return key


def _plan_blocks(blocks: list, out_features, seed, nnz, column_offset, backend) -> _BlocksPlan:
    """Checks the blocks and settings of a grouped call and decides its launches."""
    k = spec.check_dimension(out_features, "out_features")
    key0, key1, nnz, column_offset = _settings(seed, nnz, k, column_offset, backend)
    groupable = _groupable(k, nnz, backend)
    grad_mode = torch.is_grad_enabled()
    grouped, alone, device, rows = {}, [], None, None
    # One pass over the blocks, each tensor attribute read once.
    for index, pair in enumerate(blocks):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:  # a tuple: no union object built per block
            raise TypeError(f"blocks[{index}] must be a (first column, tensor) pair, got {type(pair).__name__}")
        first, x = pair
        if not isinstance(x, torch.Tensor) or x.dtype not in TORCH_FLOAT_DTYPES or x.dim() < 2:
            check_input(x, f"blocks[{index}]", complex_ok=False)
            raise ValueError(f"blocks[{index}] must be (n, ...) with at least 2 dimensions, got shape {tuple(x.shape)}")
        first = check_column_offset(first)
        if device is None:
            device, rows = x.device, x.shape[0]
        elif x.shape[0] != rows or x.device != device:
            raise ValueError(
                f"blocks[{index}] is {tuple(x.shape)} on {x.device} but blocks[0] is "
                f"{tuple(blocks[0][1].shape)} on {device}; every block needs the same rows n on the same device"
            )
        if groupable(x):
            grouped.setdefault(x.dtype, []).append((first, x, index))
        elif x.numel():
            alone.append(index)
    check_output_fits(torch.empty(rows, 0, device=device), k, "out_features")  # the float32 (n, k) result
    launches = []
    for group in grouped.values():
        for run in _column_runs(group, rows):
            if len(run) == 1:
                alone.append(run[0][2])
            else:
                plan = layouts.plan_forward_blocks([(first, x) for first, x, _ in run], k, nnz, column_offset)
                differentiable = grad_mode and any(x.requires_grad for _, x, _ in run)
                launches.append(([index for _, _, index in run], plan, differentiable))
    return _BlocksPlan(rows, k, device, (key0, key1, nnz, column_offset), launches, alone)


#: Most columns between two blocks of one grouped launch: its table spans the gap too (nnz / 4
#: bytes per column).
_GROUPED_GAP_COLUMNS = 1 << 20


def _column_runs(blocks: list, rows: int) -> list[list]:
    """``blocks`` (first column, tensor, index) of ``rows`` rows each in column order, cut where a
    gap between them exceeds _GROUPED_GAP_COLUMNS."""
    firsts = [first for first, _, _ in blocks]
    if firsts != sorted(firsts):
        blocks = sorted(blocks, key=lambda block: block[0])
    runs, end = [], None
    for block in blocks:
        first, x = block[0], block[1]
        if end is None or first - end > _GROUPED_GAP_COLUMNS:
            runs.append([])
            end = first
        runs[-1].append(block)
        end = max(end, first + x.numel() // rows)
    return runs


def _groupable(k: int, nnz: int, backend: str):
    """Whether a block can join a grouped launch (:func:`sparse_jl_blocks`), as a predicate; what
    is the same for every block is decided once (148 blocks per GPT-2 call)."""
    if not spec.is_windowed(k, nnz) or torch.compiler.is_compiling():
        return lambda x: False
    by_dtype = {}  # the blocks share a device, so the backend's answer depends on the dtype alone

    def groupable(x: torch.Tensor) -> bool:
        if not x.numel():
            return False
        if not layouts.joins_grouped_launch(x):  # its columns in runs a launch reads in place
            return False
        triton = by_dtype.get(x.dtype)
        if triton is None:
            triton = by_dtype[x.dtype] = use_triton(backend, x, supports_dtype=x.dtype in KERNEL_DTYPES)
        return triton

    return groupable


def sparse_jl_transpose(
    y: torch.Tensor,
    in_features: int,
    *,
    seed: int,
    nnz: int | None = None,
    column_offset: int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    """The adjoint of :func:`sparse_jl`: z = y S, mapping (..., k) to (..., in_features)."""
    check_input(y, "y", complex_ok=True)
    d = spec.check_dimension(in_features, "in_features")
    k = y.shape[-1]
    if k < 1:
        raise ValueError("y must have at least one output feature in its last dimension")
    check_output_fits(y, d, "in_features")
    return _projection(
        _sparse_jl_ops.sparse_jl_transpose_op, dense.transpose, y, d, seed, nnz, column_offset, backend, k
    )


def sparse_jl_matrix(
    in_features: int,
    out_features: int,
    *,
    seed: int,
    nnz: int | None = None,
    column_offset: int = 0,
    backend: str = "auto",
    dtype=torch.float32,
    device=None,
) -> torch.Tensor:
    """S (out_features x in_features) as a coalesced sparse COO tensor, for inspection and interop.

    Identical from every backend: ``backend='triton'`` reads the kernel's own hash table.
    """
    d = spec.check_dimension(in_features, "in_features")
    k = spec.check_dimension(out_features, "out_features")
    key0, key1 = spec.philox_key(seed)
    nnz = spec.resolve_nnz(nnz, k)
    column_offset = check_column_offset(column_offset)
    check_backend(backend)
    device = torch.device(device) if device is not None else torch.device("cpu")
    probe = torch.empty(0, device=device)
    if use_triton(backend, probe):
        rows, negative = layouts.triton_hash(d, k, key0, key1, nnz, column_offset, device)
    else:
        rows, negative = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz, column_offset=column_offset, device=device)
    return reference.sparse_matrix_from_hash(rows, negative, k, dtype=dtype)


def seeded_dropout(x: torch.Tensor, p: float, *, seed, training: bool = True, backend: str = "auto") -> torch.Tensor:
    """y = x * keep / (1 - p), keep regenerated from (seed, index): no mask is ever stored.

    ``seed`` is one of:
    - an int in [0, 2**64);
    - a 0-d int64 tensor on x's device (its bits read as uint64), e.g. drawn with
      ``torch.randint``. The kernel reads it at run time, so a captured CUDA graph uses the value
      the tensor holds at each replay, and ``torch.compile`` never specialises on it;
    - a 1-D int64 tensor with one seed per row of a 2-D x.

    ``training=False`` or p = 0 returns x itself; p = 1 returns zeros.
    """
    check_input(x, "x", complex_ok=False)
    p = spec.check_probability(p)
    check_backend(backend)
    if isinstance(seed, torch.Tensor):
        if seed.dtype not in (torch.int64, torch.int32) or seed.dim() > 1:
            raise TypeError(
                f"a seed tensor must be 0-d (one seed) or 1-D (one seed per row) int64, got "
                f"{seed.dtype} of shape {tuple(seed.shape)}"
            )
        if seed.dim() == 1:
            spec.check_row_seeds(seed.shape, x.shape)
        if seed.device != x.device:
            raise ValueError(f"seed tensor is on {seed.device} but x is on {x.device}; move it with .to(x.device)")
        seed = seed.to(torch.int64)
    else:
        seed = spec.check_seed(seed)
    if not training or p == 0.0:
        return x
    if not isinstance(seed, torch.Tensor):
        seed = _dropout_ops.seed_tensor(seed, x.device)
    return _dropout_ops.seeded_dropout_op(x, p, seed, backend)
