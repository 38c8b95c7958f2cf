"""nn.Modules over :mod:`sjlt.functional`. Neither has parameters: the seed is the whole state."""
from __future__ import annotations

import torch

from . import functional as F
from . import spec

__all__ = ["SparseJL", "SeededDropout"]

# Odd 64-bit Weyl increment: call c of a seeded SeededDropout uses seed + c * this (mod 2**64).
_CALL_INCREMENT = 0x9E3779B97F4A7C15


class SparseJL(torch.nn.Module):
    """y = x S^T for the seeded sparse JL matrix S (out_features x in_features); no parameters.

    The configuration travels in the state_dict (as extra state), so a loaded module reproduces
    the saved projection exactly.
    """

    def __init__(self, in_features: int, out_features: int, *, seed: int, nnz: int | None = None,
                 backend: str = "auto"):
        super().__init__()
        self.in_features = spec.check_dimension(in_features, "in_features")
        self.out_features = spec.check_dimension(out_features, "out_features")
        self.seed = spec.check_seed(seed)
        self.nnz = spec.resolve_nnz(nnz, self.out_features)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] != self.in_features:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"SparseJL expects inputs of shape (..., in_features={self.in_features}), got {got}")
        return F.sparse_jl(x, self.out_features, seed=self.seed, nnz=self.nnz, backend=self.backend)

    def get_extra_state(self):
        return {"in_features": self.in_features, "out_features": self.out_features,
                "seed": self.seed, "nnz": self.nnz, "spec_version": spec.SPEC_VERSION}

    def set_extra_state(self, state):
        if state.get("spec_version") != spec.SPEC_VERSION:
            raise RuntimeError(f"this SparseJL state was saved with spec version {state.get('spec_version')}, "
                               f"but sjlt implements spec version {spec.SPEC_VERSION}; the matrix would differ")
        if (state["in_features"], state["out_features"]) != (self.in_features, self.out_features):
            raise RuntimeError(
                f"SparseJL shape mismatch: the state is {state['in_features']} -> {state['out_features']}, "
                f"this module is {self.in_features} -> {self.out_features}")
        self.seed = spec.check_seed(state["seed"])
        self.nnz = spec.resolve_nnz(state["nnz"], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, seed={self.seed}, "
                f"nnz={self.nnz}, spec_version={spec.SPEC_VERSION}")


class SeededDropout(torch.nn.Module):
    """Dropout whose mask is regenerated from a seed in the backward instead of being stored.

    ``seed=None``: each call draws a fresh 63-bit seed from torch's default CPU generator, so
    ``torch.manual_seed`` makes a run reproducible. ``seed=int``: call c (counted in training mode
    and kept in the state_dict) uses seed + c * 0x9E3779B97F4A7C15 (mod 2**64). The seed of each
    forward is the one its backward uses. ``last_seed`` holds the seed of the latest call.
    """

    def __init__(self, p: float = 0.5, *, seed: int | None = None, backend: str = "auto"):
        super().__init__()
        self.p = spec.check_probability(p)
        self.seed = None if seed is None else spec.check_seed(seed)
        self.calls = 0
        self.last_seed = None
        self.backend = backend

    def next_seed(self) -> int:
        if self.seed is None:
            return int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
        seed = (self.seed + self.calls * _CALL_INCREMENT) % (1 << 64)
        self.calls += 1
        return seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        self.last_seed = self.next_seed()
        return F.seeded_dropout(x, self.p, seed=self.last_seed, backend=self.backend)

    def get_extra_state(self):
        return {"p": self.p, "seed": self.seed, "calls": self.calls, "spec_version": spec.SPEC_VERSION}

    def set_extra_state(self, state):
        self.p = spec.check_probability(state["p"])
        self.seed = None if state["seed"] is None else spec.check_seed(state["seed"])
        self.calls = int(state["calls"])

    def extra_repr(self) -> str:
        return f"p={self.p}, seed={self.seed}, calls={self.calls}"
