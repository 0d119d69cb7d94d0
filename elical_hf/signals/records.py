"""HonestyBench records: one flat schema for the official files and our own, parquet/jsonl I/O, training columns.

The official HonestyBench jsonl files wrap some fields (`greedy_response` is `[str]`, `greedy_tokens` `[[str]]`,
`greedy_logprobs` `[[float]]`, `greedy_cumulative_logprobs` `[float]`, `greedy_correctness` 1/0). [`normalize_record`]
turns both shapes into the flat one that [`generate_answers`] writes;
[`~elical_hf.signals.honestybench.load_honestybench`] reads a folder of either kind into a [`~datasets.DatasetDict`]
with the paper's splits and the columns the trainer needs.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Features, List, Value
from datasets.features.features import generate_from_arrow_type

from ..atomic import atomic_file
from ..files import text_lines
from ..prompts import check_prompt_texts


__all__ = [
    "MANIFEST_FORMAT", "MANIFEST_NAME", "RECORD_EXTENSIONS", "RECORD_FEATURES", "TRAINING_FEATURES",
    "SAMPLE_FIELDS", "check_complete_samples", "first_samples", "iter_record_batches", "load_records",
    "normalize_record", "read_records", "record_features", "record_files", "record_format", "save_records",
    "training_columns",
]

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "elical-hf/sampled-records"
"""The manifest of an `elical-hf sample` folder ([`~elical_hf.signals.runner.sample_records`]): `complete` is false
until every shard is written."""

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
    }
)  # fmt: skip
"""Types of the flat record schema; every field is optional. Other fields keep the type Arrow infers for them."""

TRAINING_FEATURES = Features(
    {"source_split": _STR, "consistency": _FLOAT, "consistency_source": _STR, "correctness": _FLOAT,
     "greedy_correct": _INT}
)  # fmt: skip
"""Columns [`~elical_hf.signals.honestybench.load_honestybench`] adds: see [`training_columns`]; `source_split` is the
file's own split word."""


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
        from .llm_judge import parse_verdict

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
    """Return the flat form of a HonestyBench record, official (wrapped) or ours.

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
        judged) and `greedy_correct` (1/0, `None` when not judged).
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
        "greedy_correct": None if greedy is None else int(bool(greedy)),
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


RECORD_EXTENSIONS = (".jsonl", ".parquet")


def record_format(path: str | os.PathLike) -> str:
    """`"jsonl"` or `"parquet"`, from a records file's name; a `ValueError` for any other extension."""
    extension = Path(path).suffix.lower()
    if extension not in RECORD_EXTENSIONS:
        raise ValueError(
            f"Unknown records format {extension!r} for {os.fspath(path)}: records files must end in .jsonl or .parquet."
        )
    return extension[1:]


def record_files(root: str | os.PathLike) -> list[str]:
    """Every `.jsonl` / `.parquet` records file under `root` (recursively, sorted within each folder, a folder's
    files before its sub-folders, hidden files and folders skipped), or `root` itself when it is a file."""
    root = os.fspath(root)
    if os.path.isfile(root):
        return [root]
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        names = [n for n in sorted(names) if n.endswith(RECORD_EXTENSIONS) and not n.startswith(".")]
        files += [os.path.join(directory, n) for n in names]
    if not files:
        raise ValueError(f"No .jsonl or .parquet records files under {root}.")
    return files


def save_records(records: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> str:
    """Write records (normalized, see [`normalize_record`]) to `.parquet` (default) or `.jsonl`, atomically.

    The file is written next to `path` under a temporary name and moved into place with `os.replace`
    ([`~elical_hf.atomic.atomic_file`]), so a reader (or a rerun after a crash) sees either no file or the complete
    one. Parquet files carry [`RECORD_FEATURES`] types and load with `datasets.load_dataset("parquet",
    data_files=path)`.

    Returns:
        `str`: `path`.
    """
    path = os.fspath(path)
    rows = [normalize_record(r) for r in records]
    kind = record_format(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_file(path) as tmp:
        if kind == "jsonl":
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        else:
            features = record_features(rows) if rows else Features({"question": RECORD_FEATURES["question"]})
            pq.write_table(pa.Table.from_pylist(rows, schema=features.arrow_schema), tmp)
    return path


def iter_record_batches(path: str | os.PathLike, batch_size: int = 10_000) -> Iterator[list[dict[str, Any]]]:
    """Normalized records of a `.parquet` or `.jsonl` file (official or ours), `batch_size` at a time: the file is
    streamed (jsonl line by line, parquet by row batches), so memory holds one batch, whatever the file's size.

    Raises:
        `ValueError`: naming the file and the line (jsonl) or row (parquet, counted from 0) of a line that is not
            UTF-8 or not JSON, of a line that is not a JSON object, or of a record whose fields have the wrong shape
            (e.g. `sampling_response` given as one string instead of a list); or a parquet file that cannot be read.
    """
    path = os.fspath(path)
    if record_format(path) == "parquet":
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=batch_size)
            start = 0
            for batch in batches:
                rows = batch.to_pylist()
                yield [_normalized(row, f"{path} row {start + i}") for i, row in enumerate(rows)]
                start += len(rows)
        except pa.ArrowException as error:  # truncated, corrupt or not parquet at all
            raise ValueError(f"{path} is not a readable parquet file: {error}") from None
        return
    rows: list[dict[str, Any]] = []
    for number, line in text_lines(path):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} line {number} is not valid JSON: {error}") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path} line {number} is not a record (a JSON object): {line.strip()[:80]}")
            rows.append(_normalized(row, f"{path} line {number}"))
        if len(rows) == batch_size:
            yield rows
            rows = []
    if rows:
        yield rows


