"""Numba kernels of the CPU engine (``sjlt.cpu_engine`` imports this module only when numba is
installed, on the first CPU projection).

Both directions work on tiles of ``tile`` rows held transposed in scratch buffers: row r of a
transposed tile holds feature r of all the tile's samples, so every nonzero (t, j) of S becomes one
contiguous multiply-add of ``tile`` elements, the same for the classic and the windowed layout.
The table of S is ``rows`` (int32) and ``weights`` (+-1/sqrt(nnz)), both of shape (columns, nnz).

On x86-64 CPUs with full-width AVX-512 (``PERMUTES``: not Zen 4) the windowed layout's forward
takes ``forward_windows`` instead: each chunk of 16 columns lands on one 16-row window through a
XOR permutation, so a window of y is a sum of permuted chunks of x (one vpermps and one
multiply-add each), read in place, without the transposed tiles. Where columns fall outside that
pattern (rows folded off the lattice, chunks cut by a column offset) they are added last, so
results there may differ in the last bits between CPUs that take it and CPUs that do not (never
between thread counts).

Offsets into the scratch buffers are uint64 on purpose: numba wraps negative int64 indices, and
that check stopped LLVM from vectorizing the multiply-adds (measured 6x slower, NOTES.md).
``fastmath`` allows only contraction into FMA, so NaN and inf propagate as the spec says.
"""

from __future__ import annotations

import platform
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import binding as llvm
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


class RowTable(NamedTuple):
    """S_block's nonzeros by row, the table of :func:`forward_block`."""

    starts: np.ndarray
    columns: np.ndarray
    weights: np.ndarray


def row_lists(rows: np.ndarray, weights: np.ndarray, out_features: int) -> RowTable:
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
    return RowTable(starts, columns, by_row)


# --------------------------------------------------------------------------------------------
# The windowed layout's forward by permutes (x86-64 with AVX-512)
# --------------------------------------------------------------------------------------------
#
# In the windowed layout the 16 columns of chunk c land, in block t, on the 16 rows of one window,
# column lane l on row 16 w + (l XOR m). So an output window is a sum over its (chunk, block)
# entries of the chunk permuted by m, times the 16 signs: one vpermps and one masked multiply-add
# per entry and row, read straight from x's rows and summed in a register. No transposed copies,
# and each window of y is stored once (NOTES.md, "Numpy paths": the windowed forward by permutes).
# LLVM IR has no variable shuffle, so this needs the x86 intrinsic; elsewhere the forward runs
# ``forward_block``.

#: Rows of x summed together per entry: each entry's permute index and signs are decoded once for
#: them, and WINDOW_ROWS rows of a 1024-column shard stay in L1.
WINDOW_ROWS = 8
#: Chunks of 16 columns per shard: a window's entries are summed shard by shard.
SHARD_CHUNKS = SHARD_COLUMNS // 16

# An entry (uint64): bits 0-23 the chunk within the table, 24-27 the XOR mask m, 28-31 a rotation
# r, 32-47 the output lanes o it adds to, 48-63 the output lanes it negates. Output lane o takes
# the chunk's lane ((o + r) mod 16) XOR m: r is 0 except where rows fold across a window cut at k,
# which shifts them by k mod 16 (the spec's row = 16 w_t + (u mod size_t)). Rotated entries, and
# those of the chunks that the table's ends cut (read with masked loads), are summed by a kernel of
# their own, so that the others pay nothing for the rotation or the masks.
_CHUNK_BITS = 24
_MASK_SHIFT = 24
_ROTATION_SHIFT = 28
_VALID_SHIFT = 32
_SIGN_SHIFT = 48


