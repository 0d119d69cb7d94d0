"""`elical-hf demo`: the whole method, offline, on the embedded default model and bundled real questions.

Questions -> greedy answer + k samples -> judges -> stage 1 (consistency) -> stage 2 (a small label budget) and
Cal-Only -> AUROC / ECE / alignment against training-free baselines on held-out in-domain and OOD questions.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .bundled import IN_DOMAIN, OUT_OF_DOMAIN, load_bundled_questions, split_questions
from .configuration import atomic_write_text
from .embedded import DEFAULT_MODEL
from .metrics import compute_all


logger = logging.getLogger(__name__)


@dataclass
class DemoSettings:
    """Sizes of the demo run (defaults fit a 2-core CPU in a few minutes)."""

    output_dir: str = field(default="elical-demo", metadata={"help": "Report, records and trained models go here."})
    model_name_or_path: str = field(default=DEFAULT_MODEL, metadata={"help": "Base causal LM."})
    in_domain_per_dataset: int = field(default=60, metadata={"help": "Questions from each in-domain dataset."})
    ood_per_dataset: int = field(default=30, metadata={"help": "Test questions from each out-of-domain dataset."})
    test_fraction: float = field(default=0.3, metadata={"help": "Share of in-domain questions held out for test."})
    num_labels: int = field(default=60, metadata={"help": "Correctness labels given to stage 2 and Cal-Only."})
    num_samples: int = field(default=4, metadata={"help": "Sampled answers per question (k)."})
    max_new_tokens: int = field(default=24, metadata={"help": "Longest answer in tokens."})
    num_train_epochs: float = field(default=4, metadata={"help": "Epochs of each training stage."})
    learning_rate: float = field(default=1e-3, metadata={"help": "Learning rate of each stage."})
    seed: int = field(default=42, metadata={"help": "Seed of splits, sampling and training."})


def signal_columns(record: dict[str, Any]) -> dict[str, Any]:
    """Training and evaluation columns of one judged record."""
    samples = record["sampling_correctness"] or []
    logprobs = record["greedy_logprobs"] or [0.0]
    return {
        "question": record["question"],
        "consistency": float(np.mean(record["consistency_lexical"])),
        "correctness": float(np.mean(samples)) if samples else 0.0,
        "greedy_correct": int(bool(record["greedy_correctness"])),
        "prob": math.exp(record["greedy_cumulative_logprobs"]),
        "n_prob": math.exp(float(np.mean(logprobs))),
    }


def sample_and_judge(rows: list[dict], settings: DemoSettings) -> list[dict]:
    """Greedy answer + k samples for each row with the base model, judged by answer containment and ROUGE-L."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .embedded import resolve_model_path
    from .signals import SamplingSettings, generate_answers, judge_correctness, lexical_consistency

    path, _ = resolve_model_path(settings.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(path)
    sampling = SamplingSettings(
        num_samples=settings.num_samples, max_new_tokens=settings.max_new_tokens, seed=settings.seed, batch_size=8
    )
    generated = generate_answers(model, tokenizer, [row["question"] for row in rows], sampling)
    records = [{**row, **answers} for row, answers in zip(rows, generated)]
    judge_correctness(records)
    lexical_consistency(records)
    return records


def evaluate_sources(sources: dict[str, list[float]], correct: list[int]) -> dict[str, dict[str, float]]:
    """Paper-style metrics (AUROC and alignment x100, ECE x100) of each confidence source."""
    table = {}
    for name, confidences in sources.items():
        metrics = compute_all(np.clip(confidences, 0.0, 1.0), correct)
        table[name] = {
            "auroc": 100 * metrics["auroc"],
            "ece": 100 * metrics["ece"],
            "alignment": metrics["alignment"],
            "threshold": metrics["threshold"],
        }
    return table


def markdown_table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    splits = list(results)
    lines = ["| method | " + " | ".join(f"{s} AUROC ↑ | {s} ECE ↓ | {s} align ↑" for s in splits) + " |"]
    lines.append("|---|" + "---:|" * (3 * len(splits)))
    for method in results[splits[0]]:
        cells = []
        for split in splits:
            m = results[split][method]
            cells += [f"{m['auroc']:.1f}", f"{m['ece']:.1f}", f"{m['alignment']:.1f}"]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_demo(settings: DemoSettings | None = None) -> dict[str, Any]:
    """Run the demo end to end; returns the results and writes `report.md`, `results.json` and the models."""
    import torch

    from .auto import AutoModelForConfidence
    from .recipe import train_elical

    settings = settings or DemoSettings()
    start = time.perf_counter()
    os.makedirs(settings.output_dir, exist_ok=True)
    in_domain = [q for name in IN_DOMAIN for q in load_bundled_questions(name, settings.in_domain_per_dataset)]
    parts = split_questions(in_domain, {"train": 1 - settings.test_fraction, "test": settings.test_fraction}, settings.seed)
    ood = [q for name in OUT_OF_DOMAIN for q in load_bundled_questions(name, settings.ood_per_dataset)]

    records = sample_and_judge(parts["train"] + parts["test"] + ood, settings)
    with open(os.path.join(settings.output_dir, "records.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)
    n_train, n_test = len(parts["train"]), len(parts["test"])
    table = [signal_columns(record) for record in records]
    train, splits = table[:n_train], {"in-domain": table[n_train : n_train + n_test], "ood": table[n_train + n_test :]}

    paths = train_elical(
        settings.model_name_or_path,
        train,
        train,
        os.path.join(settings.output_dir, "models"),
        num_labels=settings.num_labels,
        seed=settings.seed,
        training_args={
            "num_train_epochs": settings.num_train_epochs,
            "learning_rate": settings.learning_rate,
            "per_device_train_batch_size": 8,
            "early_stopping_patience": 2,
            "disable_tqdm": False,
        },
        model_init_kwargs={"dtype": torch.bfloat16},
    )
    models = {"Eli-Only": paths["elicitation"], "EliCal": paths["elical"], "Cal-Only": paths["cal_only"]}
    scorers = {name: AutoModelForConfidence.from_pretrained(path, dtype=torch.bfloat16) for name, path in models.items()}

    results: dict[str, dict[str, dict[str, float]]] = {}
    for split, rows in splits.items():
        questions = [row["question"] for row in rows]
        sources = {
            "Prob": [row["prob"] for row in rows],
            "N-Prob": [row["n_prob"] for row in rows],
            "Consis-Lex": [row["consistency"] for row in rows],
        }
        sources.update({name: model.confidence(questions, batch_size=16) for name, model in scorers.items()})
        results[split] = evaluate_sources(sources, [row["greedy_correct"] for row in rows])

    summary = {
        "settings": asdict(settings),
        "sizes": {"train": n_train, "in-domain test": n_test, "ood test": len(ood)},
        "accuracy": {split: float(np.mean([r["greedy_correct"] for r in rows])) for split, rows in splits.items()},
        "results": results,
        "models": models,
        "seconds": round(time.perf_counter() - start, 1),
    }
    atomic_write_text(os.path.join(settings.output_dir, "results.json"), json.dumps(summary, indent=2) + "\n")
    report = (
        "# EliCal demo\n\n"
        f"Model: `{settings.model_name_or_path}`. Train {n_train} in-domain questions (stage-2 label budget "
        f"{settings.num_labels}); test {n_test} in-domain and {len(ood)} out-of-domain questions; "
        f"k={settings.num_samples} samples. Greedy accuracy: "
        + ", ".join(f"{split} {100 * acc:.1f}%" for split, acc in summary["accuracy"].items())
        + ".\n\n"
        + markdown_table(results)
        + "\n\nAUROC, ECE and alignment are x100. Reproduce with `elical-hf demo`.\n"
    )
    atomic_write_text(os.path.join(settings.output_dir, "report.md"), report)
    return summary
