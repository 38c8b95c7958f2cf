"""The projection engine that users run outside the Triton kernels: Y = X S^T and Z = Y S.

``sjlt.reference`` is the oracle (the spec, executable and simple); this module is what
``sjlt.ops`` calls for every tensor that the Triton kernels do not take. It computes exactly the
oracle's matrix (its tables come from ``reference.sparse_jl_hash``) and agrees with the oracle to
float tolerance; only the order of the additions differs.

Two paths:

- **numba** (CPU tensors; a dependency where numba ships wheels, else ``pip install 'seeded-sjlt[cpu]'``): the kernels of
  ``sjlt._cpu_kernels`` on tiles of rows held transposed (the windowed forward, on CPUs with
  full-width AVX-512, by vector permutes of x's rows in place), run on ``torch.get_num_threads()``
  threads of the calling thread. All calls in a process share one pool of ``os.cpu_count()``
  worker threads, so concurrent callers (Dask's threaded scheduler, joblib threads) never run more
  engine threads than there are cores; a caller with one torch thread computes in its own thread.
  Set ``torch.set_num_threads(n)`` in the calling thread to use n threads. The table of S is
  cached per (seed, k, nnz, columns), up to ``TABLE_CACHE_BYTES`` in all, so repeated transforms
  of the same shape do not hash again.
- **torch** (other devices, or without numba, or with ``SJLT_CPU_ENGINE=torch``): gathers of row
  chunks through ``embedding_bag``, tiled to bound the scratch memory. Without numba the first CPU
  projection warns once per process.

Both keep memory at the output plus the table plus bounded per-thread scratch.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from collections import OrderedDict

import torch

from . import reference, spec
from ._daemon_pool import DaemonPool
from ._memory import host_empty

#: ``SJLT_CPU_ENGINE``: "auto" (numba when installed) or "torch" (always the torch path).
ENGINE_VARIABLE = "SJLT_CPU_ENGINE"
_ENGINE_CHOICES = ("auto", "torch")

#: Columns per table (one hash call, one cache entry) and the byte budget of the table cache.
TABLE_COLUMNS = 1 << 16
TABLE_CACHE_BYTES = 64 << 20

#: Staged half-precision blocks hold at most this many float32 elements per thread.
_STAGE_ELEMENTS = 1 << 20
#: Threads split the rows at tile boundaries, so each row's sums run in the same order whatever the
#: thread count. Below _FEW_ROWS rows with more than one table they split the columns instead: the
#: forward sums _COLUMN_GROUPS fixed groups of tables separately and adds them in group order.
_FEW_ROWS = 128
_COLUMN_GROUPS = 8


def sparse_jl_forward(
    x: torch.Tensor, out_features: int, *, seed: int, nnz: int, column_offset: int = 0
) -> torch.Tensor:
    """Y = X S^T for a 2-D x (n, d): rows of x projected to out_features, in x's dtype."""
    reference._check_matrix(x, "x", "sparse_jl_forward")
    n, d = x.shape
    if n == 0 or d == 0:
        return torch.zeros(n, out_features, dtype=x.dtype, device=x.device)
    kernels = _kernels_for(x)
    if kernels is None:
        return _torch_forward(x, out_features, seed=seed, nnz=nnz, column_offset=column_offset)
    return _numba_forward(kernels, x, out_features, seed=seed, nnz=nnz, column_offset=column_offset)


def sparse_jl_transpose(
    y: torch.Tensor, in_features: int, *, seed: int, nnz: int, column_offset: int = 0
) -> torch.Tensor:
    """Z = Y S for a 2-D y (n, k): the adjoint of :func:`sparse_jl_forward`, in y's dtype."""
    reference._check_matrix(y, "y", "sparse_jl_transpose")
    n, k = y.shape
    if n == 0 or in_features == 0:
        return torch.zeros(n, in_features, dtype=y.dtype, device=y.device)
    kernels = _kernels_for(y)
    if kernels is None:
        return _torch_transpose(y, in_features, seed=seed, nnz=nnz, column_offset=column_offset)
    return _numba_transpose(kernels, y, in_features, seed=seed, nnz=nnz, column_offset=column_offset)


# --------------------------------------------------------------------------------------------
# Path selection
# --------------------------------------------------------------------------------------------

_kernel_module = None
_kernel_import_failed = False
_import_lock = threading.Lock()


