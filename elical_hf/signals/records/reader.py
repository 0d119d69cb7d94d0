"""The one reader of records: any records input in, one `datasets.Dataset` of records and their training columns out.

[`load_records`] reads a `.jsonl` / `.parquet` file, a folder of them (an `elical-hf sample` output, the official
HonestyBench layout, the reference code's, an lm-evaluation-harness `--log_samples` output), a Hub dataset, a table
file (`.csv`, `.json`, `.arrow`, a `save_to_disk` folder: training rows are records without answers) or records in
memory. Files are streamed a batch at a time into Arrow files on disk and memory-mapped back, so HonestyBench's 560k
train questions with 20 samples each load in a few GiB; loading the same files again reads those Arrow files without
parsing anything. [`require_judgement`] refuses records that lack the judgement a target needs, naming the
`elical-hf judge` option that fills it (or, for records without sampled answers, saying they serve evaluation only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from datasets import Dataset, Features, Value, concatenate_datasets
from tqdm.auto import tqdm

from ...utils.files import looks_local
from ...models.hub_ids import same_model
from .layout import (
    DATASET_ALIASES, PAPER_SPLITS, canonical_dataset, download_records, hinted_record_files, paper_split,
    parse_record_path, path_hint, source_split,
)
from .lm_eval_logs import (
    LM_EVAL_JUDGE, is_lm_eval_samples, iter_lm_eval_batches, latest_lm_eval_runs, lm_eval_results_file,
    refuse_lm_eval_results,
)
from .schema import (
    RECORD_FEATURES, TRAINING_FEATURES, add_training_columns, is_record, is_records_table, record_features,
)
from .storage import check_complete_samples, iter_record_batches, normalize_at


__all__ = [
    "ARROW_INDEX", "JUDGE_OPTIONS", "RECORD_BATCH_SIZE", "TABLE_EXTENSIONS", "check_records_match",
    "check_records_model", "check_unique_records", "judged_records", "load_records", "require_judgement", "same_model",
]

logger = logging.getLogger(__name__)

RECORD_BATCH_SIZE = 10_000
"""Records parsed (and held in memory) at a time."""
ARROW_INDEX = "index.json"
"""The file of a [`load_records`] Arrow folder that lists its Arrow files in order; written last."""
TABLE_EXTENSIONS = (".csv", ".json", ".arrow")
"""Table files read as rows ([`~elical_hf.data.training_table.load_table`]); `.jsonl` and `.parquet` are records
files."""

JUDGE_OPTIONS = {
    "consistency": "elical-hf judge --consistency embedding (or lexical / llm)",
    "correctness": "elical-hf judge --correctness has_answer (or em / f1 / llm)",
    "greedy_correctness": "elical-hf judge --correctness has_answer (or em / f1 / llm)",
}
"""Which `judge` option fills the judgement a column is derived from (the two training targets and the evaluation
label)."""


def _as_list(value: str | Iterable[str] | None) -> list[str] | None:
    return None if value is None else [value] if isinstance(value, str) else list(value)


def _model_matches(model: str | None, wanted: set[str] | None) -> bool:
    if wanted is None:
        return True
    return model is not None and (model.lower() in wanted or model.lower().rsplit("/", 1)[-1] in wanted)


class _Reading:
    """What one [`load_records`] call keeps and adds to each record, and what it found on the way (for its log lines
    and its error when nothing is left)."""

    def __init__(self, derive: bool, splits: bool, models: list[str] | None, datasets: list[str] | None,
                 split: list[str] | None, num_samples: int | None):
        self.derive, self.splits, self.num_samples = derive, splits, num_samples
        self.filters = (models, datasets, split)
        self.models = None if models is None else {m.lower() for m in models}
        self.datasets = None if datasets is None else {canonical_dataset(n) for n in datasets}
        self.split = split
        self.found: dict[str, set[str]] = {"models": set(), "datasets": set(), "splits": set()}
        self.inferred: dict[str, set[tuple[Any, str, str]]] = {}  # file -> (model, dataset, split) read from it
        self.unsplit: dict[str, int] = {}  # file -> in-domain records put in train without any split word
        self.others: set[str] = set()

    @property
    def filtering(self) -> bool:
        return any(f is not None for f in self.filters)

    def note(self, model: str | None, dataset: str, part: str) -> None:
        self.found["models"].add(model or "(no model named)")
        self.found["datasets"].add(dataset)
        self.found["splits"].add(part)

    def skips_file(self, hint: Mapping[str, Any]) -> bool:
        """Whether a file whose path names both its model and its dataset is filtered out without being read."""
        dataset = canonical_dataset(hint.get("dataset"))
        if not (self.splits and dataset and hint.get("model")):
            return False
        self.note(hint["model"], dataset, paper_split(dataset, hint.get("split")))
        return not _model_matches(hint["model"], self.models) or (self.datasets is not None
                                                                  and dataset not in self.datasets)

    def prepare(self, record: dict[str, Any], hint: Mapping[str, Any], where: str) -> bool:
        """Add what this reading adds to `record` (in place); `False` when a filter leaves it out."""
        if self.splits:
            raw = record.get("dataset") or hint.get("dataset")
            if raw is None:
                raise ValueError(f"{where}: its records have no `dataset` field and its path names no known dataset "
                                 f"({sorted(set(DATASET_ALIASES))}); rename it or pass `path_parser`.")
            record["dataset"] = canonical_dataset(raw) or str(raw)
            record["model"] = record.get("model") or hint.get("model")
            record["source_split"] = source_split(record, hint)
            part = record["paper_split"] = paper_split(record["dataset"], record["source_split"])
            self.note(record["model"], record["dataset"], part)
            self.inferred.setdefault(where, set()).add((record["model"], record["dataset"], part))
            if part == "train" and record["source_split"] is None:
                self.unsplit[where] = self.unsplit.get(where, 0) + 1
            if part == "other" and canonical_dataset(record["dataset"]) is None:
                self.others.add(record["dataset"])
            if not _model_matches(record["model"], self.models):
                return False
            if self.datasets is not None and record["dataset"] not in self.datasets:
                return False
            if self.split is not None and part not in self.split:
                return False
        if self.derive and (self.splits or self.num_samples is not None or is_record(record)):
            add_training_columns(record, self.num_samples)
        return True

    def rows(self, batch: Iterable[dict[str, Any]], hint: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        return [record for record in batch if self.prepare(record, hint, where)]

    def finish(self, source: Any, empty: bool, one_file: bool = False) -> None:
        """Log what was inferred and refuse a reading that left nothing (when something was asked of it, or when it
        read one file: a file without records is a mistake)."""
        if self.splits and self.inferred:
            logger.info("Read %s", "; ".join(
                f"{file} -> " + ", ".join(f"{m} / {d} / {p}" for m, d, p in sorted(found_in, key=str))
                for file, found_in in self.inferred.items()
            ))
        if self.unsplit:
            logger.warning(
                "%d in-domain record(s) in %d file(s) name no split (no `source_split` field, no split word in the "
                "path) and count as train: %s. Mark test data with a `source_split` field or a split word in its path "
                "(`nq_test.jsonl`).",
                sum(self.unsplit.values()), len(self.unsplit), ", ".join(sorted(self.unsplit)),
            )
        if self.others:
            logger.warning("Records of unknown dataset(s) %s went to the `other` split.", sorted(self.others))
        if empty and (self.splits or self.filtering):
            models, datasets, split = self.filters
            present = "; ".join(f"{kind}: {', '.join(sorted(names))}" for kind, names in self.found.items() if names)
            raise ValueError(
                f"No records left in {source} (models={models}, datasets={datasets}, split={split}). "
                + (f"Found {present}." if present else "Its files hold no records.")
            )
        if empty and one_file:
            raise ValueError(f"{source} holds no rows (only blank lines, or a header without rows).")


def load_records(
    source: Any,
    *,
    derive: bool = True,
    splits: bool = False,
    models: str | list[str] | None = None,
    datasets: str | list[str] | None = None,
    split: str | list[str] | None = None,
    num_samples: int | None = None,
    path_parser: Callable[[str], Mapping[str, str | None]] | None = None,
    revision: str | None = None,
    allow_incomplete: bool = False,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> Dataset:
    """
    Read any records input into one `datasets.Dataset`: the normalized records, in file order, with the columns the
    trainer needs wherever the judgements allow.

    Every command and step reads records here. The commands that write records back (`judge`, `baselines`,
    `select-labels`) read them with `derive=False`, as they are stored: the training columns are a function of the
    judgements, and those commands are about to change them.

    Args:
        source: A `.jsonl` / `.parquet` records file (official HonestyBench records or ours), a folder (every such
            file below it, hidden ones skipped, in [`~elical_hf.signals.records.record_files`] order: an `elical-hf
            sample` output, a HonestyBench layout; lm-evaluation-harness samples files, `samples_<task>_<date>.jsonl`
            with their `results_<date>.json`, are read as judged greedy answers by
            [`~elical_hf.signals.records.read_lm_eval_records`]), a Hub dataset id (its `.jsonl` / `.parquet` files,
            downloaded with `huggingface_hub.snapshot_download`; offline this raises an `OSError` that says what to
            do), a table file (`.csv`, `.json`, `.arrow`) or `save_to_disk` folder of training rows, or records in
            memory (a list of dicts or a `datasets.Dataset`).
        derive (`bool`, *optional*, defaults to `True`): Add the training columns
            ([`~elical_hf.signals.records.training_columns`]: `consistency`, `consistency_source`, `correctness`) to
            each record that lacks them; a record's own values win. Rows without answers or judgements (training
            rows) are left as they are. The evaluation label is the record's own `greedy_correctness`.
        splits (`bool`, *optional*, defaults to `False`): Give every record the paper's split (`paper_split`:
            `train`, `in_domain_test`, `ood_test`, `mmlu` or `other`, [`~elical_hf.signals.records.paper_split`]),
            with `dataset` (canonical), `model` and `source_split` (its split word; a legacy `split` field is moved
            there) filled from the path where the record has none ([`~elical_hf.signals.records.parse_record_path`]).
            A record naming no dataset, or whose path's split word is a typo while it has no split word, is refused.
            What was inferred is logged (`file -> model / dataset / split`), with a warning that counts in-domain
            records that went to `train` only because nothing names their split.
        models (`str` or `list[str]`, *optional*): Keep these models only (case-insensitive; `"Qwen2.5-7B-Instruct"`
            also matches `"Qwen/Qwen2.5-7B-Instruct"`); implies `splits`.
        datasets (`str` or `list[str]`, *optional*): Keep these datasets only (aliases allowed); implies `splits`.
        split (`str` or `list[str]`, *optional*): Keep these of [`~elical_hf.signals.records.PAPER_SPLITS`] only;
            implies `splits`.
        num_samples (`int`, *optional*): Keep only each record's first `num_samples` samples (the paper's k
            ablation): the per-sample fields are cut to them ([`~elical_hf.signals.records.first_samples`]) and
            `consistency` / `correctness` are derived from them, replacing a record's own values. A record with fewer
            samples, or with a target of its own but no per-sample judgements, is a `ValueError`.
        path_parser (`Callable[[str], dict]`, *optional*, defaults to [`~elical_hf.signals.records.parse_record_path`]):
            Maps a file's path relative to the folder (posix) to `{"model", "dataset", "split"}` (with `splits`).
        revision (`str`, *optional*): Hub revision.
        allow_incomplete (`bool`, *optional*, defaults to `False`): Read an unfinished `elical-hf sample` folder
            (manifest `complete: false`) anyway, with a warning that counts the missing rows; refused otherwise.
        cache_dir (`str`, *optional*): Where the Arrow files go, in `<cache_dir>/<key>` (the key hashes the files'
            paths, sizes and modification times and every option above); defaults to
            `<datasets cache>/elical_hf/records`. Do not load the same files into one folder from two processes at
            once: load once, before launching several.
        progress (`bool`, *optional*, defaults to `False`): Progress bar over files.

    Returns:
        `datasets.Dataset`: one row per record, memory-mapped from Arrow files when read from files (`.to_list()`
        is the list form, for code that fills records in place). Columns present in some records only are null in
        the others.

    Raises:
        `ValueError`: an unknown file format, a record of the wrong shape (naming the file, line or row and id), an
            unknown `datasets` / `split` filter, no record left once filtered; `FileNotFoundError` for a local path
            that is not there; `OSError` when the Hub cannot give a dataset.
    """
    models, datasets, split = _as_list(models), _as_list(datasets), _as_list(split)
    unknown = [n for n in datasets or [] if canonical_dataset(n) is None]
    if unknown:
        raise ValueError(f"Unknown dataset(s) {unknown}; known: {sorted(set(DATASET_ALIASES.values()))}.")
    if split is not None and not set(split) <= set(PAPER_SPLITS):
        raise ValueError(f"Unknown split(s) {sorted(set(split) - set(PAPER_SPLITS))}; choose from {PAPER_SPLITS}.")
    if num_samples is not None and not derive:
        raise ValueError("`num_samples` derives the training columns anew: it needs `derive=True`.")
    reading = _Reading(derive, splits or any(f is not None for f in (models, datasets, split)), models, datasets,
                       split, num_samples)
    path_parser = path_parser or parse_record_path
    if isinstance(source, Dataset) or (isinstance(source, Sequence) and not isinstance(source, str)):
        rows = source.to_list() if isinstance(source, Dataset) else list(source)
        chunk = reading.rows((normalize_at(row, f"record {i}") for i, row in enumerate(rows)), {}, "the records")
        reading.finish("the records", not chunk)
        return _in_memory([chunk])
    root = os.fspath(source)
    if not os.path.exists(root):
        if looks_local(root):
            raise FileNotFoundError(2, "No such file or folder", root)
        root = download_records(root, models, revision)
    check_complete_samples(root, allow_incomplete)
    if os.path.isfile(root) and os.path.getsize(root) == 0:
        raise ValueError(f"{root} is empty: a records file or table needs rows.")
    refuse_lm_eval_results(root)
    if _is_table(root):
        return _read_table(root, reading, path_parser)
    hinted = hinted_record_files(root, path_parser)
    latest = set(latest_lm_eval_runs([file for file, _, _ in hinted]))  # the latest lm-eval run of each task and model
    hinted = [item for item in hinted if item[0] in latest]
    folder = _cache_folder(cache_dir, hinted, reading, path_parser)
    if not os.path.isfile(os.path.join(folder, ARROW_INDEX)):
        from ...utils.atomic import cache_lock

        # Processes reading the same records at once (the ranks of `accelerate launch`) build the cache once: the
        # others wait, then read it (replacing a finished cache would pull it from under a process reading it).
        with cache_lock(folder):
            if not os.path.isfile(os.path.join(folder, ARROW_INDEX)):
                _records_to_arrow(hinted, folder, reading, source, progress)
    names = _indexed(folder)
    if not names:
        return Dataset.from_list([])
    return _concatenate([Dataset.from_file(os.path.join(folder, name)) for name in names])


def _is_table(path: str) -> bool:
    """A table file or `save_to_disk` folder (read by `load_table`), not records files."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, "dataset_info.json"))
    return os.path.splitext(path)[1].lower() in TABLE_EXTENSIONS


