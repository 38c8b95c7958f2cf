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


@intrinsic
def _tile_axpy(typingctx, target, target_offset, source, source_offset, weight):
    """target[target_offset:][:TILE_ROWS] += weight * source[source_offset:][:TILE_ROWS], as one
    vector multiply-add in LLVM IR. A numba loop did the same about 1.5x slower: it cannot tell
    that the two scratch arrays never overlap, so it re-checked that before every update."""
    signature = types.void(target, target_offset, source, source_offset, weight)

    def codegen(context, builder, sig, args):
        target, target_offset, source, source_offset, weight = args
        element = context.get_value_type(sig.args[0].dtype)
        vector = ir.VectorType(element, TILE_ROWS)
        target_data = context.make_array(sig.args[0])(context, builder, target).data
        source_data = context.make_array(sig.args[2])(context, builder, source).data
        target_pointer = builder.bitcast(builder.gep(target_data, [target_offset], inbounds=True), vector.as_pointer())
        source_pointer = builder.bitcast(builder.gep(source_data, [source_offset], inbounds=True), vector.as_pointer())
        alignment = context.get_abi_sizeof(element)  # element-aligned: tiles start anywhere
        accumulated = builder.load(target_pointer, align=alignment)
        values = builder.load(source_pointer, align=alignment)
        lanes = builder.insert_element(ir.Constant(vector, ir.Undefined), weight, ir.Constant(ir.IntType(32), 0))
        lanes = builder.shuffle_vector(
            lanes,
            ir.Constant(vector, ir.Undefined),
            ir.Constant(ir.VectorType(ir.IntType(32), TILE_ROWS), [0] * TILE_ROWS),
        )
        name = f"llvm.fma.v{TILE_ROWS}{element.intrinsic_name}"
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3), name)
        builder.store(builder.call(fma, [values, lanes, accumulated]), target_pointer, align=alignment)
        return context.get_dummy_value()

    return signature, codegen


# Transposed copies go in blocks of 8 rows x 16 columns, so that both the rows read and the
# transposed rows written stay in a few cache lines; row by row they ran 4-6x slower (NOTES.md).
_BLOCK_ROWS = 8
_BLOCK_COLUMNS = 16


@njit(**_OPTIONS)
def _load_transposed(source, r0, used, c0, width, target, stride):
    """target[j * stride + b] = source[r0 + b, c0 + j] for b < used, j < width."""
    for b0 in range(0, used, _BLOCK_ROWS):
        b1 = min(b0 + _BLOCK_ROWS, used)
        for j0 in range(0, width, _BLOCK_COLUMNS):
            for j in range(j0, min(j0 + _BLOCK_COLUMNS, width)):
                line = uint64(j) * stride
                if b1 - b0 == _BLOCK_ROWS:  # full blocks get a constant trip count (unrolled)
                    for b in range(_BLOCK_ROWS):
                        target[line + uint64(b0 + b)] = source[r0 + b0 + b, c0 + j]
                else:
                    for b in range(b0, b1):
                        target[line + uint64(b)] = source[r0 + b, c0 + j]


@njit(**_OPTIONS)
def _store_transposed(source, stride, target, r0, used, c0, width, accumulate):
    """target[r0 + b, c0 + j] (+)= source[j * stride + b] for b < used, j < width."""
    for b0 in range(0, used, _BLOCK_ROWS):
        b1 = min(b0 + _BLOCK_ROWS, used)
        for j0 in range(0, width, _BLOCK_COLUMNS):
            for j in range(j0, min(j0 + _BLOCK_COLUMNS, width)):
                line = uint64(j) * stride
                if accumulate:
                    for b in range(b0, b1):
                        target[r0 + b, c0 + j] += source[line + uint64(b)]
                elif b1 - b0 == _BLOCK_ROWS:
                    for b in range(_BLOCK_ROWS):
                        target[r0 + b0 + b, c0 + j] = source[line + uint64(b0 + b)]
                else:
                    for b in range(b0, b1):
                        target[r0 + b, c0 + j] = source[line + uint64(b)]


@njit(**_OPTIONS)
def forward_block(x, y, rows, weights, accumulate, x_t, y_t):
    """y (+)= x S_block^T for x (m, w) of any strides and y (m, k); S_block given by its table.

    x_t holds at least min(w, SHARD_COLUMNS) * tile elements, y_t k * tile, of y's dtype.
    """
    m, w = x.shape
    k = y.shape[1]
    nnz = rows.shape[1]
    tile = TILE_ROWS
    stride = uint64(tile)
    for r0 in range(0, m, tile):
        used = min(tile, m - r0)
        y_t[: k * tile] = 0
        if used < tile:
            x_t[:] = 0  # lanes past the last row stay finite; their outputs are never written
        for s0 in range(0, w, SHARD_COLUMNS):
            width = min(SHARD_COLUMNS, w - s0)
            _load_transposed(x, r0, used, s0, width, x_t, stride)
            for j in range(width):
                source = uint64(j) * stride
                for t in range(nnz):
                    _tile_axpy(y_t, uint64(rows[s0 + j, t]) * stride, x_t, source, weights[s0 + j, t])
        _store_transposed(y_t, stride, y, r0, used, 0, k, accumulate)


@njit(**_OPTIONS)
def transpose_block(y, z, rows, weights, y_t, z_t):
    """z = y S_block for y (m, k) of any strides and z (m, w); S_block given by its table.

    y_t holds at least k * tile elements, z_t min(w, SHARD_COLUMNS) * tile, of z's dtype.
    """
    m, k = y.shape
    w = z.shape[1]
    nnz = rows.shape[1]
    tile = TILE_ROWS
    stride = uint64(tile)
    for r0 in range(0, m, tile):
        used = min(tile, m - r0)
        if used < tile:
            y_t[:] = 0
        _load_transposed(y, r0, used, 0, k, y_t, stride)
        for s0 in range(0, w, SHARD_COLUMNS):
            width = min(SHARD_COLUMNS, w - s0)
            for j in range(width):
                target = uint64(j) * stride
                for lane in range(stride):
                    z_t[target + lane] = 0
                for t in range(nnz):
                    _tile_axpy(z_t, target, y_t, uint64(rows[s0 + j, t]) * stride, weights[s0 + j, t])
            _store_transposed(z_t, stride, z, r0, used, s0, width, False)


def compile_check() -> None:
    """Compiles (or loads from numba's cache) and runs both kernels on a tiny float32 input, so that
    an incompatible numba fails here, once, rather than inside a projection."""
    x = np.ones((3, 5), dtype=np.float32)
    rows = np.zeros((5, 1), dtype=np.int32)
    weights = np.ones((5, 1), dtype=np.float32)
    y = np.empty((3, 2), dtype=np.float32)
    forward_block(x, y, rows, weights, False, np.empty(5 * TILE_ROWS, np.float32), np.empty(2 * TILE_ROWS, np.float32))
    z = np.empty((3, 5), dtype=np.float32)
    transpose_block(y, z, rows, weights, np.empty(2 * TILE_ROWS, np.float32), np.empty(5 * TILE_ROWS, np.float32))
    if not (np.all(y[:, 0] == 5) and np.all(y[:, 1] == 0) and np.all(z == 5)):
        raise RuntimeError("the numba kernels compiled but computed a wrong result")
