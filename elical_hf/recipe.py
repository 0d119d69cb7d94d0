"""The whole EliCal recipe: stage 1 on consistency targets, stage 2 on a small label budget, and Cal-Only."""

from __future__ import annotations

import logging
import os
import random
import shutil
from typing import Any

from datasets import Dataset
from transformers import set_seed

from .auto import AutoModelForConfidence
from .bundled import question_parts
from .data import as_dataset
from .trainer import ConfidenceTrainer
from .training_args import ConfidenceTrainingArguments


logger = logging.getLogger(__name__)

STAGE_DIRS = {"elicitation": "elicitation", "elical": "elical", "cal_only": "cal-only"}


def paper_epochs(num_examples: int) -> int:
    """The reference code's epochs: 10 for the full 560k set, 50 for <= 10k examples, 15 otherwise."""
    if num_examples >= 500_000:
        return 10
    return 50 if num_examples <= 10_000 else 15


def split_dev(data: Any, dev_fraction: float, seed: int, name: str) -> tuple[Dataset, Dataset | None]:
    """Split rows into train and dev, disjoint by question text (seeded)."""
    dataset = as_dataset(data, name)
    if not 0.0 <= dev_fraction < 1.0:
        raise ValueError(f"`dev_fraction` must lie in [0, 1), got {dev_fraction}.")
    if dev_fraction == 0.0 or len(dataset) < 10:
        return dataset, None
    parts = question_parts(dataset["question"], {"train": 1.0 - dev_fraction, "dev": dev_fraction}, seed=seed)
    train, dev = ([i for i, part in enumerate(parts) if part == name] for name in ("train", "dev"))
    return dataset.select(train), dataset.select(dev) if dev else None  # Arrow rows stay on disk


def take_labels(data: Any, num_labels: int | None, seed: int) -> Dataset:
    """A seeded random subset of `num_labels` labelled rows (all rows when `None`)."""
    dataset = as_dataset(data, "calibration")
    if num_labels is None or num_labels >= len(dataset):
        return dataset
    if num_labels < 2:
        raise ValueError(f"`num_labels` must be at least 2, got {num_labels}.")
    indices = sorted(random.Random(seed).sample(range(len(dataset)), num_labels))
    return dataset.select(indices)


def train_stage(
    model: Any,
    train_data: Any,
    output_dir: str,
    stage: str,
    *,
    dev_fraction: float = 0.1,
    dev_data: Any | None = None,
    seed: int = 42,
    training_args: dict[str, Any] | None = None,
    calibration_trainable: str = "all",
    keep_checkpoints: bool = False,
) -> ConfidenceTrainer:
    """Train one stage with a dev set for early stopping, and save the final model to `output_dir`.

    The dev set is `dev_data` when given, else a seeded `dev_fraction` of `train_data` (by question). Checkpoints go
    to `output_dir/checkpoints` while training (for `resume_from_checkpoint`) and are removed once the final model is
    saved, unless `keep_checkpoints`.
    """
    if dev_data is not None:
        train, dev = as_dataset(train_data, stage), as_dataset(dev_data, f"{stage} dev")
    else:
        train, dev = split_dev(train_data, dev_fraction, seed, stage)
    settings: dict[str, Any] = {
        "num_train_epochs": paper_epochs(len(train)),
        "early_stopping_patience": 4 if dev is not None else None,
        "eval_strategy": "epoch" if dev is not None else "no",
        "save_total_limit": 1,
        "seed": seed,
    }
    settings.update(training_args or {})
    if dev is None and settings.get("early_stopping_patience") is not None:
        logger.warning("%s: too few rows (%d) for a dev split; training without early stopping.", stage, len(train))
        settings.update(early_stopping_patience=None, eval_strategy="no")
    checkpoints = os.path.join(output_dir, "checkpoints")
    args = ConfidenceTrainingArguments(
        output_dir=checkpoints, stage=stage, calibration_trainable=calibration_trainable, **settings
    )
    trainer = ConfidenceTrainer(model, args=args, train_dataset=train, eval_dataset=dev)
    trainer.train()
    trainer.save_model(output_dir)  # written by the main process only
    trainer.accelerator.wait_for_everyone()  # every process loads this folder next; no one still reads a checkpoint
    if not keep_checkpoints and trainer.is_world_process_zero():
        shutil.rmtree(checkpoints, ignore_errors=True)
    return trainer


