"""An experiment beyond the paper: use stage 1 only where the label budget says the teacher is informative.

Design (argued in `docs/results.md`, "Elicit only where the teacher is good"): with a label budget of n questions, the
user has two calibrated models, EliCal@n (stage 1 + stage 2) and Cal-Only@n (stage 2 alone), trained on the same n
labels. `elical_hf.diagnose` computed from **those n labels only** gives a verdict per in-domain dataset. The routed
confidence of a test question is EliCal's where its dataset's verdict is "informative" and Cal-Only's where it is
"weak" or "inverted"; where a dataset has too few labels for a verdict, and for out-of-domain datasets (no labels at
all), the pooled verdict over all n labels decides. Nothing is retrained and no test label is used to route, so the
comparison with EliCal and Cal-Only is fair; it costs training both models.

Reads the replication's per-question confidences (`docs/results/confidences.json`, every seed) and its records (the
same label draws as the runs: `recipe.take_labels(train, n, seed)`), prints a table and writes
`docs/results/routing.json`:

    HF_HUB_OFFLINE=1 python experiments/routing_experiment.py --output_dir outputs/retrain
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import experiments_common as common  # noqa: F401 - experiments/ and examples/ on the path (the shared module)
import reproduce_paper  # noqa: E402 - the replication's partitions and training rows


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "results")
VARIANTS = {"lora": "", "head": "-head"}
"""`lora`: LoRA + head calibration (the reference's recipe); `head`: head-only calibration on cached features."""


def run_name(method: str, n: int, seed: int, main_seed: int = 42) -> str:
    return f"{method}@{n}" if seed == main_seed else f"{method}@{n}~{seed}"


def route(
    labels: list[dict[str, Any]], test_datasets: list[str], elical: list[float], cal_only: list[float],
    bootstrap: int, seed: int,
) -> tuple[list[float], dict[str, str]]:
    """The routed confidences of the test questions and the model chosen per dataset (`EliCal` / `Cal-Only`)."""
    from elical_hf import diagnose

    report = diagnose(labels, bootstrap=bootstrap, seed=seed)
    pooled = report["overall"]["verdict_key"]
    choice = {}
    for name in dict.fromkeys(test_datasets):
        cell = report["datasets"].get(name)
        verdict = cell["verdict_key"] if cell and cell["verdict_key"] != "too_few" else pooled
        choice[name] = "EliCal" if verdict == "informative" else "Cal-Only"
    routed = [e if choice[d] == "EliCal" else c for d, e, c in zip(test_datasets, elical, cal_only)]
    return routed, choice


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/retrain",
                        help="The replication folder whose records.parquet holds the records (made from --records "
                             "if missing).")
    parser.add_argument("--records", default=os.path.join(RESULTS, "honestybench-smollm2-135m"))
    parser.add_argument("--confidences", default=os.path.join(RESULTS, "confidences.json"))
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 250, 1000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--output", default=os.path.join(RESULTS, "routing.json"))
    args = parser.parse_args(argv)

    from elical_hf.evaluation.tables import SEED_INTERVAL, evaluate_table, paired_difference_over_draws
    from elical_hf.training.recipe import take_labels

    _, records, test, committed = reproduce_paper.committed_inputs(args.output_dir, args.records, args.confidences)
    train = [{**row, "dataset": r["dataset"]} for row, r in
             zip(reproduce_paper.rows_of(records, "train"), reproduce_paper.partition(records, "train"))]
    scores = committed["confidences"]
    correct, datasets = committed["correct"], committed["datasets"]
    splits = [r["paper_split"] for r in test]

    out: dict[str, Any] = {"design": __doc__.split("\n\n")[1], "budgets": args.budgets, "seeds": args.seeds,
                           "runs": {}, "differences": {}}
    lines = ["| calibration | labels | seeds | Routed − EliCal, in-domain | Routed − Cal-Only, in-domain | "
             "Routed − EliCal, OOD | Routed − Cal-Only, OOD | Routed AUROC in-domain / OOD | on EliCal in-domain / OOD |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for variant, suffix in VARIANTS.items():
        for n in args.budgets:
            seeds = [s for s in args.seeds if run_name(f"EliCal{suffix}", n, s) in scores
                     and run_name(f"Cal-Only{suffix}", n, s) in scores]
            if not seeds:
                print(f"(no {variant} runs at {n} labels in {args.confidences}: skipped)")
                continue
            routed, elical, cal_only = [], [], []
            for seed in seeds:
                labels = list(take_labels(train, n, seed))
                e, c = scores[run_name(f"EliCal{suffix}", n, seed)], scores[run_name(f"Cal-Only{suffix}", n, seed)]
                mixed, choice = route(labels, datasets, e, c, args.bootstrap, seed)
                routed.append(mixed)
                elical.append(e)
                cal_only.append(c)
                table = evaluate_table(correct, datasets, splits, {"Routed": mixed})["Routed"]
                out["runs"][f"Routed{suffix}@{n}~{seed}"] = {
                    "choice": choice, **{column: {k: table[column][k] for k in ("auroc", "ece", "alignment")}
                                         for column in ("in-domain avg", "OOD avg")}}
            cells, key = [], f"{variant}@{n}"
            out["differences"][key] = {"seeds": seeds}
            diffs = {other: paired_difference_over_draws(correct, datasets, splits, routed, draws, args.bootstrap, 42)
                     for other, draws in (("EliCal", elical), ("Cal-Only", cal_only))}
            for column in ("in-domain avg", "OOD avg"):
                for other, diff in diffs.items():
                    cell = out["differences"][key][f"Routed - {other}, {column}"] = diff[column]
                    cells.append(f"{cell['auroc']:+.1f} [{cell['auroc_ci'][0]:+.1f}, {cell['auroc_ci'][1]:+.1f}]")
            absolute = [sum(out["runs"][f"Routed{suffix}@{n}~{s}"][column]["auroc"] for s in seeds) / len(seeds)
                        for column in ("in-domain avg", "OOD avg")]
            # share of test questions whose confidence came from EliCal, over the seeds
            shares = [100 * sum(out["runs"][f"Routed{suffix}@{n}~{s}"]["choice"][d] == "EliCal"
                                for s in seeds for d, part in zip(datasets, splits) if part == split)
                      / (len(seeds) * splits.count(split)) for split in ("in_domain_test", "ood_test")]
            lines.append(f"| {'LoRA + head' if variant == 'lora' else 'head only'} | {n} | "
                         f"{', '.join(map(str, seeds))} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | "
                         f"{absolute[0]:.1f} / {absolute[1]:.1f} | {shares[0]:.0f}% / {shares[1]:.0f}% |")
    print(f"AUROC differences x100, the mean over seeds with its {SEED_INTERVAL}:\n")
    print("\n".join(lines))
    out["table"] = "\n".join(lines)
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(out, handle, indent=2)
        handle.write("\n")


if __name__ == "__main__":
    main()
