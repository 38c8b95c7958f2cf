"""Shared test setup: where kernels run, NaN-poisoned outputs, seeded generators.

Kernel tests take the ``kernel_device`` fixture: "cuda" on a GPU machine, else "cpu" with the
Triton kernels under TRITON_INTERPRET=1 (set here, before anything imports triton kernels).
The same test file therefore covers both, with no second copy of any test.
"""

import contextlib
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # Triton decorates its own language functions (tl.zeros_like, ...) once, when it is first
    # imported, as interpreted or compiled by TRITON_INTERPRET then. Imported here, so that a test
    # that sets TRITON_INTERPRET=0 to check an error cannot be a worker's first import and leave
    # them compiled for every later test ("Cannot call @triton.jit'd outside of the scope of a kernel").
    with contextlib.suppress(ImportError):
        import triton  # noqa: F401

from sjlt import _buffers  # noqa: E402

HAS_CUDA = torch.cuda.is_available()

# pytest-xdist workers share the cores: each worker's torch pool gets its share, so that N workers
# do not run N x cores threads (on a 16-core GPU host with -n 8 that made CPU tests 5x slower).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


@pytest.fixture
def kernel_device() -> str:
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    """Every kernel output starts as NaN (floats) or -1 (integers): unwritten elements show up."""

    def poisoned(shape, dtype, device):
        fill = float("nan") if dtype.is_floating_point else -1
        return torch.full(shape, fill, dtype=dtype, device=device)

    monkeypatch.setattr(_buffers, "empty", poisoned)


@pytest.fixture
def rng(request) -> torch.Generator:
    """A fresh generator per test; tests draw inputs from it, never from zeros. Its seed is printed
    (pytest shows it under a failure's captured output) and SJLT_TEST_SEED replays it."""
    seed = int(os.environ.get("SJLT_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"rng seed {seed}: replay with SJLT_TEST_SEED={seed} pytest '{request.node.nodeid}'")
    return torch.Generator().manual_seed(seed)


def pytest_report_header(config):
    mode = "CUDA " + torch.cuda.get_device_name() if HAS_CUDA else "CPU, Triton kernels under TRITON_INTERPRET=1"
    return f"sjlt kernels run on: {mode}"
