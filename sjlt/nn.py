"""nn.Modules over :mod:`sjlt.functional`. Neither has parameters: the seed is the whole state."""

from __future__ import annotations

import torch

from . import functional as F
from . import spec

__all__ = ["SparseJL", "SeededDropout"]

# Call c of a seeded SeededDropout uses seed + c * this (mod 2**64): spec.stepped_seed(seed, c).
_CALL_INCREMENT = spec.SEED_STEP
# Its inverse mod 2**64 (it is odd), which recovers c from the device state.
_CALL_INCREMENT_INVERSE = pow(_CALL_INCREMENT, -1, 1 << 64)


class SparseJL(torch.nn.Module):
    """y = x S^T for the seeded sparse JL matrix S (out_features x in_features); no parameters.

    The configuration travels in the state_dict (as extra state), so a loaded module reproduces
    the saved projection exactly.
    """

    def __init__(
        self, in_features: int, out_features: int, *, seed: int, nnz: int | None = None, backend: str = "auto"
    ):
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
        return {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "seed": self.seed,
            "nnz": self.nnz,
            "spec_version": spec.SPEC_VERSION,
        }

    def set_extra_state(self, state):
        same_since = spec.sparse_jl_same_since(state.get("out_features", self.out_features), state.get("nnz", self.nnz))
        if state.get("spec_version") not in same_since:
            raise RuntimeError(
                f"this SparseJL state was saved with spec version {state.get('spec_version')}, "
                f"but sjlt implements spec version {spec.SPEC_VERSION}; the matrix would differ "
                f"(docs/spec.md, version history). Re-create the module with this sjlt (same "
                f"seed) and retrain what follows it, or load the state with the sjlt release "
                f"that saved it"
            )
        if (state["in_features"], state["out_features"]) != (self.in_features, self.out_features):
            raise RuntimeError(
                f"SparseJL shape mismatch: the state is {state['in_features']} -> {state['out_features']}, "
                f"this module is {self.in_features} -> {self.out_features}"
            )
        self.seed = spec.check_seed(state["seed"])
        self.nnz = spec.resolve_nnz(state["nnz"], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, seed={self.seed}, "
            f"nnz={self.nnz}, spec_version={spec.SPEC_VERSION}"
        )


class SeededDropout(torch.nn.Module):
    """Dropout whose mask is regenerated from a seed in the backward instead of being stored.

    ``seed=None``: each call draws a fresh 63-bit seed from the random generator of the input's
    device, so ``torch.manual_seed`` makes a run reproducible. ``seed=int``: call c (counted in
    training mode and kept in the state_dict) uses seed + c * 0x9E3779B97F4A7C15 (mod 2**64).

    The seed state lives on the device, in a buffer that moves with ``.to()``, and the kernel
    reads it there: under ``torch.compile`` nothing recompiles from call to call, and every replay
    of a captured CUDA graph advances the call counter on the device, so each replay applies the
    mask of its own call index. ``last_seed`` and ``calls`` read the state back (a host sync).
    """

    def __init__(self, p: float = 0.5, *, seed: int | None = None, backend: str = "auto"):
        super().__init__()
        self.p = spec.check_probability(p)
        self.seed = None if seed is None else spec.check_seed(seed)
        self.backend = backend
        # seed=int: the seed of the next call. seed=None: the seed of the last call, -1 before any
        # (a drawn seed is never negative).
        start = -1 if seed is None else spec.seed_as_int64(self.seed)
        self.register_buffer("_seed_state", torch.tensor(start, dtype=torch.int64), persistent=False)

    @property
    def calls(self) -> int:
        """Calls made in training mode with seed=int (the c of the next call); 0 with seed=None."""
        if self.seed is None:
            return 0
        return ((int(self._seed_state) - self.seed) * _CALL_INCREMENT_INVERSE) % (1 << 64)

    @property
    def last_seed(self) -> int | None:
        """The seed of the latest training-mode call, which its backward also uses; None before any."""
        if self.seed is None:
            value = int(self._seed_state)
            return None if value < 0 else value
        calls = self.calls
        return None if calls == 0 else spec.stepped_seed(self.seed, calls - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        state = self._state_on(x.device)
        if self.seed is None:
            # Drawn on the device's generator: graph-safe (each replay draws anew) and traceable.
            seed = torch.randint(0, 2**63 - 1, (), dtype=torch.int64, device=x.device)
            state.copy_(seed)
        else:
            # Advance first, then derive this call's seed as a fresh tensor: a clone taken before the
            # in-place add could be elided by a compiler into an alias of the advanced buffer.
            state.add_(spec.seed_as_int64(_CALL_INCREMENT))
            seed = state - spec.seed_as_int64(_CALL_INCREMENT)
        return F.seeded_dropout(x, self.p, seed=seed, backend=self.backend)

    def _state_on(self, device: torch.device) -> torch.Tensor:
        """The seed state, moved to ``device`` first if the module was never moved there."""
        if self._seed_state.device != device:
            if torch.compiler.is_compiling() or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
                raise RuntimeError(
                    f"SeededDropout keeps its seed state on {self._seed_state.device} but the input is on {device}; "
                    f"move the module with .to({str(device)!r}) before compiling or capturing a CUDA graph"
                )
            self._seed_state = self._seed_state.to(device)
        return self._seed_state

    def get_extra_state(self):
        return {"p": self.p, "seed": self.seed, "calls": self.calls, "spec_version": spec.SPEC_VERSION}

    def set_extra_state(self, state):
        if state.get("spec_version") not in spec.DROPOUT_SAME_SINCE:
            raise RuntimeError(
                f"this SeededDropout state was saved with spec version {state.get('spec_version')}, "
                f"but sjlt implements spec version {spec.SPEC_VERSION}; its masks would differ. "
                f"Re-create the module with the sjlt version that saved it, or start a new one"
            )
        self.p = spec.check_probability(state["p"])
        self.seed = None if state["seed"] is None else spec.check_seed(state["seed"])
        calls = int(state["calls"])
        if self.seed is None:
            self._seed_state.fill_(-1)
        else:
            self._seed_state.fill_(spec.seed_as_int64((self.seed + calls * _CALL_INCREMENT) % (1 << 64)))

    def extra_repr(self) -> str:
        return f"p={self.p}, seed={self.seed}"
