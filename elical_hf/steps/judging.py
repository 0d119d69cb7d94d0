"""The steps that fill records in: the judges, the training-free baselines, and the teacher's diagnosis.

[`judge`] and [`score_baselines`] take any records input and give the records back with their judgements or
`confidence_<name>` columns (written atomically to `output` when given); [`diagnose`] says, from judged records,
whether stage 1's teacher tracks correctness.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..default_model import DEFAULT_MODEL


__all__ = ["Filled", "check_output_outside", "diagnose", "judge", "score_baselines"]


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


def check_output_outside(records: Any, output: str) -> None:
    """Refuse an `output` file inside the `records` folder: the next read of the folder (by this command again, or by
    `elical-hf evaluate`) would take every record twice, once from the input files and once from the output. A
    records file may be rewritten in place (`--output` the same file)."""
    if not isinstance(records, (str, os.PathLike)):
        return
    folder, target = os.path.realpath(records), os.path.realpath(output)
    if os.path.isdir(folder) and os.path.commonpath([folder, target]) == folder:
        raise ValueError(
            f"--output {output} is inside the --records folder {records}: reading that folder again would count every "
            "record twice (the input files and this output). Write the output outside it."
        )


def _records_in(records: Any, output: str | None, allow_incomplete: bool) -> list[dict[str, Any]]:
    """The records a filling step reads, as they are stored (no training columns: it is about to change what they
    are derived from), refusing an output inside the input folder and an input without records."""
    from ..signals.records import load_records

    if output is not None:
        check_output_outside(records, output)
    rows = load_records(records, derive=False, allow_incomplete=allow_incomplete).to_list()
    if not rows:
        raise ValueError(f"No records in {records!r}." if isinstance(records, (str, os.PathLike)) else "No records.")
    return rows


def _records_out(filled: Filled, output: str | None) -> Filled:
    if output is not None:
        from ..signals.records import save_records

        save_records(filled.records, output)
    return filled


def judge(
    records: Any,
    correctness: str | None = None,
    consistency: str | None = None,
    *,
    output: str | None = None,
    allow_incomplete: bool = False,
    **options: Any,
) -> Filled:
    """
    Judge the correctness and / or the consistency of records ([`~elical_hf.signals.judging.apply_judges`]).

    Args:
        records: Any records input ([`~elical_hf.signals.records.load_records`]).
        correctness, consistency (`str`, *optional*): The judges, as [`~elical_hf.signals.judging.apply_judges`]
            names them.
        output (`str`, *optional*): Also write the judged records there (`.jsonl` / `.parquet`, atomically); not
            inside the `records` folder.
        allow_incomplete (`bool`, *optional*): Read an unfinished `elical-hf sample` folder anyway.
        options: The judges' settings, as [`~elical_hf.signals.judging.apply_judges`] takes them (`complete`,
            `judge_model`, `judge_endpoint`, `strict`, `strip_thinking`, thresholds, `lexical_scores`, `batch_size`,
            `max_new_tokens`, ...).

    Returns:
        [`Filled`]: the judged records and the judges' summaries.

    Raises:
        `ValueError`: no record carries what a requested judgement reads (not sampled records).
    """
    from ..signals.judging import apply_judges, check_judgeable

    rows = _records_in(records, output, allow_incomplete)
    check_judgeable(rows, correctness, consistency,
                    source=records if isinstance(records, (str, os.PathLike)) else "The records")
    return _records_out(Filled(rows, apply_judges(rows, correctness, consistency, **options)), output)


def score_baselines(
    records: Any,
    which: Sequence[str] = ("prob", "n_prob", "consis_lex", "consis_sem"),
    *,
    output: str | None = None,
    complete: Any = None,
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
            `model`'s, loaded when a verbal baseline is asked for.
        train_records: Judged TRAIN records (any records input), Verbal-10's demonstrations (never test records).
        parser, seed, batch_size, lexical_scoring: As in [`~elical_hf.signals.compute_baselines`].

    Returns:
        [`Filled`]: the records, the report (`mean`, `auroc`, `verbal`, or why AUROC was skipped) and the scores.
    """
    from ..metrics.functional import auroc
    from ..signals.baselines import BASELINES, compute_baselines
    from ..signals.records import load_records

    rows = _records_in(records, output, allow_incomplete)
    train = None
    if train_records is not None:
        train = load_records(train_records, derive=False, allow_incomplete=allow_incomplete).to_list()
    if complete is None and any(BASELINES[name].needs_model for name in which):
        from ..signals.backends import HFBackend

        complete = HFBackend(model).complete
    verbal: dict = {}
    scores = compute_baselines(rows, complete=complete, train_records=train, which=list(which), seed=seed,
                               parser=parser, batch_size=batch_size, summary=verbal, lexical_scoring=lexical_scoring)
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


def diagnose(
    records: Any,
    *,
    split: str | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    output: str | None = None,
    allow_incomplete: bool = False,
) -> dict[str, Any]:
    """
    Will elicitation help? The teacher's AUROC (consistency vs greedy correctness) per dataset and overall, with a
    verdict each ([`~elical_hf.diagnosis.diagnose`]), from any records input; also written as JSON to `output`.
    """
    from ..atomic import atomic_write_text
    from ..diagnosis import diagnose as diagnose_records
    from ..signals.records import load_records

    report = diagnose_records(load_records(records, allow_incomplete=allow_incomplete), bootstrap=bootstrap, seed=seed,
                              split=split)
    if output:
        atomic_write_text(output, json.dumps(report, indent=2) + "\n")
    return report
