"""`ConfidenceTrainer`: the transformers `Trainer` for both EliCal stages."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from transformers import EarlyStoppingCallback, EvalPrediction, Trainer
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import HubStrategy

from ..models.auto import AutoModelForConfidence, PeftModelForConfidence
from .callbacks import ConfidenceCardCallback, history_entry
from ..utils.atomic import atomic_write_text
from ..data.training_table import EVAL_LABEL_COLUMN, ConfidenceDataCollator, as_dataset, tokenize_dataset, validate_columns
from ..data.encoding import ensure_pad_token
from ..metrics import alignment, auroc, brier, ece
from ..metrics.functional import MIN_THRESHOLD_ROWS
from ..settings.precision import precision_report
from .training_args import CalibrationTrainable, ConfidenceTrainingArguments, Stage


logger = logging.getLogger(__name__)


def confidence_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """AUROC, ECE, Brier score and alignment of the confidences against the binary `greedy_correctness` labels (where
    known)."""
    confidences = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    label_ids = prediction.label_ids
    if not isinstance(label_ids, tuple) or len(label_ids) < 2:
        return {}
    correct = np.asarray(label_ids[1], dtype=np.float64)
    known = ~np.isnan(correct)
    if not known.any():
        return {}
    confidences = np.clip(np.asarray(confidences, dtype=np.float64)[known], 0.0, 1.0)
    correct = correct[known].astype(np.int64)
    metrics = {"ece": ece(confidences, correct), "brier": brier(confidences, correct)}
    if 0 < correct.sum() < len(correct):
        metrics["auroc"] = auroc(confidences, correct)
    # The paper's rule: threshold on the first 20% of the eval set (its order), scored on the rest. A dev split whose
    # 20% cannot choose a threshold (too few rows, one class) reports no alignment rather than a t = 0.5 figure.
    prefix = correct[: int(0.2 * len(correct))]
    if len(prefix) >= MIN_THRESHOLD_ROWS and 0 < prefix.sum() < len(prefix):
        metrics["alignment"] = alignment(confidences, correct)["alignment"]
    return metrics


class ConfidenceTrainer(Trainer):
    r"""
    Trains a confidence model's LoRA and head by MSE regression, for either EliCal stage.

    Args:
        model (`str` or [`PeftModelForConfidence`]):
            A model from [`AutoModelForConfidence`], or a name/path to load one from (a base causal LM for a fresh
            model, or a saved confidence model, e.g. the stage-1 output when calibrating) with
            `args.model_init_kwargs`.
        args ([`ConfidenceTrainingArguments`], *optional*):
            Stage, trainable parts, label column and the usual Trainer settings.
        train_dataset (`datasets.Dataset`, `list[dict]` or `dict[str, list]`):
            Needs a `question` column and the stage's target column (`consistency` or `correctness`, in [0, 1]).
        eval_dataset (same types, or a `dict` of them, *optional*):
            A dev split. With a binary `greedy_correctness` column, AUROC / ECE / Brier / alignment are reported next to
            the loss.
        processing_class ([`~transformers.PreTrainedTokenizerBase`], *optional*):
            Defaults to the model's own tokenizer (a missing pad token is set to EOS).
        kwargs:
            Everything else [`~transformers.Trainer`] takes (`callbacks`, `compute_metrics`, `optimizers`, ...).
    """

    _tag_names = ["elical-hf", "confidence-estimation", "honesty"]

    def __init__(
        self,
        model: str | PeftModelForConfidence,
        args: ConfidenceTrainingArguments | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        data_collator: Any = None,
        compute_metrics: Any = None,
        callbacks: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = ConfidenceTrainingArguments(output_dir="elical-hf-output")
        if not isinstance(args, ConfidenceTrainingArguments):
            raise TypeError(f"`args` must be ConfidenceTrainingArguments, got {type(args).__name__}.")
        if isinstance(model, str):
            model = AutoModelForConfidence.from_pretrained(model, is_trainable=True, **(args.model_init_kwargs or {}))
        if not isinstance(model, PeftModelForConfidence):
            raise TypeError(
                f"`model` must come from AutoModelForConfidence.from_pretrained, got {type(model).__name__}."
            )
        tokenizer = processing_class if processing_class is not None else model.tokenizer
        if tokenizer is None:
            raise ValueError("No tokenizer: pass `processing_class=` or load the model with AutoModelForConfidence.")
        ensure_pad_token(tokenizer)
        self._check_stage(model, args)
        if args.early_stopping_patience is not None and eval_dataset is None:
            raise ValueError("`early_stopping_patience` needs an `eval_dataset` (a dev split, never the test set).")

        questions = None  # what the run fits on, recorded in its history entry (pre-tokenised rows: unknown)
        with args.main_process_first(desc="preparing datasets"):
            if train_dataset is not None:
                train_dataset = as_dataset(train_dataset, "train")
                if args.question_column in train_dataset.column_names:
                    questions = train_dataset[args.question_column]
                train_dataset = self._prepare_dataset(train_dataset, "train", model, tokenizer, args)
            if isinstance(eval_dataset, Mapping) and not _is_column_dict(eval_dataset):
                eval_dataset = {
                    key: self._prepare_dataset(value, f"eval[{key}]", model, tokenizer, args)
                    for key, value in eval_dataset.items()
                }
            elif eval_dataset is not None:
                eval_dataset = self._prepare_dataset(eval_dataset, "eval", model, tokenizer, args)

        if args.label_names is None:
            args.label_names = ["labels", EVAL_LABEL_COLUMN]
        callbacks = list(callbacks or [])
        if not any(isinstance(c, ConfidenceCardCallback) for c in callbacks):  # fills the model card
            callbacks.append(ConfidenceCardCallback(tags=self._tag_names))
        if args.early_stopping_patience is not None:
            callbacks.append(EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience))
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator or ConfidenceDataCollator(tokenizer),
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            compute_metrics=compute_metrics or confidence_metrics,
            callbacks=callbacks,
            **kwargs,
        )
        self._train_questions = questions
        self._apply_stage()

    @staticmethod
    def _check_stage(model: PeftModelForConfidence, args: ConfidenceTrainingArguments) -> None:
        if (
            args.stage == Stage.CALIBRATION
            and args.calibration_trainable == CalibrationTrainable.HEAD
            and model.confidence_config.use_lora  # without LoRA every stage trains the head alone anyway
            and Stage.ELICITATION.value not in model.confidence_config.trained_stages
        ):
            raise ValueError(
                "calibration_trainable='head' trains only the head on top of stage-1 (elicitation) LoRA weights, but "
                "this model has no elicitation training. Load the stage-1 output, or use "
                "calibration_trainable='all' (Cal-Only: LoRA and head trained on the labels alone)."
            )

    def _apply_stage(self) -> None:
        """Make exactly the stage's parts trainable (the backbone always stays frozen)."""
        self.accelerator.unwrap_model(self.model).set_trainable(lora=self.args.trains_lora, head=True)

    def _prepare_dataset(
        self, data: Any, name: str, model: Any, tokenizer: Any, args: ConfidenceTrainingArguments
    ) -> Dataset:
        dataset = as_dataset(data, name)
        if "input_ids" in dataset.column_names and "labels" in dataset.column_names:
            return dataset  # already prepared
        validate_columns(dataset, name, args.label_column, args.question_column)
        return tokenize_dataset(dataset, tokenizer, model.confidence_config, args.label_column, args.question_column)

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        # Loading a checkpoint's adapter (resume, best model) may flip `requires_grad`; re-apply the stage first.
        self._apply_stage()
        return super().create_optimizer(model) if model is not None else super().create_optimizer()

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        inputs = {key: value for key, value in inputs.items() if key != EVAL_LABEL_COLUMN}
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        super()._save(output_dir, state_dict)
        # Model folders hold no pickles: the training arguments are kept as JSON instead of `training_args.bin`.
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            pickled = os.path.join(output_dir, TRAINING_ARGS_NAME)
            if os.path.exists(pickled):
                os.remove(pickled)
            atomic_write_text(os.path.join(output_dir, "training_args.json"), self.args.to_json_string())

    def create_model_card(self, language: str | None = None, license: str | None = None, **kwargs: Any) -> None:
        """Write the elical-hf card (see `model_cards/`) to `output_dir/README.md` instead of the generic one."""
        if not self.is_world_process_zero():
            return
        from ..models.model_card import get_card_data, write_model_card

        model = self.accelerator.unwrap_model(self.model)
        data = get_card_data(model)
        data.language = language or data.language
        data.license = license or data.license
        write_model_card(model, self.args.output_dir)

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """
        Save the model to `output_dir` and publish it with [`~elical_hf.push_folder`] (one commit; the base model
        named by its Hub id; no pickles, no checkpoints) instead of the Trainer's upload of the whole folder. Called
        at the end of training when `push_to_hub=True`; checkpoint pushes during training (`hub_strategy`) still use
        the Trainer's own upload. `kwargs` (`language`, `license`) go to the model card; `blocking` is ignored (the
        commit always completes before this returns).

        Returns:
            `huggingface_hub.CommitInfo` on the main process, `None` on the others.
        """
        from ..publishing.hub import push_folder

        token = token if token is not None else self.args.hub_token
        if self.hub_model_id is None:
            self.init_hf_repo(token=token, private=private)
        self.save_model(_internal_call=True)
        if not self.is_world_process_zero():
            return None
        self.create_model_card(**{key: kwargs[key] for key in ("language", "license") if key in kwargs})
        self._finish_current_push()
        return push_folder(
            self.args.output_dir,
            self.hub_model_id,
            private=private if private is not None else self.args.hub_private_repo,
            token=token,
            commit_message=commit_message,
            revision=revision if revision is not None else self.args.hub_revision,
        )

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """With `push_to_hub=True`, every save publishes the checkpoint's model with [`~elical_hf.push_folder`]:
        each Hub commit is a complete, loadable confidence model (the Trainer's own push copies raw weight files and
        a pickled `training_args.bin`, and leaves out `confidence_config.json`). Optimizer states are not pushed, so
        `hub_strategy="checkpoint"` resumption from the Hub is not supported."""
        if not self.is_world_process_zero() or self.args.hub_strategy == HubStrategy.END:
            return
        from ..publishing.hub import push_folder

        unit = f"step {self.state.global_step}" if self.args.save_strategy == "steps" else f"epoch {int(self.state.epoch or 0)}"
        push_folder(checkpoint_folder, self.hub_model_id, token=self.args.hub_token, revision=self.args.hub_revision,
                    commit_message=f"Training in progress, {unit}")

    def train(self, *args: Any, **kwargs: Any) -> Any:
        backbone_dtype = self.accelerator.unwrap_model(self.model).get_input_embeddings().weight.dtype
        mixed = "bf16" if self.args.bf16 else "fp16" if self.args.fp16 else None
        precision = precision_report(backbone_dtype, self.args.device, mixed_precision=mixed)
        num_examples = len(self.train_dataset) if self.train_dataset is not None else 0
        uses_lora = self.accelerator.unwrap_model(self.model).confidence_config.use_lora
        entry = history_entry(self.args, num_examples, precision, uses_lora=uses_lora,
                              questions=getattr(self, "_train_questions", None))
        # Recorded before training so that checkpoints carry it too; `ConfidenceCardCallback` adds the results.
        self.accelerator.unwrap_model(self.model).confidence_config.training_history.append(entry)
        return super().train(*args, **kwargs)


def _is_column_dict(data: Mapping[str, Any]) -> bool:
    """A dict of columns (`{"question": [...], ...}`) rather than a dict of named eval datasets."""
    return all(isinstance(value, (list, tuple)) for value in data.values())