def _read_table(path: str, reading: _Reading, path_parser: Callable) -> Dataset:
    """A table file or `save_to_disk` folder, its rows read as records (in memory)."""
    from ...data.training_table import load_table

    table = load_table(path)
    hint = path_hint(os.path.basename(path.rstrip("/")), path_parser) if reading.splits else {}
    chunks = [reading.rows((normalize_at(row, f"{path} row {start + i}") for i, row in enumerate(batch)), hint, path)
              for start, batch in _table_batches(table)]
    reading.finish(path, not any(chunks), one_file=os.path.isfile(path))
    return _in_memory(chunks)


def _table_batches(table: Dataset) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    for start in range(0, len(table), RECORD_BATCH_SIZE):
        yield start, table.select(range(start, min(start + RECORD_BATCH_SIZE, len(table)))).to_list()


def _features(rows: list[dict[str, Any]]) -> Features:
    return record_features(rows, Features({**RECORD_FEATURES, **TRAINING_FEATURES}))


def _in_memory(chunks: list[list[dict[str, Any]]]) -> Dataset:
    chunks = [chunk for chunk in chunks if chunk]
    if not chunks:
        return Dataset.from_list([])
    return _concatenate([Dataset.from_list(chunk, features=_features(chunk)) for chunk in chunks])


