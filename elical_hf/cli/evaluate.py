"""`elical-hf evaluate`: test records + confidence sources -> the paper's table (JSON + Markdown) and plots.

For each `--model` with a saved `decision_threshold` it also reports what that answer/abstain rule does on the test
records: the error rate among answered questions and the coverage (`decisions.json`, and a table in `report.md`),
next to the alpha a risk-controlled threshold was chosen to guarantee."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .parser import ElicalArgumentParser
from .records_command import allow_incomplete_field


@dataclass
class EvaluateArguments:
    """Options of `elical-hf evaluate` (also settable from `--config file.yaml`)."""

    records: str = field(metadata={"help": "Test records: a file or folder (HonestyBench layout or `elical-hf sample` output)."})
    output_dir: str = field(metadata={"help": "Where results.json, report.md and the plots go."})
    model: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Trained confidence models as NAME=PATH, several separated by spaces. Name runs of one method with different "
            "label budgets METHOD@N (e.g. EliCal@100, EliCal@1000) to also plot AUROC against the number of labels."
        },
    )
    baselines: str = field(
        default="prob,n_prob,consis_lex,consis_sem",
        metadata={"help": "Comma-separated training-free baselines (those whose inputs are missing are skipped)."},
    )
    field_sources: list[str] = field(
        default_factory=list, metadata={"help": "Extra confidence columns already in the records, as NAME=COLUMN."}
    )
    bootstrap: int = field(default=0, metadata={"help": "Bootstrap resamples for 95 percent intervals of every metric (0: none)."})
    batch_size: int = field(default=16, metadata={"help": "Questions per forward pass when scoring models."})
    allow_other_model: bool = field(
        default=False, metadata={"help": "Score records of another model than the confidence model's base (e.g. "
                                 "the model it was fine-tuned from)."})
    allow_incomplete: bool = allow_incomplete_field()
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Write into an --output_dir that already holds results (they are replaced). Without it such "
                  "a folder is refused."},
    )
    update_model_cards: bool = field(
        default=False,
        metadata={"help": "Also record each --model folder's results (per dataset and averages) and its reliability "
                  "diagram in that folder's model card (README.md model-index), ready for `elical-hf push`."},
    )

    def __post_init__(self) -> None:
        if self.bootstrap < 0:
            raise ValueError(f"--bootstrap must be >= 0 (0: no intervals), got {self.bootstrap}.")
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be >= 1, got {self.batch_size}.")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{what} must look like NAME=VALUE, got {item!r}.")
        pairs[name] = value
    return pairs


def _column_confidences(records: list[dict], name: str, column: str, where: str) -> list[float]:
    """The `--field_sources NAME=COLUMN` confidences: every test record's `column`, a number."""
    missing = sum(column not in r for r in records)
    if missing:
        known = sorted({key for r in records for key in r})
        raise ValueError(f"--field_sources {name}={column}: {missing} of {len(records)} test records in {where} "
                         f"have no {column!r} field; they have {known}.")
    values = []
    for r in records:
        try:
            values.append(float(r[column]))
        except (TypeError, ValueError):
            raise ValueError(f"--field_sources {name}={column}: record {r.get('id', '?')!r} in {where} holds "
                             f"{r[column]!r}, not a number.") from None
    return values


