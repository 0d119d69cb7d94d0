"""`elical-hf demo`: the whole method, offline, on the embedded default model and bundled real questions.

Questions -> greedy answer + k samples -> judges (gold-alias correctness; embedding consistency) -> stage 1 on
consistency -> stage 2 on a small label budget, and Cal-Only on the same labels -> AUROC / ECE / alignment against the
six training-free baselines on held-out in-domain and out-of-domain questions -> a report folder.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .bundled import IN_DOMAIN, OUT_OF_DOMAIN, load_bundled_questions, split_questions
from .configuration import atomic_write_text
from .embedded import DEFAULT_MODEL


logger = logging.getLogger(__name__)

CONSISTENCY_JUDGES = ("auto", "embedding", "lexical")


@dataclass
class DemoSettings:
    """Sizes of the demo run (defaults fit a 2-core CPU in under 10 minutes)."""

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
    consistency_judge: str = field(
        default="auto",
        metadata={"help": "Consistency judge of stage 1's target and Consis-Sem: 'embedding' (all-MiniLM-L6-v2), "
                  "'lexical' (ROUGE-L >= 0.5), or 'auto' (embedding when its model is installed)."},
    )
    baselines: list[str] = field(
        default_factory=lambda: ["prob", "n_prob", "consis_lex", "consis_sem", "verbal0", "verbal10"],
        metadata={"help": "Training-free baselines to compare with (names of elical_hf.signals.BASELINES)."},
    )
    bootstrap: int = field(default=200, metadata={"help": "Bootstrap resamples for the intervals (0: none)."})
    seed: int = field(default=42, metadata={"help": "Seed of splits, sampling and training."})

    def __post_init__(self) -> None:
        from .signals import BASELINES

        if self.consistency_judge not in CONSISTENCY_JUDGES:
            raise ValueError(f"consistency_judge must be one of {CONSISTENCY_JUDGES}, got {self.consistency_judge!r}.")
        unknown = sorted(set(self.baselines) - set(BASELINES))
        if unknown:
            raise ValueError(f"Unknown baseline(s) {unknown}; choose from {sorted(BASELINES)}.")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must lie in (0, 1), got {self.test_fraction}.")
        if self.in_domain_per_dataset < 2 or self.ood_per_dataset < 1 or self.num_labels < 2:
            raise ValueError("Need at least 2 in-domain questions per dataset, 1 OOD question and 2 labels.")


def judge_consistency(records: list[dict], judge: str) -> str:
    """Fill `consistency_judgement` with the embedding judge (or ROUGE-L for `"lexical"`) and `consistency_lexical`
    (Consis-Lex); returns the judge used."""
    from .signals import EmbeddingJudge, lexical_consistency, lexical_judgement
    from .signals.embedding_judge import default_model_path

    if judge == "auto":
        try:
            default_model_path()
            judge = "embedding"
        except OSError as error:
            logger.warning("%s Falling back to the lexical consistency judge.", error)
            judge = "lexical"
    if judge == "embedding":
        lexical_consistency(records)
        EmbeddingJudge().judge_records(records)
    else:
        lexical_judgement(records)
    return judge


def _partitions(settings: DemoSettings) -> list[dict[str, Any]]:
    """In-domain train/test split by question, then OOD test questions that are not in-domain questions; each row
    tagged `split` and `paper_split`."""
    in_domain = [q for name in IN_DOMAIN for q in load_bundled_questions(name, settings.in_domain_per_dataset)]
    parts = split_questions(in_domain, {"train": 1 - settings.test_fraction, "test": settings.test_fraction}, settings.seed)
    seen = [row["question"] for row in in_domain]
    ood = [row for name in OUT_OF_DOMAIN for row in load_bundled_questions(name, settings.ood_per_dataset, exclude=seen)]
    return (
        [{**row, "split": "train", "paper_split": "train"} for row in parts["train"]]
        + [{**row, "split": "test", "paper_split": "in_domain_test"} for row in parts["test"]]
        + [{**row, "split": "test", "paper_split": "ood_test"} for row in ood]
    )


def run_demo(settings: DemoSettings | None = None) -> dict[str, Any]:
    """Run the demo end to end. Writes to `settings.output_dir`: `report.md` (tables, plots), `results.json`,
    `run.json` (settings, sizes, timings), `records.parquet` (judged answers) and `models/` (Eli-Only, EliCal,
    Cal-Only). Returns the run summary, whose `table` is [`evaluate_table`]'s output."""
    from .auto import AutoModelForConfidence
    from .evaluation import BASELINE_NAMES, evaluate_table, write_report
    from .recipe import train_elical
    from .signals import HFBackend, SamplingSettings, compute_baselines, judge_correctness, training_columns
    from .signals.records import save_records

    settings = settings or DemoSettings()
    start, timings = time.perf_counter(), {}
    os.makedirs(settings.output_dir, exist_ok=True)
    rows = _partitions(settings)

    backend = HFBackend(settings.model_name_or_path)  # dtype: the precision policy
    sampling = SamplingSettings(
        num_samples=settings.num_samples, max_new_tokens=settings.max_new_tokens, seed=settings.seed, batch_size=32
    )
    answers = backend.generate([row["question"] for row in rows], sampling)
    records = [{**row, **generated} for row, generated in zip(rows, answers)]
    judge_correctness(records)
    judge = judge_consistency(records, settings.consistency_judge)
    save_records(records, os.path.join(settings.output_dir, "records.parquet"))
    timings["sampling and judging"] = time.perf_counter() - start

    train = [r for r in records if r["split"] == "train"]
    test = [r for r in records if r["split"] == "test"]
    baseline_scores = compute_baselines(test, backend.complete, train, which=settings.baselines, seed=settings.seed)
    del backend
    timings["baselines"] = time.perf_counter() - start - sum(timings.values())

    table_rows = [{"question": r["question"], **training_columns(r)} for r in train]
    paths = train_elical(
        settings.model_name_or_path,
        table_rows,
        table_rows,
        os.path.join(settings.output_dir, "models"),
        num_labels=settings.num_labels,
        seed=settings.seed,
        training_args={
            "num_train_epochs": settings.num_train_epochs,
            "learning_rate": settings.learning_rate,
            "per_device_train_batch_size": 8,
            "early_stopping_patience": 2,
            "disable_tqdm": False,
            "report_to": "none",
        },
    )
    timings["training"] = time.perf_counter() - start - sum(timings.values())

    models = {"Eli-Only": paths["elicitation"], "EliCal": paths["elical"], "Cal-Only": paths["cal_only"]}
    confidences = {BASELINE_NAMES[name]: scores for name, scores in baseline_scores.items()}
    questions = [r["question"] for r in test]
    for name, path in models.items():
        model = AutoModelForConfidence.from_pretrained(path)
        confidences[name] = model.confidence(questions, batch_size=32, progress=True)
    correct = [int(bool(r["greedy_correctness"])) for r in test]
    table = evaluate_table(
        correct, [r["dataset"] for r in test], [r["paper_split"] for r in test], confidences, settings.bootstrap,
        settings.seed,
    )
    timings["evaluation"] = time.perf_counter() - start - sum(timings.values())

    sizes = {"train": len(train), "in-domain test": sum(r["paper_split"] == "in_domain_test" for r in test),
             "ood test": sum(r["paper_split"] == "ood_test" for r in test)}
    first = next(iter(table.values()))
    notes = (
        f"Model `{settings.model_name_or_path}`; {sizes['train']} train questions (stage 1 on all of them, stage 2 and "
        f"Cal-Only on {min(settings.num_labels, sizes['train'])} correctness labels); test {sizes['in-domain test']} "
        f"in-domain and {sizes['ood test']} out-of-domain questions; k={settings.num_samples} samples of at most "
        f"{settings.max_new_tokens} tokens; consistency judge: {judge}. Greedy accuracy: in-domain "
        f"{first['in-domain avg']['accuracy']:.1f}%, OOD {first['OOD avg']['accuracy']:.1f}%. Intervals: 95% "
        f"bootstrap ({settings.bootstrap} resamples). Reproduce with `elical-hf demo`.\n"
    )
    reliability = {name: confidences[name] for name in ("Consis-Sem", *models) if name in confidences}
    paths_written = write_report(table, settings.output_dir, correct=correct, confidences=reliability,
                                 title="EliCal demo", notes=notes)
    summary = {
        "settings": asdict(settings),
        "consistency_judge": judge,
        "sizes": sizes,
        "models": models,
        "seconds": round(time.perf_counter() - start, 1),
        "timings": {name: round(value, 1) for name, value in timings.items()},
        "report": paths_written["report"],
    }
    atomic_write_text(os.path.join(settings.output_dir, "run.json"), json.dumps(summary, indent=2) + "\n")
    return {**summary, "table": table}
