"""The one way elical-hf calls a transformers `from_pretrained`: [`load_pretrained`].

No code from a model folder or Hub repo is ever run: every tokenizer, config and model is loaded with
`trust_remote_code=False` (an `auto_map` naming a class transformers does not have is refused in one line, never
offered on a terminal), and model weights are read only from safetensors files (`use_safetensors=True`; a folder
holding only a pickled `pytorch_model.bin` is refused, because unpickling a file can run code). PEFT adapters are
loaded by `PeftModel`, which has no remote code, from `adapter_model.safetensors` only (see
[`~elical_hf.AutoModelForConfidence`]).

Model weights are loaded by [`load_model`]: a local safetensors checkpoint stored in the dtype asked for is memory-
mapped (zero copy), one stored in another dtype (the embedded default's float32 copy under the bf16 policy) is read
one tensor at a time, so the stored weights are never held whole beside the converted ones. A checkpoint that does not
hold exactly the tensors the model has (one missing, one the model does not have, one of another shape) is refused in
one line naming the file ([`refuse_other_tensors`]): transformers would fill a missing tensor with random weights.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import ExitStack
from typing import Any, TypeVar


__all__ = ["load_pretrained", "load_model", "check_safetensors_weights", "check_file_tensors", "refuse_other_tensors",
           "stored_in_other_dtype", "unwrap_peft"]

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


def _insist_on_safe_options(kwargs: dict[str, Any], weights: bool) -> None:
    """Set `trust_remote_code=False` (and, with `weights`, `use_safetensors=True`) in `kwargs`; one `ValueError` when
    `kwargs` asks for the unsafe value."""
    for option, safe in (_SAFE_WEIGHT_OPTIONS if weights else _SAFE_OPTIONS).items():
        if kwargs.get(option, safe) is not safe:
            raise ValueError(f"`{option}={kwargs[option]!r}` is not supported: elical-hf never runs code from a model "
                             "folder or Hub repo, and loads only safetensors weights.")
        kwargs[option] = safe


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
    _insist_on_safe_options(kwargs, weights)
    if weights:
        check_safetensors_weights(name, kwargs.get("config"))
    try:
        return load(name, **kwargs)
    except (OSError, ValueError) as error:
        message = _one_line(name, error, weights)
        if message is None:
            raise
        raise ValueError(message) from None


def unwrap_peft(model: Any) -> Any:
    """The model a PEFT wrapper holds (`model.get_base_model()`: for a
    [`~elical_hf.PeftModelForConfidence`], the confidence model with its head and `confidence_config`), or `model`
    itself when it is not wrapped."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


_SAFETENSORS_FLOATS = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
"""safetensors' names of the floating-point dtypes (headers), as torch names them."""


def safetensors_files(folder: str) -> list[str]:
    """The safetensors weights files of a local model folder: `model.safetensors`, or the shards its index names
    (empty when it has neither)."""
    single, index = (os.path.join(folder, name) for name in SAFE_WEIGHT_FILES)
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as handle:
            shards = dict.fromkeys(json.load(handle).get("weight_map", {}).values())
        return [os.path.join(folder, shard) for shard in shards]
    return []


def stored_in_other_dtype(name_or_path: str | os.PathLike, *, dtype: Any = None, **kwargs: Any) -> list[str]:
    """
    The safetensors files of the local model folder `name_or_path` when a floating-point tensor in them is stored in
    another dtype than `dtype` (they are read tensor by tensor by [`load_model`]), else `[]`: a Hub id, a folder stored
    in `dtype`, a `dtype` that is not a `torch.dtype`, and loads that place or convert weights themselves (`device_map`,
    `quantization_config`, `gguf_file` or `state_dict` among the other `from_pretrained` keyword arguments, `kwargs`).
    Only the files' headers are read.
    """
    import torch
    from safetensors import safe_open

    name = os.fspath(name_or_path)
    if not isinstance(dtype, torch.dtype) or not os.path.isdir(name):
        return []
    if any(kwargs.get(option) is not None for option in ("device_map", "quantization_config", "gguf_file", "state_dict")):
        return []
    files = safetensors_files(name)
    stored = str(dtype).removeprefix("torch.")
    for file in files:
        with safe_open(file, framework="pt") as handle:  # the header only: no tensor is read
            dtypes = {handle.get_slice(key).get_dtype() for key in handle.keys()}
        if any(_SAFETENSORS_FLOATS.get(code, stored) != stored for code in dtypes):
            return files
    return []


