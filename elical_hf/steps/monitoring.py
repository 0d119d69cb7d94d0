"""The step that watches a model in use: [`monitor`] (do new questions' confidences still look like the calibration
set's? [`~elical_hf.drift.confidence_drift`])."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..arguments import QuestionArguments, RecordArguments, only
from ..drift import DRIFT_SIGNIFICANCE
from ..files import check_output_extension, refuse_output_over_inputs


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
    split: str = field(default="train", metadata={"help": "With --reference: the split of its records to use."})
    significance: float = field(default=DRIFT_SIGNIFICANCE,
                                metadata={"help": "Report drift when the KS test's p-value is below this."})
    output: str | None = field(default=None, metadata={"help": "Also write the result as JSON to this .json file "
                               "(not over an input)."})
    plot: str | None = field(default=None, metadata={"help": "Also draw both confidence distributions (ECDFs) "
                             "into this PNG file."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.significance < 1.0:
            raise ValueError(f"--significance must lie in (0, 1), got {self.significance}.")
        if self.plot is not None and not self.plot.lower().endswith(".png"):
            raise ValueError(f"--plot must name a .png file, got {self.plot!r}.")


def monitor(args: MonitorArguments, *, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """
    Score new, unlabelled questions with a saved model and test whether their confidences look like those of the
    rows its threshold was chosen on ([`~elical_hf.drift.confidence_drift`]), whose guarantee assumes they do.

    The reference is the confidences `elical-hf threshold` saved in the model folder
    ([`~elical_hf.drift.load_reference`]), or, with `args.reference`, those of its `args.split` records scored again.

    Returns:
        `dict`: what [`~elical_hf.drift.confidence_drift`] returns, plus `model`, `questions`, `reference` (where the
        reference came from), `threshold` (the saved decision threshold, `None` without one) and
        `answered_reference` / `answered_new` (the share of each set at or above it).
    """
    from ..atomic import atomic_write_json
    from ..auto import AutoModelForConfidence
    from ..drift import confidence_drift, load_reference
    from ..plots import confidence_drift_plot
    from ..saved_model import find_saved_model
    from ..signals.records import load_records
    from .evaluating import check_trained_model
    from .sampling import load_questions

    say = say or logger.info
    inputs = {"MODEL": args.model, "--questions": args.questions, "--reference": args.reference}
    for option, output, extension in (("--output", args.output, ".json"), ("--plot", args.plot, ".png")):
        if output is not None:  # before any work: never over an input (the model's own files among them)
            refuse_output_over_inputs(output, inputs, option)
            check_output_extension(output, (extension,), option)
    check_trained_model(args.model, args.model)
    folder = find_saved_model(args.model)  # a Hub id's snapshot: `push` publishes the reference with the model
    questions = [row["question"] for row in load_questions(args.questions)]
    if not questions:
        raise ValueError(f"{args.questions} holds no questions.")
    reference_questions = None
    if args.reference is None:
        saved = load_reference(folder)
        reference, where = saved["confidences"], f"{args.model} (saved by `elical-hf threshold` on "\
            f"{saved.get('records')}, split {saved.get('split')})"
    else:
        loaded = load_records(args.reference, splits=True, allow_incomplete=args.allow_incomplete)
        reference_questions = [r["question"] for r in loaded if r["paper_split"] == args.split]
        if not reference_questions:
            raise ValueError(f"{args.reference} has no {args.split!r} records to compare with.")
        where = f"{args.reference}, split {args.split}"
    model = AutoModelForConfidence.from_pretrained(args.model)
    if reference_questions is not None:
        reference = model.confidence(reference_questions, batch_size=args.batch_size, progress=True)
    new = model.confidence(questions, batch_size=args.batch_size, progress=True)
    result = confidence_drift(reference, new, args.significance)
    threshold = model.confidence_config.decision_threshold
    result.update(model=args.model, questions=args.questions, reference=where, threshold=threshold,
                  answered_reference=None, answered_new=None)
    if threshold is not None:
        result.update(answered_reference=sum(c >= threshold for c in reference) / len(reference),
                      answered_new=sum(c >= threshold for c in new) / len(new))
    if args.plot is not None:
        confidence_drift_plot(reference, new, args.plot, threshold=threshold, p_value=result["p_value"])
        say(f"plot: {args.plot}")
    if args.output is not None:
        atomic_write_json(args.output, result)
    return result
