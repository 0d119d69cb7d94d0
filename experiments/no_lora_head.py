"""How much AUROC does the gate's zero-overhead mode give up? A head on the frozen base model vs LoRA + head.

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python experiments/no_lora_head.py --output_dir outputs/gate

No-LoRA: `AutoModelForConfidence.from_pretrained(DEFAULT_MODEL, use_lora=False)`; its features are the plain base
model's final hidden state of the last prompt token. Stage 1 trains the head alone on the consistency targets of the
same 1,600 train questions the shipped stage-1 adapter was trained on (`experiments/build_demo_assets.py`: seed 42),
through `calibrate_head(stage="elicitation")`; stage 2 calibrates it on correctness labels (random draws of each
budget, per seed). LoRA + head: the shipped stage-1 adapter (LoRA + head trained on those questions), calibrated the
same way (head-only, on its cached features; the replication's "EliCal-head"). Both read the replication records
with correctness re-judged by `has_answer`, and are scored on the 2,050 test questions (disjoint from train).

Writes `no_lora_head.json` and `no_lora_head.md` to `--output_dir` (features cached there too, shared with
`experiments/label_selection.py`).
"""

from __future__ import annotations

import argparse
import os
import random
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
import experiments_common as common  # noqa: E402,F401 - experiments/ and examples/ on the path (the shared module)
from label_selection import (  # noqa: E402 - the shared helpers of the gate measurements
    HEAD_SETTINGS, RECORDS, STAGE1, add_subset_arguments, cached_features, load_replication, markdown, summarize,
    test_metrics, write_outputs,
)


METHODS = {"LoRA + head": "linear", "no LoRA": "linear", "no LoRA, MLP head": "mlp"}
"""The runs and their heads: the shipped stage-1 adapter; a linear head and the reference's no-LoRA ablation head
(`head_type="mlp"`: H -> H/2 -> H/4 -> 1 with ReLU, `honesty_alignment/train_mlp.py:49-55`) on the frozen base model."""

CREATION_ORDER = ("no LoRA", "LoRA + head", "no LoRA, MLP head")
HEAD_SEED = 42
"""Each model's fresh head is drawn from the global RNG right after `torch.manual_seed(HEAD_SEED)`, so a run of some
methods gives the rows a run of all gives, and reruns give the same rows (before, the head was drawn unseeded: torch
seeds a new process at random)."""

STAGE1_QUESTIONS, STAGE1_SEED = 1600, 42
"""The shipped stage-1 adapter's training questions: a `random.Random(42)` sample of 1,600 sorted train questions."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="The replication's HonestyBench records folder.")
    parser.add_argument("--stage1", default=STAGE1, help="The LoRA + head stage-1 model folder.")
    parser.add_argument("--base", default=None, help="The base model (default: the embedded DEFAULT_MODEL).")
    parser.add_argument("--output_dir", default="outputs/gate", help="Results and cached features go here.")
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 250, 1000, 4800], help="Label budgets.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Seeds of the label draws.")
    parser.add_argument("--stage1_questions", type=int, default=STAGE1_QUESTIONS,
                        help="No-LoRA stage-1 questions: the adapter's own 1,600; with --pool_size, the pool instead.")
    parser.add_argument("--head_epochs", type=int, default=HEAD_SETTINGS["num_train_epochs"])
    add_subset_arguments(parser)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS),
                        help="What to run; the first is the one the others are compared with.")
    args = parser.parse_args(argv)

    import torch

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence, calibrate_head
    from elical_hf.training.head_calibration import head_confidences, label_budget_sweep

    os.makedirs(args.output_dir, exist_ok=True)
    train, test = load_replication(args.records, args.pool_size, args.test_per_split, args.subset_seed)
    questions = [r["question"] for r in train + test]
    settings = {**HEAD_SETTINGS, "num_train_epochs": args.head_epochs}
    if args.pool_size is None:  # the adapter's own stage-1 questions
        stage1_rows = random.Random(STAGE1_SEED).sample(train, min(args.stage1_questions, len(train)))
    else:  # a CPU budget: the pool's consistency targets (no labels), whose features are computed anyway
        stage1_rows = train

    test_questions = [r["question"] for r in test]
    runs, models = [], {}
    for method in CREATION_ORDER:
        if method not in args.methods:
            continue
        torch.manual_seed(HEAD_SEED)  # a fresh head is drawn from the global RNG
        if method == "LoRA + head":
            model = AutoModelForConfidence.from_pretrained(args.stage1)
            path = os.path.join(args.output_dir, "features-stage1.pt")
        else:  # the plain base model's features, whichever head reads them
            model = AutoModelForConfidence.from_pretrained(args.base or DEFAULT_MODEL, use_lora=False,
                                                           head_type=METHODS[method])
            path = os.path.join(args.output_dir, "features-base.pt")
        models[method] = model, cached_features(model, questions, path)
    for method in args.methods:
        model, features = models[method]
        if method != "LoRA + head":  # stage 1 of a no-LoRA head: consistency targets, head only
            calibrate_head(model, stage1_rows, None, features=features, stage="elicitation", seed=STAGE1_SEED,
                           **settings)
        runs.append({"method": method, "labels": 0, "seed": 0,
                     "metrics": test_metrics(test, head_confidences(model, features, test_questions))})
        jobs = [(budget, seed) for budget in args.budgets for seed in args.seeds]
        # every run starts from the head as it is now (stage 1's), on a random draw of labels
        sweep = label_budget_sweep(model, train, [(min(n, len(train)), seed) for n, seed in jobs], features,
                                   test_questions, **settings)
        for (budget, seed), run in zip(jobs, sweep):
            runs.append({"method": method, "labels": budget, "seed": seed,
                         "metrics": test_metrics(test, run.confidences)})
    eli_only = {r["method"]: r["metrics"] for r in runs if r["labels"] == 0}
    summary = summarize([r for r in runs if r["labels"]], args.methods[0], args.methods, args.budgets)
    result = {"records": os.path.relpath(args.records), "stage1": os.path.relpath(args.stage1),
              "base": args.base or DEFAULT_MODEL, "stage1_questions": len(stage1_rows), "train_pool": len(train),
              "test": len(test), "subset_seed": args.subset_seed,
              "head_settings": settings, "eli_only": eli_only, "summary": summary, "runs": runs}
    notes = (f"Stage 1 on consistency targets (LoRA + head: the shipped adapter, 1,600 train questions; no LoRA: head "
             f"only, {len(stage1_rows)} train questions, "
             f"{settings}); Eli-Only in-domain AUROC: " + ", ".join(
                 f"{m} {v['in-domain avg']['auroc']:.2f}" for m, v in eli_only.items())
             + f". Stage 2: head-only calibration on random label draws, seeds {args.seeds}; test: {len(test)} "
             "questions; mean ± sd over seeds; metrics x100.")
    title = f"{', '.join(args.methods[1:])} vs {args.methods[0]}" if len(args.methods) > 1 else args.methods[0]
    text = markdown(summary, args.methods[0], title, notes)
    write_outputs(args.output_dir, "no_lora_head", result, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
