"""What a saved confidence model says it was trained on, checked against what it is loaded with.

An adapter only works on the base model it was trained on, scored with the prompts it was trained on. A saved model
records both (`confidence_config.json`: `base_model_name_or_path`, `base_model_signature`, the chat template in its
tokenizer files), and [`~elical_hf.AutoModelForConfidence`] checks them here before and after the base loads: which
base to load ([`base_of_saved_model`]), that the loaded base is the one it was trained on ([`check_loaded_base`]), and
that the tokenizer still renders its prompts as in training ([`check_saved_chat_template`]). Each problem is one
`ValueError` (or `FileNotFoundError`) line that says what to do.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from ..utils.files import looks_local
from .hub_ids import hub_id_of_local_copy, is_hub_id


__all__ = ["base_of_saved_model", "check_loaded_base", "check_requested_base", "check_saved_chat_template"]

logger = logging.getLogger(__name__)


def base_of_saved_model(folder: str, trained_on: str | None, requested: str | None) -> str:
    """
    The base model to load the adapter in `folder` onto: `requested` (`base_model_name_or_path=`), else the one it
    was trained on (`trained_on`, from its `confidence_config.json` or `adapter_config.json`).

    Raises:
        `ValueError`: no base is named, the recorded base folder is not there any more, or `requested` is another Hub
            model ([`check_requested_base`]).
        `FileNotFoundError`: `requested` is a path that is not there.
    """
    base = requested or trained_on
    if base is None:
        raise ValueError(f"{folder} does not name its base model; pass `base_model_name_or_path=`.")
    if not os.path.isdir(base) and (looks_local(base) or not is_hub_id(base)):  # a path, not there
        if requested is not None:
            raise FileNotFoundError(2, "No such model folder", base)
        raise ValueError(
            f"{folder} was trained on the base model in the folder {base}, which is not there any more (moved or "
            "deleted?). Pass the folder it is in now as `base_model_name_or_path=`, or set "
            f"`base_model_name_or_path` in {os.path.join(folder, CONFIDENCE_CONFIG_NAME)} to it."
        )
    check_requested_base(folder, trained_on, requested)
    return base


def check_requested_base(folder: str, trained_on: str | None, requested: str | None) -> None:
    """Refuse a base model that is another Hub model than the one the adapter was trained on.

    A local folder is accepted as the base (a copy of the same model, e.g. downloaded elsewhere); its architecture is
    checked after loading ([`check_loaded_base`]). A Hub id, or a folder known to be a copy of one (a Hub cache
    snapshot, the dequantized embedded default), must name the adapter's own base model.
    """
    if requested is None or trained_on is None or not is_hub_id(trained_on):
        return
    if os.path.isdir(requested):
        known = hub_id_of_local_copy(requested)
        asked = known[0] if known is not None else None
    else:
        asked = requested if is_hub_id(requested) else None
    if asked is not None and asked.lower() != trained_on.lower():
        raise ValueError(
            f"The adapter in {folder} was trained on {trained_on!r}, but its base model was asked to be {asked!r}: "
            "an adapter only works on the base model it was trained on. Load it without `base_model_name_or_path`, "
            f"or pass a local folder that holds the weights of {trained_on!r}."
        )


def check_loaded_base(folder: str, saved: ConfidenceConfig, loaded: ConfidenceConfig, base: str) -> None:
    """Refuse a loaded base whose architecture (`base_model_signature`) is not the one the adapter in `folder` was
    trained on, and warn when it is loaded onto another base than the recorded one (a local copy)."""
    expected, found = saved.base_model_signature, loaded.base_model_signature
    if expected is not None and expected != found:
        raise ValueError(
            f"The adapter in {folder} was trained on {saved.base_model_name_or_path!r} {expected}, "
            f"but the base {base!r} is {found}. Load it onto the base it was trained on."
        )
    if base != saved.base_model_name_or_path:
        logger.warning("Loading an adapter trained on %s onto %s.", saved.base_model_name_or_path, base)


def check_saved_chat_template(folder: str, saved: ConfidenceConfig, base_tokenizer: Any, tokenizer: Any,
                              base: str) -> None:
    """Refuse a saved model whose folder lost the chat template it was trained with (its tokenizer has none, its base
    model's has one): scoring with another template gives other confidences."""
    if saved.use_chat_template and base_tokenizer.chat_template and not tokenizer.chat_template:
        raise ValueError(
            f"{folder} holds a tokenizer without its chat template (no chat_template.jinja), but the model was "
            f"trained on chat-templated prompts: scoring with another template gives other confidences. Put the "
            f"chat_template.jinja it was trained with back into {folder} (from its base model {base!r} if it was "
            "trained with that one's)."
        )
