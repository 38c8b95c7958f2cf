"""Data attribution (TRAK, dattri, GraSS, LoGra): projecting per-example gradients.

- :class:`SJLTProjector`: TRAK's projector contract (``AbstractProjector``): ``project(grads,
  model_id)`` for a (batch, grad_dim) tensor or a dict of per-parameter gradients, which is
  projected at the parameters' column offsets (``sjlt.functional.sparse_jl_blocks``: one launch
  on a GPU) and never concatenated. When ``traker`` is installed the class subclasses
  ``trak.projectors.AbstractProjector``.
- :func:`project_per_example_gradients`: per-example gradients of a model (``torch.func``),
  computed for a bounded group of parameters at a time and projected as they come, so the
  (batch, all parameters) matrix never exists. :func:`per_example_gradients` yields the
  gradients themselves and :func:`project_gradient_blocks` projects any stream of column blocks.
- :class:`SJLTProjection`: the signature of GraSS's ``sjlt.SJLTProjection`` (PyPI ``sjlt`` 0.1.7),
  which dattri's ``proj_type="sjlt"`` imports.

Every projection here is ``sjlt.functional.sparse_jl`` of the concatenated gradient: blocks sum to
the whole because S is a pure function of (seed, column index).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping

import torch
from torch.func import functional_call, grad, vmap

from . import functional as F
from . import reference, spec
from ._dtypes import TORCH_FLOAT_DTYPES

try:  # optional: with traker installed, TRAKer and isinstance checks see a TRAK projector
    from trak.projectors import AbstractProjector as _ProjectorBase
except ImportError:
    _ProjectorBase = object

__all__ = [
    "SJLTProjector",
    "model_seed",
    "per_example_gradients",
    "project_per_example_gradients",
    "project_gradient_blocks",
    "SJLTProjection",
]

#: Names a projector accepts for ``proj_type``. The matrix is sjlt's sparse JL matrix whatever the
#: name: TRAK's "rademacher" and "normal" are accepted so configurations written for TRAK's
#: projectors run unchanged (README, "Data attribution").
PROJ_TYPES = ("sjlt", "rademacher", "normal")

_FLOAT_NAMES = ", ".join(str(dtype).removeprefix("torch.") for dtype in TORCH_FLOAT_DTYPES)


def model_seed(seed: int, model_id: int) -> int:
    """The seed of model (checkpoint) ``model_id``'s matrix: member ``model_id`` of ``seed``'s
    family, (seed + model_id * 0x9E3779B97F4A7C15) mod 2**64 (docs/spec.md, "Seeds and keys").
    Distinct model ids of one seed never share a matrix (TRAK's seed + 10**4 * model_id collides
    with seed + 10**4); model id 0 is ``seed`` itself."""
    if isinstance(model_id, bool) or not isinstance(model_id, numbers.Integral):
        raise TypeError(f"model_id must be an int (the checkpoint's index), got {type(model_id).__name__}")
    if not 0 <= model_id < 1 << 64:
        raise ValueError(f"model_id must lie in [0, 2**64), got {model_id}")
    return spec.stepped_seed(seed, int(model_id))


# ------------------------------------------------------------------------------------------------
# Projecting column blocks of a virtual (batch, total columns) matrix
# ------------------------------------------------------------------------------------------------


def _checked_gradient(name: str, tensor, rows: int | None) -> torch.Tensor:
    """``tensor`` (batch, ...), after checking it is a real float tensor with ``rows`` examples
    (None: any); a (batch,) tensor as (batch, 1). Not reshaped further: a grouped launch reads a
    contiguous (batch, ...) gradient as it is, where a reshape cost the host about 1-3 µs per
    parameter, 148 times per GPT-2 call."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"gradient {name!r} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in TORCH_FLOAT_DTYPES:
        raise TypeError(
            f"gradient {name!r} has dtype {tensor.dtype}; per-example gradients must be "
            f"floating point ({_FLOAT_NAMES}): pass the gradients themselves, or convert "
            f"them with .float()"
        )
    dims = tensor.dim()
    if dims == 0:
        raise ValueError(f"gradient {name!r} is 0-d; give it a leading batch dimension (batch, ...)")
    if rows is not None and tensor.shape[0] != rows:
        raise ValueError(
            f"gradient {name!r} holds {tensor.shape[0]} examples but the first gradient "
            f"holds {rows}; every per-parameter gradient must have the same batch size "
            f"in its first dimension"
        )
    return tensor[:, None] if dims == 1 else tensor


