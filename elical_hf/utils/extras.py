"""Optional extras: import the packages of one (`judges`, `plots`, `openai`, `gguf`, `serve`, `langchain`) or say in one
line how to install them. The core (`pip install elical-hf`) trains, scores and evaluates; `make install` and CI
install every extra (`[dev]`)."""

from __future__ import annotations

import importlib
from types import ModuleType


EXTRAS: dict[str, tuple[str, ...]] = {
    "judges": ("sentence_transformers", "rouge_score"),
    "plots": ("matplotlib",),
    "openai": ("openai", "httpx"),
    "gguf": ("gguf",),
    "serve": ("fastapi", "uvicorn"),
    "langchain": ("langchain_core",),
}
"""Extra name -> the modules it provides (the `[options.extras_require]` of setup.cfg)."""


class MissingExtraError(ImportError):
    """An optional extra is not installed; the message is the one line that says how to install it."""


def require_extra(extra: str, feature: str, modules: tuple[str, ...] | None = None) -> list[ModuleType]:
    """
    Import the modules of the optional `extra`, or raise [`MissingExtraError`] naming what is missing and the
    install command.

    Args:
        extra (`str`): A key of [`EXTRAS`].
        feature (`str`): What needs them, for the message (e.g. `"elical-hf serve"`).
        modules (`tuple[str, ...]`, *optional*): Only these of the extra's modules (the lexical judge needs
            `rouge_score`, not `sentence_transformers`); default all.

    Returns:
        `list[ModuleType]`: the imported modules, in the order asked for.
    """
    imported, missing = [], []
    for name in modules or EXTRAS[extra]:
        try:
            imported.append(importlib.import_module(name))
        except ImportError:
            missing.append(name.replace("_", "-"))
    if missing:
        raise MissingExtraError(f"{feature} needs {' and '.join(missing)}: pip install \"elical-hf[{extra}]\"")
    return imported
