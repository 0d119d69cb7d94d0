"""HonestyBench folders: the official layout or our own record folders, read into the paper's splits, and written.

[`parse_record_path`] reads model, dataset and source split from a records file's path, [`paper_split`] maps a
dataset and split word to the paper's split, and [`load_honestybench`] reads a file, a folder or a Hub dataset of
records (normalized by [`~elical_hf.signals.records.read_records`]) into a [`~datasets.DatasetDict`] with the columns
the trainer needs. [`write_honestybench_files`] writes records as the data files of a HonestyBench dataset folder
(parquet per model, dataset and split); [`~elical_hf.write_honestybench`] (publishing, `dataset_card.py`) adds the card,
and [`~elical_hf.push_honestybench`] publishes the folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from datasets import Dataset, DatasetDict, Features, Value, concatenate_datasets
from tqdm.auto import tqdm

from ..bundled import IN_DOMAIN_DATASETS, OOD_DATASETS
from ..files import looks_local, path_component
from .records import (
    RECORD_FEATURES, TRAINING_FEATURES, check_complete_samples, first_samples, iter_record_batches, normalize_record,
    read_records, record_features, record_files, training_columns,
)


__all__ = [
    "DATASET_ALIASES", "HONESTYBENCH_REPO", "PAPER_SPLITS", "HonestyBenchFiles", "canonical_dataset",
    "load_honestybench", "paper_split", "parse_record_path", "write_honestybench_files",
]

logger = logging.getLogger(__name__)

HONESTYBENCH_REPO = "Shiyunee/HonestyBench"

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

_REFERENCE_SPLIT_FOLDER = re.compile(r"(train|test|dev)_data", re.IGNORECASE)
_REFERENCE_FILE = re.compile(
    r"(?P<dataset>.+?)_(?P<split>train|test|dev)_(?P<model>.+?)_(?P<prompt>[a-z]+(?:_[a-z]+)*_qa)"
    r"(?:_-?\d+(?:\.\d+)?){0,3}_sample_\d+(?:_.*)?",
    re.IGNORECASE,
)
"""File names of the reference code's outputs: `<dataset>_<split>_<model>_<prompt type>_<temperature>_<top_p>_<top_k>
_sample_<n>[_<suffix>]`, e.g. `nq_test_Qwen2.5-7B-Instruct_long_qa_1.0_0.95_50_sample_20.jsonl`."""


def canonical_dataset(name: str | None) -> str | None:
    """Canonical dataset name of an alias (`"hq"`, `"hotpot_qa"` -> `"hotpotqa"`), or `None` when unknown."""
    if name is None:
        return None
    return DATASET_ALIASES.get(re.sub(r"[\s_\-.]", "", str(name).lower()))


def _near_split_word(tokens: list[str], where: str) -> None:
    """Refuse a token that looks like a mistyped split word (`tset`, `tests`, `trian`): guessing would put test data
    into train."""
    for token in tokens:
        word = token.lower()
        if word in SPLIT_WORDS or canonical_dataset(word) is not None or len(word) < 4 or not word.isalpha():
            continue
        close = next((split for split in SPLIT_WORDS if _one_slip(word, split)), None)
        if close:
            raise ValueError(
                f"{where}: {token!r} looks like the split word {close!r} but is none of {sorted(SPLIT_WORDS)}; "
                "rename the file or folder, add a `split` field to the records, or pass `path_parser`."
            )


def _one_slip(word: str, target: str) -> bool:
    """Whether `word` is `target` with two neighbouring letters swapped, one letter added or one left out (a typo;
    a changed letter is not counted: `text`, `best` are words of their own)."""
    if len(word) == len(target):
        slips = [i for i in range(len(word)) if word[i] != target[i]]
        return len(slips) == 2 and slips[1] == slips[0] + 1 and word[slips[0]] == target[slips[1]] \
            and word[slips[1]] == target[slips[0]]
    longer, shorter = (word, target) if len(word) > len(target) else (target, word)
    return len(longer) == len(shorter) + 1 and any(longer[:i] + longer[i + 1:] == shorter for i in range(len(longer)))


def _parse_component(
    component: str, folder: bool = False, strict: bool = True
) -> tuple[str | None, str | None, str]:
    """(dataset, split word, leftover text) of one path component, split into `_`-separated tokens. In a folder name
    with other text (`train_run1`), a train word is not taken as the split (the folder is just named so). With
    `strict`, a typo of a split word is a `ValueError` ([`_near_split_word`])."""
    tokens = [t for t in component.split("_") if t]
    if strict:
        _near_split_word(tokens, component)
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
    leftover = "_".join(rest)
    if folder and split is not None and SPLIT_WORDS[split] == "train" and leftover and leftover.lower() not in IGNORED_FOLDERS:
        return dataset, None, "_".join(tokens)
    return dataset, split, leftover


def _reference_layout(parts: tuple[str, ...], stem: str) -> dict[str, str | None] | None:
    """Model, dataset and split of a file in the reference code's output layout, or `None` if it is not one.

    The layout is `<model>/<dataset>/<split>_data/<prompt type>/<file>` (`infer_scripts/run_infer_consistency.sh` of
    the paper's repository), the file named as in [`_REFERENCE_FILE`]. With the folders, the model is the folder
    above the dataset's; without them, the file name's.
    """
    folders, named = parts[:-1], _REFERENCE_FILE.fullmatch(stem)
    for i, folder in enumerate(folders):
        split = _REFERENCE_SPLIT_FOLDER.fullmatch(folder)
        if split and i >= 1 and canonical_dataset(folders[i - 1]) is not None:
            model = folders[i - 2] if i >= 2 else named["model"] if named else None
            return {"model": model, "dataset": canonical_dataset(folders[i - 1]), "split": split[1].lower()}
    if named is None or canonical_dataset(named["dataset"]) is None:
        return None
    return {"model": named["model"], "dataset": canonical_dataset(named["dataset"]), "split": named["split"].lower()}


def parse_record_path(relative_path: str, *, strict: bool = True) -> dict[str, str | None]:
    """Infer `model`, `dataset` and `split` (the source split word) from a records file's path inside its folder.

    The layout the paper's reference code writes is recognised first: `<model>/<dataset>/<split>_data/<prompt type>/`
    holding `<dataset>_<split>_<model>_<prompt type>_<temperature>_<top_p>_<top_k>_sample_<n>[_<suffix>].jsonl`, e.g.
    `nq_test_Qwen2.5-7B-Instruct_long_qa_1.0_0.95_50_sample_20.jsonl` in `Qwen2.5-7B-Instruct/nq/test_data/long_qa/`.
    The model is the folder above the dataset's (without the folders, the file name's). Those files are the
    reference's raw inference outputs (greedy answers, samples, judge replies in separate files), not merged
    HonestyBench records. The official HonestyBench layout is not documented; the other rules cover
    `<model>/<dataset>.jsonl`, `<model>/<split>/<dataset>.jsonl`, `<model>/<dataset>/<split>.jsonl`,
    `<model>/<dataset>_<split>.jsonl`, `<model>_<dataset>.jsonl` and `<dataset>_<split>_<model>.jsonl`:

    1. The extension is dropped; each folder name and the file name are split into `_`-separated tokens.
    2. The **dataset** is the longest run of tokens that is a known alias ([`DATASET_ALIASES`], compared lowercased
       without `_ - .`: `hq`, `hotpot_qa`, `web_questions`, `complex_web_questions`, ...), searched in the file
       name first, then in the folders from the deepest up.
    3. The **split** is a token in [`SPLIT_WORDS`] (`train`, `test`, `dev`, `validation`, ...), searched the same way;
       a train word in a folder name with other text (`train_run1`) is not a split (a test word there still is), and
       a typo of a split word (`tset`, `tests`, `trian`: two letters swapped, one added or left out) is a
       `ValueError`, so test data is never turned into train data by a guess. With `strict=False` a typo is not an
       error (it stays in the leftover text): [`load_honestybench`] reads such a path so, and refuses only records
       that need the path's split, those without a `split` field of their own.
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
    >>> folder = "Qwen2.5-7B-Instruct/hq/test_data/long_qa/"
    >>> parse_record_path(folder + "hq_test_Qwen2.5-7B-Instruct_long_qa_0.0_0.95_50_sample_1.jsonl")
    {'model': 'Qwen2.5-7B-Instruct', 'dataset': 'hotpotqa', 'split': 'test'}

    ```
    """
    parts = PurePosixPath(relative_path.replace(os.sep, "/")).parts
    stem = re.sub(r"\.(jsonl|parquet|json)(\.gz)?$", "", parts[-1], flags=re.IGNORECASE)
    reference = _reference_layout(parts, stem)
    if reference is not None:
        return reference
    parsed = [_parse_component(stem, strict=strict)]
    parsed += [_parse_component(p, folder=True, strict=strict) for p in reversed(parts[:-1])]
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

    from ..default_model import hub_offline

    if looks_local(repo_id):  # a mistyped path, not a Hub id
        raise FileNotFoundError(2, "No such file or folder", repo_id)
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


def _hinted_record_files(
    root: str | os.PathLike, path_parser: Callable[[str], Mapping[str, str | None]]
) -> list[tuple[str, str, dict[str, str | None]]]:
    """(file, its path inside `root` in posix form, what `path_parser` reads from that path) for each records file
    of `root` ([`~elical_hf.signals.records.record_files`]: `root` itself when it is a file)."""
    root = os.fspath(root)
    base = root if os.path.isdir(root) else os.path.dirname(root)
    hinted = []
    for file in record_files(root):
        relative = os.path.relpath(file, base).replace(os.sep, "/")
        try:
            hint = dict(path_parser(relative))
        except ValueError as error:  # a typo of a split word: an error only for records without a split of their own
            if path_parser is not parse_record_path:
                raise
            hint = {**parse_record_path(relative, strict=False), _SPLIT_TYPO: str(error)}
        hinted.append((file, relative, hint))
    return hinted


_SPLIT_TYPO = "split_typo"
"""The key of a path hint whose split word is a typo (its message): see [`_source_split`]."""


def _source_split(own: Any, hint: Mapping[str, Any], fallback: Any = None) -> Any:
    """A record's own split word, else its path's, else `fallback`. A path whose split word is a typo is refused here,
    for a record that has neither a split of its own nor a `fallback`, never for its file name alone."""
    if own:
        return own
    if hint.get(_SPLIT_TYPO) and not fallback:
        raise ValueError(hint[_SPLIT_TYPO])
    return hint.get("split") or fallback


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
    allow_incomplete: bool = False,
    cache_dir: str | os.PathLike | None = None,
    num_samples: int | None = None,
) -> DatasetDict:
    """Load HonestyBench records (the official files or our own) into the paper's splits, with training columns.

    The files are streamed ([`~elical_hf.signals.records.iter_record_batches`], 10,000 records at a time) into Arrow
    files on disk, and the splits are memory-mapped from them, so the whole of HonestyBench (560k train questions
    with 20 samples each) loads in a few GiB of memory (docs/scaling.md has the measurement). Loading the same files
    with the same filters again reads those Arrow files back without parsing anything.

    What was inferred is logged when the files are read: one line (INFO) of `file -> model / dataset / split` for
    every file, and a warning that counts the in-domain records that went to `train` only because nothing names
    their split. A record's own `consistency` / `correctness` / `greedy_correct` values are kept (they are computed
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
            without `model` / `dataset` / `split` fields (a record's own fields win).
        revision (`str`, *optional*): Hub revision.
        progress (`bool`, *optional*, defaults to `True`): Progress bar over files.
        allow_incomplete (`bool`, *optional*, defaults to `False`): Read an unfinished `elical-hf sample` folder
            (manifest `complete: false`) anyway, with a warning that counts the missing rows; refused otherwise.
        cache_dir (`str`, *optional*): Where the Arrow files go, in `<cache_dir>/<key>` (the key hashes the files'
            paths, sizes and modification times, the filters and `path_parser`); defaults to
            `<datasets cache>/elical_hf/honestybench`. Do not load the same files into one folder from two processes
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
    check_complete_samples(root, allow_incomplete)

    hinted = _hinted_record_files(root, path_parser)
    filters = (models, datasets, split) if num_samples is None else (models, datasets, split, num_samples)
    folder = _cache_folder(cache_dir, hinted, filters, path_parser)
    if not os.path.isfile(os.path.join(folder, ARROW_INDEX)):
        _records_to_arrow(hinted, folder, wanted_models, wanted_datasets, split, path_or_repo, (models, datasets, split),
                          progress, num_samples)
    with open(os.path.join(folder, ARROW_INDEX), encoding="utf-8") as handle:
        index = json.load(handle)
    if index["others"]:
        logger.warning("Records of unknown dataset(s) %s went to the `other` split.", index["others"])
    parts = {part: [Dataset.from_file(os.path.join(folder, name)) for name in names]
             for part, names in index["parts"].items()}
    return DatasetDict({name: _concatenate(parts[name]) for name in PAPER_SPLITS if name in parts})


ARROW_INDEX = "index.json"
"""The file of a [`load_honestybench`] Arrow folder that lists its Arrow files by split; written last."""

RECORD_BATCH_SIZE = 10_000


def _cache_folder(
    cache_dir: str | os.PathLike | None,
    hinted: list[tuple[str, str, dict[str, str | None]]],
    filters: tuple[Any, ...],
    path_parser: Callable,
) -> str:
    """`<cache_dir>/<key>` (`cache_dir` defaults to `<datasets cache>/elical_hf/honestybench`): the key hashes the
    files (path, size, modification time), the filters and the path parser, so changed files or filters get a new
    folder."""
    import hashlib

    from datasets import config
    from datasets.fingerprint import Hasher

    try:
        parser_key = Hasher.hash(path_parser)
    except Exception:  # an unhashable parser: never reuse its folder
        parser_key = os.urandom(8).hex()
    stats = [(os.path.abspath(file), os.stat(file).st_size, os.stat(file).st_mtime_ns) for file, _, _ in hinted]
    key = json.dumps({"files": stats, "filters": list(filters), "parser": parser_key, "layout": 1})
    root = os.fspath(cache_dir) if cache_dir is not None else os.path.join(config.HF_DATASETS_CACHE, "elical_hf",
                                                                            "honestybench")
    return os.path.join(root, hashlib.sha256(key.encode()).hexdigest())


def _records_to_arrow(
    hinted: list[tuple[str, str, dict[str, str | None]]],
    folder: str,
    wanted_models: set[str] | None,
    wanted_datasets: set[str | None] | None,
    split: list[str] | None,
    path_or_repo: Any,
    filters: tuple[Any, Any, Any],
    progress: bool,
    num_samples: int | None = None,
) -> None:
    """Stream the records of `hinted` files into Arrow files under `folder` (one per file, batch and split), then
    write `ARROW_INDEX`; the folder appears complete or not at all."""
    import pyarrow as pa
    from datasets.arrow_writer import ArrowWriter

    from ..atomic import atomic_folder

    parts: dict[str, list[str]] = {}
    others: set[str] = set()
    inferred: dict[str, set[tuple[str | None, str, str]]] = {}  # file -> (model, dataset, split) read from it
    unsplit: dict[str, int] = {}  # file -> in-domain records put in train without any split word
    found: dict[str, set[str]] = {"models": set(), "datasets": set(), "splits": set()}  # for the error message
    with atomic_folder(folder) as staging:
        for file, relative, hint in tqdm(hinted, desc="Reading records", unit="file", disable=not progress):
            hint_dataset = canonical_dataset(hint.get("dataset"))
            if hint_dataset and hint.get("model"):  # a path naming both: filtered out without reading the file
                _note(found, hint["model"], hint_dataset, paper_split(hint_dataset, hint.get("split")))
                if not _model_matches(hint["model"], wanted_models):
                    continue
                if wanted_datasets is not None and hint_dataset not in wanted_datasets:
                    continue
            for batch in iter_record_batches(file, RECORD_BATCH_SIZE):
                rows = []
                for record in batch:
                    raw_dataset = record.get("dataset") or hint.get("dataset")
                    if raw_dataset is None:
                        raise ValueError(
                            f"{relative}: its records have no `dataset` field and its path names no known dataset "
                            f"({sorted(set(DATASET_ALIASES))}); rename it or pass `path_parser`."
                        )
                    record["dataset"] = canonical_dataset(raw_dataset) or str(raw_dataset)
                    record["model"] = record.get("model") or hint.get("model")
                    record["source_split"] = _source_split(record.pop("split", None), hint)
                    part = paper_split(record["dataset"], record["source_split"])
                    _note(found, record["model"], record["dataset"], part)
                    inferred.setdefault(relative, set()).add((record["model"], record["dataset"], part))
                    if part == "train" and record["source_split"] is None:
                        unsplit[relative] = unsplit.get(relative, 0) + 1
                    if part == "other" and canonical_dataset(record["dataset"]) is None:
                        others.add(record["dataset"])
                    if not _model_matches(record["model"], wanted_models):
                        continue
                    if wanted_datasets is not None and record["dataset"] not in wanted_datasets:
                        continue
                    if split is not None and part not in split:
                        continue
                    _add_training_columns(record, num_samples)
                    rows.append((part, record))
                for part in sorted({p for p, _ in rows}):
                    chunk = [r for p, r in rows if p == part]
                    features = _features(chunk)
                    name = f"{part}-{sum(len(v) for v in parts.values()):05d}.arrow"
                    with ArrowWriter(features=features, path=os.path.join(staging, name)) as writer:
                        writer.write_table(pa.Table.from_pylist(chunk, schema=features.arrow_schema))
                        writer.finalize()
                    parts.setdefault(part, []).append(name)
        logger.info("Read %s", "; ".join(
            f"{file} -> " + ", ".join(f"{m} / {d} / {p}" for m, d, p in sorted(found_in, key=str))
            for file, found_in in inferred.items()
        ))
        if unsplit:
            logger.warning(
                "%d in-domain record(s) in %d file(s) name no split (no `split` field, no split word in the path) and "
                "count as train: %s. Mark test data with a `split` field or a split word in its path (`nq_test.jsonl`).",
                sum(unsplit.values()), len(unsplit), ", ".join(sorted(unsplit)),
            )
        if not parts:
            models, datasets, split = filters
            present = "; ".join(f"{kind}: {', '.join(sorted(names))}" for kind, names in found.items() if names)
            raise ValueError(
                f"No records left in {path_or_repo} (models={models}, datasets={datasets}, split={split}). "
                + (f"Found {present}." if present else "Its files hold no records.")
            )
        index = {"parts": parts, "others": sorted(others)}
        (staging / ARROW_INDEX).write_text(json.dumps(index, indent=2), encoding="utf-8")


def _add_training_columns(record: dict[str, Any], num_samples: int | None = None) -> None:
    """Add the [`training_columns`] a record lacks; its own values win (a `consistency` of its own has
    `consistency_source` `"consistency"` unless it names one). With `num_samples`, the record keeps its first
    `num_samples` samples and its targets are derived from them, replacing its own."""
    if num_samples is not None:
        record.update(first_samples(record, num_samples))
        columns = training_columns(record)
        for key in ("consistency", "correctness"):
            if record.get(key) is not None and columns[key] is None:
                raise ValueError(f"Record {record.get('id', '(no id)')!r} has a `{key}` of its own but no per-sample "
                                 f"judgements to derive it from its first {num_samples} samples.")
        record.update(columns)
        return
    columns = training_columns(record)
    if record.get("consistency") is not None:
        columns["consistency_source"] = record.get("consistency_source") or "consistency"
    for key, value in columns.items():
        if record.get(key) is None:
            record[key] = value


def _note(found: dict[str, set[str]], model: str | None, dataset: str, part: str) -> None:
    found["models"].add(model or "(no model named)")
    found["datasets"].add(dataset)
    found["splits"].add(part)


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
            for file, relative, hint in _hinted_record_files(root, parser):
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
            row["source_split"] = _source_split(row.pop("split", None), hint, row.get("source_split"))
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

