"""`ConfidenceCardCallback`: fills a confidence model's card while [`ConfidenceTrainer`] trains it.

The sentence-transformers pattern: the model carries a card-data object ([`ConfidenceModelCardData`]) whose automatic
fields a `TrainerCallback` fills, so `save_pretrained` (and every checkpoint) writes a complete `README.md` without
any hand editing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..utils.loading import unwrap_peft
from ..models.model_card import get_card_data
from ..metrics import METRIC_NAMES
from .training_args import ConfidenceTrainingArguments, Stage


logger = logging.getLogger(__name__)

DEV_PREFIX = "eval"
"""The Trainer's metric prefix for its `eval_dataset` (the dev split of early stopping): such metrics are training
history (`training_logs`, `dev_metrics`), never evaluation results of the card."""


def history_entry(
    args: ConfidenceTrainingArguments, num_examples: int, precision: dict[str, Any], uses_lora: bool = True,
    questions: Sequence[str] | None = None,
) -> dict[str, Any]:
    """
    The `training_history` entry a run records before it trains (so that its checkpoints carry it): stage, target
    column, number of training rows, what trains and the precision, and with `questions` (the rows it fits on) their
    digests ([`~elical_hf.models.saved_model.question_digests`]), which `elical-hf threshold` checks calibration rows
    against. [`ConfidenceTrainer`] and [`~elical_hf.training.head_calibration.calibrate_head`] both write it;
    [`complete_history_entry`] adds the results.
    """
    entry: dict[str, Any] = {
        "stage": args.stage.value,
        "label_column": args.label_column,
        "num_examples": num_examples,
        "lora_trainable": args.trains_lora and uses_lora,  # a model without LoRA only ever trains its head
    }
    if args.stage == Stage.CALIBRATION:
        entry["calibration_trainable"] = args.calibration_trainable.value
    entry["precision"] = precision
    if questions is not None:
        from ..models.saved_model import QUESTIONS_KEY, question_digests

        entry[QUESTIONS_KEY] = question_digests(questions)
    return entry


def complete_history_entry(
    entry: dict[str, Any],
    args: TrainingArguments,
    *,
    epochs: float,
    global_steps: int,
    dev_metrics: dict[str, float] | None = None,
) -> None:
    """Add a finished run's results to its `training_history` entry: epochs, optimizer steps, learning rate, effective
    batch size and the dev metrics of the final model, named as the card reads them (`loss`, `auroc`, ...; see
    `metrics.METRIC_NAMES`)."""
    entry.update(
        epochs=round(float(epochs), 4),
        global_steps=global_steps,
        learning_rate=args.learning_rate,
        effective_batch_size=args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
    )
    if dev_metrics:
        entry["dev_metrics"] = dict(dev_metrics)


def _split_metrics(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    """`{"eval_loss": .., "eval_nq_auroc": .., "test_squad_ece": ..}` -> `{"eval": {"loss": ..}, "eval_nq": ..}`."""
    groups: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(float(value)):
            continue
        prefix, _, name = key.rpartition("_")
        if prefix and name in METRIC_NAMES:
            groups.setdefault(prefix, {})[name] = float(value)
    return groups


class ConfidenceCardCallback(TrainerCallback):
    """
    Collects a confidence model's card data during training (added by [`ConfidenceTrainer`] by default).

    - `on_init_end`: marks the card as generated from the trainer, adds the trainer's tags and `hub_model_id`.
    - `on_train_begin`: drops evaluation results recorded before (they describe the model before this training).
    - `on_evaluate`: during training, appends a row to `training_logs` and keeps the last as `dev_metrics`; after
      training, records each set evaluated with another prefix than `eval` (`trainer.evaluate(test_set,
      metric_key_prefix="test_nq")`) as an evaluation result of the card. Metrics prefixed `eval` (the default
      prefix, e.g. `trainer.evaluate()` on the dev split) are never recorded as results: `push` would publish them.
    - `on_train_end`: completes this run's entry of `confidence_config.training_history` with epochs, steps, learning
      rate, effective batch size and the dev metrics of the final (best, when early stopping restored it) model.

    Args:
        tags (`list[str]`, *optional*): Tags for the card (the trainer passes its `_tag_names`).
    """

    def __init__(self, tags: list[str] | None = None) -> None:
        self.tags = list(tags or [])
        self._training = False

    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kwargs: Any
    ) -> None:
        if model is None:
            return
        data = get_card_data(model)
        data.generated_from_trainer = True
        data.add_tags(*self.tags)
        if args.hub_model_id and not data.model_id:
            data.model_id = args.hub_model_id

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kwargs: Any
    ) -> None:
        self._training = True
        if model is not None:
            data = get_card_data(model)
            data.evaluations = []
            data.dev_metrics = {}

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        metrics: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if model is None or not metrics:
            return
        data = get_card_data(model)
        groups = _split_metrics(metrics)
        if self._training:
            stage = _current_stage(model)
            for prefix, values in groups.items():
                row = {"stage": stage, "epoch": state.epoch, "step": state.global_step, "eval_set": prefix, **values}
                data.training_logs.append(row)
            data.dev_metrics = groups.get("eval") or next(iter(groups.values()), {})
            return
        for prefix, values in groups.items():  # an evaluation of the trained model, e.g. on test sets
            split, _, name = prefix.partition("_")
            if split == DEV_PREFIX:  # the trainer's own dev sets (`trainer.evaluate()`): training history, not results
                logger.info("Not recording %r metrics in the model card: pass metric_key_prefix='test_<name>' to "
                            "record an evaluation result.", prefix)
                continue
            data.add_evaluation(name or split, values, split=split)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kwargs: Any
    ) -> None:
        self._training = False
        if model is None:
            return
        history = _inner(model).confidence_config.training_history
        if not history:
            return
        dev = _final_dev_metrics(args, state)
        complete_history_entry(history[-1], args, epochs=state.epoch or 0.0, global_steps=state.global_step,
                               dev_metrics=dev)
        if dev:
            get_card_data(model).dev_metrics = dev


def _inner(model: Any) -> Any:
    return unwrap_peft(getattr(model, "module", model))  # DDP / accelerate wrappers, then PEFT's


def _current_stage(model: Any) -> str | None:
    history = _inner(model).confidence_config.training_history
    return history[-1].get("stage") if history else None


def _final_dev_metrics(args: TrainingArguments, state: TrainerState) -> dict[str, float]:
    """Metrics of the evaluation the final weights come from: the best one when it was restored, else the last (the
    unnamed eval set, else the first named one)."""
    evaluations = [log for log in state.log_history if any(key.startswith("eval_") for key in log)]
    if not evaluations:
        return {}
    step = evaluations[-1].get("step")
    if state.best_model_checkpoint is not None and state.best_metric is not None and args.metric_for_best_model:
        key = args.metric_for_best_model
        key = key if key.startswith("eval_") else f"eval_{key}"
        step = next((log.get("step") for log in evaluations if log.get(key) == state.best_metric), step)
    groups: dict[str, dict[str, float]] = {}
    for log in evaluations:
        if log.get("step") == step:
            for prefix, values in _split_metrics(log).items():
                groups.setdefault(prefix, {}).update(values)
    return groups.get("eval") or next(iter(groups.values()), {})