def _normalized(record: Mapping[str, Any], where: str) -> dict[str, Any]:
    try:
        return normalize_record(record)
    except ValueError as error:
        named = f" (id {record['id']!r})" if record.get("id") is not None else ""
        raise ValueError(f"{where}{named}: {error}") from None


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a `.parquet` or `.jsonl` records file (official or ours) into normalized records (errors as in
    [`iter_record_batches`])."""
    return [record for batch in iter_record_batches(path) for record in batch]


def _sample_folders(root: str) -> list[str]:
    """Folders of `elical-hf sample` runs that `root` reads from: those below it holding a manifest, or the run
    `root` is part of (its `shards/` folder, or a shard file)."""
    root = os.path.abspath(root)
    folder = root if os.path.isdir(root) else os.path.dirname(root)
    up = [folder, os.path.dirname(folder)] if os.path.basename(folder) == "shards" else [folder]
    found = [d for d in up if os.path.isfile(os.path.join(d, MANIFEST_NAME))]
    if os.path.isdir(root):
        for directory, subdirs, names in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
            if MANIFEST_NAME in names and directory not in found:
                found.append(directory)
    return found


def check_complete_samples(root: str | os.PathLike, allow_incomplete: bool = False) -> None:
    """Refuse records of an unfinished `elical-hf sample` run (its manifest says `complete: false`, e.g. after a
    kill): a `ValueError` that says how many questions are missing, or, with `allow_incomplete`, a warning with the
    same count. Folders without a sampling manifest are not checked."""
    for folder in _sample_folders(os.fspath(root)):
        try:
            with open(os.path.join(folder, MANIFEST_NAME), encoding="utf-8") as handle:
                manifest = json.load(handle)
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT or manifest.get("complete"):
            continue
        shards = os.path.join(folder, "shards")
        names = sorted(n for n in os.listdir(shards) if n.endswith(".parquet")) if os.path.isdir(shards) else []
        sampled = sum(pq.read_metadata(os.path.join(shards, n)).num_rows for n in names)
        expected = manifest.get("num_questions", "?")
        missing = expected - sampled if isinstance(expected, int) else "?"
        what = (f"{folder} is an unfinished `elical-hf sample` run ({MANIFEST_NAME} says complete: false): {sampled} of "
                f"{expected} questions sampled, {missing} missing")
        if not allow_incomplete:
            raise ValueError(
                f"{what}. Rerun the same `elical-hf sample` command to finish it, or pass --allow_incomplete "
                f"(`allow_incomplete=True`) to use the {sampled} records anyway."
            )
        logger.warning("%s; using the %d sampled records (allow_incomplete), %s rows dropped.", what, sampled, missing)


def load_records(path: str | os.PathLike, allow_incomplete: bool = False) -> list[dict[str, Any]]:
    """Normalized records of a `.jsonl` / `.parquet` file, or of every such file below a folder ([`record_files`]:
    e.g. the shards of `elical-hf sample`, or a HonestyBench folder), in file order.

    An unfinished `elical-hf sample` folder is refused unless `allow_incomplete` (see [`check_complete_samples`]).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"Records file {path!r} does not exist.")
    check_complete_samples(path, allow_incomplete)
    return [record for file in record_files(path) for record in read_records(file)]


JUDGE_OPTIONS = {
    "consistency": "elical-hf judge --consistency embedding (or lexical / llm)",
    "correctness": "elical-hf judge --correctness has_answer (or em / f1 / llm)",
}
"""Which `judge` option fills the judgement a training target is derived from."""
RECORD_MARKERS = ("greedy_response", "sampling_response")
"""Columns that say a table holds HonestyBench records (answers and samples), not training rows."""


