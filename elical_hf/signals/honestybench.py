"""HonestyBench folders: records read into the paper's splits, and written as the data files of a dataset folder.

[`load_honestybench`] reads a file, a folder or a Hub dataset of records
([`~elical_hf.signals.records.load_records`]) into a [`~datasets.DatasetDict`] with the paper's splits and the columns
the trainer needs. [`write_honestybench_files`] writes records as the data files of a HonestyBench dataset folder
(parquet per model, dataset and split); [`~elical_hf.write_honestybench`] (`publishing/dataset_card.py`) adds the card,
and [`~elical_hf.push_honestybench`] publishes the folder. What a file's path says (model, dataset, split) is read in
[`~elical_hf.signals.records.layout`].
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import DatasetDict, Features, Value

from ..utils.files import path_component
from .records import check_unique_records, load_records, normalize_record, read_records, record_features
from .records.layout import (
    HONESTYBENCH_REPO, PAPER_SPLITS, canonical_dataset, hinted_record_files, paper_split, parse_record_path,
    source_split,
)


__all__ = ["HonestyBenchFiles", "load_honestybench", "write_honestybench_files"]


def load_honestybench(
    path_or_repo: str | os.PathLike = HONESTYBENCH_REPO,
    models: str | list[str] | None = None,
    datasets: str | list[str] | None = None,
    split: str | list[str] | None = None,
    *,
    path_parser: Callable[[str], Mapping[str, str | None]] | None = None,
    revision: str | None = None,
    progress: bool = True,
    allow_incomplete: bool = False,
    cache_dir: str | os.PathLike | None = None,
    num_samples: int | None = None,
) -> DatasetDict:
    """Load HonestyBench records (the official files or our own) into the paper's splits, with training columns: the
    records of [`~elical_hf.signals.records.load_records`]`(..., splits=True)`, grouped by their `paper_split`.

    The files are streamed (10,000 records at a time) into Arrow files on disk, and the splits are memory-mapped from
    them, so the whole of HonestyBench (560k train questions with 20 samples each) loads in a few GiB of memory
    (docs/scaling.md has the measurement). Loading the same files with the same filters again reads those Arrow files
    back without parsing anything.

    What was inferred is logged when the files are read: one line (INFO) of `file -> model / dataset / split` for
    every file, and a warning that counts the in-domain records that went to `train` only because nothing names
    their split. A record's own `consistency` / `correctness` values are kept (they are computed
    only where missing).

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
            without `model` / `dataset` / `source_split` (or legacy `split`) fields (a record's own fields win).
        revision (`str`, *optional*): Hub revision.
        progress (`bool`, *optional*, defaults to `True`): Progress bar over files.
        allow_incomplete (`bool`, *optional*, defaults to `False`): Read an unfinished `elical-hf sample` folder
            (manifest `complete: false`) anyway, with a warning that counts the missing rows; refused otherwise.
        cache_dir (`str`, *optional*): Where the Arrow files go, in `<cache_dir>/<key>` (the key hashes the files'
            paths, sizes and modification times, the filters and `path_parser`); defaults to
            `<datasets cache>/elical_hf/records`. Do not load the same files into one folder from two processes
            at once: load once, before launching several.
        num_samples (`int`, *optional*): Keep only each record's first `num_samples` samples (the paper's k
            ablation, targets from k' of the k samples): the per-sample fields are cut to them
            ([`~elical_hf.signals.records.first_samples`]) and `consistency` / `correctness` are derived from them,
            replacing a record's own values. A record with fewer samples, or with a target of its own but no
            per-sample judgements to derive it from, is a `ValueError`. `None` (the default) keeps every sample.

    Returns:
        [`~datasets.DatasetDict`]: non-empty splits among `train` (in-domain train files; in-domain data without a
        split word), `in_domain_test` (in-domain test/dev files), `ood_test`, `mmlu`, and `other` (records whose
        `dataset` field names no known dataset; a warning lists them). Each row is the flat record plus `model`,
        `dataset` (canonical), `source_split`, `paper_split` and the columns of [`training_columns`].

    Raises:
        `ValueError`: for an unknown records format, a file whose records lack `dataset` and whose path names none,
        an unknown `datasets` / `split` filter, one record held twice (the same `id` of one dataset), or when no
        record is left.
    """
    bench = load_records(
        path_or_repo, splits=True, models=models, datasets=datasets, split=split, num_samples=num_samples,
        path_parser=path_parser, revision=revision, allow_incomplete=allow_incomplete, cache_dir=cache_dir,
        progress=progress,
    )
    columns = [name for name in ("model", "dataset", "id") if name in bench.column_names]
    if "id" in columns:  # read by column: no record is built
        check_unique_records((dict(zip(columns, values)) for values in zip(*(bench[name] for name in columns))),
                             str(path_or_repo))
    parts = bench["paper_split"]
    indices = {name: [i for i, part in enumerate(parts) if part == name] for name in PAPER_SPLITS}
    return DatasetDict({name: bench.select(rows) for name, rows in indices.items() if rows})


# -- writing ----------------------------------------------------------------------------------------------------------


def _group_records(
    source: Any, path_parser: Callable[[str], Mapping[str, str | None]] | None
) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Group normalized records by (model, dataset, paper split)."""
    parser = path_parser or parse_record_path
    batches: list[tuple[str, Mapping[str, Any], Iterable[Mapping[str, Any]]]] = []
    if isinstance(source, Mapping):  # {"<model>/<dataset>/<split>" or (model, dataset, split): records or a file}
        for key, value in source.items():
            model, dataset, split = key if isinstance(key, tuple) else str(key).split("/")
            records = read_records(value) if isinstance(value, (str, os.PathLike)) else value
            batches.append((str(key), {"model": model, "dataset": dataset, "split": split}, records))
    elif isinstance(source, (str, os.PathLike)) or (
        isinstance(source, (list, tuple)) and source and isinstance(source[0], (str, os.PathLike))
    ):
        for root in [source] if isinstance(source, (str, os.PathLike)) else source:
            for file, relative, hint in hinted_record_files(root, parser):
                batches.append((relative, hint, read_records(file)))
    else:
        batches.append(("records", {}, source))
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for origin, hint, records in batches:
        for number, record in enumerate(records):
            row = normalize_record(record)
            model = row.get("model") or hint.get("model")
            raw = row.get("dataset") or hint.get("dataset")
            if not model or not raw:
                raise ValueError(
                    f"{origin}: a record has no `model` or `dataset` (and its path names none); add the fields or "
                    "pass {'<model>/<dataset>/<split>': records}."
                )
            row["model"], row["dataset"] = str(model), canonical_dataset(raw) or str(raw)
            try:  # both name folders of the dataset repository: never a way out of it
                path_component(row["model"].replace("/", "--"), "model")
                path_component(row["dataset"], "dataset")
            except ValueError as error:
                raise ValueError(f"{origin}, record {number}: {error}") from None
            row["source_split"] = source_split(row, hint)
            key = (row["model"], row["dataset"], paper_split(row["dataset"], row["source_split"]))
            groups.setdefault(key, []).append(row)
    if not groups:
        raise ValueError("No records to write.")
    return groups


@dataclass
class HonestyBenchFiles:
    """What [`write_honestybench_files`] wrote, and what the dataset card says about it.

    Args:
        parts (`list[dict]`): One entry per data file: `model`, `dataset`, `split`, `path` (in the folder),
            `num_examples`, `num_bytes` (Arrow size).
        features (`datasets.Features`): The records' schema (the same for every file).
        judges (`dict[str, list[str]]`): Names found in the records' `correctness_judge` / `consistency_judge`.
        samples_per_record (`list[int]`): Distinct numbers of sampled answers per record.
    """

    parts: list[dict[str, Any]]
    features: Features
    judges: dict[str, list[str]]
    samples_per_record: list[int]


def write_honestybench_files(
    source: Any,
    folder: str | os.PathLike,
    *,
    path_parser: Callable[[str], Mapping[str, str | None]] | None = None,
) -> HonestyBenchFiles:
    r"""
    Write HonestyBench records as the data files of a Hub dataset repository, `data/<model>/<dataset>/<split>.parquet`
    (splits `train` / `in_domain_test` / `ood_test`). The card that makes `datasets.load_dataset(folder_or_repo,
    "<model>--<dataset>")` find them is the publishing layer's: [`~elical_hf.write_honestybench`] writes both. Read
    the folder back with [`load_honestybench`].

    Args:
        source: Records files or folders (model, dataset and split read from each record's fields, else from the
            path, see [`parse_record_path`]); or a list of records with `model` and `dataset` fields; or a mapping
            `{"<model>/<dataset>/<split>": records or a file}`.
        folder (`str`): Where to write; must not exist or be empty.
        path_parser (`Callable`, *optional*): Maps a file's relative path to `{"model", "dataset", "split"}`.

    Returns:
        [`HonestyBenchFiles`]: the files written, their schema, the judges and sample counts found in the records.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty; write the dataset repository into a new folder.")
    groups = _group_records(source, path_parser)
    rows = [row for group in groups.values() for row in group]
    features = Features({**record_features(rows), "model": Value("string"), "dataset": Value("string"),
                         "source_split": Value("string")})
    parts = []
    for (model, dataset, split), records in sorted(groups.items()):
        relative = f"data/{model.replace('/', '--')}/{dataset}/{split}.parquet"
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(records, schema=features.arrow_schema)
        pq.write_table(table, folder / relative)
        parts.append({"model": model.replace("/", "--"), "dataset": dataset, "split": split, "path": relative,
                      "num_examples": len(records), "num_bytes": table.nbytes})
    judges = {kind: sorted({str(r[f"{kind}_judge"]) for r in rows if r.get(f"{kind}_judge")})
              for kind in ("correctness", "consistency")}
    samples = sorted({len(r["sampling_response"]) for r in rows if r.get("sampling_response") is not None})
    return HonestyBenchFiles(parts, features, judges, samples)
