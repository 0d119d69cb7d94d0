"""The whole EliCal recipe: stage 1 on consistency targets, stage 2 on a small label budget, and Cal-Only."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import re
import shutil
from typing import Any

from accelerate import PartialState
from datasets import Dataset
from transformers import set_seed
from transformers.trainer import TRAINER_STATE_NAME

from ..utils.atomic import atomic_write_json, json_text
from ..models.auto import AutoModelForConfidence, check_feature_layer, check_four_bit_support
from ..models.saved_model import find_saved_model
from ..settings.columns import EVAL_LABEL_COLUMN
from ..data.training_table import as_dataset, split_dev
from .trainer import ConfidenceTrainer
from .training_args import ConfidenceTrainingArguments
from ..settings.training_options import DEFAULT_LABEL_COLUMNS, Stage


logger = logging.getLogger(__name__)

STAGE_DIRS = {"elicitation": "elicitation", "elical": "elical", "cal_only": "cal-only"}
RUN_MANIFEST_NAME = "elical_run.json"
RUN_MANIFEST_FORMAT = "elical-hf/train-run"
FREE_TRAINING_ARGS = (
    "logging_steps", "logging_dir", "disable_tqdm", "report_to", "dataloader_num_workers", "per_device_eval_batch_size",
)
"""Training arguments a resumed run may change (they do not change the trained weights)."""
SETUP_TRAINING_ARGS = ("use_cpu", "ddp_backend", "ddp_timeout", "accelerator_config", "deepspeed")
"""Training arguments `TrainingArguments` sets the processes up from: every instance re-initialises accelerate's
state with them, so an instance built to compare with keeps the run's own (and the run manifest leaves them out)."""

_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


def paper_epochs(num_examples: int) -> int:
    """The reference code's epochs: 10 for the full 560k set, 50 for <= 10k examples, 15 otherwise."""
    if num_examples >= 500_000:
        return 10
    return 50 if num_examples <= 10_000 else 15


def take_labels(data: Any, num_labels: int | None, seed: int) -> Dataset:
    """A seeded random subset of `num_labels` labelled rows (all rows when `None`)."""
    dataset = as_dataset(data, "calibration")
    if num_labels is not None and num_labels > len(dataset):
        logger.warning("num_labels=%d asked for, but the calibration data has %d rows: stage 2 and Cal-Only use all "
                       "%d (recorded as num_labels_used in the run manifest).", num_labels, len(dataset), len(dataset))
    if num_labels is None or num_labels >= len(dataset):
        _warn_single_class(dataset)
        return dataset
    if num_labels < 2:
        raise ValueError(f"`num_labels` must be at least 2, got {num_labels}.")
    indices = sorted(random.Random(seed).sample(range(len(dataset)), num_labels))
    chosen = dataset.select(indices)
    _warn_single_class(chosen)
    return chosen


def take_elicitation(data: Any, num_elicitation: int | None, seed: int) -> Any:
    """A seeded random subset of `num_elicitation` stage-1 rows (`data` itself when `None`): the stage-1 budget of the
    paper's elicitation-data-size ablation. Drawn independently of the label subset ([`take_labels`]) even when both
    come from one table."""
    if num_elicitation is None:
        return data
    dataset = as_dataset(data, "elicitation")
    if isinstance(num_elicitation, bool) or not isinstance(num_elicitation, int) or num_elicitation < 2:
        raise ValueError(f"`num_elicitation` must be an integer >= 2, got {num_elicitation!r}.")
    if num_elicitation >= len(dataset):
        if num_elicitation > len(dataset):
            logger.warning("num_elicitation=%d asked for, but the elicitation data has %d rows: stage 1 uses all %d "
                           "(recorded as num_elicitation_used in the run manifest).", num_elicitation, len(dataset),
                           len(dataset))
        return dataset
    indices = sorted(random.Random(f"{seed}:elicitation").sample(range(len(dataset)), num_elicitation))
    return dataset.select(indices)


def _warn_single_class(labels: Dataset) -> None:
    """Stage 2 on labels of one class learns a constant: say so (training goes on; the user may mean it)."""
    for column in (EVAL_LABEL_COLUMN, "correctness"):
        if column in labels.column_names:
            values = {value for value in labels[column] if value is not None}
            if len(values) == 1:
                logger.warning("Every calibration label has %s = %s: stage 2 can only learn a constant confidence "
                               "from one class; label some %s answers too.", column, next(iter(values)),
                               "wrong" if next(iter(values)) else "correct")
            return


