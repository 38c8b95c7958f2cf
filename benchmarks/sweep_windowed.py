"""Step-shape sweep of the windowed kernels (issue 12): how many groups' chunks one dot takes, how
many dots a loop step issues (the transpose: whether the stacked tile is the dot's left operand),
and the pipeline depth, on the issue's shapes.

    python benchmarks/sweep_windowed.py [--nnz 0 16] [--out FILE]

``--shuffle 32x1,64x4`` times the CUDA-core forward (``windowed._shuffles``) instead.

Every configuration is checked against the launcher's default before it is timed (the same S;
float rounding may differ with the summation order). ``ops.windowed._forward_steps`` and
``_TRANSPOSE_GROUPS`` are chosen from this table (benchmarks/RESULTS.md, NOTES.md).
"""

from __future__ import annotations

import argparse
import sys

import torch
import triton
from triton.testing import do_bench

from sjlt import spec
from sjlt.ops import windowed
from sjlt.ops._launch import Tiling

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
]
#: (groups per dot, dots per step, stages)
FORWARD_STEPS = [(1, 1, 3), (1, 2, 3), (2, 1, 1), (2, 2, 1), (4, 1, 1), (4, 1, 3)]
#: (groups per dot, tile on the left, stages)
TRANSPOSE_STEPS = [(1, False, 3), (2, True, 3), (4, True, 3), (4, True, 1)]


def _steps(text: str | None) -> list[tuple[int, int, int]]:
    """ "4x1x1,1x2x3" -> [(4, 1, 1), (1, 2, 3)]."""
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",")] if text else []


def _step_name(steps, stages, pipelined) -> str:
    """The groups x dots, stages and pipelined cells of a row."""
    if steps == "shuffle":
        return f"CUDA cores, {stages} rows x {pipelined} warps | - | -"
    return f"{'x'.join(map(str, map(int, steps)))} | {stages} | {'yes' if pipelined else 'no'}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--nnz", type=int, nargs="*", default=[0], help="nnz values, 0 for the default; others run at k >= 4096 only"
    )
    parser.add_argument("--directions", default="forward,transpose")
    parser.add_argument("--block-m", type=int, help="rows per program instead of the launcher's")
    parser.add_argument("--warps", type=int, help="warps per program instead of the launcher's")
    parser.add_argument("--min-k", type=int, default=0, help="only shapes with k >= this")
    parser.add_argument("--max-n", type=int, help="only shapes with n <= this")
    parser.add_argument("--max-k", type=int, help="only shapes with k <= this")
    parser.add_argument("--forward-steps", help="only these forward steps, e.g. 4x1x1,1x2x3")
    parser.add_argument("--transpose-steps", help="only these transpose steps, e.g. 4x1x1")
    parser.add_argument(
        "--pipelined",
        action="store_true",
        help="also time each one-dot step with its loads issued a step ahead (design 8)",
    )
    parser.add_argument(
        "--shuffle",
        help="instead of the steps, time the CUDA-core forward with these rows x "
        "warps, e.g. 32x1,64x4 (the transpose is skipped)",
    )
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    forward_steps = _steps(args.forward_steps) or FORWARD_STEPS
    transpose_steps = _steps(args.transpose_steps) or TRANSPOSE_STEPS
    src = torch.randn(2**28, device="cuda")
    dst = torch.empty_like(src)
    bw = 2 * src.numel() * 4 / (do_bench(lambda: dst.copy_(src), return_mode="median") * 1e-3)
    src = dst = None  # not del: the timed closure names them
    lines = [
        f"# Windowed kernel step sweep ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"triton {triton.__version__}, copy {bw / 1e9:.0f} GB/s; BLOCK_M {args.block_m or 'default'}, "
        f"warps {args.warps or 'default'})",
        "",
        "| direction | dtype | n | d | k | nnz | groups x dots | stages | pipelined | ms | % of floor | default ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(12)
    key = spec.philox_key(20261122)
    for direction in ["forward"] if args.shuffle else args.directions.split(","):
        for dtype in (torch.bfloat16, torch.float32):
            for n, d, k in [
                shape
                for shape in SHAPES
                if shape[2] >= args.min_k
                and shape[0] <= (args.max_n or shape[0])
                and shape[2] <= (args.max_k or shape[2])
            ]:
                for nnz in args.nnz:
                    nnz = nnz or spec.default_nnz(k)
                    if not spec.is_windowed(k, nnz) or (nnz != spec.default_nnz(k) and k < 4096):
                        continue
                    if direction == "forward":
                        data = torch.randn(n, d, device="cuda", generator=gen).to(dtype)
                        run = lambda tiling: windowed.forward(data, k, *key, nnz, 0, tiling)  # noqa: E731
                        configs = [
                            ((g, u), s, p)
                            for g, u, s in forward_steps
                            for p in ([False, True] if args.pipelined and u == 1 else [False])
                        ]
                        if args.shuffle:
                            configs = [
                                ("shuffle", rows, warps) for rows, warps in _steps(args.shuffle) if rows <= max(32, n)
                            ]
                    else:
                        data = torch.randn(n, k, device="cuda", generator=gen).to(dtype)
                        run = lambda tiling: windowed.transpose(data, d, *key, nnz, 0, tiling)  # noqa: E731
                        configs = [
                            ((g, bool(left)), s, p)
                            for g, left, s in transpose_steps
                            for p in ([False, True] if args.pipelined else [False])
                        ]
                    floor = (n * d + n * k) * data.element_size() / bw * 1e3
                    default = run(Tiling())
                    default_ms = do_bench(lambda: run(Tiling()), return_mode="median")
                    for steps, stages, pipelined in configs:
                        if steps == "shuffle":  # (rows, warps) in the stages and pipelined columns
                            tiling = Tiling(shuffle=True, blocks=(stages,), num_warps=pipelined)
                        else:
                            tiling = Tiling(
                                steps=steps,
                                num_stages=stages,
                                num_warps=args.warps,
                                shuffle=False,
                                blocks=(args.block_m,) if args.block_m else None,
                                pipelined=pipelined,
                            )
                        try:
                            got = run(tiling)
                            err = ((got.float() - default.float()).norm() / default.float().norm()).item()
                            tol = 3e-5 if dtype == torch.float32 else 1e-2
                            if not err <= tol:
                                raise AssertionError(f"relative difference {err:.2e} > {tol}")
                            ms = do_bench(lambda: run(tiling), warmup=5, rep=20, return_mode="median")
                            cell = f"{ms:.3f} | {100 * floor / ms:.0f}%"
                        except Exception as exc:  # out of registers / shared memory, or wrong
                            cell = f"{type(exc).__name__}: {str(exc)[:60]} | -"
                        lines.append(
                            f"| {direction} | {str(dtype)[6:]} | {n} | {d} | {k} | {nnz} | "
                            f"{_step_name(steps, stages, pipelined)} | {cell} | "
                            f"{default_ms:.3f} |"
                        )
                        print(lines[-1], flush=True)
                        if args.out:  # as it goes: a sweep cut short keeps its rows
                            with open(args.out, "w") as fh:
                                fh.write("\n".join(lines) + "\n")
                    data = default = None  # not del: the timed closures name them
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
