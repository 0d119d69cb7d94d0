"""`elical-hf judge` as a step: records in, records with their correctness / consistency judgements out
([`~elical_hf.signals.judging.apply_judges`]), written atomically to `output` when given, through resumable shards
([`~elical_hf.signals.judge_runner.judge_records`])."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .arguments import LexicalScoringArguments, RecordArguments, ShardArguments, api_key_env_help, only
from ..models.default_model import DEFAULT_MODEL
from ..utils.files import refuse_output_over_inputs


__all__ = ["CONSISTENCY_CHOICES", "CORRECTNESS_CHOICES", "Filled", "JudgeArguments", "fillable_records", "judge",
           "judge_output_is_folder"]

CORRECTNESS_CHOICES = ("has_answer", "has_answer_squad", "exact_match", "f1", "llm", "option")
CONSISTENCY_CHOICES = ("lexical", "embedding", "llm", "option")
"""`elical_hf.signals.judging.CORRECTNESS_METHODS` and `CONSISTENCY_METHODS`, spelled out so that `--help` does not
import torch (a test keeps them equal)."""

STEP_OPTIONS = ("records", "allow_incomplete", "output", "shard_size", "num_workers", "worker_index")
"""The options of [`JudgeArguments`] that [`judge`] reads itself; every other one is a keyword argument of
[`~elical_hf.signals.judging.apply_judges`] (and a judge setting the manifest of a sharded output records)."""


@dataclass
class Filled:
    """Records a step filled in, and its report.

    Args:
        records (`list[dict]`): The records, in their input order, with what the step added.
        report (`dict`): What the step says about it (its command prints it as JSON).
        scores (`dict[str, list[float]]`): [`~elical_hf.steps.score_baselines`]: each baseline's confidences, one per
            record.
    """

    records: list[dict[str, Any]]
    report: dict[str, Any]
    scores: dict[str, list[float]] = field(default_factory=dict)


@dataclass(kw_only=True)
class JudgeArguments(only(RecordArguments, "records", "allow_incomplete", "batch_size"), LexicalScoringArguments,
                     ShardArguments):
    """Options of [`judge`] (`elical-hf judge`, also settable from `--config file.yaml`); `--batch_size` is the LLM
    judge's prompts per batch, `--lexical_scoring` the ROUGE-L of `--consistency lexical`. In Python, `records` may
    also hold records in memory, and `output` may be `None` (the judged records are only given back)."""

    output: str | None = field(
        default=None, metadata={"help": "Where to write the judged records: a .jsonl or .parquet file, or a folder (no "
                                "extension: manifest.json and shards/, as `sample` writes)."})
    correctness: str | None = field(
        default=None, metadata={"help": f"Correctness judge: {'|'.join(CORRECTNESS_CHOICES)}."}
    )
    consistency: str | None = field(
        default=None, metadata={"help": f"Consistency judge: {'|'.join(CONSISTENCY_CHOICES)}, or auto (option for "
                                "multiple-choice records, else embedding where its model is installed, else lexical)."}
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
    lexical_scores: bool = field(
        default=False, metadata={"help": "Also store each sample's ROUGE-L with the greedy answer "
                                 "(`consistency_lexical`, what Consis-Lex averages) when the consistency judge is not "
                                 "the lexical one."})
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
                  "runs this command with its own --worker_index and folder --output; then `elical-hf merge`). "
                  "Default: SLURM_ARRAY_TASK_COUNT when set, else 1. --num_shards is its earlier spelling."},
    )
    worker_index: int | None = field(
        default=None, metadata={"aliases": ["--shard_index"], "help": "Which of the N workers this is (0 to N-1). "
                                "Default: this Slurm array task's (SLURM_ARRAY_TASK_ID), else 0. --shard_index is its "
                                "earlier spelling."}
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
        if self.consistency is not None and self.consistency not in (*CONSISTENCY_CHOICES, "auto"):
            raise ValueError(f"--consistency must be one of {CONSISTENCY_CHOICES} or 'auto', got "
                             f"{self.consistency!r}.")
        for name in ("lexical_threshold", "embedding_threshold", "f1_threshold"):
            value = getattr(self, name, None)
            if value is not None and not 0.0 <= value <= 1.0:  # a score in [0, 1] is compared with it
                raise ValueError(f"--{name} must lie in [0, 1], got {value}: every answer would be judged the same.")
        if self.judge_endpoint is not None:  # its token, from the environment, is checked by the command's `main`
            if "llm" not in (self.correctness, self.consistency):
                raise ValueError("--judge_endpoint runs the `llm` judge: pass --correctness llm and/or --consistency llm.")
            from ..signals.endpoint import chat_completions_url
            from ..signals.openai_client import check_request_options

            chat_completions_url(self.judge_endpoint)
            check_request_options(self.judge_timeout, self.judge_max_retries, "--judge_timeout", "--judge_max_retries")
        else:
            given = [name for name in ("judge_api_key_env", "judge_timeout", "judge_max_retries")
                     if getattr(self, name) is not None]
            if given:
                what = "names the --judge_endpoint's token" if given[0] == "judge_api_key_env" else \
                    "is about the --judge_endpoint's requests"
                raise ValueError(f"--{given[0]} {what}: pass --judge_endpoint too.")
        folder = self.output is not None and judge_output_is_folder(self.output)  # a folder, or a .jsonl / .parquet
        count, index = self.num_workers, self.worker_index  # `None`: not given (`main` reads a Slurm array's)
        if (count is not None and not 0 <= (index or 0) < count) or (index is not None and index < 0):
            raise ValueError(f"--num_workers must be >= 1 and --worker_index in [0, --num_workers), got worker {index} "
                             f"of {count}.")
        if (count or 1) > 1 and not folder:
            raise ValueError(f"--num_workers {count}: every worker writes its own folder (then `elical-hf merge`); "
                             f"give --output a folder (no extension), not {self.output!r}.")


def fillable_records(records: Any, allow_incomplete: bool) -> list[dict[str, Any]]:
    """The records a filling step ([`judge`], [`~elical_hf.steps.score_baselines`]) reads, as they are stored (no
    training columns: it is about to change what they are derived from), refusing an input without records."""
    from ..signals.records import load_records

    rows = load_records(records, derive=False, allow_incomplete=allow_incomplete).to_list()
    if not rows:
        raise ValueError(f"No records in {records!r}." if isinstance(records, (str, os.PathLike)) else "No records.")
    return rows


def judge_output_is_folder(output: str | os.PathLike) -> bool:
    """Whether [`judge`] writes `output` as a folder of shards (an existing folder, or a path without an extension)
    rather than one `.jsonl` / `.parquet` file; a `ValueError` for any other extension."""
    from ..signals.records import record_format

    if os.path.isdir(output) or not Path(output).suffix:
        return True
    try:
        record_format(output)
    except ValueError as error:
        raise ValueError(f"{error} (A folder output, for resumable shards, has no extension.)") from None
    return False


def judge(args: JudgeArguments, *, complete: Any = None, first_token_logprobs: Any = None,
          progress: bool = True) -> Filled:
    """
    Judge the correctness and / or the consistency of the records of `args.records` (any records input,
    [`~elical_hf.signals.records.load_records`]) with the judges `args.correctness` / `args.consistency` and their
    settings ([`~elical_hf.signals.judging.apply_judges`]).

    With `args.output`, the records are judged `args.shard_size` at a time into resumable shards
    ([`~elical_hf.signals.judge_runner.judge_records`]): killed and run again with the same records and settings, it
    judges only what is missing and ends with the records of an uninterrupted run. `output` (not inside the `records`
    folder) is a folder (no extension; `manifest.json` and `shards/`, as `elical-hf sample` writes) or a `.jsonl` /
    `.parquet` file (written atomically at the end, its shards staged meanwhile in the hidden folder
    `.<name>.judge-parts` beside it; a rerun removes the temporary file a killed final write left beside it,
    [`~elical_hf.utils.atomic.stale_temporaries`]), held with its one-writer lock. With `args.num_workers` N (a folder
    `output` each), only the records of worker `args.worker_index` (a hash of their id) are judged; `elical-hf merge`
    combines the workers' folders. `None` for either is 1 worker (`elical-hf judge` takes them from a Slurm array).

    Args:
        args ([`JudgeArguments`]): The records, the judges, their settings and the output.
        complete (`Callable`, *optional*): The LLM judges' completion function (default: `args.judge_model`'s, or
            `args.judge_endpoint`'s, made once for every shard).
        first_token_logprobs (`Callable`, *optional*): With `judge_verdict="logprob"` and `complete`: its first-token
            log-probabilities.
        progress (`bool`, *optional*, defaults to `True`): Progress bar over records, with `output`.

    Returns:
        [`Filled`]: the judged records and the judges' summaries (added up over the shards).

    Raises:
        `ValueError`: no record carries what a requested judgement reads (not sampled records), an output that holds
        the records, or a sharded output written with other records or settings (naming the differences).
    """
    from ..signals.judging import apply_judges, check_judgeable

    if args.num_workers is None or args.worker_index is None:
        args = dataclasses.replace(args, num_workers=args.num_workers or 1, worker_index=args.worker_index or 0)
    records, output = args.records, args.output
    folder = output is not None and judge_output_is_folder(output)
    if folder:
        from ..signals.judge_runner import check_output_folder

        check_output_folder(output)
    if output is not None:
        refuse_output_over_inputs(output, {"--records": records, "--judge_model": args.judge_model,
                                           "--embedding_model": args.embedding_model})
    rows = fillable_records(records, args.allow_incomplete)
    check_judgeable(rows, args.correctness, args.consistency,
                    source=records if isinstance(records, (str, os.PathLike)) else "The records")
    options = {**{f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.name not in STEP_OPTIONS},
               "complete": complete, "first_token_logprobs": first_token_logprobs}
    if output is None:
        return Filled(rows, apply_judges(rows, **options))
    from ..utils.atomic import one_writer, stale_temporaries
    from ..signals.judge_runner import judge_records
    from ..signals.records import save_records

    # One shard at a time; a shard none of whose records can take a judgement is not refused (the records as a whole
    # were checked): the judges skip and count such records.
    judge_shard = functools.partial(apply_judges, check=False, **_llm_judge_once(options))

    with one_writer(output):  # a second `judge` on this output would clean up this one's shards
        for stale in [] if folder else stale_temporaries(output):  # a killed final write's (a folder cleans its own)
            os.remove(stale)
        parts = output if folder else os.path.join(os.path.dirname(os.path.abspath(output)),
                                                   f".{os.path.basename(output)}.judge-parts")
        judged, report = judge_records(rows, judge_shard, _judge_settings(options), parts, args.shard_size, progress,
                                       num_workers=args.num_workers, worker_index=args.worker_index)
        if not folder:
            save_records(judged, output)
            shutil.rmtree(parts)
    return Filled(judged, report)


def _judge_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The judges and their settings (the keyword arguments of [`~elical_hf.signals.judging.apply_judges`]), as a
    judging manifest records them: a function (`complete`) as `None`, the manifest cannot name it (`judge_model`
    does), and the endpoint without its credentials ([`~elical_hf.signals.openai_client.redacted_url`])."""
    from ..signals.openai_client import redacted_url

    settings = {name: None if callable(value) else value for name, value in options.items()}
    if settings["judge_endpoint"]:
        settings["judge_endpoint"] = redacted_url(settings["judge_endpoint"])
    return settings


def _llm_judge_once(options: dict[str, Any]) -> dict[str, Any]:
    """`options` with the LLM judge made once for every shard ([`~elical_hf.signals.judging.make_llm_judge`]; given
    no `complete`, `apply_judges` would make one per call)."""
    if "llm" not in (options["correctness"], options["consistency"]) or options["complete"] is not None:
        return options
    from ..signals.judging import make_llm_judge

    judge = make_llm_judge(*(options[name] for name in ("judge_model", "judge_endpoint", "judge_api_key_env",
                                                       "judge_timeout", "judge_max_retries")))
    return {**options, "judge_model": judge.name, "complete": judge.complete,
            "first_token_logprobs": options["first_token_logprobs"] or judge.first_token_logprobs}
