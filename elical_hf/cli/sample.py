"""`elical-hf sample`: greedy answer + k samples for each question, written as resumable record shards.

`--backend openai --endpoint URL` samples through an OpenAI-compatible server (`vllm serve`, SGLang, any whose
`/v1/completions` takes `n`) instead of loading the model: prompts are rendered here with `--model`'s chat template (the text the
Hugging Face sampler decodes from), greedy with log-probabilities and k seeded samples per question, many requests
at once (`--max_concurrency`), with retries; the records name the served model.

Only sampling: the records it writes are raw (no correctness or consistency judgement yet). Rerun the same command
after an interruption to finish the missing shards.

On N workers (GPUs or machines), run the same command on each with `--num_shards N --shard_index i` and its own
`--output_dir`: worker i samples the questions whose id hashes to i, and `elical-hf merge` combines the N folders
into the records one worker would have written, up to float rounding of the log-probabilities (each worker batches
other questions together; see `elical-hf merge --help`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elical_hf.arguments import ModelArguments, QuestionArguments, RecordArguments, ShardArguments, only
from elical_hf.default_model import DEFAULT_MODEL
from elical_hf.signals.settings import SamplingSettings
from elical_hf.steps.sampling import load_questions  # noqa: F401 (its import path before the steps)

from .parser import ElicalArgumentParser, api_key_env_help


@dataclass(kw_only=True)
class SampleCommandArguments(only(ModelArguments, "dtype"), only(RecordArguments, "allow_other_model"), ShardArguments,
                             QuestionArguments):
    """Options of `elical-hf sample` (also settable from `--config file.yaml`); decoding options follow below."""

    output_dir: str = field(metadata={"help": "Gets manifest.json and shards/shard-XXXXX.parquet."})
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
            "`split` field: `nq_test.jsonl` -> dataset nq, split test)."
        },
    )
    limit: int | None = field(default=None, metadata={"help": "Sample only the first N questions."})
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
        super().__post_init__()
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1 (questions to sample), got {self.limit}.")
        if self.backend == "openai":
            from elical_hf.signals.openai_client import api_key_from, base_url

            if self.endpoint is None:
                raise ValueError("--backend openai samples through a server: pass --endpoint http://host:port/v1.")
            base_url(self.endpoint)
            api_key_from(api_key_env=self.api_key_env)  # set, before any work
        elif self.endpoint is not None or self.api_key_env is not None:
            option = "--endpoint" if self.endpoint is not None else "--api_key_env"
            raise ValueError(f"{option} is for the 'openai' backend's server; pass --backend openai (not "
                             f"{self.backend!r}).")


def make_parser() -> ElicalArgumentParser:
    dataclasses = (SampleCommandArguments, SamplingSettings)
    return ElicalArgumentParser(dataclasses, prog="elical-hf sample", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    import os

    from elical_hf.steps import sample

    options, settings = make_parser().parse_with_config(argv)
    sampled = sample(
        options.questions, options.output_dir, model=options.model, backend=options.backend, settings=settings,
        shard_size=options.shard_size, dataset=options.dataset, limit=options.limit, dtype=options.dtype,
        num_workers=options.num_workers, worker_index=options.worker_index,
        tensor_parallel_size=options.tensor_parallel_size, data_parallel_size=options.data_parallel_size,
        endpoint=options.endpoint, served_model=options.served_model, max_concurrency=options.max_concurrency,
        timeout=options.request_timeout, max_retries=options.max_retries, api_key_env=options.api_key_env,
        allow_other_model=options.allow_other_model or None,
    )
    out, records, backend = options.output_dir, sampled.records, sampled.backend
    if options.num_workers > 1:
        print(f"\nWorker {options.worker_index} of {options.num_workers}: wrote {len(records)} of "
              f"{sampled.num_questions} records to {out}/shards/. When every worker is done: elical-hf merge --inputs "
              "<their folders> --output_dir <merged>")
        return 0
    print(
        f"\nWrote {len(records)} records (greedy answer + {settings.num_samples} samples, {backend.kind} backend, "
        f"{backend.name}) to {out}/shards/ (manifest: {out}/manifest.json).\nLoad them with:\n"
        f"  from elical_hf.signals import load_records; load_records({out!r})\n"
        f"  datasets.load_dataset('parquet', data_files={os.path.join(out, 'shards', '*.parquet')!r})\n"
        "They are not judged yet: fill correctness and consistency before training (`elical-hf judge`)."
    )
    return 0
