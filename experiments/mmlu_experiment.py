"""The paper's MMLU test at CPU scale: the replication's models and the training-free baselines on MMLU questions.

MMLU is the paper's unseen format (multiple choice) and its headline generalisation test. Here: SmolLM2-135M-Instruct
answers the bundled MMLU subset (57 subjects x 40 questions; greedy + 5 samples, as the replication), the option judge
judges the answers, and every confidence source is scored on them:

- the training-free baselines from the records (Prob, N-Prob, Consis-Lex, Consis-Sem: here the share of samples that
  chose the greedy answer's option) and Option-Prob (the option letters' probability after the prompt);
- the replication's LoRA + head models (Eli-Only; Cal-Only and EliCal at 100 and 1,000 labels with seeds 42, 43, 44
  and at all 4,800 labels), rebuilt with the replication's committed settings, seeds and label draws (their weights
  are not committed), each checked against the committed confidences on the replication's 2,050 test questions
  before it is used; each reads the multiple-choice prompt, as the paper reads MMLU.

The tables: AUROC, ECE and alignment x100 with 95% intervals; a method with several seeds is the mean over its seeds,
its interval a two-level bootstrap (seeds with replacement, then questions: `evaluation.paired_difference_over_draws`),
and EliCal − Cal-Only is paired within a seed.

SmolLM2-135M answers MMLU near chance, so the whole-subset AUROC measures how well a confidence separates lucky from
unlucky picks as much as knowledge. A second view is fixed before any AUROC was computed (this docstring and
`above_chance_subjects` were committed before the script first ran): each subject's questions are cut
into two halves by a hash of their id; the subjects whose greedy accuracy on the first half (the *selection* half)
is above chance (above 1/4, four options) are kept, and every table of the view is computed on the second half
(the *report* half) of those subjects only. No subject is chosen by a result the view reports.

    # 1. the records (sampled, judged, Option-Prob; committed as docs/results/mmlu-smollm2-135m/records.parquet)
    HF_HUB_OFFLINE=1 elical-hf sample --questions bundled:mmlu --num_samples 5 --max_new_tokens 24 \\
        --output_dir outputs/mmlu/samples
    HF_HUB_OFFLINE=1 elical-hf judge --records outputs/mmlu/samples --correctness option --consistency option \\
        --lexical_scores --output outputs/mmlu/judged.parquet
    HF_HUB_OFFLINE=1 elical-hf baselines --records outputs/mmlu/judged.parquet --which option_prob \\
        --output docs/results/mmlu-smollm2-135m/records.parquet
    # 2. the replication's models (float32, as the committed runs): stage 1 and EliCal in one process, Cal-Only in
    #    another (each on one thread: OMP_NUM_THREADS=1)
    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 python examples/reproduce_paper.py --output_dir outputs/rebuild \\
        --records docs/results/honestybench-smollm2-135m --steps train --calibration lora \\
        --label_budgets 100 1000 0 --seeded_budgets 100 1000 --lora_methods EliCal
    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 python examples/reproduce_paper.py --output_dir outputs/rebuild-cal \\
        --records docs/results/honestybench-smollm2-135m --steps train --calibration lora \\
        --label_budgets 100 1000 0 --seeded_budgets 100 1000 --lora_methods Cal-Only
    # 3. scores and tables (docs/results/mmlu.json, and the Markdown of docs/results.md printed; the models' MMLU
    # confidences are cached in --output_dir)
    HF_HUB_OFFLINE=1 ELICAL_HF_CPU_BF16=0 python experiments/mmlu_experiment.py --rebuild outputs/rebuild outputs/rebuild-cal \\
        --output_dir outputs/mmlu --result docs/results/mmlu.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from typing import Any

import experiments_common


RECORDS = os.path.join(experiments_common.RESULTS, "mmlu-smollm2-135m", "records.parquet")
COMMITTED = os.path.join(experiments_common.RESULTS, "confidences.json")
RESULT = os.path.join(experiments_common.RESULTS, "mmlu.json")
BASELINES = ("prob", "n_prob", "consis_lex", "consis_sem", "option_prob")
METHODS = ("Eli-Only", "Cal-Only@100", "EliCal@100", "Cal-Only@1000", "EliCal@1000", "Cal-Only@all", "EliCal@all")
SEEDS = {"@100": (42, 43, 44), "@1000": (42, 43, 44)}
PAIRS = (("EliCal@100", "Cal-Only@100"), ("EliCal@1000", "Cal-Only@1000"), ("EliCal@all", "Cal-Only@all"))
REPRODUCTION_TOLERANCE = 1e-3
"""Largest difference from a committed confidence (on the replication's test questions) a rebuilt model may have."""
CHANCE = 0.25


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="The judged MMLU records (with Option-Prob).")
    parser.add_argument("--rebuild", nargs="+", default=["outputs/rebuild"],
                        help="reproduce_paper.py's --output_dir(s) of the rebuilt models (runs/ and models/; several "
                        "when the runs were split over processes with --lora_methods).")
    parser.add_argument("--confidences", default=COMMITTED, help="The committed replication confidences.")
    parser.add_argument("--output_dir", default="outputs/mmlu", help="Cache of each model's MMLU confidences.")
    parser.add_argument("--result", default=RESULT, help="Where the tables and per-question confidences go.")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS,
                        help="The trained methods to score and report (default: all; the others are named as left "
                        "out).")
    parser.add_argument("--bootstrap", type=int, default=1000, help="Resamples of the intervals.")
    parser.add_argument("--seed", type=int, default=42, help="Seed of the resamples.")
    return parser.parse_args(argv)


