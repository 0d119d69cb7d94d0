"""How often does `elical-hf diagnose`, computed from a label budget alone, predict whether EliCal beats Cal-Only?

On the CPU-scale replication (`docs/results/`): for each label budget and each of `--draws` random label draws from
the 4,800 train questions, the diagnosis is computed from **only those labels** (per in-domain dataset: the teacher's
AUROC, consistency vs greedy correctness, with its interval and verdict). An "informative" verdict predicts EliCal −
Cal-Only > 0 on that dataset's test questions, "weak" or "inverted" predicts < 0, "too few" predicts nothing. The truth
is the sign of the per-dataset difference the replication measured at that budget (`differences.json`, seed 42).
Prints the full-partition diagnosis, then the hit rate per budget (Wilson 95% interval) next to chance and to always
predicting the most common sign; writes `docs/results/diagnosis_validation.json`.

    python experiments/diagnose_validation.py                  # budgets 100 250 1000, 10 draws each
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from collections import Counter


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "results")
RECORDS = os.path.join(RESULTS, "honestybench-smollm2-135m")
PREDICTS = {"informative": 1, "weak": -1, "inverted": -1}


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion, in percent."""
    if n == 0:
        return float("nan"), float("nan")
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * (centre - half), 100 * (centre + half)


def explanation_table(full: dict, differences: dict) -> str:
    """Per in-domain dataset: the teacher (train partition), Eli-Only's test AUROC, and EliCal − Cal-Only at every
    budget (seed 42, LoRA + head; head-only at 100) with its interval."""
    with open(os.path.join(RESULTS, "results.json"), encoding="utf-8") as handle:
        results = json.load(handle)

    def diff(key: str, name: str) -> str:
        cell = differences.get(key, {}).get(name)
        return f"{cell['auroc']:+.1f} [{cell['auroc_ci'][0]:+.1f}, {cell['auroc_ci'][1]:+.1f}]" if cell else "—"

    budgets = [n for n in (100, 250, 500, 1000) if f"EliCal@{n} − Cal-Only@{n}" in differences]
    lines = ["| dataset | teacher AUROC (train) | Eli-Only AUROC (test) | "
             + " | ".join(f"EliCal − Cal-Only @{n}" for n in budgets) + " | head-only @100 |",
             "|---|---:|---:|" + "---:|" * (len(budgets) + 1)]
    for name, cell in full["datasets"].items():
        teacher = f"{cell['auroc']:.1f} [{cell['auroc_ci'][0]:.1f}, {cell['auroc_ci'][1]:.1f}]"
        cells = [diff(f"EliCal@{n} − Cal-Only@{n}", name) for n in budgets]
        lines.append(f"| {name} | {teacher} | {results['Eli-Only'][name]['auroc']:.1f} | " + " | ".join(cells)
                     + f" | {diff('EliCal-head@100 − Cal-Only-head@100', name)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 250, 1000])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--bootstrap", type=int, default=500)
    parser.add_argument("--variant", default="", choices=["", "-head"],
                        help="'' compares the LoRA + head rows (the reference's recipe), '-head' the head-only rows")
    parser.add_argument("--output", default=os.path.join(RESULTS, "diagnosis_validation.json"))
    args = parser.parse_args(argv)

    from elical_hf import diagnose
    from elical_hf.evaluation.diagnosis import diagnosis_to_markdown
    from elical_hf.signals import load_honestybench

    train = load_honestybench(RECORDS, split="train", progress=False)["train"]
    rows = [{"dataset": r["dataset"], "consistency": r["consistency"], "greedy_correctness": r["greedy_correctness"]}
            for r in train]
    with open(os.path.join(RESULTS, "differences.json"), encoding="utf-8") as handle:
        differences = json.load(handle)

    full = diagnose(rows, bootstrap=1000)
    print(f"The teacher on the whole train partition ({len(rows)} questions):\n")
    print(diagnosis_to_markdown(full) + "\n")
    out = {"full_partition": full, "budgets": {}, "variant": args.variant or "lora"}
    print(explanation_table(full, differences) + "\n")
    table = []
    for n in args.budgets:
        key = f"EliCal{args.variant}@{n} − Cal-Only{args.variant}@{n}"
        if key not in differences:
            print(f"(no {key} in differences.json: budget {n} skipped)")
            continue
        truth = {name: 1 if cell["auroc"] > 0 else -1 for name, cell in differences[key].items()
                 if name in full["datasets"]}
        hits = made = abstained = 0
        verdicts: Counter = Counter()
        for draw in range(args.draws):
            labels = random.Random(1000 * n + draw).sample(rows, n)
            report = diagnose(labels, bootstrap=args.bootstrap, seed=draw)
            for name, sign in truth.items():
                cell = report["datasets"].get(name)
                verdict = cell["verdict_key"] if cell else "too_few"
                verdicts[verdict] += 1
                if verdict not in PREDICTS:
                    abstained += 1
                    continue
                made += 1
                hits += PREDICTS[verdict] == sign
        majority = max(Counter(truth.values()).values()) / len(truth)
        low, high = wilson(hits, made)
        out["budgets"][n] = {"truth": truth, "hits": hits, "predictions": made, "abstained": abstained,
                             "hit_rate": 100 * hits / made if made else None, "hit_rate_ci": [low, high],
                             "majority_rate": 100 * majority, "verdicts": dict(verdicts)}
        rate = f"{100 * hits / made:.0f}% [{low:.0f}, {high:.0f}]" if made else "—"
        table.append(f"| {n} | {' '.join(f'{k}{v:+d}' for k, v in truth.items())} | {made} | {abstained} | {rate} | "
                     f"{100 * majority:.0f}% |")
    print(f"Hit rate of the verdict from the label budget alone ({args.draws} draws per budget; truth: sign of "
          f"EliCal{args.variant} − Cal-Only{args.variant} per dataset, seed 42):\n")
    print("| labels | truth (sign per dataset) | predictions | no verdict | hit rate [95%] | always the majority sign |")
    print("|---:|---|---:|---:|---:|---:|")
    print("\n".join(table))
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(out, handle, indent=2)
        handle.write("\n")


if __name__ == "__main__":
    main()
