"""Does choosing which questions to label from stage-1 confidences beat labelling a random sample?

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python experiments/label_selection.py --output_dir outputs/gate

On the committed replication records (`docs/results/honestybench-smollm2-135m`, correctness re-judged with
`has_answer` as the main replication does), the shipped stage-1 adapter (`elical_hf/resources/demo/stage1-...`,
trained on 1,600 of the 4,800 train questions; the test questions are a disjoint partition) scores the train pool.
For each label budget and seed, each strategy of `elical_hf.evaluation.label_selection` picks that many train questions, the
stage-1 head is calibrated on their labels alone (head-only, on cached features: `calibrate_head`, the replication's
head settings), and the calibrated model is scored on the 2,050 test questions (in-domain and OOD averages of AUROC,
ECE and alignment, `evaluation.evaluate_table`). A strategy "beats random" at a budget when its AUROC minus
random's, paired by seed (same seed, same stage-1 head), is positive on average *and* in every seed.

Writes `label_selection.json` and `label_selection.md` to `--output_dir`; prompt features are cached there
(`features-*.pt`), so a rerun costs seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any

import numpy as np


HERE = os.path.dirname(os.path.abspath(__file__))
import experiments_common as common  # noqa: E402 - experiments/ and examples/ on the path (the shared module)

RECORDS = common.RECORDS
STAGE1 = os.path.join(HERE, "..", "elical_hf", "resources", "demo", "stage1-smollm2-135m-instruct")
HEAD_SETTINGS = {"learning_rate": 1e-3, "batch_size": 16, "num_train_epochs": 50}
"""The replication's head-only calibration settings (`examples/reproduce_paper.py` defaults)."""


def replication_records(path: str, correctness: str = "has_answer") -> tuple[list[dict], list[dict]]:
    """The replication's train and test records as stored, correctness re-judged by `correctness` (`keep`: the stored
    labels): train sorted by dataset and id, test in-domain first and in file order within a dataset (alignment reads
    it)."""
    from elical_hf.signals.judging import apply_judges
    from elical_hf.signals.records import load_records

    records = load_records(path, derive=False, splits=True).to_list()  # as stored: they are judged again
    if correctness != "keep":
        apply_judges(records, correctness=correctness)
    # `partition` is the replication's own train / dev / test: its dev questions come from the paper's train split
    train = sorted((r for r in records if r["partition"] == "train"), key=lambda r: (r["dataset"], str(r["id"])))
    test = sorted((r for r in records if r["paper_split"] in ("in_domain_test", "ood_test")),  # stable: file order
                  key=lambda r: (r["paper_split"] != "in_domain_test", r["dataset"]))  # within a dataset
    return train, test


def training_rows(records: list[dict], num_samples: int | None = None) -> list[dict]:
    """Rows (`question`, `dataset`, `paper_split`, training columns) of `records` (read with their paper split,
    [`replication_records`]); with `num_samples`, the targets come from each record's first `num_samples` samples."""
    from elical_hf.signals import training_columns

    return [{"question": r["question"], "dataset": r["dataset"], "paper_split": r["paper_split"],
             **training_columns(r, num_samples=num_samples)} for r in records]


def load_replication(
    records_path: str, pool_size: int | None = None, test_per_split: int | None = None, seed: int = 0,
    correctness: str = "has_answer",
) -> tuple[list[dict], list[dict]]:
    """Train and test rows ([`training_rows`]) of the replication records ([`replication_records`]).
    `pool_size` / `test_per_split` keep a seeded random subset of the train rows / of each test split
    (`in_domain_test`, `ood_test`), for a CPU-time budget; `None` keeps all."""
    train, test = (training_rows(part) for part in replication_records(records_path, correctness))
    rng = random.Random(seed)
    if pool_size is not None and pool_size < len(train):
        train = [train[i] for i in sorted(rng.sample(range(len(train)), pool_size))]
    if test_per_split is not None:
        keep = set()
        for split in ("in_domain_test", "ood_test"):
            members = [i for i, r in enumerate(test) if r["paper_split"] == split]
            keep.update(rng.sample(members, min(test_per_split, len(members))))
        test = [r for i, r in enumerate(test) if i in keep]
    return train, test


