"""The steps that fill records in: the judges and the training-free baselines.

[`judge`] and [`score_baselines`] take any records input and give the records back with their judgements or
`confidence_<name>` columns (written atomically to `output` when given; [`judge`] writes resumable shards on the
way, [`~elical_hf.signals.judge_runner.judge_records`]).
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..default_model import DEFAULT_MODEL
from ..files import check_output_extension, refuse_output_over_inputs


__all__ = ["Filled", "judge", "judge_output_is_folder", "score_baselines"]


@dataclass
class Filled:
    """Records a step filled in, and its report.

    Args:
        records (`list[dict]`): The records, in their input order, with what the step added.
        report (`dict`): What the step says about it (its command prints it as JSON).
        scores (`dict[str, list[float]]`): [`score_baselines`]: each baseline's confidences, one per record.
    """

    records: list[dict[str, Any]]
    report: dict[str, Any]
    scores: dict[str, list[float]] = field(default_factory=dict)


def _records_in(records: Any, allow_incomplete: bool) -> list[dict[str, Any]]:
    """The records a filling step reads, as they are stored (no training columns: it is about to change what they
    are derived from), refusing an input without records."""
    from ..signals.records import load_records

    rows = load_records(records, derive=False, allow_incomplete=allow_incomplete).to_list()
    if not rows:
        raise ValueError(f"No records in {records!r}." if isinstance(records, (str, os.PathLike)) else "No records.")
    return rows


def _records_out(filled: Filled, output: str | None) -> Filled:
    if output is not None:
        from ..signals.records import save_records

        save_records(filled.records, output)
    return filled


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


def judge(
    records: Any,
    correctness: str | None = None,
    consistency: str | None = None,
    *,
    output: str | None = None,
    allow_incomplete: bool = False,
    shard_size: int = 64,
    num_workers: int = 1,
    worker_index: int = 0,
    progress: bool = True,
    **options: Any,
) -> Filled:
    """
    Judge the correctness and / or the consistency of records ([`~elical_hf.signals.judging.apply_judges`]).

    With an `output`, the records are judged `shard_size` at a time into resumable shards
    ([`~elical_hf.signals.judge_runner.judge_records`]): killed and run again with the same records and settings, it
    judges only what is missing and ends with the records of an uninterrupted run.

    Args:
        records: Any records input ([`~elical_hf.signals.records.load_records`]).
        correctness, consistency (`str`, *optional*): The judges, as [`~elical_hf.signals.judging.apply_judges`]
            names them.
        output (`str`, *optional*): Also write the judged records there, not inside the `records` folder: a folder
            (no extension; `manifest.json` and `shards/`, as `elical-hf sample` writes) or a `.jsonl` / `.parquet`
            file (written atomically at the end, its shards staged meanwhile in the hidden folder
            `.<name>.judge-parts` beside it; a rerun removes the temporary file a killed final write left beside it,
            [`~elical_hf.atomic.stale_temporaries`]). Held with its one-writer lock.
        allow_incomplete (`bool`, *optional*): Read an unfinished `elical-hf sample` folder anyway.
        shard_size (`int`, *optional*, defaults to 64): Records per shard (the unit of resumption), with `output`.
        num_workers (`int`, *optional*, defaults to 1), worker_index (`int`, *optional*, defaults to 0): Judge only
            the records of this worker (a hash of their id) into the folder `output`; `elical-hf merge` combines the
            workers' folders.
        progress (`bool`, *optional*, defaults to `True`): Progress bar over records, with `output`.
        options: The judges' settings, as [`~elical_hf.signals.judging.apply_judges`] takes them (`complete`,
            `judge_model`, `judge_endpoint`, `strict`, `strip_thinking`, thresholds, `lexical_scores`, `batch_size`,
            `max_new_tokens`, ...).

    Returns:
        [`Filled`]: the judged records and the judges' summaries (added up over the shards).

    Raises:
        `ValueError`: no record carries what a requested judgement reads (not sampled records), an output that holds
        the records, or a sharded output written with other records or settings (naming the differences).
    """
    from ..signals.judging import apply_judges, check_judgeable

    unknown = sorted(set(options) - set(inspect.signature(apply_judges).parameters))
    if unknown:
        raise TypeError(f"judge() got unknown judge option(s) {unknown}.")
    folder = output is not None and judge_output_is_folder(output)
    if num_workers != 1 and not folder:
        raise ValueError(f"--num_shards {num_workers}: every worker writes its own folder (then `elical-hf merge`); "
                         f"give --output a folder (no extension), not {output!r}.")
    if folder:
        from ..signals.judge_runner import check_output_folder

        check_output_folder(output)
    if output is not None:
        refuse_output_over_inputs(output, {"--records": records, "--judge_model": options.get("judge_model"),
                                           "--embedding_model": options.get("embedding_model")})
    rows = _records_in(records, allow_incomplete)
    check_judgeable(rows, correctness, consistency,
                    source=records if isinstance(records, (str, os.PathLike)) else "The records")
    if output is None:
        return Filled(rows, apply_judges(rows, correctness, consistency, **options))
    from ..atomic import one_writer, stale_temporaries
    from ..signals.judge_runner import judge_records
    from ..signals.records import save_records

    settings = {"correctness": correctness, "consistency": consistency, **_judge_settings(options)}
    # One shard at a time; a shard none of whose records can take a judgement is not refused (the records as a whole
    # were checked): the judges skip and count such records.
    judge_shard = functools.partial(apply_judges, correctness=correctness, consistency=consistency, check=False,
                                    **_llm_judge_once(correctness, consistency, options))

    with one_writer(output):  # a second `judge` on this output would clean up this one's shards
        for stale in [] if folder else stale_temporaries(output):  # a killed final write's (a folder cleans its own)
            os.remove(stale)
        parts = output if folder else os.path.join(os.path.dirname(os.path.abspath(output)),
                                                   f".{os.path.basename(output)}.judge-parts")
        judged, report = judge_records(rows, judge_shard, settings, parts, shard_size, progress,
                                       num_workers=num_workers, worker_index=worker_index)
        if not folder:
            save_records(judged, output)
            shutil.rmtree(parts)
    return Filled(judged, report)


def _judge_settings(options: dict[str, Any]) -> dict[str, Any]:
    """Every option of [`~elical_hf.signals.judging.apply_judges`] (its default where not given), as a judging
    manifest records them: a function (`complete`) as `None`, the manifest cannot name it (`judge_model` does), and the
    endpoint without its credentials ([`~elical_hf.signals.openai_client.redacted_url`])."""
    from ..signals.judging import apply_judges
    from ..signals.openai_client import redacted_url

    parameters = inspect.signature(apply_judges).parameters.values()
    given = {p.name: p.default for p in parameters
             if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "check"} | options
    if given.get("judge_endpoint"):
        given["judge_endpoint"] = redacted_url(given["judge_endpoint"])
    return {name: None if callable(value) else value for name, value in given.items()}


def _llm_judge_once(correctness: str | None, consistency: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """`options` with the LLM judge made once for every shard ([`~elical_hf.signals.judging.make_llm_judge`]; given
    no `complete`, `apply_judges` would make one per call)."""
    if "llm" not in (correctness, consistency) or options.get("complete") is not None:
        return options
    from ..signals.judging import make_llm_judge

    judge = make_llm_judge(*(options.get(name) for name in ("judge_model", "judge_endpoint", "judge_api_key_env",
                                                           "judge_timeout", "judge_max_retries")))
    return {**options, "judge_model": judge.name, "complete": judge.complete,
            "first_token_logprobs": options.get("first_token_logprobs") or judge.first_token_logprobs}


def score_baselines(
    records: Any,
    which: Sequence[str] = ("prob", "n_prob", "consis_lex", "consis_sem"),
    *,
    output: str | None = None,
    complete: Any = None,
    backend: Any = None,
    model: str = DEFAULT_MODEL,
    train_records: Any = None,
    parser: str = "paper",
    seed: int = 42,
    batch_size: int = 16,
    lexical_scoring: str = "rouge_score",
    allow_incomplete: bool = False,
) -> Filled:
    """
    The training-free baselines ([`~elical_hf.signals.compute_baselines`]) of records, stored in each as
    `confidence_<name>`; with both labels, their AUROC (x100).

    Args:
        records: Any records input ([`~elical_hf.signals.records.load_records`]).
        which (`list[str]`): Names of [`~elical_hf.signals.BASELINES`].
        output (`str`, *optional*): Also write the records there (atomically); not inside the `records` folder.
        complete (`Callable`, *optional*): The answering model's completion function (Verbal-0/10); by default
            `backend`'s.
        backend ([`~elical_hf.signals.HFBackend`], *optional*): The answering model, loaded (Option-Prob's
            next-token log-probabilities, and Verbal-0/10's completions without `complete`); by default `model`,
            loaded only when a baseline asked for runs it (not for Option-Prob of records that carry
            `option_probabilities`).
        train_records: Judged TRAIN records (any records input), Verbal-10's demonstrations (never test records).
        parser, seed, batch_size, lexical_scoring: As in [`~elical_hf.signals.compute_baselines`].

    Returns:
        [`Filled`]: the records, the report (`mean`, `auroc`, `verbal`, or why AUROC was skipped) and the scores.
    """
    from ..metrics.functional import auroc
    from ..signals.baselines import BASELINES, compute_baselines
    from ..signals.records import RECORD_EXTENSIONS, load_records

    if output is not None:
        refuse_output_over_inputs(output, {"--records": records, "--train_records": train_records, "--model": model})
        check_output_extension(output, RECORD_EXTENSIONS)
    rows = _records_in(records, allow_incomplete)
    train = None
    if train_records is not None:
        train = load_records(train_records, derive=False, allow_incomplete=allow_incomplete).to_list()
    running = [BASELINES[name] for name in which if name in BASELINES and BASELINES[name].needs_model_for(rows)]
    if backend is None and any(b.model_input == "backend" or complete is None for b in running):
        from ..signals.backends import HFBackend

        backend = HFBackend(model)
    verbal: dict = {}
    scores = compute_baselines(rows, complete=complete, train_records=train, which=list(which), backend=backend,
                               seed=seed, parser=parser, batch_size=batch_size, summary=verbal,
                               lexical_scoring=lexical_scoring)
    labels = [r.get("greedy_correctness") for r in rows]
    report: dict[str, Any] = {"mean": {}, "auroc": {}, "verbal": verbal}
    if any(label is None for label in labels):
        report["auroc_skipped"] = (f"{sum(label is None for label in labels)} of {len(labels)} records have no greedy "
                                   "correctness (`elical-hf judge --correctness has_answer`)")
    elif len(set(map(bool, labels))) < 2:
        report["auroc_skipped"] = (f"every greedy answer is {'correct' if bool(labels[0]) else 'wrong'}: AUROC needs "
                                   "both correct and wrong answers")
    for name, values in scores.items():
        report["mean"][name] = sum(values) / len(values)
        if "auroc_skipped" not in report:
            report["auroc"][name] = 100 * auroc(values, [int(bool(label)) for label in labels])
    return _records_out(Filled(rows, report, scores), output)