def _window_sum_intrinsic(rows: int, masked: bool):
    @intrinsic
    def window_sum(
        typingctx, y, y_offset, y_pitch, x, x_offset, x_pitch, entries, first, count, scale, accumulate, begin, end
    ):
        """For b < rows: y[y_offset + b y_pitch:][:16] = (that window if accumulate else 0) + the sum
        over p < count of the chunk of entries[first + p], permuted and signed, from row b of x
        (x_offset + b x_pitch + 16 chunk). Lanes outside an entry's valid mask keep their sum, so a
        NaN there cannot leak into them. ``masked``: entries are rotated, and a chunk's lanes l are
        loaded only where 16 chunk + l is in [begin, end) (the others read as 0)."""
        signature = types.void(
            y, y_offset, y_pitch, x, x_offset, x_pitch, entries, first, count, scale, accumulate, begin, end
        )

        def codegen(context, builder, sig, args):
            y, y_offset, y_pitch, x, x_offset, x_pitch, entries, first, count, scale, accumulate, begin, end = args
            element = context.get_value_type(sig.args[0].dtype)
            alignment = context.get_abi_sizeof(element)
            i64 = ir.IntType(64)
            halves = 1 if alignment == 4 else 2  # float64: 16 lanes in two vectors of 8
            width = 16 // halves
            vector = ir.VectorType(element, width)
            index_type = ir.VectorType(ir.IntType(32 if halves == 1 else 64), width)
            bits = ir.VectorType(ir.IntType(1), width)
            if halves == 1:
                permute = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(vector, [vector, index_type]), "llvm.x86.avx512.permvar.sf.512"
                )
            else:
                permute = cgutils.get_or_insert_function(
                    builder.module,
                    ir.FunctionType(vector, [vector, index_type, vector]),
                    "llvm.x86.avx512.vpermi2var.pd.512",
                )
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{width}{element.intrinsic_name}"
            )
            if masked:
                masked_load = cgutils.get_or_insert_function(
                    builder.module,
                    ir.FunctionType(vector, [vector.as_pointer(), ir.IntType(32), bits, vector]),
                    f"llvm.masked.load.v{width}{element.intrinsic_name}.p0",
                )
            y_data = context.make_array(sig.args[0])(context, builder, y).data
            x_data = context.make_array(sig.args[3])(context, builder, x).data
            entry_data = context.make_array(sig.args[6])(context, builder, entries).data

            def pointer(data, offset):
                return builder.bitcast(builder.gep(data, [offset], inbounds=True), vector.as_pointer())

            def lane_bits(word, shift, half):
                field = builder.lshr(word, ir.Constant(i64, shift + width * half))
                return builder.bitcast(builder.trunc(field, ir.IntType(width)), bits)

            positive = _splat(builder, vector, scale)
            negative = builder.fneg(positive)
            zero = ir.Constant(vector, [ir.Constant(element, 0.0)] * width)
            flag = context.cast(builder, accumulate, sig.args[10], types.boolean)
            targets = [
                [
                    pointer(
                        y_data,
                        builder.add(
                            builder.add(y_offset, builder.mul(y_pitch, ir.Constant(i64, b))),
                            ir.Constant(i64, width * h),
                        ),
                    )
                    for h in range(halves)
                ]
                for b in range(rows)
            ]
            sums = [[cgutils.alloca_once_value(builder, zero) for _ in range(halves)] for _ in range(rows)]
            with builder.if_then(flag):  # a branch, not a select: y is read only to accumulate
                for b in range(rows):
                    for h in range(halves):
                        builder.store(builder.load(targets[b][h], align=alignment), sums[b][h])
            lanes = [ir.Constant(index_type, [width * h + i for i in range(width)]) for h in range(halves)]
            with cgutils.for_range(builder, count) as loop:
                word = builder.load(builder.gep(entry_data, [builder.add(first, loop.index)], inbounds=True))
                chunk = builder.and_(word, ir.Constant(i64, (1 << _CHUNK_BITS) - 1))
                column = builder.mul(chunk, ir.Constant(i64, 16))
                mask = builder.and_(builder.lshr(word, ir.Constant(i64, _MASK_SHIFT)), ir.Constant(i64, 15))
                mask = _splat(builder, index_type, builder.trunc(mask, index_type.element))
                if masked:
                    rotation = builder.lshr(word, ir.Constant(i64, _ROTATION_SHIFT))
                    rotation = builder.and_(rotation, ir.Constant(i64, 15))
                    rotation = _splat(builder, index_type, builder.trunc(rotation, index_type.element))
                    fifteen = _splat(builder, index_type, ir.Constant(index_type.element, 15))
                    indices = [builder.xor(builder.and_(builder.add(lane, rotation), fifteen), mask) for lane in lanes]
                    low = _splat(builder, index_type, builder.trunc(builder.sub(begin, column), index_type.element))
                    high = _splat(builder, index_type, builder.trunc(builder.sub(end, column), index_type.element))
                    present = [
                        builder.and_(builder.icmp_signed(">=", lane, low), builder.icmp_signed("<", lane, high))
                        for lane in lanes
                    ]
                else:
                    indices = [builder.xor(lane, mask) for lane in lanes]
                signed = [builder.select(lane_bits(word, _SIGN_SHIFT, h), negative, positive) for h in range(halves)]
                valid = [lane_bits(word, _VALID_SHIFT, h) for h in range(halves)]
                for b in range(rows):
                    row = builder.add(builder.add(x_offset, builder.mul(x_pitch, ir.Constant(i64, b))), column)
                    sources = [pointer(x_data, builder.add(row, ir.Constant(i64, width * h))) for h in range(halves)]
                    if masked:
                        alignment_argument = ir.Constant(ir.IntType(32), alignment)
                        values = [
                            builder.call(masked_load, [sources[h], alignment_argument, present[h], zero])
                            for h in range(halves)
                        ]
                    else:
                        values = [builder.load(source, align=alignment) for source in sources]
                    for h in range(halves):
                        if halves == 1:
                            permuted = builder.call(permute, [values[0], indices[0]])
                        else:
                            permuted = builder.call(permute, [values[0], indices[h], values[1]])
                        total = builder.load(sums[b][h])
                        summed = builder.call(fma, [permuted, signed[h], total])
                        builder.store(builder.select(valid[h], summed, total), sums[b][h])
            for b in range(rows):
                for h in range(halves):
                    builder.store(builder.load(sums[b][h]), targets[b][h], align=alignment)
            return context.get_dummy_value()

        return signature, codegen

    return window_sum


