"""The Triton kernels of S's layout: each call goes to the windowed or the classic launcher."""

from __future__ import annotations

import torch

from .. import reference, spec
from . import classic, windowed


def triton_forward(
    x: torch.Tensor, out_features: int, key0: int, key1: int, nnz: int, column_offset: int
) -> torch.Tensor:
    """Y = x S^T with the Triton kernel of S's layout."""
    layout = windowed if spec.is_windowed(out_features, nnz) else classic
    return layout.forward(x, out_features, key0, key1, nnz, column_offset)


def triton_forward_blocks(
    blocks: list[tuple[int, torch.Tensor]],
    out_features: int,
    key0: int,
    key1: int,
    nnz: int,
    column_offset: int,
    grouped: windowed.GroupedBlocks | None = None,
) -> torch.Tensor:
    """float32 sum of x S[:, column_offset + first + [0, d)]^T over the blocks (first, x), in one grouped
    launch; the windowed layout only (``windowed.forward_blocks``), with the blocks' plan
    (:func:`plan_forward_blocks`) where the caller keeps one."""
    return windowed.forward_blocks(blocks, out_features, key0, key1, nnz, column_offset, grouped=grouped)


def plan_forward_blocks(
    blocks: list[tuple[int, torch.Tensor]], out_features: int, nnz: int, column_offset: int
) -> windowed.GroupedBlocks:
    """What a grouped launch over ``blocks`` reads, fixed by their shapes, strides and first columns:
    reusable for blocks like these at other addresses."""
    return windowed.GroupedBlocks(blocks, column_offset, spec.windows_per_block(out_features, nnz))


def joins_grouped_launch(block: torch.Tensor) -> bool:
    """Whether a grouped launch can read the (n, ...) block in place."""
    return windowed.joins_grouped_launch(block)


def triton_transpose(
    y: torch.Tensor, in_features: int, key0: int, key1: int, nnz: int, column_offset: int
) -> torch.Tensor:
    """Z = y S with the Triton kernel of S's layout."""
    layout = windowed if spec.is_windowed(y.shape[1], nnz) else classic
    return layout.transpose(y, in_features, key0, key1, nnz, column_offset)


def triton_hash(
    in_features: int, out_features: int, key0: int, key1: int, nnz: int, column_offset: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' own (rows, negative) table, for materialising S and for tests."""
    if spec.is_windowed(out_features, nnz):
        tables = windowed.window_tables(in_features, out_features, key0, key1, nnz, column_offset, device)
        return reference.windowed_rows(
            in_features,
            column_offset,
            tables.words.t().to(torch.int64) & 0xFFFFFFFF,
            tables.rotations.to(torch.int64),
            tables.group_base * tables.windows,
            tables.group_base,
            out_features,
            nnz,
        )
    table = classic.hash_table(in_features, out_features, key0, key1, nnz, column_offset, device)
    return (table & 0x7FFFFFFF).to(torch.int64), table < 0
