"""Which torch device a projection runs on: the one rule of the command line, Dask and scikit-learn.

A device is named ``"auto"`` (the GPU when torch sees one), ``"cpu"``, ``"cuda"``, ``"cuda:N"``,
or given as a ``torch.device`` of type cpu or cuda. :func:`check_device` validates the name
without importing torch (``sjlt --help`` must not pay for it); :func:`resolve_device` imports
torch and answers where the work goes, on the machine that calls it (a Dask task resolves
``"auto"`` on its own worker).
"""

from __future__ import annotations

import re

#: What the command line's --device offers.
DEVICE_CHOICES = ("auto", "cpu", "cuda")
_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")


class DeviceUnavailable(RuntimeError):
    """A CUDA device was asked for that this machine's torch does not see; ``reason`` says why,
    for callers that word the advice their own way (the command line names its flag)."""

    def __init__(self, device, reason: str):
        super().__init__(
            f"device {str(device)!r} was asked for but {reason}; use 'cpu', or "
            f"'auto' to use a GPU only where there is one"
        )
        self.reason = reason


def check_device(device):
    """Returns ``device`` if it names a device sjlt can run on, else raises ValueError."""
    if isinstance(device, str):
        if _NAME.fullmatch(device):
            return device
    elif getattr(device, "type", None) in ("cpu", "cuda") and type(device).__name__ == "device":
        return device  # a torch.device (not imported here: torch may not be loaded)
    raise ValueError(
        f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device of type cpu or cuda, got {device!r}"
    )


def resolve_device(device, *, gpu_worthwhile: bool = True):
    """The ``torch.device`` to compute on.

    ``"auto"`` is the GPU when torch sees one and ``gpu_worthwhile`` (a caller's judgement that
    the input is large enough to repay the transfers), else the CPU. A CUDA device that torch
    does not see raises :class:`DeviceUnavailable`.
    """
    import torch

    check_device(device)
    if isinstance(device, str) and device == "auto":
        use_gpu = gpu_worthwhile and torch.cuda.is_available()
        return torch.device("cuda" if use_gpu else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable(
                device, f"torch.cuda.is_available() is False (torch {torch.__version__} sees no CUDA GPU)"
            )
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise DeviceUnavailable(device, f"torch sees {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    return resolved