def _indexed(folder: str) -> list[str]:
    with open(os.path.join(folder, ARROW_INDEX), encoding="utf-8") as handle:
        return json.load(handle)["files"]


def _cache_folder(cache_dir: str | os.PathLike | None, hinted: list[tuple[str, str, dict[str, Any]]],
                  reading: _Reading, path_parser: Callable) -> str:
    """`<cache_dir>/<key>` (`cache_dir` defaults to `<datasets cache>/elical_hf/records`): the key hashes the files
    (path, size, modification time), every option of the reading and the path parser, so changed files or options
    get a new folder."""
    from datasets import config
    from datasets.fingerprint import Hasher

    try:
        parser_key = Hasher.hash(path_parser)
    except Exception:  # an unhashable parser: never reuse its folder
        parser_key = os.urandom(8).hex()
    files = [file for file, _, _ in hinted]
    files += [results for results in map(lm_eval_results_file, files) if results]  # an lm-eval run's model and splits
    stats = [(os.path.abspath(file), os.stat(file).st_size, os.stat(file).st_mtime_ns) for file in files]
    options = {"filters": list(reading.filters), "derive": reading.derive, "splits": reading.splits,
               "num_samples": reading.num_samples}
    key = json.dumps({"files": stats, **options, "parser": parser_key, "layout": 4})
    root = os.fspath(cache_dir) if cache_dir is not None else os.path.join(config.HF_DATASETS_CACHE, "elical_hf",
                                                                            "records")
    return os.path.join(root, hashlib.sha256(key.encode()).hexdigest())


