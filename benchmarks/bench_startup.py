"""Start-up time of the command line: ``sjlt --help``, ``sjlt --version`` and an argument error.

    python benchmarks/bench_startup.py [--repeat 7] [--top 12]

Each case runs in a fresh process (``python -X importtime -m sjlt ...``); the table gives the
median wall time over --repeat runs and whether torch (or numpy, pyarrow, tqdm, matplotlib) was
imported, read from the import-time log. Then it prints the slowest imports (cumulative
microseconds) of ``python -X importtime -c "import sjlt.cli"``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

CASES = {
    "sjlt --help": ["--help"],
    "sjlt --version": ["--version"],
    "sjlt project (argument error)": ["project", "in.npy", "out.npy", "--dim", "0"],
}
HEAVY = ("torch", "numpy", "pyarrow", "tqdm", "matplotlib")


def imported_modules(importtime_log: str) -> set[str]:
    """Top-level names of the modules in a ``-X importtime`` log."""
    names = set()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if not name.startswith("package"):
                names.add(name.split(".")[0])
    return names


def time_case(args: list[str], repeat: int) -> tuple[float, set[str], int]:
    seconds, modules, code = [], set(), 0
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "sjlt", *args], capture_output=True, text=True)
        seconds.append(time.perf_counter() - started)
        modules = imported_modules(done.stderr)
        code = done.returncode
    return statistics.median(seconds), modules, code


def top_imports(statement: str, top: int) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True, check=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line[len("import time:") :].split("|")
            rows.append((int(cumulative), name.rstrip()))
    rows.sort(reverse=True)
    return [f"{cumulative:>10} us | {name}" for cumulative, name in rows[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--top", type=int, default=12)
    options = parser.parse_args()
    print(
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, median of {options.repeat} fresh processes"
    )
    print()
    print("| command | exit | median s | heavy modules imported |")
    print("|---|---|---|---|")
    for label, args in CASES.items():
        seconds, modules, code = time_case(args, options.repeat)
        heavy = ", ".join(name for name in HEAVY if name in modules) or "none"
        print(f"| `{label}` | {code} | {seconds:.3f} | {heavy} |")
    print()
    print('Top of `python -X importtime -c "import sjlt.cli"` (cumulative):')
    print()
    for row in top_imports("import sjlt.cli", options.top):
        print("    " + row)


if __name__ == "__main__":
    main()