def _concrete_class(model_class: Any, config: Any) -> type | None:
    """The model class `model_class.from_pretrained` builds for `config`: itself, or for an Auto class the one class
    its mapping names for `config` (`None` where the Auto class would choose among several or adapt the config)."""
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    if not (isinstance(model_class, type) and issubclass(model_class, _BaseAutoModelClass)):
        return model_class
    concrete = model_class._model_mapping.get(type(config), None)
    return concrete if isinstance(concrete, type) and getattr(concrete, "config_class", None) is type(config) else None


def _listed(keys: Collection[str], limit: int = 3) -> str:
    names = sorted(keys)
    return ", ".join(names[:limit]) + (", …" if len(names) > limit else "")


def refuse_other_tensors(file: str, missing: Collection[str], unexpected: Collection[str],
                         mismatched: Collection[tuple[str, Sequence[int], Sequence[int]]], *, owner: str,
                         advice: str) -> None:
    """Refuse, in one `ValueError` naming `file`, a weights file that does not hold exactly the tensors `owner` ("the
    model", "the adapter") has: `missing` (keys it lacks), `unexpected` (keys `owner` does not have) and `mismatched`
    (`(key, shape in the file, shape in owner)`); `advice` ends the message. Nothing is refused when all three are
    empty."""
    problems = []
    if missing:
        problems.append(f"does not hold {len(missing)} tensor(s) {owner} has ({_listed(missing)})")
    if unexpected:
        problems.append(f"holds {len(unexpected)} tensor(s) {owner} does not have ({_listed(unexpected)})")
    if mismatched:
        shapes = [f"{key}: {list(found)} in the file, {list(wanted)} in {owner}"
                  for key, found, wanted in sorted(mismatched, key=lambda entry: entry[0])[:3]]
        problems.append(f"holds {len(mismatched)} tensor(s) of the wrong shape ({'; '.join(shapes)}"
                        f"{', …' if len(mismatched) > 3 else ''})")
    if problems:
        raise ValueError(f"{file} {' and '.join(problems)}: {advice}")


def check_file_tensors(file: str, expected: Mapping[str, Sequence[int]], *, owner: str, advice: str,
                       finite: bool = False) -> None:
    """Refuse ([`refuse_other_tensors`]) the safetensors `file` unless it holds exactly the tensors of `expected` (key
    -> shape), in their shapes; only the file's header is read. With `finite`, every tensor is read too and one holding
    NaN or infinite values is refused in one `ValueError` naming the file (a head of NaN weights makes every confidence
    NaN, so a gate abstains on everything); for small files (an adapter)."""
    import torch
    from safetensors import safe_open

    with safe_open(file, framework="pt") as handle:
        stored = {key: list(handle.get_slice(key).get_shape()) for key in handle.keys()}
        refuse_other_tensors(
            file, expected.keys() - stored.keys(), stored.keys() - expected.keys(),
            [(key, stored[key], list(shape)) for key, shape in expected.items()
             if key in stored and stored[key] != list(shape)], owner=owner, advice=advice)
        if finite:
            bad = sorted(key for key in stored if not bool(torch.isfinite(handle.get_tensor(key)).all()))
            if bad:
                raise ValueError(f"{file} holds {len(bad)} tensor(s) with NaN or infinite values ({_listed(bad)}): "
                                 f"{owner} would give NaN confidences. The file is damaged, or was saved from a run "
                                 "that diverged; save the model again from a sound run.")