def engine_choice() -> str:
    choice = os.environ.get(ENGINE_VARIABLE, "auto").strip().lower() or "auto"
    if choice not in _ENGINE_CHOICES:
        raise ValueError(f"{ENGINE_VARIABLE} must be one of {_ENGINE_CHOICES}, got {choice!r}")
    return choice


def numba_kernels():
    """The numba kernel module, imported on first use; None (after one warning) without numba."""
    global _kernel_module, _kernel_import_failed
    if _kernel_module is not None or _kernel_import_failed:
        return _kernel_module
    with _import_lock:
        if _kernel_module is None and not _kernel_import_failed:
            try:
                _cpu_kernels = importlib.import_module(f"{__package__}._cpu_kernels")
                _cpu_kernels.compile_check()
            except ImportError as error:
                _fall_back(f"numba is not available ({error}); install it with pip install 'seeded-sjlt[cpu]'")
            except Exception as error:  # an incompatible numba or llvmlite fails while compiling
                _fall_back(f"the numba kernels did not compile ({type(error).__name__}: {error})")
            else:
                _kernel_module = _cpu_kernels
    return _kernel_module


def _fall_back(reason: str) -> None:
    global _kernel_import_failed
    _kernel_import_failed = True
    warnings.warn(f"sjlt: {reason}. CPU projections run on the slower torch path.", RuntimeWarning, stacklevel=5)


def _kernels_for(tensor: torch.Tensor):
    if tensor.device.type != "cpu" or engine_choice() == "torch":
        return None
    return numba_kernels()


# --------------------------------------------------------------------------------------------
# numba path
# --------------------------------------------------------------------------------------------


class _TableCache:
    """Least recently used tables of S, bounded in bytes; shared by all threads."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key, make):
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
        entry = make()  # outside the lock: hashing a table takes milliseconds
        size = sum(array.nbytes for array in entry)
        with self._lock:
            if size <= self.max_bytes and key not in self._entries:
                self._entries[key] = entry
                self._bytes += size
                while self._bytes > self.max_bytes:
                    _, evicted = self._entries.popitem(last=False)
                    self._bytes -= sum(array.nbytes for array in evicted)
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


table_cache = _TableCache(TABLE_CACHE_BYTES)


def _table(out_features: int, *, seed: int, nnz: int, column_offset: int, width: int, dtype: torch.dtype):
    """(rows int32, weights) of shape (width, nnz) as numpy arrays: S's nonzeros per column."""

    def make():
        rows, negative = reference.sparse_jl_hash(width, out_features, seed=seed, nnz=nnz, column_offset=column_offset)
        weights = reference._signed_scale(negative, nnz, dtype)
        return (rows.t().to(torch.int32).contiguous().numpy(), weights.t().contiguous().numpy())

    return table_cache.get((seed, out_features, nnz, column_offset, width, dtype), make)


def _forward_table(kernels, out_features: int, *, seed: int, nnz: int, column_offset: int, width: int, dtype):
    """The same nonzeros as the forward kernel takes them (``kernels.forward_table``): by output
    window where the machine permutes and the layout is windowed, else by row."""
    lead = column_offset % spec.WINDOW if spec.is_windowed(out_features, nnz) else None

    def make():
        rows, weights = _table(out_features, seed=seed, nnz=nnz, column_offset=column_offset, width=width, dtype=dtype)
        return kernels.forward_table(rows, weights, out_features, lead)

    return table_cache.get(("forward", kernels.PERMUTES, seed, out_features, nnz, column_offset, width, dtype), make)


def _table_ranges(columns: int):
    """[(start, width)] of the tables covering columns [0, columns), TABLE_COLUMNS at a time.
    Tables are fetched one at a time, so a call holds at most one uncached table per thread."""
    return [(start, min(TABLE_COLUMNS, columns - start)) for start in range(0, columns, TABLE_COLUMNS)]


_pool = None
_pool_lock = threading.Lock()


def _shared_pool() -> DaemonPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = DaemonPool(os.cpu_count() or 1, "sjlt-cpu-engine")
        return _pool


def _run(tasks) -> None:
    """Runs the tasks: in the calling thread if there is one, else on the shared pool."""
    if len(tasks) == 1:
        tasks[0]()
        return
    for future in [_shared_pool().submit(task) for task in tasks]:
        future.result()


