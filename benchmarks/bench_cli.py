"""End-to-end speed of ``sjlt project`` against the speed of just reading its input.

    python benchmarks/bench_cli.py [--rows 1000000] [--features 384] [--dim 128] [--device auto]

Writes a float32 .npy of rows x features (1.5 GB by default) into --dir, then, each time with
the file evicted from the page cache first (posix_fadvise DONTNEED: "cold-ish", the disk's own
cache may still help), times:

  read: np.load(mmap) + sum     the floor: touching every input byte once
  read: readinto 64 MB blocks   how the CLI reads
  sjlt project (process)        `python -m sjlt project ...` wall time, start-up included
  sjlt project (in-process)     project_file() after a warm-up, so without start-up

Works on CPU and GPU machines (--device auto picks the GPU when torch sees one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from sjlt.io import Settings, project_file


def write_input(path: Path, rows: int, features: int) -> None:
    block = np.random.default_rng(0).standard_normal((65536, features), dtype=np.float32)
    target = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, features))
    for start in range(0, rows, len(block)):
        stop = min(rows, start + len(block))
        target[start:stop] = block[: stop - start]
    target.flush()
    del target


def evict(path: Path) -> None:
    """Drops the file's clean pages from the page cache, so the next read goes to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_mmap_sum(path: Path) -> float:
    return float(np.load(path, mmap_mode="r").sum(dtype=np.float64))


def read_blocks(path: Path) -> int:
    buffer = bytearray(64 << 20)
    view = memoryview(buffer)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while count := f.readinto(view):
            total += count
    return total


def timed(label: str, path: Path, action) -> tuple[str, float]:
    evict(path)
    started = time.perf_counter()
    action()
    return label, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=384)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dir", type=Path, help="where the files go (default: a temporary directory)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="Sparse")  # torch's sparse-CSR beta notices

    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        scratch = Path(scratch)
        source, target = scratch / "input.npy", scratch / "output.npy"
        write_input(source, args.rows, args.features)
        size = os.path.getsize(source)
        # overwrite: the in-process run replaces the output.npy of the process run before it.
        settings = Settings(out_features=args.dim, device=args.device, overwrite=True)
        tiny = scratch / "tiny.npy"
        np.save(tiny, np.random.default_rng(1).standard_normal((1024, args.features), dtype=np.float32))
        project_file(tiny, scratch / "tiny_out.npy", settings)  # warm-up: imports, kernels, threads

        command = [
            sys.executable,
            "-m",
            "sjlt",
            "project",
            str(source),
            str(target),
            "--dim",
            str(args.dim),
            "--device",
            args.device,
            "--overwrite",
            "--quiet",
        ]
        results = [
            timed("read: np.load(mmap) + sum", source, lambda: read_mmap_sum(source)),
            timed("read: readinto 64 MB blocks", source, lambda: read_blocks(source)),
            timed("sjlt project (process)", source, lambda: subprocess.run(command, check=True)),
            timed("sjlt project (in-process)", source, lambda: project_file(source, target, settings)),
        ]
    device = settings.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{args.rows:,} x {args.features} float32 ({size / 1e9:.2f} GB) -> {args.dim} dims on {name}")
    print(f"{'step':<30} {'seconds':>8} {'rows/s':>12} {'MB/s':>8}")
    for label, seconds in results:
        print(f"{label:<30} {seconds:>8.2f} {args.rows / seconds:>12,.0f} {size / 1e6 / seconds:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