def is_records_table(columns: Iterable[str]) -> bool:
    return bool(set(RECORD_MARKERS) & set(columns))


def with_training_columns(rows: Any, name: str, target: str, num_samples: int | None = None) -> Any:
    """Judged records as training rows: the trainer's columns (`consistency`, `correctness`, `greedy_correct`,
    [`training_columns`]) added to a `datasets.Dataset` of records wherever the judgements allow; a table that already
    has `target`, or holds no records, comes back unchanged. With `num_samples`, the columns are derived anew from
    each record's first `num_samples` samples (replacing any the table has), which needs the per-sample judgements.

    Raises:
        `ValueError`: A record lacks the judgement `target` is derived from (named, with the `judge` option that fills
            it), or `num_samples` is given for a table without records.
    """
    if num_samples is not None:
        if not is_records_table(rows.column_names):
            raise ValueError(f"The {name} table has no per-sample judgements (columns {rows.column_names}): targets "
                             f"from the first {num_samples} samples need judged records.")
        rows = rows.remove_columns([c for c in ("consistency", "consistency_source", "correctness", "greedy_correct")
                                    if c in rows.column_names])
    elif target in rows.column_names or not is_records_table(rows.column_names):
        return rows
    derived = []
    for row, record in enumerate(rows):  # one pass over the table
        columns = training_columns(record, num_samples)
        if columns[target] is None:
            where = f"record {record.get('id')!r}" if record.get("id") is not None else f"row {row}"
            hint = JUDGE_OPTIONS.get(target, "elical-hf judge")
            raise ValueError(f"The {name} records have no judgement to derive the {target!r} target from ({where} "
                             f"and maybe others): run `{hint}` on them first.")
        derived.append(columns)
    for column in ("consistency", "correctness", "greedy_correct"):
        values = [columns[column] for columns in derived]
        if column not in rows.column_names and all(value is not None for value in values):
            rows = rows.add_column(column, values)
    return rows


def load_training_table(source: str, name: str, target: str, num_samples: int | None = None) -> Any:
    """A training table from any records input: a table file or `save_to_disk` folder (`load_table`), a folder of
    record files (an `elical-hf sample` output, a HonestyBench layout), or judged records — with the trainer's columns
    derived where they are missing, or from the first `num_samples` samples ([`with_training_columns`])."""
    from ..data import load_table

    if os.path.isdir(source) and not os.path.isfile(os.path.join(source, "dataset_info.json")):
        from datasets import Dataset

        rows = Dataset.from_list(load_records(source))
    else:
        rows = load_table(source)
    return with_training_columns(rows, name, target, num_samples)


def same_model(a: str, b: str) -> bool:
    """Whether two model names mean the same model: equal ignoring case, or equal after the Hub owner
    (`"SmolLM2-135M-Instruct"` matches `"HuggingFaceTB/SmolLM2-135M-Instruct"`)."""
    a, b = str(a).strip().lower(), str(b).strip().lower()
    return a == b or a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]


def check_records_match(records: list[Mapping[str, Any]], base_model: str | None, where: str,
                        allow_other_model: bool = False) -> None:
    """Refuse scoring a confidence model against records that are not its base model's answers, or that pool several
    models, or that hold one record twice (each would count twice in every metric).

    Args:
        records: The records (their `model`, `dataset` and `id` fields).
        base_model (`str`, *optional*): The confidence model's base (`confidence_config.base_model_name_or_path`).
        where (`str`): The records' source, for the message.
        allow_other_model (`bool`): Accept another model's records (e.g. of the model this one was fine-tuned from).
    """
    seen: dict[tuple[str, str], int] = {}
    for row, record in enumerate(records):
        if record.get("id") is None:
            continue
        key = (str(record.get("dataset")), str(record["id"]))
        if key in seen:
            raise ValueError(f"{where} holds record {record['id']!r} ({key[0]}) twice (rows {seen[key]} and {row}): each "
                             "copy would count in every metric. Remove the duplicate.")
        seen[key] = row
    models = sorted({str(r["model"]) for r in records if r.get("model")})
    if allow_other_model:
        return
    if len(models) > 1:
        raise ValueError(f"{where} pools the answers of several models ({', '.join(models)}): a confidence model is "
                         "scored against its own base model's answers. Keep one model's records (or pass "
                         "--allow_other_model).")
    if models and base_model and not same_model(models[0], base_model):
        raise ValueError(f"{where} holds the answers of {models[0]}, but this confidence model is built on "
                         f"{base_model}: its confidences would be scored against another model's answers. Use that "
                         "model's records, or pass --allow_other_model if it was fine-tuned from this one.")