def run_names(method: str) -> list[str]:
    """The runs of one method: `EliCal@100`, `EliCal@100~43`, `EliCal@100~44` for a seeded budget."""
    seeds = next((seeds for budget, seeds in SEEDS.items() if method.endswith(budget)), (42,))
    return [method if seed == 42 else f"{method}~{seed}" for seed in seeds]


def rebuilt(folders: list[str], name: str) -> str:
    """The --rebuild folder that holds run `name` (its `runs/<name>.json`); the first when none does."""
    return next((f for f in folders if os.path.exists(os.path.join(f, "runs", f"{name}.json"))), folders[0])


def model_folder(folders: list[str], name: str) -> str:
    """Where reproduce_paper.py saved a run's model (`runs.models` / its lowercased name)."""
    return os.path.join(rebuilt(folders, name), "models", "eli-only" if name == "Eli-Only"
                        else name.lower().replace("@", "-").replace("~", "-seed"))


def check_reproduced(folders: list[str], committed: dict[str, Any], name: str) -> float | None:
    """The largest difference between the rebuilt run's confidences on the replication's test questions and the
    committed ones; `SystemExit` when it is over [`REPRODUCTION_TOLERANCE`] (not the committed model); `None` for a
    run the committed replication does not have (nothing to check it against)."""
    path = os.path.join(rebuilt(folders, name), "runs", f"{name}.json")
    with open(path, encoding="utf-8") as handle:
        run = json.load(handle)
    if run.get("from"):
        raise SystemExit(f"{path} was seeded from {run['from']}, not trained: rebuild it without --runs_from.")
    if name not in committed["confidences"]:
        return None  # the committed replication has no such run (EliCal@all): rebuilt by its settings, not checked
    if run["test_ids"] != committed["ids"]:
        raise SystemExit(f"{path} scores other test questions than {COMMITTED}.")
    gap = max(abs(a - b) for a, b in zip(run["confidences"], committed["confidences"][name]))
    if gap > REPRODUCTION_TOLERANCE:
        raise SystemExit(f"{name} rebuilt differs from the committed run by up to {gap:.3g} on the replication's "
                         f"test questions (tolerance {REPRODUCTION_TOLERANCE}): not the committed model.")
    return gap


def model_confidences(args: argparse.Namespace, name: str, records: list[dict[str, Any]]) -> list[float]:
    """A rebuilt model's confidences on the MMLU records (multiple-choice prompt), cached in --output_dir."""
    from elical_hf import AutoModelForConfidence
    from elical_hf.utils.atomic import atomic_write_text
    from elical_hf.steps.evaluate import model_confidences as score

    path = os.path.join(args.output_dir, "models", f"{name}.json")
    ids = [r["id"] for r in records]
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            cached = json.load(handle)
        if cached["ids"] == ids:
            return cached["confidences"]
    model = AutoModelForConfidence.from_pretrained(model_folder(args.rebuild, name))
    values = score(model, records, batch_size=32)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write_text(path, json.dumps({"ids": ids, "confidences": values}) + "\n")
    return values


