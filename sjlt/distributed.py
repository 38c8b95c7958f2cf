"""Sparse JL projections of inputs spread over the ranks of a ``torch.distributed`` group.

S is a pure function of (seed, column index), so no rank ever ships a matrix: each regenerates
exactly the columns it needs.

Column-sharded inputs (FSDP / tensor-parallel shards of one wide vector): every rank holds the
same rows but its own columns [column_offset, column_offset + d_local); use
:func:`sparse_jl_sharded`, which projects the local slice and sums the partial projections with
one all-reduce, so every rank ends with the projection of the whole row.

Row-sharded inputs (data parallel): every rank holds whole rows; use
:func:`sparse_jl_row_sharded` (plain :func:`sjlt.functional.sparse_jl` with an optional check
that all ranks agree on the matrix). No communication is needed: same seed, same matrix.

Both take ``group`` (default: the world group) and must be called by every rank of it, like any
collective. Arguments are validated locally before any communication; a rank that raises there
leaves the others waiting in the collective until the process group's timeout, as with any
mismatched collective.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import functional as F
from . import spec
from ._dtypes import TORCH_COMPLEX_DTYPES, TORCH_FLOAT_DTYPES

__all__ = ["sparse_jl_sharded", "sparse_jl_row_sharded"]

# dtype codes for the consistency table: a mismatch would make the all-reduce fail or corrupt.
_DTYPE_CODES = {dtype: code for code, dtype in enumerate(TORCH_FLOAT_DTYPES + TORCH_COMPLEX_DTYPES)}
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _require_process_group(group, caller: str):
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"{caller} needs an initialized torch.distributed process group; call "
            f"torch.distributed.init_process_group(...) first, or use sjlt.functional.sparse_jl "
            f"in a single process"
        )
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}")


def _gather_table(fields: list[int], group, device: torch.device) -> list[list[int]]:
    """One all_gather of a small int64 row per rank; returns the rows in group-rank order."""
    row = torch.tensor(fields, dtype=torch.int64, device=device)
    rows = [torch.empty_like(row) for _ in range(dist.get_world_size(group))]
    dist.all_gather(rows, row, group=group)
    return torch.stack(rows).tolist()


def _check_agreement(table: list[list[int]], columns: dict[str, int], caller: str) -> None:
    """Raises ValueError naming every rank's value of the first field that differs across ranks."""
    for name, index in columns.items():
        values = [row[index] for row in table]
        if len(set(values)) > 1:
            shown = ", ".join(f"rank {rank}: {value}" for rank, value in enumerate(values))
            raise ValueError(
                f"{caller}: ranks disagree on {name} ({shown}); every rank of the group must pass the same value"
            )


def _check_seeds(table: list[list[int]], low: int, high: int, caller: str) -> None:
    seeds = [spec.seed_from_key(row[low], row[high]) for row in table]
    if len(set(seeds)) > 1:
        shown = ", ".join(f"rank {rank}: {seed}" for rank, seed in enumerate(seeds))
        raise ValueError(
            f"{caller}: ranks disagree on seed ({shown}); every rank must project with "
            f"the same seed, or the shards are projected by different matrices"
        )


def _check_dtypes(table: list[list[int]], index: int, caller: str) -> None:
    codes = [row[index] for row in table]
    if len(set(codes)) > 1:
        names = {code: str(dtype) for dtype, code in _DTYPE_CODES.items()}
        shown = ", ".join(f"rank {rank}: {names[code]}" for rank, code in enumerate(codes))
        raise ValueError(f"{caller}: ranks hold inputs of different dtypes ({shown}); cast every shard to one dtype")


def _check_columns(spans: list[tuple[int, int]], caller: str) -> None:
    """The non-empty spans [start, stop) must tile one contiguous range without overlap."""
    owned = sorted((start, stop, rank) for rank, (start, stop) in enumerate(spans) if stop > start)
    for (start, stop, rank), (next_start, next_stop, next_rank) in zip(owned, owned[1:]):
        if next_start < stop:
            raise ValueError(
                f"{caller}: column shards overlap: rank {rank} holds columns [{start}, {stop}) and "
                f"rank {next_rank} holds [{next_start}, {next_stop}); each column must belong to "
                f"exactly one rank (check each rank's column_offset and shard width)"
            )
        if next_start > stop:
            raise ValueError(
                f"{caller}: columns [{stop}, {next_start}) belong to no rank: rank {rank} ends at "
                f"column {stop} and the next shard (rank {next_rank}) starts at {next_start}; the "
                f"shards must cover one contiguous range (check each rank's column_offset)"
            )


def _all_reduce_sum(partial: torch.Tensor, group) -> torch.Tensor:
    # Half-precision partials are summed in float32: one rounding at the end instead of one per
    # hop of the reduction. The (n, k) output is tiny next to the input, so the cost is nil.
    if partial.dtype in _LOW_PRECISION:
        total = partial.float()
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        return total.to(partial.dtype)
    total = partial.contiguous()
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    return total