def _records_to_arrow(hinted: list[tuple[str, str, dict[str, Any]]], folder: str, reading: _Reading, source: Any,
                      progress: bool) -> None:
    """Stream the records of `hinted` files into Arrow files under `folder` (one per file and batch, in order), then
    write [`ARROW_INDEX`]; the folder appears complete or not at all."""
    import pyarrow as pa
    from datasets.arrow_writer import ArrowWriter

    from ...utils.atomic import atomic_folder

    files: list[str] = []
    with atomic_folder(folder) as staging:
        for file, relative, hint in tqdm(hinted, desc="Reading records", unit="file", disable=not progress):
            lm_eval = is_lm_eval_samples(file)  # its records name their model and dataset; its path need not
            if not lm_eval and reading.skips_file(hint):
                continue
            read = iter_lm_eval_batches if lm_eval else iter_record_batches
            for batch in read(file, RECORD_BATCH_SIZE):
                chunk = reading.rows(batch, hint, relative)
                if not chunk:
                    continue
                features = _features(chunk)
                name = f"part-{len(files):05d}.arrow"
                with ArrowWriter(features=features, path=os.path.join(staging, name)) as writer:
                    writer.write_table(pa.Table.from_pylist(chunk, schema=features.arrow_schema))
                    writer.finalize()
                files.append(name)
        one_file = len(hinted) == 1 and os.path.isfile(source)
        reading.finish(source, not files, one_file)  # before the index: a refused reading leaves no folder behind
        (staging / ARROW_INDEX).write_text(json.dumps({"files": files}, indent=2), encoding="utf-8")


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


