"""Which backend runs an op: the Triton kernels or the PyTorch reference."""

from __future__ import annotations

import functools
import os

import torch

BACKENDS = ("auto", "triton", "torch")


def triton_interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # ImportError, or a broken install on an unsupported platform
        return False
    return True


def check_backend(backend) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def use_triton(backend: str, tensor: torch.Tensor, *, supports_dtype: bool = True) -> bool:
    """True when ``backend`` resolves to the Triton kernel for ``tensor``; raises if impossible."""
    if backend == "torch":
        return False
    if backend == "auto":
        return tensor.device.type == "cuda" and supports_dtype and triton_available()
    # backend == "triton"
    if not triton_available():
        raise RuntimeError("backend='triton' needs the triton package; install it or use backend='auto'")
    if tensor.device.type != "cuda" and not triton_interpreting():
        raise RuntimeError(
            f"backend='triton' needs a CUDA/ROCm tensor (got device {tensor.device}); on CPU set "
            f"TRITON_INTERPRET=1 to run the kernel in Triton's interpreter, or use backend='auto'"
        )
    if not supports_dtype:
        raise TypeError(f"the Triton kernel does not take {tensor.dtype}; use backend='torch'")
    return True


def dot_dtype(low_precision):
    """Operand type of tl.dot: the given low-precision type on a GPU, float32 when interpreting."""
    import triton.language as tl

    return tl.float32 if triton_interpreting() else low_precision


@functools.cache
def multiprocessor_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.cache
def device_capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)
