"""What a records file's place says about it: the model, dataset and split a path names (the official HonestyBench
layout, the reference code's, ours), the paper's split of a record, and HonestyBench on the Hub.

[`parse_record_path`] reads model, dataset and source split from a records file's path, [`paper_split`] maps a
dataset and split word to the paper's split, and [`canonical_dataset`] names a dataset by any of its aliases.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Any

from ...data.questions import IN_DOMAIN_DATASETS, OOD_DATASETS
from ...utils.files import looks_local
from .storage import record_files


__all__ = [
    "DATASET_ALIASES", "HONESTYBENCH_REPO", "IGNORED_FOLDERS", "PAPER_SPLITS", "SPLIT_TYPO", "SPLIT_WORDS",
    "canonical_dataset", "download_records", "hinted_record_files", "paper_split", "parse_record_path",
    "path_hint", "source_split",
]

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
"""Words that name a source split in paths (or a record's `source_split`) -> `"train"` or `"test"`."""

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
                "rename the file or folder, add a `source_split` field to the records, or pass `path_parser`."
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
       error (it stays in the leftover text): [`~elical_hf.signals.records.load_records`] reads such a path so, and
       refuses only records that need the path's split, those without a `source_split` (or `split`) of their own.
    4. The **model** is the deepest folder that still has text once its dataset and split tokens are removed and is
       not a generic container ([`IGNORED_FOLDERS`]: `data`, `records`, ...); without one, what is left of the file
       name (`Qwen2.5-7B-Instruct_nq.jsonl` -> `Qwen2.5-7B-Instruct`); else `None`.

    Pass your own `path_parser` to [`~elical_hf.signals.records.load_records`] for any other layout.

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


def download_records(repo_id: str, models: list[str] | None = None, revision: str | None = None) -> str:
    """The local snapshot of the `.jsonl` / `.parquet` files of a Hub dataset (those whose name holds one of `models`,
    when given); a `FileNotFoundError` for a name that looks like a local path, an `OSError` that says what to do
    when the Hub cannot give it (offline, unknown repository)."""
    from huggingface_hub import snapshot_download

    from ...models.default_model import hub_offline

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


def path_hint(relative: str, path_parser: Callable[[str], Mapping[str, str | None]]) -> dict[str, Any]:
    """What `path_parser` reads from a records file's path inside its folder (posix form). With the default parser
    ([`parse_record_path`]), a split word that is a typo gets its message under [`SPLIT_TYPO`] instead of an error: it
    matters only for records without a split of their own ([`source_split`])."""
    try:
        return dict(path_parser(relative))
    except ValueError as error:  # a typo of a split word: an error only for records without a split of their own
        if path_parser is not parse_record_path:
            raise
        return {**parse_record_path(relative, strict=False), SPLIT_TYPO: str(error)}


def hinted_record_files(
    root: str | os.PathLike, path_parser: Callable[[str], Mapping[str, str | None]]
) -> list[tuple[str, str, dict[str, Any]]]:
    """(file, its path inside `root` in posix form, [`path_hint`] of that path) for each records file of `root`
    ([`record_files`]: `root` itself when it is a file)."""
    root = os.fspath(root)
    base = root if os.path.isdir(root) else os.path.dirname(root)
    hinted = []
    for file in record_files(root):
        relative = os.path.relpath(file, base).replace(os.sep, "/")
        hinted.append((file, relative, path_hint(relative, path_parser)))
    return hinted


SPLIT_TYPO = "split_typo"
"""The key of a path hint whose split word is a typo (its message): see [`source_split`]."""


def source_split(record: dict[str, Any], hint: Mapping[str, Any]) -> Any:
    """A record's own split word (its `source_split`, else a legacy `split` field, removed), else its path's; a path's
    split word that is a typo is refused here for a record without one of its own, never for its file name alone."""
    legacy = record.pop("split", None)
    if own := record.get("source_split") or legacy:
        return own
    if hint.get(SPLIT_TYPO):
        raise ValueError(hint[SPLIT_TYPO])
    return hint.get("split")
