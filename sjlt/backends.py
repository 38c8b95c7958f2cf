"""Process-wide switches of the projection engine, in the spirit of ``torch.backends.cudnn``.

``dense_cache_bytes``: the byte budget of the cache of dense sign matrices (each at most 4 MiB)
that small, launch-bound GPU projections multiply with cuBLAS (see ``sjlt.ops.dense``); 64 MiB
by default. 0 turns the dense algorithm off: every GPU projection then runs the Triton kernel.
"""
from __future__ import annotations

dense_cache_bytes: int = 64 << 20
