"""The record schema: one flat shape for the official HonestyBench files and our own, and the training columns a
record's judgements give.

The official HonestyBench jsonl files wrap some fields (`greedy_response` is `[str]`, `greedy_tokens` `[[str]]`,
`greedy_logprobs` `[[float]]`, `greedy_cumulative_logprobs` `[float]`, `greedy_correctness` 1/0). [`normalize_record`]
turns both shapes into the flat one that [`~elical_hf.signals.generate_answers`] writes, and [`training_columns`]
derives the trainer's targets from the judgements.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa
from datasets import Features, List, Value
from datasets.features.features import generate_from_arrow_type

from ...settings.columns import CONSISTENCY_COLUMN, CORRECTNESS_COLUMN, EVAL_LABEL_COLUMN
from ...settings.prompts import check_prompt_texts


__all__ = [
    "RECORD_FEATURES", "RECORD_MARKERS", "SAMPLE_FIELDS", "TRAINING_FEATURES", "add_training_columns",
    "first_samples", "is_record", "is_records_table", "normalize_record", "record_features", "training_columns",
]

_STR, _FLOAT, _BOOL, _INT = Value("string"), Value("float64"), Value("bool"), Value("int64")

RECORD_FEATURES = Features(
    {
        # Official HonestyBench keys, flat (`consistency_judgement`: 1.0 = sample equivalent to the greedy answer).
        "question": _STR, "answer": List(_STR), "greedy_response": _STR, "greedy_correctness": _BOOL,
        "greedy_tokens": List(_STR), "greedy_cumulative_logprobs": _FLOAT, "greedy_logprobs": List(_FLOAT),
        "sampling_response": List(_STR), "sampling_correctness": List(_BOOL), "consistency_judgement": List(_FLOAT),
        # Our optional extras.
        "id": _STR, "dataset": _STR, "model": _STR, "consistency_lexical": List(_FLOAT),
        "correctness_judge": _STR, "consistency_judge": _STR, "num_generated_tokens": _INT,
        "shard": _INT, "shard_seconds": _FLOAT, "shard_tokens": _INT,
        # P("certain") of each LLM judgement read from first-token log-probabilities (`--judge_verdict logprob`).
        "greedy_correctness_probability": _FLOAT, "sampling_correctness_probability": List(_FLOAT),
        "consistency_probability": List(_FLOAT),
        # Multiple-choice questions (`elical_hf.settings.multiple_choice`): the options, MMLU's subject, the option each
        # answer commits to (`None`: none, or several) and the model's probability of each option letter after the
        # prompt.
        "choices": List(_STR), "subject": _STR, "greedy_choice": _STR, "sampling_choice": List(_STR),
        "option_probabilities": List(_FLOAT),
    }
)  # fmt: skip
"""Types of the flat record schema; every field is optional. Other fields keep the type Arrow infers for them."""

TRAINING_FEATURES = Features(
    {"source_split": _STR, "paper_split": _STR, "consistency": _FLOAT, "consistency_source": _STR,
     "correctness": _FLOAT}
)  # fmt: skip
"""Columns [`~elical_hf.signals.records.load_records`] adds: the targets of [`training_columns`], the record's own
split word (`source_split`) and, when asked, the paper's split (`paper_split`). The evaluation label is the record's
own `greedy_correctness`."""


def _scalar(value: Any, name: str) -> Any:
    """Unwrap a one-element list (`[x]` -> `x`, `[]` -> `None`)."""
    if not isinstance(value, (list, tuple)):
        return value
    if len(value) > 1:
        raise ValueError(f"`{name}` holds {len(value)} values; expected one (or a one-element list).")
    return value[0] if value else None


def _flat_list(value: Any, name: str) -> list | None:
    """Unwrap a list nested once (`[[a, b]]` -> `[a, b]`)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"`{name}` must be a list, got {type(value).__name__}.")
    if value and all(isinstance(v, (list, tuple)) for v in value):
        value = _scalar(value, name)
    return list(value)


def _list(value: Any, name: str, item: Callable[[Any], Any]) -> list | None:
    """A list field (`sampling_response`, ...) with each item converted; a string or any other non-list is refused
    (a string would otherwise be read as one "sample" per character)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ValueError(f"`{name}` must be a list (one item per sample), got a {type(value).__name__}: {shown}")
    return [item(v) for v in value]


def _bool(value: Any, name: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false"):
        return value.strip().lower() in ("1", "true")
    raise ValueError(f"`{name}` must hold booleans or 0/1, got {value!r}.")


def _judgement(value: Any) -> float | None:
    """Numbers and booleans as they are; a judge's reply (text) read by [`~elical_hf.signals.llm_judge.parse_verdict`]:
    1.0 (equivalent), 0.0 (a negative word: uncertain, no, sorry, ...) or `None` (unparseable)."""
    if isinstance(value, str):
        from ..llm_judge import parse_verdict

        verdict = parse_verdict(value)
        return None if verdict is None else float(verdict)
    if value is None or isinstance(value, (bool, int, float)):
        return None if value is None else float(value)
    raise ValueError(f"`consistency_judgement` must hold numbers, booleans or judge replies, got {value!r}.")


def _float(value: Any, name: str = "a number field") -> float | None:
    if value is None:
        return None
    try:
        return float(value)  # a number, or one written as text ("0.5")
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must hold numbers, got {value!r}.") from None


def _int(value: Any, name: str) -> int | None:
    """An integer field (`num_generated_tokens`, `shard`, ...): an int, a whole float or digits as text."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError(f"`{name}` must be an integer, got {value!r}.")


