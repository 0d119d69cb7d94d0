"""The steps that train on records or use a trained model on them: [`train`] (stage 1, stage 2 and Cal-Only),
[`threshold`] (the answer/abstain threshold) and [`select_labels`] (which questions to label for stage 2)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from ..default_model import DEFAULT_MODEL


__all__ = ["select_labels", "threshold", "train", "training_table"]

logger = logging.getLogger(__name__)


def training_table(source: Any, target: str, name: str, num_samples: int | None = None) -> Any:
    """A stage's training table from any records input ([`~elical_hf.signals.records.load_records`]): judged
    records get their training columns (from their first `num_samples` samples, with it), training rows are taken as
    they are; refused in one line when a record lacks the judgement `target` comes from (with the `judge` option that
    fills it), or when the table lacks a column or holds a target outside [0, 1]
    ([`~elical_hf.data.validate_columns`])."""
    from ..data import validate_columns
    from ..signals.records import load_records, require_judgement

    table = load_records(source, num_samples=num_samples)
    require_judgement(table, target, name)
    validate_columns(table, name, target)
    return table


def train(
    elicitation_data: Any,
    calibration_data: Any,
    output_dir: str,
    *,
    model_name_or_path: str = DEFAULT_MODEL,
    num_labels: int | None = None,
    num_elicitation: int | None = None,
    num_samples_used: int | None = None,
    cal_only: bool = True,
    dev_fraction: float = 0.1,
    calibration_trainable: str = "all",
    seed: int = 42,
    training_args: dict[str, Any] | None = None,
    model_init_kwargs: dict[str, Any] | None = None,
    overwrite_output_dir: bool = False,
    allow_other_model: bool = False,
) -> dict[str, Any]:
    """
    Train EliCal from records: stage 1 on the consistency targets, stage 2 on `num_labels` correctness labels, and
    Cal-Only on the same labels ([`~elical_hf.recipe.train_elical`], whose arguments these are), holding
    `output_dir`'s one-writer lock.

    Args:
        elicitation_data, calibration_data: Any records input (`elical-hf judge` output, a judged `sample` folder, a
            HonestyBench folder or Hub dataset) or training table (`question` and the stage's target). Both are read
            and checked before stage 1 trains, so a bad target fails in seconds: records must be the answers of
            `model_name_or_path` (unless `allow_other_model`), and records of a test split are trained on with a
            warning that counts them.
        output_dir (`str`): Not an input, nor inside or around an input folder.
        num_samples_used (`int`, *optional*): Derive the targets of judged records from their first N samples only.
        allow_other_model (`bool`, *optional*): Train on records of another model than `model_name_or_path` (e.g. of
            the model it was fine-tuned from).

    Returns:
        `dict`: `models` (the folder of each trained model, keyed `"elicitation"`, `"elical"`, `"cal_only"`) and
        `diagnosis` (the teacher's quality on the calibration labels, [`~elical_hf.diagnosis.diagnose`], or `None`
        when they do not carry both judgements).
    """
    from .. import recipe
    from ..atomic import one_writer
    from ..files import check_output_extension, refuse_output_over_inputs
    from ..training_options import DEFAULT_LABEL_COLUMNS, Stage

    refuse_output_over_inputs(output_dir, {"--elicitation_data": elicitation_data,
                                           "--calibration_data": calibration_data,
                                           "--model_name_or_path": model_name_or_path}, "--output_dir")
    check_output_extension(output_dir, None, "--output_dir")
    tables = {}
    for stage, source, option in ((Stage.ELICITATION, elicitation_data, "elicitation_data"),
                                  (Stage.CALIBRATION, calibration_data, "calibration_data")):
        name = f"--{option} ({source})" if isinstance(source, (str, os.PathLike)) else f"the {option}"
        tables[stage] = training_table(source, DEFAULT_LABEL_COLUMNS[stage], name, num_samples_used)
        _check_training_records(tables[stage], name, model_name_or_path, allow_other_model)
    with one_writer(output_dir):
        models = recipe.train_elical(
            model_name_or_path, tables[Stage.ELICITATION], tables[Stage.CALIBRATION], output_dir,
            num_labels=num_labels, num_elicitation=num_elicitation, calibration_trainable=calibration_trainable,
            cal_only=cal_only, dev_fraction=dev_fraction, seed=seed, training_args=training_args,
            model_init_kwargs=model_init_kwargs, overwrite_output_dir=overwrite_output_dir,
        )
    return {"models": models, "diagnosis": _label_diagnosis(tables[Stage.CALIBRATION])}


def _check_training_records(table: Any, name: str, model_name_or_path: str, allow_other_model: bool) -> None:
    """Refuse records of another model than `model_name_or_path` (or of several models) unless `allow_other_model`
    ([`~elical_hf.signals.records.check_records_model`]), and warn about records of a test split (their own `split`
    word: `test`, `dev`, `validation`, ...): results reported on those questions later would be on training data."""
    from ..hub_ids import hub_id_of_local_copy
    from ..signals.records import SPLIT_WORDS, check_records_model
    from .evaluating import TEST_SPLITS

    columns = table.column_names
    if "model" in columns:
        known = hub_id_of_local_copy(model_name_or_path) if os.path.isdir(model_name_or_path) else None
        check_records_model(table["model"], known[0] if known else model_name_or_path, name, allow_other_model,
                            use="the base model you train on is")
    words = [table[column] for column in ("split", "source_split") if column in columns]
    if words:
        splits = [next((word for word in row if word is not None), None) for row in zip(*words)]
        test = sum(str(split).lower() in TEST_SPLITS or SPLIT_WORDS.get(str(split).lower()) == "test"
                   for split in splits if split is not None)
        if test:
            logger.warning("%d of %d %s records come from a test split (their `split` is a test, dev or validation "
                           "word): do not report results on these questions, the models are trained on them.", test,
                           len(table), name)


def _label_diagnosis(labels: Any) -> dict[str, Any] | None:
    """The teacher's quality on the calibration labels, when they carry both judgements."""
    from ..columns import CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN
    from ..diagnosis import diagnose

    if not {CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN} <= set(labels.column_names):
        return None
    columns = [c for c in ("dataset", CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN) if c in labels.column_names]
    try:
        return diagnose(labels.select_columns(columns), bootstrap=200)
    except ValueError:
        return None


def threshold(
    model: str,
    records: Any,
    *,
    split: str = "train",
    alpha: float | None = None,
    delta: float = 0.1,
    batch_size: int = 16,
    allow_other_model: bool = False,
    allow_incomplete: bool = False,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """
    Choose a saved model's answer/abstain threshold on labelled records and write it into the model folder
    ([`~elical_hf.evaluation.set_decision_threshold`]): the alignment rule, or with `alpha` the lowest threshold
    whose error rate among answered questions is at most `alpha` with probability `1 - delta`.

    Args:
        model (`str`): A saved, trained confidence model folder (a base model, or one never trained, is refused
            before anything is scored).
        records: Any records input; its records of the paper's split `split` with a judged greedy answer are used
            (at least 5). Choose it on a split that is not the test set you report.

    Returns:
        `dict`: `threshold`, `rows` (records used), `answered` (of them), and `accuracy` (the alignment rule's, in
        percent) or `guarantee` (`coverage`, `risk`, `risk_upper_bound`).
    """
    from ..auto import AutoModelForConfidence
    from ..configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
    from ..evaluation import set_decision_threshold
    from ..metrics import selective_risk
    from ..signals.records import JUDGE_OPTIONS, check_records_match, load_records
    from .evaluating import check_trained_model

    say = say or logger.info
    if alpha is not None and not 0.0 < alpha < 1.0:  # before any file or model is read
        raise ValueError(f"--alpha must lie in (0, 1) (an error rate among answered questions), got {alpha}.")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"--delta must lie in (0, 1) (the probability the guarantee fails), got {delta}.")
    loaded = load_records(records, splits=True, allow_incomplete=allow_incomplete)
    parts = loaded["paper_split"] if len(loaded) else []
    if split not in parts:
        raise ValueError(f"{records} has no {split!r} records (found {list(dict.fromkeys(parts))}).")
    chosen = loaded.select([i for i, part in enumerate(parts) if part == split])
    rows = [r for r in chosen if r["greedy_correctness"] is not None]
    if len(rows) < 5:
        raise ValueError(f"Need at least 5 judged {split!r} records to choose a threshold, found {len(rows)} (judge "
                         f"them: `{JUDGE_OPTIONS['greedy_correctness']}`).")
    check_trained_model(model, model)  # before it is loaded and scores anything
    if split.endswith("test"):
        say(f"warning: choosing the threshold on {split!r}: do not report results on these records")
    confidence_model = AutoModelForConfidence.from_pretrained(model)
    check_records_match(rows, confidence_model.confidence_config.base_model_name_or_path, str(records),
                        allow_other_model)
    confidences = confidence_model.confidence([r["question"] for r in rows], batch_size=batch_size, progress=True)
    correct = [int(r["greedy_correctness"]) for r in rows]
    chosen_threshold = set_decision_threshold(model, confidences, correct, alpha=alpha, delta=delta,
                                              source={"records": str(records), "split": split})
    out: dict[str, Any] = {"threshold": chosen_threshold, "rows": len(rows),
                           "answered": sum(c >= chosen_threshold for c in confidences)}
    if alpha is None:
        right = sum((c >= chosen_threshold) == bool(y) for c, y in zip(confidences, correct))
        out["accuracy"] = 100 * right / len(rows)
    else:
        record = ConfidenceConfig.from_json_file(os.path.join(model, CONFIDENCE_CONFIG_NAME)).risk_control
        measured = selective_risk(confidences, correct, chosen_threshold)
        out["guarantee"] = {"coverage": measured["coverage"], "risk": measured["risk"],
                            "risk_upper_bound": record["risk_upper_bound"]}
    return out


def select_labels(
    model: str,
    records: Any,
    output: str,
    *,
    num_labels: int = 250,
    strategy: str | None = None,
    split: str | None = None,
    seed: int = 0,
    batch_size: int = 16,
    allow_other_model: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """
    Choose which `num_labels` questions of a pool to send for correctness labels: score them with the stage-1 model
    and draw them ([`~elical_hf.label_selection.select_for_labelling`]), then write the chosen records to `output`.

    Args:
        model (`str`): The stage-1 (elicitation) confidence model folder (trained: a base model is refused).
        records: The pool, any records input (records without labels are fine: only `question` is needed); only
            those whose `split` is `split`, when given.
        output (`str`): Where the chosen records go (`.parquet` or `.jsonl`); not the pool itself, nor inside its
            folder, and an existing file only with `overwrite`. Checked, as `model` is, before anything is read.
        strategy (`str`, *optional*): `"random"` (the default), `"quantile"` or `"uniform"`.

    Returns:
        `dict`: `pool`, `chosen`, `strategy`, `output` and the stage-1 confidences' `pool_mean`, `chosen_mean`,
        `chosen_min`, `chosen_max`.
    """
    from ..auto import AutoModelForConfidence
    from ..files import check_output_extension, refuse_output_over_inputs
    from ..label_selection import DEFAULT_STRATEGY, SELECTION_STRATEGIES, select_for_labelling
    from ..signals.records import RECORD_EXTENSIONS, check_records_match, load_records, save_records
    from .evaluating import check_trained_model

    strategy = strategy or DEFAULT_STRATEGY
    if strategy not in SELECTION_STRATEGIES:  # before any model is loaded
        raise ValueError(f"--strategy must be one of {SELECTION_STRATEGIES}, got {strategy!r}.")
    refuse_output_over_inputs(output, {"--records": records, "MODEL": model})
    check_output_extension(output, RECORD_EXTENSIONS)
    if os.path.exists(output) and not overwrite:
        raise ValueError(f"--output {output} exists; pass --overwrite to replace it.")
    check_trained_model(model, model)
    pool = load_records(records, derive=False).to_list()
    if split is not None:
        pool = [r for r in pool if r.get("split") == split]
    if not 1 <= num_labels <= len(pool):
        raise ValueError(f"--num_labels must lie in [1, {len(pool)}] (the pool's size), got {num_labels}.")
    stage1 = AutoModelForConfidence.from_pretrained(model)
    check_records_match(pool, stage1.confidence_config.base_model_name_or_path, str(records), allow_other_model)
    confidences = stage1.confidence([r["question"] for r in pool], batch_size=batch_size, progress=True)
    chosen = select_for_labelling(confidences, num_labels, strategy, seed)
    save_records([pool[i] for i in chosen], output)
    picked = [confidences[i] for i in chosen]
    return {"pool": len(pool), "chosen": len(chosen), "strategy": strategy, "output": output,
            "stage1_confidence": {"pool_mean": sum(confidences) / len(pool), "chosen_mean": sum(picked) / len(picked),
                                  "chosen_min": min(picked), "chosen_max": max(picked)}}