def _weights_file(name: str) -> str:
    """How a model's weights are named in errors: its `model.safetensors`, the shards' index, or the Hub id."""
    files = safetensors_files(name) if os.path.isdir(name) else []
    if len(files) == 1:
        return files[0]
    return os.path.join(name, SAFE_WEIGHT_FILES[1]) if files else f"{name} (its safetensors weights)"


def _checked(name: str, loaded: tuple[Any, dict[str, Any]]) -> Any:
    """The model of a `from_pretrained(..., output_loading_info=True)`, once its load report shows every tensor of the
    model read from the checkpoint and none left over (the keys the model class ignores aside: a confidence model's
    head, a causal LM's LM head) and none of another shape; else one `ValueError` naming the weights file."""
    model, info = loaded
    refuse_other_tensors(
        _weights_file(name), info.get("missing_keys") or (), info.get("unexpected_keys") or (),
        info.get("mismatched_keys") or (), owner="the model",
        advice="a model loaded from it is not the checkpoint's model (transformers fills a tensor it lacks, or holds in "
               "another shape, with random weights, and drops the others). Use a complete copy of the model, whose "
               "config.json describes the weights it holds.")
    return model


def load_model(model_class: Any, name_or_path: str | os.PathLike, *, config: Any, **kwargs: Any) -> Any:
    r"""
    Load a model's weights with [`load_pretrained`] (no remote code, safetensors only), reading a checkpoint stored in
    another dtype one tensor at a time, and refusing one that does not hold exactly the model's tensors (one
    `ValueError` naming the file and the tensors missing, left over or of another shape: transformers would only
    report them, and fill the missing ones with random weights).

    transformers memory-maps a safetensors file and keeps it mapped until every tensor is loaded: loading a float32
    checkpoint in bfloat16 holds the whole float32 file in memory beside the bfloat16 weights (the embedded default
    model: 513 MiB mapped beside 257 MiB). Here such a checkpoint ([`stored_in_other_dtype`]) is handed to
    transformers as a state dict whose tensors are read by `pread` when transformers converts them, so only the
    tensors being converted are held twice; the loaded model is the same (tensors, config and generation config).

    Args:
        model_class (`type`):
            A transformers model class: an Auto class (resolved to the concrete class for `config`) or a concrete one.
        name_or_path (`str` or `os.PathLike`):
            A Hub id or a local folder.
        config ([`~transformers.PretrainedConfig`]):
            The model's config, loaded with [`load_pretrained`].
        kwargs:
            Passed to `from_pretrained` (`dtype`, `device_map`, ...).

    Returns:
        The loaded model.
    """
    files = stored_in_other_dtype(name_or_path, **kwargs)
    concrete = _concrete_class(model_class, config) if files else None
    kwargs.update(output_loading_info=True, ignore_mismatched_sizes=True)  # reported, then refused by `_checked`
    if concrete is None:
        return _checked(os.fspath(name_or_path), load_pretrained(model_class.from_pretrained, name_or_path,
                                                                 weights=True, config=config, **kwargs))
    from safetensors import safe_open
    from transformers import GenerationConfig

    name = os.fspath(name_or_path)
    _insist_on_safe_options(kwargs, weights=True)
    check_safetensors_weights(name, config)
    kwargs.pop("use_safetensors")  # the state dict below is read from the safetensors files themselves
    generation = os.path.join(name, "generation_config.json")
    if os.path.isfile(generation) and kwargs.get("generation_config") is None:
        kwargs["generation_config"] = load_pretrained(GenerationConfig.from_pretrained, name)
    with ExitStack() as stack:
        handles = [stack.enter_context(safe_open(file, framework="pt", backend="pread")) for file in files]
        state_dict = {key: handle.get_slice(key) for handle in handles for key in handle.keys()}
        model = _checked(name, concrete.from_pretrained(None, config=config, state_dict=state_dict, **kwargs))
    model.name_or_path = model.config._name_or_path = name  # transformers records the folder: so does this path
    return model