def run_arguments(
    training_args: ConfidenceTrainingArguments | None,
    output_dir: str,
    stage: str,
    calibration_trainable: str = "all",
    *,
    num_rows: int,
    has_dev: bool,
    seed: int = 42,
) -> ConfidenceTrainingArguments:
    """
    The training arguments of one run: `training_args` with the run's `output_dir`, `stage` (and so its label column)
    and `calibration_trainable`, and the recipe's rules where it leaves a field `None`: `num_train_epochs` the paper's
    for `num_rows` ([`paper_epochs`]), `early_stopping_patience` 4 with a dev split (which turns on an evaluation per
    epoch), `save_total_limit` 1. Without a dev split (`has_dev=False`) a run neither evaluates nor stops early.

    Args:
        training_args ([`ConfidenceTrainingArguments`], *optional*): The settings of every run (a `dataclasses.replace`
            of one sets a run's own). `None`: the defaults, with `seed` and the rule's epochs.
    """
    if training_args is None:
        training_args = ConfidenceTrainingArguments(output_dir=output_dir, seed=seed, num_train_epochs=None)
    _require_training_args(training_args, "training_args")
    base = dataclasses.replace(training_args, output_dir=output_dir, stage=stage, label_column=None,
                               calibration_trainable=calibration_trainable)
    rules = {"num_train_epochs": paper_epochs(num_rows), "early_stopping_patience": 4 if has_dev else None,
             "save_total_limit": 1}
    run = {name: value for name, value in rules.items() if getattr(base, name) is None}
    if not has_dev and base.early_stopping_patience is not None:
        logger.warning("%s: too few rows (%d) for a dev split; training without early stopping.", stage, num_rows)
        run.update(early_stopping_patience=None, eval_strategy="no", load_best_model_at_end=False)
    return dataclasses.replace(base, **run) if run else base


def train_stage(
    model: Any,
    train_data: Any,
    output_dir: str,
    stage: str,
    *,
    dev_fraction: float = 0.1,
    dev_data: Any | None = None,
    seed: int = 42,
    training_args: ConfidenceTrainingArguments | None = None,
    calibration_trainable: str = "all",
    keep_checkpoints: bool = False,
    resume: bool = False,
) -> ConfidenceTrainer:
    """Train one stage with a dev set for early stopping, and save the final model to `output_dir`.

    The dev set is `dev_data` when given, else a `dev_fraction` of `train_data` (by question) seeded by `seed`, which
    also seeds training when `training_args` (the settings, [`run_arguments`]) are `None`. Checkpoints go
    to `output_dir/checkpoints` while training and are removed once the final model is saved, unless
    `keep_checkpoints` (only the `checkpoint-<step>` folders the Trainer wrote are removed, nothing else there).
    With `resume`, training continues from the last complete checkpoint there ([`last_complete_checkpoint`]), if any:
    the caller must make sure it was written by the same settings and data ([`train_elical`] does).
    """
    if dev_data is not None:
        train, dev = as_dataset(train_data, stage), as_dataset(dev_data, f"{stage} dev")
    else:
        train, dev = split_dev(train_data, dev_fraction, seed, stage)
    checkpoints = os.path.join(output_dir, "checkpoints")
    args = run_arguments(training_args, checkpoints, stage, calibration_trainable, num_rows=len(train),
                         has_dev=dev is not None, seed=seed)
    trainer = ConfidenceTrainer(model, args=args, train_dataset=train, eval_dataset=dev)
    checkpoint = last_complete_checkpoint(checkpoints) if resume else None
    if checkpoint is not None:
        logger.warning("%s: resuming from %s (step %d), not from scratch.", stage, checkpoint, checkpoint_step(checkpoint))
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(output_dir)  # written by the main process only
    trainer.accelerator.wait_for_everyone()  # every process loads this folder next; no one still reads a checkpoint
    if not keep_checkpoints and trainer.is_world_process_zero():
        remove_checkpoints(checkpoints)
    return trainer


def checkpoint_step(path: str) -> int:
    """The global step of a Trainer checkpoint folder `.../checkpoint-<step>`."""
    return int(_CHECKPOINT.fullmatch(os.path.basename(os.path.normpath(path))).group(1))


def _checkpoint_folders(folder: str) -> list[str]:
    """The Trainer's `checkpoint-<step>` folders in `folder`, by step."""
    if not os.path.isdir(folder):
        return []
    names = [n for n in os.listdir(folder) if _CHECKPOINT.fullmatch(n) and os.path.isdir(os.path.join(folder, n))]
    return sorted((os.path.join(folder, n) for n in names), key=checkpoint_step)


