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
the head-only runs of both inits are made here, from the same features. Writes `docs/results/head_init.json` (every
run's AUROC / ECE, and the paired difference torch_default − normal over seeds, with a 95% interval over test
resamples and seeds) and prints its table:

    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 python experiments/head_init_experiment.py --output_dir outputs/head_init
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


def run_key(variant: str, init: str, seed: int) -> str:
    return f"Cal-Only{variant}@100/{init}~{seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/head_init", help="Records, run caches and models go here.")
    parser.add_argument("--records", default=os.path.join(RESULTS, "honestybench-smollm2-135m"))
    parser.add_argument("--confidences", default=os.path.join(RESULTS, "confidences.json"),
                        help="The replication's committed per-question confidences (the `normal` LoRA + head runs).")
    parser.add_argument("--model", default=None, help="The base model (default: the replication's, the embedded SmolLM2).")
    parser.add_argument("--labels", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--result", default=os.path.join(RESULTS, "head_init.json"))
    args = parser.parse_args(argv)

    import torch

    from elical_hf import steps
    from elical_hf.head_calibration import confidence_head_module
    from elical_hf.modeling import initialize_confidence_head
    from elical_hf.recipe import take_labels

    replication, records, test, committed = reproduce_paper.committed_inputs(args.output_dir, args.records,
                                                                             args.confidences)
    train = reproduce_paper.rows_of(records, "train")
    replication.model = args.model or replication.model
    questions = [r["question"] for r in test]
    cache = os.path.join(args.output_dir, "head_init_runs.json")
    runs: dict[str, dict[str, Any]] = {}
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as handle:
            runs = json.load(handle)

    def save(key: str, confidences: list[float], started: float) -> None:
        runs[key] = {"confidences": confidences, "seconds": round(time.perf_counter() - started, 1)}
        reproduce_paper.atomic_write_text(cache, json.dumps(runs) + "\n")

    for seed in args.seeds:
        name = f"Cal-Only@{args.labels}" if seed == replication.seed else f"Cal-Only@{args.labels}~{seed}"
        runs[run_key("", "normal", seed)] = {"confidences": committed["confidences"][name], "from": args.confidences}
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
    todo = {init: [seed for seed in args.seeds if run_key("-head", init, seed) not in runs] for init in INITS}
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
                torch.manual_seed(replication.seed)
                initialize_confidence_head(confidence_head_module(model), init)
            started = time.perf_counter()
            for run in reproduce_paper.head_only_runs(replication, model, train, [(args.labels, s) for s in seeds],
                                                      features, test_features):
                save(run_key("-head", init, run.seed), run.confidences, started)
                started = time.perf_counter()
        del model

    for seed in args.seeds:  # the replication's own head-only runs, remade here: how closely they match
        name = f"Cal-Only-head@{args.labels}" + ("" if seed == replication.seed else f"~{seed}")
        gap = max(abs(a - b) for a, b in zip(runs[run_key("-head", "normal", seed)]["confidences"],
                                              committed["confidences"][name]))
        print(f"{name}: remade with head_init=normal within {gap:.2g} of the committed run")
    draws = {f"Cal-Only{v}@{args.labels}/{init}": [runs[run_key(v, init, s)]["confidences"] for s in args.seeds]
             for v in ("", "-head") for init in INITS}
    pairs = [(f"Cal-Only{v}@{args.labels}/torch_default", f"Cal-Only{v}@{args.labels}/normal") for v in ("", "-head")]
    evaluation = steps.evaluate(test, confidences={k: v["confidences"] for k, v in runs.items()}, baselines=(),
                                draws=draws, draw_pairs=pairs, bootstrap=args.bootstrap, seed=replication.seed)
    result = {"records": os.path.relpath(args.records, REPO), "labels": args.labels, "seeds": args.seeds,
              "runs": {key: {column: {m: evaluation.table[key][column][m] for m in ("auroc", "ece")}
                             for column in ("in-domain avg", "OOD avg")} | {"seconds": runs[key].get("seconds")}
                       for key in sorted(runs)},
              "differences": {name: {column: diff[column] for column in ("in-domain avg", "OOD avg")}
                              for name, diff in evaluation.draw_differences.items()}}
    reproduce_paper.atomic_write_text(args.result, json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    return 0


def markdown(result: dict[str, Any]) -> str:
    """The table of `head_init.json`: the paired AUROC difference torch_default − normal, in-domain and OOD."""
    lines = ["| Cal-Only@%d | in-domain AUROC diff | per seed | OOD AUROC diff | per seed |" % result["labels"],
             "|---|---:|---|---:|---|"]
    for name, diff in result["differences"].items():
        cells = []
        for column in ("in-domain avg", "OOD avg"):
            cell = diff[column]
            low, high = cell["auroc_ci"]
            cells += [f"{cell['auroc']:+.1f} [{low:+.1f}, {high:+.1f}]",
                      ", ".join(f"{v:+.1f}" for v in cell["auroc_per_draw"])]
        lines.append(f"| {name.split(' − ')[0].split('@')[0]} (seeds {', '.join(map(str, result['seeds']))}) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
