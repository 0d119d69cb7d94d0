"""Optional extras: import the packages of one (`serve`, `langchain`) or say in one line how to install them."""

from __future__ import annotations

import importlib
from types import ModuleType


EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "uvicorn"),
    "langchain": ("langchain_core",),
}
"""Extra name -> the modules it provides (the `[options.extras_require]` of setup.cfg)."""


class MissingExtraError(ImportError):
    """An optional extra is not installed; the message is the one line that says how to install it."""


def require_extra(extra: str, feature: str) -> list[ModuleType]:
    """
    Import the modules of the optional `extra`, or raise [`MissingExtraError`] naming what is missing and the
    install command.

    Args:
        extra (`str`): A key of [`EXTRAS`].
        feature (`str`): What needs them, for the message (e.g. `"elical-hf serve"`).

    Returns:
        `list[ModuleType]`: the imported modules, in the order of `EXTRAS[extra]`.
    """
    modules, missing = [], []
    for name in EXTRAS[extra]:
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            missing.append(name.replace("_", "-"))
    if missing:
        raise MissingExtraError(f"{feature} needs {' and '.join(missing)}: pip install \"elical-hf[{extra}]\"")
    return modules
