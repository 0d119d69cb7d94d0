"""`elical-hf sample`: greedy answer + k samples for each question, written as resumable record shards.

Only sampling: the records it writes are raw (no correctness or consistency judgement yet). Rerun the same command
after an interruption to finish the missing shards.

On N workers (GPUs or machines), run the same command on each with `--num_shards N --shard_index i` and its own
`--output_dir`: worker i samples the questions whose id hashes to i, and `elical-hf merge` combines the N folders
into the records one worker would have written, up to float rounding of the log-probabilities (each worker batches
other questions together; see `elical-hf merge --help`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from elical_hf.default_model import DEFAULT_MODEL
from elical_hf.signals.settings import SamplingSettings

from .parser import ElicalArgumentParser, check_dtype_option


@dataclass
class SampleCommandArguments:
    """Options of `elical-hf sample` (also settable from `--config file.yaml`); decoding options follow below."""

    questions: str = field(
        metadata={
            "help": "Question table (jsonl/json/parquet/csv/arrow file, saved dataset folder or Hub id) with a "
            "`question` column (`id`, `answer`, `dataset` optional), or `bundled:<name>[:<limit>]` for the bundled "
            "sets (several: `bundled:nq:100,squad:50`)."
        }
    )
    output_dir: str = field(metadata={"help": "Gets manifest.json and shards/shard-XXXXX.parquet."})
    model: str = field(default=DEFAULT_MODEL, metadata={"help": "Model to sample from (Hub id or folder)."})
    backend: str = field(default="auto", metadata={"help": "'hf', 'vllm', or 'auto' (vLLM on a CUDA GPU, else hf)."})
    shard_size: int = field(default=64, metadata={"help": "Questions per shard (the unit of resumption)."})
    dataset: str | None = field(
        default=None,
        metadata={
            "help": "Dataset name for rows without a `dataset` field (default: inferred from the file name, as is a "
            "`split` field: `nq_test.jsonl` -> dataset nq, split test)."
        },
    )
    limit: int | None = field(default=None, metadata={"help": "Sample only the first N questions."})
    dtype: str = field(
        default="auto",
        metadata={"help": "Weights dtype: 'auto' (the precision policy: bf16 where it is native and faster, else "
                  "float32 on a CPU), or 'float32' / 'bfloat16' / 'float16'."},
    )
    num_workers: int = field(
        default=1,
        metadata={"aliases": ["--num_shards"], "help": "Split the questions across N workers by a hash of their id "
                  "(each runs this command with its own --shard_index and --output_dir; then `elical-hf merge`)."},
    )
    worker_index: int = field(
        default=0, metadata={"aliases": ["--shard_index"], "help": "Which of the N workers this is (0 to N-1)."}
    )
    tensor_parallel_size: int | None = field(
        default=None, metadata={"help": "vLLM backend: GPUs per model replica (vllm.LLM's tensor_parallel_size)."}
    )
    data_parallel_size: int | None = field(
        default=None, metadata={"help": "vLLM backend: model replicas on this machine (vllm.LLM's data_parallel_size)."}
    )

    def __post_init__(self) -> None:
        check_dtype_option(self.dtype)
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1 (questions to sample), got {self.limit}.")
        if self.shard_size < 1:
            raise ValueError(f"--shard_size must be >= 1, got {self.shard_size}.")


def make_parser() -> ElicalArgumentParser:
    dataclasses = (SampleCommandArguments, SamplingSettings)
    return ElicalArgumentParser(dataclasses, prog="elical-hf sample", description=__doc__)


def load_questions(source: str, dataset: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Question rows from `bundled:<name>[:<limit>][,<name>[:<limit>]...]` or a table readable by `load_table`."""
    from elical_hf.bundled import load_bundled_questions
    from elical_hf.data import load_table
    from elical_hf.signals.honestybench import canonical_dataset, parse_record_path

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
        rows = table.to_list()
        if os.path.exists(source):  # `nq_test.jsonl` names its dataset and split
            name = os.path.basename(source.rstrip("/"))
            # A typo of a split word in the name matters only for rows without a split of their own.
            named = parse_record_path(name, strict=not all(row.get("split") for row in rows))
            dataset = dataset if dataset is not None else canonical_dataset(named["dataset"])
            if named["split"] is not None:
                rows = [{"split": named["split"], **row} for row in rows]
    for row in rows:
        if row.get("dataset") is None and dataset is not None:
            row["dataset"] = dataset
    return rows[:limit] if limit is not None else rows


def main(argv: list[str] | None = None) -> int:
    from elical_hf.atomic import one_writer
    from elical_hf.signals.backends import make_backend
    from elical_hf.signals.runner import sample_records

    options, settings = make_parser().parse_with_config(argv)
    questions = load_questions(options.questions, options.dataset, options.limit)
    backend = make_backend(options.backend, options.model, dtype=options.dtype,
                           tensor_parallel_size=options.tensor_parallel_size,
                           data_parallel_size=options.data_parallel_size)
    with one_writer(options.output_dir):  # a second `sample` on this folder would clean up this one's shards
        records = sample_records(questions, backend, settings, options.output_dir, shard_size=options.shard_size,
                                 num_workers=options.num_workers, worker_index=options.worker_index)
    out = options.output_dir
    if options.num_workers > 1:
        print(f"\nWorker {options.worker_index} of {options.num_workers}: wrote {len(records)} of {len(questions)} "
              f"records to {out}/shards/. When every worker is done: elical-hf merge --inputs <their folders> "
              "--output_dir <merged>")
        return 0
    print(
        f"\nWrote {len(records)} records (greedy answer + {settings.num_samples} samples, {backend.kind} backend, "
        f"{backend.name}) to {out}/shards/ (manifest: {out}/manifest.json).\nLoad them with:\n"
        f"  from elical_hf.signals import load_honestybench; load_honestybench({out!r})\n"
        f"  datasets.load_dataset('parquet', data_files={os.path.join(out, 'shards', '*.parquet')!r})\n"
        "They are not judged yet: fill correctness and consistency before training."
    )
    return 0
