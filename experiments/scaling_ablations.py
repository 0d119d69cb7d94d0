"""The paper's two scaling ablations at CPU scale: the number of samples k' behind the targets, and stage 1's size N.

    HF_HUB_OFFLINE=1 python experiments/scaling_ablations.py --output_dir outputs/gate
    HF_HUB_OFFLINE=1 python examples/reproduce_paper.py --records docs/results/honestybench-smollm2-135m \
        --output_dir outputs/retrain --steps ablations          # the same, as a step of the replication

- **k ablation.** The replication's records hold k = 5 samples per question. For k' in {1, 2, 3, 5}, every target
  is derived from the first k' of them (`training_columns(record, num_samples=k')`, what
  `load_records(..., num_samples=k')` and `elical-hf train --num_samples_used k'` do): stage 1's consistency targets,
  stage 2's correctness targets, and Consis-Sem itself. Reported: Consis-Sem, Eli-Only, EliCal@100, EliCal@1000.
- **Elicitation-data size.** Stage 1 on a seeded random N of the 4,800 train questions (`recipe.take_elicitation`,
  what `train_elical(..., num_elicitation=N)` / `--num_elicitation N` do), N in {600, 1200, 2400, 4800}, then
  EliCal@100. Reported: Eli-Only and EliCal@100.

Every stage here trains the **head alone on the frozen base model** (`use_lora=False`, cached prompt features:
`docs/gate.md`'s zero-overhead model), not LoRA + head: a LoRA + head stage 1 on 4,800 questions takes 38 minutes on 2
cores, and these tables need 28 of them. The head-only regime is the cheaper of the paper's two; whether the curves
keep their shape with LoRA is not measured here. Each seed (default 42, 43, 44) draws its own stage-1 subset, label
subset and row order. Test: the replication's 2,050 test questions, correctness re-judged by `has_answer`.

Writes `ablations.json` and `ablations.md` to `--output_dir` (and `--result`, default
`docs/results/ablations.json`); the prompt features are cached there as `features-base.pt` (shared with
`experiments/no_lora_head.py`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


HERE = os.path.dirname(os.path.abspath(__file__))
import experiments_common as common  # noqa: E402,F401 - experiments/ and examples/ on the path (the shared module)
import reproduce_paper  # noqa: E402 - the replication's head-only baseline init
from label_selection import (  # noqa: E402 - the shared helpers of the head-only measurements
    HEAD_SETTINGS, RECORDS, cached_features, calibrated_confidences, replication_records, test_metrics, training_rows,
    write_outputs,
)


RESULTS = os.path.join(HERE, "..", "docs", "results")
SAMPLES_USED = (1, 2, 3, 5)
ELICITATION_SIZES = (600, 1200, 2400, 4800)


def mean_sd(runs: list[dict], column: str, metric: str = "auroc") -> dict[str, Any]:
    """Mean and standard deviation over seeds of one metric of `runs`, and the per-seed values."""
    import numpy as np

    values = np.array([run[column][metric] for run in runs], dtype=float)  # NaN (one class) stays NaN
    return {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "per_seed": values.tolist()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="The replication's HonestyBench records folder.")
    parser.add_argument("--base", default=None, help="The base model (default: the embedded DEFAULT_MODEL).")
    parser.add_argument("--output_dir", default="outputs/gate", help="Results and cached features go here.")
    parser.add_argument("--result", default=os.path.join(RESULTS, "ablations.json"),
                        help="Where the result JSON is also written ('' for nowhere else).")
    parser.add_argument("--correctness", default="has_answer",
                        help="Correctness judge the records are re-judged with (`keep`: their stored labels).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--samples_used", type=int, nargs="+", default=list(SAMPLES_USED), help="k' values.")
    parser.add_argument("--elicitation_sizes", type=int, nargs="+", default=list(ELICITATION_SIZES), help="N values.")
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 1000], help="EliCal label budgets (k').")
    parser.add_argument("--head_epochs", type=int, default=HEAD_SETTINGS["num_train_epochs"])
    parser.add_argument("--bootstrap", type=int, default=1000,
                        help="Resamples of the paired intervals (0: none), over test questions and seeds.")
    args = parser.parse_args(argv)

    import torch

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence
    from elical_hf.training.head_calibration import confidence_head_module
    from elical_hf.training.recipe import take_elicitation, take_labels
    from elical_hf.signals.baselines import consis_sem
    from elical_hf.signals.records import first_samples

    os.makedirs(args.output_dir, exist_ok=True)
    train_records, test_records = replication_records(args.records, args.correctness)
    settings = {**HEAD_SETTINGS, "num_train_epochs": args.head_epochs}
    torch.manual_seed(args.seeds[0])  # the fresh head every stage 1 starts from (torch seeds a process at random)
    model = AutoModelForConfidence.from_pretrained(args.base or DEFAULT_MODEL, use_lora=False)
    questions = [r["question"] for r in train_records + test_records]
    features = cached_features(model, questions, os.path.join(args.output_dir, "features-base.pt"))
    fresh = {k: v.clone() for k, v in confidence_head_module(model).state_dict().items()}  # stage 1's start
    baseline = reproduce_paper.redraw_head(model, args.seeds[0])  # Cal-Only@100's start: the reference's head
    test_questions = [r["question"] for r in test_records]

    def run(start: dict, rows_used: list[dict], seed: int, stage: str) -> tuple[list[float], dict]:
        """A head from `start` trained on `rows_used` (consistency targets in stage 1, correctness in stage 2): its
        test confidences and its weights."""
        confidences = calibrated_confidences(model, start, features, rows_used, test_questions, seed, settings, stage)
        return confidences, {k: v.clone() for k, v in confidence_head_module(model).state_dict().items()}

    def entry(confidences: list[float], **fields: Any) -> dict:
        return {**fields, "metrics": test_metrics(test, confidences), "confidences": confidences}

    k_runs: list[dict] = []
    for k in args.samples_used:
        train, test = training_rows(train_records, k), training_rows(test_records, k)
        k_runs.append(entry(consis_sem([first_samples(r, k) for r in test_records]), k=k, method="Consis-Sem",
                            seed=None))
        for seed in args.seeds:
            confidences, head = run(fresh, train, seed, "elicitation")
            k_runs.append(entry(confidences, k=k, method="Eli-Only", seed=seed))
            for budget in args.budgets:
                labels = take_labels(train, budget, seed).to_list()
                k_runs.append(entry(run(head, labels, seed, "calibration")[0], k=k, method=f"EliCal@{budget}",
                                    seed=seed))
        print(f"k'={k}: done", flush=True)
    n_runs: list[dict] = []
    train, test = training_rows(train_records, max(args.samples_used)), training_rows(test_records, max(args.samples_used))
    for size in args.elicitation_sizes:
        for seed in args.seeds:
            confidences, head = run(fresh, take_elicitation(train, size, seed).to_list(), seed, "elicitation")
            n_runs.append(entry(confidences, N=size, method="Eli-Only", seed=seed))
            labels = take_labels(train, 100, seed).to_list()
            n_runs.append(entry(run(head, labels, seed, "calibration")[0], N=size, method="EliCal@100", seed=seed))
        print(f"N={size}: done", flush=True)
    for seed in args.seeds:  # Cal-Only-head: what the labels alone give, for the EliCal rows to be read against
        labels = take_labels(train, 100, seed).to_list()
        n_runs.append(entry(run(baseline, labels, seed, "calibration")[0], N=0, method="Cal-Only@100", seed=seed))
    def paired_auroc(a: list[dict], b: list[dict]) -> dict:
        """Runs `a` − runs `b` (paired by seed): the mean AUROC difference over seeds with its two-level bootstrap
        interval (seeds, then test questions), and per seed, in each average."""
        from elical_hf.evaluation.tables import paired_difference_over_draws

        diff = paired_difference_over_draws(
            [r["greedy_correctness"] for r in test], [r["dataset"] for r in test], [r["paper_split"] for r in test],
            [run["confidences"] for run in a], [run["confidences"] for run in b], args.bootstrap, args.seeds[0])
        return {column: {key: diff[column][key] for key in ("auroc", "auroc_ci", "auroc_per_draw")}
                for column in ("in-domain avg", "OOD avg")}

    def summary(runs: list[dict], key: str, reference: Any) -> list[dict]:
        """Mean ± sd over seeds per (value, method), and the paired AUROC difference from the same method at
        `reference` (the largest k' / N) with its two-level bootstrap interval (seeds, then test questions)."""
        out = []
        for value in dict.fromkeys(run[key] for run in runs):
            for method in dict.fromkeys(run["method"] for run in runs if run[key] == value):
                chosen = sorted((run for run in runs if run[key] == value and run["method"] == method),
                                key=lambda run: run["seed"] or 0)
                row = {key: value, "method": method, "seeds": len(chosen),
                       **{column: mean_sd([run["metrics"] for run in chosen], column)
                          for column in ("in-domain avg", "OOD avg")}}
                base = sorted((run for run in runs if run[key] == reference and run["method"] == method),
                              key=lambda run: run["seed"] or 0)
                if value != reference and base and args.bootstrap:
                    row[f"auroc - {key}={reference}"] = {
                        column: {k: cell[k] for k in ("auroc", "auroc_ci")}
                        for column, cell in paired_auroc(chosen, base).items()}
                out.append(row)
        return out

    def elicitation_gain() -> dict:
        """EliCal@100 (stage 1 on all N) − Cal-Only@100, head-only, paired by seed (the same labels)."""
        top = max(args.elicitation_sizes)
        by_seed = sorted(n_runs, key=lambda r: r["seed"])
        return paired_auroc([r for r in by_seed if r["N"] == top and r["method"] == "EliCal@100"],
                            [r for r in by_seed if r["method"] == "Cal-Only@100"])

    samples = summary(k_runs, "k", max(args.samples_used))
    sizes = summary(n_runs, "N", max(args.elicitation_sizes))
    gain = elicitation_gain() if args.bootstrap else {}
    for runs in (k_runs, n_runs):  # per-question confidences stay in --output_dir, out of the result file
        for r in runs:
            r.pop("confidences")
    result = {"records": os.path.relpath(args.records, os.path.join(HERE, "..")), "base": args.base or DEFAULT_MODEL,
              "regime": "head only on the frozen base model (use_lora=False), cached prompt features",
              "seeds": args.seeds, "head_settings": settings, "train": len(train_records), "test": len(test_records),
              "bootstrap": args.bootstrap, "samples": samples, "elicitation_size": sizes,
              "elical_minus_cal_only_at_100": gain,
              "runs": {"samples": k_runs, "elicitation_size": n_runs}}
    write_outputs(args.output_dir, "ablations", result, markdown(result))
    if args.result:
        from elical_hf.utils.atomic import atomic_write_text
        import json

        atomic_write_text(args.result, json.dumps(result, indent=2) + "\n")
    return 0


def markdown(result: dict[str, Any]) -> str:
    """The two ablation tables: AUROC x100, mean ± sd over seeds (Consis-Sem has no seed), and each row's paired
    difference from the same method at the largest k' / N, mean over seeds with its 95% two-level bootstrap interval."""
    def cell(entry: dict) -> str:
        return f"{entry['mean']:.1f} ± {entry['sd']:.1f}" if len(entry["per_seed"]) > 1 else f"{entry['mean']:.1f}"

    def diff(entry: dict, key: str, column: str) -> str:
        found = next((v for name, v in entry.items() if name.startswith(f"auroc - {key}=")), None)
        if found is None:
            return "–"
        value, (low, high) = found[column]["auroc"], found[column]["auroc_ci"]
        return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]"

    def table(title: str, key: str, label: str, entries: list[dict]) -> list[str]:
        top = max(e[key] for e in entries)
        lines = [title, "", f"| {label} | method | in-domain AUROC | OOD AUROC | in-domain − {label}={top} | "
                 f"OOD − {label}={top} |", "|---:|---|---:|---:|---:|---:|"]
        return lines + [f"| {e[key] or '–'} | {e['method']} | {cell(e['in-domain avg'])} | {cell(e['OOD avg'])} | "
                        f"{diff(e, key, 'in-domain avg')} | {diff(e, key, 'OOD avg')} |" for e in entries]

    lines = table("## k ablation: targets from the first k' of 5 samples (AUROC x100, mean ± sd over seeds)", "k",
                  "k'", result["samples"])
    lines += [""] + table("## Elicitation-data size: stage 1 on N train questions (AUROC x100, mean ± sd over seeds)",
                          "N", "N", result["elicitation_size"])
    gain = result.get("elical_minus_cal_only_at_100")
    if gain:
        lines += ["", "EliCal@100 (stage 1 on all N) − Cal-Only@100, paired by seed: " + ", ".join(
            f"{column} {gain[column]['auroc']:+.1f} [{gain[column]['auroc_ci'][0]:+.1f}, "
            f"{gain[column]['auroc_ci'][1]:+.1f}]" for column in ("in-domain avg", "OOD avg")) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
