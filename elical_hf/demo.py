"""`elical-hf demo`: EliCal's few-label advantage on the embedded default model, offline, in minutes on a CPU.

Every step of the method runs; the large parts run on committed data so that the comparison has enough test questions
to mean something:

- **live**: a fresh sample of questions is answered (greedy + k samples), judged (gold-alias correctness, embedding
  consistency) and scored by all six training-free baselines; stage 1 is retrained on a small set of questions;
- **from committed records** (`resources/demo/records.parquet`, a subset of the replication's judged records in
  `docs/results/`): the in-domain test questions and the pool of train questions that labels are drawn from;
- **shipped**: the stage-1 adapter trained on 1,600 of the replication's train questions (`resources/demo/stage1-*`,
  rebuilt by `experiments/build_demo_assets.py`).

Stage 2 and Cal-Only calibrate the head only (cached prompt features), on the same labels, for several label draws:
EliCal continues the stage-1 head on stage-1 features, Cal-Only fits a fresh head on the frozen base model's features.
The headline is the paired difference EliCal - Cal-Only in in-domain AUROC, mean over the label draws, with its 95%
two-level bootstrap interval (label draws resampled with replacement, then test questions).
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import asdict, dataclass, field
from collections.abc import Callable
from typing import Any

from .utils.atomic import atomic_write_json
from .utils.cpu import cpu_flags, forced_cpu_bf16
from .models.default_model import DEFAULT_MODEL
from .utils.memory import release_memory


logger = logging.getLogger(__name__)

CONSISTENCY_JUDGES = ("auto", "embedding", "lexical")
DEMO_ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources", "demo")
DEMO_RECORDS = os.path.join(DEMO_ASSETS, "records.parquet")
DEMO_STAGE1 = os.path.join(DEMO_ASSETS, "stage1-smollm2-135m-instruct")
DEMO_CALIBRATED = os.path.join(DEMO_ASSETS, "elical-smollm2-135m-instruct")
"""A calibrated confidence model of the embedded default with its decision threshold, for the gate example."""
RECORD_BASELINES = ("prob", "n_prob", "consis_lex", "consis_sem")
REPORT_TEMPLATE = "report_notes.md"
"""The Jinja template (in `DEMO_ASSETS`) of the report's text before its tables ([`demo_notes`])."""


