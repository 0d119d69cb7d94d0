"""The steps that train on records or use a trained model on them: [`train`] (stage 1, stage 2 and Cal-Only),
[`threshold`] (the answer/abstain threshold) and [`select_labels`] (which questions to label for stage 2)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..arguments import ModelArguments, RecordArguments, only
from ..label_selection import DEFAULT_STRATEGY


if TYPE_CHECKING:
    from ..training_args import ConfidenceTrainingArguments


__all__ = ["SelectLabelsArguments", "ThresholdArguments", "TrainArguments", "select_labels", "threshold", "train",
           "training_table"]

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TrainArguments(only(RecordArguments, "allow_other_model")):
    """What `elical-hf train` reads and the recipe's own options, beside [`~elical_hf.arguments.ModelArguments`] and
    [`~elical_hf.ConfidenceTrainingArguments`] (TRL's script arguments)."""

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
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train anew in an --output_dir that is not empty or holds a run with other data or options "
                  "(its models are replaced). Without it such a folder is refused, and the same run is resumed."},
    )

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


HELD_OUT_SPLIT = "in_domain_test"
"""The default calibration split of `elical-hf threshold`: the in-domain datasets' dev/test files (the paper's
in-domain test split), never trained on; `train` rows are the ones a model is fitted on."""