def cached_features(model: Any, questions: list[str], path: str) -> dict[str, Any]:
    """`model.prompt_features` of `questions` keyed by question, computed once and kept in `path` (a `.pt` file)."""
    import torch

    from elical_hf.utils.atomic import atomic_file

    cache = torch.load(path) if os.path.exists(path) else {}
    missing = list(dict.fromkeys(q for q in questions if q not in cache))
    if missing:
        cache.update(zip(missing, model.prompt_features(missing, batch_size=32, progress=True)))
        with atomic_file(path) as staging:
            torch.save(cache, staging)
    return cache


def test_metrics(test: list[dict], confidences: list[float]) -> dict[str, dict[str, float]]:
    """AUROC, ECE and alignment (x100) of the in-domain and OOD averages."""
    from elical_hf.evaluation.tables import evaluate_table

    table = evaluate_table([r["greedy_correctness"] for r in test], [r["dataset"] for r in test],
                           [r["paper_split"] for r in test], {"m": confidences})["m"]
    return {column: {m: table[column][m] for m in ("auroc", "ece", "alignment")}
            for column in ("in-domain avg", "OOD avg")}


def calibrated_confidences(model: Any, initial_head: dict, features: dict, rows: list[dict], questions: list[str],
                           seed: int, head_settings: dict[str, Any], stage: str = "calibration") -> list[float]:
    """Reset the head to `initial_head`, train it on `rows` (head-only, cached features; `stage="elicitation"`, stage
    1 on consistency targets, for a model without LoRA) and return what it says about `questions`: one run of
    `label_budget_sweep` on labels already drawn."""
    from elical_hf.training.head_calibration import label_budget_sweep

    runs = label_budget_sweep(model, rows, [(len(rows), seed)], features, questions,
                              draw_labels=lambda pool, n, s: pool, start_head=initial_head, stage=stage, **head_settings)
    return next(runs).confidences


def summarize(runs: list[dict], baseline: str, methods: list[str], budgets: list[int]) -> dict[str, Any]:
    """Mean and standard deviation over seeds of each metric, and each method's paired difference from `baseline`."""
    out: dict[str, Any] = {}
    for budget in budgets:
        for method in methods:
            mine = sorted((r for r in runs if r["method"] == method and r["labels"] == budget), key=lambda r: r["seed"])
            ref = sorted((r for r in runs if r["method"] == baseline and r["labels"] == budget), key=lambda r: r["seed"])
            cell: dict[str, Any] = {"seeds": [r["seed"] for r in mine]}
            for column in ("in-domain avg", "OOD avg"):
                for metric in ("auroc", "ece", "alignment"):
                    values = np.array([r["metrics"][column][metric] for r in mine])
                    key = f"{column.removesuffix(' avg')} {metric}"
                    cell[key] = [float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0]
                    if method != baseline:
                        diff = values - np.array([r["metrics"][column][metric] for r in ref])
                        cell[f"{key} - {baseline}"] = [float(d) for d in diff]
            if method != baseline:
                diffs = np.array(cell[f"in-domain auroc - {baseline}"]) + 0.0
                cell["beats_" + baseline] = bool(diffs.mean() > 0 and (diffs > 0).all())
            out[f"{method}@{budget}"] = cell
    return out


def markdown(summary: dict[str, Any], baseline: str, title: str, notes: str) -> str:
    lines = [f"# {title}", "", notes, "",
             "| run | in-domain AUROC | OOD AUROC | in-domain ECE | in-domain alignment | in-domain AUROC − "
             f"{baseline}, per seed | beats {baseline} |", "|---|---:|---:|---:|---:|---|---|"]
    for name, cell in summary.items():
        diff = cell.get(f"in-domain auroc - {baseline}")
        per_seed = ", ".join(f"{d:+.2f}" for d in diff) if diff else "–"
        verdict = ("yes" if cell.get(f"beats_{baseline}") else "no") if diff else "–"
        fmt = lambda key: f"{cell[key][0]:.2f} ± {cell[key][1]:.2f}"  # noqa: E731
        lines.append(f"| {name} | {fmt('in-domain auroc')} | {fmt('OOD auroc')} | {fmt('in-domain ece')} | "
                     f"{fmt('in-domain alignment')} | {per_seed} | {verdict} |")
    return "\n".join(lines) + "\n"


