"""Option-Prob: the training-free baseline of multiple-choice benchmarks, the probability of the option letters.

The answering model reads a multiple-choice question ([`~elical_hf.settings.prompts.MULTIPLE_CHOICE_PROMPT`] filled with
the record's `question`, which holds its options, rendered in the chat template with the generation prompt, as the
sampler renders it) and its distribution over the first reply token is read at the option letters (`A`..`D` for MMLU; as
many letters as the record has `choices`). Every single-token spelling of a letter the tokenizer has (`"A"` and `" A"`)
counts for it; the letters' probabilities are normalised over the record's options, stored in the record as
`option_probabilities`, and the confidence is the largest of them: how sure the model is of the option it favours.

Records that already carry `option_probabilities` (read from lm-evaluation-harness logs: the softmax of the options'
log-likelihoods, or computed by an earlier `elical-hf baselines --which option_prob`) are scored without a model.

The maths ([`option_distribution`], [`option_confidence`]) is pure; the model is read through a backend's
`next_token_logprobs` ([`~elical_hf.signals.HFBackend.next_token_logprobs`]).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..settings.multiple_choice import LETTERS, check_one_format
from ..settings.prompts import MULTIPLE_CHOICE_PROMPT
from .settings import SamplingSettings


__all__ = [
    "letter_token_ids", "option_confidence", "option_distribution", "option_prob", "option_settings",
    "records_needing_model",
]


def option_distribution(letter_logprobs: Sequence[float | Sequence[float]]) -> list[float]:
    """
    The model's probabilities of a question's options, normalised over them, from the log-probabilities of their
    letters as the first reply token.

    Args:
        letter_logprobs (`list`): One entry per option, in order (`A` first): the log-probability of its letter, or a
            list of the log-probabilities of each of its single-token spellings (`"A"`, `" A"`), whose
            probabilities are summed.

    Returns:
        `list[float]`: one probability per option, summing to 1.

    Raises:
        `ValueError`: a NaN or positive log-probability, an option without one, or no probability on any option.

    Example:

    ```python
    >>> import math
    >>> [round(p, 3) for p in option_distribution([[math.log(0.3), math.log(0.1)], math.log(0.2), math.log(0.2)])]
    [0.5, 0.25, 0.25]

    ```
    """
    if isinstance(letter_logprobs, (str, bytes)) or not isinstance(letter_logprobs, Sequence) or not letter_logprobs:
        raise ValueError(f"`letter_logprobs` must hold one entry per option, got {letter_logprobs!r}.")
    options = [[float(x) for x in v] if isinstance(v, Sequence) else [float(v)] for v in letter_logprobs]
    values = [x for spellings in options for x in spellings]
    if any(not spellings for spellings in options) or any(math.isnan(x) or x > 1e-6 for x in values):
        raise ValueError(f"`letter_logprobs` must give each option log-probabilities (<= 0, not NaN), got "
                         f"{letter_logprobs!r}.")
    top = max(values)
    if top == -math.inf:
        raise ValueError("The model puts no probability on any option letter (every log-probability is -inf).")
    masses = [sum(math.exp(x - top) for x in spellings) for spellings in options]
    total = sum(masses)
    return [mass / total for mass in masses]


def option_confidence(probabilities: Sequence[float]) -> float:
    """
    Option-Prob's confidence: the largest of a question's option probabilities, normalised over its options (the
    probability of the option the model favours).

    Args:
        probabilities (`list[float]`): One non-negative probability per option (e.g. [`option_distribution`]'s, or
            lm-evaluation-harness's softmax of the options' log-likelihoods); normalised here.

    Example:

    ```python
    >>> option_confidence([0.5, 0.25, 0.25]), option_confidence([2.0, 1.0, 1.0])
    (0.5, 0.5)

    ```
    """
    try:
        values = [float(p) for p in probabilities]
    except (TypeError, ValueError):
        values = []
    if not values or any(not math.isfinite(p) or p < 0 for p in values) or sum(values) <= 0:
        raise ValueError(f"Option probabilities must be finite, non-negative and not all 0, got {probabilities!r}.")
    return max(values) / sum(values)


def option_settings() -> SamplingSettings:
    """How Option-Prob renders a question by default: [`~elical_hf.settings.prompts.MULTIPLE_CHOICE_PROMPT`] in the
    model's chat template with the generation prompt (thinking off for a hybrid reasoning template), as the sampler
    renders multiple-choice questions."""
    return SamplingSettings(prompt_template=MULTIPLE_CHOICE_PROMPT)


def letter_token_ids(tokenizer: Any, letters: Sequence[str]) -> dict[str, list[int]]:
    """
    Each letter's single-token spellings in `tokenizer`: the ids of `"A"` and `" A"` that encode as one token which
    decodes back to the letter (an unknown token does not count).

    Raises:
        `ValueError`: a letter without any single-token spelling (Option-Prob reads each letter as one first token).
    """
    found = {}
    for letter in letters:
        ids = []
        for spelling in (letter, " " + letter):
            encoded = list(tokenizer(spelling, add_special_tokens=False)["input_ids"])
            if len(encoded) == 1 and encoded[0] not in ids and tokenizer.decode(encoded).strip() == letter:
                ids.append(encoded[0])
        if not ids:
            raise ValueError(f"The tokenizer has no single-token spelling of the option letter {letter!r} ({letter!r} "
                             f"or {' ' + letter!r}): Option-Prob reads each option letter as one first reply token.")
        found[letter] = ids
    return found


def _name(record: Mapping[str, Any], row: int) -> str:
    return f"record {row} (id {record['id']!r})" if record.get("id") is not None else f"record {row}"


def records_needing_model(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """
    The rows of `records` whose option probabilities Option-Prob must read from the model (those without
    `option_probabilities`), once the records are checked.

    Raises:
        `ValueError`: free-form records (no `choices`), records mixing multiple-choice and free-form questions, or
        `option_probabilities` that do not give one probability to each of a record's options.
    """
    if isinstance(records, dict) or not isinstance(records, Sequence):
        raise ValueError(f"option_prob expects a list of records, got {type(records).__name__}.")
    if records and not check_one_format(records):
        raise ValueError(f"Option-Prob scores multiple-choice questions, and these {len(records)} records are "
                         "free-form (no `choices`): use Prob, N-Prob, Consis-Lex/Sem or Verbal-0/10 for them.")
    missing = []
    for row, record in enumerate(records):
        probabilities = record.get("option_probabilities")
        if probabilities is None:
            missing.append(row)
        elif len(probabilities) != len(record["choices"]):
            raise ValueError(f"The `option_probabilities` of {_name(record, row)} has {len(probabilities)} values for "
                             f"its {len(record['choices'])} options.")
    return missing


def _model_distributions(
    backend: Any, records: Sequence[Mapping[str, Any]], settings: SamplingSettings, batch_size: int, progress: bool
) -> list[list[float]]:
    """Each record's option distribution, read from `backend`'s next-token log-probabilities."""
    questions = [record.get("question") for record in records]
    empty = [row for row, question in enumerate(questions) if not isinstance(question, str) or not question.strip()]
    if empty:
        raise ValueError(f"{len(empty)} records have no `question` text (first: {_name(records[empty[0]], empty[0])}); "
                         "Option-Prob asks the model the question.")
    letters = letter_token_ids(backend.tokenizer, LETTERS[: max(len(record["choices"]) for record in records)])
    token_ids = sorted({token for ids in letters.values() for token in ids})
    column = {token: position for position, token in enumerate(token_ids)}
    rows = backend.next_token_logprobs(questions, token_ids, settings, batch_size=batch_size, progress=progress)
    return [
        option_distribution([[row[column[t]] for t in letters[letter]] for letter in LETTERS[: len(record["choices"])]])
        for record, row in zip(records, rows)
    ]


def option_prob(
    records: Sequence[dict[str, Any]],
    backend: Any = None,
    *,
    settings: SamplingSettings | None = None,
    batch_size: int = 16,
    progress: bool = True,
) -> list[float]:
    """
    Option-Prob: the largest of the option probabilities the answering model gives a multiple-choice question
    (module docstring). Records without `option_probabilities` get them from `backend` (stored in the record);
    records with them are scored without a model.

    Args:
        records (`list[dict]`): Multiple-choice records ([`~elical_hf.settings.multiple_choice`]: `question` with its
            options, `choices`).
        backend ([`~elical_hf.signals.HFBackend`], *optional*): The answering model; needed only for records
            without `option_probabilities`.
        settings ([`~elical_hf.signals.SamplingSettings`], *optional*): How the prompts are rendered (its prompt
            template, chat template use, system prompt and template variables); default [`option_settings`].
        batch_size (`int`, *optional*, defaults to 16): Prompts per forward pass.
        progress (`bool`, *optional*, defaults to `True`): Progress bar over batches.

    Returns:
        `list[float]`: one confidence in [0, 1] per record.

    Raises:
        `ValueError`: as [`records_needing_model`], and for records to read without a `backend` (or one that cannot
        read next-token log-probabilities) or a tokenizer without a single-token spelling of an option letter.
    """
    missing = records_needing_model(records)
    if missing:
        if backend is None:
            raise ValueError(f"option_prob needs the answering model for the {len(missing)} records without "
                             "`option_probabilities`: pass `backend` (an HFBackend; the CLI's `--model`).")
        if not callable(getattr(backend, "next_token_logprobs", None)) or not hasattr(backend, "tokenizer"):
            raise ValueError(f"option_prob reads next-token log-probabilities, which {type(backend).__name__} does "
                             "not give: pass an HFBackend.")
        settings = settings if settings is not None else option_settings()
        scored = _model_distributions(backend, [records[row] for row in missing], settings, batch_size, progress)
        for row, probabilities in zip(missing, scored):
            records[row]["option_probabilities"] = probabilities
    confidences = []
    for row, record in enumerate(records):
        try:
            confidences.append(option_confidence(record["option_probabilities"]))
        except ValueError as error:
            raise ValueError(f"The `option_probabilities` of {_name(record, row)}: {error}") from None
    return confidences
