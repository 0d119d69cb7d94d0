"""Does the fresh head's init matter with 100 labels? Cal-Only@100 with transformers' init against PyTorch's default.

Our fresh head is drawn by transformers' `_init_weights` (weight N(0, 0.02), bias 0: `head_init="normal"`, the
default); the reference's is a plain `nn.Linear(H, 1)` with PyTorch's default init (weight and bias uniform in
±1/√H: `head_init="torch_default"`, `honesty_alignment/train_one_conf.py:52`). Only a *fresh* head depends on it:
Cal-Only's, and stage 1's start. EliCal's stage 2 starts from stage 1's trained head, so this experiment trains
Cal-Only@100 under `torch_default`, with LoRA + head (the replication's recipe, `reproduce_paper.lora_calibration`) and
head-only on cached prompt features, for each seed (the same label draws and training order as the replication's
runs), and compares them with the replication's `normal` runs of the same seeds. Stage 1 itself is not retrained
(38 min a run on 2 cores): its 4,800 questions leave the init far behind, which this experiment does not measure.

The `normal` LoRA + head runs are the committed ones (`docs/results/confidences.json`, `Cal-Only@100`, `~43`, `~44`);
the head-only runs of both inits are made here, from the same features. Every run made here keeps its per-question
test confidences in `--runs` (committed: `docs/results/head_init_runs.json`, so a rerun remakes only what it lacks).
Writes `docs/results/head_init.json` (every run's AUROC / ECE, and the paired differences, mean over seeds with its 95%
two-level bootstrap interval: seeds, then test questions, resampled) and prints its table. The differences: each
init against the other, and EliCal-head@100 (the committed runs: the replication's LoRA stage 1, then the head on
100 labels) against the head-only Cal-Only@100 of each init, the comparison the replication's tables make with the
`normal` one:

    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 OMP_NUM_THREADS=1 python experiments/head_init_experiment.py --variants head

`--variants head` makes only the head-only runs (a few minutes: the base model's features, then 0.1 s a run); the
LoRA + head rows of `--result` are then kept as they were (`kept_from_previous` lists them): their torch_default
confidences were not kept when they were made (557-799 s a run), so they do not recompute.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


import experiments_common as common  # noqa: E402,F401 - experiments/ and examples/ on the path (the shared module)
import reproduce_paper  # noqa: E402 - its sibling, also when this file is loaded by path


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "results")
INITS = ("normal", "torch_default")
VARIANTS = {"lora": "", "head": "-head"}
"""`--variants`: LoRA + head calibration (`Cal-Only@100/...`) and head-only calibration (`Cal-Only-head@100/...`)."""


def run_key(variant: str, init: str, seed: int) -> str:
    return f"Cal-Only{variant}@100/{init}~{seed}"


def variant_of(name: str) -> str:
    """The `--variants` entry a run or difference of `head_init.json` belongs to."""
    return "head" if "-head@" in name.split(" − ")[-1] else "lora"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/head_init", help="Records, run caches and models go here.")
    parser.add_argument("--records", default=os.path.join(RESULTS, "honestybench-smollm2-135m"))
    parser.add_argument("--confidences", default=os.path.join(RESULTS, "confidences.json"),
                        help="The replication's committed per-question confidences (the `normal` LoRA + head runs).")
    parser.add_argument("--model", default=None,
                        help="The base model (default: the replication's, the embedded SmolLM2).")
    parser.add_argument("--labels", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--result", default=os.path.join(RESULTS, "head_init.json"))
    parser.add_argument("--runs", default=os.path.join(RESULTS, "head_init_runs.json"),
                        help="Per-question test confidences of the runs made here (kept: a rerun makes only the rest).")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="Which calibrations to make; the other's rows of --result are kept as they were.")
    args = parser.parse_args(argv)

    from elical_hf import steps
    from elical_hf.training.head_calibration import confidence_head_module
    from elical_hf.training.recipe import take_labels

    replication, records, test, committed = reproduce_paper.committed_inputs(args.output_dir, args.records,
                                                                             args.confidences)
    train = reproduce_paper.rows_of(records, "train")
    replication.model = args.model or replication.model
    questions = [r["question"] for r in test]
    cache = args.runs
    runs: dict[str, dict[str, Any]] = {}
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as handle:
            runs = json.load(handle)

    def save(key: str, confidences: list[float], started: float) -> None:
        runs[key] = {"confidences": confidences, "seconds": round(time.perf_counter() - started, 1)}
        reproduce_paper.atomic_write_text(cache, json.dumps(runs) + "\n")

    def seeded(name: str, seed: int) -> str:  # how confidences.json names a seed's run
        return name if seed == replication.seed else f"{name}~{seed}"

    lora = "lora" in args.variants
    for seed in args.seeds if lora else ():
        key = run_key("", "torch_default", seed)
        if key not in runs:
            started = time.perf_counter()
            model = reproduce_paper.fresh_model(replication, seed, head_init="torch_default")
            folder = os.path.join(args.output_dir, "models", f"cal-only-{args.labels}-torch-default-seed{seed}")
            model, _ = reproduce_paper.lora_calibration(replication, model, take_labels(train, args.labels, seed),
                                                        folder, seed)
            save(key, model.confidence(questions, batch_size=32, progress=True), started)
            del model
    # head-only: both inits from the same base-model features (a fresh LoRA does not change them: it starts at 0)
    todo = {init: [seed for seed in args.seeds if run_key("-head", init, seed) not in runs]
            for init in (INITS if "head" in args.variants else ())}
    if any(todo.values()):
        model = reproduce_paper.fresh_model(replication, replication.seed)
        label_sets = {seed: take_labels(train, args.labels, seed) for seed in args.seeds}
        needed = list(dict.fromkeys(q for labels in label_sets.values() for q in labels["question"]))
        features = dict(zip(needed, model.prompt_features(needed, batch_size=32, progress=True)))
        test_features = model.prompt_features(questions, batch_size=32, progress=True)
        loaded = {k: v.clone() for k, v in confidence_head_module(model).state_dict().items()}  # `normal`, seed 42
        for init, seeds in todo.items():
            # as the replication: every seed starts from the same fresh head (drawn once, with the main seed)
            confidence_head_module(model).load_state_dict(loaded)
            if init != "normal":
                reproduce_paper.redraw_head(model, replication.seed, init)
            started = time.perf_counter()
            for run in reproduce_paper.head_only_runs(replication, model, train, [(args.labels, s) for s in seeds],
                                                      features, test_features):
                save(run_key("-head", init, run.seed), run.confidences, started)
                started = time.perf_counter()
        del model

    confidences = {k: v["confidences"] for k, v in runs.items() if variant_of(k) in args.variants}
    for seed in args.seeds if lora else ():  # the `normal` LoRA + head runs: the committed ones
        confidences[run_key("", "normal", seed)] = committed["confidences"][seeded(f"Cal-Only@{args.labels}", seed)]
    variants = [VARIANTS[v] for v in args.variants]
    for seed in args.seeds if "head" in args.variants else ():  # the replication's own head-only runs, remade here
        name = seeded(f"Cal-Only-head@{args.labels}", seed)
        init = reproduce_paper.BASELINE_HEAD_INIT  # what the replication draws its head-only baseline with
        gap = max(abs(a - b) for a, b in zip(confidences[run_key("-head", init, seed)], committed["confidences"][name]))
        print(f"{name}: remade with head_init={init} within {gap:.2g} of the committed run")
    draws = {f"Cal-Only{v}@{args.labels}/{init}": [confidences[run_key(v, init, s)] for s in args.seeds]
             for v in variants for init in INITS}
    pairs = [(f"Cal-Only{v}@{args.labels}/torch_default", f"Cal-Only{v}@{args.labels}/normal") for v in variants]
    if "head" in args.variants:  # the method against the head-only baseline of each init (the same label draws)
        draws[f"EliCal-head@{args.labels}"] = [committed["confidences"][seeded(f"EliCal-head@{args.labels}", s)]
                                               for s in args.seeds]
        pairs += [(f"EliCal-head@{args.labels}", f"Cal-Only-head@{args.labels}/{init}") for init in INITS]
    evaluation = steps.evaluate(steps.EvaluateArguments(records=test, baselines="", bootstrap=args.bootstrap,
                                                        seed=replication.seed),
                                confidences=confidences, draws=draws, draw_pairs=pairs)
    result = {"records": os.path.relpath(args.records, REPO), "labels": args.labels, "seeds": args.seeds,
              "runs": {key: {column: {m: evaluation.table[key][column][m] for m in ("auroc", "ece")}
                             for column in ("in-domain avg", "OOD avg")} | {"seconds": runs.get(key, {}).get("seconds")}
                       for key in sorted(confidences)},
              "differences": {name: {column: diff[column] for column in ("in-domain avg", "OOD avg")}
                              for name, diff in evaluation.draw_differences.items()}}
    keep_previous(result, args.result, args.variants)
    reproduce_paper.atomic_write_text(args.result, json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    return 0


def keep_previous(result: dict[str, Any], path: str, variants: list[str]) -> None:
    """Put the runs and differences of the variants not made now back into `result`, as the file at `path` holds
    them, and list them under `kept_from_previous` (they were not recomputed)."""
    if set(variants) == set(VARIANTS) or not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as handle:
        previous = json.load(handle)
    kept = []
    for part in ("runs", "differences"):
        for name, value in previous.get(part, {}).items():
            if variant_of(name) not in variants and name not in result[part]:
                result[part][name] = value
                kept.append(name)
    result["kept_from_previous"] = kept + [name for name in previous.get("kept_from_previous", [])
                                           if name not in kept and variant_of(name) not in variants]
    result["runs"] = dict(sorted(result["runs"].items()))


def markdown(result: dict[str, Any]) -> str:
    """The table of `head_init.json`: each paired AUROC difference (at `labels` labels, over `seeds`), in-domain and
    OOD; rows kept from a previous result are marked with a dagger."""
    lines = [f"| @{result['labels']} labels, seeds {', '.join(map(str, result['seeds']))} | in-domain AUROC diff | "
             "per seed | OOD AUROC diff | per seed |", "|---|---:|---|---:|---|"]
    suffix = f"@{result['labels']}"
    for name, diff in result["differences"].items():
        cells = []
        for column in ("in-domain avg", "OOD avg"):
            cell = diff[column]
            low, high = cell["auroc_ci"]
            cells += [f"{cell['auroc']:+.1f} [{low:+.1f}, {high:+.1f}]",
                      ", ".join(f"{v:+.1f}" for v in cell["auroc_per_draw"])]
        kept = " †" if name in result.get("kept_from_previous", []) else ""
        lines.append(f"| {name.replace(suffix, '')}{kept} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
