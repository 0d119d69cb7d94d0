"""The untied LM head of a base checkpoint, read for the gate's answers (a confidence model's class drops the head when
it loads), checked before use: present, and of the shape its config says (`vocab_size` by `hidden_size`). A head of
another width would decode over a cut (or padded) vocabulary, silently."""

from __future__ import annotations

import json
from typing import Any

import torch


LM_HEAD = "lm_head.weight"


def _head_file(path: str) -> str:
    """The safetensors file of the checkpoint at `path` (a folder or a Hub id) that holds [`LM_HEAD`]: by the index of
    a sharded checkpoint, else `model.safetensors`; a `ValueError` naming the index when it lists no LM head."""
    from transformers.utils import cached_file

    index = cached_file(path, "model.safetensors.index.json", _raise_exceptions_for_missing_entries=False)
    if index is None:
        return cached_file(path, "model.safetensors")
    with open(index, encoding="utf-8") as handle:
        weight_map = json.load(handle).get("weight_map") or {}
    if LM_HEAD not in weight_map:
        raise ValueError(f"{index} lists no {LM_HEAD}, and the model's config does not tie it to the input "
                         "embeddings (tie_word_embeddings): the checkpoint has no LM head to answer with.")
    return cached_file(path, weight_map[LM_HEAD])


def read_lm_head(config: Any) -> torch.Tensor:
    """
    The base checkpoint's untied LM head weight, checked against `config`.

    Args:
        config (`PretrainedConfig`): The model's config (`_name_or_path` names the base checkpoint; its text config's
            `vocab_size` and `hidden_size` give the head's shape).

    Returns:
        `torch.Tensor`: the weight, `(vocab_size, hidden_size)`, as stored.

    Raises:
        `ValueError`: one line naming the file, when the checkpoint has no `lm_head.weight` or one of another shape.
    """
    from safetensors import safe_open

    from .default_model import resolve_model_path

    path, _ = resolve_model_path(config._name_or_path)
    shard = _head_file(path)
    text = config.get_text_config()
    expected = (text.vocab_size, text.hidden_size)
    with safe_open(shard, framework="pt") as tensors:
        if LM_HEAD not in tensors.keys():
            raise ValueError(f"{shard} has no {LM_HEAD}, and the model's config does not tie it to the input "
                             "embeddings (tie_word_embeddings): the checkpoint has no LM head to answer with.")
        shape = tuple(tensors.get_slice(LM_HEAD).get_shape())
        if shape != expected:
            raise ValueError(f"{shard}: {LM_HEAD} has shape {list(shape)}, but the config says vocab_size "
                             f"{expected[0]} by hidden_size {expected[1]}: the checkpoint does not match its config.")
        return tensors.get_tensor(LM_HEAD)
