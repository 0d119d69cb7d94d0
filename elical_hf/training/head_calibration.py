"""Head-only calibration on cached prompt features: the head-only stage 2, in seconds instead of hours.

When only the confidence head trains (`calibration_trainable="head"`; an option, since the reference code's stage 2
trains LoRA + head), the backbone and its LoRA weights are frozen, so the head always reads the same feature for a
question: the final hidden state of the last prompt token. [`calibrate_head`] computes those features once and fits the
`Linear` head on them. It reads the same [`ConfidenceTrainingArguments`] as [`ConfidenceTrainer`] and builds the same
recipe from them the way the Trainer does: the optimizer of `args.optim` (AdamW, weight decay on the weight only), the
scheduler of `args.lr_scheduler_type` (linear, `get_linear_schedule_with_warmup`) with `args.get_warmup_steps`, clipping
to `max_grad_norm`, one step per effective batch, early stopping on dev MSE with the best epoch restored, and the same
`training_history` entry. Only the defaults of the learning rate, epochs and patience differ
([`HEAD_TRAINING_DEFAULTS`]). Training through the Trainer instead runs the whole backbone forward at every step of
every epoch; with the same rows in the same order (`train_sampling_strategy="sequential"`, or one batch of all rows)
both give the same head (`tests/test_head_calibration.py` checks it).

The few-label comparisons (the demo, `examples/reproduce_paper.py`, `experiments/label_selection.py`) calibrate one head
on many label draws from the same cached features: [`label_budget_sweep`] draws the labels, puts the head back where
it started, calibrates it and scores the test questions with [`head_confidences`], once per draw.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import EvalPrediction, Trainer, get_scheduler

from .callbacks import complete_history_entry, history_entry
from ..models.model_card import get_card_data
from ..data.training_table import EVAL_LABEL_COLUMN, as_dataset, split_dev
from ..utils.loading import unwrap_peft
from ..models.modeling import initialize_confidence_head
from ..settings.precision import precision_report
from .recipe import take_labels
from .trainer import confidence_metrics
from .training_args import CalibrationTrainable, ConfidenceTrainingArguments, Stage


__all__ = [
    "HEAD_TRAINING_DEFAULTS", "LabelDraw", "calibrate_head", "confidence_head_module", "fit_head", "head_confidences",
    "head_training_args", "label_budget_sweep",
]

logger = logging.getLogger(__name__)

HEAD_TRAINING_DEFAULTS: dict[str, Any] = {
    "stage": "calibration",
    "calibration_trainable": "head",
    "learning_rate": 1e-3,
    "num_train_epochs": 50,
    "early_stopping_patience": 4,
}
"""Where head-only training on cached features departs from [`ConfidenceTrainingArguments`]' defaults: a learning
rate that suits a lone linear head (1e-3 rather than 5e-5), 50 epochs whatever the data size, and early stopping
(patience 4) when a dev split is given. Every other setting is the Trainer's default."""

_ALIASES = {"batch_size": "per_device_train_batch_size", "warmup_ratio": "warmup_steps"}


def head_training_args(args: ConfidenceTrainingArguments | None = None, **overrides: Any) -> ConfidenceTrainingArguments:
    """
    The training arguments a head-only fit reads: `args` as given, or `ConfidenceTrainingArguments` built from
    [`HEAD_TRAINING_DEFAULTS`] and `overrides` (any of its fields; `batch_size` and `warmup_ratio` are accepted for
    `per_device_train_batch_size` and `warmup_steps`).
    """
    if args is not None:
        if overrides:
            raise ValueError(f"Pass the training settings in `args` or as keywords, not both (got {sorted(overrides)}).")
        if not isinstance(args, ConfidenceTrainingArguments):
            raise TypeError(f"`args` must be ConfidenceTrainingArguments, got {type(args).__name__}.")
        return args
    for alias, name in _ALIASES.items():
        if alias in overrides:
            if name in overrides:
                raise ValueError(f"Pass `{name}` or its alias `{alias}`, not both.")
            overrides[name] = overrides.pop(alias)
    return ConfidenceTrainingArguments(**{**HEAD_TRAINING_DEFAULTS, **overrides})