@dataclass(kw_only=True)
class ThresholdArguments(RecordArguments):
    """Options of [`threshold`] (`elical-hf threshold`)."""

    model: str = field(metadata={"positional": True, "help": "A saved confidence model folder (gets "
                                 "decision_threshold); `--model FOLDER` is accepted too."})
    split: str = field(
        default=HELD_OUT_SPLIT,
        metadata={"help": "Which paper split of the records to choose it on. Default in_domain_test: the datasets' own "
                  "dev/test files, the labelled rows a model never trains on (the paper chooses its alignment "
                  "threshold on them too); report its decisions on other rows (ood_test, or a part not used here). "
                  "The rows are checked against the questions the model records it trained on (stage 1 included)."},
    )
    allow_training_rows: bool = field(
        default=False,
        metadata={"help": "Use calibration rows the model was trained on (refused otherwise): the guarantee then "
                  "does not hold, since it needs rows the model never saw."},
    )
    alpha: float | None = field(
        default=None,
        metadata={"help": "Guarantee an error rate among answered questions of at most ALPHA (with probability "
                  "1 - DELTA); without it, the alignment rule."},
    )
    delta: float = field(default=0.1, metadata={"help": "Allowed probability that the --alpha guarantee fails."})
    max_abstention: float | None = field(
        default=None,
        metadata={"help": "With --alpha, also guarantee an abstention rate (share of questions not answered) of at "
                  "most MAX_ABSTENTION; both hold together with probability 1 - DELTA (each tested at DELTA / 2)."},
    )
    by: str | None = field(
        default=None,
        metadata={"help": "A record column naming each question's domain (e.g. `dataset`): one threshold per domain, "
                  "by the same rule, saved beside the pooled one (the fallback); `model.answer(..., domain=)`, the "
                  "pipeline and the server use it."},
    )
    min_domain_rows: int = field(
        default=30, metadata={"help": "With --by: a domain with fewer labelled rows gets the pooled threshold."}
    )
    allow_pooled_fallback: bool = field(
        default=False,
        metadata={"help": "With --by and --alpha: let domains under --min_domain_rows fall back to the pooled "
                  "threshold (refused otherwise: the pooled guarantee bounds the error rate over the mix of domains, "
                  "not among one domain's questions)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.alpha is not None and not 0.0 < self.alpha < 1.0:  # before any file or model is read
            raise ValueError(f"--alpha must lie in (0, 1) (an error rate among answered questions), got {self.alpha}.")
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"--delta must lie in (0, 1) (the probability the guarantee fails), got {self.delta}.")
        if self.max_abstention is not None and self.alpha is None:
            raise ValueError("--max_abstention needs --alpha: the two guarantees are chosen together (e.g. --alpha 0.1 "
                             "--max_abstention 0.4).")
        if self.max_abstention is not None and not 0.0 < self.max_abstention < 1.0:
            raise ValueError(f"--max_abstention must lie in (0, 1) (a share of questions not answered), got "
                             f"{self.max_abstention}.")
        if self.min_domain_rows < 5:
            raise ValueError(f"--min_domain_rows must be at least 5, got {self.min_domain_rows}.")


@dataclass(kw_only=True)
class SelectLabelsArguments(only(RecordArguments, "records", "allow_other_model", "batch_size")):
    """Options of [`select_labels`] (`elical-hf select-labels`); `records` is the pool."""

    model: str = field(metadata={"positional": True, "help": "The stage-1 (elicitation) confidence model folder."})
    output: str = field(metadata={"help": "Where the chosen records go (.parquet or .jsonl)."})
    num_labels: int = field(default=250, metadata={"help": "How many questions to choose."})
    strategy: str = field(default=DEFAULT_STRATEGY,
                          metadata={"help": "random, quantile or uniform (see elical_hf.label_selection)."})
    split: str | None = field(default=None, metadata={"help": "Only records whose `split` is this (e.g. train)."})
    seed: int = field(default=0, metadata={"help": "Seed of the draw."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing --output file."})


def training_table(source: Any, target: str, name: str, num_samples: int | None = None) -> Any:
    """A stage's training table from any records input ([`~elical_hf.signals.records.load_records`]): judged
    records get their training columns (from their first `num_samples` samples, with it), training rows are taken as
    they are; refused in one line when a record lacks the judgement `target` comes from (with the `judge` option that
    fills it), when the table lacks a column or holds a target outside [0, 1]
    ([`~elical_hf.data.validate_columns`]), or holds multiple-choice records."""
    from ..data import validate_columns
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
    ([`~elical_hf.recipe.train_elical`]) in `training_args.output_dir`, holding its one-writer lock.

    Args:
        args ([`TrainArguments`]): The records, any records input (`elical-hf judge` output, a judged `sample`
            folder, a HonestyBench folder or Hub dataset) or training tables (`question` and the stage's target),
            both read and checked before stage 1 trains, so a bad target fails in seconds: records must be the
            answers of the base model (unless `allow_other_model`), and records of a test split are trained on with
            a warning that counts them. Its `output_dir` is not an input, nor inside or around an input folder.
        training_args ([`~elical_hf.ConfidenceTrainingArguments`]): The settings of every run ([`~elical_hf.recipe.
            train_elical`]: `None` epochs or patience follow the recipe's rules); its `model_init_kwargs` are set to
            `model_args.model_init_kwargs()`.
        model_args ([`~elical_hf.arguments.ModelArguments`], *optional*): The base model and how it loads (default:
            the embedded default model, the precision policy's dtype).

    Returns:
        `dict`: `models` (the folder of each trained model, keyed `"elicitation"`, `"elical"`, `"cal_only"`) and
        `diagnosis` (the teacher's quality on the calibration labels, [`~elical_hf.diagnosis.diagnose`], or `None`
        when they do not carry both judgements).
    """
    from .. import recipe
    from ..atomic import one_writer
    from ..files import check_output_extension, refuse_output_over_inputs
    from ..training_options import DEFAULT_LABEL_COLUMNS, Stage

    recipe.check_recipe_arguments(training_args)
    model_args = model_args if model_args is not None else ModelArguments()
    output_dir, model_name_or_path = training_args.output_dir, model_args.model_name_or_path
    refuse_output_over_inputs(output_dir, {"--elicitation_data": args.elicitation_data,
                                           "--calibration_data": args.calibration_data,
                                           "--model_name_or_path": model_name_or_path}, "--output_dir")
    check_output_extension(output_dir, None, "--output_dir")
    training_args.model_init_kwargs = model_args.model_init_kwargs()
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


def threshold(args: ThresholdArguments, *, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """
    Choose a saved model's answer/abstain threshold on labelled records and write it into the model folder
    ([`~elical_hf.saved_model.set_decision_threshold`]): the alignment rule, or with `args.alpha` the lowest threshold
    whose error rate among answered questions is at most `alpha` (and with `args.max_abstention` whose abstention
    rate is at most that) with probability `1 - delta`; with `args.by` also one per domain. The rows' confidences are
    saved as the reference of `elical-hf monitor` ([`~elical_hf.drift.load_reference`]), in the same update as the
    threshold: a failure leaves the model as it was.

    `args.model` is a saved, trained confidence model folder (a base model, or one never trained, is refused before
    anything is scored); the records of `args.records` of the paper's split `args.split` (default
    [`HELD_OUT_SPLIT`]) with a judged greedy answer are used (at least 5). Rows whose question the model records
    having trained on ([`~elical_hf.saved_model.trained_question_overlap`], every stage) are refused in one line
    unless `args.allow_training_rows` (then counted as `training_rows` in `risk_control`); a model that records no
    training questions gets a warning that the check could not be made. Choose it on a split that is not the test set
    you report.

    Returns:
        `dict`: `threshold`, `rows` (records used), `answered` (of them), `training_rows` (of them trained on, or
        `None` when the model records nothing to check), and `accuracy` (the alignment rule's, in percent) or
        `guarantee` (`coverage`, `risk`, `risk_upper_bound`, `n`, `sequences`, `min_answered` (the fewest rows a
        certifiable threshold answers), `power` ([`~elical_hf.metrics.risk_control.certification_power`]),
        `rows_for_power` (rows for 80% power when `power` is below it, `None` if no size up to `2^POWER_DOUBLINGS` n reaches it, absent
        otherwise), and with `max_abstention` `abstention_upper_bound`); with `by`, `domains` (the saved map's
        entries).
    """
    from ..auto import AutoModelForConfidence
    from ..configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
    from ..files import refuse_output_over_inputs
    from ..drift import first_rows
    from ..saved_model import QUESTIONS_KEY, REFERENCE_NAME, question_digests, set_decision_threshold
    from ..metrics import selective_risk
    from ..signals.records import JUDGE_OPTIONS, check_records_match, load_records
    from .evaluating import check_trained_model, model_confidences

    say = say or logger.info
    model, records, split, alpha = args.model, args.records, args.split, args.alpha
    for name in (CONFIDENCE_CONFIG_NAME, REFERENCE_NAME, "README.md"):  # what it writes into the model folder
        refuse_output_over_inputs(os.path.join(model, name), {"--records": records}, "The model file")
    loaded = load_records(records, splits=True, allow_incomplete=args.allow_incomplete)
    parts = loaded["paper_split"] if len(loaded) else []
    if split not in parts:
        raise ValueError(f"{records} has no {split!r} records (found {list(dict.fromkeys(parts))}).")
    if args.by is not None and args.by not in loaded.column_names:
        raise ValueError(f"--by {args.by}: the records have no such column (they have "
                         f"{', '.join(loaded.column_names)}).")
    chosen = loaded.select([i for i, part in enumerate(parts) if part == split])
    rows = [r for r in chosen if r["greedy_correctness"] is not None]
    if len(rows) < 5:
        raise ValueError(f"Need at least 5 judged {split!r} records to choose a threshold, found {len(rows)} (judge "
                         f"them: `{JUDGE_OPTIONS['greedy_correctness']}`).")
    domains = None
    if args.by is not None:
        missing = [i for i, r in enumerate(rows) if r[args.by] is None or str(r[args.by]).strip() == ""]
        if missing:
            raise ValueError(f"--by {args.by}: {len(missing)} of the {len(rows)} {split!r} records name no {args.by} "
                             f"(the first is {rows[missing[0]]['question']!r}).")
        domains = [str(r[args.by]) for r in rows]
    check_trained_model(model, model)  # before it is loaded and scores anything
    if split.endswith("test"):
        say(f"warning: choosing the threshold on {split!r}: do not report results on these records")
    confidence_model = AutoModelForConfidence.from_pretrained(model)
    check_records_match(rows, confidence_model.confidence_config.base_model_name_or_path, str(records),
                        args.allow_other_model)
    trained = _check_training_rows(confidence_model.confidence_config, model, rows, split, args.allow_training_rows,
                                   say)
    confidences = model_confidences(confidence_model, rows, batch_size=args.batch_size)  # MC rows: the MC prompt
    correct = [int(r["greedy_correctness"]) for r in rows]
    source = {"records": str(records), "split": split, **({"training_rows": trained} if trained else {})}
    chosen_threshold = set_decision_threshold(model, confidences, correct, alpha=alpha, delta=args.delta,
                                              max_abstention=args.max_abstention, source=source, domains=domains,
                                              by=args.by or "dataset", min_domain_rows=args.min_domain_rows,
                                              reference={**source, "by": args.by, "domains": domains,
                                                         "question_ids": first_rows([r["question"] for r in rows]),
                                                         QUESTIONS_KEY: question_digests(r["question"] for r in rows)},
                                              allow_pooled_fallback=args.allow_pooled_fallback)
    out: dict[str, Any] = {"threshold": chosen_threshold, "rows": len(rows), "training_rows": trained,
                           "answered": sum(c >= chosen_threshold for c in confidences)}
    config = ConfidenceConfig.from_json_file(os.path.join(model, CONFIDENCE_CONFIG_NAME))
    if alpha is None:
        right = sum((c >= chosen_threshold) == bool(y) for c, y in zip(confidences, correct))
        out["accuracy"] = 100 * right / len(rows)
    else:
        record = config.risk_control
        measured = selective_risk(confidences, correct, chosen_threshold)
        out["guarantee"] = {"coverage": measured["coverage"], "risk": measured["risk"],
                            "risk_upper_bound": record["risk_upper_bound"],
                            **_power(confidences, correct, alpha, args.delta, args.max_abstention)}
        if args.max_abstention is not None:
            out["guarantee"]["abstention_upper_bound"] = record["abstention_upper_bound"]
    if config.domain_thresholds is not None:
        out["domains"] = config.domain_thresholds["domains"]
    return out


def _check_training_rows(config: Any, model: str, rows: list[dict[str, Any]], split: str, allow: bool,
                         say: Callable[[str], None]) -> int | None:
    """How many calibration `rows` the model records having trained on; refused (one `ValueError`) unless `allow`.
    `None`, with a warning, when no training run of the model records its questions."""
    from ..saved_model import trained_question_overlap

    overlap, unrecorded = trained_question_overlap(config, [r["question"] for r in rows])
    if unrecorded:
        say(f"warning: {model} records no training questions for its {', '.join(unrecorded)} run(s) (saved before "
            f"elical-hf recorded them, or trained on tokenised rows): the {split!r} rows could not be checked against "
            "its training data, and the guarantee needs rows it never saw")
    if overlap and not allow:
        raise ValueError(f"{overlap} of the {len(rows)} {split!r} calibration rows are questions {model} was "
                         "trained on (by the questions its training history records, stage 1 included): the guarantee "
                         "needs rows it never saw. Choose a held-out --split, or pass --allow_training_rows to use them anyway "
                         "(the guarantee then does not hold).")
    if overlap:
        say(f"warning: {overlap} of the {len(rows)} {split!r} rows were trained on (--allow_training_rows): the "
            "guarantee does not hold for this threshold")
    return None if len(unrecorded) == len(config.training_history) else overlap


def _power(confidences: list[float], correct: list[int], alpha: float, delta: float,
           max_abstention: float | None) -> dict[str, Any]:
    """The calibration size and what it can certify: `n`, `sequences`, `min_answered`, `power`, `rows_for_power`."""
    from ..metrics.risk_control import certification_power, fixed_sequences, rows_for_power

    n = len(confidences)
    tested = fixed_sequences(n, alpha, delta if max_abstention is None else delta / 2)
    out = {"n": n, "sequences": len(tested), "min_answered": tested[0][0],
           "power": certification_power(confidences, correct, alpha, delta, max_abstention)}
    if out["power"] < 0.8:
        out["rows_for_power"] = rows_for_power(confidences, correct, alpha, delta, max_abstention)
    return out


def select_labels(args: SelectLabelsArguments) -> dict[str, Any]:
    """
    Choose which `args.num_labels` questions of a pool to send for correctness labels: score them with the stage-1
    model and draw them ([`~elical_hf.label_selection.select_for_labelling`]), then write the chosen records to
    `args.output`.

    `args.model` is the stage-1 (elicitation) confidence model folder (trained: a base model is refused); the pool,
    `args.records`, is any records input (records without labels are fine: only `question` is needed), only those
    whose `split` is `args.split` when given. `args.output` (`.parquet` or `.jsonl`) is not the pool itself, nor
    inside its folder, and an existing file only with `overwrite`; it is checked, as the model is, before anything is
    read.

    Returns:
        `dict`: `pool`, `chosen`, `strategy`, `output` and the stage-1 confidences' `pool_mean`, `chosen_mean`,
        `chosen_min`, `chosen_max`.
    """
    from ..auto import AutoModelForConfidence
    from ..files import check_output_extension, refuse_output_over_inputs
    from ..label_selection import SELECTION_STRATEGIES, select_for_labelling
    from ..signals.records import RECORD_EXTENSIONS, check_records_match, load_records, save_records
    from .evaluating import check_trained_model, model_confidences

    model, records, output, num_labels, strategy = args.model, args.records, args.output, args.num_labels, args.strategy
    if strategy not in SELECTION_STRATEGIES:  # before any model is loaded
        raise ValueError(f"--strategy must be one of {SELECTION_STRATEGIES}, got {strategy!r}.")
    refuse_output_over_inputs(output, {"--records": records, "MODEL": model})
    check_output_extension(output, RECORD_EXTENSIONS)
    if os.path.exists(output) and not args.overwrite:
        raise ValueError(f"--output {output} exists; pass --overwrite to replace it.")
    check_trained_model(model, model)
    pool = load_records(records, derive=False).to_list()
    if args.split is not None:
        pool = [r for r in pool if r.get("split") == args.split]
    if not 1 <= num_labels <= len(pool):
        raise ValueError(f"--num_labels must lie in [1, {len(pool)}] (the pool's size), got {num_labels}.")
    stage1 = AutoModelForConfidence.from_pretrained(model)
    check_records_match(pool, stage1.confidence_config.base_model_name_or_path, str(records), args.allow_other_model)
    confidences = model_confidences(stage1, pool, batch_size=args.batch_size)
    chosen = select_for_labelling(confidences, num_labels, strategy, args.seed)
    save_records([pool[i] for i in chosen], output)
    picked = [confidences[i] for i in chosen]
    return {"pool": len(pool), "chosen": len(chosen), "strategy": strategy, "output": output,
            "stage1_confidence": {"pool_mean": sum(confidences) / len(pool), "chosen_mean": sum(picked) / len(picked),
                                  "chosen_min": min(picked), "chosen_max": max(picked)}}