def _gradient_matrix(name: str, tensor, rows: int | None) -> torch.Tensor:
    """``tensor`` (batch, ...) as a (batch, numel) view, checked as by :func:`_checked_gradient`."""
    tensor = _checked_gradient(name, tensor, rows)
    return tensor if tensor.dim() == 2 else tensor.reshape(tensor.shape[0], -1)


def project_gradient_blocks(
    blocks: Iterable[tuple[int, torch.Tensor]],
    out_features: int,
    *,
    seed: int,
    nnz: int | None = None,
    column_offset: int = 0,
    device=None,
    backend: str = "auto",
) -> torch.Tensor:
    """Sum of ``sparse_jl(block, out_features, seed=seed, column_offset=column_offset + first)``
    over ``blocks``, pairs (first column, (batch, ...) tensor) of a virtual (batch, columns) matrix.

    This is the projection of that matrix, which is never built. Each block is projected in its
    own dtype and added to a float32 (batch, out_features) result; ``device`` (default: the first
    block's) is where the projection runs, blocks elsewhere are moved there one at a time.
    """
    column_offset = F.check_column_offset(column_offset)
    out, rows = None, None
    for first, block in blocks:
        matrix = _gradient_matrix(f"at column {first}", block, rows)
        if out is None:
            rows = matrix.shape[0]
            device = torch.device(device) if device is not None else matrix.device
            out = torch.zeros(
                rows, spec.check_dimension(out_features, "out_features"), dtype=torch.float32, device=device
            )
        out += F.sparse_jl(
            matrix.to(device), out_features, seed=seed, nnz=nnz, column_offset=column_offset + first, backend=backend
        )
        del block, matrix  # before the stream computes the next block
    if out is None:
        raise ValueError("there are no gradient blocks to project; pass at least one (first column, tensor)")
    return out


# ------------------------------------------------------------------------------------------------
# TRAK's projector contract
# ------------------------------------------------------------------------------------------------


def _check_proj_type(proj_type) -> None:
    name = getattr(proj_type, "value", proj_type)  # TRAK's and dattri's ProjectionType are str enums
    if not isinstance(name, str) or name not in PROJ_TYPES:
        raise ValueError(
            f"proj_type must be one of {', '.join(map(repr, PROJ_TYPES))} (or TRAK's "
            f"ProjectionType of those), got {proj_type!r}; sjlt projects with its sparse JL "
            f"matrix, so pass proj_type='sjlt'"
        )