def confidence_head_module(model: Any) -> nn.Module:
    """The head module (`nn.Linear`, or the `nn.Sequential` of an MLP head) that a (PEFT-wrapped) confidence model's
    forward uses."""
    head = unwrap_peft(model).confidence_head
    copies = getattr(head, "modules_to_save", None)
    if copies is not None:  # PEFT's ModulesToSaveWrapper: the active adapter's trainable copy
        adapter = getattr(head, "active_adapter", None) or "default"
        head = copies[adapter if isinstance(adapter, str) else adapter[0]]
    if not isinstance(head, (nn.Linear, nn.Sequential)):
        raise TypeError(f"Expected the confidence head to be an nn.Linear or nn.Sequential, found "
                        f"{type(head).__name__}.")
    return head


def head_confidences(
    model: Any, features: Mapping[str, torch.Tensor] | torch.Tensor, questions: Sequence[str] | None = None
) -> list[float]:
    """
    What a confidence model's head says now, from cached prompt features: `sigmoid(head(features))`, without a
    backbone forward (equal to `model.confidence(questions)` when the features are the model's own `prompt_features`
    of those questions, computed in the same batches).

    Args:
        model ([`PeftModelForConfidence`]): The model whose head ([`confidence_head_module`]) scores.
        features (`dict[str, torch.Tensor]` or `torch.Tensor`): Features keyed by question text (with `questions`),
            or stacked in a tensor of shape `(n, hidden_size)` (without `questions`).
        questions (`list[str]`, *optional*): The questions to score, looked up in `features`.

    Returns:
        `list[float]`: one confidence in [0, 1] per question (per row of `features`).
    """
    head = confidence_head_module(model)
    stacked = features if questions is None else torch.stack([features[q] for q in questions])
    with torch.no_grad():
        return torch.sigmoid(head(stacked.to(next(head.parameters()))).squeeze(-1)).tolist()