def train_elical(
    model_name_or_path: str,
    elicitation_data: Any,
    calibration_data: Any,
    output_dir: str,
    *,
    num_labels: int | None = None,
    calibration_trainable: str = "all",
    cal_only: bool = True,
    dev_fraction: float = 0.1,
    seed: int = 42,
    training_args: dict[str, Any] | None = None,
    calibration_training_args: dict[str, Any] | None = None,
    model_init_kwargs: dict[str, Any] | None = None,
) -> dict[str, str]:
    """
    Run EliCal end to end and save each model.

    Args:
        model_name_or_path (`str`):
            Base causal LM (Hub id or folder).
        elicitation_data:
            Rows with `question` and `consistency` (no correctness labels needed).
        calibration_data:
            Rows with `question` and `correctness`; `num_labels` of them are used.
        output_dir (`str`):
            Gets `elicitation/`, `elical/` and (with `cal_only`) `cal-only/`, each a loadable confidence model.
        num_labels (`int`, *optional*):
            Label budget for stage 2 (dev rows for early stopping are taken out of it). `None`: all rows.
        calibration_trainable (`str`, *optional*, defaults to `"all"`):
            What stage 2 trains on top of stage 1: `"all"` (LoRA + head, as the paper's reference code) or `"head"`.
        cal_only (`bool`, *optional*, defaults to `True`):
            Also train Cal-Only (LoRA + head from scratch on the same labels) for comparison.
        dev_fraction (`float`, *optional*, defaults to 0.1):
            Share of each stage's rows held out (by question) for early stopping.
        seed (`int`, *optional*, defaults to 42):
            Seeds the label subset, the dev splits and training.
        training_args (`dict`, *optional*):
            [`ConfidenceTrainingArguments`] fields for both stages (e.g. `num_train_epochs`, `learning_rate`).
        calibration_training_args (`dict`, *optional*):
            Overrides for stage 2 and Cal-Only.
        model_init_kwargs (`dict`, *optional*):
            Passed to [`AutoModelForConfidence.from_pretrained`] (e.g. `dtype`).

    Returns:
        `dict[str, str]`: the folder of each trained model, keyed `"elicitation"`, `"elical"`, `"cal_only"`.
    """
    labelled = take_labels(calibration_data, num_labels, seed)
    stage2_args = {**(training_args or {}), **(calibration_training_args or {})}
    paths = {key: os.path.join(output_dir, folder) for key, folder in STAGE_DIRS.items()}
    init = model_init_kwargs or {}

    logger.info("Stage 1 (elicitation) on %d questions", len(as_dataset(elicitation_data, "elicitation")))
    set_seed(seed)  # the fresh LoRA and head are drawn from the global RNG
    model = AutoModelForConfidence.from_pretrained(model_name_or_path, **init)
    train_stage(model, elicitation_data, paths["elicitation"], "elicitation", dev_fraction=dev_fraction, seed=seed,
                training_args=training_args)

    logger.info("Stage 2 (calibration, %s) on %d labels", calibration_trainable, len(labelled))
    model = AutoModelForConfidence.from_pretrained(paths["elicitation"], is_trainable=True, **init)
    train_stage(model, labelled, paths["elical"], "calibration", dev_fraction=dev_fraction, seed=seed,
                training_args=stage2_args, calibration_trainable=calibration_trainable)

    if not cal_only:
        paths.pop("cal_only")
        return paths
    logger.info("Cal-Only on the same %d labels", len(labelled))
    set_seed(seed)
    model = AutoModelForConfidence.from_pretrained(model_name_or_path, **init)
    train_stage(model, labelled, paths["cal_only"], "calibration", dev_fraction=dev_fraction, seed=seed,
                training_args=stage2_args, calibration_trainable="all")
    return paths
