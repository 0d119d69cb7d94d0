"""Training tables: loading and validating question tables, the dev split, tokenization for the Trainer, and the
collator. How one question becomes token ids (for scoring and training alike) is [`~elical_hf.data.encoding`]'s."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset

from .questions import question_parts
from ..settings.columns import EVAL_LABEL_COLUMN, QUESTION_COLUMN
from ..settings.configuration import ConfidenceConfig
from .encoding import encode_prompts, pad_batch
from ..utils.files import check_text_file, looks_local
from ..settings.prompts import check_prompt_texts


logger = logging.getLogger(__name__)


@dataclass
class ConfidenceDataCollator:
    """
    Pads tokenized prompts and stacks the float targets (`labels`) and the binary evaluation labels
    (`greedy_correctness`, NaN where unknown, so every evaluation batch has the same keys).

    Args:
        tokenizer ([`~transformers.PreTrainedTokenizerBase`]):
            Supplies the pad token and padding side.
    """

    tokenizer: Any

    def __call__(self, features: list[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = pad_batch([feature["input_ids"] for feature in features], self.tokenizer)
        if "labels" in features[0]:
            batch["labels"] = torch.tensor([float(f["labels"]) for f in features], dtype=torch.float32)
            batch[EVAL_LABEL_COLUMN] = torch.tensor(
                [_float_or_nan(f.get(EVAL_LABEL_COLUMN)) for f in features], dtype=torch.float32
            )
        return batch


def _float_or_nan(value: Any) -> float:
    return math.nan if value is None else float(value)


def as_dataset(data: Dataset | Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]], name: str) -> Dataset:
    """Accept a `datasets.Dataset`, a list of row dicts or a dict of columns.

    Raises:
        `ValueError`: for columns of different lengths (a dict of lists), a column that is not a list, or a text no
            tokenizer can read (an unpaired surrogate), naming the column or the row.
    """
    if isinstance(data, Dataset):
        return data
    if isinstance(data, Mapping):
        columns = dict(data)
        lengths = {}
        for column, values in columns.items():
            if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
                raise ValueError(f"The {name} dataset's column {column!r} must be a list (one value per row), got "
                                 f"{type(values).__name__}.")
            lengths[column] = len(values)
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{column!r}: {n}" for column, n in lengths.items())
            raise ValueError(f"The {name} dataset's columns have different lengths ({shown}): every column needs one "
                             "value per row.")
        rows = None
    elif isinstance(data, Sequence) and not isinstance(data, str):
        rows = list(data)
    else:
        raise TypeError(
            f"The {name} dataset must be a datasets.Dataset, a list of dicts or a dict of lists, got {type(data)}."
        )
    try:
        dataset = Dataset.from_dict(columns) if rows is None else Dataset.from_list(rows)
    except UnicodeEncodeError:  # a text Arrow cannot hold: say which
        if rows is None:
            rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
        for row, record in enumerate(rows):
            if isinstance(record, Mapping):
                check_prompt_texts(record.values(), [f"the {name} dataset's row {row}, column {c!r}," for c in record])
        raise
    return dataset


def split_dev(data: Any, dev_fraction: float, seed: int, name: str) -> tuple[Dataset, Dataset | None]:
    """Split rows into train and dev, disjoint by question text (seeded; [`~elical_hf.data.questions.question_parts`]):
    no split with `dev_fraction=0` or fewer than 10 rows (the dev part is then `None`)."""
    dataset = as_dataset(data, name)
    if not 0.0 <= dev_fraction < 1.0:
        raise ValueError(f"`dev_fraction` must lie in [0, 1), got {dev_fraction}.")
    if dev_fraction == 0.0 or len(dataset) < 10:
        return dataset, None
    parts = question_parts(dataset["question"], {"train": 1.0 - dev_fraction, "dev": dev_fraction}, seed=seed)
    train, dev = ([i for i, part in enumerate(parts) if part == name] for name in ("train", "dev"))
    return dataset.select(train), dataset.select(dev) if dev else None  # Arrow rows stay on disk


TABLE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


def split_hub_source(source: str) -> tuple[str, str | None, str | None]:
    """The repo id, config and split of a Hub dataset named `<repo>[:<config>[:<split>]]` (`cais/mmlu:all:test`;
    `user/questions::test` names a split without a config); `None` for a part not given. A repo id holds no `:`, so
    the split may hold one (`cais/mmlu:all:test[:100]`, a slice as `datasets` reads it)."""
    repo, config, split = (source.split(":", 2) + [None, None])[:3]
    return repo, config or None, split or None


def load_table(source: str, split: str = "train") -> Dataset:
    """
    Load a question table from a file (`.jsonl`, `.json`, `.parquet`, `.csv`, `.arrow`), a folder written by
    `Dataset.save_to_disk`, or a dataset on the Hub: `<repo>[:<config>[:<split>]]` ([`split_hub_source`]; e.g.
    `cais/mmlu:all:test`, MMLU's 14,042 test questions), `split` when the name gives none.

    Raises:
        `ValueError`: an unknown format, an empty file, a line of a `.jsonl` file that is not JSON (file and line
            named), a text file that is not UTF-8, a name that is neither here nor on the Hub, or a Hub dataset
            without that config or split (one line).
        `FileNotFoundError`: `source` does not exist and looks like a local path, not a Hub id
            ([`~elical_hf.utils.files.looks_local`]).
    """
    from datasets import load_dataset, load_from_disk

    if os.path.isdir(source) and os.path.isfile(os.path.join(source, "dataset_info.json")):
        return load_from_disk(source)
    if os.path.isfile(source):
        extension = os.path.splitext(source)[1].lower()
        if extension not in TABLE_FORMATS:
            raise ValueError(f"Unknown table format {extension!r} for {source}; use one of {sorted(TABLE_FORMATS)}.")
        if os.path.getsize(source) == 0:
            raise ValueError(f"{source} is empty: a question table needs a header or rows.")
        from datasets.exceptions import DatasetGenerationError

        text = extension in (".jsonl", ".json", ".csv")
        if text:
            check_text_file(source)  # pyarrow's readers load bytes that are not UTF-8 and fail only when read
        try:
            return load_dataset(TABLE_FORMATS[extension], data_files=source, split="train")
        except (DatasetGenerationError, ValueError) as error:  # name the file and the line
            if not isinstance(error, (DatasetGenerationError, UnicodeDecodeError)):
                if "corresponds to no data" in str(error):  # datasets' words for a file without rows
                    raise ValueError(f"{source} holds no rows (only blank lines, or a header without rows).") from None
                raise
            if text:
                check_text_file(source, json_lines=extension == ".jsonl")
            cause = error.__cause__ or error
            raise ValueError(f"Cannot read {source} as a {extension} table: {type(cause).__name__}: {cause}") from error
    if os.path.exists(source):
        raise ValueError(f"{source} is neither a data file nor a folder saved with `Dataset.save_to_disk`.")
    if looks_local(source):
        raise FileNotFoundError(2, "No such file or folder", source)
    from datasets.exceptions import DatasetNotFoundError

    repo, config, hub_split = split_hub_source(source)
    try:
        return load_dataset(repo, config, split=hub_split or split)
    except (ConnectionError, DatasetNotFoundError) as error:
        raise ValueError(
            f"{source} is not a file or folder here, and not a dataset the Hub gave ({type(error).__name__}: {error}). "
            "Check the path; a Hub dataset needs the network or the local cache."
        ) from None
    except ValueError as error:  # `datasets`' words for a missing or unknown config or split, over several lines
        raise ValueError(
            f"Cannot load the Hub dataset {repo} (config {config!r}, split {hub_split or split!r}): "
            f"{' '.join(str(error).split())} Name them as `<repo>:<config>:<split>`, e.g. `cais/mmlu:all:test`."
        ) from None


def validate_columns(
    dataset: Dataset, name: str, label_column: str | None, question_column: str = QUESTION_COLUMN
) -> None:
    """Raise one clear `ValueError` for a missing column, an empty question, or a target that is not in [0, 1]."""
    if len(dataset) == 0:
        raise ValueError(f"The {name} dataset is empty.")
    missing = [c for c in (question_column, label_column) if c is not None and c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"The {name} dataset lacks column(s) {missing}; it has {dataset.column_names}. "
            f"Expected a {question_column!r} column and the target column {label_column!r}."
        )
    for row, question in enumerate(dataset[question_column]):
        if not isinstance(question, str) or not question.strip():
            named = f"; id {dataset[row]['id']!r}" if "id" in dataset.column_names else ""
            where = f"row {row} (counting from 0{named})"
            raise ValueError(f"The {name} dataset has an empty or non-string question at {where}: {question!r}.")
    if label_column is not None:
        _check_unit_interval(dataset[label_column], f"{name} column {label_column!r}")
        _warn_contradicting_duplicates(dataset[question_column], dataset[label_column], name, label_column)
    if EVAL_LABEL_COLUMN in dataset.column_names:
        for row, value in enumerate(dataset[EVAL_LABEL_COLUMN]):
            if value is not None and value not in (0, 1, True, False):
                raise ValueError(
                    f"The {name} column {EVAL_LABEL_COLUMN!r} must hold 0/1 (or None), got {value!r} at row {row}."
                )


def _warn_contradicting_duplicates(questions: Sequence[str], targets: Sequence[Any], name: str, column: str) -> None:
    """Warn (with a count and an example) when one question appears several times with different targets."""
    seen: dict[str, set[float]] = {}
    for question, target in zip(questions, targets):
        seen.setdefault(question.strip(), set()).add(float(target))
    clashes = {question: values for question, values in seen.items() if len(values) > 1}
    if clashes:
        example, values = next(iter(clashes.items()))
        logger.warning(
            "The %s dataset has %d question(s) that appear more than once with different %r targets (e.g. %r: %s); "
            "the model is trained toward their mean. Deduplicate them if that is not what you want.",
            name, len(clashes), column, example[:80], sorted(values),
        )


def _check_unit_interval(values: Sequence[Any], what: str) -> None:
    for row, value in enumerate(values):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"The {what} must hold numbers in [0, 1]; row {row} holds {value!r}.") from None
        if math.isnan(number) or not 0.0 <= number <= 1.0:
            raise ValueError(f"The {what} must hold numbers in [0, 1]; row {row} holds {value!r}.")


def tokenize_dataset(
    dataset: Dataset,
    tokenizer: Any,
    config: ConfidenceConfig,
    label_column: str | None,
    question_column: str = QUESTION_COLUMN,
) -> Dataset:
    """Keep `input_ids`, `labels` (from `label_column`) and `greedy_correctness` (when present); drop the rest."""
    keep_eval = EVAL_LABEL_COLUMN in dataset.column_names

    def encode(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {"input_ids": encode_prompts(batch[question_column], tokenizer, config)}
        if label_column is not None:
            out["labels"] = [float(value) for value in batch[label_column]]
        if keep_eval:
            out[EVAL_LABEL_COLUMN] = [None if v is None else float(v) for v in batch[EVAL_LABEL_COLUMN]]
        return out

    return dataset.map(encode, batched=True, remove_columns=dataset.column_names, desc="Tokenizing")
