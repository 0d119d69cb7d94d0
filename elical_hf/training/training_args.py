"""`ConfidenceTrainingArguments`: `TrainingArguments` plus the two EliCal stages."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import TrainingArguments

from ..settings.precision import resolve_dtype
from ..settings.training_options import (
    DEFAULT_LABEL_COLUMNS,
    POSITIVE_ARGUMENTS,
    CalibrationTrainable,
    ConfidenceTrainingOptions,
    Stage,
)


@dataclass
class ConfidenceTrainingArguments(ConfidenceTrainingOptions, TrainingArguments):
    r"""
    Configuration for [`ConfidenceTrainer`]. Everything of [`~transformers.TrainingArguments`] applies.

    > Stage

    Parameters:
        stage (`str` or [`Stage`], *optional*, defaults to `"elicitation"`):
            `"elicitation"`: regress the model's self-consistency (no correctness labels needed).
            `"calibration"`: regress the share of sampled answers judged correct (a small labelled set).
        calibration_trainable (`str` or [`CalibrationTrainable`], *optional*, defaults to `"all"`):
            In calibration, `"all"` trains LoRA and head (what the paper's reference code does: its stage 2 reloads
            the stage-1 adapter and `set_adapter` makes it trainable again; also Cal-Only from a fresh model), `"head"`
            trains only the linear head on top of the frozen stage-1 LoRA (an option; requires a model trained in
            elicitation; `calibrate_head` does the same from cached features).

    > Data

    Parameters:
        label_column (`str`, *optional*):
            Target column. Defaults to `"consistency"` in elicitation and `"correctness"` in calibration.
        question_column (`str`, *optional*, defaults to `"question"`):
            Column holding the raw question text.
        early_stopping_patience (`int`, *optional*):
            Stop after this many evaluations without a lower eval MSE and restore the best checkpoint. Needs an
            `eval_dataset`: a dev split carved from training data, never the test set. `None` is no early stopping
            for a trainer on its own; [`~elical_hf.train_elical`] reads it (and a `num_train_epochs` of `None`) as
            its rule for each run.

    > Model

    Parameters:
        model_init_kwargs (`dict`, *optional*):
            Keyword arguments of [`AutoModelForConfidence.from_pretrained`] when the model is given by name (to
            [`ConfidenceTrainer`], or by [`~elical_hf.train_elical`], which loads each run's model): `dtype`,
            `load_in_4bit`, `head_type`, `feature_layer`, ... A field like any other, as TRL's configs have it (kept
            by `dataclasses.replace`; on the command line a JSON object); `elical-hf train` adds
            [`~elical_hf.steps.arguments.ModelArguments.model_init_kwargs`] to it.

    > Defaults that differ from [`~transformers.TrainingArguments`]

    `weight_decay=0.1`, `warmup_steps=0.1` (a ratio), `remove_unused_columns=False`, `logging_steps=10` — the
    paper's recipe where it is known (its learning rate is the default 5e-5 with a linear schedule) — and
    `ddp_find_unused_parameters=False`.

    > Scale

    Multi-process training is the Trainer's own: `accelerate launch --multi_gpu --num_processes N` (DDP; FSDP and
    DeepSpeed ZeRO-2 through an accelerate config file, see `examples/configs/`) runs the same script, each process
    on `per_device_train_batch_size` rows, only the main one writing checkpoints, cards and `confidence_config.json`.
    `activation_checkpointing=True` (transformers' name; `gradient_checkpointing` is its deprecated alias)
    recomputes each layer's activations in the backward pass: it works with LoRA + head, and the prompt prefix a
    batch shares then runs once per row instead of once per batch (a KV cache cannot be kept under checkpointing).
    A 4-bit (QLoRA) backbone is a loading option: `AutoModelForConfidence.from_pretrained(..., load_in_4bit=True)`.

    Head-only calibration on cached features ([`~elical_hf.training.head_calibration.fit_head`]) reads these same
    arguments (optimizer, schedule, warm-up, clipping, batch, epochs, early stopping, seed) with its own defaults for
    the learning rate, epochs and patience (`head_calibration.HEAD_TRAINING_DEFAULTS`).
    """

    _VALID_DICT_FIELDS = [*TrainingArguments._VALID_DICT_FIELDS, "model_init_kwargs"]  # JSON from the command line

    @property
    def trains_lora(self) -> bool:
        """Whether this run trains the LoRA weights (elicitation, or calibration with `calibration_trainable="all"`);
        the head always trains and the backbone never does."""
        return self.stage == Stage.ELICITATION or self.calibration_trainable == CalibrationTrainable.ALL

    def __post_init__(self) -> None:
        for name in POSITIVE_ARGUMENTS:  # checked here, before a run creates any folder
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}.")
        self.stage = Stage(self.stage)
        self.calibration_trainable = CalibrationTrainable(self.calibration_trainable)
        if self.label_column is None:
            self.label_column = DEFAULT_LABEL_COLUMNS[self.stage]
        if self.early_stopping_patience is not None:
            if self.early_stopping_patience < 1:
                raise ValueError(f"`early_stopping_patience` must be >= 1, got {self.early_stopping_patience}.")
            if self.eval_strategy == "no":
                self.eval_strategy = "epoch"
            self.save_strategy = self.eval_strategy
            if self.save_strategy == "steps" and self.eval_steps is not None:
                self.save_steps = self.eval_steps
            self.load_best_model_at_end = True
            self.metric_for_best_model = "loss"
            self.greater_is_better = False
        super().__post_init__()
        if self.bf16 and self.device.type == "cpu":
            resolve_dtype("bfloat16", "cpu")  # warns where bf16 is emulated (several times slower than float32)
        if self.dataloader_pin_memory and self.device.type == "cpu":
            self.dataloader_pin_memory = False  # pinning needs an accelerator; torch warns at every epoch otherwise
