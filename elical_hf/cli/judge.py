"""`elical-hf judge`: add or redo the correctness and consistency judgements of HonestyBench records.

Correctness: `has_answer` (the paper's reference string match), `has_answer_squad`, `exact_match`, `f1` (lexical,
against the gold aliases), `llm` (the paper's judge prompt) or `option` (multiple-choice records: the option the
answer commits to against the gold letter).
Consistency: `lexical` (ROUGE-L F >= `--lexical_threshold`), `embedding` (all-MiniLM-L6-v2 cosine, offline), `llm`
(the paper's semantic-equivalence prompt) or `option` (multiple choice: the greedy answer's option). LLM judges run `--judge_model` (default: the embedded SmolLM2), or any
OpenAI-compatible endpoint with `--judge_endpoint URL` (e.g. `elical-hf serve MODEL --mode completion`). Records are
read from a jsonl/parquet file or a folder of them.

Judging is resumable, like `elical-hf sample`: records are judged `--shard_size` at a time into shards with a
manifest (the judge settings, a fingerprint of the records). Killed at any point, the same command run again judges
only the missing shards and ends with the output of an uninterrupted run; a rerun with other records or settings is
refused, naming the differences. `--output` is a folder (no extension: `manifest.json` and `shards/`, read by every
command as records) or a `.jsonl` / `.parquet` file, written atomically when every shard is done (the shards wait
meanwhile in the hidden folder `.<name>.judge-parts` beside it).

On N workers run the same command with `--num_shards N --shard_index i` (by default from `SLURM_ARRAY_TASK_COUNT` /
`SLURM_ARRAY_TASK_ID` in a Slurm job array) and a folder `--output` each: worker i judges the records whose id hashes
to i, and `elical-hf merge` combines the N folders into one worker's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elical_hf.arguments import LexicalScoringArguments, RecordArguments, ShardArguments, only
from elical_hf.default_model import DEFAULT_MODEL

from .parser import ElicalArgumentParser, api_key_env_help, slurm_array_task


CORRECTNESS_CHOICES = ("has_answer", "has_answer_squad", "exact_match", "f1", "llm", "option")
CONSISTENCY_CHOICES = ("lexical", "embedding", "llm", "option")
"""`elical_hf.signals.judging.CORRECTNESS_METHODS` and `CONSISTENCY_METHODS`, spelled out so that `--help` does not
import torch (a test keeps them equal)."""


@dataclass(kw_only=True)
class JudgeArguments(only(RecordArguments, "records", "allow_incomplete", "batch_size"), LexicalScoringArguments,
                     ShardArguments):
    """Options of `elical-hf judge` (also settable from `--config file.yaml`); `--batch_size` is the LLM judge's
    prompts per batch, `--lexical_scoring` the ROUGE-L of `--consistency lexical`."""

    output: str = field(metadata={"help": "Where to write the judged records: a .jsonl or .parquet file, or a folder "
                                  "(no extension: manifest.json and shards/, as `sample` writes)."})
    correctness: str | None = field(
        default=None, metadata={"help": f"Correctness judge: {'|'.join(CORRECTNESS_CHOICES)}."}
    )
    consistency: str | None = field(
        default=None, metadata={"help": f"Consistency judge: {'|'.join(CONSISTENCY_CHOICES)}."}
    )
    judge_model: str = field(default=DEFAULT_MODEL, metadata={"help": "LLM judge (Hub id or folder) of `llm`; with "
                             "--judge_endpoint, the model name sent to it."})
    judge_endpoint: str | None = field(
        default=None, metadata={"help": "Run the `llm` judge on an OpenAI-compatible endpoint (http://host:port/v1; "
                                "a hosted API, vLLM, `elical-hf serve --mode completion`) instead of loading "
                                "--judge_model. It gets a bearer token only with --judge_api_key_env (OPENAI_API_KEY "
                                "is not sent unless named)."})
    judge_api_key_env: str | None = field(default=None, metadata={"help": api_key_env_help("--judge_endpoint")})
    judge_timeout: float | None = field(
        default=None, metadata={"help": "Seconds the --judge_endpoint may take to answer one request before it is "
                                "retried (default 300)."})
    judge_max_retries: int | None = field(
        default=None, metadata={"help": "Retries of a --judge_endpoint request that failed: 429, 5xx, timeouts, "
                                "dropped connections, unreadable replies (default 4), with exponential backoff; "
                                "then the run stops in one error (a rerun resumes it)."})
    strict: bool = field(default=False, metadata={"help": "LLM verdicts: None unless the reply says (un)certain."})
    strip_thinking: bool = field(
        default=True, metadata={"help": "Judge answers (and read LLM judge replies) without their <think>...</think> "
                                "reasoning blocks (reasoning models such as Qwen3); --no_strip_thinking keeps them."})
    f1_threshold: float = field(default=0.5, metadata={"help": "`f1` correctness: correct when token F1 >= this."})
    lexical_threshold: float = field(default=0.5, metadata={"help": "`lexical`: equivalent when ROUGE-L >= this."})
    embedding_model: str | None = field(
        default=None, metadata={"help": "Sentence-transformers folder (default: the bundled all-MiniLM-L6-v2)."}
    )
    embedding_threshold: float | None = field(
        default=None, metadata={"help": "`embedding`: equivalent when cosine >= this (default: DEFAULT_THRESHOLD)."}
    )
    max_new_tokens: int = field(
        default=64, metadata={"help": "Longest LLM judge reply in tokens (the paper's reference code: 64; a reply cut "
                              "before its verdict is read without it)."}
    )
    judge_verdict: str = field(
        default="generate",
        metadata={"help": "How LLM verdicts are read: `generate` (the paper's: the reply, up to --max_new_tokens) or "
                  "`logprob` (P(\"certain\") from the first reply token's log-probabilities: one token per prompt; "
                  "also stores that probability per judgement, a soft target).", "choices": ["generate", "logprob"]},
    )
    judge_repetition_penalty: float = field(
        default=1.05, metadata={"help": "Repetition penalty of the LLM judge's greedy decoding (the reference code's "
                                "1.05; 1.0: plain argmax)."}
    )
    num_workers: int | None = field(
        default=None,
        metadata={"aliases": ["--num_shards"], "help": "Split the records across N workers by a hash of their id (each "
                  "runs this command with its own --shard_index and folder --output; then `elical-hf merge`). "
                  "Default: SLURM_ARRAY_TASK_COUNT when set, else 1."},
    )
    worker_index: int | None = field(
        default=None, metadata={"aliases": ["--shard_index"], "help": "Which of the N workers this is (0 to N-1). "
                                "Default: this Slurm array task's (SLURM_ARRAY_TASK_ID), else 0."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.correctness is None and self.consistency is None:
            raise ValueError("Nothing to do: pass --correctness and/or --consistency.")
        if self.max_new_tokens < 1 or self.judge_repetition_penalty <= 0:
            raise ValueError(f"--max_new_tokens must be >= 1 and --judge_repetition_penalty > 0, got "
                             f"{self.max_new_tokens} and {self.judge_repetition_penalty}.")
        if self.correctness is not None and self.correctness not in CORRECTNESS_CHOICES:
            raise ValueError(f"--correctness must be one of {CORRECTNESS_CHOICES}, got {self.correctness!r}.")
        if self.consistency is not None and self.consistency not in CONSISTENCY_CHOICES:
            raise ValueError(f"--consistency must be one of {CONSISTENCY_CHOICES}, got {self.consistency!r}.")
        for name in ("lexical_threshold", "embedding_threshold", "f1_threshold"):
            value = getattr(self, name, None)
            if value is not None and not 0.0 <= value <= 1.0:  # a score in [0, 1] is compared with it
                raise ValueError(f"--{name} must lie in [0, 1], got {value}: every answer would be judged the same.")
        if self.judge_endpoint is not None:
            if "llm" not in (self.correctness, self.consistency):
                raise ValueError("--judge_endpoint runs the `llm` judge: pass --correctness llm and/or --consistency llm.")
            from elical_hf.signals.endpoint import chat_completions_url
            from elical_hf.signals.openai_client import api_key_from, check_request_options

            chat_completions_url(self.judge_endpoint)
            api_key_from(api_key_env=self.judge_api_key_env, option="--judge_api_key_env")  # set, before any work
            check_request_options(self.judge_timeout, self.judge_max_retries, "--judge_timeout", "--judge_max_retries")
        else:
            given = [name for name in ("judge_api_key_env", "judge_timeout", "judge_max_retries")
                     if getattr(self, name) is not None]
            if given:
                what = "names the --judge_endpoint's token" if given[0] == "judge_api_key_env" else \
                    "is about the --judge_endpoint's requests"
                raise ValueError(f"--{given[0]} {what}: pass --judge_endpoint too.")
        from elical_hf.steps.judging import judge_output_is_folder

        folder = judge_output_is_folder(self.output)  # a folder, or a .jsonl / .parquet file
        self._set_workers()
        if self.num_workers > 1 and not folder:
            note = (" (taken from SLURM_ARRAY_TASK_COUNT: pass --num_shards 1 to judge every record in this task)"
                    if "--num_shards" in self.from_slurm else "")
            raise ValueError(f"--num_shards {self.num_workers}{note}: every worker writes its own folder (then "
                             f"`elical-hf merge`); give --output a folder (no extension), not {self.output}.")

    def _set_workers(self) -> None:
        """`num_workers` / `worker_index` where not given: this Slurm array task's (its index only when the workers
        are the array's tasks), else 1 and 0."""
        count, index = slurm_array_task()
        self.from_slurm = from_slurm = []  # (not a field: said when judging starts)
        if self.num_workers is None:
            self.num_workers = count or 1
            from_slurm += ["--num_shards"] if count else []
        if self.worker_index is None:  # this task's index, where the workers are the array's tasks
            slurm = index is not None and self.num_workers == count
            self.worker_index = index if slurm else 0
            from_slurm += ["--shard_index"] if slurm else []
        if self.num_workers < 1 or not 0 <= self.worker_index < self.num_workers:
            note = f" ({' and '.join(from_slurm)} from SLURM_ARRAY_TASK_*)" if from_slurm else ""
            raise ValueError(f"--num_shards must be >= 1 and --shard_index in [0, --num_shards), got shard "
                             f"{self.worker_index} of {self.num_workers}{note}.")


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(JudgeArguments, prog="elical-hf judge", description=__doc__)


def main(argv: list[str] | None = None, complete=None) -> int:
    import dataclasses
    import sys

    from elical_hf.atomic import json_text
    from elical_hf.steps import judge

    (options,) = make_parser().parse_with_config(argv)
    if options.from_slurm:
        print(f"elical-hf judge: judging shard {options.worker_index} of {options.num_workers} "
              f"({' and '.join(options.from_slurm)} from SLURM_ARRAY_TASK_*; --num_shards 1 judges every record).",
              file=sys.stderr)
    judged = judge(**dataclasses.asdict(options), complete=complete)
    print(json_text({"records": len(judged.records), "output": options.output, **judged.report}))
    if options.num_workers > 1:
        print(f"Worker {options.worker_index} of {options.num_workers}: when every worker is done, elical-hf merge "
              "--inputs <their folders> --output_dir <merged>", file=sys.stderr)
    return 0
