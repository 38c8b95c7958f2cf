"""sjlt._device: the one rule for naming and resolving a device (CLI, Dask, scikit-learn)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import sjlt.dask
from sjlt._device import DeviceUnavailable, check_device, resolve_device
from sjlt.sklearn import SparseJLProjection

HAS_CUDA = torch.cuda.is_available()


@pytest.mark.parametrize(
    "name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", torch.device("cpu"), torch.device("cuda", 1)]
)
def test_valid_names(name):
    assert check_device(name) is name


@pytest.mark.parametrize("name", ["tpu", "CUDA", "cuda:", "cuda:x", "", None, 0, torch.device("meta")])
def test_invalid_names(name):
    with pytest.raises(ValueError, match="'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device"):
        check_device(name)


def test_checking_a_name_imports_no_torch():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sjlt._device as d; d.check_device('cuda:1'); assert 'torch' not in sys.modules",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_auto_follows_the_gpu_and_the_callers_judgement():
    assert resolve_device("auto") == torch.device("cuda" if HAS_CUDA else "cpu")
    assert resolve_device("auto", gpu_worthwhile=False) == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the error raised when no GPU is present")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", torch.device("cuda", 0)])
def test_cuda_without_a_gpu(name):
    with pytest.raises(DeviceUnavailable, match=r"torch.cuda.is_available\(\) is False") as error:
        resolve_device(name)
    assert isinstance(error.value, RuntimeError) and "no CUDA GPU" in error.value.reason


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_index_beyond_the_gpus():
    with pytest.raises(DeviceUnavailable, match="CUDA GPU"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_estimator_and_dask_take_the_same_names():
    """'cuda:0' used to be refused by the estimator but taken by sjlt.dask."""
    X = np.random.default_rng(0).standard_normal((6, 20))
    da = pytest.importorskip("dask.array")
    for name in ("cuda:0", torch.device("cuda", 0), "cpu"):
        SparseJLProjection(4, random_state=0, device=name).fit(X)  # validated in fit
        sjlt.dask.project(da.from_array(X, chunks=3), 4, seed=0, device=name)  # lazy: resolved in tasks
    for name in ("tpu", torch.device("meta")):
        with pytest.raises(ValueError, match="device"):
            SparseJLProjection(4, device=name).fit(X)
        with pytest.raises(ValueError, match="device"):
            sjlt.dask.project(da.from_array(X, chunks=3), 4, seed=0, device=name)
