"""The options EliCal adds to `transformers.TrainingArguments`, and the two stages: no torch here.

[`~elical_hf.training.training_args.ConfidenceTrainingArguments`] is `TrainingArguments` plus
[`ConfidenceTrainingOptions`]; importing `TrainingArguments` imports torch, so `elical-hf train --help` lists these
fields (and the command's own) from this module alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers.utils import ExplicitEnum


__all__ = ["DEFAULT_LABEL_COLUMNS", "POSITIVE_ARGUMENTS", "CalibrationTrainable", "ConfidenceTrainingOptions", "Stage",
           "TrackerOptions"]


class Stage(ExplicitEnum):
    """Which EliCal stage a run trains."""

    ELICITATION = "elicitation"
    CALIBRATION = "calibration"


class CalibrationTrainable(ExplicitEnum):
    """What the calibration stage trains."""

    HEAD = "head"
    ALL = "all"


POSITIVE_ARGUMENTS = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps")
"""Training arguments that must be integers >= 1 (transformers finds a bad one only once training starts)."""

DEFAULT_LABEL_COLUMNS = {Stage.ELICITATION: "consistency", Stage.CALIBRATION: "correctness"}


@dataclass
class TrackerOptions:
    """`TrainingArguments`' trackers (same values, same defaults), declared without torch for train and evaluate."""

    report_to: list[str] = field(default_factory=lambda: ["none"], metadata={"help": "Experiment trackers to log to "
                                 "(train: its training; evaluate: the results table and plots): trackio, wandb, "
                                 "mlflow, ... (several separated by spaces), all (every installed one) or none."})
    run_name: str | None = field(default=None, metadata={"help": "The trackers' run name (default: theirs)."})
    project: str = field(default="huggingface", metadata={"help": "The trackers' project (trackio)."})


@dataclass
class ConfidenceTrainingOptions(TrackerOptions):
    """The fields [`~elical_hf.training.training_args.ConfidenceTrainingArguments`] adds to `TrainingArguments` (stage,
    target, early stopping, how a model named by a string is loaded) and the defaults it changes; documented there."""

    stage: Stage | str = field(
        default=Stage.ELICITATION,
        metadata={"help": "EliCal stage: 'elicitation' (consistency targets) or 'calibration' (correctness targets)."},
    )
    calibration_trainable: CalibrationTrainable | str = field(
        default=CalibrationTrainable.ALL,
        metadata={"help": "In calibration: 'all' (LoRA + head, as the paper's reference code) or 'head' (only the head, "
                  "on top of the frozen stage-1 LoRA)."},
    )
    label_column: str | None = field(
        default=None,
        metadata={"help": "Target column; defaults to 'consistency' (elicitation) or 'correctness' (calibration)."},
    )
    question_column: str = field(default="question", metadata={"help": "Column holding the raw question."})
    early_stopping_patience: int | None = field(
        default=None,
        metadata={"help": "Evaluations without eval-MSE improvement before stopping (needs a dev eval_dataset). None: "
                  "no early stopping, except in the recipe (`elical-hf train`): 4 for each run with a dev split."},
    )
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay (paper: 0.1)."})
    warmup_steps: float = field(default=0.1, metadata={"help": "Warm-up steps; a value below 1 is a ratio."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Kept False: the trainer prepares its own columns."}
    )
    logging_steps: float = field(default=10, metadata={"help": "Log every N steps (a value below 1 is a ratio)."})
    ddp_find_unused_parameters: bool | None = field(
        default=False,
        metadata={"help": "Kept False: every trainable parameter (LoRA, head) gets a gradient at every step, so DDP "
                  "need not search the graph for unused ones."},
    )
    model_init_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": "Keyword arguments of AutoModelForConfidence.from_pretrained for a model given by name, as "
                  "JSON (e.g. '{\"attn_implementation\": \"sdpa\"}'); `elical-hf train` adds those of its model "
                  "options (--dtype, --head_type, ...), which may not be given here too."},
    )
