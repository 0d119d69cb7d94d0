"""`elical-hf monitor` as a step, which watches a model in use: do new questions' confidences still look like the
calibration set's? ([`~elical_hf.evaluation.drift.confidence_drift`])"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .arguments import QuestionArguments, RecordArguments, only
from ..evaluation.drift import DRIFT_SHIFT, DRIFT_SIGNIFICANCE
from ..utils.files import check_output_extension, refuse_output_over_inputs
from .threshold import HELD_OUT_SPLIT


__all__ = ["MonitorArguments", "monitor"]

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class MonitorArguments(only(RecordArguments, "allow_incomplete", "batch_size"), QuestionArguments):
    """Options of [`monitor`] (`elical-hf monitor`); `questions` are the new, unlabelled questions."""

    model: str = field(metadata={"positional": True, "help": "A saved confidence model (a folder or a Hub id) with "
                                 "a threshold."})
    reference: str | None = field(
        default=None,
        metadata={"help": "Records to take the calibration confidences from (scored again); default: those "
                  "`elical-hf threshold` saved in the model folder (calibration_confidences.json)."},
    )
    split: str = field(default=HELD_OUT_SPLIT, metadata={"help": "With --reference: the paper split of its records to "
                       "use (default: the one `elical-hf threshold` calibrates on by default)."})
    significance: float = field(default=DRIFT_SIGNIFICANCE,
                                metadata={"help": "Report drift when the KS test's p-value is below this."})
    shift: float = field(default=DRIFT_SHIFT, metadata={"help": "Report the test's power: how likely it is, at these "
                         "sizes, to detect this shift of every confidence."})
    checks_per_period: int = field(default=1, metadata={"help": "How many times a schedule runs this check per "
                                   "period (30 for daily checks over a month): say what they risk together and the "
                                   "--significance that keeps a false alarm per period below the one given."})
    output: str | None = field(default=None, metadata={"help": "Also write the result as JSON to this .json file "
                               "(not over an input)."})
    plot: str | None = field(default=None, metadata={"help": "Also draw both confidence distributions (ECDFs) "
                             "into this PNG file."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.significance < 1.0:
            raise ValueError(f"--significance must lie in (0, 1), got {self.significance}.")
        if not 0.0 < self.shift < 1.0:
            raise ValueError(f"--shift must lie in (0, 1), got {self.shift}.")
        if self.checks_per_period < 1:
            raise ValueError(f"--checks_per_period must be at least 1, got {self.checks_per_period}.")
        if self.plot is not None and not self.plot.lower().endswith(".png"):
            raise ValueError(f"--plot must name a .png file, got {self.plot!r}.")


def monitor(args: MonitorArguments, *, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """
    Score new, unlabelled questions with a saved model and test whether their confidences look like those of the
    rows its threshold was chosen on ([`~elical_hf.evaluation.drift.confidence_drift`]), whose guarantee assumes they
    do. Each distinct question counts once on each side (a served log asks many again), and is scored once, with the
    prompt `threshold` used ([`~elical_hf.steps.evaluate.model_confidences`]: multiple-choice rows with their own).

    The reference is the confidences `elical-hf threshold` saved in the model folder
    ([`~elical_hf.evaluation.drift.load_reference`], with `question_ids` naming its repeated rows; a reference saved
    without them counts every row), or, with `args.reference`, those of its `args.split` records scored again.

    Returns:
        `dict`: what [`~elical_hf.evaluation.drift.confidence_drift`] returns, plus `model`, `questions`, `reference`
        (where the reference came from), `threshold` (the saved decision threshold, `None` without one),
        `answered_reference` / `answered_new` (the share of each set's distinct questions at or above it) and `schedule`
        ([`~elical_hf.evaluation.drift.scheduled_checks`] for `args.checks_per_period`, `None` for one check).
    """
    from ..utils.atomic import atomic_write_json
    from ..models.auto import AutoModelForConfidence
    from ..evaluation.drift import confidence_drift, distinct_confidences, first_rows, load_reference, scheduled_checks
    from ..evaluation.plots import confidence_drift_plot
    from ..models.saved_model import find_saved_model
    from ..signals.records import load_records
    from .evaluate import check_trained_model, model_confidences
    from .sample import load_questions

    say = say or logger.info
    inputs = {"MODEL": args.model, "--questions": args.questions, "--reference": args.reference}
    for option, output, extension in (("--output", args.output, ".json"), ("--plot", args.plot, ".png")):
        if output is not None:  # before any work: never over an input (the model's own files among them)
            refuse_output_over_inputs(output, inputs, option)
            check_output_extension(output, (extension,), option)
    check_trained_model(args.model, args.model)
    folder = find_saved_model(args.model)  # a Hub id's snapshot: `push` publishes the reference with the model
    new_rows = load_questions(args.questions)
    if not new_rows:
        raise ValueError(f"{args.questions} holds no questions.")
    reference_rows = None
    if args.reference is None:
        saved = load_reference(folder)
        reference, reference_ids = saved["confidences"], saved.get("question_ids")
        note = "" if reference_ids else "; saved without question ids, so every row counts: run `threshold` again"
        where = f"{args.model} (saved by `elical-hf threshold` on {saved.get('records')}, split {saved.get('split')}" \
                f"{note})"
    else:
        loaded = load_records(args.reference, splits=True, allow_incomplete=args.allow_incomplete)
        reference_rows = [r for r in loaded if r["paper_split"] == args.split]
        if not reference_rows:
            raise ValueError(f"{args.reference} has no {args.split!r} records to compare with.")
        where = f"{args.reference}, split {args.split}"
    model = AutoModelForConfidence.from_pretrained(args.model)

    def scored(rows: list[dict[str, Any]]) -> tuple[list[float], list[int]]:
        """Each row's confidence, each distinct question scored once, and the rows' question ids."""
        ids = first_rows([row["question"] for row in rows])
        distinct = sorted(set(ids))
        by_id = dict(zip(distinct, model_confidences(model, [rows[i] for i in distinct], args.batch_size)))
        return [by_id[i] for i in ids], ids

    if reference_rows is not None:
        reference, reference_ids = scored(reference_rows)
    new, new_ids = scored(new_rows)
    result = confidence_drift(reference, new, args.significance, reference_questions=reference_ids,
                              new_questions=new_ids, shift=args.shift)
    reference, new = distinct_confidences(reference, reference_ids), distinct_confidences(new, new_ids)
    threshold = model.confidence_config.decision_threshold
    result.update(model=args.model, questions=args.questions, reference=where, threshold=threshold,
                  answered_reference=None, answered_new=None, schedule=None)
    if threshold is not None:
        result.update(answered_reference=sum(c >= threshold for c in reference) / len(reference),
                      answered_new=sum(c >= threshold for c in new) / len(new))
    if args.checks_per_period > 1:
        result["schedule"] = {"checks_per_period": args.checks_per_period,
                              **scheduled_checks(args.significance, args.checks_per_period)}
    if args.plot is not None:
        confidence_drift_plot(reference, new, args.plot, threshold=threshold, p_value=result["p_value"])
        say(f"plot: {args.plot}")
    if args.output is not None:
        atomic_write_json(args.output, result)
    return result
