"""Column-sharded sparse JL over several GPUs (sjlt.distributed.sparse_jl_sharded) against one GPU.

One process per GPU, NCCL backend. The script checks that the sharded projection equals the
single-GPU projection of the whole input (within rounding) and is identical on every rank, then
times, with CUDA events (medians after warm-up, random data):

- one GPU projecting the whole (n, d) input;
- every GPU projecting its (n, d / world) shard with ``column_offset``, no all-reduce;
- ``sparse_jl_sharded`` with ``check=False`` (project + one all-reduce of the (n, k) result);
- ``sparse_jl_sharded`` with ``check=True`` (plus the layout all_gather and its host sync).

It prints a markdown table and writes it to ``--out``. Default sizes: d = 2**28 bfloat16 columns,
n = 32 rows, k = 4096, i.e. 16 GiB of input on the single GPU (which also holds its shard).

NVLink multicast (NVLS) stays off: the script sets NCCL_NVLS_ENABLE=0 and
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 in its own environment before torch initialises NCCL, and the
launch command sets them as well:

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
        torchrun --nproc_per_node=2 benchmarks/bench_distributed.py --out bench_distributed.md

Smoke test of the script itself on CPU (gloo, tiny sizes, wall-clock timers):

    torchrun --nproc_per_node=2 benchmarks/bench_distributed.py --backend gloo --small --out /tmp/b.md
"""

import os