class SJLTProjector(_ProjectorBase):
    """A TRAK projector (``trak.projectors.AbstractProjector``) that projects with sjlt.

    ``TRAKer(model, task, train_set_size, projector=SJLTProjector(grad_dim, 4096, seed=0,
    device="cuda"))``. ``project(grads, model_id)`` takes a (batch, grad_dim) tensor or a dict of
    per-parameter gradients (batch, ...) in the order of the flattened gradient, as TRAK's
    gradient computer returns them; a dict is projected at the parameters' column offsets, on a GPU
    in one grouped launch over all of them (``sjlt.functional.sparse_jl_blocks``), never
    concatenated; gradients on another device than ``device`` move there one parameter at a time.
    Gradients may be float16, bfloat16, float32 or float64, of any batch size, with grad_dim up to
    2**62.

    - Model (checkpoint) ``m`` uses the matrix of :func:`model_seed` (seed, m), independent for
      every m; the matrix is the sparse JL matrix of sjlt (docs/spec.md) for every ``proj_type``.
    - Scale: by default the result is sqrt(proj_dim) * S g, whose squared norm is proj_dim * |g|^2
      in expectation, as with TRAK's Rademacher and Gaussian projectors (TRAKer divides by
      sqrt(grad_dim) and stores float16, and its ``lambda_reg`` assumes that scale).
      ``preserve_norm=True`` returns S g, norm-preserving like dattri's projectors.
    - The result is accumulated in float32 and returned in ``dtype``.
    - ``column_offset``: the gradients are columns [column_offset, column_offset + grad_dim) of a
      wider gradient (a rank's parameter shard); the projections of all shards sum to the whole's.
    - ``max_batch_size`` (TRAK's CudaProjector argument) is accepted and ignored: any batch works.

    The projector holds no matrix: ``free_memory`` has nothing to free.
    """

    def __init__(
        self,
        grad_dim: int,
        proj_dim: int,
        seed: int = 0,
        proj_type="sjlt",
        device=None,
        *,
        nnz: int | None = None,
        dtype: torch.dtype = torch.float32,
        preserve_norm: bool = False,
        column_offset: int = 0,
        max_batch_size: int | None = None,
        backend: str = "auto",
    ):
        # TRAK's AbstractProjector.__init__ only stores the five attributes set here.
        self.grad_dim = spec.check_dimension(grad_dim, "grad_dim")
        self.proj_dim = spec.check_dimension(proj_dim, "proj_dim")
        self.seed = spec.check_seed(seed)
        _check_proj_type(proj_type)
        self.proj_type = "sjlt"  # what S is, whatever name was passed (TRAKer records it as metadata)
        self.device = torch.device(device) if device is not None else None
        self.nnz = spec.resolve_nnz(nnz, self.proj_dim)
        if dtype not in TORCH_FLOAT_DTYPES:
            raise TypeError(f"dtype must be one of {_FLOAT_NAMES} (the dtype of projected gradients), got {dtype!r}")
        self.dtype = dtype
        self.preserve_norm = bool(preserve_norm)
        self.column_offset = F.check_column_offset(column_offset)
        self.max_batch_size = max_batch_size
        self.backend = backend

    def project(self, grads, model_id: int = 0) -> torch.Tensor:
        """(batch, proj_dim) projections of a (batch, grad_dim) tensor or a dict of (batch, ...)
        per-parameter gradients, with model ``model_id``'s matrix."""
        seed = model_seed(self.seed, model_id)
        blocks = self._blocks(grads)
        device = self.device if self.device is not None else blocks[0][1].device
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        settings = dict(seed=seed, nnz=self.nnz, column_offset=self.column_offset, backend=self.backend)
        if all(block.device == device for _, block in blocks):
            out = F.sparse_jl_blocks(blocks, self.proj_dim, **settings)  # one launch on a GPU
        else:  # moved to the device one block at a time
            out = project_gradient_blocks(blocks, self.proj_dim, device=device, **settings)
        if not self.preserve_norm:
            out *= math.sqrt(self.proj_dim)
        return out.to(self.dtype)

    def free_memory(self) -> None:
        """Nothing to free: S is regenerated from the seed on every call."""

    def _blocks(self, grads) -> list[tuple[int, torch.Tensor]]:
        """(first column, (batch, ...) gradient) pairs, checked in full before any projection."""
        if isinstance(grads, Mapping):
            if not grads:
                raise ValueError(
                    "grads is an empty dict; pass per-parameter gradients (batch, ...) or a (batch, grad_dim) tensor"
                )
            blocks, first, rows = [], 0, None
            for name, tensor in grads.items():
                block = _checked_gradient(str(name), tensor, rows)
                shape = block.shape
                rows = shape[0]
                blocks.append((first, block))
                first += block.numel() // rows if rows else math.prod(shape[1:])
            what = f"the dict's gradients hold {first} entries per example"
        elif isinstance(grads, torch.Tensor):
            if grads.dim() != 2:
                raise ValueError(
                    f"grads must be a (batch, grad_dim) tensor or a dict of per-parameter "
                    f"gradients, got a tensor of shape {tuple(grads.shape)}"
                )
            blocks, first = [(0, _gradient_matrix("grads", grads, None))], grads.shape[1]
            what = f"grads has {first} columns"
        else:
            raise TypeError(
                f"grads must be a (batch, grad_dim) tensor or a dict of per-parameter "
                f"gradients, got {type(grads).__name__}"
            )
        if first != self.grad_dim:
            raise ValueError(
                f"{what}, but this projector was built for grad_dim={self.grad_dim}; build it "
                f"with grad_dim = the number of parameters whose gradients you project (with "
                f"TRAKer's grad_wrt, only those parameters)"
            )
        return blocks

    def __repr__(self) -> str:
        return (
            f"SJLTProjector(grad_dim={self.grad_dim}, proj_dim={self.proj_dim}, seed={self.seed}, "
            f"nnz={self.nnz}, dtype={self.dtype}, preserve_norm={self.preserve_norm})"
        )


