"""HonestyBench records: one flat schema for the official files and our own, parquet/jsonl I/O, training columns.

The official HonestyBench jsonl files wrap some fields (`greedy_response` is `[str]`, `greedy_tokens` `[[str]]`,
`greedy_logprobs` `[[float]]`, `greedy_cumulative_logprobs` `[float]`, `greedy_correctness` 1/0). [`normalize_record`]
turns both shapes into the flat one that [`generate_answers`] writes; [`load_honestybench`] reads a folder of either
kind into a [`~datasets.DatasetDict`] with the paper's splits and the columns the trainer needs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Dataset, DatasetDict, Features, List, Value, concatenate_datasets
from datasets.features.features import generate_from_arrow_type
from tqdm.auto import tqdm


__all__ = [
    "DATASET_ALIASES", "HONESTYBENCH_REPO", "IN_DOMAIN_DATASETS", "OOD_DATASETS", "PAPER_SPLITS", "RECORD_FEATURES",
    "TRAINING_FEATURES", "canonical_dataset", "load_honestybench", "normalize_record", "paper_split",
    "parse_record_path", "read_records", "record_features", "save_records", "training_columns",
]

logger = logging.getLogger(__name__)

HONESTYBENCH_REPO = "Shiyunee/HonestyBench"

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
"""Columns [`load_honestybench`] adds: see [`training_columns`]; `source_split` is the file's own split word."""

IN_DOMAIN_DATASETS = ("nq", "triviaqa", "hotpotqa", "2wikimultihopqa", "pararel")
OOD_DATASETS = ("squad", "webquestions", "complexwebquestions", "musique", "popqa")
PAPER_SPLITS = ("train", "in_domain_test", "ood_test", "mmlu", "other")

DATASET_ALIASES: dict[str, str] = {
    alias: name
    for name, aliases in {
        "nq": ["nq", "naturalquestions", "nqopen"],
        "triviaqa": ["tq", "triviaqa", "trivia"],
        "hotpotqa": ["hq", "hotpotqa", "hotpot"],
        "2wikimultihopqa": ["2wiki", "2wikimultihopqa", "2wikimqa"],
        "pararel": ["pararel", "pararelpatterns"],
        "squad": ["squad", "squadv1", "squad11"],
        "webquestions": ["webquestions", "webq", "wq"],
        "complexwebquestions": ["cwq", "complexwebquestions"],
        "musique": ["musique"],
        "popqa": ["popqa"],
        "mmlu": ["mmlu", "mmla"],
    }.items()
    for alias in aliases
}
"""Dataset alias -> canonical name. Aliases are compared lowercased without `_`, `-`, `.` and spaces."""

SPLIT_WORDS = {"train": "train", "training": "train"} | {
    word: "test" for word in ("test", "dev", "validation", "valid", "val", "eval")
}
"""Words that name a source split in paths (or a record's `split` field) -> `"train"` or `"test"`."""

IGNORED_FOLDERS = {"data", "datasets", "honestybench", "records", "shards", "jsonl", "output", "outputs", "results"}
"""Folder names that never name a model (generic containers)."""


def canonical_dataset(name: str | None) -> str | None:
    """Canonical dataset name of an alias (`"hq"`, `"hotpot_qa"` -> `"hotpotqa"`), or `None` when unknown."""
    if name is None:
        return None
    return DATASET_ALIASES.get(re.sub(r"[\s_\-.]", "", str(name).lower()))


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


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _answer(value: Any) -> list[str]:
    value = [] if value is None else [value] if isinstance(value, (str, int, float)) else value
    return [str(a) for a in value if a is not None]


