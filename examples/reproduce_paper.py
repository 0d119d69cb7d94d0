"""CPU-scale replication of the paper's main experiments on SmolLM2-135M-Instruct and the bundled real QA questions.

Steps (each caches its output in `--output_dir`, so an interrupted run continues where it stopped):

1. `questions`: disjoint train / dev / test partitions of the in-domain datasets (NQ, HotpotQA, 2Wiki, ParaRel) by
   normalized question with a fixed seed, plus test questions of the out-of-domain datasets (SQuAD, WebQuestions,
   PopQA) that do not occur in the in-domain partitions.
2. `sample`: greedy answer + k samples per question (resumable shards, `elical_hf.signals.sample_records`).
3. `judge`: correctness (gold-alias containment) and consistency (all-MiniLM-L6-v2 embedding judge and ROUGE-L);
   writes `records.parquet` and `honestybench/`, a publish-ready HonestyBench dataset folder with its card (the copy
   committed as `docs/results/honestybench-smollm2-135m/`).
4. `baselines`: Prob, N-Prob, Consis-Lex, Consis-Sem, Verbal-0 and Verbal-10 on the test questions.
5. `train`: Eli-Only (stage 1 on every train question), then for each label budget n: Cal-Only(n) and EliCal(n),
   calibrating LoRA + head and head only (`--calibration` picks one).
5b. `probes`: the pre-generation probes (`--probes`: SEP, the difference-of-means probe DiM, the logistic P(IK)
   probe) at each of `--probe_layers`, on the frozen base model's features, with the head-only runs' label budgets,
   seeds and label draws (docs/probes.md).
6. `evaluate`: AUROC / ECE / alignment per dataset with bootstrap CIs, in-domain and OOD weighted averages, the
   AUROC-vs-labels plot; writes `report.md`, `results.json`, `differences.json`, figures and `confidences.json`
   (every method's per-question confidences, to recompute the tables without retraining).

Reproduce `docs/results.md` (about two hours on 2 CPU cores):

    HF_HUB_OFFLINE=1 python examples/reproduce_paper.py --output_dir outputs/replication

or train and evaluate on the committed records without sampling again:

    HF_HUB_OFFLINE=1 python examples/reproduce_paper.py --output_dir outputs/retrain \
        --records docs/results/honestybench-smollm2-135m --steps baselines train evaluate
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import math
import os
import random
import time
from typing import Any

from elical_hf.utils.atomic import atomic_folder, atomic_write_text
from elical_hf.data.questions import IN_DOMAIN, IN_DOMAIN_DATASETS, OUT_OF_DOMAIN, load_bundled_questions, split_questions
from elical_hf.models.default_model import DEFAULT_MODEL


logger = logging.getLogger("reproduce_paper")

STEPS = ("questions", "sample", "judge", "baselines", "train", "probes", "evaluate", "ablations")
BASELINE_HEAD_INIT = "torch_default"
"""How a head-only baseline's fresh head is drawn (Cal-Only-head here, the experiments' head-only Cal-Only): PyTorch's
`nn.Linear` default, the reference code's head. The package default (`"normal"`, N(0, 0.02)) leaves a head-only
Cal-Only with 100 labels below chance in domain (`docs/results/head_init.json`), a handicapped baseline."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/replication", help="Cache and results folder.")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="Answering model and backbone of the confidence model.")
    parser.add_argument(
        "--records", default=None,
        help="Judged records (a file, or a HonestyBench folder such as docs/results/honestybench-smollm2-135m) to "
        "train and evaluate on instead of sampling anew.",
    )
    parser.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS, help="Steps to run, in order.")
    parser.add_argument("--train_per_dataset", type=int, default=1200, help="Train questions per in-domain dataset.")
    parser.add_argument("--dev_per_dataset", type=int, default=50, help="Dev questions per in-domain dataset.")
    parser.add_argument("--test_per_dataset", type=int, default=250, help="Test questions per in-domain dataset.")
    parser.add_argument("--ood_per_dataset", type=int, default=350, help="Test questions per out-of-domain dataset.")
    parser.add_argument(
        "--baselines", nargs="+",
        default=["prob", "n_prob", "consis_lex", "consis_lex_reference", "consis_sem", "verbal0", "verbal10"],
        help="Training-free baselines to compute (each is cached once computed): names of "
        "elical_hf.signals.BASELINES, and consis_lex_reference, Consis-Lex under the reference code's ROUGE-L "
        "(the `rouge` package's scoring, docs/reference.md) next to the default's `rouge_score`.",
    )
    parser.add_argument("--num_samples", type=int, default=5, help="Sampled answers per question (k).")
    parser.add_argument("--ablations_result", default="",
                        help="The ablations step also writes its JSON here (e.g. docs/results/ablations.json); it "
                        "always writes ablations.json / ablations.md into --output_dir.")
    parser.add_argument("--max_new_tokens", type=int, default=24, help="Longest answer in tokens.")
    parser.add_argument("--batch_size", type=int, default=64, help="Questions per generation batch.")
    parser.add_argument(
        "--label_budgets", type=int, nargs="+", default=[100, 250, 500, 1000, 0],
        help="n for Cal-Only / EliCal (0: all), in the order the LoRA + head runs are made (runs already made are kept).",
    )
    parser.add_argument(
        "--calibration", nargs="+", default=["head", "lora"], choices=["head", "lora"],
        help="Stage-2 variants to run: head-only on cached features and/or LoRA + head.",
    )
    parser.add_argument("--probes", nargs="+", default=["sep", "dim", "pik"], choices=["sep", "dim", "pik"],
                        help="Pre-generation probes of the probes step (elical_hf.evaluation.probes.PROBES).")
    parser.add_argument("--probe_layers", type=int, nargs="+", default=[-1],
                        help="Layers the probes read (1 to the number of layers; negative from the end, -1 the final).")
    parser.add_argument("--lora_methods", nargs="+", default=["EliCal", "Cal-Only"], choices=["EliCal", "Cal-Only"],
                        help="LoRA + head runs to make (e.g. one of them in a second process).")
    parser.add_argument("--learning_rate", type=float, default=1e-3, help="Learning rate of every training run.")
    parser.add_argument("--train_batch_size", type=int, default=16, help="Training batch size of every run.")
    parser.add_argument("--stage1_epochs", type=float, default=1, help="Epochs of stage 1 (early stopping on dev).")
    parser.add_argument("--examples_per_run", type=int, default=1000,
                        help="LoRA + head calibration runs train about this many examples (epochs = this / n).")
    parser.add_argument("--max_epochs", type=int, default=10, help="Most epochs of a LoRA + head calibration run.")
    parser.add_argument("--head_epochs", type=int, default=50, help="Most epochs of head-only calibration.")
    parser.add_argument("--bootstrap", type=int, default=1000, help="Bootstrap resamples for the intervals.")
    parser.add_argument("--seed", type=int, default=42, help="Seed of partitions, sampling and training.")
    parser.add_argument(
        "--extra_seeds", type=int, nargs="*", default=[43, 44],
        help="More seeds (label draw + stage-2 training seed) for the budgets of --seeded_budgets, so their "
        "EliCal - Cal-Only differences carry seed variance; stage 1 is trained once, with --seed.",
    )
    parser.add_argument("--seeded_budgets", type=int, nargs="*", default=[100, 1000],
                        help="Label budgets run with every seed of --extra_seeds too.")
    parser.add_argument(
        "--correctness", default="has_answer", choices=["has_answer", "has_answer_squad", "f1", "keep"],
        help="Correctness judge of the records (`keep`: the stored labels of --records). The committed records were "
        "judged with `has_answer_squad`; the default re-judges them with the paper's rule.",
    )
    parser.add_argument(
        "--lora_baseline_head_init", default="normal", choices=["normal", "torch_default"],
        help="How LoRA + head Cal-Only's fresh head is drawn (default: the package's, as the committed runs); the "
        "head-only Cal-Only-head is always drawn as the reference's (BASELINE_HEAD_INIT).",
    )
    parser.add_argument(
        "--feature_layer", type=int, default=None,
        help="Hidden state the head reads in every trained run (an index of `hidden_states`, negative from the end; "
        "default: the final layer, the paper's). Scoring and training stop after it; LoRA goes on blocks up to it.",
    )
    parser.add_argument(
        "--runs_from", default=None,
        help="A committed `confidences.json`: its runs and Verbal baselines are taken as finished (written to runs/ "
        "and baselines.json where missing), so only the runs it lacks are trained. Stage 1 is retrained when an "
        "EliCal run needs its adapter; its test confidences are compared with the file's (`stage1_rerun.json`).",
    )
    return parser.parse_args(argv)