def last_complete_checkpoint(folder: str) -> str | None:
    """The highest-step `checkpoint-<step>` folder in `folder` that holds `trainer_state.json` (the Trainer writes it
    last, so its absence marks a checkpoint cut off mid-save, which is skipped with a warning); `None` if there is none.
    """
    for path in reversed(_checkpoint_folders(folder)):
        if os.path.isfile(os.path.join(path, TRAINER_STATE_NAME)):
            return path
        logger.warning("Skipping %s: no %s (cut off mid-save).", path, TRAINER_STATE_NAME)
    return None


def remove_checkpoints(folder: str) -> None:
    """Delete the Trainer's `checkpoint-<step>` folders in `folder`, then `folder` itself if nothing else is left in it
    (files a user put there stay)."""
    for path in _checkpoint_folders(folder):
        shutil.rmtree(path)
    if os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)


def data_fingerprint(data: Any, name: str) -> str:
    """SHA-256 of a table's rows (every column, in order): what a resumed run must match."""
    digest = hashlib.sha256()
    for batch in as_dataset(data, name).iter(batch_size=10_000):
        digest.update(json.dumps(batch, sort_keys=True, default=str, ensure_ascii=False).encode())
    return digest.hexdigest()


def _jsonable(value: Any) -> Any:
    """`value` as its run manifest reads it back ([`~elical_hf.utils.atomic.json_text`]: NaN as `None`, objects as
    text)."""
    return json.loads(json_text(value, sort_keys=True, default=str))


def _claim_output_dir(output_dir: str, run: dict[str, Any], overwrite: bool, main: bool = True) -> list[str]:
    """Check that `output_dir` is new, empty, or holds this same run (then return the stages it finished), and write
    the run manifest. Anything else is refused unless `overwrite`, which starts over: it forgets the finished stages
    and removes the checkpoints we wrote (nothing else). Only the main process (`main`) removes or writes anything;
    the others run after it and read what it wrote."""
    path = os.path.join(output_dir, RUN_MANIFEST_NAME)
    found = None
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as handle:
                found = json.load(handle)
        except (OSError, json.JSONDecodeError):
            found = None
        if not isinstance(found, dict) or found.get("format") != RUN_MANIFEST_FORMAT:
            found = None
    if found is not None and not overwrite:
        differences = [f"{key}: {before.get(key)!r} -> {value!r}"
                       for key, value in run.items() if (before := found.get("run") or {}).get(key) != value]
        trained = found.get("done") or any(
            _checkpoint_folders(os.path.join(output_dir, folder, "checkpoints")) for folder in STAGE_DIRS.values()
        )
        if differences and trained:
            raise ValueError(
                f"{output_dir} holds an `elical-hf train` run with other settings or data, so it cannot be resumed: "
                + "; ".join(differences) + ". Use a fresh --output_dir, or pass --overwrite_output_dir to train anew "
                "there (replacing its models)."
            )
        done = list(found.get("done", [])) if not differences else []
    else:
        if found is None and os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
            raise ValueError(
                f"{output_dir} is not empty and holds no `elical-hf train` run ({RUN_MANIFEST_NAME}): training would "
                "write over what is there. Use an empty or new --output_dir, or pass --overwrite_output_dir."
            )
        if main:
            for folder in STAGE_DIRS.values():
                remove_checkpoints(os.path.join(output_dir, folder, "checkpoints"))
        done = []
    if main:
        _write_run_manifest(output_dir, run, done)
    return done


def _write_run_manifest(output_dir: str, run: dict[str, Any], done: list[str]) -> None:
    os.makedirs(output_dir, exist_ok=True)
    manifest = {"format": RUN_MANIFEST_FORMAT, "run": run, "done": done}
    atomic_write_json(os.path.join(output_dir, RUN_MANIFEST_NAME), manifest)


def _require_training_args(settings: Any, name: str) -> None:
    """Refuse settings `name` that are not [`ConfidenceTrainingArguments`] (a dict of fields, say), in one line."""
    if not isinstance(settings, ConfidenceTrainingArguments):
        raise TypeError(f"`{name}` must be ConfidenceTrainingArguments, not {type(settings).__name__}: pass "
                        "ConfidenceTrainingArguments(**settings), with `seed`, `num_train_epochs=None` if unset (or a "
                        "`dataclasses.replace` of another).")


