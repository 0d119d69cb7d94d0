"""`elical-hf threshold`: choose a saved model's answer/abstain threshold on labelled records and store it.

The threshold maximises the accuracy of "answer when confidence >= t" on the records given (the rule of the paper's
alignment metric, `select_threshold`) and is written as `decision_threshold` into the model's
`confidence_config.json`, where `model.confidence` users and the `confidence-estimation` pipeline read it. Choose it
on a labelled split that is not the test set you report (`train` by default: held-out labelled questions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parser import ElicalArgumentParser
from .records_command import allow_incomplete_field


@dataclass
class ThresholdArguments:
    """Options of `elical-hf threshold` (also settable from `--config file.yaml`)."""

    model: str = field(metadata={"help": "A saved confidence model folder (gets decision_threshold)."})
    records: str = field(metadata={"help": "Judged records: a file or folder (HonestyBench layout or our records)."})
    split: str = field(default="train", metadata={"help": "Which split of the records to choose it on (not your test set)."})
    batch_size: int = field(default=16, metadata={"help": "Questions per forward pass when scoring."})
    allow_incomplete: bool = allow_incomplete_field()


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ThresholdArguments, prog="elical-hf threshold", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.auto import AutoModelForConfidence
    from elical_hf.evaluation import set_decision_threshold
    from elical_hf.signals.honestybench import load_honestybench

    (options,) = make_parser().parse_with_config(argv)
    loaded = load_honestybench(options.records, allow_incomplete=options.allow_incomplete)
    if options.split not in loaded:
        raise ValueError(f"{options.records} has no {options.split!r} records (found {list(loaded)}).")
    rows = [r for r in loaded[options.split] if r.get("greedy_correct") is not None]
    if len(rows) < 5:
        raise ValueError(f"Need at least 5 judged {options.split!r} records to choose a threshold, found {len(rows)}.")
    if options.split.endswith("test"):
        print(f"warning: choosing the threshold on {options.split!r}: do not report results on these records")
    confidences = AutoModelForConfidence.from_pretrained(options.model).confidence(
        [r["question"] for r in rows], batch_size=options.batch_size, progress=True
    )
    correct = [int(r["greedy_correct"]) for r in rows]
    threshold = set_decision_threshold(options.model, confidences, correct)
    answered = sum(c >= threshold for c in confidences)
    accuracy = 100 * sum((c >= threshold) == bool(y) for c, y in zip(confidences, correct)) / len(rows)
    print(f"decision_threshold = {threshold:.2f} written to {options.model}/confidence_config.json "
          f"(on {len(rows)} {options.split} records: answers {answered} of them; answer/abstain decisions "
          f"{accuracy:.1f}% right).")
    return 0