# ------------------------------------------------------------------------------------------------
# Per-example gradients, a bounded group of parameters at a time
# ------------------------------------------------------------------------------------------------


class _LossOf(torch.nn.Module):
    """``loss_fn(model, example)`` as a module whose parameters are the model's (under the prefix
    ``model.``), so that ``functional_call`` can substitute them while ``loss_fn`` calls the model
    as usual."""

    def __init__(self, model: torch.nn.Module, loss_fn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, example):
        loss = self.loss_fn(self.model, example)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            got = f"shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(
                f"loss_fn(model, example) must return a scalar (0-d) tensor for one example, "
                f"got {got}; the example has no batch dimension (add one with x[None] if the "
                f"model needs it, and reduce the loss with .sum() or [0])"
            )
        return loss


def _batch_size(batch) -> int:
    leaves = []

    def collect(node):
        if isinstance(node, torch.Tensor):
            leaves.append(node)
        elif isinstance(node, Mapping):
            for value in node.values():
                collect(value)
        elif isinstance(node, (tuple, list)):
            for value in node:
                collect(value)

    collect(batch)
    if not leaves:
        raise ValueError(
            "batch holds no tensor; pass a tensor, or a tuple, list or dict of tensors "
            "whose first dimension is the batch"
        )
    sizes = {leaf.shape[0] if leaf.dim() else None for leaf in leaves}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(
            f"every tensor of batch must have the same first (batch) dimension, got sizes "
            f"{sorted(str(s) for s in sizes)}"
        )
    return sizes.pop()


def _batch_slice(batch, start: int, stop: int):
    if isinstance(batch, torch.Tensor):
        return batch[start:stop]
    if isinstance(batch, Mapping):
        return {key: _batch_slice(value, start, stop) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_batch_slice(value, start, stop) for value in batch)
    return batch


def _selected_parameters(model: torch.nn.Module, parameters, include_frozen: bool) -> dict[str, torch.Tensor]:
    """The parameters to differentiate, in ``named_parameters()`` order (which fixes their columns)."""
    everything = dict(model.named_parameters())
    if parameters is None:
        chosen = {name: p for name, p in everything.items() if include_frozen or p.requires_grad}
    else:
        names = [parameters] if isinstance(parameters, str) else list(parameters)
        unknown = [name for name in names if name not in everything]
        if unknown:
            raise ValueError(
                f"parameters {unknown} are not among the model's named_parameters(), which start {list(everything)[:4]}"
            )
        wanted = set(names)
        chosen = {name: p for name, p in everything.items() if name in wanted}
    if not chosen:
        raise ValueError(
            "no parameter to differentiate: every parameter has requires_grad=False; pass "
            "include_frozen=True, or name the parameters with parameters=[...]"
        )
    return chosen


def _parameter_groups(params: dict[str, torch.Tensor], max_numel: int) -> list[list[str]]:
    """Consecutive names grouped so that a group holds at most ``max_numel`` elements (a larger
    parameter forms a group of its own)."""
    groups, current, size = [], [], 0
    for name, p in params.items():
        if current and size + p.numel() > max_numel:
            groups.append(current)
            current, size = [], 0
        current.append(name)
        size += p.numel()
    if current:
        groups.append(current)
    return groups


