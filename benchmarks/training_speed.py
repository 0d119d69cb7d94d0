"""Training: `ConfidenceTrainer` vs a plain PEFT sequence-classification model + `Trainer`, and head-only calibration
on cached features (`calibrate_head`) vs the Trainer's head-only path — each run in its own process, side by side.

- ours: `AutoModelForConfidence` (LoRA r=8 on every linear layer + head) with `ConfidenceTrainer`, stage 1;
- plain: `AutoModelForSequenceClassification(num_labels=1)` with the same LoRA (`modules_to_save=["score"]`) and
  `Trainer` (MSE regression), on the same rows, batch, epochs and learning rate;
- head, Trainer: `ConfidenceTrainer(stage="calibration", calibration_trainable="head")` for `--head_epochs` epochs;
- head, cached: `calibrate_head` for the same epochs (features computed once, included in its time).
Samples/s is rows x epochs / wall time of training; peak RSS is each process's maximum resident memory.

    python benchmarks/training_speed.py                    # 128 questions, batch 8, 1 epoch; head: 5 epochs
    python benchmarks/training_speed.py --rows 256 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from common import peak_rss_mib, print_machine, print_table


def rows_for(n: int) -> dict[str, list]:
    from elical_hf.data.questions import load_bundled_questions

    questions = [r["question"] for name in ("nq", "hotpotqa") for r in load_bundled_questions(name, n // 2 + 1)][:n]
    targets = [((i * 37) % 11) / 10 for i in range(n)]
    return {"question": questions, "consistency": targets, "correctness": targets}


def worker(kind: str, args: argparse.Namespace) -> dict:
    import torch
    from transformers import Trainer, TrainingArguments

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
    from elical_hf.settings.precision import resolve_dtype

    torch.manual_seed(0)
    data, out = rows_for(args.rows), tempfile.mkdtemp(prefix=f"bench-{kind}-")
    common = dict(output_dir=out, per_device_train_batch_size=args.batch_size, learning_rate=1e-4, report_to="none",
                  save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0)
    epochs = args.head_epochs if kind.startswith("head") else args.epochs
    if kind == "plain":
        from datasets import Dataset
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from elical_hf.models.default_model import resolve_model_path

        path, _ = resolve_model_path(DEFAULT_MODEL)
        tokenizer = AutoTokenizer.from_pretrained(path)
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=resolve_dtype())
        model.config.pad_token_id = tokenizer.pad_token_id
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                 modules_to_save=["score"], task_type="SEQ_CLS"))
        reference = AutoModelForConfidence.from_pretrained(DEFAULT_MODEL)  # the same prompt text as ours
        texts = [reference.confidence_config.format_prompt(q, reference.tokenizer) for q in data["question"]]
        del reference
        encoded = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=512)
        dataset = Dataset.from_dict({**encoded, "labels": [float(t) for t in data["consistency"]]})
        from transformers import DataCollatorWithPadding

        trainer = Trainer(model=model, args=TrainingArguments(num_train_epochs=epochs, **common),
                          train_dataset=dataset, data_collator=DataCollatorWithPadding(tokenizer))
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    elif kind == "ours":
        model = AutoModelForConfidence.from_pretrained(DEFAULT_MODEL)
        trainer = ConfidenceTrainer(model, args=ConfidenceTrainingArguments(num_train_epochs=epochs, **common),
                                    train_dataset=data)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    else:
        model = AutoModelForConfidence.from_pretrained(DEFAULT_MODEL)
        model.confidence_config.training_history.append({"stage": "elicitation"})  # as if after stage 1
        if kind == "head_trainer":
            trainer = ConfidenceTrainer(model, args=ConfidenceTrainingArguments(
                num_train_epochs=epochs, stage="calibration", calibration_trainable="head", **common),
                train_dataset=data)
            start = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - start
        else:
            from elical_hf import calibrate_head

            start = time.perf_counter()
            calibrate_head(model, data, dev_fraction=0.0, num_train_epochs=epochs, batch_size=args.batch_size,
                           learning_rate=1e-4, early_stopping_patience=None)
            seconds = time.perf_counter() - start
    return {"seconds": seconds, "samples_per_s": args.rows * epochs / seconds, "peak_rss_mib": peak_rss_mib()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--head_epochs", type=int, default=5)
    parser.add_argument("--pairs", nargs="+", default=["lora", "head"], choices=["lora", "head"],
                        help="which comparisons to run: LoRA + head (ours vs plain) and/or head only")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return

    print_machine()
    print(f"SmolLM2-135M-Instruct (precision policy), {args.rows} NQ/HotpotQA questions, batch {args.batch_size}, "
          f"{args.epochs} epoch(s) for LoRA + head, {args.head_epochs} for head only; each run in its own process.\n")
    kinds = {"lora": ("ours", "plain"), "head": ("head_cached", "head_trainer")}  # (ours, its baseline)
    labels = {"ours": "ConfidenceTrainer, LoRA + head", "plain": "PEFT SeqCls + Trainer, LoRA + head",
              "head_trainer": f"ConfidenceTrainer, head only ({args.head_epochs} epochs)",
              "head_cached": f"calibrate_head, cached features ({args.head_epochs} epochs)"}
    rows = []
    for pair in args.pairs:
        results = {}
        for kind in kinds[pair]:
            command = [sys.executable, os.path.abspath(__file__), "--worker", kind, f"--rows={args.rows}",
                       f"--batch_size={args.batch_size}", f"--epochs={args.epochs}", f"--head_epochs={args.head_epochs}"]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
        ours, baseline = (results[k] for k in kinds[pair])
        rows.append([labels[kinds[pair][0]], round(ours["samples_per_s"], 2), round(ours["peak_rss_mib"]),
                     f"{ours['samples_per_s'] / baseline['samples_per_s']:.2f}x the next row"])
        rows.append([labels[kinds[pair][1]], round(baseline["samples_per_s"], 2), round(baseline["peak_rss_mib"]), "1"])
    print_table(["run", "samples/s", "peak RSS (MiB)", "ratio"], rows)


if __name__ == "__main__":
    main()