def check_recipe_arguments(args: ConfidenceTrainingArguments) -> None:
    """Refuse training arguments that set what [`train_elical`] sets per run: `stage` and `label_column` (stage 1 on
    `consistency`, then calibration on `correctness`)."""
    if args.stage != Stage.ELICITATION or args.label_column != DEFAULT_LABEL_COLUMNS[Stage.ELICITATION]:
        raise ValueError(f"--stage / --label_column (here {args.stage.value} / {args.label_column}) are set per run by "
                         "the recipe (stage 1 on `consistency`, then calibration on `correctness`): leave them out.")


def changed_training_args(args: ConfidenceTrainingArguments) -> dict[str, Any]:
    """The settings of `args` that differ from [`ConfidenceTrainingArguments`]' defaults (a `None` the recipe reads as
    its rule counts as the default), as the run manifest records them: what a resumed run must share, less what the
    recipe sets per run or records on its own (`output_dir`, `stage`, `label_column`, `calibration_trainable`,
    `seed`, `model_init_kwargs`), [`FREE_TRAINING_ARGS`] and the process set-up ([`SETUP_TRAINING_ARGS`])."""
    fields = [f for f in dataclasses.fields(ConfidenceTrainingArguments)
              if f.init and f.name not in SETUP_TRAINING_ARGS]
    defaults = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                for f in fields}
    # built from `args`, so that it sets up the processes as `args` did (every instance re-initialises accelerate)
    baseline = dataclasses.replace(args, **{**defaults, "output_dir": args.output_dir, "num_train_epochs": None})
    skip = {"output_dir", "stage", "label_column", "calibration_trainable", "seed", "model_init_kwargs",
            *FREE_TRAINING_ARGS, *SETUP_TRAINING_ARGS}
    defaults = baseline.to_dict()
    return {name: value for name, value in args.to_dict().items() if name not in skip and value != defaults.get(name)}


