"""Launch the SJLT forward (or transpose) a few times for a profiler (the profiles behind
benchmarks/NOTES.md):

    ncu --kernel-name regex:sparse_jl_windowed_forward --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section WarpStateStats --section Occupancy \\
        python benchmarks/profile_forward.py --k 256

``--transpose`` runs Z = Y S instead (kernel regex:sparse_jl_windowed_transpose); ``--dtypes``
picks the dtypes, float32 then bfloat16 by default, each launched twice.
"""
import argparse

import torch

import sjlt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2**20)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--transpose", action="store_true")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        if args.transpose:
            y = torch.randn(args.n, args.k, device="cuda").to(dtype)
            run = lambda: sjlt.functional.sparse_jl_transpose(y, args.d, seed=1)  # noqa: E731
        else:
            x = torch.randn(args.n, args.d, device="cuda").to(dtype)
            run = lambda: sjlt.sparse_jl(x, args.k, seed=1)  # noqa: E731
        for _ in range(2):
            run()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