def per_example_gradients(
    model: torch.nn.Module,
    loss_fn,
    batch,
    *,
    parameters=None,
    include_frozen: bool = False,
    max_gradient_bytes: int = 1 << 30,
) -> Iterator[tuple[str, int, torch.Tensor]]:
    """Yields ``(name, column_offset, gradient)`` for every selected parameter: ``gradient`` is the
    (batch, numel) per-example gradient of ``loss_fn(model, example)`` and ``column_offset`` its
    first column in the flattened gradient of the selected parameters.

    ``loss_fn(model, example)`` returns one example's scalar loss; ``example`` is the batch (a
    tensor, or a tuple, list or dict of tensors) without its first dimension. Gradients come from
    ``torch.func`` (``vmap`` over ``grad`` through ``functional_call``) for one group of parameters
    at a time, with the rest held constant: a group's per-example gradients take at most
    ``max_gradient_bytes`` (a single larger parameter forms its own group), and each is dropped
    once consumed. Each group costs a forward and backward pass of the batch.

    ``parameters``: names to differentiate (default: those with ``requires_grad``, or all of them
    with ``include_frozen=True``), taken in ``named_parameters()`` order. Runs under
    ``torch.no_grad()`` too. Put the model in eval mode: vmap refuses random layers such as dropout.
    """
    params = _selected_parameters(model, parameters, include_frozen)
    rows = _batch_size(batch)
    wrapper = _LossOf(model, loss_fn)
    everything = {f"model.{name}": p.detach() for name, p in model.named_parameters()}
    itemsize = max(p.element_size() for p in params.values())
    max_numel = max(1, int(max_gradient_bytes) // max(1, rows * itemsize))
    offset = 0
    for group in _parameter_groups(params, max_numel):
        trainable = {f"model.{name}": params[name].detach() for name in group}
        constants = {name: p for name, p in everything.items() if name not in trainable}

        def loss_of(trainable_params, example):
            return functional_call(wrapper, {**constants, **trainable_params}, (example,))

        with torch.enable_grad():
            grads = vmap(grad(loss_of), in_dims=(None, 0))(trainable, batch)
        for name in group:
            g = grads.pop(f"model.{name}").reshape(rows, -1)  # drop each slice once consumed
            yield name, offset, g
            offset += g.shape[1]
            del g


def project_per_example_gradients(
    model: torch.nn.Module,
    loss_fn,
    batch,
    out_features: int,
    *,
    seed: int,
    nnz: int | None = None,
    parameters=None,
    include_frozen: bool = False,
    batch_chunk: int | None = None,
    max_gradient_bytes: int = 1 << 30,
    column_offset: int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    """(batch, out_features) float32: every example's loss gradient, flattened over the selected
    parameters in ``named_parameters()`` order, projected with sjlt's S of ``seed``.

    Equals ``sparse_jl(G, out_features, seed=seed, nnz=nnz)`` of the (batch, P) per-example
    gradient matrix G, which is never built: :func:`per_example_gradients` yields one parameter's
    (batch, numel) gradient at a time and :func:`project_gradient_blocks` projects it at its
    column offset. Extra memory: about ``max_gradient_bytes`` (or the largest parameter's gradients
    if larger) plus batch x out_features floats, and the model's activations for the batch.
    ``batch_chunk`` runs that many examples at a time (fewer activations, more passes).

    ``SJLTProjector(P, k, seed=s).project(grads, m)`` equals sqrt(k) times this with
    ``seed=model_seed(s, m)``.
    """
    rows = _batch_size(batch)
    chunk = rows if batch_chunk is None else spec.check_dimension(batch_chunk, "batch_chunk")
    parts = []
    for start in range(0, rows, chunk):
        part = _batch_slice(batch, start, min(start + chunk, rows))
        blocks = (
            (offset, g)
            for _, offset, g in per_example_gradients(
                model,
                loss_fn,
                part,
                parameters=parameters,
                include_frozen=include_frozen,
                max_gradient_bytes=max_gradient_bytes,
            )
        )
        parts.append(
            project_gradient_blocks(
                blocks, out_features, seed=seed, nnz=nnz, column_offset=column_offset, backend=backend
            )
        )
    return parts[0] if len(parts) == 1 else torch.cat(parts)


# ------------------------------------------------------------------------------------------------
# GraSS's signature
# ------------------------------------------------------------------------------------------------

_TABLES = ("rand_indices", "rand_signs")


class SJLTProjection(torch.nn.Module):
    """``sjlt.SJLTProjection`` with the signature of GraSS's ``sjlt`` 0.1.7 package (the PyPI
    project ``sjlt``): ``SJLTProjection(original_dim, proj_dim, c=1, threads=1024,
    fixed_blocks=84, device=None)``, ``forward(x)``, ``transpose(y)``, ``get_compression_ratio()``,
    ``get_sparsity_ratio()``, with autograd.

    - ``c`` nonzeros of +-1/sqrt(c) per column: sjlt's ``nnz``, one in each of c row blocks (GraSS
      draws c rows with replacement).
    - ``seed=None`` draws a 63-bit seed from torch's default CPU generator, so ``torch.manual_seed``
      makes it reproducible (GraSS draws its tables from the device's generator); ``seed=int``
      fixes the matrix on every device.
    - ``threads`` and ``fixed_blocks`` are GraSS's CUDA launch settings: accepted, ignored.
    - ``device=None``: "cuda" when torch sees a GPU, else "cpu" (GraSS: always "cuda"). Inputs are
      moved there, as GraSS does.
    - ``rand_indices`` (original_dim, c) int64 and ``rand_signs`` (original_dim, c) int8 are
      GraSS's tables of S. They are built only when read. While unmodified, projections run sjlt's
      kernels from the seed; once changed in place (dattri copies its own tables in) or assigned,
      projections apply the tables as they are, like GraSS. Tables are not saved in state_dict.
    """

    def __init__(
        self,
        original_dim: int,
        proj_dim: int,
        c: int = 1,
        threads: int = 1024,
        fixed_blocks: int = 84,
        device=None,
        *,
        seed: int | None = None,
        backend: str = "auto",
    ):
        super().__init__()
        self.original_dim = spec.check_dimension(original_dim, "original_dim")
        self.proj_dim = spec.check_dimension(proj_dim, "proj_dim")
        if isinstance(c, bool) or not isinstance(c, numbers.Integral) or not 1 <= c <= self.proj_dim:
            raise ValueError(f"c (nonzeros per column) must be an int in [1, proj_dim={self.proj_dim}], got {c!r}")
        self.c = int(c)
        self.threads, self.fixed_blocks = threads, fixed_blocks
        device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        # An empty buffer tracks the module's device through .to() / .cuda(), tables built or not.
        self.register_buffer("_device_anchor", torch.empty(0, device=device), persistent=False)
        if seed is None:
            seed = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
        self.seed = spec.check_seed(seed)
        self.backend = backend
        self.normalization_factor = 1.0 / math.sqrt(self.c)
        self._seeded_tables = None  # (id, _version) of each table while it holds S of the seed

    # -- GraSS's tables, built on first use ---------------------------------------------------

    def __getattr__(self, name):
        if name in _TABLES and not self._has_tables():
            self._build_tables()
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        if name in _TABLES and not self._has_tables():
            self._build_tables()  # so the assignment replaces a buffer, which moves with .to()
        super().__setattr__(name, value)

    def _has_tables(self) -> bool:
        # register_buffer asks hasattr() first: while building, the tables count as present.
        return "rand_indices" in self._buffers or self.__dict__.get("_building_tables", False)

    def _build_tables(self) -> None:
        rows, negative = reference.sparse_jl_hash(
            self.original_dim, self.proj_dim, seed=self.seed, nnz=self.c, device=self.device
        )
        signs = torch.where(negative, -1, 1).to(torch.int8)
        self.__dict__["_building_tables"] = True
        try:
            self.register_buffer("rand_indices", rows.T.contiguous(), persistent=False)
            self.register_buffer("rand_signs", signs.T.contiguous(), persistent=False)
        finally:
            del self.__dict__["_building_tables"]
        self._remember_seeded_tables()

    @property
    def device(self) -> torch.device:
        return self._device_anchor.device

    def _table_stamps(self):
        # A tensor's _version counts its in-place changes (copy_, fill_, ...): autograd's own check.
        return tuple((id(self._buffers[n]), getattr(self._buffers[n], "_version", None)) for n in _TABLES)

    def _remember_seeded_tables(self) -> None:
        self._seeded_tables = self._table_stamps()

    def _tables_are_seeded(self) -> bool:
        return "rand_indices" not in self._buffers or self._table_stamps() == self._seeded_tables

    def _custom_tables(self):
        """(indices, signs) when the tables no longer hold S of the seed, else None."""
        if self._tables_are_seeded():
            return None
        indices, signs = (self._buffers[n] for n in _TABLES)
        if indices.shape != signs.shape or indices.dim() != 2 or indices.shape[0] != self.original_dim:
            raise ValueError(
                f"rand_indices and rand_signs must both have shape (original_dim={self.original_dim}, c), "
                f"got {tuple(indices.shape)} and {tuple(signs.shape)}"
            )
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self.proj_dim):
            raise ValueError(
                f"rand_indices must lie in [0, proj_dim={self.proj_dim}); got values from "
                f"{int(indices.min())} to {int(indices.max())}"
            )
        return indices, signs

    def __getstate__(self):
        # The stamps name tensor ids, which pickling and deepcopy change: keep only the verdict.
        state = self.__dict__.copy()
        state["_seeded_tables"] = self._tables_are_seeded()
        return state

    def __setstate__(self, state):
        seeded = state.pop("_seeded_tables")
        super().__setstate__(state)
        self._seeded_tables = None  # custom tables stay custom: None matches no stamps
        if seeded and "rand_indices" in self._buffers:
            self._remember_seeded_tables()

    def _apply(self, fn, *args, **kwargs):
        seeded = self._tables_are_seeded()
        result = super()._apply(fn, *args, **kwargs)
        if seeded and "rand_indices" in self._buffers:
            self._remember_seeded_tables()  # .to() made new tensors that still hold S of the seed
        return result

    # -- projections -----------------------------------------------------------------------------

    def _check(self, x, width: int, name: str, what: str) -> torch.Tensor:
        F.check_input(x, name, complex_ok=False)
        if x.shape[-1] != width:
            raise ValueError(f"{name} must have shape (..., {what}={width}), got {tuple(x.shape)}")
        return x.to(self.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x S^T: (..., original_dim) -> (..., proj_dim), in x's dtype."""
        x = self._check(x, self.original_dim, "x", "original_dim")
        tables = self._custom_tables()
        if tables is None:
            return F.sparse_jl(x, self.proj_dim, seed=self.seed, nnz=self.c, backend=self.backend)
        indices, signs = tables
        acc = reference.accumulation_dtype(x.dtype)
        flat = x.reshape(-1, self.original_dim).to(acc)
        y = torch.zeros(flat.shape[0], self.proj_dim, dtype=acc, device=x.device)
        for t in range(indices.shape[1]):
            y = y.index_add(1, indices[:, t], flat * signs[:, t].to(acc))
        return (y / math.sqrt(indices.shape[1])).to(x.dtype).reshape(*x.shape[:-1], self.proj_dim)

    def transpose(self, y: torch.Tensor) -> torch.Tensor:
        """y S: (..., proj_dim) -> (..., original_dim), the adjoint of forward."""
        y = self._check(y, self.proj_dim, "y", "proj_dim")
        tables = self._custom_tables()
        if tables is None:
            return F.sparse_jl_transpose(y, self.original_dim, seed=self.seed, nnz=self.c, backend=self.backend)
        indices, signs = tables
        acc = reference.accumulation_dtype(y.dtype)
        flat = y.reshape(-1, self.proj_dim).to(acc)
        z = sum(flat[:, indices[:, t]] * signs[:, t].to(acc) for t in range(indices.shape[1]))
        return (z / math.sqrt(indices.shape[1])).to(y.dtype).reshape(*y.shape[:-1], self.original_dim)

    def get_compression_ratio(self) -> float:
        return self.original_dim / self.proj_dim

    def get_sparsity_ratio(self) -> float:
        """The fraction of zeros in S."""
        return 1.0 - self.c / self.proj_dim

    def get_extra_state(self):
        return {
            "original_dim": self.original_dim,
            "proj_dim": self.proj_dim,
            "c": self.c,
            "seed": self.seed,
            "spec_version": spec.SPEC_VERSION,
        }

    def set_extra_state(self, state):
        if state.get("spec_version") not in spec.sparse_jl_same_since(state["proj_dim"], state["c"]):
            raise RuntimeError(
                f"this SJLTProjection state was saved with spec version {state.get('spec_version')}, "
                f"whose matrix differs from sjlt's (spec version {spec.SPEC_VERSION}); re-create "
                f"the module with this sjlt, or load it with the sjlt release that saved it"
            )
        if (state["original_dim"], state["proj_dim"], state["c"]) != (self.original_dim, self.proj_dim, self.c):
            raise RuntimeError(
                f"SJLTProjection shape mismatch: the state is {state['original_dim']} -> "
                f"{state['proj_dim']} with c={state['c']}, this module {self.original_dim} -> "
                f"{self.proj_dim} with c={self.c}"
            )
        self.seed = spec.check_seed(state["seed"])
        for name in _TABLES:  # tables of the old seed would be stale
            self._buffers.pop(name, None)
        self._seeded_tables = None

    def extra_repr(self) -> str:
        return (
            f"original_dim={self.original_dim}, proj_dim={self.proj_dim}, c={self.c}, seed={self.seed}, "
            f"device={self.device}"
        )
