"""The dtypes of :data:`sjlt.spec.FLOAT_DTYPES` as torch dtypes (spec stays free of torch)."""

from __future__ import annotations

import torch

from . import spec

#: The real floating-point tensors sjlt projects.
TORCH_FLOAT_DTYPES = tuple(getattr(torch, name) for name in spec.FLOAT_DTYPES)
#: Complex tensors, projected as their real and imaginary parts.
TORCH_COMPLEX_DTYPES = (torch.complex64, torch.complex128)
