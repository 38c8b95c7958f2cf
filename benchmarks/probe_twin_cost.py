"""What the one-band transposes' twin programs cost, apart from Z's misaligned rows (NOTES.md,
"Any d": "Quads, whole groups in one or two dots, and where the twins' time goes").

For each shape, the default transpose on the aligned d (d rounded down to 16) is the reference;
against it the table times, on that aligned d, twins forced by ``Tiling(twins=True)`` (two windows
per program: at A = 2 one joined whole-group store, at A >= 4 two vector stores) and unpipelined
single windows, and the default on the odd d itself. Each launch's registers and spill bytes are
read from the compiled kernel. Forced twins must give the default's Z bitwise (checked first).

    python benchmarks/probe_twin_cost.py        # H200: the table
"""

import argparse

import torch
from triton.testing import do_bench

import sjlt.kernels.sparse_jl_windowed as windowed_kernels
from sjlt import spec
from sjlt.ops import windowed
from sjlt.ops._launch import Tiling

SHAPES = [  # n, k, odd d
    (65536, 256, 16383),
    (4096, 256, 131071),
    (65536, 512, 16383),
    (65536, 1024, 16383),
    (4096, 1024, 131071),
]


class _Registers:
    """Stands in for the transpose kernel object and records each launch's (registers, spill bytes)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.seen = set()

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            compiled = self.kernel[grid](*args, **kwargs)
            self.seen.add((compiled.n_regs, compiled.n_spills))
            return compiled

        return launch


def _transpose(y, d, tiling=Tiling()):
    return windowed.transpose(y, d, *spec.philox_key(7), spec.default_nnz(y.shape[1]), 0, tiling)


def _measured(y, d, tiling=Tiling()):
    """(ms, sorted (registers, spills) of its launches)."""
    shipped = windowed_kernels.sparse_jl_windowed_transpose_kernel
    recorder = _Registers(shipped)
    windowed_kernels.sparse_jl_windowed_transpose_kernel = recorder
    try:
        _transpose(y, d, tiling)
    finally:
        windowed_kernels.sparse_jl_windowed_transpose_kernel = shipped
    ms = do_bench(lambda: _transpose(y, d, tiling), warmup=25, rep=150, return_mode="median")
    return ms, sorted(recorder.seen)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32")
    args = parser.parse_args()
    print(
        "| n x k -> d | A | dtype | aligned ms | forced twins, aligned | unpipelined singles, aligned | default, odd d |"
    )
    print("|---|---|---|---|---|---|---|")
    for dtype in [getattr(torch, name) for name in args.dtypes.split(",")]:
        for n, k, d in SHAPES:
            y = torch.randn(n, k, device="cuda").to(dtype)
            aligned_d = d // 16 * 16
            twins = Tiling(twins=True)
            if not torch.equal(_transpose(y, aligned_d, twins), _transpose(y, aligned_d)):
                raise SystemExit(f"forced twins changed Z at {n} x {k} -> {aligned_d}")
            base, base_regs = _measured(y, aligned_d)
            cells = [
                f"{ms / base:.2f} {regs}"
                for ms, regs in (
                    _measured(y, aligned_d, twins),
                    _measured(y, aligned_d, Tiling(pipelined=False)),
                    _measured(y, d),
                )
            ]
            windows = spec.windows_per_block(k, spec.default_nnz(k))
            print(
                f"| {n} x {k} -> {d} | {windows} | {str(dtype)[6:]} | {base:.3f} {base_regs} | "
                + " | ".join(cells)
                + " |",
                flush=True,
            )
            del y
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
