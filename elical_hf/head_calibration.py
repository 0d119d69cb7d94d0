"""Head-only calibration on cached prompt features: stage 2 of the reference code, in seconds instead of hours.

When only the confidence head trains (the reference code's stage 2, `calibration_trainable="head"`), the backbone and
its LoRA weights are frozen, so the head always reads the same feature for a question: the final hidden state of the
last prompt token. [`calibrate_head`] computes those features once and fits the `Linear` head on them with the same
objective and optimizer recipe as [`ConfidenceTrainer`] (sigmoid + MSE, AdamW with weight decay on the weight only,
linear schedule with warm-up, early stopping on a dev split with the best epoch restored). The result is an ordinary
saved confidence model. Training through the Trainer instead runs the whole backbone forward at every step of every
epoch; both optimise the same function, though mini-batch order and floating-point details differ.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .data import as_dataset


__all__ = ["calibrate_head", "confidence_head_module", "fit_head"]

logger = logging.getLogger(__name__)


def _inner(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def confidence_head_module(model: Any) -> nn.Linear:
    """The `nn.Linear` that a (PEFT-wrapped) confidence model's forward uses as its head."""
    head = _inner(model).confidence_head
    copies = getattr(head, "modules_to_save", None)
    if copies is not None:  # PEFT's ModulesToSaveWrapper: the active adapter's trainable copy
        adapter = getattr(head, "active_adapter", None) or "default"
        head = copies[adapter if isinstance(adapter, str) else adapter[0]]
    if not isinstance(head, nn.Linear):
        raise TypeError(f"Expected the confidence head to be an nn.Linear, found {type(head).__name__}.")
    return head