def half_of(record_id: str) -> int:
    """0 (selection half) or 1 (report half) of a question, from a hash of its id."""
    return hashlib.sha256(record_id.encode("utf-8")).digest()[0] % 2


def above_chance_subjects(records: list[dict[str, Any]]) -> list[str]:
    """The subjects whose greedy accuracy on their selection half is above [`CHANCE`] (the second view's rule,
    fixed before any AUROC was computed)."""
    totals: dict[str, list[int]] = {}
    for record in records:
        if half_of(record["id"]) == 0:
            totals.setdefault(record["subject"], []).append(int(bool(record["greedy_correctness"])))
    return sorted(subject for subject, labels in totals.items() if sum(labels) / len(labels) > CHANCE)


def table(records: list[dict[str, Any]], sources: dict[str, list[list[float]]], bootstrap: int,
          seed: int) -> dict[str, Any]:
    """Each method's metrics (mean over its seeds, hierarchical interval) and the paired differences of [`PAIRS`]."""
    from elical_hf.evaluation.tables import paired_difference_over_draws

    correct = [int(bool(r["greedy_correctness"])) for r in records]
    datasets, splits = ["mmlu"] * len(records), ["mmlu"] * len(records)
    common = dict(bootstrap=bootstrap, seed=seed)
    rows = {name: paired_difference_over_draws(correct, datasets, splits, draws, None, **common)["mmlu"]
            for name, draws in sources.items()}
    differences = {f"{a} − {b}": paired_difference_over_draws(correct, datasets, splits, sources[a], sources[b],
                                                              **common)["mmlu"]
                   for a, b in PAIRS if a in sources and b in sources}
    return {"n": len(records), "accuracy": 100 * sum(correct) / len(correct), "methods": rows,
            "differences": differences}


def per_subject(records: list[dict[str, Any]], sources: dict[str, list[list[float]]]) -> dict[str, Any]:
    """AUROC x100 of each method (mean over seeds) per subject with at least 5 correct and 5 wrong answers."""
    from elical_hf.metrics.functional import auroc

    out: dict[str, Any] = {}
    for subject in sorted({r["subject"] for r in records}):
        rows = [i for i, r in enumerate(records) if r["subject"] == subject]
        labels = [int(bool(records[i]["greedy_correctness"])) for i in rows]
        entry: dict[str, Any] = {"n": len(rows), "correct": sum(labels)}
        if min(sum(labels), len(labels) - sum(labels)) >= 5:
            entry["auroc"] = {name: 100 * sum(auroc([d[i] for i in rows], labels) for d in draws) / len(draws)
                              for name, draws in sources.items()}
        out[subject] = entry
    return out


def _cell(cell: dict[str, Any], metric: str, signed: bool = False) -> str:
    value, (low, high) = cell[metric], cell[f"{metric}_ci"]
    form = "{:+.1f}" if signed else "{:.1f}"
    return f"{form.format(value)} [{form.format(low)}, {form.format(high)}]".replace("-", "−")


def markdown(result: dict[str, Any]) -> str:
    """The tables `docs/results.md` shows, from a result of [`main`]: each view's methods (AUROC, ECE, alignment x100
    with their 95% intervals) and its paired differences, and the methods not rebuilt yet."""
    lines = []
    if result["not_rebuilt"]:
        lines += [f"Not rebuilt and scored yet, so not in these tables: {', '.join(result['not_rebuilt'])}.", ""]
    for key, title in (("all", "every question"), ("above_chance_view", "the above-chance view")):
        view = result[key]
        lines += [f"**MMLU, {title}** ({view['n']} questions, greedy accuracy {view['accuracy']:.1f}%)", "",
                  "| method | AUROC | ECE | alignment |", "|---|---|---|---|"]
        for name, cell in view["methods"].items():
            lines.append(f"| {name} | {_cell(cell, 'auroc')} | {_cell(cell, 'ece')} | {_cell(cell, 'alignment')} |")
        for name, cell in view["differences"].items():
            lines.append(f"| {name} | {_cell(cell, 'auroc', True)} | {_cell(cell, 'ece', True)} | "
                         f"{_cell(cell, 'alignment', True)} |")
        lines.append("")
    return "\n".join(lines)