def _mse(head: nn.Module, features: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return ((torch.sigmoid(head(features).squeeze(-1)) - targets) ** 2).mean()


def fit_head(
    head: nn.Module,
    features: torch.Tensor,
    targets: Sequence[float] | torch.Tensor,
    dev_features: torch.Tensor | None = None,
    dev_targets: Sequence[float] | torch.Tensor | None = None,
    args: ConfidenceTrainingArguments | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """
    Fit `head` (in place) so that `sigmoid(head(features))` approaches `targets` in mean squared error, with the
    recipe [`ConfidenceTrainer`] builds from the same arguments.

    Args:
        head (`nn.Module`): A `Linear(hidden_size, 1)` (or an MLP head); its float32 weights are updated in place.
        features (`torch.Tensor` of shape `(n, hidden_size)`): Training features.
        targets (`list[float]` or `torch.Tensor` of shape `(n,)`): Targets in [0, 1].
        dev_features, dev_targets (*optional*): A dev split, evaluated after every epoch. With `early_stopping_patience`
            training stops after that many epochs without a lower dev MSE, and the best epoch is restored.
        args ([`ConfidenceTrainingArguments`], *optional*): The settings, read as the Trainer reads them: `optim` and
            its `adam_*` (AdamW; the bias gets no weight decay), `lr_scheduler_type` with `args.get_warmup_steps`
            (`warmup_steps` below 1 is a ratio of all steps), `max_grad_norm` (0 or `None` disables),
            `per_device_train_batch_size` × `gradient_accumulation_steps` rows per step, `num_train_epochs` or
            `max_steps`, `early_stopping_patience`, `train_sampling_strategy` (`"random"`, seeded by `data_seed` or
            `seed`, or `"sequential"`). Defaults to [`head_training_args`]`(**overrides)`.
        overrides: Fields of [`ConfidenceTrainingArguments`] (`learning_rate`, `num_train_epochs`, `batch_size`, ...)
            when `args` is not given.

    Returns:
        `dict`: `epochs` (run, fractional like the Trainer's `state.epoch`), `global_steps`, `best_epoch`, `train_loss`
        (last epoch's mean) and, with a dev split, `eval_loss` (the dev MSE of the head that is left).
    """
    args = head_training_args(args, **overrides)
    _check_supported(args)
    features, targets, dev = _placed_inputs(head, features, targets, dev_features, dev_targets)
    batch_size = args.per_device_train_batch_size * args.gradient_accumulation_steps  # the exact accumulated loss
    steps_per_epoch = math.ceil(len(features) / batch_size)
    total_steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * steps_per_epoch)
    flags = [p.requires_grad for p in head.parameters()]  # a model loaded for inference has a frozen head
    head.requires_grad_(True)
    head.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad():
            epoch, step, train_loss, dev_loss, best = _optimise(head, features, targets, dev, args, batch_size,
                                                                 total_steps)
    finally:
        for parameter, flag in zip(head.parameters(), flags):
            parameter.requires_grad_(flag)
    summary = {"epochs": step / steps_per_epoch, "global_steps": step, "best_epoch": epoch, "train_loss": train_loss}
    if dev is not None and args.load_best_model_at_end and best["state"] is not None:
        head.load_state_dict(best["state"])
        summary.update(best_epoch=best["epoch"], eval_loss=best["loss"])
    elif dev is not None:
        summary["eval_loss"] = dev_loss
    return summary


def _placed_inputs(
    head: nn.Module, features: torch.Tensor, targets: Any, dev_features: Any, dev_targets: Any
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """The checked training rows and the dev split (`None` when absent or empty) on the head's device and dtype."""
    targets = torch.as_tensor(targets, dtype=torch.float32)
    if features.ndim != 2 or len(features) != len(targets) or len(targets) == 0:
        raise ValueError(f"features {tuple(features.shape)} and targets {tuple(targets.shape)} do not match.")
    if targets.min() < 0 or targets.max() > 1 or torch.isnan(targets).any():
        raise ValueError("Targets must lie in [0, 1].")
    if (dev_features is None) != (dev_targets is None):
        raise ValueError("Pass both dev_features and dev_targets, or neither.")
    weight = next(head.parameters())
    place = {"device": weight.device, "dtype": weight.dtype}  # features are computed on the CPU in float32
    dev = None
    if dev_features is not None and len(dev_features) > 0:
        dev = dev_features.to(**place), torch.as_tensor(dev_targets, dtype=torch.float32).to(**place)
    return features.to(**place), targets.to(**place), dev


def _optimise(
    head: nn.Module, features: torch.Tensor, targets: torch.Tensor, dev: tuple[torch.Tensor, torch.Tensor] | None,
    args: ConfidenceTrainingArguments, batch_size: int, total_steps: int,
) -> tuple[int, int, float, float, dict[str, Any]]:
    """The Trainer's loop on cached features: `(epochs, steps, last train loss, last dev loss, best dev epoch)`."""
    optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(args, head)
    parameters = dict(head.named_parameters())  # the Trainer's decay rule, for Linear layers: weights, not biases
    groups = [
        {"params": [p for name, p in parameters.items() if not name.endswith("bias")],
         "weight_decay": args.weight_decay},
        {"params": [p for name, p in parameters.items() if name.endswith("bias")], "weight_decay": 0.0},
    ]
    optimizer = optimizer_cls(groups, **optimizer_kwargs)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer=optimizer, num_training_steps=total_steps,
                              num_warmup_steps=args.get_warmup_steps(total_steps),
                              scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    sequential = getattr(args, "train_sampling_strategy", "random") == "sequential"
    seed = args.data_seed if args.data_seed is not None else args.seed
    generator = torch.Generator().manual_seed(seed)  # CPU generator: the row order does not depend on the device
    clip = args.max_grad_norm is not None and args.max_grad_norm > 0
    patience = args.early_stopping_patience
    best: dict[str, Any] = {"loss": math.inf, "epoch": 0, "state": None}
    epoch, step, train_loss, dev_loss = 0, 0, math.nan, math.nan
    while step < total_steps:
        epoch += 1
        order = torch.arange(len(features)) if sequential else torch.randperm(len(features), generator=generator)
        order = order.to(features.device)
        losses = []
        for start in range(0, len(order), batch_size):
            if step == total_steps:
                break
            rows = order[start : start + batch_size]
            loss = _mse(head, features[rows], targets[rows])
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(head.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            step += 1
        train_loss = sum(losses) / len(losses)
        if dev is None:
            continue
        with torch.no_grad():
            dev_loss = _mse(head, *dev).item()
        if dev_loss < best["loss"]:
            best = {"loss": dev_loss, "epoch": epoch, "state": {k: v.clone() for k, v in head.state_dict().items()}}
        elif patience is not None and epoch - best["epoch"] >= patience:  # EarlyStoppingCallback's rule
            break
    return epoch, step, train_loss, dev_loss, best


def _check_supported(args: ConfidenceTrainingArguments) -> None:
    """Refuse the settings whose Trainer behaviour a fit on cached features does not reproduce."""
    if args.lr_scheduler_type == "reduce_lr_on_plateau":
        raise ValueError("fit_head steps the scheduler every step; `reduce_lr_on_plateau` is not supported.")
    strategy = getattr(args, "train_sampling_strategy", "random")
    if strategy not in ("random", "sequential"):
        raise ValueError(f"fit_head samples rows at random or in order; `train_sampling_strategy={strategy!r}` "
                         "is not supported.")
    if args.load_best_model_at_end and args.metric_for_best_model not in (None, "loss", "eval_loss"):
        raise ValueError(f"fit_head keeps the epoch of lowest dev MSE; `metric_for_best_model="
                         f"{args.metric_for_best_model!r}` is not supported.")


def calibrate_head(
    model: Any,
    train_data: Any,
    output_dir: str | os.PathLike | None = None,
    *,
    args: ConfidenceTrainingArguments | None = None,
    label_column: str | None = None,
    question_column: str | None = None,
    dev_fraction: float = 0.1,
    seed: int | None = None,
    features: Mapping[str, torch.Tensor] | None = None,
    feature_batch_size: int = 32,
    check_features: bool = True,
    **fit_kwargs: Any,
) -> dict[str, Any]:
    """
    Calibrate only the head of a confidence model on labelled questions, from cached prompt features: what
    [`ConfidenceTrainer`] does with `stage="calibration", calibration_trainable="head"`, without a backbone forward
    per step.

    Args:
        model ([`PeftModelForConfidence`]): E.g. a stage-1 model (`AutoModelForConfidence.from_pretrained(path)`) for
            EliCal, or a fresh one for a head-only Cal-Only. Only its head changes.
        train_data: Rows (list of dicts, dict of columns or `datasets.Dataset`) with `question_column` and
            `label_column` (a target in [0, 1]); a binary `greedy_correctness` column adds AUROC / ECE / Brier /
            alignment to the dev metrics, as in the Trainer.
        output_dir (`str`, *optional*): Where to save the calibrated model; `None` only updates `model`.
        args ([`ConfidenceTrainingArguments`], *optional*): The training settings (see [`fit_head`]); they must say
            `stage="calibration"` and `calibration_trainable="head"`, except for a model without LoRA
            (`use_lora=False`), whose every stage trains the head alone: there `stage="elicitation"` (with
            `label_column="consistency"`) runs stage 1 on cached features too. Defaults to [`head_training_args`] of
            `label_column`, `question_column`, `seed` and `fit_kwargs`, which cannot be combined with `args`.
        label_column (`str`, *optional*, defaults to `"correctness"`): The target column.
        question_column (`str`, *optional*, defaults to `"question"`): The question column.
        dev_fraction (`float`, *optional*, defaults to 0.1): Share of questions held out (by question, seeded, as in
            [`~elical_hf.training.recipe.train_stage`]) for early stopping.
        seed (`int`, *optional*, defaults to 42): Seeds the dev split and the row order.
        features (`dict[str, torch.Tensor]`, *optional*): Precomputed [`prompt_features`] of this model keyed by
            question text (e.g. to share them between label budgets); missing questions are computed.
        feature_batch_size (`int`, *optional*, defaults to 32): At most this many questions per forward pass when
            computing features (see [`~ForConfidenceMixin.confidence`]).
        check_features (`bool`, *optional*, defaults to `True`): Recompute one cached question's features to check
            that `features` are this model's ([`check_cached_features`]; shapes are checked either way).
            [`label_budget_sweep`] checks on its first draw only: every draw has the same model and features.
        fit_kwargs: Fields of [`ConfidenceTrainingArguments`] (`num_train_epochs`, `learning_rate`, `batch_size` (the
            training batch), `max_grad_norm`, ...).

    Returns:
        `dict`: the training summary of [`fit_head`]. The model's `training_history` gets the entry the Trainer
        would record (plus `"method": "cached-features"`), with the dev metrics named as the card reads them.
    """
    named = {"label_column": label_column, "question_column": question_column, "seed": seed}
    args = head_training_args(args, **{k: v for k, v in named.items() if v is not None}, **fit_kwargs)
    uses_lora = getattr(getattr(unwrap_peft(model), "confidence_config", None), "use_lora", True)
    if uses_lora and (args.stage != Stage.CALIBRATION or args.calibration_trainable != CalibrationTrainable.HEAD):
        raise ValueError("calibrate_head trains the head alone: `args` must have stage='calibration' and "
                         f"calibration_trainable='head', got {args.stage.value!r} and {args.calibration_trainable.value!r}"
                         " (a model without LoRA, `use_lora=False`, may also run stage 1, elicitation, here).")
    label_column, question_column = args.label_column, args.question_column
    dataset = as_dataset(train_data, "calibration")
    for column in (question_column, label_column):
        if column not in dataset.column_names:
            raise ValueError(f"Calibration data needs a {column!r} column; found {dataset.column_names}.")
    train, dev = split_dev(dataset, dev_fraction, args.seed, "calibration")
    cache = dict(features or {})
    questions = list(train[question_column]) + (list(dev[question_column]) if dev is not None else [])
    check_cached_features(model, cache, questions, recompute=check_features)
    missing = list(dict.fromkeys(q for q in questions if q not in cache))
    if missing:
        cache.update(zip(missing, model.prompt_features(missing, batch_size=feature_batch_size)))

    def stack(rows: Any) -> torch.Tensor:
        return torch.stack([cache[q] for q in rows[question_column]])

    head = confidence_head_module(model)
    inner = unwrap_peft(model)
    precision = precision_report(inner.get_input_embeddings().weight.dtype, next(head.parameters()).device)
    entry = {**history_entry(args, len(train), precision, uses_lora=uses_lora, questions=train[question_column]),
             "method": "cached-features"}
    dev_features = stack(dev) if dev is not None else None
    summary = fit_head(head, stack(train), train[label_column], dev_features,
                       dev[label_column] if dev is not None else None, args=args)
    dev_metrics = _dev_metrics(model, dev_features, dev, label_column, summary) if dev is not None else {}
    complete_history_entry(entry, args, epochs=summary["epochs"], global_steps=summary["global_steps"],
                           dev_metrics=dev_metrics)
    inner.confidence_config.training_history.append(entry)
    get_card_data(model).dev_metrics = dev_metrics
    if output_dir is not None:
        model.save_pretrained(os.fspath(output_dir))
    logger.info("Head calibrated on %d labels: %s", len(train), summary)
    return summary


FEATURE_MISMATCH = 0.05
"""Relative difference (`‖cached − recomputed‖ / ‖recomputed‖`) above which cached features are taken to come from
another model: bfloat16 and batching noise stay near 1e-2, the neighbouring layer's state differs by ~0.3."""


def check_cached_features(model: Any, cache: Mapping[str, torch.Tensor], questions: list[str],
                          recompute: bool = True) -> None:
    """Refuse cached features that this model did not compute: a wrong shape, or (with `recompute`, checked on one
    question recomputed alone) the state of another layer, adapter or model. Features are keyed by question text only,
    so a cache made before a `feature_layer` change or by a stage-1 model would otherwise train the head on the wrong
    inputs."""
    used = [q for q in dict.fromkeys(questions) if q in cache]
    if not used:
        return
    width = next(m for m in confidence_head_module(model).modules() if isinstance(m, nn.Linear)).in_features
    for question in used:
        value = cache[question]
        if not isinstance(value, torch.Tensor) or value.shape != (width,):
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"features[{question!r}] has shape {shape}; this model's head reads vectors of {width} "
                             "(pass the model's own `prompt_features`, keyed by question).")
    if not recompute:
        return
    probe = used[0]
    fresh = model.prompt_features([probe], batch_size=1)[0].float()
    gap = ((cache[probe].float().cpu() - fresh.cpu()).norm() / fresh.norm().clamp_min(1e-12)).item()
    if gap > FEATURE_MISMATCH:
        layer = getattr(getattr(unwrap_peft(model), "confidence_config", None), "feature_layer", None)
        raise ValueError(f"The cached features are not this model's: for {probe!r} they differ by {gap:.0%} from what "
                         f"it computes now (feature_layer={layer}). Recompute them with this model's `prompt_features` "
                         "(a cache from another layer, adapter or model cannot be reused).")


def _dev_metrics(
    model: Any, dev_features: torch.Tensor, dev: Any, label_column: str, summary: dict[str, Any]
) -> dict[str, float]:
    """The Trainer's dev metrics of the final head (`loss`, and with `greedy_correctness` labels the quality
    metrics)."""
    metrics = {"loss": float(summary["eval_loss"])}
    if EVAL_LABEL_COLUMN in dev.column_names:
        confidences = np.asarray(head_confidences(model, dev_features), dtype=np.float32)
        correct = np.array([np.nan if v is None else v for v in dev[EVAL_LABEL_COLUMN]], dtype=np.float64)
        labels = np.asarray(dev[label_column], dtype=np.float64)
        metrics.update(confidence_metrics(EvalPrediction(predictions=confidences, label_ids=(labels, correct))))
    return metrics


@dataclass
class LabelDraw:
    """One run of [`label_budget_sweep`]: the labels drawn, what the calibrated head says about the scored questions
    (`confidences`) and [`calibrate_head`]'s training summary."""

    num_labels: int
    seed: int
    labels: Any
    confidences: list[float]
    summary: dict[str, Any]


def label_budget_sweep(
    model: Any,
    pool: Any,
    draws: Iterable[tuple[int, int]],
    features: Mapping[str, torch.Tensor],
    scored: Sequence[str] | torch.Tensor,
    *,
    draw_labels: Callable[[Any, int, int], Any] | None = None,
    start_head: Mapping[str, torch.Tensor] | None = None,
    fresh_head: str | None = None,
    **calibrate_kwargs: Any,
) -> Iterator[LabelDraw]:
    """
    Calibrate a model's head on one label draw after another, each from the same start, and score it: how EliCal
    (a stage-1 head) and Cal-Only (a fresh head) compare over label budgets and draws, head-only on cached features.

    For each `(num_labels, seed)` of `draws`: draw `num_labels` labelled rows of `pool` with `seed`, set the head to
    `start_head` and its `training_history` back to what it was when the sweep started (with `fresh_head`, draw a new
    head instead, from `torch.manual_seed(seed)`), calibrate it on those rows ([`calibrate_head`] with `seed`,
    `features` and `calibrate_kwargs`) and score `scored` ([`head_confidences`]). Runs are made as the iterator is
    consumed; the model keeps a run's calibrated head until the next run starts, and the last run's after the sweep
    (save it with `model.save_pretrained`, or read it with [`confidence_head_module`], before asking for the next).

    Args:
        model ([`PeftModelForConfidence`]): The model whose head is calibrated (its backbone and LoRA never change).
        pool: The labelled rows the labels are drawn from (what `draw_labels` takes).
        draws (iterable of `(int, int)`): `(num_labels, seed)` of each run, in order.
        features (`dict[str, torch.Tensor]`): The model's [`prompt_features`] keyed by question, for every question
            of `pool` (and of `scored`, when it names questions).
        scored (`list[str]` or `torch.Tensor`): The questions each calibrated head scores (looked up in `features`),
            or their features stacked.
        draw_labels (`Callable`, *optional*): `draw_labels(pool, num_labels, seed)` -> the rows to calibrate on;
            defaults to a seeded random subset ([`~elical_hf.training.recipe.take_labels`]).
        start_head (`dict[str, torch.Tensor]`, *optional*): The head's `state_dict` every run starts from; defaults to
            the head as it is when the sweep starts.
        fresh_head (`str`, *optional*): Give every run a new head drawn with this `head_init` (`"normal"` or
            `"torch_default"`, [`~elical_hf.models.modeling.initialize_confidence_head`]) instead of the starting one: a
            Cal-Only whose head seed varies with the labels.
        calibrate_kwargs: More arguments of [`calibrate_head`] (`dev_fraction`, `num_train_epochs`,
            `learning_rate`, `batch_size`, `stage`, ...).

    Yields:
        [`LabelDraw`]: one per `(num_labels, seed)`.
    """
    draw_labels = draw_labels or take_labels
    head, config = confidence_head_module(model), unwrap_peft(model).confidence_config
    start = {key: value.clone() for key, value in (start_head or head.state_dict()).items()}
    history, first = list(config.training_history), True
    for num_labels, seed in draws:
        labels = draw_labels(pool, num_labels, seed)
        head.load_state_dict(start)
        config.training_history = list(history)
        if fresh_head is not None:
            torch.manual_seed(seed)
            initialize_confidence_head(head, fresh_head)
        summary = calibrate_head(model, labels, None, seed=seed, features=features, check_features=first,
                                 **calibrate_kwargs)
        first = False
        if isinstance(scored, torch.Tensor):
            confidences = head_confidences(model, scored)
        else:
            confidences = head_confidences(model, features, scored)
        yield LabelDraw(num_labels, seed, labels, confidences, summary)
