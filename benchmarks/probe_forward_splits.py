"""The forward's d-splits weighed in waves (``splits_to_fill``'s ``resident_per_sm``) against the
fill rule alone, in one process (benchmarks/NOTES.md, "Forward splits by waves").

For each shape and dtype whose launches split differently under the two rules, the table gives
both rules' splits (one entry per grid the launcher computes) and their times (the better of two
``do_bench`` medians each, interleaved), on random data.

    python benchmarks/probe_forward_splits.py      # H100: the table
"""

import torch
from triton.testing import do_bench

from sjlt import spec
from sjlt.ops import windowed

WAVES = windowed._TILE_PROGRAMS_RESIDENT_PER_SM
LATTICE = [(2**20, 1024, 64), (2**20, 1024, 256), (2**20, 1024, 1024), (2**18, 4096, 256), (2**18, 4096, 4096)]
LATTICE += [(32, 2**24, 4096), (4096, 2**17, 4096), (2**16, 2**14, 1024), (1024, 2**20, 8192)]
FEW_ROWS = [(4096, 2**17), (1024, 2**20), (2048, 2**18), (8192, 2**16), (16384, 2**15), (512, 2**21)]
KS = (300, 500, 1000, 1024, 2000, 2048, 2500, 2560, 3000, 4000, 4096, 6000, 8000, 8192)


def bench(fn) -> float:
    return do_bench(fn, warmup=10, rep=60, return_mode="median")


def forward(x: torch.Tensor, k: int, nnz: int, resident: int | None, splits: list[int]) -> torch.Tensor:
    """The default forward with ``resident`` programs per SM (None: the fill rule alone); the
    launcher's splits are appended to ``splits``."""
    fill = windowed.splits_to_fill

    def spy(*args, **kwargs):
        splits.append(fill(*args, **kwargs))
        return splits[-1]

    windowed._TILE_PROGRAMS_RESIDENT_PER_SM, windowed.splits_to_fill = resident, spy
    try:
        return windowed.forward(x, k, *spec.philox_key(1), nnz, 0)
    finally:
        windowed._TILE_PROGRAMS_RESIDENT_PER_SM, windowed.splits_to_fill = WAVES, fill


def main() -> None:
    shapes = LATTICE + [(n, d, k) for n, d in FEW_ROWS for k in KS if (n, d, k) not in LATTICE]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| n x d -> k | dtype | fill splits | wave splits | fill ms | waves ms | waves / fill |")
    print("|---|---|---|---|---|---|---|")
    for n, d, k in shapes:
        nnz = spec.default_nnz(k)
        if not spec.is_windowed(k, nnz):
            continue
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(n, d, device="cuda", dtype=dtype)
            old, new = [], []
            a, b = forward(x, k, nnz, None, old), forward(x, k, nnz, WAVES, new)
            if old != new:
                err = ((a.float() - b.float()).abs().max() / a.float().abs().max()).item()
                assert err < 2e-2, f"{n} x {d} -> {k} {dtype}: {err}"
                times = {rule: [] for rule in (None, WAVES)}
                for _ in range(2):
                    for rule in times:
                        times[rule].append(bench(lambda rule=rule: forward(x, k, nnz, rule, [])))
                t_old, t_new = min(times[None]), min(times[WAVES])
                print(
                    f"| {n} x {d} -> {k} | {str(dtype)[6:]} | {old} | {new} | {t_old:.3f} | {t_new:.3f} "
                    f"| {t_new / t_old:.2f} |",
                    flush=True,
                )
            x = a = b = None
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