def build_partitions(args: argparse.Namespace) -> list[dict[str, Any]]:
    """In-domain train/dev/test by normalized question (all in-domain rows split together, so a question shared by two
    datasets lands in one partition), and out-of-domain test rows whose question is not in-domain. Per-dataset sizes
    are approximate (the split is over the pooled in-domain questions)."""
    sizes = {"train": args.train_per_dataset, "dev": args.dev_per_dataset, "test": args.test_per_dataset}
    in_domain = [row for name in IN_DOMAIN for row in load_bundled_questions(name)]
    total = len(in_domain) // len(IN_DOMAIN)
    if sum(sizes.values()) > total:
        raise ValueError(f"train + dev + test per dataset ({sum(sizes.values())}) exceeds the {total} bundled rows.")
    fractions = {part: size / total for part, size in sizes.items()}
    unused = 1.0 - sum(fractions.values())
    if unused > 1e-9:
        fractions["unused"] = unused
    parts = split_questions(in_domain, fractions, seed=args.seed)
    seen = [row["question"] for row in in_domain]
    rng = random.Random(args.seed)
    ood = []
    for name in OUT_OF_DOMAIN:
        candidates = load_bundled_questions(name, exclude=seen)
        rng.shuffle(candidates)
        ood += [{**row, "partition": "test"} for row in candidates[: args.ood_per_dataset]]
    # Test questions first: a sampling run stopped early still leaves a complete test set.
    labelled = {part: [{**row, "partition": part} for row in parts[part]] for part in sizes}
    return labelled["test"] + ood + labelled["dev"] + labelled["train"]


SETTINGS_IGNORED = ("output_dir", "steps", "bootstrap", "baselines", "label_budgets", "calibration", "extra_seeds",
                    "seeded_budgets", "lora_methods", "runs_from", "ablations_result", "probes", "probe_layers")
"""Arguments that may change between reruns into the same folder (everything else shapes cached results)."""


def check_settings(args: argparse.Namespace) -> None:
    """Store the arguments in `settings.json` on the first run; refuse a rerun with different ones (cached partitions,
    records and runs would not match them)."""
    path = os.path.join(args.output_dir, "settings.json")
    current = {key: value for key, value in sorted(vars(args).items()) if key not in SETTINGS_IGNORED}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
        defaults = vars(parse_args([]))  # an option added since the folder was made counts at its default there
        changed = sorted(key for key in set(stored) | set(current)
                         if stored.get(key, defaults.get(key)) != current.get(key, defaults.get(key)))
        if changed:
            raise SystemExit(
                f"{args.output_dir} holds results made with other settings ({', '.join(changed)} differ); "
                "use a new --output_dir."
            )
    else:
        atomic_write_text(path, json.dumps(current, indent=2) + "\n")