def write_outputs(output_dir: str, stem: str, result: dict[str, Any], text: str) -> None:
    """`<stem>.json` and `<stem>.md` into `output_dir` (atomically), and the Markdown to stdout."""
    from elical_hf.utils.atomic import atomic_write_text

    atomic_write_text(os.path.join(output_dir, f"{stem}.json"), json.dumps(result, indent=2) + "\n")
    atomic_write_text(os.path.join(output_dir, f"{stem}.md"), text)
    print(text)


def add_subset_arguments(parser: argparse.ArgumentParser) -> None:
    """`--pool_size`, `--test_per_split`, `--subset_seed`: the subsets of [`load_replication`]."""
    parser.add_argument("--pool_size", type=int, default=None, help="Train questions kept (default: all 4,800).")
    parser.add_argument("--test_per_split", type=int, default=None,
                        help="Test questions kept per split, in-domain and OOD (default: all 1,000 + 1,050).")
    parser.add_argument("--subset_seed", type=int, default=0, help="Seed of those subsets.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="The replication's HonestyBench records folder.")
    parser.add_argument("--stage1", default=STAGE1, help="The stage-1 (elicitation) model folder.")
    parser.add_argument("--output_dir", default="outputs/gate", help="Results and cached features go here.")
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 250], help="Label budgets.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="Seeds (>= 3).")
    parser.add_argument("--head_epochs", type=int, default=HEAD_SETTINGS["num_train_epochs"])
    add_subset_arguments(parser)
    args = parser.parse_args(argv)

    from elical_hf import AutoModelForConfidence
    from elical_hf.training.head_calibration import confidence_head_module, head_confidences, label_budget_sweep
    from elical_hf.evaluation.label_selection import SELECTION_STRATEGIES, select_for_labelling

    os.makedirs(args.output_dir, exist_ok=True)
    train, test = load_replication(args.records, args.pool_size, args.test_per_split, args.subset_seed)
    model = AutoModelForConfidence.from_pretrained(args.stage1)
    features = cached_features(model, [r["question"] for r in train + test],
                               os.path.join(args.output_dir, "features-stage1.pt"))
    initial = {k: v.clone() for k, v in confidence_head_module(model).state_dict().items()}
    pool_confidences = head_confidences(model, features, [r["question"] for r in train])
    confidence_of = dict(zip((r["question"] for r in train), pool_confidences))
    settings = {**HEAD_SETTINGS, "num_train_epochs": args.head_epochs}
    test_questions = [r["question"] for r in test]
    runs = [{"method": "Eli-Only (stage 1)", "labels": 0, "seed": 0,
             "metrics": test_metrics(test, head_confidences(model, features, test_questions))}]
    draws = [(budget, seed) for budget in args.budgets for seed in args.seeds]
    for strategy in SELECTION_STRATEGIES:

        def chosen(pool: list[dict], budget: int, seed: int, strategy: str = strategy) -> list[dict]:
            return [pool[i] for i in select_for_labelling(pool_confidences, budget, strategy, seed)]

        sweep = label_budget_sweep(model, train, draws, features, test_questions, draw_labels=chosen,
                                   start_head=initial, **settings)  # every run starts from the stage-1 head
        for run in sweep:
            runs.append({"method": strategy, "labels": run.num_labels, "seed": run.seed,
                         "metrics": test_metrics(test, run.confidences),
                         "chosen_mean_confidence": float(np.mean([confidence_of[r["question"]] for r in run.labels]))})
    summary = summarize(runs[1:], "random", list(SELECTION_STRATEGIES), args.budgets)
    result = {"records": os.path.relpath(args.records), "stage1": os.path.relpath(args.stage1),
              "train_pool": len(train), "test": len(test), "subset_seed": args.subset_seed, "head_settings": settings,
              "eli_only": runs[0]["metrics"], "summary": summary, "runs": runs}
    eli = runs[0]["metrics"]["in-domain avg"]["auroc"]
    notes = (f"Stage-1 model `{os.path.relpath(args.stage1)}` (Eli-Only in-domain AUROC {eli:.2f}); pool: "
             f"{len(train)} train questions; test: {len(test)} questions; head-only calibration on cached features "
             f"({settings}); mean ± sd over seeds {args.seeds}; metrics x100.")
    text = markdown(summary, "random", "Which questions to label: stratified by stage-1 confidence vs random", notes)
    write_outputs(args.output_dir, "label_selection", result, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
