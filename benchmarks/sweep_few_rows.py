"""Few-row float32 forwards (n <= 32, long d): the tile kernel against the CUDA-core forward with
one and two warps per program, and the launcher's default (the sweep behind
``windowed._shuffles``, and of a two-warp rule since dropped, when loads moved two groups ahead;
benchmarks/RESULTS.md, "Few rows on the CUDA cores", and NOTES.md, "Grouped launches").

    python benchmarks/sweep_few_rows.py

Every configuration is checked against the default before it is timed.
"""

import torch
import triton
from triton.testing import do_bench

from sjlt import spec
from sjlt.ops import windowed
from sjlt.ops._launch import Tiling

KEY = (12345, 678)
ROWS = (1, 8, 16, 32)
SHAPES = [(2**24, 4096), (2**22, 4096), (2**23, 8192), (2**21, 8192), (2**24, 2048), (2**22, 1024)]


def main() -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print("| n | d | k | default ms | tile ms | CUDA cores, 1 warp ms | CUDA cores, 2 warps ms |")
    print("|---|---|---|---|---|---|---|")
    for n in ROWS:
        for d, k in SHAPES:
            nnz = spec.default_nnz(k)
            x = torch.randn(n, d, device="cuda")
            run = lambda tiling=Tiling(): windowed.forward(x, k, *KEY, nnz, 0, tiling)  # noqa: E731
            base = run()
            cells = [do_bench(run, return_mode="median")]
            rows = 32 if n > 16 else 16
            for tiling in (
                Tiling(shuffle=False),
                Tiling(shuffle=True, blocks=(rows,), num_warps=1),
                Tiling(shuffle=True, blocks=(rows,), num_warps=2),
            ):
                err = float((run(tiling) - base).abs().max() / base.abs().max())
                assert err < 1e-5, (n, d, k, tiling, err)
                cells.append(do_bench(lambda: run(tiling), return_mode="median"))
            print(f"| {n} | {d} | {k} | " + " | ".join(f"{ms:.3f}" for ms in cells) + " |", flush=True)
            x = base = None  # not del: the timed closure names them


if __name__ == "__main__":
    main()
