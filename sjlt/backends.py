"""Process-wide switches of the projection engine, in the spirit of ``torch.backends.cudnn``.

- ``deterministic`` (default True): every projection's algorithm is a fixed rule of its
  configuration, so results are bitwise reproducible run to run on a given device and shape.
- ``benchmark`` (default False): with ``deterministic=False``, the first GPU projection of each
  configuration (direction, shape, dtype, device) times the eligible algorithms (the Triton kernel,
  and the dense cuBLAS one where S fits the cache) and keeps the fastest for the process. Ignored
  while ``deterministic`` is True: a timed choice can differ between runs, and the two algorithms
  agree only to float tolerance.
- ``dense_cache_bytes`` (default 64 MiB): the byte budget of the cache of dense sign matrices the
  dense algorithm multiplies; 0 turns that algorithm off, so every GPU projection runs the kernel.
- ``workspace_bytes`` (default 256 MiB): the most a forward projection may allocate for the float32
  partial sums of its d-splits (splits x n x k x 4 bytes), which let few rows with a long d fill
  the GPU. A smaller budget means fewer splits: less memory, less parallelism. Results are
  bitwise reproducible for a given budget (the split count sets the order of the sums). A
  float16/bfloat16 transpose with nnz > 8 also keeps its float32 sums over the bands of blocks in
  slabs of at most this size (at least 64 rows of one group of 16 * k / nnz columns).

Both budgets are ints >= 0; anything else raises, naming the setting, the next time the engine
reads it.

float32 accuracy follows ``torch.get_float32_matmul_precision()``, as ``torch.matmul`` does:
"highest" (torch's default) is exact float32, "high" and "medium" keep 16 and 8 mantissa bits of
the input in the kernel's tensor-core passes (and let cuBLAS use TF32 in the dense algorithm).
See sjlt/ops/choice.py for the rule.
"""

from __future__ import annotations

import numbers

deterministic: bool = True
benchmark: bool = False
dense_cache_bytes: int = 64 << 20
workspace_bytes: int = 256 << 20

_DEFAULT_BYTES = {"dense_cache_bytes": dense_cache_bytes, "workspace_bytes": workspace_bytes}


def byte_budget(name: str) -> int:
    """The byte budget ``name`` ("dense_cache_bytes" or "workspace_bytes") as set, checked when the
    engine reads it, so a bad assignment fails with what to set instead of deep in a launch."""
    value = globals()[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"sjlt.backends.{name} must be an int number of bytes, got {value!r}; "
            f"the default is {_DEFAULT_BYTES[name]} ({_DEFAULT_BYTES[name] >> 20} MiB)"
        )
    if value < 0:
        raise ValueError(f"sjlt.backends.{name} must be >= 0 bytes (0 turns it off), got {value}")
    return int(value)
