"""The option judge: which option of a multiple-choice question an answer commits to, and the judgements that follow.

An answer commits to an option when it names exactly one, read in this order (the first rule that finds a letter
decides; a later one is not consulted):

1. the whole answer is a letter (`B`, `B.`, `(B)`, `**B**`);
2. a letter named as the answer: `answer is B`, `Answer: (B)`, `option B`, `choice B`, `the correct answer is B.`;
3. a letter in parentheses, `(B)`, or opening a line, `B.` / `B)` / `B:` (`B.Paris`, as the options are written; not
   an abbreviation such as `U.S.`);
4. otherwise, the text of an option found in the answer (case, punctuation and spacing aside; an option whose text is
   part of a longer option that is also found does not count).

A letter of rule 2 or 3 also names the option whose text follows it on its line: small models often write one
option's letter before another's text (`B.24 gauge.` where `24 gauge.` is option D), and such an answer names two
options. The text counts when it is an option's, starts with it, or (an answer cut short) is the start of exactly
one option's text of at least two words.

A letter counts only among the question's options (`E` is no letter of a four-option question) and never when a
lowercase word follows it (`A cat`), so the article is not read as option A. An answer naming several options, or
none, commits to none ("no choice"): it is judged wrong and agrees with no other answer.

Correctness: the greedy answer (and each sample) is correct when its option is the gold letter. Consistency: a sample
agrees with the greedy answer when both chose the same option. No model and no embedding is involved, so the judge is
deterministic and instant.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..settings.multiple_choice import LETTERS, gold_letter, is_multiple_choice


__all__ = ["OPTION_JUDGE", "answer_choice", "option_consistency", "option_correctness", "option_mentions"]

OPTION_JUDGE = "option"
"""The option judge's name, in `correctness_judge` / `consistency_judge` and on the command line."""

_NOT_A_WORD_AFTER = r"(?![A-Za-z0-9])(?!\s+[a-z])"  # not "Apple", not "A cat"
_WHOLE = re.compile(r"^\W*([A-Z])\W*$")
_NAMED = re.compile(  # the keywords in any case, the letter in capitals
    r"(?i:answer|option|choice)\s*(?i:is|would\s+be|will\s+be|=|:)?\s*(?i:option|choice)?\s*[:\-]?\s*"
    r"[(\[*]*([A-Z])[)\]*]*" + _NOT_A_WORD_AFTER
)
_MARKED = re.compile(r"\(([A-Z])\)|^[\s*#>-]*([A-Z])[.):](?![A-Z]\.)", re.MULTILINE)  # "B.text", not "U.S."


def _normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _text_after(body: str, options: dict[str, str]) -> set[str]:
    """The option whose text a letter's line goes on with (`B.24 gauge.` names the option `24 gauge.` too): the
    text is the option's, or starts with it, or (an answer cut short) is the start of exactly one option's text of at
    least two words."""
    said = _normalize(body)
    if not said:
        return set()
    whole = {letter for letter, option in options.items() if option and (said == option
                                                                         or said.startswith(option + " "))}
    if whole:
        return {max(whole, key=lambda letter: len(options[letter]))}
    cut = {letter for letter, option in options.items() if option.startswith(said + " ")}
    return cut if len(cut) == 1 and len(said.split()) >= 2 else set()


def option_mentions(answer: str, choices: Sequence[str]) -> set[str]:
    """The options `answer` names, by the rules of the module docstring: the letters of the first rule that finds
    any, with the options whose text follows them on their line, else the options whose text it holds (an empty set:
    no option named)."""
    letters = LETTERS[: len(choices)]
    options = {letter: _normalize(choice) for letter, choice in zip(letters, choices)}
    text = answer.strip()
    whole = _WHOLE.match(text)
    if whole and whole.group(1) in letters:
        return {whole.group(1)}
    for rule in (_NAMED, _MARKED):
        found = [(m.group(m.lastindex), m.end()) for m in rule.finditer(text) if m.group(m.lastindex) in letters]
        if found:
            named = {letter for letter, _ in found}
            for _, end in found:
                named |= _text_after(text[end:].split("\n", 1)[0], options)
            return named
    padded = f" {_normalize(text)} "
    found = {letter for letter, option in options.items() if option and f" {option} " in padded}
    return {letter for letter in found
            if not any(other != letter and options[letter] in options[other] for other in found)}


