"""Numba kernels of the CPU engine (``sjlt.cpu_engine`` imports this module only when numba is
installed, on the first CPU projection).

Both directions work on tiles of ``tile`` rows held transposed in scratch buffers: row r of a
transposed tile holds feature r of all the tile's samples, so every nonzero (t, j) of S becomes one
contiguous multiply-add of ``tile`` elements, the same for the classic and the windowed layout.
The table of S is ``rows`` (int32) and ``weights`` (+-1/sqrt(nnz)), both of shape (columns, nnz).

Offsets into the scratch buffers are uint64 on purpose: numba wraps negative int64 indices, and
that check stopped LLVM from vectorizing the multiply-adds (measured 6x slower, NOTES.md).
``fastmath`` allows only contraction into FMA, so NaN and inf propagate as the spec says.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

#: Rows per transposed tile: one multiply-add per nonzero and tile, TILE_ROWS elements wide.
TILE_ROWS = 32
#: Columns of x transposed at a time: with the tile this bounds the scratch (shard * tile elements).
SHARD_COLUMNS = 1024

_OPTIONS = dict(nogil=True, cache=True, fastmath={"contract"})


def _splat(builder, vector, value):
    lanes = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    mask = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), [0] * vector.count)
    return builder.shuffle_vector(lanes, ir.Constant(vector, ir.Undefined), mask)


def _tile_pointer(builder, data, offset, vector):
    return builder.bitcast(builder.gep(data, [offset], inbounds=True), vector.as_pointer())


@intrinsic
def _gather(typingctx, target, target_offset, source, indices, weights, first, count, accumulate):
    """target[target_offset:][:TILE_ROWS] = (target's tile if accumulate else 0) + the sum over
    p < count of weights[first + p] * source[indices[first + p] * TILE_ROWS:][:TILE_ROWS], summed
    in p order in a register and stored once.

    Both directions are this gather: the forward sums a row of S over its columns (in column
    order), the transpose a column over its rows. As a scatter of each column into its rows the
    forward ran 1.3x slower: two 512-bit stores per nonzero bound it (NOTES.md). A numba loop
    cannot tell that the scratch arrays never overlap, so it re-checked that and re-loaded
    before every update; this is LLVM IR."""
    signature = types.void(target, target_offset, source, indices, weights, first, count, accumulate)

    def codegen(context, builder, sig, args):
        target, target_offset, source, indices, weights, first, count, accumulate = args
        element = context.get_value_type(sig.args[0].dtype)
        vector = ir.VectorType(element, TILE_ROWS)
        alignment = context.get_abi_sizeof(element)  # element-aligned: tiles start anywhere
        target_data = context.make_array(sig.args[0])(context, builder, target).data
        source_data = context.make_array(sig.args[2])(context, builder, source).data
        index_data = context.make_array(sig.args[3])(context, builder, indices).data
        weight_data = context.make_array(sig.args[4])(context, builder, weights).data
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{TILE_ROWS}{element.intrinsic_name}"
        )
        target_pointer = _tile_pointer(builder, target_data, target_offset, vector)
        zero = ir.Constant(vector, [ir.Constant(element, 0.0)] * TILE_ROWS)
        flag = context.cast(builder, accumulate, sig.args[7], types.boolean)
        start = builder.select(flag, builder.load(target_pointer, align=alignment), zero)
        total = cgutils.alloca_once_value(builder, start)
        with cgutils.for_range(builder, count) as loop:
            at = builder.add(first, loop.index)
            index = builder.zext(builder.load(builder.gep(index_data, [at], inbounds=True)), first.type)
            offset = builder.mul(index, ir.Constant(first.type, TILE_ROWS))
            values = builder.load(_tile_pointer(builder, source_data, offset, vector), align=alignment)
            weight = _splat(builder, vector, builder.load(builder.gep(weight_data, [at], inbounds=True)))
            builder.store(builder.call(fma, [values, weight, builder.load(total)]), total)
        builder.store(builder.load(total), target_pointer, align=alignment)
        return context.get_dummy_value()

    return signature, codegen


# An 8 x 8 transposition as the three rounds of shuffles of the classic AVX sequence (unpack,
# shuffle, 128-bit lane permute), written as generic LLVM shuffles so that any target lowers them.
_UNPACK = ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])
_PAIRS = ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])
_HALVES = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])


def _transpose8(builder, vector, alignment, load_pointer, store_pointer) -> None:
    """Stores at store_pointer(j) the column j of the 8 rows loaded at load_pointer(b)."""

    def shuffle(a, b, mask):
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), 8), mask))

    rows = [builder.load(load_pointer(b), align=alignment) for b in range(8)]
    unpacked = [shuffle(rows[2 * i], rows[2 * i + 1], mask) for i in range(4) for mask in _UNPACK]
    paired = [shuffle(unpacked[first], unpacked[first + 2], mask) for first in (0, 1, 4, 5) for mask in _PAIRS]
    columns = [shuffle(paired[i], paired[i + 4], mask) for mask in _HALVES for i in range(4)]
    for j, column in enumerate(columns):
        builder.store(column, store_pointer(j), align=alignment)


def _matrix_row_pointer(context, builder, array_type, array, row, column, vector):
    """Pointer to array[row + i, column:column + 8] as a vector, for a 2-D array whose rows are
    contiguous (the caller checks), whatever its row stride."""
    matrix = context.make_array(array_type)(context, builder, array)
    row_stride = cgutils.unpack_tuple(builder, matrix.strides, 2)[0]
    element_bytes = ir.Constant(row_stride.type, context.get_abi_sizeof(vector.element))
    data = builder.bitcast(matrix.data, ir.IntType(8).as_pointer())

    def pointer(i):
        at = builder.add(
            builder.mul(builder.add(row, ir.Constant(row.type, i)), row_stride), builder.mul(column, element_bytes)
        )
        return builder.bitcast(builder.gep(data, [at], inbounds=True), vector.as_pointer())

    return pointer


@intrinsic
def _load_block8(typingctx, target, target_offset, matrix, row, column):
    """target[target_offset + j * TILE_ROWS + b] = matrix[row + b, column + j] for b, j < 8."""
    signature = types.void(target, target_offset, matrix, row, column)

    def codegen(context, builder, sig, args):
        target, target_offset, matrix, row, column = args
        element = context.get_value_type(sig.args[0].dtype)
        vector = ir.VectorType(element, 8)
        data = context.make_array(sig.args[0])(context, builder, target).data
        load = _matrix_row_pointer(context, builder, sig.args[2], matrix, row, column, vector)

        def store(j):
            offset = builder.add(target_offset, ir.Constant(target_offset.type, j * TILE_ROWS))
            return _tile_pointer(builder, data, offset, vector)

        _transpose8(builder, vector, context.get_abi_sizeof(element), load, store)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def _store_block8(typingctx, matrix, row, column, source, source_offset):
    """matrix[row + b, column + j] = source[source_offset + j * TILE_ROWS + b] for b, j < 8."""
    signature = types.void(matrix, row, column, source, source_offset)

    def codegen(context, builder, sig, args):
        matrix, row, column, source, source_offset = args
        element = context.get_value_type(sig.args[3].dtype)
        vector = ir.VectorType(element, 8)
        data = context.make_array(sig.args[3])(context, builder, source).data
        store = _matrix_row_pointer(context, builder, sig.args[0], matrix, row, column, vector)

        def load(j):
            offset = builder.add(source_offset, ir.Constant(source_offset.type, j * TILE_ROWS))
            return _tile_pointer(builder, data, offset, vector)

        _transpose8(builder, vector, context.get_abi_sizeof(element), load, store)
        return context.get_dummy_value()

    return signature, codegen


# Transposed copies go in blocks of 8 x 8: through shuffles where the matrix's rows are
# contiguous, else element by element (both keep the rows read and the rows written in a few
# cache lines; row by row they ran 4-6x slower, NOTES.md).
_BLOCK = 8


@njit(**_OPTIONS)
def _rows_contiguous(matrix) -> bool:
    return matrix.strides[1] == matrix.itemsize


@njit(**_OPTIONS)
def _load_transposed(source, r0, used, c0, width, target):
    """target[j * TILE_ROWS + b] = source[r0 + b, c0 + j] for b < used, j < width."""
    stride = uint64(TILE_ROWS)
    full_rows = used - used % _BLOCK if _rows_contiguous(source) else 0
    full_columns = width - width % _BLOCK
    for b0 in range(0, full_rows, _BLOCK):
        for j0 in range(0, full_columns, _BLOCK):
            _load_block8(target, uint64(j0) * stride + uint64(b0), source, r0 + b0, c0 + j0)
    for b0 in range(0, used, _BLOCK):
        b1 = min(b0 + _BLOCK, used)
        for j in range(full_columns if b0 < full_rows else 0, width):
            for b in range(b0, b1):
                target[uint64(j) * stride + uint64(b)] = source[r0 + b, c0 + j]


@njit(**_OPTIONS)
def _store_transposed(source, target, r0, used, c0, width, accumulate):
    """target[r0 + b, c0 + j] (+)= source[j * TILE_ROWS + b] for b < used, j < width."""
    stride = uint64(TILE_ROWS)
    full_rows = used - used % _BLOCK if _rows_contiguous(target) and not accumulate else 0
    full_columns = width - width % _BLOCK
    for b0 in range(0, full_rows, _BLOCK):
        for j0 in range(0, full_columns, _BLOCK):
            _store_block8(target, r0 + b0, c0 + j0, source, uint64(j0) * stride + uint64(b0))
    for b0 in range(0, used, _BLOCK):
        b1 = min(b0 + _BLOCK, used)
        for j in range(full_columns if b0 < full_rows else 0, width):
            line = uint64(j) * stride
            if accumulate:
                for b in range(b0, b1):
                    target[r0 + b, c0 + j] += source[line + uint64(b)]
            else:
                for b in range(b0, b1):
                    target[r0 + b, c0 + j] = source[line + uint64(b)]


@njit(**_OPTIONS)
def forward_block(x, y, starts, columns, weights, accumulate, x_t, y_t):
    """y (+)= x S_block^T for x (m, w) of any strides and y (m, k); S_block given by its rows:
    for shard s of SHARD_COLUMNS columns and row r, entries starts[s, r] to starts[s, r + 1] of
    ``columns`` (within the shard, ascending) and ``weights`` (see ``row_lists``).

    x_t holds at least min(w, SHARD_COLUMNS) * tile elements, y_t k * tile, of y's dtype.
    """
    m, w = x.shape
    k = y.shape[1]
    tile = TILE_ROWS
    stride = uint64(tile)
    for r0 in range(0, m, tile):
        used = min(tile, m - r0)
        if used < tile:
            x_t[:] = 0  # lanes past the last row stay finite; their outputs are never written
        for shard, s0 in enumerate(range(0, w, SHARD_COLUMNS)):
            _load_transposed(x, r0, used, s0, min(SHARD_COLUMNS, w - s0), x_t)
            for r in range(k):
                first = starts[shard, r]
                _gather(
                    y_t,
                    uint64(r) * stride,
                    x_t,
                    columns,
                    weights,
                    uint64(first),
                    uint64(starts[shard, r + 1] - first),
                    shard > 0,
                )
        _store_transposed(y_t, y, r0, used, 0, k, accumulate)


@njit(**_OPTIONS)
def transpose_block(y, z, rows, weights, y_t, z_t):
    """z = y S_block for y (m, k) of any strides and z (m, w); S_block given by its table.

    y_t holds at least k * tile elements, z_t min(w, SHARD_COLUMNS) * tile, of z's dtype.
    """
    m, k = y.shape
    w = z.shape[1]
    nnz = rows.shape[1]
    flat_rows, flat_weights = rows.ravel(), weights.ravel()
    tile = TILE_ROWS
    stride = uint64(tile)
    for r0 in range(0, m, tile):
        used = min(tile, m - r0)
        if used < tile:
            y_t[:] = 0
        _load_transposed(y, r0, used, 0, k, y_t)
        for s0 in range(0, w, SHARD_COLUMNS):
            width = min(SHARD_COLUMNS, w - s0)
            for j in range(width):
                first = uint64((s0 + j) * nnz)
                _gather(z_t, uint64(j) * stride, y_t, flat_rows, flat_weights, first, uint64(nnz), False)
            _store_transposed(z_t, z, r0, used, s0, width, False)


def row_lists(rows: np.ndarray, weights: np.ndarray, out_features: int):
    """S_block's nonzeros by row, the table of :func:`forward_block`, from its table by column
    (``rows``, ``weights`` of shape (w, nnz)): (starts (shards, k + 1) int64, columns int32 within
    their shard, weights). A row's columns stay in ascending order (a stable sort of the
    column-major entries), which is the order the forward has always summed them in."""
    width, nnz = rows.shape
    shards = -(-width // SHARD_COLUMNS)
    starts = np.empty((shards, out_features + 1), dtype=np.int64)
    columns = np.empty(width * nnz, dtype=np.int32)
    by_row = np.empty(width * nnz, dtype=weights.dtype)
    done = 0
    for shard in range(shards):
        block = slice(shard * SHARD_COLUMNS, min(width, (shard + 1) * SHARD_COLUMNS))
        shard_rows = rows[block].ravel()
        order = np.argsort(shard_rows, kind="stable")
        count = len(order)
        starts[shard, 0] = done
        starts[shard, 1:] = done + np.cumsum(np.bincount(shard_rows, minlength=out_features))
        columns[done : done + count] = order // nnz
        by_row[done : done + count] = weights[block].ravel()[order]
        done += count
    return starts, columns, by_row


def compile_check() -> None:
    """Compiles (or loads from numba's cache) and runs both kernels on a tiny float32 input, so that
    an incompatible numba fails here, once, rather than inside a projection."""
    x = np.ones((3, 5), dtype=np.float32)
    rows = np.zeros((5, 1), dtype=np.int32)
    weights = np.ones((5, 1), dtype=np.float32)
    y = np.empty((3, 2), dtype=np.float32)
    starts, columns, by_row = row_lists(rows, weights, 2)
    forward_block(
        x, y, starts, columns, by_row, False, np.empty(5 * TILE_ROWS, np.float32), np.empty(2 * TILE_ROWS, np.float32)
    )
    z = np.empty((3, 5), dtype=np.float32)
    transpose_block(y, z, rows, weights, np.empty(2 * TILE_ROWS, np.float32), np.empty(5 * TILE_ROWS, np.float32))
    if not (np.all(y[:, 0] == 5) and np.all(y[:, 1] == 0) and np.all(z == 5)):
        raise RuntimeError("the numba kernels compiled but computed a wrong result")
