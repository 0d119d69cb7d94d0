"""Reasoning blocks: the `<think>...</think>` a reasoning model writes before its answer (Qwen3 with thinking on,
DeepSeek-R1 and its distills), taken out before an answer or a judge's reply is judged.

A block counts from `<think>` to the next `</think>`. A text that starts inside a block (the template opened it in
the prompt, as DeepSeek-R1's does) loses everything up to its first `</think>`; a block never closed (the reasoning
was cut by `max_new_tokens` before any answer) leaves nothing of the text after its `<think>`.
"""

from __future__ import annotations

import re


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_BLOCK = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.DOTALL)


def has_thinking(text: str | None) -> bool:
    """Whether `text` holds a reasoning tag."""
    return isinstance(text, str) and (THINK_OPEN in text or THINK_CLOSE in text)


def unfinished_thinking(text: str | None) -> bool:
    """Whether `text` opens a reasoning block it never closes (the answer was cut off while still reasoning)."""
    return isinstance(text, str) and THINK_OPEN in _BLOCK.sub("", text)


def strip_thinking(text: str | None) -> str | None:
    """`text` without its reasoning blocks, stripped of surrounding whitespace; a text without a tag (or `None`) is
    returned as it is."""
    if not has_thinking(text):
        return text
    head, close, tail = text.partition(THINK_CLOSE)
    if close and THINK_OPEN not in head:  # opened in the prompt: the text starts inside the block
        text = tail
    text = _BLOCK.sub("", text)
    return text.split(THINK_OPEN, 1)[0].strip()


RESPONSE_FIELDS = ("greedy_response", "sampling_response")
"""The record fields that hold the model's answers (HonestyBench: the greedy one may be a one-element list)."""


def _stripped(value):
    if isinstance(value, (list, tuple)):
        return [strip_thinking(item) if isinstance(item, str) else item for item in value]
    return strip_thinking(value) if isinstance(value, str) else value


def without_thinking(records: list[dict]) -> tuple[list[dict], int] | None:
    """Shallow copies of `records` whose answers ([`RESPONSE_FIELDS`]) have no reasoning blocks, and how many
    answers had one; `None` when no answer has a tag (nothing to copy)."""
    def answers(record: dict) -> list:
        greedy, samples = record.get("greedy_response"), record.get("sampling_response") or []
        return [*(greedy if isinstance(greedy, (list, tuple)) else [greedy]), *samples]

    count = sum(has_thinking(answer) for record in records for answer in answers(record))
    if not count:
        return None
    views = [{**record, **{name: _stripped(record[name]) for name in RESPONSE_FIELDS if name in record}}
             for record in records]
    return views, count