def _answer(value: Any) -> list[str]:
    value = [] if value is None else [value] if isinstance(value, (str, int, float)) else value
    return [str(a) for a in value if a is not None]


def _question(value: Any) -> Any:
    check_prompt_texts([value], ["the question"])  # an unpaired surrogate, e.g.: one line now, not a TypeError later
    return value


_NORMALIZERS: dict[str, Callable[[Any], Any]] = {
    "id": lambda v: None if v is None else str(v),
    "question": _question,
    "answer": _answer,
    "greedy_response": lambda v: None if (v := _scalar(v, "greedy_response")) is None else str(v),
    "greedy_tokens": lambda v: _flat_list(v, "greedy_tokens"),
    "greedy_logprobs": lambda v: None if (v := _flat_list(v, "greedy_logprobs")) is None
    else [_float(x, "greedy_logprobs") for x in v],
    "greedy_cumulative_logprobs": lambda v: _float(_scalar(v, "greedy_cumulative_logprobs"),
                                                   "greedy_cumulative_logprobs"),
    "greedy_correctness": lambda v: _bool(_scalar(v, "greedy_correctness"), "greedy_correctness"),
    "sampling_response": lambda v: _list(v, "sampling_response", lambda s: None if s is None else str(s)),
    "sampling_correctness": lambda v: _list(v, "sampling_correctness", lambda x: _bool(x, "sampling_correctness")),
    "consistency_judgement": lambda v: _list(v, "consistency_judgement", _judgement),
    "consistency_lexical": lambda v: _list(v, "consistency_lexical", lambda x: _float(x, "consistency_lexical")),
    "num_generated_tokens": lambda v: _int(v, "num_generated_tokens"),
    "shard": lambda v: _int(v, "shard"),
    "shard_tokens": lambda v: _int(v, "shard_tokens"),
    "shard_seconds": lambda v: _float(v, "shard_seconds"),
}