def judged_records(rows: list[dict[str, Any]], what: str, say: Callable[[str], Any]) -> list[dict[str, Any]]:
    """The `rows` whose greedy answer is judged (`greedy_correctness` not null): one `ValueError` when none is, and a
    warning through `say` counting the ones left out (`what` names the rows: `"test"`, `"train"`)."""
    judged = [r for r in rows if r.get("greedy_correctness") is not None]
    if not judged:
        raise ValueError(f"None of the {len(rows)} {what} records has a judged greedy answer (`greedy_correctness`); "
                         f"run `{JUDGE_OPTIONS['greedy_correctness']}` on them first.")
    if len(judged) < len(rows):
        say(f"warning: {len(rows) - len(judged)} of {len(rows)} {what} records have no judged greedy answer "
            f"(greedy_correctness is null) and are left out: n = {len(judged)}.")
    return judged


def require_judgement(records: Dataset, target: str, name: str) -> None:
    """Refuse records that lack the judgement `target` (`consistency`, `correctness` or `greedy_correctness`) is
    derived from: one `ValueError` naming the first such record and the `elical-hf judge` option that fills it (for
    an lm-evaluation-harness log, which has no sampled answers, saying it serves evaluation only). A table of
    training rows (no answers, no samples) is left to the trainer's own check of its columns."""
    if not is_records_table(records.column_names):
        return
    values = records[target] if target in records.column_names else [None] * len(records)
    missing = next((row for row, value in enumerate(values) if value is None), None)
    if missing is None:
        return
    record = records[missing]
    record_id = record.get("id")
    where = f"record {record_id!r}" if record_id is not None else f"row {missing}"
    if str(record.get("correctness_judge") or "").startswith(LM_EVAL_JUDGE) and not record.get("sampling_response"):
        raise ValueError(
            f"The {name} records are an lm-evaluation-harness log ({where}, task {record.get('dataset')!r}): one "
            f"greedy answer per question and no sampled answers to derive the {target!r} target from. They serve "
            "`elical-hf evaluate`, not training: to train, sample answers to their questions with `elical-hf sample` "
            "and judge them with `elical-hf judge`."
        )
    raise ValueError(f"The {name} records have no judgement to derive the {target!r} target from ({where} and maybe "
                     f"others): run `{JUDGE_OPTIONS.get(target, 'elical-hf judge')}` on them first.")


