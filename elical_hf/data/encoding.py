"""Questions into model inputs, for scoring as for training: the tokenizer (with a pad token), each question
rendered with the model's prompt and tokenized, token id lists padded into a batch, and batches of similar lengths.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch

from ..settings.configuration import ConfidenceConfig
from ..utils.files import check_json_file
from ..settings.prompts import check_prompt_texts


__all__ = [
    "TOKENIZER_CONFIG_NAME", "TOKENIZER_JSON_FILES", "encode_prompts", "ensure_pad_token", "length_batches",
    "load_tokenizer", "pad_batch", "read_tokenizer",
]

TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
TOKENIZER_JSON_FILES = ("tokenizer.json", TOKENIZER_CONFIG_NAME, "special_tokens_map.json", "added_tokens.json",
                        "vocab.json", "chat_template.json", "config.json")
"""The JSON files of a folder that `AutoTokenizer.from_pretrained` may read."""

logger = logging.getLogger(__name__)


def ensure_pad_token(tokenizer: Any) -> Any:
    """Give a tokenizer without a pad token one (EOS, else UNK, else token 0).

    Which token pads does not matter: rows are pooled and attended by the attention mask, never by pad id.
    """
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        elif tokenizer.unk_token is not None:
            tokenizer.pad_token = tokenizer.unk_token
        else:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(0)
    return tokenizer


def load_tokenizer(name_or_path: str | os.PathLike, fallback: Any = None, **kwargs: Any) -> Any:
    """The tokenizer of `name_or_path` (a Hub id or folder), with a pad token ([`ensure_pad_token`]).

    With `fallback`, `name_or_path` is a saved folder that may hold no tokenizer (no `tokenizer_config.json`: an
    adapter saved without one); the tokenizer then comes from `fallback`, a Hub id or folder (the base model), or a
    tokenizer already loaded. `kwargs` go to `AutoTokenizer.from_pretrained`, through
    [`~elical_hf.utils.loading.load_pretrained`] (no code from the folder or repo is run).
    """
    if fallback is not None and not os.path.isfile(os.path.join(name_or_path, TOKENIZER_CONFIG_NAME)):
        if not isinstance(fallback, (str, os.PathLike)):
            return ensure_pad_token(fallback)
        name_or_path = fallback
    return ensure_pad_token(read_tokenizer(name_or_path, **kwargs))


def read_tokenizer(name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
    """The tokenizer of `name_or_path` (a Hub id or folder) as it is saved (`AutoTokenizer.from_pretrained` through
    [`~elical_hf.utils.loading.load_pretrained`]: no code from the folder or repo is run); when it does not load and a
    tokenizer file of the folder ([`TOKENIZER_JSON_FILES`]) is not JSON, one `ValueError` naming that file, its line
    and column instead of the loader's error (which names none)."""
    from transformers import AutoTokenizer

    from ..utils.loading import load_pretrained

    try:
        return load_pretrained(AutoTokenizer.from_pretrained, name_or_path, **kwargs)
    except Exception:
        if os.path.isdir(name_or_path):
            for name in TOKENIZER_JSON_FILES:
                if os.path.isfile(os.path.join(name_or_path, name)):
                    check_json_file(os.path.join(name_or_path, name))
        raise


def encode_prompts(questions: Sequence[str], tokenizer: Any, config: ConfidenceConfig) -> list[list[int]]:
    """Render each question with `config` and tokenize it, keeping the last `config.max_length` tokens (all of them
    when it is `None`); one warning counts the prompts that were cut. A question no tokenizer can read (an unpaired
    surrogate) is a `ValueError` naming its row ([`~elical_hf.settings.prompts.check_prompt_texts`])."""
    check_prompt_texts(questions, [f"question row {i}" for i in range(len(questions))])
    texts = [config.format_prompt(question, tokenizer) for question in questions]
    input_ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    limit = config.max_length
    if limit is None:
        return [list(ids) for ids in input_ids]
    cut = sum(len(ids) > limit for ids in input_ids)
    if cut:
        logger.warning(
            "%d of %d prompts are longer than max_length=%d tokens (the longest: %d) and were cut from the left (their "
            "start, with the instruction, is lost): raise `confidence_config.max_length` or shorten the questions.",
            cut, len(input_ids), limit, max(len(ids) for ids in input_ids),
        )
    return [list(ids[-limit:]) for ids in input_ids]


def pad_batch(
    sequences: Sequence[Sequence[int]], tokenizer: Any, device: torch.device | str | None = None
) -> dict[str, torch.Tensor]:
    """Pad token id lists on the tokenizer's `padding_side` into `input_ids` and `attention_mask` tensors."""
    ensure_pad_token(tokenizer)
    length = max(len(ids) for ids in sequences)
    input_ids = torch.full((len(sequences), length), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, ids in enumerate(sequences):
        span = slice(length - len(ids), length) if tokenizer.padding_side == "left" else slice(0, len(ids))
        input_ids[row, span] = torch.as_tensor(list(ids), dtype=torch.long)
        attention_mask[row, span] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


def length_batches(lengths: Sequence[int], max_rows: int, max_tokens: int, shared: int = 0) -> list[list[int]]:
    """Indices of `lengths` grouped into batches, longest first: each batch holds at most `max_rows` sequences and at
    most `max_tokens` padded tokens past the first `shared` (a prefix run once per batch), except that a sequence too
    long for the budget still gets a batch of its own. Batches of similar lengths carry little padding, and a token
    budget keeps a pass's activations small (on CPU, 32 prompts of 98 new tokens took 3-4x longer per token than
    batches of ~800 tokens: docs/benchmarks.md)."""
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"`max_rows` and `max_tokens` must be >= 1, got {max_rows} and {max_tokens}.")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        batch = batches[-1] if batches else None
        if batch and len(batch) < max_rows and (len(batch) + 1) * max(lengths[batch[0]] - shared, 1) <= max_tokens:
            batch.append(i)
        else:
            batches.append([i])
    return batches