def _split(count: int, parts: int, multiple: int = 1):
    """[(start, stop)] of at most ``parts`` near-equal ranges of [0, count), cut at multiples."""
    units = -(-count // multiple)
    parts = max(1, min(parts, units))
    cuts = [min(count, (units * i // parts) * multiple) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


class _Scratch:
    """A task's transposed tiles and, for half-precision data, its float32 staging blocks."""

    def __init__(self, kernels, acc: torch.dtype, tile: int, width: int, out_width: int, staged: bool):
        shard = min(width, kernels.SHARD_COLUMNS)
        self.inner = torch.empty(shard * tile, dtype=acc).numpy()
        self.outer = torch.empty(out_width * tile, dtype=acc).numpy()
        self.spare = torch.empty(16 * kernels.WINDOW_ROWS, dtype=acc).numpy()
        self.staged = staged
        self._blocks = {}

    def block(self, name: str, tensor: torch.Tensor, acc: torch.dtype):
        """tensor as an array the kernels take: a view, or a copy in acc (for half precision, or
        for rows that are not contiguous where the kernel needs them to be)."""
        if not self.staged:
            return tensor.detach().numpy()
        rows, columns = tensor.shape
        buffer = self._blocks.get(name)
        if buffer is None or buffer.numel() < rows * columns:
            buffer = self._blocks[name] = torch.empty(rows * columns, dtype=acc)
        staged = buffer[: rows * columns].view(rows, columns)
        staged.copy_(tensor)
        return staged.numpy()

    def output(self, name: str, rows: int, columns: int, acc: torch.dtype):
        buffer = self._blocks.get(name)
        if buffer is None or buffer.numel() < rows * columns:
            buffer = self._blocks[name] = torch.empty(rows * columns, dtype=acc)
        return buffer[: rows * columns].view(rows, columns)


def _block_rows(tile: int, width: int, staged: bool, rows: int) -> int:
    """Rows per kernel call: all of them, or a staging block's worth for half precision."""
    if not staged:
        return rows
    return max(tile, (_STAGE_ELEMENTS // max(width, 1)) // tile * tile)


def _numba_forward(kernels, x, out_features, *, seed, nnz, column_offset):
    n, d = x.shape
    acc = reference.accumulation_dtype(x.dtype)
    staged = x.dtype != acc
    # The window kernel reads rows contiguously: other strides are copied block by block.
    copied = staged or (x.stride(1) != 1 and kernels.PERMUTES and spec.is_windowed(out_features, nnz))
    tile = kernels.TILE_ROWS
    ranges = _table_ranges(d)
    threads = max(1, torch.get_num_threads())

    def table(column, width):
        return _forward_table(
            kernels, out_features, seed=seed, nnz=nnz, column_offset=column_offset + column, width=width, dtype=acc
        )

    def project(rows, tables, y, accumulate):
        """y[rows] (+)= x[rows] S^T over the columns of ``tables`` [(start, width, forward table)]."""
        scratch = _Scratch(kernels, acc, tile, max(width for _, width, _ in tables), out_features, copied)
        first, last = rows
        step = _block_rows(tile, max(d, out_features), copied, last - first)
        for start in range(first, last, step):
            stop = min(last, start + step)
            # y has x's half dtype only when there is one table, so a staged block never accumulates.
            direct = not staged or y.dtype == acc
            out = y[start:stop] if direct else scratch.output("y", stop - start, out_features, acc)
            for index, (column, width, forward_table) in enumerate(tables):
                block = scratch.block("x", x[start:stop, column : column + width], acc)
                kernels.forward(
                    block,
                    out.numpy(),
                    forward_table,
                    accumulate or index > 0,
                    scratch.inner,
                    scratch.outer,
                    scratch.spare,
                )
            if not direct:
                y[start:stop].copy_(out)

    if n >= _FEW_ROWS or len(ranges) == 1:
        # Threads split the rows; the tables go one after another, each hashed (or fetched) once.
        # Half precision summed over several tables accumulates in float32 and rounds once.
        y = host_empty(n, out_features, acc if staged and len(ranges) > 1 else x.dtype)
        for index, (column, width) in enumerate(ranges):
            tables = [(column, width, table(column, width))]
            _run([lambda rows=rows: project(rows, tables, y, index > 0) for rows in _split(n, threads, tile)])
        return y.to(x.dtype)
    groups = _split(len(ranges), _COLUMN_GROUPS)
    partials = torch.empty(len(groups), n, out_features, dtype=acc)

    def project_groups(first, last):
        for group in range(first, last):
            for index in range(*groups[group]):
                column, width = ranges[index]
                project((0, n), [(column, width, table(column, width))], partials[group], index > groups[group][0])

    _run([lambda share=share: project_groups(*share) for share in _split(len(groups), threads)])
    total = partials[0]
    for partial in partials[1:]:  # in group order, whatever the thread count
        total += partial
    return total.to(x.dtype)


def _numba_transpose(kernels, y, in_features, *, seed, nnz, column_offset):
    n, k = y.shape
    acc = reference.accumulation_dtype(y.dtype)
    staged = y.dtype != acc
    tile = kernels.TILE_ROWS
    ranges = _table_ranges(in_features)
    threads = max(1, torch.get_num_threads())
    z = host_empty(n, in_features, y.dtype)

    def table(column, width):
        return _table(k, seed=seed, nnz=nnz, column_offset=column_offset + column, width=width, dtype=acc)

    def project(rows, column, width, columns_table):
        """z[rows, column:column + width] = y[rows] S over those columns."""
        table_rows, weights = columns_table
        scratch = _Scratch(kernels, acc, tile, width, k, staged)
        first, last = rows
        step = _block_rows(tile, max(width, k), staged, last - first)
        for start in range(first, last, step):
            stop = min(last, start + step)
            block = scratch.block("y", y[start:stop], acc)
            target = z[start:stop, column : column + width]
            out = scratch.output("z", stop - start, width, acc) if staged else target
            kernels.transpose_block(block, out.numpy(), table_rows, weights, scratch.outer, scratch.inner)
            if staged:
                target.copy_(out)

    if n >= _FEW_ROWS or len(ranges) == 1:
        for column, width in ranges:
            columns_table = table(column, width)
            _run([lambda rows=rows: project(rows, column, width, columns_table) for rows in _split(n, threads, tile)])
    else:  # the threads write disjoint columns of z

        def project_ranges(first, last):
            for column, width in ranges[first:last]:
                project((0, n), column, width, table(column, width))

        _run([lambda share=share: project_ranges(*share) for share in _split(len(ranges), threads)])
    return z


# --------------------------------------------------------------------------------------------
# torch path
# --------------------------------------------------------------------------------------------

# Both directions are gathers of whole rows through ``embedding_bag`` (sum mode, signed weights)
# from a transposed row chunk: a row of x^T holds one input column for all samples of the chunk,
# so every gather moves a long contiguous vector. Columns are cut into shards, which bound the hash
# table and the scratch memory (S's columns are hashed independently, so shard results add up),
# and rows into chunks. On CPU (measured on a 2-core EPYC with 1 MiB of L2 per core) chunks of
# 2**18 to 2**20 elements ran fastest, and 8192-column shards kept wide inputs in chunks of tens of
# rows; elsewhere shards and chunks only bound the scratch memory.
_SHARD_COLUMNS = {"cpu": 1 << 13}
_CHUNK_ELEMENTS = {"cpu": 1 << 19}
_OTHER_SHARD_COLUMNS = 1 << 18
_OTHER_CHUNK_ELEMENTS = 1 << 24
_CACHE_LINE_BYTES = 64


def _odd_lines(count: int, dtype: torch.dtype, *, at_least: bool) -> int:
    """``count`` moved to an odd number of cache lines of ``dtype`` elements (the nearest above if
    ``at_least``, else below). Rows whose stride is a multiple of a large power of two compete for
    the same cache sets, which made transposed copies about 3x slower on CPU.
    """
    line = max(1, _CACHE_LINE_BYTES // dtype.itemsize)
    if at_least:
        return count + (line - count) % (2 * line)
    if count < line:
        return count
    return count - (count - line) % (2 * line)


def _tiling(n: int, width: int, other: int, device: torch.device, dtype: torch.dtype):
    """(columns per shard, rows per chunk) for n x width inputs gathered into ``other`` columns."""
    shard = min(width, _SHARD_COLUMNS.get(device.type, _OTHER_SHARD_COLUMNS))
    budget = _CHUNK_ELEMENTS.get(device.type, _OTHER_CHUNK_ELEMENTS)
    rows = _odd_lines(max(1, budget // (shard + other)), dtype, at_least=False)
    return shard, min(n, rows)


class _Transposer:
    """Contiguous transposed copies of row chunks, in reused buffers.

    x is first staged in rows padded to an odd number of cache lines (one copy that also converts
    the dtype and reads any strides); transposing from there runs on all threads, whereas torch
    sends a plain 2-D transpose of contiguous data to a single-threaded kernel, and strided reads
    of x itself collide in the cache when its row stride is a multiple of 4 KiB. Both buffers are
    reused because fresh megabyte-sized allocations page-faulted on every chunk, doubling the time.
    """

    def __init__(self, rows: int, columns: int, dtype: torch.dtype, device: torch.device):
        self._staged = torch.empty(rows, _odd_lines(columns, dtype, at_least=True), dtype=dtype, device=device)
        self._transposed = torch.empty(rows * columns, dtype=dtype, device=device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x^T (x: at most rows x columns) as a contiguous tensor, valid until the next call."""
        rows, columns = x.shape
        staged = self._staged[:rows, :columns]
        staged.copy_(x)
        transposed = self._transposed[: rows * columns].view(columns, rows)
        transposed.copy_(staged.t())
        return transposed


def _write_transposed(out: torch.Tensor, x_t: torch.Tensor, *, accumulate: bool) -> None:
    """out = x_t^T (or out += x_t^T), converting to out's dtype.

    The leading unit dimension keeps copy_ off torch's single-threaded 2-D transpose kernel.
    """
    target, source = out.unsqueeze(0), x_t.t().unsqueeze(0)
    if accumulate:
        target.add_(source)
    else:
        target.copy_(source)


def _forward_bags(in_features, out_features, *, seed, nnz, column_offset, dtype, device):
    """S's rows as bags over input columns: (columns, offsets, weights) for embedding_bag.

    Bag r lists the input columns with a nonzero in output row r, in ascending order; ``weights``
    holds their signed values. Each row lies in exactly one block, so every nonzero is in one bag.
    """
    rows, negative = reference.sparse_jl_hash(
        in_features, out_features, seed=seed, nnz=nnz, column_offset=column_offset, device=device
    )
    order = torch.argsort(rows.reshape(-1), stable=True)  # entry t * in_features + j
    bag_sizes = torch.bincount(rows.reshape(-1), minlength=out_features)
    offsets = torch.cumsum(bag_sizes, 0) - bag_sizes
    weights = reference._signed_scale(negative.reshape(-1)[order], nnz, dtype)
    return order % in_features, offsets, weights


def _torch_forward(x, out_features, *, seed, nnz, column_offset):
    acc = reference.accumulation_dtype(x.dtype)
    n, d = x.shape
    shard, chunk = _tiling(n, d, out_features, x.device, acc)
    transposed_chunk = _Transposer(chunk, shard, acc, x.device)
    y = torch.empty(n, out_features, dtype=acc, device=x.device)
    for start in range(0, d, shard):
        width = min(shard, d - start)
        columns, offsets, weights = _forward_bags(
            width, out_features, seed=seed, nnz=nnz, column_offset=column_offset + start, dtype=acc, device=x.device
        )
        for row in range(0, n, chunk):
            x_t = transposed_chunk(x[row : row + chunk, start : start + width])
            y_t = torch.nn.functional.embedding_bag(columns, x_t, offsets, mode="sum", per_sample_weights=weights)
            _write_transposed(y[row : row + chunk], y_t, accumulate=start > 0)
    return y.to(x.dtype)


def _torch_transpose(y, in_features, *, seed, nnz, column_offset):
    acc = reference.accumulation_dtype(y.dtype)
    n, k = y.shape
    shard, chunk = _tiling(n, in_features, k, y.device, acc)
    transposed_chunk = _Transposer(chunk, k, acc, y.device)
    z = torch.empty(n, in_features, dtype=y.dtype, device=y.device)
    for start in range(0, in_features, shard):
        width = min(shard, in_features - start)
        rows, negative = reference.sparse_jl_hash(
            width, k, seed=seed, nnz=nnz, column_offset=column_offset + start, device=y.device
        )
        # Column j of S is the bag of its nnz rows: one bag per output column, all of size nnz.
        bags = rows.t().contiguous()
        weights = reference._signed_scale(negative.t(), nnz, acc)
        for row in range(0, n, chunk):
            y_t = transposed_chunk(y[row : row + chunk])
            z_t = torch.nn.functional.embedding_bag(bags, y_t, mode="sum", per_sample_weights=weights)
            _write_transposed(z[row : row + chunk, start : start + width], z_t, accumulate=False)
    return z