_NORMALIZERS: dict[str, Callable[[Any], Any]] = {
    "id": lambda v: None if v is None else str(v),
    "answer": _answer,
    "greedy_response": lambda v: None if (v := _scalar(v, "greedy_response")) is None else str(v),
    "greedy_tokens": lambda v: _flat_list(v, "greedy_tokens"),
    "greedy_logprobs": lambda v: None if (v := _flat_list(v, "greedy_logprobs")) is None else [_float(x) for x in v],
    "greedy_cumulative_logprobs": lambda v: _float(_scalar(v, "greedy_cumulative_logprobs")),
    "greedy_correctness": lambda v: _bool(_scalar(v, "greedy_correctness"), "greedy_correctness"),
    "sampling_response": lambda v: None if v is None else [None if s is None else str(s) for s in v],
    "sampling_correctness": lambda v: None if v is None else [_bool(x, "sampling_correctness") for x in v],
    "consistency_judgement": lambda v: None if v is None else [_judgement(x) for x in v],
    "consistency_lexical": lambda v: None if v is None else [_float(x) for x in v],
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


def training_columns(record: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer's columns of one record (official or ours).

    Returns:
        `dict`: `consistency` (mean of `consistency_judgement` when it is present and non-empty, else mean of
        `consistency_lexical`, else `None`), `consistency_source` (`"consistency_judgement"`, `"consistency_lexical"`
        or `None`: which of the two was used), `correctness` (share of the samples judged correct, `None` when not
        judged) and `greedy_correct` (1/0, `None` when not judged).
    """
    flat = normalize_record(record)
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
            raise ValueError(f"Field {name!r} mixes value types across records: {error}") from None
        features[name] = generate_from_arrow_type(arrow_type)
    return Features(features)


def save_records(records: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> str:
    """Write records (normalized, see [`normalize_record`]) to `.parquet` (default) or `.jsonl`, atomically.

    The file is written next to `path` under a temporary name and moved into place with `os.replace`, so a reader
    (or a rerun after a crash) sees either no file or the complete one. Parquet files carry [`RECORD_FEATURES`] types
    and load with `datasets.load_dataset("parquet", data_files=path)`.

    Returns:
        `str`: `path`.
    """
    path = os.fspath(path)
    rows = [normalize_record(r) for r in records]
    extension = Path(path).suffix.lower()
    if extension not in (".parquet", ".jsonl"):
        raise ValueError(f"Unknown records format {extension!r} for {path}; use .parquet or .jsonl.")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    os.close(fd)
    try:
        if extension == ".jsonl":
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        else:
            features = record_features(rows) if rows else Features({"question": RECORD_FEATURES["question"]})
            pq.write_table(pa.Table.from_pylist(rows, schema=features.arrow_schema), tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a `.parquet` or `.jsonl` records file (official or ours) into normalized records."""
    path = os.fspath(path)
    extension = Path(path).suffix.lower()
    if extension == ".parquet":
        return [normalize_record(row) for row in pq.read_table(path).to_pylist()]
    if extension == ".jsonl":
        rows = []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        rows.append(normalize_record(json.loads(line)))
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{path} line {number} is not valid JSON: {error}") from None
        return rows
    raise ValueError(f"Unknown records format {extension!r} for {path}; use .parquet or .jsonl.")


def _parse_component(component: str) -> tuple[str | None, str | None, str]:
    """(dataset, split word, leftover text) of one path component, split into `_`-separated tokens."""
    tokens = [t for t in component.split("_") if t]
    dataset = split = None
    for length in range(len(tokens), 0, -1):  # longest run of tokens naming a dataset ("complex_web_questions")
        for begin in range(len(tokens) - length + 1):
            name = canonical_dataset("".join(tokens[begin : begin + length]))
            if name is not None:
                dataset, tokens = name, tokens[:begin] + tokens[begin + length :]
                break
        if dataset is not None:
            break
    rest = []
    for token in tokens:
        if split is None and token.lower() in SPLIT_WORDS:
            split = token.lower()
        else:
            rest.append(token)
    return dataset, split, "_".join(rest)


def parse_record_path(relative_path: str) -> dict[str, str | None]:
    """Infer `model`, `dataset` and `split` (the source split word) from a records file's path inside its folder.

    The official HonestyBench layout is not documented; these rules cover `<model>/<dataset>.jsonl`,
    `<model>/<split>/<dataset>.jsonl`, `<model>/<dataset>/<split>.jsonl`, `<model>/<dataset>_<split>.jsonl`,
    `<model>_<dataset>.jsonl` and `<dataset>_<split>_<model>.jsonl`:

    1. The extension is dropped; each folder name and the file name are split into `_`-separated tokens.
    2. The **dataset** is the longest run of tokens that is a known alias ([`DATASET_ALIASES`], compared lowercased
       without `_ - .`: `hq`, `hotpot_qa`, `web_questions`, `complex_web_questions`, ...), searched in the file
       name first, then in the folders from the deepest up.
    3. The **split** is a token in [`SPLIT_WORDS`] (`train`, `test`, `dev`, `validation`, ...), searched the same way.
    4. The **model** is the deepest folder that still has text once its dataset and split tokens are removed and is
       not a generic container ([`IGNORED_FOLDERS`]: `data`, `records`, ...); without one, what is left of the file
       name (`Qwen2.5-7B-Instruct_nq.jsonl` -> `Qwen2.5-7B-Instruct`); else `None`.

    Pass your own `path_parser` to [`load_honestybench`] for any other layout.

    Example:

    ```python
    >>> parse_record_path("Qwen2.5-7B-Instruct/test/hotpot_qa.jsonl")
    {'model': 'Qwen2.5-7B-Instruct', 'dataset': 'hotpotqa', 'split': 'test'}
    >>> parse_record_path("Llama3-8B-Instruct_web_questions_train.jsonl")
    {'model': 'Llama3-8B-Instruct', 'dataset': 'webquestions', 'split': 'train'}

    ```
    """
    parts = PurePosixPath(relative_path.replace(os.sep, "/")).parts
    stem = re.sub(r"\.(jsonl|parquet|json)(\.gz)?$", "", parts[-1], flags=re.IGNORECASE)
    parsed = [_parse_component(stem)] + [_parse_component(p) for p in reversed(parts[:-1])]
    dataset = next((d for d, _, _ in parsed if d is not None), None)
    split = next((s for _, s, _ in parsed if s is not None), None)
    folders = [rest for _, _, rest in parsed[1:] if rest and rest.lower() not in IGNORED_FOLDERS]
    model = folders[0] if folders else (parsed[0][2] or None)
    return {"model": model, "dataset": dataset, "split": split}


def paper_split(dataset: str | None, source_split: str | None = None) -> str:
    """The paper's split of a record: in-domain train files -> `train`, their test/dev files -> `in_domain_test`
    (unsplit in-domain data counts as `train`); OOD datasets -> `ood_test` (an OOD *train* file -> `other`);
    MMLU -> `mmlu`; anything else -> `other`."""
    if source_split in PAPER_SPLITS[1:]:
        return source_split
    kind = SPLIT_WORDS.get(str(source_split).lower()) if source_split is not None else None
    name = canonical_dataset(dataset)
    if name in IN_DOMAIN_DATASETS:
        return "in_domain_test" if kind == "test" else "train"
    if name in OOD_DATASETS:
        return "other" if kind == "train" else "ood_test"
    return "mmlu" if name == "mmlu" else "other"


def _download(repo_id: str, models: list[str] | None, revision: str | None) -> str:
    from huggingface_hub import snapshot_download

    from ..embedded import hub_offline

    patterns = [f"*{m}*.{ext}" for m in models or [""] for ext in ("jsonl", "parquet")]
    try:
        return snapshot_download(
            repo_id, repo_type="dataset", revision=revision, allow_patterns=patterns, local_files_only=hub_offline()
        )
    except Exception as error:  # offline, unreachable, unknown repo or not in the cache
        raise OSError(
            f"Could not get the dataset {repo_id!r} from the Hugging Face Hub ({type(error).__name__}: {error}). "
            f"Offline, download it on a machine with network (`hf download {repo_id} --repo-type dataset "
            f"--local-dir honestybench`) and pass that folder instead."
        ) from error


def record_files(root: str) -> list[str]:
    """Every `.jsonl` / `.parquet` records file under `root` (recursively, hidden files skipped), or `root` itself."""
    if os.path.isfile(root):
        return [root]
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        names = [n for n in sorted(names) if n.endswith((".jsonl", ".parquet")) and not n.startswith(".")]
        files += [os.path.join(directory, n) for n in names]
    if not files:
        raise ValueError(f"No .jsonl or .parquet records files under {root}.")
    return files


def _as_list(value: str | Iterable[str] | None) -> list[str] | None:
    return None if value is None else [value] if isinstance(value, str) else list(value)


def _model_matches(model: str | None, wanted: set[str] | None) -> bool:
    if wanted is None:
        return True
    return model is not None and (model.lower() in wanted or model.lower().rsplit("/", 1)[-1] in wanted)


def load_honestybench(
    path_or_repo: str | os.PathLike = HONESTYBENCH_REPO,
    models: str | list[str] | None = None,
    datasets: str | list[str] | None = None,
    split: str | list[str] | None = None,
    *,
    path_parser: Callable[[str], Mapping[str, str | None]] | None = None,
    revision: str | None = None,
    progress: bool = True,
) -> DatasetDict:
    """Load HonestyBench records (the official files or our own) into the paper's splits, with training columns.

    Args:
        path_or_repo (`str`, *optional*, defaults to `"Shiyunee/HonestyBench"`):
            A records file, a folder (every `.jsonl` / `.parquet` below it, hidden files skipped: the official
            layout, or the output of [`sample_records`]), or a Hub dataset id (downloaded with
            `huggingface_hub.snapshot_download`; offline this raises an `OSError` that says what to do).
        models (`str` or `list[str]`, *optional*): Keep these models only (case-insensitive; `"Qwen2.5-7B-Instruct"`
            also matches `"Qwen/Qwen2.5-7B-Instruct"`).
        datasets (`str` or `list[str]`, *optional*): Keep these datasets only (aliases allowed).
        split (`str` or `list[str]`, *optional*): Keep these of [`PAPER_SPLITS`] only.
        path_parser (`Callable[[str], dict]`, *optional*, defaults to [`parse_record_path`]):
            Maps a file's path relative to the folder (posix) to `{"model", "dataset", "split"}`; used for records
            without `model` / `dataset` / `split` fields (a record's own fields win).
        revision (`str`, *optional*): Hub revision.
        progress (`bool`, *optional*, defaults to `True`): Progress bar over files.

    Returns:
        [`~datasets.DatasetDict`]: non-empty splits among `train` (in-domain train files; in-domain data without a
        split word), `in_domain_test` (in-domain test/dev files), `ood_test`, `mmlu`, and `other` (records whose
        `dataset` field names no known dataset; a warning lists them). Each row is the flat record plus `model`,
        `dataset` (canonical), `source_split` and the columns of [`training_columns`].

    Raises:
        `ValueError`: for an unknown records format, a file whose records lack `dataset` and whose path names none,
        an unknown `datasets` / `split` filter, or when no record is left.
    """
    models, datasets, split = _as_list(models), _as_list(datasets), _as_list(split)
    wanted_models = None if models is None else {m.lower() for m in models}
    unknown = [n for n in datasets or [] if canonical_dataset(n) is None]
    if unknown:
        raise ValueError(f"Unknown dataset(s) {unknown}; known: {sorted(set(DATASET_ALIASES.values()))}.")
    wanted_datasets = None if datasets is None else {canonical_dataset(n) for n in datasets}
    if split is not None and not set(split) <= set(PAPER_SPLITS):
        raise ValueError(f"Unknown split(s) {sorted(set(split) - set(PAPER_SPLITS))}; choose from {PAPER_SPLITS}.")
    path_parser = path_parser or parse_record_path

    root = os.fspath(path_or_repo)
    if not os.path.exists(root):
        root = _download(root, models, revision)
    base = root if os.path.isdir(root) else os.path.dirname(root)

    parts: dict[str, list[Dataset]] = {}
    others: set[str] = set()
    for file in tqdm(record_files(root), desc="Reading records", unit="file", disable=not progress):
        relative = os.path.relpath(file, base).replace(os.sep, "/")
        hint = dict(path_parser(relative))
        hint_dataset = canonical_dataset(hint.get("dataset"))
        if hint_dataset and hint.get("model"):  # a path naming both: filtered out without reading the file
            if not _model_matches(hint["model"], wanted_models):
                continue
            if wanted_datasets is not None and hint_dataset not in wanted_datasets:
                continue
        rows = []
        for record in read_records(file):
            raw_dataset = record.get("dataset") or hint.get("dataset")
            if raw_dataset is None:
                raise ValueError(
                    f"{relative}: its records have no `dataset` field and its path names no known dataset "
                    f"({sorted(set(DATASET_ALIASES))}); rename it or pass `path_parser`."
                )
            record["dataset"] = canonical_dataset(raw_dataset) or str(raw_dataset)
            record["model"] = record.get("model") or hint.get("model")
            record["source_split"] = record.pop("split", None) or hint.get("split")
            part = paper_split(record["dataset"], record["source_split"])
            if part == "other" and canonical_dataset(record["dataset"]) is None:
                others.add(record["dataset"])
            if not _model_matches(record["model"], wanted_models):
                continue
            if wanted_datasets is not None and record["dataset"] not in wanted_datasets:
                continue
            if split is not None and part not in split:
                continue
            record.update(training_columns(record))
            rows.append((part, record))
        for part in {p for p, _ in rows}:
            chunk = [r for p, r in rows if p == part]
            parts.setdefault(part, []).append(Dataset.from_list(chunk, features=_features(chunk)))
    if others:
        logger.warning("Records of unknown dataset(s) %s went to the `other` split.", sorted(others))
    if not parts:
        raise ValueError(f"No records left in {path_or_repo} (models={models}, datasets={datasets}, split={split}).")
    return DatasetDict({name: _concatenate(parts[name]) for name in PAPER_SPLITS if name in parts})


def _features(rows: list[dict[str, Any]]) -> Features:
    return record_features(rows, Features({**RECORD_FEATURES, **TRAINING_FEATURES}))


def _concatenate(chunks: list[Dataset]) -> Dataset:
    """Concatenate datasets whose columns differ: missing columns are added as nulls of the first known type."""
    features: dict[str, Any] = {}
    for chunk in chunks:
        for name, feature in chunk.features.items():
            if name not in features or features[name] == Value("null"):
                features[name] = feature
    aligned = []
    for chunk in chunks:
        for name, feature in features.items():
            if name not in chunk.column_names:
                chunk = chunk.add_column(name, [None] * len(chunk), feature=feature)
        chunk = chunk.select_columns(list(features))
        if chunk.features != Features(features):
            chunk = chunk.cast(Features(features))
        aligned.append(chunk)
    return aligned[0] if len(aligned) == 1 else concatenate_datasets(aligned)