_window_sum_rows = _window_sum_intrinsic(WINDOW_ROWS, masked=False)
_window_sum_row = _window_sum_intrinsic(1, masked=False)
_masked_sum_rows = _window_sum_intrinsic(WINDOW_ROWS, masked=True)
_masked_sum_row = _window_sum_intrinsic(1, masked=True)


@njit(**_OPTIONS)
def _sum_windows(y, y_offset, y_pitch, rows, x, x_offset, x_pitch, entries, first, count, scale, accumulate):
    none = np.int64(0)  # the unmasked kernel reads no bounds
    if rows == WINDOW_ROWS:
        _window_sum_rows(
            y, y_offset, y_pitch, x, x_offset, x_pitch, entries, first, count, scale, accumulate, none, none
        )
    else:
        for b in range(rows):
            row_y, row_x = y_offset + b * y_pitch, x_offset + b * x_pitch
            _window_sum_row(y, row_y, y_pitch, x, row_x, x_pitch, entries, first, count, scale, accumulate, none, none)


@njit(**_OPTIONS)
def _add_masked(y, y_offset, y_pitch, rows, x, x_offset, x_pitch, entries, first, count, scale, begin, end):
    """_sum_windows for the entries read by the masked kernel, always adding. Apart from the
    windows' loop: a second kernel there made every call 1.2-1.7x slower at k >= 1024 (NOTES.md,
    "Off-16 k in the permute forward")."""
    if rows == WINDOW_ROWS:
        _masked_sum_rows(y, y_offset, y_pitch, x, x_offset, x_pitch, entries, first, count, scale, True, begin, end)
    else:
        for b in range(rows):
            row_y, row_x = y_offset + b * y_pitch, x_offset + b * x_pitch
            _masked_sum_row(y, row_y, y_pitch, x, row_x, x_pitch, entries, first, count, scale, True, begin, end)


@njit(**_OPTIONS, inline="always")
def _copy_cut_window(y, r0, rows, spare, to_spare):
    """y's last window (k not a multiple of 16) for rows r0 + b, to or from spare's rows of 16."""
    whole = y.shape[1] // 16
    for b in range(rows):
        for lane in range(y.shape[1] - 16 * whole):
            if to_spare:
                spare[b * 16 + lane] = y[r0 + b, 16 * whole + lane]
            else:
                y[r0 + b, 16 * whole + lane] = spare[b * 16 + lane]


