"""LoRA + head trained at a middle layer against the final layer: the replication's runs, paired, with intervals.

    # the runs at layer 16 (float32, as the committed runs; stage 1 once, then EliCal and Cal-Only at 100 and 1,000
    # labels for seeds 42, 43, 44: the committed label draws and training order)
    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 OMP_NUM_THREADS=1 python examples/reproduce_paper.py \
        --output_dir outputs/layer16-lora --records docs/results/honestybench-smollm2-135m --feature_layer 16 \
        --steps train --calibration lora --label_budgets 100 1000 --seeded_budgets 100 1000 \
        --lora_methods EliCal Cal-Only
    # the comparison
    python experiments/layer_lora_check.py --runs outputs/layer16-lora/runs --output_dir docs/results/layers

Each run of `--runs` (`reproduce_paper.py`'s `runs/<name>.json`: test confidences in the committed test order) is
paired with the run of the same name in `--confidences` (the committed `confidences.json`, the final layer): the same
labels, seed and training order, only the layer the head reads (and that LoRA stops at) differs. Reported: the mean
per-dataset AUROC x100 in domain and out of domain of both, and their difference (mean over seeds) with its 95%
two-level bootstrap interval (seeds, then test questions, resampled: `evaluation.paired_difference_over_draws`).
Writes `lora_layer.json` and `lora_layer.md`.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


HERE = os.path.dirname(os.path.abspath(__file__))
COMMITTED = os.path.join(HERE, "..", "docs", "results", "confidences.json")
COLUMNS = ("in-domain avg", "OOD avg")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="reproduce_paper.py's runs/ folder of the other layer.")
    parser.add_argument("--confidences", default=COMMITTED, help="The final layer's runs (a confidences.json).")
    parser.add_argument("--layer", type=int, default=16, help="The layer the --runs read (for the report).")
    parser.add_argument("--output_dir", required=True, help="Where lora_layer.json and lora_layer.md go.")
    parser.add_argument("--bootstrap", type=int, default=1000, help="Resamples of the paired intervals.")
    parser.add_argument("--seed", type=int, default=42, help="Seed of the resamples.")
    return parser.parse_args(argv)


def methods_of(names: list[str]) -> dict[str, list[str]]:
    """Run names grouped by method and budget, seeds together: `{"EliCal@100": ["EliCal@100", "EliCal@100~43"]}`."""
    groups: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda n: (n.split("~")[0], int(n.split("~")[1]) if "~" in n else 0)):
        groups.setdefault(name.split("~")[0], []).append(name)
    return groups


def compare(runs: dict[str, list[float]], committed: dict[str, Any], bootstrap: int, seed: int) -> list[dict[str, Any]]:
    """One row per method: AUROC of both layers (mean over seeds) and the paired difference (this layer − final)."""
    from elical_hf.bundled import IN_DOMAIN_DATASETS
    from elical_hf.evaluation import evaluate_table, paired_difference_over_draws

    correct, datasets = committed["correct"], committed["datasets"]
    splits = ["in_domain_test" if d in IN_DOMAIN_DATASETS else "ood_test" for d in datasets]
    missing = sorted(set(runs) - set(committed["confidences"]))
    if missing:
        raise SystemExit(f"The final layer has no run named {', '.join(missing)} to pair with.")
    rows = []
    for method, names in methods_of(list(runs)).items():
        mine, final = [runs[n] for n in names], [committed["confidences"][n] for n in names]
        difference = paired_difference_over_draws(correct, datasets, splits, mine, final, bootstrap, seed)

        def mean_auroc(draws: list[list[float]], column: str) -> float:
            table = evaluate_table(correct, datasets, splits, {str(i): d for i, d in enumerate(draws)})
            return sum(row[column]["auroc"] for row in table.values()) / len(table)

        rows.append({"method": method, "seeds": len(names), **{column: {
            "layer": mean_auroc(mine, column), "final": mean_auroc(final, column),
            "difference": difference[column]["auroc"], "interval": difference[column]["auroc_ci"],
            "per_seed": difference[column]["auroc_per_draw"]} for column in COLUMNS}})
    return rows


def load_runs(folder: str, ids: list[str]) -> dict[str, list[float]]:
    """`runs/<name>.json` of `folder` by name; each must score the test questions `ids` in that order."""
    runs = {}
    for file in sorted(os.listdir(folder)):
        if file.endswith(".json"):
            with open(os.path.join(folder, file), encoding="utf-8") as handle:
                run = json.load(handle)
            if run["test_ids"] != ids:
                raise SystemExit(f"{file} scores other test questions than the committed runs.")
            runs[run["name"]] = run["confidences"]
    if not runs:
        raise SystemExit(f"{folder} holds no runs.")
    return runs


def markdown(result: dict[str, Any]) -> str:
    layer = result["layer"]
    lines = [f"| run (seeds) | in domain: layer {layer} | final | difference [95%] | OOD: layer {layer} | final "
             "| difference [95%] |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        cells = []
        for column in COLUMNS:
            cell = row[column]
            low, high = cell["interval"]
            cells += [f"{cell['layer']:.1f}", f"{cell['final']:.1f}",
                      f"{cell['difference']:+.1f} [{low:+.1f}, {high:+.1f}]"]
        lines.append(f"| {row['method']} ({row['seeds']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.atomic import atomic_write_json, atomic_write_text

    args = parse_args(argv)
    with open(args.confidences, encoding="utf-8") as handle:
        committed = json.load(handle)
    runs = load_runs(args.runs, committed["ids"])
    result = {"layer": args.layer, "runs": os.path.relpath(args.runs), "bootstrap": args.bootstrap,
              "rows": compare(runs, committed, args.bootstrap, args.seed)}
    os.makedirs(args.output_dir, exist_ok=True)
    atomic_write_json(os.path.join(args.output_dir, "lora_layer.json"), result)
    atomic_write_text(os.path.join(args.output_dir, "lora_layer.md"),
                      f"# LoRA + head at layer {args.layer} against the final layer\n\n{markdown(result)}\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
