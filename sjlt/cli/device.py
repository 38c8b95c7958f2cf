"""Which torch device the command line computes on.

torch is imported inside :func:`resolve_device`, not at module level: ``sjlt --help`` and
argument errors must not pay for importing torch (about a second).
"""
from __future__ import annotations

from .errors import CLIError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(name: str):
    """'auto' is the GPU when torch sees one, else the CPU; 'cuda' without a GPU is an error."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"--device cuda was given but torch {torch.__version__} sees no CUDA GPU; "
                       f"use --device cpu (or auto)")
    return torch.device(name)