class _ShardedSparseJL(torch.autograd.Function):
    """Forward: project the local columns, then all-reduce. Backward: local transpose only.

    Convention (as for tensor-parallel layers whose forward ends in an all-reduce): the output is
    replicated and every rank computes the same loss from it, so the gradient arriving here is
    already the full gradient w.r.t. the output on every rank. The gradient w.r.t. the shard is
    that gradient times the shard's own columns of S; no further communication is needed.
    """

    @staticmethod
    def forward(ctx, x_shard, out_features, seed, nnz, column_offset, group, backend):
        ctx.in_features = x_shard.shape[-1]
        ctx.projection = dict(seed=seed, nnz=nnz, column_offset=column_offset, backend=backend)
        partial = F.sparse_jl(x_shard, out_features, **ctx.projection)
        return _all_reduce_sum(partial, group)

    @staticmethod
    def backward(ctx, grad_output):
        grad_shard = F.sparse_jl_transpose(grad_output, ctx.in_features, **ctx.projection)
        return grad_shard, None, None, None, None, None, None


def sparse_jl_sharded(
    x_shard: torch.Tensor,
    out_features: int,
    *,
    seed: int,
    column_offset: int,
    group=None,
    nnz: int | None = None,
    check: bool = True,
    backend: str = "auto",
) -> torch.Tensor:
    """Projection of a column-sharded input; every rank of ``group`` receives the full result.

    Rank r holds ``x_shard`` (..., d_r): columns [column_offset, column_offset + d_r) of the same
    rows of a wider input X. The result, identical on every rank, equals
    ``sparse_jl(X, out_features, seed=seed, nnz=nnz)`` within floating-point rounding: each rank
    projects its slice with ``column_offset`` and the partial projections are summed by one
    all-reduce (in float32 for float16/bfloat16 inputs). Shards may be empty (d_r = 0).

    ``check=True`` (the default) first verifies the layout with one all_gather of 8 int64 per
    rank (offset, width, rows, out_features, seed as two 32-bit halves, nnz, dtype), plus a host
    sync to read it: the non-empty shards must tile one contiguous column range starting at the
    smallest offset, with no overlap, and every rank must pass the same seed, out_features,
    nnz, number of rows and dtype. Otherwise every rank raises the same ValueError. Pass
    ``check=False`` to skip that collective once the layout is known to be right.

    Differentiable w.r.t. ``x_shard``. The backward assumes that every rank computes the same
    loss from the replicated output (so the gradient w.r.t. the output is the same everywhere);
    it then returns grad_output @ S[:, shard columns] with no communication. If instead each rank
    computes a different loss term from the output, all-reduce those output gradients yourself.

    ``seed``, ``nnz`` and ``backend`` mean what they mean for :func:`sjlt.functional.sparse_jl`.
    """
    caller = "sparse_jl_sharded"
    F.check_input(x_shard, "x_shard", complex_ok=True)
    k = spec.check_dimension(out_features, "out_features")
    seed = spec.check_seed(seed)
    nnz = spec.resolve_nnz(nnz, k)
    column_offset = F.check_column_offset(column_offset)
    _require_process_group(group, caller)
    if check:
        width = x_shard.shape[-1]
        rows = math.prod(x_shard.shape[:-1])
        key0, key1 = spec.philox_key(seed)
        table = _gather_table(
            [column_offset, width, rows, k, key0, key1, nnz, _DTYPE_CODES[x_shard.dtype]], group, x_shard.device
        )
        _check_seeds(table, 4, 5, caller)
        _check_agreement(table, {"out_features": 3, "nnz": 6, "the number of rows (x_shard.shape[:-1])": 2}, caller)
        _check_dtypes(table, 7, caller)
        _check_columns([(row[0], row[0] + row[1]) for row in table], caller)
    return _ShardedSparseJL.apply(x_shard, k, seed, nnz, column_offset, group, backend)


def sparse_jl_row_sharded(
    x_rows: torch.Tensor,
    out_features: int,
    *,
    seed: int,
    nnz: int | None = None,
    group=None,
    check: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Projection of a row-sharded (data-parallel) input: each rank projects its own rows.

    This is :func:`sjlt.functional.sparse_jl` on the local rows, with no communication: the
    matrix depends only on (seed, out_features, nnz, in_features), so ranks that pass the same
    values use the same matrix and their outputs stack into the projection of all rows.

    ``check=True`` verifies that agreement with one all_gather of 5 int64 per rank (in_features,
    out_features, seed as two 32-bit halves, nnz) and raises the same ValueError on every rank if they
    differ, e.g. when a seed was derived from the rank. It is a collective, so every rank of
    ``group`` must make the call; do it once (on the first batch), not on every step.
    """
    caller = "sparse_jl_row_sharded"
    F.check_input(x_rows, "x_rows", complex_ok=True)
    k = spec.check_dimension(out_features, "out_features")
    seed = spec.check_seed(seed)
    nnz = spec.resolve_nnz(nnz, k)
    if check:
        _require_process_group(group, caller)
        key0, key1 = spec.philox_key(seed)
        table = _gather_table([x_rows.shape[-1], k, key0, key1, nnz], group, x_rows.device)
        _check_seeds(table, 2, 3, caller)
        _check_agreement(table, {"in_features (x_rows.shape[-1])": 0, "out_features": 1, "nnz": 4}, caller)
    return F.sparse_jl(x_rows, k, seed=seed, nnz=nnz, backend=backend)