def label_curves(table: dict) -> dict[str, dict[int, float]]:
    """AUROC (in [0, 1], in-domain average when present) of `METHOD@N` rows, by method and label budget N."""
    curves: dict[str, dict[int, float]] = {}
    for name, row in table.items():
        method, sep, budget = name.rpartition("@")
        if sep and method and budget.isdigit():
            column = "in-domain avg" if "in-domain avg" in row else next(iter(row))
            curves.setdefault(method, {})[int(budget)] = row[column]["auroc"] / 100
    return {method: points for method, points in curves.items() if len(points) > 1}


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(EvaluateArguments, prog="elical-hf evaluate", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.atomic import one_writer

    (options,) = make_parser().parse_with_config(argv)
    with one_writer(options.output_dir):  # a second evaluate into this folder would mix two reports
        return _evaluate(options)


def _evaluate(options: EvaluateArguments) -> int:
    from elical_hf.auto import AutoModelForConfidence
    from elical_hf.atomic import atomic_write_text
    from elical_hf.evaluation import (
        decision_table, decision_table_to_markdown, evaluate_table, table_to_markdown, write_report,
    )
    from elical_hf.signals.baselines import BASELINES, compute_baselines
    from elical_hf.signals.honestybench import load_honestybench
    from elical_hf.signals.records import check_records_match

    models, columns = _pairs(options.model, "--model"), _pairs(options.field_sources, "--field_sources")
    _check_output_dir(options.output_dir, options.overwrite_output_dir)
    for name, path in models.items():
        check_trained_model(path, f"--model {name}={path}")
    loaded = load_honestybench(options.records, allow_incomplete=options.allow_incomplete)
    print("records: " + ", ".join(f"{split} {len(rows)}" for split, rows in loaded.items())
          + " (only in_domain_test and ood_test are evaluated)")
    tests = [name for name in ("in_domain_test", "ood_test") if name in loaded]
    if not tests:
        raise ValueError(f"{options.records} holds no in_domain_test or ood_test records (found {list(loaded)}).")
    records = [dict(row, split=split) for split in tests for row in loaded[split]]
    judged = [r for r in records if r.get("greedy_correct") is not None]
    if not judged:
        raise ValueError("No test record has a judged greedy answer (`greedy_correctness`); run `elical-hf judge`.")
    if len(judged) < len(records):
        print(f"warning: {len(records) - len(judged)} of {len(records)} test records have no judged greedy answer "
              f"(greedy_correctness is null) and are left out: n = {len(judged)}.")
    records = judged
    if not models:
        check_records_match(records, None, options.records, options.allow_other_model)

    sources: dict[str, list[float]] = {}
    for name in [b.strip() for b in options.baselines.split(",") if b.strip()]:
        try:
            for key, values in compute_baselines(records, which=[name], progress=False).items():
                sources[BASELINES[key].paper_name] = values
        except ValueError as error:  # e.g. consis_sem without semantic judgements
            print(f"skipping baseline {name}: {error}")
    for name, column in columns.items():
        sources[name] = _column_confidences(records, name, column, options.records)
    questions = [r.get("question") for r in records]
    unusable = [i for i, q in enumerate(questions) if not isinstance(q, str) or not q.strip()]
    if models and unusable:
        raise ValueError(f"{len(unusable)} test records in {options.records} have no `question` text (first: record "
                         f"{records[unusable[0]].get('id', unusable[0])!r}); a model scores the question.")
    configs = {}
    for name, path in models.items():
        model = AutoModelForConfidence.from_pretrained(path)
        check_records_match(records, model.confidence_config.base_model_name_or_path, options.records,
                            options.allow_other_model)
        sources[name] = model.confidence(questions, batch_size=options.batch_size, progress=True)
        configs[name] = model.confidence_config

    correct = [int(r["greedy_correct"]) for r in records]
    table = evaluate_table(
        correct, [r["dataset"] for r in records], [r["split"] for r in records], sources, bootstrap=options.bootstrap
    )
    decisions = decision_table(correct, [r["split"] for r in records], sources, configs)
    notes = ""
    if decisions:  # the saved answer/abstain rules, applied to these test records
        notes = f"## Decisions at the saved thresholds\n\n{decision_table_to_markdown(decisions)}\n"
    paths = write_report(
        table, options.output_dir, correct=correct, confidences=sources, label_curves=label_curves(table), notes=notes
    )
    if decisions:
        paths["decisions"] = os.path.join(options.output_dir, "decisions.json")
        atomic_write_text(paths["decisions"], json.dumps(decisions, indent=2) + "\n")
        print(decision_table_to_markdown(decisions) + "\n")
    if options.update_model_cards:
        _update_model_cards(models, table, sources, correct, options.records)
    print(table_to_markdown(table, "auroc"))
    print(f"\nReport: {paths['report']} (results.json and plots beside it)")
    return 0


def check_trained_model(path: str, what: str) -> None:
    """Refuse what is not a trained confidence model: a base model (no `confidence_config.json`: it would get a
    freshly initialised, random head), or a saved model that was never trained (no `training_history`, and not a
    converted release)."""
    from elical_hf.auto import find_saved_model
    from elical_hf.model_card import ConfidenceModelCardData
    from elical_hf.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig

    folder = find_saved_model(path)
    if folder is None:
        raise ValueError(
            f"{what}: not a trained confidence model (no {CONFIDENCE_CONFIG_NAME}); a base model would be scored with a "
            "freshly initialised, random head. Pass a model folder written by `elical-hf train` (or convert-official)."
        )
    config = ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))
    if not config.training_history and "converted" not in ConfidenceModelCardData.from_folder(folder).tags:
        raise ValueError(f"{what}: a confidence model that was never trained (empty training_history): its head is "
                         "random. Train it first (`elical-hf train`).")


def _check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuse to write over the results of an earlier evaluation (or any non-empty folder) without `overwrite`."""
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        held = "the results of an earlier run" if os.path.exists(os.path.join(output_dir, "results.json")) else "files"
        raise ValueError(f"--output_dir {output_dir} already holds {held}; use a new folder or pass "
                         "--overwrite_output_dir to replace them.")


def _update_model_cards(models: dict[str, str], table: dict, sources: dict, correct: list[int], records: str) -> None:
    from elical_hf.model_card import RELIABILITY_IMAGE, record_folder_evaluations
    from elical_hf.plots import reliability_diagram

    for name, path in models.items():
        if not os.path.isdir(path):
            print(f"not updating the card of {name}: {path} is not a local folder")
            continue
        reliability_diagram(sources[name], correct, os.path.join(path, RELIABILITY_IMAGE), title=name)
        dataset_id = None if os.path.exists(records) else records
        print(f"card updated: {record_folder_evaluations(path, table[name], dataset_id=dataset_id)}")
