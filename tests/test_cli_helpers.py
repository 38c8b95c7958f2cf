"""Helpers shared by the command-line tests (imported by them; holds no tests itself)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from sjlt.cli import main
from sjlt.io.atomic import TEMP_SUFFIX


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Runs ``sjlt ARGS`` in-process; returns (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def leftovers(directory: Path) -> list[str]:
    """Temporary outputs left in ``directory`` (there must never be any)."""
    return [name for name in os.listdir(directory) if name.endswith(TEMP_SUFFIX)]


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def random_rows(rows: int, features: int, dtype=np.float32, seed: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, features)).astype(dtype)


def assert_one_error_line(err: str, *fragments: str) -> None:
    """stderr is exactly one 'sjlt: error: ...' line (no traceback) holding every fragment."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{err}"
    assert lines[0].startswith("sjlt: error: "), lines[0]
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"


# On a GPU machine the CLI's default device runs the Triton kernel, which agrees with the CPU
# reference to the spec's per-dtype tolerance, not bit for bit (docs/spec.md, section 2); on a
# CPU machine both sides run the reference and must agree exactly.
CLI_RUNS_KERNEL = torch.cuda.is_available()
_KERNEL_RTOL = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def assert_projection_equal(actual: np.ndarray, want: np.ndarray) -> None:
    if not CLI_RUNS_KERNEL:
        np.testing.assert_array_equal(actual, want)
        return
    assert actual.shape == want.shape and actual.dtype == want.dtype
    rtol = _KERNEL_RTOL[np.dtype(want.dtype)]
    np.testing.assert_allclose(actual, want, rtol=rtol, atol=rtol * float(np.abs(want).max(initial=0.0)))
