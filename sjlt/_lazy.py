"""Lazy public names for a package (PEP 562): imported from their submodule on first use."""

from __future__ import annotations

import importlib


def lazy_names(package: str, namespace: dict, table: dict[str, str]):
    """(__getattr__, __dir__) for ``package`` whose ``table`` maps each public name to the module
    that defines it (the module itself when the name is the module's own, ``package.name``)."""

    def __getattr__(name: str):
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(target)
        value = module if target == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__():
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
