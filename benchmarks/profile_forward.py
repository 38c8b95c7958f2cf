"""Launch the SJLT forward a few times for a profiler (the profile behind benchmarks/NOTES.md):

    ncu --kernel-name regex:sparse_jl_windowed_forward --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section WarpStateStats --section Occupancy \\
        python benchmarks/profile_forward.py --k 256
"""
import argparse

import torch

import sjlt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2**20)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--k", type=int, default=256)
    args = parser.parse_args()
    x = torch.randn(args.n, args.d, device="cuda")
    for dtype in (torch.float32, torch.bfloat16):
        xt = x.to(dtype)
        for _ in range(2):
            sjlt.sparse_jl(xt, args.k, seed=1)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
