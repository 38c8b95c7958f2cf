"""Which torch device the command line computes on."""
from __future__ import annotations

import torch

from .errors import CLIError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """'auto' is the GPU when torch sees one, else the CPU; 'cuda' without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"--device cuda was given but torch {torch.__version__} sees no CUDA GPU; "
                       f"use --device cpu (or auto)")
    return torch.device(name)
