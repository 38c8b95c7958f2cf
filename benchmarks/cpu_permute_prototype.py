"""Prototype (not used by sjlt): the windowed layout's forward as one XOR permute per chunk and block.

    python benchmarks/cpu_permute_prototype.py      # needs numba and an x86 CPU with AVX-512

In the windowed layout the 16 columns of chunk c land, in block t, on the 16 rows of one window
as lane i -> row base + (i XOR m). Row by row, without transposing X: load the chunk (16 floats),
permute it with ``vpermps`` (index vector lane ^ m), multiply by the 16 signed weights in output
order and add into the window of y. This script builds that kernel (float32, d a multiple of 16,
column offset 0), checks it against the oracle and times it against the engine's tile kernel
(``sjlt._cpu_kernels.forward_block``) on one thread, alternating. Not shipped: the permute is an
x86-only LLVM intrinsic, and misaligned column offsets, other dtypes and the classic layout would
still need the tile kernel. Measurements: benchmarks/NOTES.md (CPU engine).
"""

import math
import time

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

from sjlt import _cpu_kernels, cpu_engine, reference


@intrinsic
def _window_update(typingctx, y, y_offset, x, x_offset, weights, weights_offset, mask):
    """y[y_offset + l] += weights[weights_offset + l] * x[x_offset + (l ^ mask)], l < 16."""
    signature = types.void(y, y_offset, x, x_offset, weights, weights_offset, mask)

    def codegen(context, builder, sig, args):
        y, y_offset, x, x_offset, weights, weights_offset, mask = args
        vector = ir.VectorType(ir.FloatType(), 16)
        lanes = ir.VectorType(ir.IntType(32), 16)

        def pointer(array_type, array, offset):
            data = context.make_array(array_type)(context, builder, array).data
            return builder.bitcast(builder.gep(data, [offset], inbounds=True), vector.as_pointer())

        y_pointer = pointer(sig.args[0], y, y_offset)
        values = builder.load(pointer(sig.args[2], x, x_offset), align=4)
        signed = builder.load(pointer(sig.args[4], weights, weights_offset), align=4)
        accumulated = builder.load(y_pointer, align=4)
        splat = builder.insert_element(
            ir.Constant(lanes, ir.Undefined), builder.trunc(mask, ir.IntType(32)), ir.Constant(ir.IntType(32), 0)
        )
        splat = builder.shuffle_vector(splat, ir.Constant(lanes, ir.Undefined), ir.Constant(lanes, [0] * 16))
        index = builder.xor(ir.Constant(lanes, list(range(16))), splat)
        permute = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vector, [vector, lanes]), "llvm.x86.avx512.permvar.sf.512"
        )
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3), "llvm.fma.v16f32")
        permuted = builder.call(permute, [values, index])
        builder.store(builder.call(fma, [permuted, signed, accumulated]), y_pointer, align=4)
        return context.get_dummy_value()

    return signature, codegen


@njit(nogil=True)
def forward_rows(x, y, window_base, masks, weights, nnz):
    """y = x S^T row by row: chunk c, block t updates y[window_base + l] with x[16 c + (l ^ mask)]."""
    m, d = x.shape
    k = y.shape[1]
    x_flat, y_flat = x.ravel(), y.ravel()
    for r in range(m):
        row = uint64(r) * uint64(k)
        for column in range(k):
            y_flat[row + uint64(column)] = 0
        x_row = uint64(r) * uint64(d)
        for c in range(d // 16):
            for t in range(nnz):
                entry = uint64(c * nnz + t)
                _window_update(
                    y_flat,
                    row + uint64(window_base[entry]),
                    x_flat,
                    x_row + uint64(c) * uint64(16),
                    weights,
                    entry * uint64(16),
                    masks[entry],
                )


def window_table(d, k, nnz, seed):
    """Per (chunk, block): the window's first row, the XOR mask and the 16 weights in row order."""
    rows, negative = reference.sparse_jl_hash(d, k, seed=seed, nnz=nnz)
    rows = rows.numpy()
    signed = np.where(negative.numpy(), -1.0, 1.0).astype(np.float32) / np.float32(math.sqrt(nnz))
    entries = d // 16 * nnz
    window_base, masks = np.empty(entries, np.int64), np.empty(entries, np.int64)
    weights = np.empty(entries * 16, np.float32)
    for c in range(d // 16):
        for t in range(nnz):
            entry = c * nnz + t
            mask = rows[t, 16 * c] & 15  # lane 0 sits at row base + mask
            window_base[entry], masks[entry] = rows[t, 16 * c] - mask, mask
            assert all(rows[t, 16 * c + i] == window_base[entry] + (i ^ mask) for i in range(16))
            for lane in range(16):
                weights[entry * 16 + lane] = signed[t, 16 * c + (lane ^ mask)]
    return window_base, masks, weights


def main():
    n, d = 8192, 1024
    x = np.random.default_rng(0).random((n, d), dtype=np.float32)
    for k, nnz in [(64, 4), (256, 8), (1024, 8)]:
        window_base, masks, weights = window_table(d, k, nnz, 3)
        y = np.empty((n, k), np.float32)
        forward_rows(x, y, window_base, masks, weights, nnz)
        want = reference.sparse_jl_forward(torch.from_numpy(x[:50]).double(), k, seed=3, nnz=nnz).numpy()
        print(f"k={k}: max |error| against the oracle {np.abs(y[:50] - want).max():.1e}")
        rows, signed = cpu_engine._table(k, seed=3, nnz=nnz, column_offset=0, width=d, dtype=torch.float32)
        x_t = np.empty(d * _cpu_kernels.TILE_ROWS, np.float32)
        y_t = np.empty(k * _cpu_kernels.TILE_ROWS, np.float32)
        best_permute = best_tiles = float("inf")
        for _ in range(7):  # alternating, minima: the machine is shared
            start = time.perf_counter()
            forward_rows(x, y, window_base, masks, weights, nnz)
            best_permute = min(best_permute, time.perf_counter() - start)
            start = time.perf_counter()
            _cpu_kernels.forward_block(x, y, rows, signed, False, x_t, y_t)
            best_tiles = min(best_tiles, time.perf_counter() - start)
        print(
            f"k={k}: permute {best_permute / n * 1e5:.3f} s, tiles {best_tiles / n * 1e5:.3f} s "
            f"per 100,000 rows of 1024 float32, one thread"
        )


if __name__ == "__main__":
    main()