@dataclass
class DemoSettings:
    """Sizes of the demo run (defaults fit a 2-core CPU in under 10 minutes, with or without native bf16)."""

    output_dir: str = field(default="elical-demo", metadata={"help": "Report, records and trained models go here."})
    model_name_or_path: str = field(default=DEFAULT_MODEL, metadata={"help": "Base causal LM."})
    records: str = field(default=DEMO_RECORDS, metadata={"help": "Judged records: in-domain test and train pool."})
    stage1_model: str = field(default=DEMO_STAGE1, metadata={"help": "Stage-1 (elicitation) model of the base model."})
    num_labels: int = field(default=100, metadata={"help": "Correctness labels of the headline comparison."})
    label_budgets: list[int] = field(
        default_factory=lambda: [25, 50, 100, 200], metadata={"help": "Label budgets of the AUROC-vs-labels plot."}
    )
    num_draws: int = field(default=3, metadata={"help": "Label draws (and head seeds) per budget."})
    label_pool: int = field(default=250, metadata={"help": "Train questions the labels are drawn from."})
    test_questions: int = field(default=400, metadata={"help": "In-domain test questions scored (0: all)."})
    live_questions: int = field(default=24, metadata={"help": "Questions sampled and judged live."})
    stage1_live_questions: int = field(default=64, metadata={"help": "Questions stage 1 is retrained on live."})
    num_samples: int = field(default=4, metadata={"help": "Sampled answers per live question (k)."})
    max_new_tokens: int = field(default=24, metadata={"help": "Longest answer in tokens."})
    head_epochs: int = field(default=50, metadata={"help": "Epochs of head calibration (no dev split: too few labels)."})
    learning_rate: float = field(default=1e-3, metadata={"help": "Learning rate of training and calibration."})
    consistency_judge: str = field(
        default="auto",
        metadata={"help": "Consistency judge of the live records: 'embedding' (all-MiniLM-L6-v2), 'lexical' "
                  "(ROUGE-L >= 0.5), or 'auto' (embedding when its model is installed)."},
    )
    baselines: list[str] = field(
        default_factory=lambda: ["prob", "n_prob", "consis_lex", "consis_sem", "verbal0", "verbal10"],
        metadata={"help": "Training-free baselines of the live run (names of elical_hf.signals.BASELINES)."},
    )
    bootstrap: int = field(default=1000, metadata={"help": "Bootstrap resamples for the intervals (>= 1)."})
    seed: int = field(default=42, metadata={"help": "Seed of question choice, label draws and training."})

    def __post_init__(self) -> None:
        from .signals import BASELINES

        if self.consistency_judge not in CONSISTENCY_JUDGES:
            raise ValueError(f"consistency_judge must be one of {CONSISTENCY_JUDGES}, got {self.consistency_judge!r}.")
        unknown = sorted(set(self.baselines) - set(BASELINES))
        if unknown:
            raise ValueError(f"Unknown baseline(s) {unknown}; choose from {sorted(BASELINES)}.")
        if self.num_labels < 2 or any(n < 2 for n in self.label_budgets):
            raise ValueError("Every label budget (num_labels, label_budgets) needs at least 2 labels.")
        if max([self.num_labels, *self.label_budgets]) > self.label_pool:
            raise ValueError(f"Label budgets cannot exceed the label pool ({self.label_pool} questions).")
        for name in ("num_draws", "live_questions", "stage1_live_questions", "bootstrap", "head_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.test_questions < 0:
            raise ValueError(f"test_questions must be >= 0 (0: all), got {self.test_questions}.")


def demo_partitions(records: Any, settings: DemoSettings) -> dict[str, list[dict]]:
    """The committed records (a path or records, read with their paper split by
    [`~elical_hf.signals.records.load_records`]) split for the demo: `test` (in-domain test, in file order within each
    dataset, at most `test_questions` spread evenly over datasets), `pool` (train questions to draw labels from) and
    `stage1` (train questions for the live stage-1 run), disjoint by question."""
    from .signals.records import load_records

    records = load_records(records, derive=False, splits=True).to_list()
    test_all = [r for r in records if r["paper_split"] == "in_domain_test"]
    train = sorted((r for r in records if r["paper_split"] == "train"), key=lambda r: (r["dataset"], str(r["id"])))
    if settings.test_questions and settings.test_questions < len(test_all):
        datasets = list(dict.fromkeys(r["dataset"] for r in test_all))
        per = -(-settings.test_questions // len(datasets))
        test_all = [r for name in datasets for r in [x for x in test_all if x["dataset"] == name][:per]]
    random.Random(settings.seed).shuffle(train)
    need = settings.label_pool + settings.stage1_live_questions
    if len(train) < need or not test_all:
        raise ValueError(f"{settings.records} has {len(train)} train and {len(test_all)} in-domain test records; the "
                         f"demo needs {need} train records and some test records.")
    return {"test": test_all, "pool": train[: settings.label_pool], "stage1": train[settings.label_pool : need]}


def run_live(settings: DemoSettings, test: list[dict], pool: list[dict]) -> dict[str, Any]:
    """Sample, judge and score with every baseline a few fresh questions (drawn from the test questions, so the
    fresh greedy answers can be compared with the committed ones): the `sample`, `judge` and `score_baselines` steps."""
    from .signals import BASELINES, HFBackend, SamplingSettings
    from .signals.judging import embedding_judge, resolve_consistency_judge
    from .steps import BaselinesArguments, JudgeArguments, SampleArguments, judge, sample, score_baselines

    chosen = random.Random(settings.seed).sample(test, min(settings.live_questions, len(test)))
    backend = HFBackend(settings.model_name_or_path)
    sampling = SamplingSettings(num_samples=settings.num_samples, max_new_tokens=settings.max_new_tokens,
                                seed=settings.seed)
    keep = ("id", "dataset", "question", "answer", "source_split")
    start = time.perf_counter()
    sampled = sample(SampleArguments(questions=[{k: r[k] for k in keep if k in r} for r in chosen]), sampling,
                     backend=backend)
    seconds = time.perf_counter() - start
    release_memory()  # the sampling batch's KV cache, before the judge's model loads
    consistency = resolve_consistency_judge(settings.consistency_judge)
    judged = judge(JudgeArguments(records=sampled.records, correctness="has_answer", consistency=consistency,
                                  lexical_scores=True))
    embedding_judge.cache_clear()  # its sentence-transformers model is not needed again: not held through later peaks
    # Verbal-10's ten demonstrations (~870 tokens) are one unrepeated KV prefix for all prompts (prefix_attention)
    scored = score_baselines(BaselinesArguments(records=judged.records, which=",".join(settings.baselines),
                                                train_records=pool, seed=settings.seed), complete=backend.complete)
    live = scored.records
    same = sum(a["greedy_response"] == r["greedy_response"] for a, r in zip(live, chosen))
    tokens = sum(a["num_generated_tokens"] for a in sampled.records)
    return {
        "records": live,
        "consistency_judge": consistency,
        "precision": backend.precision,
        "questions": len(live),
        "accuracy": 100 * sum(bool(r["greedy_correctness"]) for r in live) / len(live),
        "greedy_same_as_committed": same,
        "tokens_per_second": tokens / max(seconds, 1e-9),
        "baselines": {BASELINES[name].paper_name: values for name, values in scored.scores.items()},
    }


def run_stage1_live(settings: DemoSettings, records: list[dict], output_dir: str) -> dict[str, Any]:
    """Stage 1 retrained live on a small set of judged records (what the shipped adapter went through on 4,800
    questions)."""
    import torch
    from transformers import set_seed

    from .models.auto import AutoModelForConfidence
    from .training.recipe import train_stage
    from .signals.records import load_records
    from .training.training_args import ConfidenceTrainingArguments

    set_seed(settings.seed)
    model = AutoModelForConfidence.from_pretrained(settings.model_name_or_path)
    # batches of 16 accumulated from micro-batches (the same steps; the logged losses agree to 1e-7): 4 x 4 in bf16,
    # 2 x 8 in float32, whose activations and touched weights are twice the size (4 x 4 peaked at 1,685 MiB there:
    # the demo's peak, docs/benchmarks.md section 5)
    micro_batch = 4 if model.dtype == torch.bfloat16 else 2
    training_args = ConfidenceTrainingArguments(
        output_dir=output_dir, num_train_epochs=1, learning_rate=settings.learning_rate,
        per_device_train_batch_size=micro_batch, gradient_accumulation_steps=16 // micro_batch, logging_steps=1,
        report_to="none", disable_tqdm=False, seed=settings.seed)
    trainer = train_stage(model, load_records(records), output_dir, "elicitation", dev_fraction=0.0, seed=settings.seed,
                          training_args=training_args)
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    return {"questions": len(records), "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None, "model": output_dir}


def calibrate_draws(settings: DemoSettings, parts: dict[str, list[dict]], models_dir: str) -> dict[str, Any]:
    """Eli-Only, and EliCal / Cal-Only (head only, on cached features) for every budget and label draw
    ([`~elical_hf.training.head_calibration.label_budget_sweep`]); the first draw of the headline budget is saved as
    models `elical` and `cal-only`."""
    import torch
    from transformers import set_seed

    from .models.auto import AutoModelForConfidence
    from .training.head_calibration import head_confidences, label_budget_sweep
    from .signals.records import load_records

    test_q = [r["question"] for r in parts["test"]]
    pool_rows = load_records(parts["pool"]).to_list()  # judged records with their training columns
    questions = list(dict.fromkeys(test_q + [r["question"] for r in pool_rows]))
    budgets = dict.fromkeys([settings.num_labels, *settings.label_budgets])
    draws = [(n, settings.seed + draw) for n in budgets for draw in range(settings.num_draws)]

    def load(path: str) -> tuple[Any, dict[str, torch.Tensor]]:
        set_seed(settings.seed)  # a fresh head (Cal-Only) is drawn from the global RNG
        model = AutoModelForConfidence.from_pretrained(path)
        features = model.prompt_features(questions, batch_size=64, progress=True)
        return model, dict(zip(questions, features))

    out: dict[str, Any] = {"budgets": {}}
    for method, path in (("EliCal", settings.stage1_model), ("Cal-Only", settings.model_name_or_path)):
        model, cache = load(path)
        if method == "EliCal":
            out["Eli-Only"] = head_confidences(model, cache, test_q)
            out["stage1_questions"] = sum(e.get("num_examples", 0) for e in model.confidence_config.training_history
                                          if e.get("stage") == "elicitation")
        # Cal-Only gets a fresh head per draw: the training seed varies with the labels
        runs = label_budget_sweep(model, pool_rows, draws, cache, test_q, draw_labels=_sample_labels,
                                  fresh_head="torch_default" if method == "Cal-Only" else None, dev_fraction=0.0,
                                  num_train_epochs=settings.head_epochs, learning_rate=settings.learning_rate)
        for run in runs:
            if run.num_labels == settings.num_labels and run.seed == settings.seed:  # the headline's first draw
                model.save_pretrained(os.path.join(models_dir, method.lower()))
            out["budgets"].setdefault(run.num_labels, {}).setdefault(method, []).append(run.confidences)
        del model, cache
    return out


def in_child(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in a spawned process: what it imports and what its heap keeps go when it ends; its
    (picklable) result comes back, and its exception is raised here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def _sample_labels(pool: list[dict], num_labels: int, seed: int) -> list[dict]:
    """The demo's label draw: `num_labels` records of the pool in the order `random.Random(seed).sample` gives."""
    return random.Random(seed).sample(pool, num_labels)


def live_in_child() -> bool:
    """Whether the demo runs its live step (sampling, judges, baselines) in a spawned child ([`in_child`]), before its
    own process imports torch: where the precision policy will pick bfloat16 on this CPU, read without torch (its
    `ELICAL_HF_CPU_BF16`, else native bf16 in the CPU's flags). There the step's half-size tensors fragment glibc's heap
    and the judges' imports (sentence-transformers, scikit-learn: ~270 MiB) stay for the later peaks, unless a child
    takes both away when it ends; in float32 a child only adds its start-up and the parent's records to the tree's peak
    (docs/benchmarks.md section 5 has the runs)."""
    forced = forced_cpu_bf16()
    return forced if forced is not None else bool({"amx_bf16", "avx512_bf16"} & cpu_flags())


def warn_if_busy() -> float | None:
    """Warn when other work already keeps this machine's cores busy (1-minute load average at or above the core
    count): torch runs one OpenMP thread per core, and two such jobs on the same cores slow each other far more than
    twice (`docs/benchmarks.md`). Returns the load average (`None` where the system does not report one)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cores = os.cpu_count() or 1
    if load >= cores:
        logger.warning("This machine is busy (load average %.1f on %d cores): the demo will run several times slower "
                       "than on a quiet machine. Run one torch job at a time, or give each job OMP_NUM_THREADS so "
                       "that their threads add up to the core count.", load, cores)
    return load


def _sentence(diff: dict[str, Any], n: int, draws: int) -> str:
    low, high = diff["auroc_ci"]
    if low > 0 or high < 0:
        verb = "beats" if low > 0 else "falls behind"
        tail = ""
    else:
        verb, tail = "is not distinguishable from", ": the interval includes zero"
    return (f"With {n} labels ({draws} label draws), EliCal {verb} Cal-Only in in-domain AUROC, "
            f"{diff['auroc']:+.1f} [{low:+.1f}, {high:+.1f}] (paired, mean over draws; 95% interval resampling the "
            f"draws, then the test questions){tail}.")


def run_demo(settings: DemoSettings | None = None) -> dict[str, Any]:
    """Run the demo end to end. Writes to `settings.output_dir`: `report.md` (headline, tables, plots),
    `results.json`, `run.json` (settings, sizes, timings, precision), `live_records.parquet` (the live judged answers)
    and `models/` (the live stage-1 model, EliCal and Cal-Only of the first draw). Returns the run summary."""
    from .signals.records import save_records
    from .steps import DiagnoseArguments, EvaluateArguments, diagnose, evaluate, write_evaluation

    settings = settings or DemoSettings()
    warn_if_busy()
    start, timings = time.perf_counter(), {}

    def lap(name: str) -> None:
        release_memory()  # what the step freed goes back to the OS before the next step's peak (elical_hf.utils.memory)
        timings[name] = round(time.perf_counter() - start - sum(timings.values()), 1)

    if not os.path.exists(settings.records):
        raise FileNotFoundError(f"No demo records at {settings.records}; build them with experiments/build_demo_assets.py.")
    os.makedirs(settings.output_dir, exist_ok=True)
    models_dir = os.path.join(settings.output_dir, "models")
    parts = demo_partitions(settings.records, settings)

    live_args = (settings, parts["test"], parts["pool"])
    live = in_child(run_live, *live_args) if live_in_child() else run_live(*live_args)
    save_records(live.pop("records"), os.path.join(settings.output_dir, "live_records.parquet"))
    lap("live sampling, judging and baselines")
    stage1_live = run_stage1_live(settings, parts["stage1"], os.path.join(models_dir, "stage1-live"))
    lap("live stage 1")
    calibrated = calibrate_draws(settings, parts, models_dir)
    lap("stage 2 and Cal-Only")

    test, n_labels = parts["test"], settings.num_labels
    confidences = {"Eli-Only": calibrated["Eli-Only"]}
    for method in ("EliCal", "Cal-Only"):  # the headline budget's draws are rows of the table
        for draw, values in enumerate(calibrated["budgets"][n_labels][method], 1):
            confidences[f"{method}@{n_labels} #{draw}"] = values
    budgets = sorted(calibrated["budgets"])
    draws = {f"{method}@{n}": calibrated["budgets"][n][method] for n in budgets for method in ("EliCal", "Cal-Only")}
    evaluation = evaluate(EvaluateArguments(records=test, baselines=",".join(RECORD_BASELINES),
                                            bootstrap=settings.bootstrap, seed=settings.seed),
                          confidences=confidences, draws=draws,
                          draw_pairs=[(f"EliCal@{n}", f"Cal-Only@{n}") for n in budgets])
    table, curves = evaluation.table, evaluation.curves("in-domain avg")
    differences = {n: evaluation.draw_differences[f"EliCal@{n} − Cal-Only@{n}"] for n in budgets}
    diff, by_budget = differences[n_labels], {n: d["in-domain avg"] for n, d in differences.items()}
    teacher = diagnose(DiagnoseArguments(records=parts["pool"], bootstrap=settings.bootstrap,
                                         seed=settings.seed))  # from the labels alone
    lap("evaluation")

    sentence = _sentence(diff["in-domain avg"], settings.num_labels, settings.num_draws)
    sizes = {"test (in-domain)": len(test), "label pool": len(parts["pool"]), "live": live["questions"],
             "stage-1 live": len(parts["stage1"])}
    notes = demo_notes(settings, sizes, sentence, diff, live, stage1_live, table, calibrated["stage1_questions"],
                       curves, by_budget, teacher)
    written = write_evaluation(evaluation, settings.output_dir, title="EliCal demo", notes=notes, label_curves=curves,
                               plotted=("Consis-Sem", "Eli-Only", f"EliCal@{n_labels} #1", f"Cal-Only@{n_labels} #1"))
    summary = {
        "settings": asdict(settings),
        "headline": sentence,
        "difference": diff,
        "diagnosis": teacher,
        "by_budget": {n: {"EliCal": curves["EliCal"][n] * 100, "Cal-Only": curves["Cal-Only"][n] * 100,
                          "difference": d["auroc"], "difference_ci": d["auroc_ci"]} for n, d in by_budget.items()},
        "live": live,
        "stage1_live": stage1_live,
        "sizes": sizes,
        "models": {"EliCal": os.path.join(models_dir, "elical"), "Cal-Only": os.path.join(models_dir, "cal-only"),
                   "stage-1 (live)": stage1_live["model"], "stage-1 (shipped)": settings.stage1_model},
        "seconds": round(time.perf_counter() - start, 1),
        "timings": timings,
        "report": written["report"],
    }
    atomic_write_json(os.path.join(settings.output_dir, "run.json"), summary)
    return {**summary, "table": table}


def demo_notes(settings: DemoSettings, sizes: dict[str, int], sentence: str, diff: dict[str, Any],
               live: dict[str, Any], stage1_live: dict[str, Any], table: dict[str, Any], stage1_questions: int,
               curves: dict[str, dict[int, float]], by_budget: dict[int, dict[str, Any]],
               teacher: dict[str, Any]) -> str:
    """The report's text before its tables: the headline, AUROC by label budget, what ran live and what came from
    committed files ([`REPORT_TEMPLATE`] rendered with Jinja)."""
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(DEMO_ASSETS), undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    return environment.get_template(REPORT_TEMPLATE).render(
        settings=settings, sizes=sizes, sentence=sentence, diff=diff, live=live, stage1_live=stage1_live,
        stage1_questions=stage1_questions, curves=curves, by_budget=by_budget, teacher=teacher,
        accuracy=next(iter(table.values()))["in-domain avg"]["accuracy"],
        stage1_name=os.path.basename(settings.stage1_model), records_name=os.path.basename(settings.records),
    )
