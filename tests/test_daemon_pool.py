"""The engine's and the file layer's thread pool: futures like concurrent.futures, daemon workers."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from sjlt._daemon_pool import DaemonPool


def test_results_and_errors_come_back_through_the_futures():
    pool = DaemonPool(3, "test-pool")
    futures = [pool.submit(pow, base, 2) for base in range(20)]
    assert [f.result(timeout=10) for f in futures] == [b * b for b in range(20)]
    failing = pool.submit(int, "not a number")
    with pytest.raises(ValueError, match="not a number"):
        failing.result(timeout=10)


def test_workers_are_daemons_started_up_front():
    before = {t.name for t in threading.enumerate()}
    DaemonPool(2, "test-upfront")
    workers = [t for t in threading.enumerate() if t.name.startswith("test-upfront_") and t.name not in before]
    assert len(workers) == 2 and all(t.daemon for t in workers)


def test_an_exception_mid_work_does_not_hold_the_exit():
    """The interpreter exits while a worker is busy and others wait for work."""
    script = (
        "import time\n"
        "from sjlt._daemon_pool import DaemonPool\n"
        "pool = DaemonPool(4, 'busy')\n"
        "pool.submit(time.sleep, 600)\n"
        "raise KeyboardInterrupt\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