def normalize_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Return the flat form of a HonestyBench record, official (wrapped) or ours (a training row too: its other
    fields are kept).

    `greedy_response` `[str]` -> `str`, `greedy_tokens` `[[str]]` -> `list[str]`, `greedy_logprobs` `[[float]]` ->
    `list[float]`, `greedy_cumulative_logprobs` `[x]` -> `float`, `greedy_correctness` 1/0 -> `bool`,
    `sampling_correctness` -> `list[bool]`, `consistency_judgement` -> `list[float]` (judge replies given as text are
    parsed), `answer` `str` -> `[str]`, `id` -> `str`. Absent fields stay absent; other fields (ours: `dataset`,
    `model`, judge names, timings, ...) are kept unchanged. Raises `ValueError` for a shape it cannot flatten.

    Example:

    ```python
    >>> normalize_record({"question": "q", "answer": "Paris", "greedy_response": ["Paris."], "greedy_correctness": 1,
    ...                   "greedy_tokens": [["Paris", "."]], "greedy_cumulative_logprobs": [-0.5]})
    {'question': 'q', 'answer': ['Paris'], 'greedy_response': 'Paris.', 'greedy_correctness': True, \
'greedy_tokens': ['Paris', '.'], 'greedy_cumulative_logprobs': -0.5}

    ```
    """
    return {key: _NORMALIZERS[key](value) if key in _NORMALIZERS else value for key, value in record.items()}


def _mean(values: Iterable[Any] | None) -> float | None:
    values = [float(v) for v in values or [] if v is not None]
    return sum(values) / len(values) if values else None


SAMPLE_FIELDS = ("sampling_response", "sampling_correctness", "consistency_judgement", "consistency_lexical")
"""The per-sample fields of a record: one entry per sampled answer, in sampling order."""


def first_samples(record: Mapping[str, Any], num_samples: int) -> dict[str, Any]:
    """`record` as if it had been sampled with its first `num_samples` answers: every per-sample field
    ([`SAMPLE_FIELDS`]) that it has cut to its first `num_samples` entries (the paper's k ablation draws the targets
    from k' <= k samples; our sampler seeds each sample from its index, so the first k' are what a k' run draws).

    Raises:
        `ValueError`: `num_samples < 1`, or a per-sample field with fewer entries (naming the record's id).
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"`num_samples` must be an integer >= 1, got {num_samples!r}.")
    flat = dict(record)
    for name in SAMPLE_FIELDS:
        values = flat.get(name)
        if values is None:
            continue
        values = list(values)
        if len(values) < num_samples:
            raise ValueError(f"Record {flat.get('id', '(no id)')!r} has {len(values)} entries in `{name}`, fewer than "
                             f"the {num_samples} samples asked for (num_samples).")
        flat[name] = values[:num_samples]
    return flat


def training_columns(record: Mapping[str, Any], num_samples: int | None = None) -> dict[str, Any]:
    """The trainer's columns of one record (official or ours); with `num_samples`, from its first `num_samples`
    samples only ([`first_samples`]).

    Returns:
        `dict`: `consistency` (mean of `consistency_judgement` when it is present and non-empty, else mean of
        `consistency_lexical`, else `None`), `consistency_source` (`"consistency_judgement"`, `"consistency_lexical"`
        or `None`: which of the two was used), `correctness` (share of the samples judged correct, `None` when not
        judged) and `greedy_correctness` (the record's own, as 1/0; `None` when not judged).
    """
    flat = normalize_record(record)
    if num_samples is not None:
        flat = first_samples(flat, num_samples)
    consistency, source = _mean(flat.get("consistency_judgement")), "consistency_judgement"
    if consistency is None:
        consistency, source = _mean(flat.get("consistency_lexical")), "consistency_lexical"
    greedy = flat.get("greedy_correctness")
    return {
        "consistency": consistency,
        "consistency_source": source if consistency is not None else None,
        "correctness": _mean(flat.get("sampling_correctness")),
        EVAL_LABEL_COLUMN: None if greedy is None else int(bool(greedy)),
    }


def record_features(records: list[dict[str, Any]], base: Features = RECORD_FEATURES) -> Features:
    """Features of `records`: `base` types for known fields, types Arrow infers for the others (order kept)."""
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    features = {}
    for name in columns:
        if name in base:
            features[name] = base[name]
            continue
        try:
            arrow_type = pa.array([r.get(name) for r in records]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            odd = _odd_value(records, name) or error
            raise ValueError(f"Field {name!r} mixes value types across records: {odd}") from None
        features[name] = generate_from_arrow_type(arrow_type)
    return Features(features)


def _odd_value(records: list[dict[str, Any]], name: str) -> str | None:
    """Which record holds a value of `name` of another kind (text, number, bool, list, dict) than the first record
    holding one, e.g. `record 3 (id 'nq-1') holds 'one' (str), record 0 holds 2 (int)`; `None` if all are alike."""
    def kind(value: Any) -> str:
        return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__

    held = [(i, r[name]) for i, r in enumerate(records) if r.get(name) is not None]
    if not held:
        return None
    first, value = held[0]
    for i, other in held[1:]:
        if kind(other) != kind(value):
            named = f" (id {records[i]['id']!r})" if records[i].get("id") is not None else ""
            return (f"record {i}{named} holds {other!r} ({type(other).__name__}), record {first} holds {value!r} "
                    f"({type(value).__name__})")
    return None


RECORD_MARKERS = ("greedy_response", "sampling_response")
"""Fields that say a row is a HonestyBench record (answers and samples), not a training row."""


def is_record(row: Mapping[str, Any]) -> bool:
    """Whether `row` holds an answer or samples ([`RECORD_MARKERS`]): a record, not a training row."""
    return any(row.get(name) is not None for name in RECORD_MARKERS)


def is_records_table(columns: Iterable[str]) -> bool:
    """Whether a table with these columns holds records ([`RECORD_MARKERS`])."""
    return bool(set(RECORD_MARKERS) & set(columns))


def add_training_columns(record: dict[str, Any], num_samples: int | None = None) -> None:
    """Add the [`training_columns`] a record lacks, in place (`greedy_correctness` is `None` where not judged); its
    own values win (a `consistency` of its own has
    `consistency_source` `"consistency"` unless it names one). With `num_samples`, the record keeps its first
    `num_samples` samples ([`first_samples`]) and its targets are derived from them, replacing its own.

    Raises:
        `ValueError`: with `num_samples`, a record with a target of its own but no per-sample judgements to derive it
            from.
    """
    if num_samples is not None:
        record.update(first_samples(record, num_samples))
        columns = training_columns(record)
        for key in (CONSISTENCY_COLUMN, CORRECTNESS_COLUMN):
            if record.get(key) is not None and columns[key] is None:
                raise ValueError(f"Record {record.get('id', '(no id)')!r} has a `{key}` of its own but no per-sample "
                                 f"judgements to derive it from its first {num_samples} samples.")
        columns.pop(EVAL_LABEL_COLUMN)  # the record's own field
        record.update(columns)
        record.setdefault(EVAL_LABEL_COLUMN, None)
        return
    columns = training_columns(record)  # its `greedy_correctness` is the record's own (or None where not judged)
    if record.get(CONSISTENCY_COLUMN) is not None:
        columns["consistency_source"] = record.get("consistency_source") or CONSISTENCY_COLUMN
    for key, value in columns.items():
        if record.get(key) is None:
            record[key] = value
