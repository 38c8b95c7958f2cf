"""Output allocation for every kernel launcher, in one place so tests can poison it, and the one
rule for which allocations may be cached.

Tests replace :func:`empty` with a NaN-filled (or -1-filled) allocation: any element a kernel
forgets to write then fails the comparison instead of passing by luck.
"""

import sys

import torch


def empty(shape, dtype: torch.dtype, device) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


def may_keep(device) -> bool:
    """Whether a tensor made now on ``device`` may be kept across calls (sjlt's caches of constants,
    tables and matrices). Not while a CUDA graph is captured, nor while torch.compile's CUDA-graph
    trees warm a graph up: both allocate from the graph's private pool, whose memory later replays
    reuse. Skipping a cache is always safe; the next eager call fills it."""
    device = torch.device(device)
    if device.type != "cuda":
        return True
    if torch.cuda.is_current_stream_capturing():
        return False
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is None:  # not imported: no tree can be warming up
        return True
    try:
        if not torch._C._is_key_in_tls("tree_manager_containers"):
            return True  # this thread runs no trees
        index = torch.cuda.current_device() if device.index is None else device.index
        manager = trees.get_manager(index, create_if_none_exists=False)
        return manager is None or not manager.in_warmup
    except (AttributeError, RuntimeError, KeyError):  # another torch's internals: assume a warm-up
        return False