# Before torch is imported, so that no NCCL communicator can see other values.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import sjlt  # noqa: E402
from sjlt.distributed import sparse_jl_sharded  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Largest |sharded - unsharded| allowed, relative to max |unsharded|: the sharded result rounds
# each rank's partial to the input dtype before the (float32) sum, the unsharded one does not.
TOLERANCE = {torch.bfloat16: 2**-6, torch.float16: 2**-9, torch.float32: 1e-5}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default="nccl",
        help="nccl: one process per GPU; gloo: CPU, for testing the script",
    )
    parser.add_argument("--small", action="store_true", help="tiny sizes (d=4133, n=4, k=64)")
    parser.add_argument("--d", type=int, default=2**28, help="input columns (default 2**28)")
    parser.add_argument("--n", type=int, default=32, help="rows (default 32)")
    parser.add_argument("--k", type=int, default=4096, help="output features (default 4096)")
    parser.add_argument("--nnz", type=int, default=None, help="nonzeros per column (default: sjlt's)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20240607, help="projection seed (data uses seed + 1)")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = parser.parse_args(argv)
    if args.small:
        args.d, args.n, args.k, args.warmup, args.reps = 4133, 4, 64, 1, 3
    return args


class Timer:
    """Milliseconds of one call: CUDA events on a GPU, wall clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time_ms(self, fn) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3


def median_ms(fn, timer: Timer, warmup: int, reps: int, *, aligned: bool) -> float:
    """Median over reps after warmup calls; ``aligned`` starts every rep at a barrier of all ranks."""
    samples = []
    for rep in range(warmup + reps):
        if aligned:
            timer.sync()
            dist.barrier()
            timer.sync()
        elapsed = timer.time_ms(fn)
        if rep >= warmup:
            samples.append(elapsed)
    return statistics.median(samples)


def shard_bounds(d: int, world: int, rank: int) -> tuple[int, int]:
    """Columns [start, stop) of a rank: widths differ by at most one."""
    base, extra = divmod(d, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def slowest_rank(value: float, device: torch.device) -> float:
    """Max of a per-rank number over ranks: a sharded step lasts as long as its slowest rank."""
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.backend == "nccl":
        if not torch.cuda.is_available():
            sys.exit("--backend nccl needs CUDA GPUs; use --backend gloo --small on a CPU machine")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timedelta(minutes=5))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timedelta(minutes=5))
    try:
        status = run(args, rank, world, device)
        # No rank tears gloo down while another still writes its table: an early teardown
        # aborts the slower rank ("terminate called without an active exception").
        dist.barrier()
        return status
    finally:
        dist.destroy_process_group()


def run(args, rank: int, world: int, device: torch.device) -> int:
    dtype = DTYPES[args.dtype]
    n, d, k, seed = args.n, args.d, args.k, args.seed
    start, stop = shard_bounds(d, world, rank)
    timer = Timer(device)

    # Every rank draws the same X from the same generator seed; rank 0 keeps all of it for the
    # single-GPU reference, the others keep only their own columns.
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    x_full = torch.randn(n, d, generator=generator, dtype=dtype, device=device)
    x_shard = x_full[:, start:stop].contiguous()
    if rank != 0:
        del x_full
    timer.sync()

    # Correctness: sharded (with the layout check) against one process projecting everything.
    y_sharded = sparse_jl_sharded(x_shard, k, seed=seed, nnz=args.nnz, column_offset=start)
    gathered = [torch.empty_like(y_sharded) for _ in range(world)]
    dist.all_gather(gathered, y_sharded)
    lines = []
    failed = False
    if rank == 0:
        y_reference = sjlt.sparse_jl(x_full, k, seed=seed, nnz=args.nnz).float()
        scale = y_reference.abs().max().item()
        error = (y_sharded.float() - y_reference).abs().max().item() / scale
        replicated = all(torch.equal(other, y_sharded) for other in gathered)
        passed = error <= TOLERANCE[dtype] and replicated
        failed = not passed
        lines.append(
            f"Correctness: max |sharded - single| / max |single| = {error:.3e} "
            f"(tolerance {TOLERANCE[dtype]:.1e}); identical on all {world} ranks: {replicated} "
            f"-> {'PASS' if passed else 'FAIL'}"
        )
        print(lines[-1], flush=True)
    del y_sharded, gathered

    # Timings. The single-device reference runs on rank 0 while the others wait.
    single = None
    if rank == 0:
        single = median_ms(
            lambda: sjlt.sparse_jl(x_full, k, seed=seed, nnz=args.nnz), timer, args.warmup, args.reps, aligned=False
        )
    dist.barrier()
    local = median_ms(
        lambda: sjlt.sparse_jl(x_shard, k, seed=seed, nnz=args.nnz, column_offset=start),
        timer,
        args.warmup,
        args.reps,
        aligned=True,
    )
    unchecked = median_ms(
        lambda: sparse_jl_sharded(x_shard, k, seed=seed, nnz=args.nnz, column_offset=start, check=False),
        timer,
        args.warmup,
        args.reps,
        aligned=True,
    )
    checked = median_ms(
        lambda: sparse_jl_sharded(x_shard, k, seed=seed, nnz=args.nnz, column_offset=start),
        timer,
        args.warmup,
        args.reps,
        aligned=True,
    )
    local, unchecked, checked = (slowest_rank(t, device) for t in (local, unchecked, checked))

    if rank == 0:
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        input_gb = n * d * x_shard.element_size() / 1e9
        one, many = ("GPU", f"{world} GPUs") if device.type == "cuda" else ("process", f"{world} processes")
        rows = [
            (f"1 {one}, whole input", 1, d, single),
            (f"{many}, local shard projection only (no all-reduce)", world, stop - start, local),
            (f"{many}, `sparse_jl_sharded(check=False)`", world, stop - start, unchecked),
            (f"{many}, `sparse_jl_sharded(check=True)`", world, stop - start, checked),
        ]
        lines += [
            "",
            f"Column-sharded sparse JL: n={n}, d={d}, k={k}, {args.dtype}, nnz={sjlt.spec.resolve_nnz(args.nnz, k)}, "
            f"backend {args.backend}, {where}, torch {torch.__version__}; medians of {args.reps} reps after "
            f"{args.warmup} warm-up; multi-rank rows show the slowest rank. "
            f"NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}, "
            f"TORCH_SYMM_MEM_DISABLE_MULTICAST={os.environ['TORCH_SYMM_MEM_DISABLE_MULTICAST']}.",
            "",
            "| configuration | ranks | columns per rank | median ms | input GB/s (all ranks) | speedup vs 1 |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {name} | {ranks} | {cols} | {ms:.3f} | {input_gb / (ms / 1e3):.4g} | {single / ms:.2f}x |"
            for name, ranks, cols, ms in rows
        ]
        print("\n".join(lines[1:]), flush=True)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text("\n".join(lines) + "\n")
    # Every rank learns the verdict, so all exit with the same status.
    return int(slowest_rank(float(failed), device))


if __name__ == "__main__":
    sys.exit(main())