def answer_choice(answer: Any, choices: Sequence[str]) -> str | None:
    """The option letter `answer` commits to, or `None` when it names none or several (or is no text)."""
    if not isinstance(answer, str):
        return None
    mentions = option_mentions(answer, choices)
    return next(iter(mentions)) if len(mentions) == 1 else None


def _choices(record: dict[str, Any]) -> tuple[str | None, list[str | None] | None]:
    """The option of the record's greedy answer and of each sample, stored as `greedy_choice` / `sampling_choice`."""
    choices = record["choices"]
    greedy = answer_choice(record.get("greedy_response"), choices)
    samples = record.get("sampling_response")
    sampled = None if samples is None else [answer_choice(s, choices) for s in samples]
    record["greedy_choice"] = greedy
    if sampled is not None:
        record["sampling_choice"] = sampled
    return greedy, sampled


def _check(records: Sequence[dict[str, Any]]) -> None:
    for i, record in enumerate(records):
        if not is_multiple_choice(record):
            raise ValueError(f"The option judge reads multiple-choice records (with `choices`); record {i} (id "
                             f"{record.get('id')!r}) is free-form: judge it with --correctness has_answer or llm.")


def option_correctness(records: list[dict[str, Any]]) -> dict[str, int]:
    """Judge `greedy_correctness` and `sampling_correctness` of multiple-choice records in place: correct when the
    answer's option is the gold letter (`answer`); also stores `greedy_choice` / `sampling_choice`.

    Returns:
        `dict[str, int]`: `judged`, `correct`, `no_choice` (greedy answers naming no option or several) and
        `samples_no_choice`.
    """
    _check(records)
    summary = {"judged": 0, "correct": 0, "no_choice": 0, "samples_no_choice": 0}
    for record in records:
        if record.get("greedy_response") is None:
            continue
        gold = gold_letter(record)
        greedy, sampled = _choices(record)
        record["greedy_correctness"] = greedy is not None and greedy == gold
        record["correctness_judge"] = OPTION_JUDGE
        if sampled is not None:
            record["sampling_correctness"] = [choice is not None and choice == gold for choice in sampled]
            summary["samples_no_choice"] += sum(choice is None for choice in sampled)
        summary["judged"] += 1
        summary["correct"] += int(record["greedy_correctness"])
        summary["no_choice"] += int(greedy is None)
    return summary


def option_consistency(records: list[dict[str, Any]]) -> dict[str, int]:
    """Judge `consistency_judgement` of multiple-choice records in place: 1.0 for a sample that chose the greedy
    answer's option, 0.0 otherwise (no option chosen agrees with nothing); also stores `greedy_choice` /
    `sampling_choice`.

    Returns:
        `dict[str, int]`: `judged` records, `samples`, `consistent` samples and `no_choice` greedy answers.
    """
    _check(records)
    summary = {"judged": 0, "samples": 0, "consistent": 0, "no_choice": 0}
    for record in records:
        if record.get("greedy_response") is None or record.get("sampling_response") is None:
            continue
        greedy, sampled = _choices(record)
        record["consistency_judgement"] = [float(greedy is not None and choice == greedy) for choice in sampled]
        record["consistency_judge"] = OPTION_JUDGE
        summary["judged"] += 1
        summary["samples"] += len(sampled)
        summary["consistent"] += int(sum(record["consistency_judgement"]))
        summary["no_choice"] += int(greedy is None)
    return summary