def train_elical(
    model_name_or_path: str,
    elicitation_data: Any,
    calibration_data: Any,
    output_dir: str,
    *,
    training_args: ConfidenceTrainingArguments | None = None,
    num_labels: int | None = None,
    num_elicitation: int | None = None,
    cal_only: bool = True,
    dev_fraction: float = 0.1,
    calibration_training_args: ConfidenceTrainingArguments | None = None,
    overwrite_output_dir: bool = False,
) -> dict[str, str]:
    """
    Run EliCal end to end and save each model; a rerun after a crash resumes where the first run stopped.

    `output_dir/elical_run.json` records the run's settings, a fingerprint of its data and the stages finished. A
    rerun with the same settings and data skips the finished stages and resumes the others from their last complete
    checkpoint (`<stage>/checkpoints/checkpoint-<step>`, see [`last_complete_checkpoint`]); a rerun with other
    settings, or a non-empty `output_dir` that holds no run, is refused unless `overwrite_output_dir`.

    Args:
        model_name_or_path (`str`):
            Base causal LM (Hub id or folder).
        elicitation_data:
            Rows with `question` and `consistency` (no correctness labels needed).
        calibration_data:
            Rows with `question` and `correctness`; `num_labels` of them are used.
        output_dir (`str`):
            Gets `elicitation/`, `elical/` and (with `cal_only`) `cal-only/`, each a loadable confidence model.
        training_args ([`ConfidenceTrainingArguments`], *optional*):
            The settings of every run (each gets its own `output_dir`, `stage` and trainable parts,
            [`run_arguments`]): `seed` seeds the label subset, the dev splits and training; `calibration_trainable`
            is what stage 2 trains on top of stage 1 (`"all"`, LoRA + head as the paper's reference code, or
            `"head"`); `model_init_kwargs` go to [`AutoModelForConfidence.from_pretrained`] (e.g. `dtype`,
            `feature_layer`: every model of the run reads that layer). Where `num_train_epochs` or
            `early_stopping_patience` is `None`, each run follows the recipe's rule (the paper's epochs for its data
            size; patience 4 with a dev split). Default: `ConfidenceTrainingArguments(output_dir,
            num_train_epochs=None)`. `stage` and `label_column` are the recipe's to set (refused otherwise).
        num_labels (`int`, *optional*):
            Label budget for stage 2 (dev rows for early stopping are taken out of it). `None`: all rows.
        num_elicitation (`int`, *optional*):
            Stage-1 budget: a seeded random subset of this many elicitation rows ([`take_elicitation`]; dev rows come
            out of it too), for the paper's elicitation-data-size ablation. `None`: all rows.
        cal_only (`bool`, *optional*, defaults to `True`):
            Also train Cal-Only (LoRA + head from scratch on the same labels) for comparison.
        dev_fraction (`float`, *optional*, defaults to 0.1):
            Share of each stage's rows held out (by question) for early stopping.
        calibration_training_args ([`ConfidenceTrainingArguments`], *optional*):
            The settings of stage 2 and Cal-Only, when other than `training_args`'s (e.g.
            `dataclasses.replace(training_args, learning_rate=1e-5)`); `seed` stays `training_args`'s.
        overwrite_output_dir (`bool`, *optional*, defaults to `False`):
            Train anew in an `output_dir` that holds other files or another run (its models are replaced; files we
            did not write are left alone).

    Returns:
        `dict[str, str]`: the folder of each trained model, keyed `"elicitation"`, `"elical"`, `"cal_only"`.
    """
    args = training_args
    if args is None:
        args = ConfidenceTrainingArguments(output_dir=output_dir, num_train_epochs=None)
    stage2_args = args if calibration_training_args is None else calibration_training_args
    for name, settings in (("training_args", args), ("calibration_training_args", stage2_args)):
        _require_training_args(settings, name)  # before anything is written
        check_recipe_arguments(settings)
    seed, calibration_trainable = args.seed, args.calibration_trainable.value
    labelled = take_labels(calibration_data, num_labels, seed)
    elicitation_data = take_elicitation(elicitation_data, num_elicitation, seed)
    paths = {key: os.path.join(output_dir, folder) for key, folder in STAGE_DIRS.items()}
    init = dict(args.model_init_kwargs or {})
    run = _jsonable({
        "model_name_or_path": model_name_or_path, "num_labels": num_labels, "num_labels_used": len(labelled),
        "num_elicitation": num_elicitation,  # None (all rows) matches a manifest written before the option existed
        **({"num_elicitation_used": len(elicitation_data)} if num_elicitation is not None else {}),
        "calibration_trainable": calibration_trainable,
        "dev_fraction": dev_fraction, "seed": seed, "model_init_kwargs": init,
        "training_args": changed_training_args(args),
        "calibration_training_args": changed_training_args(stage2_args),
        "elicitation_data": data_fingerprint(elicitation_data, "elicitation"),
        "calibration_data": data_fingerprint(labelled, "calibration"),
    })
    if init.get("load_in_4bit"):
        check_four_bit_support()  # before anything is written: bitsandbytes or CUDA may be missing
    if init.get("feature_layer") is not None:  # before anything is written: out of range for this backbone?
        check_feature_layer(model_name_or_path, init["feature_layer"])
    state = PartialState()  # under `accelerate launch`, one per process; only the main process writes
    with state.main_process_first():
        done = _claim_output_dir(output_dir, run, overwrite_output_dir, main=state.is_main_process)

    def finished(key: str) -> bool:
        if key in done and find_saved_model(paths[key]) is not None:
            logger.warning("%s: already trained in %s; skipped.", key, paths[key])
            return True
        return False

    def train(key: str, model: Any, data: Any, stage: str, settings: ConfidenceTrainingArguments,
              trainable: str) -> None:
        train_stage(model, data, paths[key], stage, dev_fraction=dev_fraction, seed=seed, training_args=settings,
                    calibration_trainable=trainable, keep_checkpoints=True, resume=True)
        done.append(key)
        if state.is_main_process:
            _write_run_manifest(output_dir, run, done)  # before the checkpoints go: a kill in between loses nothing
            remove_checkpoints(os.path.join(paths[key], "checkpoints"))
        state.wait_for_everyone()

    if not finished("elicitation"):
        if "elical" in done:  # built on an older stage 1
            done.remove("elical")
        logger.info("Stage 1 (elicitation) on %d questions", len(as_dataset(elicitation_data, "elicitation")))
        set_seed(seed)  # the fresh LoRA and head are drawn from the global RNG
        model = AutoModelForConfidence.from_pretrained(model_name_or_path, **init)
        train("elicitation", model, elicitation_data, "elicitation", args, "all")

    if not finished("elical"):
        logger.info("Stage 2 (calibration, %s) on %d labels", calibration_trainable, len(labelled))
        model = AutoModelForConfidence.from_pretrained(paths["elicitation"], is_trainable=True, **init)
        train("elical", model, labelled, "calibration", stage2_args, calibration_trainable)

    if not cal_only:
        paths.pop("cal_only")
        return paths
    if not finished("cal_only"):
        logger.info("Cal-Only on the same %d labels", len(labelled))
        set_seed(seed)
        model = AutoModelForConfidence.from_pretrained(model_name_or_path, **init)
        train("cal_only", model, labelled, "calibration", stage2_args, "all")
    return paths
