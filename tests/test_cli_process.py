"""``sjlt project`` as a real process: signals, bounded memory, the progress bar on a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import time

import numpy as np
import pytest
from test_cli_helpers import digest, leftovers

_CLI = [sys.executable, "-m", "sjlt", "project"]


def _write_large_npy(path, rows: int, features: int) -> None:
    """A big .npy without holding it in memory: one random block, written over and over."""
    block = np.random.default_rng().standard_normal((8192, features), dtype=np.float32)
    target = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, features))
    for start in range(0, rows, len(block)):
        stop = min(rows, start + len(block))
        target[start:stop] = block[: stop - start]
    target.flush()
    del target


def _stopped_mid_run(directory, process, timeout: float = 60.0) -> bool:
    """Waits for the run's temporary output, then freezes the process (SIGSTOP) and reports
    whether it is still mid-run: its output not yet committed. Frozen, it cannot finish (and
    restore the old handlers) between this check and the signal the caller sends next; the
    caller resumes it with SIGCONT. False (the process resumed) if it committed first."""
    deadline = time.monotonic() + timeout
    while not leftovers(directory):
        assert process.poll() is None, "the CLI finished before its temporary output appeared"
        assert time.monotonic() < deadline, "no temporary output appeared"
        time.sleep(0.005)
    process.send_signal(signal.SIGSTOP)
    if (directory / "out.npy").exists():
        process.send_signal(signal.SIGCONT)
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_leaves_no_output_and_no_temporary(tmp_path, signum):
    # The temporary output is allocated whole up front, so its size says nothing about progress;
    # a machine too fast for one size gets one 4x larger (at most twice).
    for rows in (200_000, 800_000, 3_200_000):
        for name in os.listdir(tmp_path):
            os.unlink(tmp_path / name)
        _write_large_npy(tmp_path / "in.npy", rows, 64)
        before = digest(tmp_path / "in.npy")
        process = subprocess.Popen(
            _CLI + [str(tmp_path / "in.npy"), str(tmp_path / "out.npy"), "--dim", "16", "--batch-rows", "400"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            interrupted = _stopped_mid_run(tmp_path, process)
            if interrupted:
                process.send_signal(signum)
                process.send_signal(signal.SIGCONT)
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        if interrupted:
            break
        assert process.returncode == 0, err
    else:
        pytest.fail(f"every run, up to {rows} rows, finished before it could be interrupted")
    assert process.returncode == 128 + signum, err
    assert f"stopped by {signal.Signals(signum).name}" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["in.npy"]  # no output, no sidecar, no temporary
    assert digest(tmp_path / "in.npy") == before


# Runs the CLI, then prints the process's peak resident memory. VmHWM belongs to the memory map
# made at exec, so unlike getrusage's ru_maxrss it does not include the RSS of the parent that
# forked it (this pytest process, torch and all).
_PEAK_SCRIPT = """
import sys
from sjlt.cli import main
code = main(sys.argv[1:])
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(int(peak.split()[1]) * 1024)
sys.exit(code)
"""


def _peak_rss_bytes(cli_args) -> int:
    done = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, "project"] + cli_args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.slow  # writes and projects a file of ~500 MB
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc")
def test_memory_stays_bounded_on_a_file_larger_than_the_allowance(tmp_path):
    """Peak resident memory on a ~500 MB file stays within 64 MB of the peak on a tiny file
    (torch alone takes a few hundred MB), and below the file's size."""
    _write_large_npy(tmp_path / "tiny.npy", 1000, 384)
    flags = ["--dim", "32", "--nnz", "2", "--batch-rows", "4096", "--quiet"]
    baseline = _peak_rss_bytes([str(tmp_path / "tiny.npy"), str(tmp_path / "t.npy")] + flags)
    allowance = baseline + (64 << 20)
    # The baseline (torch and friends) varies by environment: size the file from it.
    rows = (allowance + (128 << 20)) // (384 * 4)
    _write_large_npy(tmp_path / "large.npy", rows, 384)
    size = os.path.getsize(tmp_path / "large.npy")
    assert size > allowance, "the test file must be larger than the memory the process may use"
    peak = _peak_rss_bytes([str(tmp_path / "large.npy"), str(tmp_path / "l.npy")] + flags)
    assert peak < allowance, f"peak RSS {peak / 2**20:.0f} MB, allowance {allowance / 2**20:.0f} MB"
    assert np.load(tmp_path / "l.npy", mmap_mode="r").shape == (rows, 32)


def test_progress_bar_shows_on_a_terminal_only(tmp_path):
    _write_large_npy(tmp_path / "in.npy", 20_000, 32)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    try:
        process = subprocess.Popen(
            _CLI + [str(tmp_path / "in.npy"), str(tmp_path / "out.npy"), "--dim", "8", "--batch-rows", "1000"],
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
        )
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closes when the process exits
                break
            if not chunk:
                break
            shown += chunk
        out, _ = process.communicate(timeout=60)
    finally:
        os.close(controller)
    assert process.returncode == 0
    assert b"rows/s" in shown and b"20.0k/20.0k" in shown  # tqdm's bar: rows done, rate
    assert out.startswith("sjlt: projected 20,000 rows")
