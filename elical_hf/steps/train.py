"""`elical-hf train` as a step: judged records (or training tables) in, EliCal's stage-1, stage-2 and Cal-Only models
out ([`~elical_hf.training.recipe.train_elical`]); [`train`] takes the command's three dataclasses, as TRL's scripts
take `(script_args, training_args, model_args)`."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .arguments import ModelArguments, OverwriteArguments, RecordArguments, only


if TYPE_CHECKING:
    from ..training.training_args import ConfidenceTrainingArguments


__all__ = ["TrainArguments", "train", "training_table"]

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TrainArguments(only(RecordArguments, "allow_other_model"), OverwriteArguments):
    """What `elical-hf train` reads and the recipe's own options, beside [`~elical_hf.steps.arguments.ModelArguments`]
    and [`~elical_hf.ConfidenceTrainingArguments`] (TRL's script arguments)."""

    elicitation_data: str = field(metadata={"help": "Judged records (an `elical-hf judge` output, a judged sample or "
                                  "HonestyBench folder, a Hub dataset) or a table with `question` and `consistency` "
                                  "(jsonl/parquet/csv/json/arrow/saved dataset)."})
    calibration_data: str = field(metadata={"help": "Judged records, or a table with `question` and `correctness`."})
    num_labels: int | None = field(default=None, metadata={"help": "Stage-2 label budget (default: all rows)."})
    num_elicitation: int | None = field(
        default=None, metadata={"help": "Stage-1 budget: a seeded random subset of this many elicitation rows "
                                "(default: all rows)."}
    )
    num_samples_used: int | None = field(
        default=None, metadata={"help": "Derive the consistency and correctness targets of judged records from their "
                                "first N samples only (the paper's k ablation; default: every sample)."}
    )
    cal_only: bool = field(default=True, metadata={"help": "Also train Cal-Only on the same labels."})
    dev_fraction: float = field(default=0.1,
                                metadata={"help": "Share of rows held out (by question) for early stopping."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.dev_fraction < 1.0:  # checked before any file is read or written
            raise ValueError(f"--dev_fraction must lie in [0, 1), got {self.dev_fraction}.")
        if self.num_labels is not None and self.num_labels < 2:
            raise ValueError(f"--num_labels must be at least 2, got {self.num_labels}.")
        if self.num_elicitation is not None and self.num_elicitation < 2:
            raise ValueError(f"--num_elicitation must be at least 2, got {self.num_elicitation}.")
        if self.num_samples_used is not None and self.num_samples_used < 1:
            raise ValueError(f"--num_samples_used must be at least 1, got {self.num_samples_used}.")

def training_table(source: Any, target: str, name: str, num_samples: int | None = None) -> Any:
    """A stage's training table from any records input ([`~elical_hf.signals.records.load_records`]): judged
    records get their training columns (from their first `num_samples` samples, with it), training rows are taken as
    they are; refused in one line when a record lacks the judgement `target` comes from (with the `judge` option that
    fills it), when the table lacks a column or holds a target outside [0, 1]
    ([`~elical_hf.data.training_table.validate_columns`]), or holds multiple-choice records."""
    from ..data.training_table import validate_columns
    from ..signals.records import load_records, require_judgement

    table = load_records(source, num_samples=num_samples)
    if "choices" in table.column_names and any(table["choices"]):
        raise ValueError(f"{name}: {sum(bool(c) for c in table['choices'])} records are multiple-choice questions; "
                         "a confidence model trains on free-form questions (as in the paper, which reads MMLU with a "
                         "model trained on free-form ones: `evaluate` and `threshold` score multiple-choice records "
                         "with the multiple-choice prompt).")
    require_judgement(table, target, name)
    validate_columns(table, name, target)
    return table


def train(
    args: TrainArguments, training_args: ConfidenceTrainingArguments, model_args: ModelArguments | None = None
) -> dict[str, Any]:
    """
    Train EliCal from records, as TRL's scripts do `main(script_args, training_args, model_args)`: stage 1 on the
    consistency targets, stage 2 on `args.num_labels` correctness labels, and Cal-Only on the same labels
    ([`~elical_hf.training.recipe.train_elical`]) in `training_args.output_dir`, holding its one-writer lock.

    Args:
        args ([`TrainArguments`]): The records, any records input (`elical-hf judge` output, a judged `sample`
            folder, a HonestyBench folder or Hub dataset) or training tables (`question` and the stage's target),
            both read and checked before stage 1 trains, so a bad target fails in seconds: records must be the
            answers of the base model (unless `allow_other_model`), and records of a test split are trained on with
            a warning that counts them. Its `output_dir` is not an input, nor inside or around an input folder.
        training_args ([`~elical_hf.ConfidenceTrainingArguments`]): The settings of every run
            ([`~elical_hf.training.recipe.train_elical`]: `None` epochs or patience follow the recipe's rules), with
            `model_args.model_init_kwargs()` added to its `model_init_kwargs` (whose own keys may not name an option of
            `model_args`); the caller's object is left as it is.
        model_args ([`~elical_hf.steps.arguments.ModelArguments`], *optional*): The base model and how it loads
            (default: the embedded default model, the precision policy's dtype).

    Returns:
        `dict`: `models` (the folder of each trained model, keyed `"elicitation"`, `"elical"`, `"cal_only"`) and
        `diagnosis` (the teacher's quality on the calibration labels, [`~elical_hf.evaluation.diagnosis.diagnose`], or
        `None` when they do not carry both judgements).
    """
    from ..training import recipe
    from ..utils.atomic import one_writer
    from ..utils.files import check_output_extension, refuse_output_over_inputs
    from ..settings.training_options import DEFAULT_LABEL_COLUMNS, Stage

    recipe.check_recipe_arguments(training_args)
    model_args = model_args if model_args is not None else ModelArguments()
    output_dir, model_name_or_path = training_args.output_dir, model_args.model_name_or_path
    refuse_output_over_inputs(output_dir, {"--elicitation_data": args.elicitation_data,
                                           "--calibration_data": args.calibration_data,
                                           "--model_name_or_path": model_name_or_path}, "--output_dir")
    check_output_extension(output_dir, None, "--output_dir")
    given = training_args.model_init_kwargs or {}
    twice = sorted(set(given) & {f.name for f in dataclasses.fields(ModelArguments)})
    if twice:
        raise ValueError(f"--model_init_kwargs {twice[0]!r}: give it as --{twice[0]}, the option of its own.")
    training_args = dataclasses.replace(training_args, model_init_kwargs={**model_args.model_init_kwargs(), **given})
    tables = {}
    for stage, source, option in ((Stage.ELICITATION, args.elicitation_data, "elicitation_data"),
                                  (Stage.CALIBRATION, args.calibration_data, "calibration_data")):
        name = f"--{option} ({source})" if isinstance(source, (str, os.PathLike)) else f"the {option}"
        tables[stage] = training_table(source, DEFAULT_LABEL_COLUMNS[stage], name, args.num_samples_used)
        _check_training_records(tables[stage], name, model_name_or_path, args.allow_other_model)
    with one_writer(output_dir):
        models = recipe.train_elical(
            model_name_or_path, tables[Stage.ELICITATION], tables[Stage.CALIBRATION], output_dir,
            training_args=training_args, num_labels=args.num_labels, num_elicitation=args.num_elicitation,
            cal_only=args.cal_only, dev_fraction=args.dev_fraction, overwrite_output_dir=args.overwrite_output_dir,
        )
    return {"models": models, "diagnosis": _label_diagnosis(tables[Stage.CALIBRATION])}


def _check_training_records(table: Any, name: str, model_name_or_path: str, allow_other_model: bool) -> None:
    """Refuse records of another model than `model_name_or_path` (or of several models) unless `allow_other_model`
    ([`~elical_hf.signals.records.check_records_model`]), and warn about records of a test split (`source_split` or
    legacy `split` `test`, `dev`, `validation`, ...): results reported on those questions would be on training data."""
    from ..models.hub_ids import hub_id_of_local_copy
    from ..signals.records import SPLIT_WORDS, check_records_model
    from .evaluate import TEST_SPLITS

    columns = table.column_names
    if "model" in columns:
        known = hub_id_of_local_copy(model_name_or_path) if os.path.isdir(model_name_or_path) else None
        check_records_model(table["model"], known[0] if known else model_name_or_path, name, allow_other_model,
                            use="the base model you train on is")
    words = [table[column] for column in ("source_split", "split") if column in columns]
    if words:
        splits = [next((word for word in row if word is not None), None) for row in zip(*words)]
        test = sum(str(split).lower() in TEST_SPLITS or SPLIT_WORDS.get(str(split).lower()) == "test"
                   for split in splits if split is not None)
        if test:
            logger.warning("%d of %d %s records come from a test split (their `source_split` is a test, dev or "
                           "validation word): do not report results on these questions, the models are trained on "
                           "them.", test, len(table), name)


def _label_diagnosis(labels: Any) -> dict[str, Any] | None:
    """The teacher's quality on the calibration labels, when they carry both judgements."""
    from ..settings.columns import CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN
    from ..evaluation.diagnosis import diagnose

    if not {CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN} <= set(labels.column_names):
        return None
    columns = [c for c in ("dataset", CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN) if c in labels.column_names]
    try:
        return diagnose(labels.select_columns(columns), bootstrap=200)
    except ValueError:
        return None
