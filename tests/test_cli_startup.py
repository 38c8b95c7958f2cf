"""Start-up of the command line as a real process: what it imports, and signals during start-up.

Timings belong in ``benchmarks/bench_startup.py``; these tests check the causes (no torch import
before a command runs, signal handlers before the heavy imports) rather than seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from test_cli_helpers import random_rows

_HEAVY = ("torch", "numpy", "pyarrow", "tqdm", "matplotlib")


def _imported(importtime_log: str) -> set[str]:
    names = set()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize(
    "args, code",
    [
        (["--help"], 0),
        (["--version"], 0),
        (["project", "--help"], 0),
        (["project", "in.npy", "out.npy", "--dim", "0"], 2),
        (["evaluate"], 2),
        (["frobnicate"], 2),
    ],
)
def test_help_version_and_argument_errors_import_no_heavy_module(tmp_path, args, code):
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sjlt", *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == code, done.stderr[-2000:]
    heavy = [name for name in _HEAVY if name in _imported(done.stderr)]
    assert heavy == [], f"sjlt {' '.join(args)} imported {heavy}"


def test_importing_the_cli_imports_no_torch():
    script = f"import sys, sjlt.cli; heavy = [m for m in {_HEAVY!r} if m in sys.modules]; assert not heavy, heavy"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# Runs the CLI exactly as the console script does (``from sjlt.cli import main``), with an import
# hook that, when torch is first imported, drops a marker file and pauses: the test then sends a
# signal while the process is in the middle of its heavy imports, at a known moment. The pause is
# many short sleeps, as a real import is many steps: a signal that lands between the marker and
# one long sleep's system call is only handled when that sleep ends (1 run in about 80 timed out
# on a loaded machine with one 60 s sleep).
_PAUSE_IN_TORCH_IMPORT = """
import os, sys, time, importlib.abc

class PauseAtTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            open(os.environ["SJLT_TEST_MARKER"], "w").close()
            for _ in range(6000):  # the test signals during this pause
                time.sleep(0.01)
        return None

sys.meta_path.insert(0, PauseAtTorch())
from sjlt.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_importing_torch_exits_cleanly(tmp_path, signum):
    work = tmp_path / "work"
    work.mkdir()
    np.save(work / "in.npy", random_rows(50, 8))
    marker = tmp_path / "importing-torch"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _PAUSE_IN_TORCH_IMPORT,
            "project",
            str(work / "in.npy"),
            str(work / "outdir" / "out.npy"),
            "--dim",
            "4",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SJLT_TEST_MARKER": str(marker)},
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the CLI never started importing torch"
            time.sleep(0.01)
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signum, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [f"sjlt: stopped by {signal.Signals(signum).name}; no partial output was left"], err
    assert out == ""
    assert sorted(os.listdir(work)) == ["in.npy"]  # no output, no temporary, no directory


def test_a_second_signal_does_not_cut_the_clean_up_short():
    from sjlt.io.errors import Interrupted
    from sjlt.io.signals import interrupts_as_exceptions

    cleaned = False
    with pytest.raises(Interrupted) as first:
        with interrupts_as_exceptions():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises here
            finally:
                os.kill(os.getpid(), signal.SIGINT)  # ignored: the clean-up below still runs
                time.sleep(0.05)
                cleaned = True
    assert first.value.signum == signal.SIGTERM and cleaned


def test_a_signal_during_a_commit_waits_for_its_end():
    from sjlt.io.errors import Interrupted
    from sjlt.io.signals import interrupts_as_exceptions, signals_deferred

    steps = []
    with pytest.raises(Interrupted):
        with interrupts_as_exceptions():
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                steps.append("first rename")
                steps.append("second rename")
            steps.append("after the commit")  # not reached: the signal is raised on leaving
    assert steps == ["first rename", "second rename"]


def test_a_signal_while_a_temporary_output_is_created_leaves_no_file(tmp_path, monkeypatch):
    """A signal that arrives after the temporary file exists but before the run has recorded it
    (where the CLI-level test freezes the process as soon as the file appears) is raised once it is
    recorded, so the clean-up deletes it."""
    from sjlt.io import atomic
    from sjlt.io.errors import Interrupted
    from sjlt.io.signals import interrupts_as_exceptions

    create = atomic._create_temporary_beside

    def created_then_signalled(path):
        temporary = create(path)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, inside the creation
        return temporary

    monkeypatch.setattr(atomic, "_create_temporary_beside", created_then_signalled)
    with pytest.raises(Interrupted):
        with interrupts_as_exceptions():
            with atomic.atomic_outputs(tmp_path / "out.npy", tmp_path / "out.npy.json", overwrite=False):
                pytest.fail("the signal must stop the run before it writes")
    assert os.listdir(tmp_path) == []
