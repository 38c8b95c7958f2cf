"""How much memory a device has, the one size check of the functional API, and large host outputs.

One probe for the whole package: :func:`sparse_jl` refuses an output no device could ever hold
(:func:`check_output_fits`), and the command line compares a batch plan with what is free now.
torch is imported only for a GPU, so the command line can ask about RAM before importing it.
:func:`host_empty` allocates the large host outputs of the CPU engine and of the host pipeline.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import sys
from dataclasses import dataclass


class OutputTooLarge(MemoryError, ValueError):
    """A requested output larger than the device's memory: a bad argument, caught before any
    allocation. A MemoryError (it is about memory) and a ValueError (the argument is wrong)."""


@dataclass(frozen=True)
class DeviceMemory:
    where: str  # "RAM" or "GPU cuda:0 memory", for messages
    available: int | None  # bytes that can be allocated now; None: unknown
    total: int | None  # bytes the device holds at most


def format_bytes(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1024 or unit == "PiB":
            return f"{count:,.0f} {unit}" if unit == "bytes" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError  # unreachable


def _meminfo() -> dict[str, int]:
    values = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    values[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return values


def host_memory() -> DeviceMemory:
    """RAM from /proc/meminfo (MemAvailable), else os.sysconf; None where neither says."""
    info = _meminfo()
    available, total = info.get("MemAvailable"), info.get("MemTotal")
    if total is None:
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            total = os.sysconf("SC_PHYS_PAGES") * page
            available = os.sysconf("SC_AVPHYS_PAGES") * page
        except (ValueError, OSError, AttributeError):
            return DeviceMemory("RAM", None, None)
    return DeviceMemory("RAM", available, total)


def device_memory(device) -> DeviceMemory:
    """Memory of a torch device (or device name): RAM for the CPU, free and total memory of a
    CUDA GPU (free counts the blocks torch's caching allocator holds but does not use)."""
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    if kind == "cpu":
        return host_memory()
    if kind == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return DeviceMemory(f"GPU {device} memory", free + cached, total)
    return DeviceMemory(f"{device} memory", None, None)


@functools.cache
def _total_memory(device) -> DeviceMemory:
    """The device's size never changes: probed once per device, so the check costs nothing."""
    return device_memory(device)


def check_output_fits(x, features: int, name: str) -> None:
    """Refuses an output of x.shape[:-1] x ``features`` elements of x's dtype that exceeds all
    the memory of x's device, before anything is allocated; ``name`` is the argument to fix.
    Skipped while torch.compile traces (the graph then holds no Python-side probe)."""
    import torch

    if torch.compiler.is_compiling():
        return
    rows = math.prod(x.shape[:-1])
    needed = rows * features * x.element_size()
    if needed < 1 << 30:  # any device holds a GiB: skip the lookup on the common path
        return
    memory = _total_memory(x.device)
    if memory.total is not None and needed > memory.total:
        raise OutputTooLarge(
            f"{name}={features:,} asks for an output of {rows:,} x {features:,} {x.dtype} "
            f"({format_bytes(needed)}), more than the {format_bytes(memory.total)} of "
            f"{memory.where} on {x.device}; use a smaller {name}, or pass fewer rows at a time"
        )


_HUGE_PAGE_BYTES = 2 << 20
_MADV_HUGEPAGE = 14  # Linux
_madvise = None


def host_empty(rows: int, columns: int, dtype):
    """torch.empty on the host for a large output, its pages advised huge on Linux (where
    transparent huge pages are in "madvise" mode, the common default): first touches of fresh
    4 KiB pages cost 0.2 s per GB on the development VM, which doubled the CPU transpose's time;
    2 MiB pages halve it."""
    import torch

    global _madvise
    tensor = torch.empty(rows, columns, dtype=dtype)
    size = tensor.numel() * tensor.element_size()
    if size >= 2 * _HUGE_PAGE_BYTES and sys.platform.startswith("linux"):
        try:
            if _madvise is None:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                _madvise = libc.madvise
            start = -(-tensor.data_ptr() // 4096) * 4096
            _madvise(start, tensor.data_ptr() + size - start, _MADV_HUGEPAGE)  # advice: ignore failure
        except (OSError, AttributeError):
            pass
    return tensor
