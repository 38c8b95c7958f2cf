"""Half-type windowed forwards: the Triton kernel against the Gluon kernel (design 11) over its rows,
groups per step and copy stages, and the launcher's default (the sweep behind
``windowed._gluon_forward`` and ``windowed._GLUON_STEPS``; benchmarks/RESULTS.md, "The forward in
Gluon").

    python benchmarks/sweep_gluon.py [--dtypes bfloat16,float16]

Every Gluon configuration must equal the Triton kernel's output with the same d-splits bit for bit
before it is timed (other splits sum the partials in another order).
Each cell is the median of ``do_bench``; the Triton and default columns are timed twice, and the
faster run is kept.
"""

import argparse
import itertools

import torch
import triton
from triton.testing import do_bench

from sjlt import spec
from sjlt.ops import windowed
from sjlt.ops._launch import Tiling

KEY = (12345, 678)
# Issue 12's nine shapes, then two with 64 and 32 groups per program.
SHAPES = [
    (2**20, 1024, 64),
    (2**20, 1024, 256),
    (2**20, 1024, 1024),
    (2**18, 4096, 256),
    (2**18, 4096, 4096),
    (32, 2**24, 4096),
    (4096, 2**17, 4096),
    (2**16, 2**14, 1024),
    (1024, 2**20, 8192),
    (2**16, 2**13, 2048),
    (2**17, 2048, 512),
]
CONFIGS = list(itertools.product((64, 128), (2, 4), (2, 3)))  # rows, groups per step, stages


def _copy_bandwidth() -> float:
    src = torch.empty(2**28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (do_bench(lambda: dst.copy_(src), return_mode="median") * 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float16")
    args = parser.parse_args()
    bandwidth = _copy_bandwidth()
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
        f"copy {bandwidth / 1e9:.0f} GB/s"
    )
    header = " | ".join(f"{rows}/{groups}/{stages}" for rows, groups, stages in CONFIGS)
    print(
        f"| dtype | n | d | k | groups per program | floor ms | Triton ms | {header} | default ms | "
        "default vs Triton | default % of floor |"
    )
    print("|" + "---|" * (10 + len(CONFIGS)))
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for n, d, k in SHAPES:
            nnz = spec.default_nnz(k)
            x = torch.randn(n, d, device="cuda", dtype=dtype)
            run = lambda tiling=Tiling(): windowed.forward(x, k, *KEY, nnz, 0, tiling)  # noqa: E731
            tables = windowed.window_tables(d, k, *KEY, nnz, 0, x.device)

            def grid(rows, x=x, nnz=nnz, tables=tables, k=k):
                return windowed._grid(x, nnz, tables.groups, tables.windows, None, rows, k, spec.band_count(nnz))

            per_split = grid(None)[4]
            triton_kernel = Tiling(gluon=False)
            cells = []
            for rows, groups, stages in CONFIGS:
                tiling = Tiling(gluon=True, blocks=(rows,), steps=(groups, 1), num_stages=stages)
                if rows > max(64, n):
                    cells.append("-")
                    continue
                same_splits = run(Tiling(gluon=False, splits=grid(rows)[3]))
                assert torch.equal(run(tiling), same_splits), (n, d, k, tiling)
                cells.append(f"{do_bench(lambda: run(tiling), return_mode='median'):.3f}")
            base = run(triton_kernel)
            err = float((run().float() - base.float()).abs().max() / base.float().abs().max())
            assert err < 1e-2, (n, d, k, err)
            triton_ms = min(do_bench(lambda: run(triton_kernel), return_mode="median") for _ in range(2))
            default_ms = min(do_bench(run, return_mode="median") for _ in range(2))
            floor_ms = (n * d + n * k) * x.element_size() / bandwidth * 1e3
            print(
                f"| {dtype_name} | {n} | {d} | {k} | {per_split} | {floor_ms:.3f} | {triton_ms:.3f} | "
                + " | ".join(cells)
                + f" | {default_ms:.3f} | {triton_ms / default_ms:.2f}x | "
                f"{100 * floor_ms / default_ms:.0f}% |",
                flush=True,
            )
            x = base = same_splits = None  # not del: the timed closures name them


if __name__ == "__main__":
    main()