def step_questions(args: argparse.Namespace) -> list[dict[str, Any]]:
    path = os.path.join(args.output_dir, "questions.jsonl")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]
    rows = build_partitions(args)
    atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return rows


def step_sample(args: argparse.Namespace, questions: list[dict[str, Any]]) -> None:
    from elical_hf.signals import HFBackend, SamplingSettings, sample_records

    settings = SamplingSettings(
        num_samples=args.num_samples, max_new_tokens=args.max_new_tokens, seed=args.seed, batch_size=args.batch_size
    )
    backend = HFBackend(args.model)
    sample_records(questions, backend, settings, os.path.join(args.output_dir, "samples"), shard_size=128)


def step_judge(args: argparse.Namespace, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Correctness (gold-alias containment), ROUGE-L and embedding consistency; writes `records.parquet`."""
    from elical_hf.signals import TIMING_FIELDS
    from elical_hf import write_honestybench
    from elical_hf.signals.judging import apply_judges
    from elical_hf.signals.records import load_records, read_records, save_records

    path = os.path.join(args.output_dir, "records.parquet")
    if os.path.exists(path):
        return read_records(path)
    if args.records is not None:  # the committed records: retrain and re-evaluate without resampling
        records = load_records(args.records, derive=False, splits=True).to_list()  # as stored: judged again below
        if args.correctness != "keep":
            summary = apply_judges(records, correctness=args.correctness)
            logger.info("re-judged the correctness of %d records with %s: %s", len(records), args.correctness, summary)
        save_records(records, path)
        return records
    shards = sorted(glob.glob(os.path.join(args.output_dir, "samples", "shards", "shard-*.parquet")))
    records = [record for shard in shards for record in read_records(shard)]
    if not records or len(records) != len(questions):
        raise SystemExit(f"Sampling is not finished ({len(records)} of {len(questions)} records): run --steps sample.")
    for record in records:
        for name in ("shard", *TIMING_FIELDS):
            record.pop(name, None)
        # Our own train / dev / test partition is `partition` (`split` in a folder sampled before it was named so);
        # `source_split` is the paper's split word, as the published HonestyBench files store it (`load_records` reads
        # it as the `paper_split`: dev questions come from the training pool).
        record["partition"] = record.pop("split", None) or record["partition"]
        # the paper's split by the paper's in-domain datasets (IN_DOMAIN is only those with a bundled subset)
        test_split = "in_domain_test" if record["dataset"] in IN_DOMAIN_DATASETS else "ood_test"
        record["source_split"] = test_split if record["partition"] == "test" else "train"
    correctness = "has_answer" if args.correctness == "keep" else args.correctness
    summary = apply_judges(records, correctness=correctness, consistency="embedding", lexical_scores=True)
    logger.info("judged %d records: %s", len(records), summary)
    with atomic_folder(os.path.join(args.output_dir, "honestybench")) as folder:
        write_honestybench(records, folder, pretty_name="HonestyBench (CPU scale)")
    save_records(records, path)  # last: its presence means the judging step is complete
    return records


def step_baselines(args: argparse.Namespace, records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The training-free baselines on the test records (Verbal-10's demonstrations come from train records), each
    cached in `baselines.json` as soon as it is computed (Verbal-10 reads ~500-token prompts: the slowest by far)."""
    from elical_hf.signals import HFBackend, compute_baselines
    from elical_hf.signals.baselines import consis_lex

    path = os.path.join(args.output_dir, "baselines.json")
    test, train = partition(records, "test"), partition(records, "train")
    ids = [r["id"] for r in test]
    cached: dict[str, Any] = {"ids": ids, "scores": {}, "summary": {}}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            cached = json.load(handle)
        if cached["ids"] != ids:
            raise SystemExit(f"{path} scores other test records; delete it to recompute the baselines.")
    backend = None
    for name in args.baselines:
        if name in cached["scores"]:
            continue
        if name.startswith("verbal") and backend is None:
            backend = HFBackend(args.model)
        summary: dict[str, Any] = {}
        complete = backend.complete if backend is not None else None
        if name == REFERENCE_LEX:
            cached["scores"][name] = consis_lex(test, scoring="reference")
        else:
            scores = compute_baselines(test, complete, train, which=[name], seed=args.seed, batch_size=32,
                                       summary=summary)
            cached["scores"][name] = scores[name]
        cached["summary"].update(summary)
        atomic_write_text(path, json.dumps(cached) + "\n")
    return cached["scores"]


# ---------------------------------------------------------------- training


def partition(records: list[dict[str, Any]], part: str) -> list[dict[str, Any]]:
    """The records of one partition in a fixed order, whether they come fresh or from a HonestyBench folder (grouped
    by dataset there), so label subsets, training order and test rows line up across reruns. Test rows keep their
    order within a dataset (alignment reads it)."""
    chosen = [r for r in records if r["partition"] == part]
    if part == "test":
        order = {name: i for i, name in enumerate(IN_DOMAIN + OUT_OF_DOMAIN)}
        return sorted(chosen, key=lambda r: order.get(r["dataset"], len(order)))
    return sorted(chosen, key=lambda r: (r["dataset"], str(r["id"])))


def rows_of(records: list[dict[str, Any]], part: str) -> list[dict[str, Any]]:
    """Trainer rows (`question`, `id`, `consistency`, `correctness`, `greedy_correct`) of one partition."""
    from elical_hf.signals import training_columns

    return [{"question": r["question"], "id": r["id"], **training_columns(r)} for r in partition(records, part)]


def budget_name(n: int, total: int) -> str:
    return "all" if n == 0 or n >= total else str(n)


def lora_epochs(args: argparse.Namespace, num_labels: int) -> float:
    """Epochs of a LoRA + head calibration run: enough to see about `--examples_per_run` examples, at least 1."""
    return float(min(args.max_epochs, max(1, round(args.examples_per_run / num_labels))))


def training_summary(trainer: Any) -> dict[str, Any]:
    """Epochs run, the epoch of the best dev loss (the model kept) and that loss, from the Trainer's log."""
    evals = [log for log in trainer.state.log_history if "eval_loss" in log]
    best = min(evals, key=lambda log: log["eval_loss"]) if evals else {}
    return {"epochs_run": trainer.state.epoch, "best_epoch": best.get("epoch"), "best_eval_loss": best.get("eval_loss"),
            "epochs_planned": trainer.args.num_train_epochs}


class Runs:
    """Each finished run is one JSON file (`runs/<name>.json`: test confidences, labels, summary), so a rerun skips it."""

    def __init__(self, args: argparse.Namespace, test: list[dict[str, Any]]):
        self.folder = os.path.join(args.output_dir, "runs")
        self.models = os.path.join(args.output_dir, "models")
        self.test_questions = [row["question"] for row in test]
        self.test_ids = [row["id"] for row in test]
        os.makedirs(self.folder, exist_ok=True)

    def done(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.folder, f"{name}.json"))

    def save(self, name: str, confidences: list[float], started: float, **info: Any) -> None:
        entry = {"name": name, "confidences": confidences, "test_ids": self.test_ids,
                 "seconds": round(time.perf_counter() - started, 1), **info}
        atomic_write_text(os.path.join(self.folder, f"{name}.json"), json.dumps(entry) + "\n")
        logger.info("%s finished in %.0f s", name, entry["seconds"])