def _mse(head: nn.Linear, features: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return ((torch.sigmoid(head(features).squeeze(-1)) - targets) ** 2).mean()


def fit_head(
    head: nn.Linear,
    features: torch.Tensor,
    targets: Sequence[float] | torch.Tensor,
    dev_features: torch.Tensor | None = None,
    dev_targets: Sequence[float] | torch.Tensor | None = None,
    *,
    num_train_epochs: int = 50,
    learning_rate: float = 1e-3,
    weight_decay: float = 0.1,
    warmup_ratio: float = 0.1,
    batch_size: int = 8,
    early_stopping_patience: int | None = 4,
    max_grad_norm: float | None = 1.0,
    seed: int = 42,
) -> dict[str, Any]:
    """
    Fit `head` (in place) so that `sigmoid(head(features))` approaches `targets` in mean squared error.

    Args:
        head (`nn.Linear`): A `Linear(hidden_size, 1)`; its float32 weights are updated in place.
        features (`torch.Tensor` of shape `(n, hidden_size)`): Training features.
        targets (`list[float]` or `torch.Tensor` of shape `(n,)`): Targets in [0, 1].
        dev_features, dev_targets (*optional*): A dev split; with it the head is evaluated after every epoch, training
            stops after `early_stopping_patience` epochs without a lower dev MSE, and the best epoch is restored.
        num_train_epochs, learning_rate, weight_decay, warmup_ratio, batch_size, max_grad_norm, seed:
            As in [`ConfidenceTrainingArguments`] (the warm-up is a ratio of all steps; decay excludes the bias;
            gradients are clipped to `max_grad_norm` like the Trainer does, `None` disables). Defaults differ from the
            Trainer's in two places: `learning_rate` (1e-3 rather than 5e-5, a fitting value for a lone linear head)
            and `num_train_epochs` (50 whatever the data size, with early stopping when a dev split is given).

    Returns:
        `dict`: `epochs` (run), `global_steps`, `best_epoch`, `train_loss` (last epoch's mean) and `eval_loss` (best
        dev MSE, when a dev split is given).
    """
    targets = torch.as_tensor(targets, dtype=torch.float32)
    if features.ndim != 2 or len(features) != len(targets) or len(targets) == 0:
        raise ValueError(f"features {tuple(features.shape)} and targets {tuple(targets.shape)} do not match.")
    if targets.min() < 0 or targets.max() > 1 or torch.isnan(targets).any():
        raise ValueError("Targets must lie in [0, 1].")
    if (dev_features is None) != (dev_targets is None):
        raise ValueError("Pass both dev_features and dev_targets, or neither.")
    place = {"device": head.weight.device, "dtype": head.weight.dtype}  # features are computed on the CPU in float32
    features, targets = features.to(**place), targets.to(**place)
    has_dev = dev_features is not None and len(dev_features) > 0
    if has_dev:
        dev_features = dev_features.to(**place)
        dev_y = torch.as_tensor(dev_targets, dtype=torch.float32).to(**place)
    generator = torch.Generator().manual_seed(seed)  # CPU generator: the row order does not depend on the device
    steps_per_epoch = math.ceil(len(features) / batch_size)
    total_steps = steps_per_epoch * num_train_epochs
    warmup = int(math.ceil(warmup_ratio * total_steps)) if warmup_ratio < 1 else int(warmup_ratio)
    optimizer = torch.optim.AdamW(
        [{"params": [head.weight], "weight_decay": weight_decay}, {"params": [head.bias], "weight_decay": 0.0}],
        lr=learning_rate,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: step / max(1, warmup) if step < warmup else max(0.0, (total_steps - step) / max(1, total_steps - warmup)),
    )
    best: dict[str, Any] = {"loss": math.inf, "epoch": 0, "state": None}
    history = {"epochs": 0, "global_steps": 0, "train_loss": math.nan}
    flags = [p.requires_grad for p in head.parameters()]  # a model loaded for inference has a frozen head
    head.requires_grad_(True)
    try:
        with torch.enable_grad():
            for epoch in range(1, num_train_epochs + 1):
                order = torch.randperm(len(features), generator=generator).to(features.device)
                losses = []
                for start in range(0, len(order), batch_size):
                    rows = order[start : start + batch_size]
                    loss = _mse(head, features[rows], targets[rows])
                    optimizer.zero_grad()
                    loss.backward()
                    if max_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(head.parameters(), max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    losses.append(loss.item())
                history.update(epochs=epoch, global_steps=history["global_steps"] + len(losses))
                history["train_loss"] = sum(losses) / len(losses)
                if not has_dev:
                    continue
                with torch.no_grad():
                    dev_loss = _mse(head, dev_features, dev_y).item()
                if dev_loss < best["loss"]:
                    best = {"loss": dev_loss, "epoch": epoch, "state": {k: v.clone() for k, v in head.state_dict().items()}}
                elif early_stopping_patience is not None and epoch - best["epoch"] >= early_stopping_patience:
                    break
    finally:
        for parameter, flag in zip(head.parameters(), flags):
            parameter.requires_grad_(flag)
    if has_dev and best["state"] is not None:
        head.load_state_dict(best["state"])
        history.update(best_epoch=best["epoch"], eval_loss=best["loss"])
    else:
        history["best_epoch"] = history["epochs"]
    return history


def calibrate_head(
    model: Any,
    train_data: Any,
    output_dir: str | os.PathLike | None = None,
    *,
    label_column: str = "correctness",
    question_column: str = "question",
    dev_fraction: float = 0.1,
    seed: int = 42,
    features: Mapping[str, torch.Tensor] | None = None,
    feature_batch_size: int = 32,
    **fit_kwargs: Any,
) -> dict[str, Any]:
    """
    Calibrate only the head of a confidence model on labelled questions, from cached prompt features.

    Args:
        model ([`PeftModelForConfidence`]): E.g. a stage-1 model (`AutoModelForConfidence.from_pretrained(path)`) for
            EliCal, or a fresh one for a head-only Cal-Only. Only its head changes.
        train_data: Rows (list of dicts, dict of columns or `datasets.Dataset`) with `question_column` and
            `label_column` (a target in [0, 1]).
        output_dir (`str`, *optional*): Where to save the calibrated model; `None` only updates `model`.
        label_column (`str`, *optional*, defaults to `"correctness"`): The target column.
        dev_fraction (`float`, *optional*, defaults to 0.1): Share of questions held out (by question, seeded, as in
            [`~elical_hf.recipe.train_stage`]) for early stopping.
        features (`dict[str, torch.Tensor]`, *optional*): Precomputed [`prompt_features`] of this model keyed by
            question text (e.g. to share them between label budgets); missing questions are computed.
        feature_batch_size (`int`, *optional*, defaults to 32): Questions per forward pass when computing features.
        fit_kwargs: Passed to [`fit_head`] (`num_train_epochs`, `learning_rate`, `batch_size` (the training batch),
            `max_grad_norm`, ...).

    Returns:
        `dict`: the training summary of [`fit_head`], also appended to the model's `training_history`.
    """
    from .recipe import split_dev

    dataset = as_dataset(train_data, "calibration")
    for column in (question_column, label_column):
        if column not in dataset.column_names:
            raise ValueError(f"Calibration data needs a {column!r} column; found {dataset.column_names}.")
    train, dev = split_dev(dataset, dev_fraction, seed, "calibration")
    cache = dict(features or {})
    questions = list(train[question_column]) + (list(dev[question_column]) if dev is not None else [])
    missing = list(dict.fromkeys(q for q in questions if q not in cache))
    if missing:
        cache.update(zip(missing, model.prompt_features(missing, batch_size=feature_batch_size)))

    def stack(rows: Any) -> torch.Tensor:
        return torch.stack([cache[q] for q in rows[question_column]])

    head = confidence_head_module(model)
    summary = fit_head(
        head,
        stack(train),
        train[label_column],
        stack(dev) if dev is not None else None,
        dev[label_column] if dev is not None else None,
        seed=seed,
        **fit_kwargs,
    )
    entry = {
        "stage": "calibration",
        "label_column": label_column,
        "num_examples": len(train),
        "lora_trainable": False,
        "calibration_trainable": "head",
        "method": "cached-features",
        "epochs": summary["epochs"],
        "global_steps": summary["global_steps"],
        "learning_rate": fit_kwargs.get("learning_rate", 1e-3),
        "effective_batch_size": fit_kwargs.get("batch_size", 8),
    }
    if "eval_loss" in summary:
        entry["dev_metrics"] = {"eval_loss": summary["eval_loss"]}
    _inner(model).confidence_config.training_history.append(entry)
    if output_dir is not None:
        model.save_pretrained(os.fspath(output_dir))
    logger.info("Head calibrated on %d labels: %s", len(train), summary)
    return summary
