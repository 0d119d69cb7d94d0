"""Lazy package attributes (PEP 562): a package names its public objects and the modules defining them; each module is
imported on first access, so importing the package (and the `elical-hf` command line) stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(
    package: str, namespace: dict[str, Any], modules: dict[str, tuple[str, ...]]
) -> tuple[Callable, Callable]:
    """`(__getattr__, __dir__)` for the package `package` whose globals are `namespace`: `modules` maps each
    (relative) module to the public names it defines."""
    names = {name: module for module, defined in modules.items() for name in defined}

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name], package), name)
            namespace[name] = value  # later accesses skip this function
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
