"""Few-row float32 forwards (n <= 32, long d): the tile kernel against the CUDA-core forward, and
the launcher's default, under each ``torch.get_float32_matmul_precision()`` (the sweep behind
``windowed._shuffles``; benchmarks/RESULTS.md, "Few rows on the CUDA cores", and NOTES.md,
"Grouped launches"). The CUDA-core forward is exact whatever the precision; the tile kernel trades
bits for speed below "highest".

    python benchmarks/sweep_few_rows.py                          # "highest" (the default)
    python benchmarks/sweep_few_rows.py --precision high medium  # tables for "high" and "medium"

Every configuration is checked against the CUDA-core forward (exact) before it is timed, within
the precision's tolerance.
"""

import argparse

import torch
import triton
from triton.testing import do_bench

from sjlt import spec
from sjlt.ops import windowed
from sjlt.ops._launch import Tiling

KEY = (12345, 678)
ROWS = (1, 8, 16, 32)
SHAPES = [(2**24, 4096), (2**22, 4096), (2**23, 8192), (2**21, 8192), (2**24, 2048), (2**22, 1024), (2**24 + 1, 8000)]
#: Largest error relative to the output's largest entry, per precision (bfloat16 pieces: 3, 2, 1).
TOLERANCE = {"highest": 1e-5, "high": 1e-4, "medium": 1e-2}


def table(precision: str) -> None:
    torch.set_float32_matmul_precision(precision)
    print(f"\nprecision {precision!r}, ms (do_bench medians)")
    print("| n | d | k | default | tile | CUDA cores | tile / CUDA cores |")
    print("|---|---|---|---|---|---|---|")
    for n in ROWS:
        for d, k in SHAPES:
            nnz = spec.default_nnz(k)
            x = torch.randn(n, d, device="cuda")
            run = lambda tiling=Tiling(): windowed.forward(x, k, *KEY, nnz, 0, tiling)  # noqa: E731
            exact = run(Tiling(shuffle=True))
            cells = []
            for tiling in (Tiling(), Tiling(shuffle=False), Tiling(shuffle=True)):
                err = float((run(tiling) - exact).abs().max() / exact.abs().max())
                assert err < TOLERANCE[precision], (n, d, k, tiling, err)
                cells.append(do_bench(lambda: run(tiling), return_mode="median"))
            print(
                f"| {n} | {d} | {k} | " + " | ".join(f"{ms:.3f}" for ms in cells) + f" | {cells[1] / cells[2]:.2f} |",
                flush=True,
            )
            x = exact = None  # not del: the timed closure names them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", nargs="+", default=["highest"], choices=sorted(TOLERANCE))
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for precision in args.precision:
        table(precision)


if __name__ == "__main__":
    main()
