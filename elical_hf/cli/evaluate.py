"""`elical-hf evaluate`: test records + confidence sources -> the paper's table (JSON + Markdown) and plots.

For each `--model` with a saved `decision_threshold` it also reports what that answer/abstain rule does on the test
records: the error rate among answered questions and the coverage (`decisions.json`, and a table in `report.md`),
next to the alpha a risk-controlled threshold was chosen to guarantee."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .parser import ElicalArgumentParser


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
    update_model_cards: bool = field(
        default=False,
        metadata={"help": "Also record each --model folder's results (per dataset and averages) and its reliability "
                  "diagram in that folder's model card (README.md model-index), ready for `elical-hf push`."},
    )


def _pairs(items: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{what} must look like NAME=VALUE, got {item!r}.")
        pairs[name] = value
    return pairs


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
    from elical_hf.auto import AutoModelForConfidence
    from elical_hf.atomic import atomic_write_text
    from elical_hf.evaluation import (
        decision_table, decision_table_to_markdown, evaluate_table, table_to_markdown, write_report,
    )
    from elical_hf.signals.baselines import BASELINES, compute_baselines
    from elical_hf.signals.honestybench import load_honestybench

    (options,) = make_parser().parse_with_config(argv)
    models, columns = _pairs(options.model, "--model"), _pairs(options.field_sources, "--field_sources")
    loaded = load_honestybench(options.records)
    tests = [name for name in ("in_domain_test", "ood_test") if name in loaded]
    if not tests:
        raise ValueError(f"{options.records} holds no in_domain_test or ood_test records (found {list(loaded)}).")
    records = [dict(row, split=split) for split in tests for row in loaded[split]]
    records = [r for r in records if r.get("greedy_correct") is not None]
    if not records:
        raise ValueError("No test record has a judged greedy answer (`greedy_correctness`); run `elical-hf judge`.")

    sources: dict[str, list[float]] = {}
    for name in [b.strip() for b in options.baselines.split(",") if b.strip()]:
        try:
            for key, values in compute_baselines(records, which=[name], progress=False).items():
                sources[BASELINES[key].paper_name] = values
        except ValueError as error:  # e.g. consis_sem without semantic judgements
            print(f"skipping baseline {name}: {error}")
    for name, column in columns.items():
        sources[name] = [float(r[column]) for r in records]
    questions = [r["question"] for r in records]
    configs = {}
    for name, path in models.items():
        model = AutoModelForConfidence.from_pretrained(path)
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


def _update_model_cards(models: dict[str, str], table: dict, sources: dict, correct: list[int], records: str) -> None:
    from elical_hf.cards import RELIABILITY_IMAGE, record_folder_evaluations
    from elical_hf.plots import reliability_diagram

    for name, path in models.items():
        if not os.path.isdir(path):
            print(f"not updating the card of {name}: {path} is not a local folder")
            continue
        reliability_diagram(sources[name], correct, os.path.join(path, RELIABILITY_IMAGE), title=name)
        dataset_id = None if os.path.exists(records) else records
        print(f"card updated: {record_folder_evaluations(path, table[name], dataset_id=dataset_id)}")