def committed_inputs(
    output_dir: str, records_path: str, confidences_path: str
) -> tuple[argparse.Namespace, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """What the experiments on the committed replication start from: its settings, its records re-judged as its runs
    were (`output_dir/records.parquet`, made once), its test records, and a committed `confidences.json` of them.

    Raises:
        `SystemExit`: the confidences score other test records.
    """
    setup = parse_args(["--output_dir", output_dir, "--records", records_path])
    os.makedirs(output_dir, exist_ok=True)
    records = step_judge(setup, [])
    test = partition(records, "test")
    with open(confidences_path, encoding="utf-8") as handle:
        committed = json.load(handle)
    if committed["ids"] != [r["id"] for r in test]:
        raise SystemExit(f"{confidences_path} scores other test records than {output_dir}/records.parquet.")
    return setup, records, test, committed


def seed_runs_from(args: argparse.Namespace, records: list[dict[str, Any]]) -> None:
    """Take the runs of a committed `confidences.json` as finished: `runs/<name>.json` for each trained method and
    the Verbal baselines in `baselines.json` (the other baselines are recomputed exactly from the records)."""
    from elical_hf.signals import BASELINES

    with open(args.runs_from, encoding="utf-8") as handle:
        committed = json.load(handle)
    test, train = partition(records, "test"), rows_of(records, "train")
    if committed["ids"] != [r["id"] for r in test]:
        raise SystemExit(f"{args.runs_from} scores other test records than --records; it cannot seed these runs.")
    runs = Runs(args, test)
    by_paper_name = {baseline_paper_name(key): key for key in (*BASELINES, REFERENCE_LEX)}
    verbal = {}
    for name, values in committed["confidences"].items():
        if name in by_paper_name:
            if by_paper_name[name].startswith("verbal"):  # generation: expensive, and not what this rerun measures
                verbal[by_paper_name[name]] = values
            continue
        if runs.done(name):
            continue
        budget, _, seed = name.partition("@")[2].partition("~")
        labels = 0 if not budget else len(train) if budget == "all" else int(budget)
        entry = {"name": name, "confidences": values, "test_ids": runs.test_ids, "labels": labels,
                 "seed": int(seed) if seed else args.seed, "from": args.runs_from}
        atomic_write_text(os.path.join(runs.folder, f"{name}.json"), json.dumps(entry) + "\n")
    path = os.path.join(args.output_dir, "baselines.json")
    cached = {"ids": runs.test_ids, "scores": {}, "summary": {}}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            cached = json.load(handle)
    if any(key not in cached["scores"] for key in verbal):
        cached["scores"] = {**verbal, **cached["scores"]}
        atomic_write_text(path, json.dumps(cached) + "\n")
    logger.info("seeded runs/ and baselines.json from %s", args.runs_from)


def step_train(args: argparse.Namespace, records: list[dict[str, Any]]) -> None:
    """Eli-Only, then Cal-Only(n) / EliCal(n) with head-only and LoRA + head calibration for every label budget."""
    from elical_hf import AutoModelForConfidence
    from elical_hf.training.recipe import take_labels, train_stage

    train, dev, test = rows_of(records, "train"), rows_of(records, "dev"), rows_of(records, "test")
    runs = Runs(args, test)
    eli_dir = os.path.join(runs.models, "eli-only")

    def fresh(seed: int = args.seed) -> Any:
        return fresh_model(args, seed)

    def baseline_head_model() -> Any:
        """Cal-Only-head's start: the base model with its head drawn again as [`BASELINE_HEAD_INIT`], seeded by
        --seed ([`redraw_head`])."""
        model = fresh()
        redraw_head(model, args.seed)
        return model

    def score(model: Any) -> list[float]:
        return model.confidence(runs.test_questions, batch_size=32, progress=True)

    jobs = label_jobs(args, len(train))
    head_jobs = jobs if "head" in args.calibration else []
    lora_jobs = jobs if "lora" in args.calibration else []
    needs_stage1 = any(not runs.done(run_name("EliCal-head", n, len(train), seed, args.seed)) for n, seed in head_jobs)
    needs_stage1 |= "EliCal" in args.lora_methods and any(
        not runs.done(run_name("EliCal", n, len(train), seed, args.seed)) for n, seed in lora_jobs)
    # a saved model ends with its confidence_config.json (written last): a killed stage 1 leaves a folder without it
    stage1_saved = os.path.exists(os.path.join(eli_dir, "confidence_config.json"))
    # Eli-Only is a run of its own, unless this process makes only Cal-Only's LoRA + head runs (another process, with
    # --lora_methods EliCal, makes stage 1 and the EliCal runs)
    wants_stage1 = "EliCal" in args.lora_methods or "head" in args.calibration
    if (wants_stage1 and not runs.done("Eli-Only")) or (needs_stage1 and not stage1_saved):
        started = time.perf_counter()
        settings = common_training_args(args, seed=args.seed, num_train_epochs=args.stage1_epochs,
                                        early_stopping_patience=1)
        trainer = train_stage(fresh(), train, eli_dir, "elicitation", dev_data=dev, seed=args.seed, training_args=settings)
        model = AutoModelForConfidence.from_pretrained(eli_dir)
        confidences = score(model)
        if runs.done("Eli-Only"):  # a seeded run: say how closely this stage 1 reproduces it
            with open(os.path.join(runs.folder, "Eli-Only.json"), encoding="utf-8") as handle:
                kept = json.load(handle)["confidences"]
            gaps = sorted(abs(a - b) for a, b in zip(confidences, kept))
            rerun = {"max_abs_diff": gaps[-1], "median_abs_diff": gaps[len(gaps) // 2],
                     "seconds": round(time.perf_counter() - started, 1), "confidences": confidences}
            atomic_write_text(os.path.join(args.output_dir, "stage1_rerun.json"), json.dumps(rerun) + "\n")
            logger.info("stage 1 retrained: test confidences within %.2g (median %.2g) of the kept Eli-Only run",
                        gaps[-1], gaps[len(gaps) // 2])
        else:
            runs.save("Eli-Only", confidences, started, labels=0, **training_summary(trainer))
    # Head-only calibration: the backbone (+ stage-1 LoRA) is frozen, so its features are computed once per backbone.
    for method, load in (("EliCal-head", lambda: AutoModelForConfidence.from_pretrained(eli_dir)),
                         ("Cal-Only-head", baseline_head_model)):
        todo = [(n, seed) for n, seed in head_jobs if not runs.done(run_name(method, n, len(train), seed, args.seed))]
        if not todo:
            continue
        model = load()
        questions = list(dict.fromkeys(row["question"] for row in train))
        logger.info("%s: features of %d train and %d test questions", method, len(questions), len(runs.test_questions))
        cache = dict(zip(questions, model.prompt_features(questions, batch_size=32, progress=True)))
        # the same batches as `score()`, so the confidences equal what the calibrated model itself would output
        test_features = model.prompt_features(runs.test_questions, batch_size=32, progress=True)
        # every seed starts from the same head (stage 1's, or Cal-Only's fresh one); the label draw and the
        # training order change with the seed
        started = time.perf_counter()
        for run in head_only_runs(args, model, train, todo, cache, test_features):
            runs.save(run_name(method, run.num_labels, len(train), run.seed, args.seed), run.confidences, started,
                      labels=len(run.labels), seed=run.seed, summary=run.summary)
            started = time.perf_counter()

    # LoRA + head calibration, in the order of --label_budgets (the largest runs are the slowest: list them last).
    for n, seed in lora_jobs:
        labels = take_labels(train, n, seed)
        for method in args.lora_methods:
            name = run_name(method, n, len(train), seed, args.seed)
            if runs.done(name):
                continue
            started = time.perf_counter()
            if method == "EliCal":
                model = AutoModelForConfidence.from_pretrained(eli_dir, is_trainable=True)
            else:
                model = fresh_model(args, seed, head_init=args.lora_baseline_head_init)
            folder = os.path.join(runs.models, name.lower().replace("@", "-").replace("~", "-seed"))
            model, trainer = lora_calibration(args, model, labels, folder, seed)
            runs.save(name, score(model), started, labels=len(labels), seed=seed, **training_summary(trainer))


def label_jobs(args: argparse.Namespace, total: int) -> list[tuple[int, int]]:
    """The (number of labels, seed) of every calibration run, in the order of --label_budgets (0: all `total`), each
    seeded budget's extra seeds right after its first run."""
    def clip(n: int) -> int:
        return min(n, total) if n else total

    return list(dict.fromkeys((clip(n), seed) for n in args.label_budgets
                              for seed in (args.seed, *(args.extra_seeds if n in args.seeded_budgets else ()))))


def step_probes(args: argparse.Namespace, records: list[dict[str, Any]]) -> None:
    """The probes of --probes at each of --probe_layers, each a run of runs/: SEP on every train question (no labels),
    DiM and P(IK) on the label draws of the head-only runs (`take_labels(train, n, seed)` for every job of
    [`label_jobs`]). Their features are the frozen base model's (what Cal-Only-head reads), cached per layer in
    `features/` ([`elical_hf.training.layer_cache.cache_layer_features`])."""
    from elical_hf.training.layer_cache import cache_layer_features, resolve_layers
    from elical_hf.evaluation.probes import PROBES, train_probe
    from elical_hf.training.recipe import take_labels
    from elical_hf.steps.probe_layers import feature_model, probe_name

    train_records, train, test = partition(records, "train"), rows_of(records, "train"), partition(records, "test")
    runs = Runs(args, test)
    jobs = label_jobs(args, len(train))
    model = feature_model(args.model)
    layers = resolve_layers(args.probe_layers, model.config.get_text_config().num_hidden_layers, "--probe_layers")

    def runs_of(kind: str, layer: int) -> list[tuple[str, int | None, int | None]]:
        """(run name, labels, seed) of probe `kind` at `layer`: one label-free run, or one per job."""
        if not PROBES[kind].supervised:
            return [(probe_name(kind, layer), None, None)]
        return [(run_name(probe_name(kind, layer), n, len(train), seed, args.seed), n, seed) for n, seed in jobs]

    todo = {}
    for layer in layers:
        pending = [(kind, *job) for kind in args.probes for job in runs_of(kind, layer) if not runs.done(job[0])]
        if pending:
            todo[layer] = pending
    if not todo:
        return
    texts = list(dict.fromkeys([*(r["question"] for r in train_records), *runs.test_questions]))
    features = cache_layer_features(model, texts, os.path.join(args.output_dir, "features"), layers=list(todo),
                                    batch_size=32)
    index = {text: i for i, text in enumerate(texts)}
    for layer, pending in todo.items():
        x = features[layer]
        test_features = x[[index[q] for q in runs.test_questions]]
        for kind, name, n, seed in pending:
            started = time.perf_counter()
            rows = train_records if n is None else take_labels(train, n, seed).to_list()
            probe = train_probe(kind, rows, x[[index[r["question"]] for r in rows]])
            runs.save(name, probe.confidence(test_features).tolist(), started, labels=0 if n is None else len(rows),
                      seed=args.seed if seed is None else seed, layer=layer)


def common_training_args(args: argparse.Namespace, **run: Any) -> Any:
    """The `ConfidenceTrainingArguments` every LoRA + head run of this script shares, with a run's own `run` fields
    (its `seed`, epochs and patience)."""
    from elical_hf import ConfidenceTrainingArguments

    return ConfidenceTrainingArguments(per_device_train_batch_size=args.train_batch_size,
                                       learning_rate=args.learning_rate, disable_tqdm=False, report_to="none",
                                       logging_steps=20, **run)


def redraw_head(model: Any, seed: int, init: str = BASELINE_HEAD_INIT) -> dict[str, Any]:
    """Draw `model`'s confidence head again, in place, as `init` from the global RNG seeded with `seed`, and return a
    copy of its weights: how every head-only baseline here starts (the replication's Cal-Only-head, the scaling
    ablations' Cal-Only@100, `experiments/head_init_experiment.py`'s runs, which are therefore the same)."""
    import torch

    from elical_hf.models.modeling import initialize_confidence_head
    from elical_hf.training.head_calibration import confidence_head_module

    torch.manual_seed(seed)
    head = confidence_head_module(model)
    initialize_confidence_head(head, init)
    return {key: value.clone() for key, value in head.state_dict().items()}


def fresh_model(args: argparse.Namespace, seed: int, **model_kwargs: Any) -> Any:
    """The base model with a fresh LoRA and head, drawn from the global RNG seeded with `seed` (Cal-Only's start);
    `model_kwargs` go to `AutoModelForConfidence.from_pretrained` (e.g. `head_init`)."""
    from transformers import set_seed

    from elical_hf import AutoModelForConfidence

    set_seed(seed)
    if getattr(args, "feature_layer", None) is not None:
        model_kwargs.setdefault("feature_layer", args.feature_layer)
    return AutoModelForConfidence.from_pretrained(args.model, **model_kwargs)


def lora_calibration(
    args: argparse.Namespace, model: Any, labels: Any, folder: str, seed: int
) -> tuple[Any, Any]:
    """One LoRA + head calibration run on `labels` (stage 2; early stopping on a dev split of them), saved to
    `folder`: the reloaded model and its trainer."""
    from elical_hf import AutoModelForConfidence
    from elical_hf.training.recipe import train_stage

    settings = common_training_args(args, seed=seed, num_train_epochs=lora_epochs(args, len(labels)),
                                    early_stopping_patience=2)
    trainer = train_stage(model, labels, folder, "calibration", seed=seed, training_args=settings,
                          calibration_trainable="all")
    return AutoModelForConfidence.from_pretrained(folder), trainer


def head_only_runs(
    args: argparse.Namespace, model: Any, pool: Any, draws: list[tuple[int, int]], features: dict[str, Any],
    test_features: Any,
) -> Any:
    """The head-only calibration runs of `draws` (`(labels, seed)`, the replication's head settings), each from the
    model's head as it is now, on `take_labels(pool, labels, seed)` from cached `features`, scored on `test_features`:
    [`elical_hf.training.head_calibration.label_budget_sweep`]'s runs."""
    from elical_hf.training.head_calibration import label_budget_sweep

    return label_budget_sweep(model, pool, draws, features, test_features, learning_rate=args.learning_rate,
                              batch_size=args.train_batch_size, num_train_epochs=args.head_epochs)


def run_name(method: str, num_labels: int, total: int, seed: int, main_seed: int) -> str:
    """`EliCal@100` for the main seed, `EliCal@100~43` for another one (those go to the seed-variance table)."""
    name = f"{method}@{budget_name(num_labels, total)}"
    return name if seed == main_seed else f"{name}~{seed}"


# ---------------------------------------------------------------- evaluation

REFERENCE_LEX = "consis_lex_reference"
"""Consis-Lex scored as the reference code does (`consis_lex(..., scoring="reference")`): a second row next to it."""


def baseline_paper_name(key: str) -> str:
    """How tables name a baseline of `baselines.json`."""
    from elical_hf.signals import BASELINES

    return "Consis-Lex (reference ROUGE-L)" if key == REFERENCE_LEX else BASELINES[key].paper_name


METHOD_ORDER = ("Eli-Only", "Cal-Only-head", "EliCal-head", "Cal-Only", "EliCal")
FIGURE_METHODS = ("Consis-Sem", "Eli-Only", "Cal-Only@1000", "EliCal@1000")


def load_runs(output_dir: str) -> dict[str, dict[str, Any]]:
    """Finished runs, ordered by method then number of labels."""
    runs = {}
    for path in glob.glob(os.path.join(output_dir, "runs", "*.json")):
        with open(path, encoding="utf-8") as handle:
            run = json.load(handle)
        runs[run["name"]] = run
    def key(name: str) -> tuple[int, str, int]:  # the paper's methods in their order, then the probes by name
        method = name.split("@")[0]
        return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method,
                runs[name]["labels"])

    return {name: runs[name] for name in sorted(runs, key=key)}


def step_evaluate(args: argparse.Namespace, records: list[dict[str, Any]]) -> None:
    """Tables with bootstrap intervals, reliability diagrams and the AUROC-vs-labels plots: `report/`. The numbers
    come from [`elical_hf.steps.evaluate`], the evaluation `elical-hf evaluate` and the demo use too."""
    from elical_hf import steps
    from elical_hf.evaluation.plots import auroc_vs_labels_plot

    test = partition(records, "test")
    if [r["id"] for r in steps.test_records(test, say=logger.debug)] != [r["id"] for r in test]:
        raise SystemExit("The test records do not come back from elical_hf.steps.test_records in partition order.")
    confidences: dict[str, list[float]] = {}
    baselines_path = os.path.join(args.output_dir, "baselines.json")
    if os.path.exists(baselines_path):
        with open(baselines_path, encoding="utf-8") as handle:
            confidences.update({baseline_paper_name(k): v for k, v in json.load(handle)["scores"].items()})
    runs = load_runs(args.output_dir)
    stale = [name for name, run in runs.items() if run["test_ids"] != [r["id"] for r in test]]
    if stale:
        raise SystemExit(f"Runs {stale} scored other test records; delete them from runs/ to redo them.")
    seed_runs = {name: run for name, run in runs.items() if "~" in name}  # extra seeds: the seed-variance table
    confidences.update({name: run["confidences"] for name, run in runs.items() if name not in seed_runs})
    draws, comparisons = seed_draws(args, confidences, seed_runs)
    evaluation = steps.evaluate(steps.EvaluateArguments(records=test, baselines="", bootstrap=args.bootstrap,
                                                        seed=args.seed),
                                confidences=confidences, draws=draws, draw_pairs=[c["pair"] for c in comparisons],
                                pairs=comparison_pairs(confidences) if args.bootstrap else (), say=logger.info)
    table, correct = evaluation.table, evaluation.correct
    folder = os.path.join(args.output_dir, "report")
    os.makedirs(folder, exist_ok=True)
    sizes = {part: sum(r["partition"] == part for r in records) for part in ("train", "dev", "test")}
    accuracy = {avg: table[next(iter(table))][avg]["accuracy"] for avg in ("in-domain avg", "OOD avg")}
    notes = (
        f"Model `{args.model}`; {sizes['train']} train (elicitation) / {sizes['dev']} dev / {sizes['test']} test "
        f"questions; k={args.num_samples} samples of at most {args.max_new_tokens} tokens. Greedy accuracy: in-domain "
        f"{accuracy['in-domain avg']:.1f}%, OOD {accuracy['OOD avg']:.1f}%. Metrics x100 with 95% bootstrap intervals "
        f"({args.bootstrap} paired resamples within each dataset).\n"
    )
    over_seeds = {c["name"]: {"seeds": c["seeds"], **{column: evaluation.draw_differences[" − ".join(c["pair"])][column]
                                                      for column in ("in-domain avg", "OOD avg")}}
                  for c in comparisons}
    if over_seeds:
        notes += "\n" + seed_markdown(over_seeds)
        atomic_write_text(os.path.join(folder, "seed_differences.json"), json.dumps(over_seeds, indent=2) + "\n")
    steps.write_evaluation(evaluation, folder, title="EliCal replication (CPU scale)", notes=notes,
                           plotted=[name for name in FIGURE_METHODS if name in confidences], label_curves={})
    # every method's per-question confidences, so the tables can be recomputed (or merged) without retraining
    # (6 significant digits, not 6 decimals: Prob's products of token probabilities go far below 1e-6; Prob is also
    # kept as its log, the greedy answer's summed token log-probability, which ranks exactly as Prob does)
    scores = {"ids": [r["id"] for r in test], "datasets": evaluation.datasets, "correct": correct,
              "confidences": {name: [float(f"{float(c):.6g}") for c in values] for name, values in
                              {**confidences, **{n: r["confidences"] for n, r in seed_runs.items()}}.items()},
              "log_prob": [float(r["greedy_cumulative_logprobs"]) for r in test]}
    atomic_write_text(os.path.join(folder, "confidences.json"), json.dumps(scores) + "\n")
    extra = []
    for column in ("in-domain avg", "OOD avg"):
        by_method = evaluation.curves(column, intervals=True)
        if by_method:
            slug = "in_domain" if column.startswith("in") else "ood"
            label_free = ("Consis-Sem", "Eli-Only", *(name for name in table if name.startswith("SEP-L")))
            references = {name: table[name][column]["auroc"] / 100 for name in label_free
                          if name in table and not math.isnan(table[name][column]["auroc"])}
            auroc_vs_labels_plot(by_method, os.path.join(folder, f"auroc_vs_labels_{slug}.png"), baselines=references,
                                 title=f"AUROC vs correctness labels ({column})")
            extra.append(f"## AUROC vs labels ({column})\n\n![AUROC vs labels](auroc_vs_labels_{slug}.png)\n")
    with open(os.path.join(folder, "report.md"), "a", encoding="utf-8") as handle:
        handle.write("\n" + "\n".join(extra))
    logger.info("report written to %s", os.path.join(folder, "report.md"))


def seed_draws(
    args: argparse.Namespace, confidences: dict[str, list[float]], seed_runs: dict[str, dict[str, Any]]
) -> tuple[dict[str, list[list[float]]], list[dict[str, Any]]]:
    """EliCal vs Cal-Only (LoRA + head, and head-only) at each budget run with more than one seed, as
    [`elical_hf.steps.evaluate`]'s `draws` (`METHOD@N~seeds` -> one confidence list per seed that finished both runs)
    and the comparisons of the seed table: its row name, the draw pair (`draw_pairs`: the mean difference over the
    seeds with the two-level bootstrap interval of that mean, seeds then test questions) and the seeds."""
    seeds = [args.seed, *args.extra_seeds]
    draws: dict[str, list[list[float]]] = {}
    comparisons = []
    budgets = dict.fromkeys(name.split("@")[1].split("~")[0] for name in seed_runs)
    for budget in budgets:
        for a, b in (("EliCal", "Cal-Only"), ("EliCal-head", "Cal-Only-head")):
            def scores(method: str, seed: int) -> list[float] | None:
                name = f"{method}@{budget}" if seed == args.seed else f"{method}@{budget}~{seed}"
                return confidences.get(name) or (seed_runs.get(name) or {}).get("confidences")

            done = [s for s in seeds if scores(a, s) is not None and scores(b, s) is not None]  # both runs finished
            if len(done) < 2 or not args.bootstrap:
                continue
            for method in (a, b):  # `~seeds`: not a `METHOD@N` name, so these draws stay off the label curves
                draws[f"{method}@{budget}~seeds"] = [scores(method, s) for s in done]
            comparisons.append({"name": f"{a} - {b} @ {budget}", "pair": (f"{a}@{budget}~seeds", f"{b}@{budget}~seeds"),
                                "seeds": done})
    return draws, comparisons


def step_ablations(args: argparse.Namespace) -> None:
    """The paper's k and elicitation-data-size ablations, head-only on the frozen base model
    (`experiments/scaling_ablations.py`): `ablations.json` / `ablations.md` here and in docs/results/."""
    import sys

    # an experiment of experiments/ (research: it writes the ablation tables), also when this file is loaded by path
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments"))
    import scaling_ablations

    records = args.records or os.path.join(args.output_dir, "honestybench")
    samples_used = [k for k in scaling_ablations.SAMPLES_USED if k < args.num_samples] + [args.num_samples]
    scaling_ablations.main(["--records", records, "--output_dir", args.output_dir, "--base", args.model,
                            "--correctness", args.correctness, "--seeds", str(args.seed),
                            *map(str, args.extra_seeds), "--head_epochs", str(args.head_epochs),
                            "--samples_used", *map(str, samples_used), "--result", args.ablations_result,
                            "--bootstrap", str(args.bootstrap)])


def seed_markdown(over_seeds: dict[str, Any]) -> str:
    """The seed-variance table of `report.md`."""
    from elical_hf.evaluation.tables import SEED_INTERVAL

    lines = ["## Differences over seeds (x100)\n", f"The mean over seeds with its {SEED_INTERVAL}.\n",
             "| comparison | seeds | in-domain AUROC diff | per seed | OOD AUROC diff | per seed |",
             "|---|---|---:|---|---:|---|"]
    for name, entry in over_seeds.items():
        cells = []
        for column in ("in-domain avg", "OOD avg"):
            cell = entry[column]
            low, high = cell["auroc_ci"]
            per_seed = ", ".join(f"{v:+.1f}" for v in cell["auroc_per_draw"])
            cells += [f"{cell['auroc']:+.1f} [{low:+.1f}, {high:+.1f}]", per_seed]
        lines.append(f"| {name} | {', '.join(map(str, entry['seeds']))} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def comparison_pairs(confidences: dict[str, Any]) -> list[tuple[str, str]]:
    """The comparisons the paper's claims rest on, for every label budget that has both runs."""
    pairs = [("Eli-Only", "Consis-Sem")]
    budgets = dict.fromkeys(name.split("@")[1] for name in confidences if "@" in name)
    for budget in budgets:
        pairs += [(f"EliCal@{budget}", f"Cal-Only@{budget}"), (f"EliCal-head@{budget}", f"Cal-Only-head@{budget}"),
                  (f"EliCal@{budget}", f"EliCal-head@{budget}")]
    return [(a, b) for a, b in pairs if a in confidences and b in confidences]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.makedirs(args.output_dir, exist_ok=True)
    check_settings(args)
    start = time.perf_counter()
    questions = step_questions(args) if args.records is None else []
    if "sample" in args.steps and args.records is None:
        step_sample(args, questions)
    steps_with_records = {"judge", "baselines", "train", "probes", "evaluate"}
    records = step_judge(args, questions) if set(args.steps) & steps_with_records else []
    if args.runs_from is not None:
        seed_runs_from(args, records)
    if "baselines" in args.steps:
        step_baselines(args, records)
    if "train" in args.steps:
        step_train(args, records)
    if "probes" in args.steps:
        step_probes(args, records)
    if "evaluate" in args.steps:
        step_evaluate(args, records)
    if "ablations" in args.steps:
        step_ablations(args)
    logger.info("done in %.0f s", time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