def _difference(name: str, cell: dict[str, Any]) -> str:
    low, high = cell["auroc_ci"]
    verdict = ("ahead" if low > 0 else "behind") if low > 0 or high < 0 else "not distinguishable from zero"
    return f"{name}: AUROC {_cell(cell, 'auroc', True)}, {verdict}"


def summary(result: dict[str, Any]) -> str:
    """The sentences of `docs/results.md` that quote numbers besides the tables, from a result of [`main`]."""
    everything, view = result["all"], result["above_chance_view"]
    n, correct = everything["n"], sum(result["correct"])
    picked = n - result["no_choice"]
    lines = [
        f"SmolLM2-135M-Instruct answers {everything['accuracy']:.1f}% of the {n:,} questions correctly ({correct:,}); "
        f"chance is {result['chance']:.0f}%. {result['no_choice']:,} greedy answers "
        f"({100 * result['no_choice'] / n:.1f}%) commit to no option, and of the {picked:,} that pick one, "
        f"{100 * correct / picked:.1f}% are right.",
        f"The above-chance view keeps {len(view['subjects'])} of {len(result['per_subject'])} subjects; on their "
        f"report halves ({view['n']} questions) the accuracy is {view['accuracy']:.1f}%.",
    ]
    for key, title in (("all", "On every question"), ("above_chance_view", "In the above-chance view")):
        differences = result[key]["differences"]
        if differences:
            lines.append(f"{title}, EliCal − Cal-Only (mean over seeds, 95% interval over seeds and questions): "
                         + "; ".join(_difference(name, cell) for name, cell in differences.items()) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from elical_hf.utils.atomic import atomic_write_text, json_text
    from elical_hf.signals import BASELINES as REGISTERED, compute_baselines
    from elical_hf.signals.records import load_records

    args = parse_args(argv)
    records = load_records(args.records).to_list()
    with open(args.confidences, encoding="utf-8") as handle:
        committed = json.load(handle)
    sources: dict[str, list[list[float]]] = {}
    for key in BASELINES:
        sources[REGISTERED[key].paper_name] = [compute_baselines(records, which=[key], progress=False)[key]]
    reproduced, missing = {}, []
    for method in METHODS:
        names = run_names(method)
        if method not in args.methods:
            missing.append(method)
            continue
        if not all(os.path.exists(os.path.join(rebuilt(args.rebuild, n), "runs", f"{n}.json")) for n in names):
            missing.append(method)  # not (fully) rebuilt yet: left out of the tables, and said
            continue
        reproduced.update({name: check_reproduced(args.rebuild, committed, name) for name in names})
        sources[method] = [model_confidences(args, name, records) for name in names]
    subjects = above_chance_subjects(records)
    view = [i for i, r in enumerate(records) if r["subject"] in subjects and half_of(r["id"]) == 1]
    no_choice = sum(r.get("greedy_choice") is None for r in records)
    result = {
        "records": os.path.relpath(args.records, experiments_common.ROOT),
        "chance": 100 * CHANCE,
        "no_choice": no_choice,
        "reproduced_max_abs_diff": reproduced,
        "not_rebuilt": missing,
        "all": table(records, sources, args.bootstrap, args.seed),
        "above_chance_view": {"rule": "subjects whose greedy accuracy on the selection half (hash of id) is above "
                                      f"{CHANCE}; reported on their other half",
                              "subjects": subjects,
                              **table([records[i] for i in view],
                                      {k: [[d[i] for i in view] for d in v] for k, v in sources.items()},
                                      args.bootstrap, args.seed)},
        "per_subject": per_subject(records, sources),
        "ids": [r["id"] for r in records],
        "correct": [int(bool(r["greedy_correctness"])) for r in records],
        "subjects": [r["subject"] for r in records],
        "confidences": {name: draws for name, draws in sources.items()},
    }
    atomic_write_text(args.result, json_text(result))
    print(summary(result) + "\n\n" + markdown(result))
    print(f"wrote {args.result}: accuracy {result['all']['accuracy']:.1f}% on {len(records)} questions, "
          f"{len(subjects)} subjects above chance")
    return result


if __name__ == "__main__":
    main()
