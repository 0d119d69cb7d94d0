"""LoRA + head trained at a middle layer against the final layer: the replication's runs, paired, with intervals.

    # the runs at layer 16 (float32, as the committed runs; stage 1 once, then EliCal and Cal-Only at 100 and 1,000
    # labels for seeds 42, 43, 44: the committed label draws and training order)
    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 OMP_NUM_THREADS=1 python examples/reproduce_paper.py \
        --output_dir outputs/layer16-lora --records docs/results/honestybench-smollm2-135m --feature_layer 16 \
        --steps train --calibration lora --label_budgets 100 1000 --seeded_budgets 100 1000 \
        --lora_methods EliCal Cal-Only

Each run of `--runs` (`reproduce_paper.py`'s `runs/<name>.json`: test confidences in the committed test order; or a
`lora_layer_runs.json` this script wrote, the runs' confidences as committed) is paired with the run of the same name
in `--confidences` (the committed `confidences.json`, the final layer): the same labels, seed and training order, only
the layer the head reads (and that LoRA stops at) differs. Reported, AUROC x100 as the mean per-dataset AUROC in domain
and out of domain:
- each run at both layers and their difference (this layer − final);
- the method against its baseline at this layer, EliCal@n − Cal-Only@n (the paper's few-label claim), and against
  `--baseline_runs`, Cal-Only drawn with another head init at this layer (`reproduce_paper.py
  --lora_baseline_head_init torch_default`: is the baseline handicapped by its init here?);
each difference the mean over seeds with its two-level bootstrap interval (seeds, then test questions, resampled:
`evaluation.paired_difference_over_draws`), at 95% and at the Bonferroni level of every cell the table shows read
together (`1 - 0.05 / cells`). Writes `lora_layer.json`, `lora_layer.md` and `lora_layer_runs.json` (the runs'
per-question confidences, so the tables recompute without training):

    # Cal-Only@100 at layer 16 with the reference's head init, then the comparison
    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 python examples/reproduce_paper.py --output_dir outputs/layer16-lora-fair \
        --records docs/results/honestybench-smollm2-135m --feature_layer 16 --steps train --calibration lora \
        --label_budgets 100 --seeded_budgets 100 --lora_methods Cal-Only --lora_baseline_head_init torch_default
    python experiments/layer_lora_check.py --runs outputs/layer16-lora/runs \
        --baseline_runs outputs/layer16-lora-fair/runs --output_dir docs/results/layers
    # the tables again from the committed confidences alone
    python experiments/layer_lora_check.py --runs docs/results/layers/lora_layer_runs.json \
        --output_dir docs/results/layers
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
    parser.add_argument("--runs", required=True, help="reproduce_paper.py's runs/ folder of the other layer, or the "
                        "lora_layer_runs.json this script wrote.")
    parser.add_argument("--confidences", default=COMMITTED, help="The final layer's runs (a confidences.json).")
    parser.add_argument("--layer", type=int, default=16, help="The layer the --runs read (for the report).")
    parser.add_argument("--output_dir", required=True, help="Where lora_layer.json, .md and _runs.json go.")
    parser.add_argument("--bootstrap", type=int, default=10000,
                        help="Resamples of the paired intervals (the corrected level's tails need many).")
    parser.add_argument("--seed", type=int, default=42, help="Seed of the resamples.")
    parser.add_argument("--baseline_runs", default=None,
                        help="More Cal-Only runs at this layer with another fresh head (reproduce_paper.py "
                        "--lora_baseline_head_init): compared with EliCal at this layer too, as Cal-Only/<init>.")
    parser.add_argument("--baseline_init", default="torch_default", help="The head init of --baseline_runs.")
    return parser.parse_args(argv)


def methods_of(names: list[str]) -> dict[str, list[str]]:
    """Run names grouped by method and budget, seeds together: `{"EliCal@100": ["EliCal@100", "EliCal@100~43"]}`."""
    groups: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda n: (n.split("~")[0], int(n.split("~")[1]) if "~" in n else 0)):
        groups.setdefault(name.split("~")[0], []).append(name)
    return groups


def contrasts_of(groups: dict[str, list[str]]) -> list[tuple[str, str]]:
    """`(EliCal@n, Cal-Only...@n)` for each budget and each Cal-Only (`Cal-Only@n`, `Cal-Only/<init>@n`) that ran with
    the same seeds as EliCal."""
    def seeds(method: str) -> list[str]:
        return [name.removeprefix(method) for name in groups[method]]

    return [(method, other) for method in groups if method.startswith("EliCal@") for other in groups
            if other.startswith("Cal-Only") and other.split("@")[1] == method.split("@")[1]
            and seeds(other) == seeds(method)]


def cells_of(groups: dict[str, list[str]], paired: int) -> int:
    """How many differences the report shows (each of the `paired` runs' against the final layer and each contrast's,
    in domain and OOD): the family the Bonferroni level corrects for."""
    return len(COLUMNS) * (paired + len(contrasts_of(groups)))


def baseline_name(name: str, init: str) -> str:
    """`Cal-Only@100~43` of the --baseline_runs as `Cal-Only/<init>@100~43`."""
    method, _, rest = name.partition("@")
    return f"{method}/{init}@{rest}"


def compare(runs: dict[str, list[float]], committed: dict[str, Any], bootstrap: int, seed: int) -> dict[str, Any]:
    """`rows`: each method's AUROC at both layers (mean over seeds) and the paired difference (this layer − final);
    `contrasts`: EliCal@n − Cal-Only@n at this layer and at the final one; every difference at 95% and at the
    Bonferroni `level` of all of them."""
    from elical_hf.data.questions import IN_DOMAIN_DATASETS
    from elical_hf.evaluation.tables import evaluate_table, paired_difference_over_draws

    correct, datasets = committed["correct"], committed["datasets"]
    splits = ["in_domain_test" if d in IN_DOMAIN_DATASETS else "ood_test" for d in datasets]
    missing = sorted(name for name in set(runs) - set(committed["confidences"]) if "/" not in name.split("@")[0])
    if missing:
        raise SystemExit(f"The final layer has no run named {', '.join(missing)} to pair with.")
    groups = methods_of(list(runs))
    paired = [method for method in groups if all(n in committed["confidences"] for n in groups[method])]
    level = 1 - 0.05 / cells_of(groups, len(paired))

    def difference(a: list[list[float]], b: list[list[float]]) -> dict[str, dict[str, Any]]:
        wide = paired_difference_over_draws(correct, datasets, splits, a, b, bootstrap, seed, level=level)
        plain = paired_difference_over_draws(correct, datasets, splits, a, b, bootstrap, seed)
        return {column: {"difference": plain[column]["auroc"], "interval": plain[column]["auroc_ci"],
                         "corrected_interval": wide[column]["auroc_ci"], "per_seed": plain[column]["auroc_per_draw"]}
                for column in COLUMNS}

    def mean_auroc(draws: list[list[float]], column: str) -> float:
        table = evaluate_table(correct, datasets, splits, {str(i): d for i, d in enumerate(draws)})
        return sum(row[column]["auroc"] for row in table.values()) / len(table)

    def here(method: str) -> list[list[float]]:
        return [runs[n] for n in groups[method]]

    def final(method: str) -> list[list[float]]:
        return [committed["confidences"][n] for n in groups[method]]

    rows = []
    for method in paired:
        diff = difference(here(method), final(method))
        rows.append({"method": method, "seeds": len(groups[method]), **{column: {
            "layer": mean_auroc(here(method), column), "final": mean_auroc(final(method), column), **diff[column]}
            for column in COLUMNS}})
    contrasts = [{"pair": f"{a} − {b}", "seeds": len(groups[a]), "layer": difference(here(a), here(b)),
                  "final": difference(final(a), final(b)) if b in paired else None}
                 for a, b in contrasts_of(groups)]
    return {"level": level, "cells": cells_of(groups, len(paired)), "rows": rows, "contrasts": contrasts}


def load_runs(path: str, ids: list[str]) -> dict[str, list[float]]:
    """The runs of `path` by name: `runs/<name>.json` of a folder, or a `lora_layer_runs.json`; each must score the
    test questions `ids` in that order."""
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
        if saved["ids"] != ids:
            raise SystemExit(f"{path} scores other test questions than the committed runs.")
        return saved["confidences"]
    runs = {}
    for file in sorted(os.listdir(path)):
        if file.endswith(".json"):
            with open(os.path.join(path, file), encoding="utf-8") as handle:
                run = json.load(handle)
            if run["test_ids"] != ids:
                raise SystemExit(f"{file} scores other test questions than the committed runs.")
            runs[run["name"]] = run["confidences"]
    if not runs:
        raise SystemExit(f"{path} holds no runs.")
    return runs


def interval(cell: dict[str, Any], key: str = "interval") -> str:
    low, high = cell[key]
    return f"[{low:+.1f}, {high:+.1f}]"


def markdown(result: dict[str, Any]) -> str:
    """The two tables: each run at this layer against the final one, and EliCal − Cal-Only at both layers."""
    layer, level = result["layer"], f"{100 * result['level']:.2f}%"
    lines = [f"| run | in domain: layer {layer} | final | {layer} − final [95%] | [{level}] | per seed | OOD: layer "
             f"{layer} | final | {layer} − final [95%] | [{level}] | per seed |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for row in result["rows"]:
        cells = []
        for column in COLUMNS:
            cell = row[column]
            cells += [f"{cell['layer']:.1f}", f"{cell['final']:.1f}", f"{cell['difference']:+.1f} {interval(cell)}",
                      interval(cell, "corrected_interval"), ", ".join(f"{x:+.1f}" for x in cell["per_seed"])]
        lines.append(f"| {row['method']} | " + " | ".join(cells) + " |")
    lines += ["", f"| seeds paired | in domain: layer {layer} [95%] | [{level}] | final [95%] | OOD: layer {layer} "
              f"[95%] | [{level}] | final [95%] |", "|---|---:|---:|---:|---:|---:|---:|"]
    for contrast in result["contrasts"]:
        cells = []
        for column in COLUMNS:
            at = contrast["layer"][column]
            last = contrast["final"] and contrast["final"][column]
            cells += [f"{at['difference']:+.1f} {interval(at)}", interval(at, "corrected_interval"),
                      f"{last['difference']:+.1f} {interval(last)}" if last else "–"]
        lines.append(f"| {contrast['pair']} ({contrast['seeds']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.utils.atomic import atomic_write_json, atomic_write_text

    args = parse_args(argv)
    with open(args.confidences, encoding="utf-8") as handle:
        committed = json.load(handle)
    runs = load_runs(args.runs, committed["ids"])
    if args.baseline_runs:
        runs.update({baseline_name(name, args.baseline_init): values
                     for name, values in load_runs(args.baseline_runs, committed["ids"]).items()})
    result = {"layer": args.layer, "bootstrap": args.bootstrap, "seed": args.seed,
              **compare(runs, committed, args.bootstrap, args.seed)}
    os.makedirs(args.output_dir, exist_ok=True)
    saved = os.path.join(args.output_dir, "lora_layer_runs.json")
    if os.path.abspath(args.runs) != os.path.abspath(saved):
        atomic_write_json(saved, {"layer": args.layer, "ids": committed["ids"], "confidences": runs})
    atomic_write_json(os.path.join(args.output_dir, "lora_layer.json"), result)
    atomic_write_text(os.path.join(args.output_dir, "lora_layer.md"),
                      f"# LoRA + head at layer {args.layer} against the final layer\n\n{markdown(result)}\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
