"""Launch the SJLT forward (or transpose) a few times for a profiler (the profiles behind
benchmarks/NOTES.md):

    ncu --kernel-name regex:sparse_jl_windowed_forward --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section WarpStateStats --section Occupancy \\
        python benchmarks/profile_forward.py --k 256

``--transpose`` runs Z = Y S instead (kernel regex:sparse_jl_windowed_transpose); ``--dtypes``
picks the dtypes, float32 then bfloat16 by default, each launched twice; ``--gluon on|off`` forces
the windowed forward's Gluon kernel (regex:sparse_jl_windowed_gluon_forward) or the Triton one.
"""

import argparse

import torch

import sjlt
from sjlt import spec
from sjlt.ops import windowed
from sjlt.ops._launch import Tiling


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2**20)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--transpose", action="store_true")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--gluon", choices=("auto", "on", "off"), default="auto")
    args = parser.parse_args()
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        if args.transpose:
            y = torch.randn(args.n, args.k, device="cuda").to(dtype)
            run = lambda: sjlt.functional.sparse_jl_transpose(y, args.d, seed=1)  # noqa: E731
        else:
            x = torch.randn(args.n, args.d, device="cuda").to(dtype)
            run = lambda: sjlt.sparse_jl(x, args.k, seed=1)  # noqa: E731
            if args.gluon != "auto":
                key, nnz, tiling = spec.philox_key(1), spec.default_nnz(args.k), Tiling(gluon=args.gluon == "on")
                run = lambda: windowed.forward(x, args.k, *key, nnz, 0, tiling)  # noqa: E731
        for _ in range(2):
            run()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
