"""The ``torch.ops.sjlt`` namespace: one ``torch.library.Library`` that every op file registers into.

Ops are defined with ``Library.define`` / ``Library.impl`` rather than the ``custom_op``
decorator: that decorator runs each call through extra Python layers (a dynamo-disable wrapper
among them, which imports ``torch._dynamo`` on the first call), costing tens of µs per call on
launch-bound inputs. The registrations are the same ones ``custom_op`` makes: a
CompositeExplicitAutograd kernel, a fake kernel for tracing, and ``register_autograd``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

LIBRARY = torch.library.Library("sjlt", "DEF")  # noqa: TOR901  (the namespace's only definition)

#: Autocast casts floating tensors to its dtype except float64, as ``F.linear`` does
#: (ATen's ``cached_cast`` skips double).
_AUTOCAST_ELIGIBLE = (torch.float32, torch.float16, torch.bfloat16)


def define(name: str, schema: str, kernel: Callable, fake: Callable) -> torch._ops.OpOverload:
    """Defines ``sjlt::name(schema)`` with one kernel for every device and a fake kernel."""
    LIBRARY.define(name + schema)
    LIBRARY.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"sjlt::{name}", fake, lib=LIBRARY)
    return getattr(torch.ops.sjlt, name).default


def register_autocast_like_linear(op: torch._ops.OpOverload, device_types=("cuda", "cpu")) -> None:
    """Under ``torch.autocast``, run ``op`` in the autocast dtype, as ``F.linear`` does.

    ``torch.library.register_autocast`` casts to one dtype fixed at registration; ``F.linear``'s
    policy (lower_precision_fp) casts to whatever dtype the active autocast region asks for. This
    registers that policy on the same dispatch keys: the C++ Autocast<Device> key for eager calls
    and the matching Python kernel for tracing (``torch.compile``).
    """
    for device_type in device_types:
        key_name = "Autocast" + torch._C._dispatch_key_for_device(device_type)
        key = getattr(torch._C.DispatchKey, key_name)

        def autocast_kernel(*args, _device_type=device_type, _key=key):
            dtype = torch.get_autocast_dtype(_device_type)
            args = tuple(
                arg.to(dtype)
                if isinstance(arg, torch.Tensor) and arg.dtype in _AUTOCAST_ELIGIBLE and arg.device.type == _device_type
                else arg
                for arg in args
            )
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_key)):
                return op(*args)

        op.py_impl(key)(autocast_kernel)
        LIBRARY.impl(
            op.name().split("::")[1],
            lambda keyset, *args, _kernel=autocast_kernel: _kernel(*args),
            key_name,
            with_keyset=True,
        )
