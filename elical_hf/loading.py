"""The one way elical-hf calls a transformers `from_pretrained`: [`load_pretrained`].

No code from a model folder or Hub repo is ever run: every tokenizer, config and model is loaded with
`trust_remote_code=False` (an `auto_map` naming a class transformers does not have is refused in one line, never
offered on a terminal), and model weights are read only from safetensors files (`use_safetensors=True`; a folder
holding only a pickled `pytorch_model.bin` is refused, because unpickling a file can run code). PEFT adapters are
loaded by `PeftModel`, which has no remote code, from `adapter_model.safetensors` only (see
[`~elical_hf.AutoModelForConfidence`]).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any, TypeVar


__all__ = ["load_pretrained", "check_safetensors_weights"]

T = TypeVar("T")

SAFE_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
"""The weights files of a local model folder that [`load_pretrained`] reads (a single file or a sharded index)."""

PICKLED_WEIGHT_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
"""Weights files that are pickles: unpickling one can run code, so they are never loaded."""

_SAFE_OPTIONS = {"trust_remote_code": False}
_SAFE_WEIGHT_OPTIONS = {**_SAFE_OPTIONS, "use_safetensors": True}


def check_safetensors_weights(name_or_path: str | os.PathLike, config: Any = None) -> None:
    """Refuse, in one `ValueError` naming the folder, a local model folder whose weights are only pickles (a
    `pytorch_model.bin`), and a `config` whose `transformers_weights` names a file that is not safetensors
    (transformers would read an `adapter_model.bin` named there even with `use_safetensors=True`). A Hub repo's files
    are checked by transformers (`use_safetensors=True`, translated by [`load_pretrained`])."""
    name = os.fspath(name_or_path)
    explicit = getattr(config, "transformers_weights", None)
    if explicit is not None and not str(explicit).endswith((".safetensors", ".safetensors.index.json")):
        raise ValueError(
            f"{name}: its config.json names the weights file {explicit!r} (`transformers_weights`), which is not "
            "safetensors: elical-hf loads only safetensors weights, because unpickling a file can run code."
        )
    if not os.path.isdir(name) or any(os.path.isfile(os.path.join(name, file)) for file in SAFE_WEIGHT_FILES):
        return
    pickled = sorted({os.path.basename(path) for pattern in PICKLED_WEIGHT_PATTERNS
                      for path in glob.glob(os.path.join(glob.escape(name), pattern))})
    if pickled:
        raise ValueError(
            f"{name} holds only pickled weights ({', '.join(pickled)}), no model.safetensors: elical-hf loads only "
            "safetensors weights, because unpickling a file can run code. Use a copy of the model saved as safetensors."
        )


def _one_line(name: str, error: BaseException, weights: bool) -> str | None:
    """The one-line message for an error of transformers' loaders that would print several lines (and advise
    `trust_remote_code=True` or `use_safetensors=False`), else `None`."""
    message = str(error)
    if "trust_remote_code=True" in message:
        return (f"{name} needs its own Python code to load (an `auto_map` in its config.json or tokenizer_config.json "
                "names a class transformers does not have): elical-hf never runs code from a model folder or Hub "
                "repo; use a model whose architecture and tokenizer transformers supports.")
    if weights and "cannot be loaded with `safetensors`" in message:
        return (f"{name} has no model.safetensors (only pickled weights?): elical-hf loads only safetensors weights, "
                "because unpickling a file can run code. Use a copy of the model saved as safetensors.")
    if message.startswith("The checkpoint you are trying to load has model type"):
        return f"{name}: {message.splitlines()[0]}"
    return None


def load_pretrained(load: Callable[..., T], name_or_path: str | os.PathLike, *, weights: bool = False,
                    **kwargs: Any) -> T:
    r"""
    Call a transformers loader, `load(name_or_path, **kwargs)` (e.g. `AutoTokenizer.from_pretrained`), without ever
    running code from the folder or repo.

    Args:
        load (`Callable`):
            The `from_pretrained` of a tokenizer, config or model class.
        name_or_path (`str` or `os.PathLike`):
            A Hub id or a local folder.
        weights (`bool`, *optional*, defaults to `False`):
            `load` reads model weights: only safetensors ones ([`check_safetensors_weights`], `use_safetensors=True`).
            Pass the model's `config` (loaded with `load_pretrained`) for its `transformers_weights` to be checked too.
        kwargs:
            Passed to `load`; `trust_remote_code` (and, with `weights`, `use_safetensors`) may only repeat the safe
            value.

    Returns:
        What `load` returns. An `auto_map` that needs its own code, or a folder or repo with only pickled weights, is
        one `ValueError` naming `name_or_path`, never a prompt on the terminal.
    """
    name = os.fspath(name_or_path)
    for option, safe in (_SAFE_WEIGHT_OPTIONS if weights else _SAFE_OPTIONS).items():
        if kwargs.get(option, safe) is not safe:
            raise ValueError(f"`{option}={kwargs[option]!r}` is not supported: elical-hf never runs code from a model "
                             "folder or Hub repo, and loads only safetensors weights.")
        kwargs[option] = safe
    if weights:
        check_safetensors_weights(name, kwargs.get("config"))
    try:
        return load(name, **kwargs)
    except (OSError, ValueError) as error:
        message = _one_line(name, error, weights)
        if message is None:
            raise
        raise ValueError(message) from None