@njit(**_OPTIONS)
def forward_windows(x, y, starts, masked_from, entries, scale, lead, accumulate, spare):
    """y (+)= x S_block^T for x (m, w) and y (m, k), both with contiguous rows, S_block windowed
    and given by ``window_lists``: per shard and output window, entries[starts[shard, window]:
    starts[shard, window + 1]], those from masked_from[shard, window] on through the masked
    kernel after every window's others. Chunk c starts at column 16 c - lead of x. ``spare`` holds
    WINDOW_ROWS * 16 elements: the last window of y when k is not a multiple of 16."""
    m, w = x.shape
    k = y.shape[1]
    x_pitch = np.int64(x.strides[0] // x.itemsize)
    y_pitch = np.int64(y.strides[0] // y.itemsize)
    whole = k // 16
    windows = starts.shape[1] - 1
    begin, end = np.int64(lead), np.int64(lead + w)  # x's columns, as 16 chunk + lane
    masked_windows = (starts[:, 1:] > masked_from).sum(axis=1)  # per shard
    for r0 in range(0, m, WINDOW_ROWS):
        rows = min(WINDOW_ROWS, m - r0)
        x_offset = np.int64(r0) * x_pitch - lead
        for shard in range(starts.shape[0]):
            added = accumulate or shard > 0
            for window in range(windows):
                first = starts[shard, window]
                count = masked_from[shard, window] - first
                if count == 0 and added:
                    continue
                if window < whole:
                    y_offset = np.int64(r0) * y_pitch + 16 * window
                    _sum_windows(y, y_offset, y_pitch, rows, x, x_offset, x_pitch, entries, first, count, scale, added)
                    continue
                if added:  # the last window, summed in spare
                    _copy_cut_window(y, r0, rows, spare, True)
                _sum_windows(
                    spare, np.int64(0), np.int64(16), rows, x, x_offset, x_pitch, entries, first, count, scale, added
                )
                _copy_cut_window(y, r0, rows, spare, False)
            for window in range(windows if masked_windows[shard] else 0):
                first = masked_from[shard, window]
                count = starts[shard, window + 1] - first
                if count == 0:
                    continue
                if window < whole:
                    y_offset = np.int64(r0) * y_pitch + 16 * window
                    _add_masked(
                        y, y_offset, y_pitch, rows, x, x_offset, x_pitch, entries, first, count, scale, begin, end
                    )
                    continue
                _copy_cut_window(y, r0, rows, spare, True)
                _add_masked(
                    spare,
                    np.int64(0),
                    np.int64(16),
                    rows,
                    x,
                    x_offset,
                    x_pitch,
                    entries,
                    first,
                    count,
                    scale,
                    begin,
                    end,
                )
                _copy_cut_window(y, r0, rows, spare, False)


class WindowTable(NamedTuple):
    """S_block's (chunk, block) entries by output window, the table of :func:`forward_windows`."""

    starts: np.ndarray
    masked_from: np.ndarray
    entries: np.ndarray
    scale: np.floating
    lead: np.int64


def window_lists(rows: np.ndarray, weights: np.ndarray, out_features: int, lead: int) -> WindowTable:
    """The table of :func:`forward_windows` from S_block's table by column (``rows``, ``weights``
    of shape (w, nnz), windowed, column j at lane (j + lead) mod 16 of chunk (j + lead) div 16):
    a :class:`WindowTable`.

    A (chunk, block) pair's lanes land on rows 16 q + o with o = ((l XOR m) - r) mod 16 for its
    mask m and a rotation r: 0, or k mod 16 for the lanes folded across the window cut at k (the
    spec's fold, docs/spec.md 2b). The lanes of one (q, r) make one entry: one per pair on the
    lattice, two where a pair's lanes fold across the cut. Within a window the entries are in chunk
    order, those for the masked kernel (rotated, or of a chunk the table's ends cut) last, so on the
    lattice each output sums its columns in ascending order, as the tile kernel does."""
    width, nnz = rows.shape
    chunks = -(-(width + lead) // 16)
    if chunks >= 1 << _CHUNK_BITS:
        raise ValueError(f"a table of {width} columns has more chunks than an entry holds (2**{_CHUNK_BITS})")
    padded = np.full((chunks * 16, nnz), -1, dtype=np.int64)
    padded[lead : lead + width] = rows
    padded = padded.reshape(chunks, 16, nnz)
    padded_weights = np.zeros((chunks * 16, nnz), dtype=weights.dtype)
    padded_weights[lead : lead + width] = weights
    padded_weights = padded_weights.reshape(chunks, 16, nnz)
    present = padded >= 0  # lanes of the table's columns
    whole = present.all(axis=(1, 2))
    lane = np.arange(16)[None, :, None]
    cut = out_features % 16
    rotations = np.array([0, cut] if cut else [0], dtype=np.int64)
    # each lane's mask under each rotation (16: no lane); the pair's mask is the one all its lanes
    # agree with under some rotation, and of those the one most lanes agree with unrotated (at
    # k mod 16 = 8, mask m unrotated and m XOR 8 rotated describe the same lanes: the first is
    # the faster kernel)
    masks = np.where(present[..., None], ((padded[..., None] % 16 + rotations) % 16) ^ lane[..., None], 16)
    pair = np.arange(chunks * nnz).reshape(chunks, 1, nnz, 1)
    agree = np.bincount((pair * 17 + masks).ravel(), minlength=chunks * nnz * 17).reshape(chunks, nnz, 17)
    unrotated = np.bincount((pair * 17 + masks[..., :1]).ravel(), minlength=chunks * nnz * 17)
    score = 32 * agree + unrotated.reshape(chunks, nnz, 17)
    mask = score[..., :16].argmax(axis=2)  # (chunks, nnz)
    matches = masks == mask[:, None, :, None]
    follows = matches.any(axis=3)
    if not np.array_equal(follows, present):
        raise AssertionError("sjlt bug: a column of S is off the windowed layout's pattern (docs/spec.md 2b)")
    rotation_index = matches.argmax(axis=3)  # the first rotation that fits: 0 before k mod 16
    chunk_of, lane_of, block_of = np.nonzero(follows)
    row_of = padded[chunk_of, lane_of, block_of]
    window_of = row_of // 16
    rotation_of = rotations[rotation_index[chunk_of, lane_of, block_of]]
    lane_bit = np.uint64(1) << (row_of % 16).astype(np.uint64)
    negative = padded_weights[chunk_of, lane_of, block_of] < 0
    # one entry per (chunk, block, rotation, window): its lanes' bits summed (they are distinct)
    windows = -(-out_features // 16)
    pair_key = ((chunk_of * nnz + block_of) * len(rotations) + rotation_index[chunk_of, lane_of, block_of]) * windows
    keys, first_lane, entry_of = np.unique(pair_key + window_of, return_index=True, return_inverse=True)
    valid_bits = np.zeros(len(keys), dtype=np.uint64)
    sign_bits = np.zeros(len(keys), dtype=np.uint64)
    np.add.at(valid_bits, entry_of, lane_bit)
    np.add.at(sign_bits, entry_of[negative], lane_bit[negative])
    entry_chunk = chunk_of[first_lane]
    entry_window = window_of[first_lane]
    word = (
        entry_chunk.astype(np.uint64)
        | (mask[entry_chunk, block_of[first_lane]].astype(np.uint64) << np.uint64(_MASK_SHIFT))
        | (rotation_of[first_lane].astype(np.uint64) << np.uint64(_ROTATION_SHIFT))
        | (valid_bits << np.uint64(_VALID_SHIFT))
        | (sign_bits << np.uint64(_SIGN_SHIFT))
    )
    shard_of = entry_chunk // SHARD_CHUNKS
    masked = (rotation_of[first_lane] != 0) | ~whole[entry_chunk]
    order = np.lexsort((keys, masked, entry_window, shard_of))  # keys: chunk first, then block
    shards = max(1, -(-chunks // SHARD_CHUNKS))
    slot = shard_of * windows + entry_window
    counts = np.bincount(slot, minlength=shards * windows).reshape(shards, windows)
    starts = np.zeros((shards, windows + 1), dtype=np.int64)
    starts[:, 1:] = np.cumsum(counts, axis=1)
    starts += np.concatenate(([0], np.cumsum(counts.sum(axis=1))[:-1]))[:, None]
    unmasked = np.bincount(slot[~masked], minlength=shards * windows).reshape(shards, windows)
    scale = np.abs(weights.flat[0]) if weights.size else weights.dtype.type(0)
    return WindowTable(starts, starts[:, :-1] + unmasked, word[order], weights.dtype.type(scale), np.int64(lead))


def _host_cpu() -> str:
    """The CPU numba compiles for: NUMBA_CPU_NAME where set (other than "host"), else this one."""
    name = numba.config.CPU_NAME
    return name if name and name != "host" else llvm.get_host_cpu_name()


def _host_avx512() -> bool:
    """Whether numba compiles for an x86-64 CPU with AVX-512F, which ``forward_windows`` needs.
    Checked up front: LLVM aborts the process, rather than raising, on an intrinsic its target
    lacks. A CPU named through NUMBA_CPU_NAME counts only with +avx512f in NUMBA_CPU_FEATURES."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if numba.config.CPU_NAME or numba.config.CPU_FEATURES:
        return "+avx512f" in (numba.config.CPU_FEATURES or "").split(",")
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


#: Whether this machine can run ``forward_windows``.
CAN_PERMUTE = _host_avx512()
#: CPUs that split each 512-bit permute into two 256-bit halves: there the tile kernel was faster
#: at k >= 256 (Zen 4: windows 0.75-0.94x the tiles' speed; Zen 5 1.1-1.8x, Emerald Rapids
#: 1.3-2.1x; NOTES.md, "Numpy paths").
HALF_WIDTH_PERMUTES = frozenset({"znver4"})


def _prefers_permutes() -> bool:
    """Whether ``forward_windows`` should serve this machine's windowed forwards: it can run them,
    at full width."""
    return _host_avx512() and _host_cpu() not in HALF_WIDTH_PERMUTES


#: Whether windowed forwards take ``forward_windows`` on this machine.
PERMUTES = _prefers_permutes()


def forward_table(rows: np.ndarray, weights: np.ndarray, out_features: int, lead: int | None):
    """The forward's table of S_block from its table by column: window lists where this machine
    permutes and the layout is windowed (``lead``, the first column's lane, given), else row lists."""
    if PERMUTES and lead is not None:
        return window_lists(rows, weights, out_features, lead)
    return row_lists(rows, weights, out_features)


def forward(x, y, table, accumulate: bool, x_t, y_t, spare) -> None:
    """y (+)= x S_block^T with the kernel of ``table`` (``forward_table``); a window table needs
    the rows of x and y contiguous."""
    if isinstance(table, WindowTable):
        forward_windows(x, y, *table, accumulate, spare)
    else:
        forward_block(x, y, *table, accumulate, x_t, y_t)


def compile_check() -> None:
    """Compiles (or loads from numba's cache) and runs the kernels on a tiny float32 input, so that
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
    ok = np.all(y[:, 0] == 5) and np.all(y[:, 1] == 0) and np.all(z == 5)
    if PERMUTES:  # two chunks onto one window, lane l on row l ^ 3, the second negated
        lanes = np.arange(32)
        table = window_lists(
            (lanes % 16 ^ 3)[:, None].astype(np.int32),
            np.where(lanes < 16, 1.0, -1.0).astype(np.float32)[:, None],
            16,
            0,
        )
        x = np.arange(3 * 32, dtype=np.float32).reshape(3, 32)
        y = np.empty((3, 16), dtype=np.float32)
        forward_windows(x, y, *table, False, np.empty(16 * WINDOW_ROWS, np.float32))
        ok = ok and np.array_equal(y, x[:, :16][:, np.arange(16) ^ 3] - x[:, 16:][:, np.arange(16) ^ 3])
    if not ok:
        raise RuntimeError("the numba kernels compiled but computed a wrong result")