def check_unique_records(records: Iterable[Mapping[str, Any]], where: str) -> None:
    """Refuse records that hold one record (one model's answer to one `id` of one `dataset`) twice: each copy would
    count in every metric, and in training.

    Args:
        records: The records (their `model`, `dataset` and `id` fields; records without an `id` are not compared).
        where (`str`): The records' source, for the message.
    """
    seen: dict[tuple[str, str, str], int] = {}
    for row, record in enumerate(records):
        if record.get("id") is None:
            continue
        key = (str(record.get("model")), str(record.get("dataset")), str(record["id"]))
        if key in seen:
            raise ValueError(f"{where} holds record {record['id']!r} ({key[1]}) twice (rows {seen[key]} and {row}): "
                             "each copy would count in every metric. Remove the duplicate.")
        seen[key] = row


def check_records_model(models: Iterable[str | None], base_model: str | None, where: str,
                        allow_other_model: bool = False, *, use: str = "this confidence model is built on") -> None:
    """Refuse records that are not the answers of `base_model`, or that pool several models: a confidence model is
    trained and scored against its own base model's answers.

    Args:
        models: Each record's `model` (`None` where it names none).
        base_model (`str`, *optional*): The base model (nothing is compared without it, but pooled models are still
            refused).
        where (`str`): The records' source, for the message.
        allow_other_model (`bool`): Accept another model's records (e.g. of the model this one was fine-tuned from).
        use (`str`, *optional*): What the base model is to the caller, for the message.
    """
    if allow_other_model:
        return
    names = sorted({str(model) for model in models if model})
    if len(names) > 1:
        raise ValueError(f"{where} pools the answers of several models ({', '.join(names)}): a confidence model is "
                         "trained and scored on its own base model's answers. Keep one model's records (or pass "
                         "--allow_other_model).")
    if names and base_model and not same_model(names[0], base_model):
        raise ValueError(f"{where} holds the answers of {names[0]}, but {use} {base_model}: its confidences would "
                         "be learnt or scored against another model's answers. Use that model's records, or pass "
                         "--allow_other_model if it was fine-tuned from this one.")


def check_records_match(records: list[Mapping[str, Any]], base_model: str | None, where: str,
                        allow_other_model: bool = False) -> None:
    """Refuse scoring a confidence model against records that are not its base model's answers, or that pool several
    models ([`check_records_model`]), or that hold one record twice ([`check_unique_records`]).

    Args:
        records: The records (their `model`, `dataset` and `id` fields).
        base_model (`str`, *optional*): The confidence model's base (`confidence_config.base_model_name_or_path`).
        where (`str`): The records' source, for the message.
        allow_other_model (`bool`): Accept another model's records (e.g. of the model this one was fine-tuned from).
    """
    check_unique_records(records, where)
    check_records_model((r.get("model") for r in records), base_model, where, allow_other_model)
