"""Which layer should the confidence head read? Every method of issue 39 section 4 on every layer, head-only, on CPU.

    HF_HUB_OFFLINE=1 python experiments/layer_experiment.py --output_dir outputs/layers
    HF_HUB_OFFLINE=1 python experiments/layer_experiment.py --output_dir outputs/layers --layer_rule train_cv

About 25 minutes with `OMP_NUM_THREADS=1` on 2 Intel Xeon cores shared with other jobs (bfloat16 by the precision
policy; `docs/results/layers/layers.json`): 9 min for the features of 7,050 questions, 20-80 s a layer for its 28
head and probe fits (most of it the three stage-1 fits on 4,800 questions) and half a minute of evaluation; 14
minutes on 2 free AMD EPYC cores. `ELICAL_HF_CPU_BF16=0` computes the features in float32, as the committed
replication did (about 1.7x slower). The second command reuses the first's features and runs and adds only the
train-pool rule's cross-validation.

On the committed replication records (`docs/results/honestybench-smollm2-135m`, correctness re-judged with
`has_answer` as `examples/reproduce_paper.py` does by default) and the frozen base model (the embedded SmolLM2-135M,
`use_lora=False`: no LoRA anywhere), the last prompt token's hidden state of every layer is cached once for the train,
dev and test questions (`elical_hf.training.layer_cache.cache_layer_features`, in `--output_dir/features`). Then, for every
layer (`--layers`), seed (`--seeds`) and label budget (`--label_budgets`):

- **Eli-Only-head**: a fresh head fit on the label-free consistency target of every train question (stage 1 on cached
  features, `calibrate_head(stage="elicitation")`), seeded row order and early-stopping split;
- **Cal-Only-head@n**: a fresh head calibrated on `n` correctness labels (`calibrate_head`, the paper's MSE target:
  the share of the k samples judged correct), the label draw `take_labels(train, n, seed)` of the replication. Its
  fresh head is drawn as the reference's `nn.Linear` is (`head_init="torch_default"`, [`BASELINE_HEAD_INIT`]): with
  transformers' N(0, 0.02) draw the head-only baseline scores below chance with 100 labels
  (`docs/results/head_init.json`), which would flatter every method compared with it;
- **EliCal-head@n**: that seed's Eli-Only-head, then calibrated on the same `n` labels (stage 2, head only);
- **SEP** (label-free, one per layer: it has no seed), and the **DiM@n** and **P(IK)@n** probes on the same label
  draws (`elical_hf.evaluation.probes.train_probe`, as `reproduce_paper.py --steps probes`).

Every head fit is the replication's head-only recipe (`calibrate_head`, learning rate 1e-3, batch 16, at most 50
epochs, early stopping on a seeded 10% of the rows); stage 1 starts from the package's default head draw (`normal`).
Because the backbone is the frozen base model everywhere, EliCal-head here starts from a head-only stage 1, not from
the replication's LoRA + head stage 1; and stage 1 is fit once per seed (the replication fits it once), so
Eli-Only-head has seed variance too.

Reported: the mean per-dataset AUROC (size-weighted over datasets, `elical_hf.evaluation.tables`) on the test questions, in
domain and out of domain, per (method, budget, layer), averaged over seeds; the layer each row would use, chosen
**never on test**: `--layer_rule dev` (default) takes, per (method, budget), the layer of highest dev AUROC (the
replication's 200 in-domain dev questions, mean over seeds; the earliest of equal ones), `--layer_rule train_cv` one
layer for every method, the recommendation of `elical-hf probe-layers` (5-fold cross-validated AUROC of a logistic
correctness probe on the train pool: its 4,800 labels make it the steadier rule, the dev split holding only about 25
correct answers at 12% accuracy); and the chosen layer against the final layer: the difference of test AUROC with
the 95% two-level bootstrap interval of the mean over seeds (seeds resampled with replacement, then test questions:
`evaluation.paired_difference_over_draws`, as the replication pools seeds); and, at the final layer,
EliCal-head@n − Cal-Only-head@n (the method against its fairly initialised baseline, head-only in both stages), with
the same kind of interval.

Writes `layers.json` (every number), `layers.md` (tables), `auroc_vs_layer.png` and `layer_runs.json` (the test
confidences behind every comparison: each run at its chosen and at the final layer, per seed, with the question ids)
to `--output_dir`; each (layer, seed)'s dev and test confidences are kept in `--output_dir/runs/`, so a rerun (or a
run of more layers) recomputes only what is missing. `--model` takes a Hub id, a model folder or a `.gguf` file
(dequantized once into `--output_dir/models/`), with `--records` of that model's answers.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import subprocess
import time
from typing import Any

import numpy as np


HERE = os.path.dirname(os.path.abspath(__file__))
import experiments_common as common  # noqa: E402,F401 - experiments/ and examples/ on the path (the shared module)
import reproduce_paper  # noqa: E402 - its sibling: the replication's partitions and training rows
from label_selection import HEAD_SETTINGS, calibrated_confidences  # noqa: E402 - the head-only recipe


RECORDS = common.RECORDS
AVERAGES = ("in-domain avg", "OOD avg")
BASELINE_HEAD_INIT = reproduce_paper.BASELINE_HEAD_INIT
"""How Cal-Only-head's fresh head is drawn: PyTorch's `nn.Linear` default, the reference code's head."""
HEAD_METHODS = ("Eli-Only-head", "Cal-Only-head", "EliCal-head")
LAYER_RULES = {
    "dev": "per method and label budget, the layer of highest mean dev AUROC over seeds (dev: the records' dev "
           "partition, in domain; the earliest of equal layers)",
    "train_cv": "one layer for every method: elical-hf probe-layers' recommendation, the highest cross-validated AUROC "
                "of a logistic correctness probe on the train pool (the earliest of equal layers)",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from elical_hf.evaluation.probes import PROBES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="Judged records with train / dev / test partitions.")
    parser.add_argument("--model", default=None,
                        help="The base model whose features are read: a Hub id, a folder or a .gguf file (default: the "
                        "embedded SmolLM2-135M-Instruct, the replication's).")
    parser.add_argument("--output_dir", default="outputs/layers", help="Results, features and runs go here.")
    parser.add_argument("--layers", type=int, nargs="+", default=None,
                        help="Layers to measure (1 to the number of layers; negative from the end); all by default. "
                        "The final layer is always added.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44],
                        help="Seeds: label draw, stage-1 / stage-2 row order and early-stopping split.")
    parser.add_argument("--label_budgets", type=int, nargs="+", default=[100, 1000], help="Correctness labels.")
    parser.add_argument("--probes", nargs="+", default=["sep", "dim", "pik"], choices=sorted(PROBES),
                        help="Pre-generation probes (elical_hf.evaluation.probes.PROBES).")
    parser.add_argument("--layer_rule", default="dev", choices=sorted(LAYER_RULES), help="How the layer is chosen.")
    parser.add_argument("--folds", type=int, default=5, help="Folds of --layer_rule train_cv.")
    parser.add_argument("--correctness", default="has_answer", choices=["has_answer", "has_answer_squad", "f1", "keep"],
                        help="Correctness judge the records are re-judged with (`keep`: their stored labels).")
    parser.add_argument("--head_epochs", type=int, default=HEAD_SETTINGS["num_train_epochs"])
    parser.add_argument("--bootstrap", type=int, default=1000, help="Resamples of the paired intervals.")
    parser.add_argument("--batch_size", type=int, default=32, help="Questions per forward pass of the feature cache.")
    parser.add_argument("--fit_threads", type=int, default=1,
                        help="torch threads while heads and probes are fit (the feature pass uses torch's default): a "
                        "linear head's steps are too small to share, and on 2 busy cores one thread fits stage 1 ~10x "
                        "faster than two.")
    parser.add_argument("--cache_dir", default=None, help="The feature cache (default: OUTPUT_DIR/features).")
    parser.add_argument("--allow_other_model", action="store_true",
                        help="Read records that are another model's answers than --model's.")
    args = parser.parse_args(argv)
    if any(n < 2 for n in args.label_budgets):
        parser.error("--label_budgets: each budget is at least 2 labels.")
    if args.bootstrap < 1:
        parser.error("--bootstrap must be >= 1.")
    return args


@contextlib.contextmanager
def torch_threads(count: int):
    """torch runs on `count` threads within this block."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def shown_path(path: str) -> str:
    """`path` relative to the repository when it lies inside it (as the results name the records), else as given."""
    repo = os.path.dirname(HERE)
    absolute = os.path.abspath(path)
    return os.path.relpath(absolute, repo) if absolute.startswith(repo + os.sep) else path


def cpu_model() -> str:
    """`lscpu`'s model name (what the timings ran on)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return "unknown"
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
    return names[0] if names else "unknown"


def resolve_model(model: str | None, output_dir: str) -> str:
    """`model` as `from_pretrained` takes it: a `.gguf` file is dequantized once (transformers' GGUF reader) into
    `output_dir/models/<name>`, which is returned; anything else is returned as it is (default: DEFAULT_MODEL)."""
    from elical_hf import DEFAULT_MODEL

    if model is None:
        return DEFAULT_MODEL
    if not (model.lower().endswith(".gguf") and os.path.isfile(model)):
        return model
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from elical_hf.utils.atomic import atomic_folder
    from elical_hf.utils.loading import load_pretrained

    target = os.path.join(output_dir, "models", os.path.splitext(os.path.basename(model))[0])
    if not os.path.isfile(os.path.join(target, "config.json")):
        folder, name = os.path.split(os.path.abspath(model))
        print(f"dequantizing {model} into {target}", flush=True)
        loaded = load_pretrained(AutoModelForCausalLM.from_pretrained, folder, gguf_file=name,
                                 quantization_config=GgufConfig(dequantize=True))
        tokenizer = load_pretrained(AutoTokenizer.from_pretrained, folder, gguf_file=name)
        with atomic_folder(target) as staging:
            loaded.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    return target


def load_partitions(path: str, correctness: str) -> dict[str, list[dict[str, Any]]]:
    """The records' train / dev / test partitions (the replication's `partition` field; records without one: test for
    the test splits, train otherwise), correctness re-judged by `correctness` (`keep`: the stored labels), in the
    replication's order (`reproduce_paper.partition`)."""
    from elical_hf.signals.judging import apply_judges
    from elical_hf.signals.records import load_records

    records = load_records(path, derive=False, splits=True).to_list()  # as stored: judged again below
    for record in records:
        if not record.get("partition"):
            record["partition"] = "test" if record["paper_split"] in ("in_domain_test", "ood_test") else "train"
    if correctness != "keep":
        apply_judges(records, correctness=correctness)
    parts = {part: reproduce_paper.partition(records, part) for part in ("train", "dev", "test")}
    if not parts["train"] or not parts["test"]:
        raise SystemExit(f"{path} needs train and test records (found {len(parts['train'])} and {len(parts['test'])}).")
    return parts


def run_key(parts: dict[str, list[dict[str, Any]]], settings: dict[str, Any], fingerprint: str) -> str:
    """What a cached run depends on: the features (their fingerprint: model and questions), the head settings, the
    baseline's head init, the probes' definitions and every target and label of the train, dev and test records."""
    from elical_hf.evaluation.probes import DEFAULT_L2, PROBES
    from elical_hf.signals import training_columns

    digest = hashlib.sha256(json.dumps([fingerprint, settings, DEFAULT_L2, BASELINE_HEAD_INIT,
                                        {k: p.description for k, p in PROBES.items()}], sort_keys=True).encode())
    for part in ("train", "dev", "test"):
        for r in parts[part]:
            digest.update(json.dumps([r["question"], str(r.get("id")), training_columns(r),
                                      r.get("consistency_judgement"), r.get("sampling_response")],
                                     default=str).encode())
    return digest.hexdigest()[:16]


def load_run(path: str) -> dict[str, np.ndarray]:
    """The confidences (dev, then test) of the runs kept in `path` (an `.npz` file), by run name; `{}` if none."""
    if not os.path.isfile(path):
        return {}
    with np.load(path) as kept:
        return {name: kept[name] for name in kept.files}


def save_run(path: str, runs: dict[str, Any]) -> None:
    """Keep `runs` (run name -> confidences) in `path`, exactly (float64), written atomically."""
    from elical_hf.utils.atomic import atomic_file

    with atomic_file(path) as staging, open(staging, "wb") as handle:
        np.savez(handle, **{name: np.asarray(values, dtype=np.float64) for name, values in runs.items()})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    cpu = cpu_model()
    print(f"CPU: {cpu}", flush=True)

    import torch

    from elical_hf.training.head_calibration import confidence_head_module
    from elical_hf.training.layer_cache import cache_layer_features, resolve_layers
    from elical_hf.models.modeling import initialize_confidence_head
    from elical_hf.evaluation.probes import PROBES, train_probe
    from elical_hf.training.recipe import take_labels
    from elical_hf.signals.records import check_records_match
    from elical_hf.steps.probe_layers import feature_model

    seconds: dict[str, Any] = {}
    os.makedirs(args.output_dir, exist_ok=True)
    t = time.perf_counter()
    parts = load_partitions(args.records, args.correctness)
    seconds["records"] = round(time.perf_counter() - t, 1)
    train_records, dev_records, test_records = parts["train"], parts["dev"], parts["test"]
    if args.layer_rule == "dev" and not any(r.get("greedy_correctness") is not None for r in dev_records):
        raise SystemExit(f"{args.records} has no judged dev records to choose the layer on: use --layer_rule train_cv.")
    train = reproduce_paper.rows_of(train_records, "train")  # the rows the replication draws its labels from
    model_path = resolve_model(args.model, args.output_dir)
    torch.manual_seed(args.seeds[0])  # the fresh heads every Eli-Only-head and every Cal-Only-head start from
    t = time.perf_counter()
    model = feature_model(model_path)
    check_records_match(train_records + dev_records + test_records, model.confidence_config.base_model_name_or_path,
                        str(args.records), args.allow_other_model)
    total_layers = model.config.get_text_config().num_hidden_layers
    layers = sorted(set(resolve_layers(args.layers, total_layers)) | {total_layers})
    head = confidence_head_module(model)
    fresh = {k: v.clone() for k, v in head.state_dict().items()}  # stage 1's start: the package's default draw
    initialize_confidence_head(head, BASELINE_HEAD_INIT)
    baseline = {k: v.clone() for k, v in head.state_dict().items()}  # Cal-Only-head's start
    dtype = str(model.get_input_embeddings().weight.dtype).removeprefix("torch.")
    seconds["load"] = round(time.perf_counter() - t, 1)

    texts = list(dict.fromkeys(r["question"] for r in train_records + dev_records + test_records))
    t = time.perf_counter()
    features = cache_layer_features(model, texts, args.cache_dir or os.path.join(args.output_dir, "features"),
                                    layers=layers, batch_size=args.batch_size)
    seconds["features"] = round(time.perf_counter() - t, 1)
    print(f"features of {len(texts)} questions at {len(layers)} layers ({dtype}): {seconds['features']} s", flush=True)
    index = {text: i for i, text in enumerate(texts)}
    scored = [r["question"] for r in dev_records + test_records]  # every run is scored on dev, then test
    settings = {**HEAD_SETTINGS, "num_train_epochs": args.head_epochs}
    folder = os.path.join(args.output_dir, "runs", run_key(parts, settings, os.path.basename(features.folder)))
    os.makedirs(folder, exist_ok=True)
    probe_kinds = [kind for kind in args.probes if PROBES[kind].supervised]

    def expected(seed: int) -> list[str]:
        names = ["Eli-Only-head"]
        for n in args.label_budgets:
            names += [f"Cal-Only-head@{n}", f"EliCal-head@{n}", *(f"{PROBES[k].paper_name}@{n}" for k in probe_kinds)]
        return names

    def measure(layer: int) -> tuple[dict[str, list[np.ndarray]], bool]:
        """Every run at `layer`: run name -> one confidence array (dev, then test) per seed, and whether any had to
        be fit (the others come from `folder`)."""
        x = np.asarray(features[layer], dtype=np.float32)
        cache = dict(zip(texts, torch.from_numpy(x)))
        # the head reads `layer` (calibrate_head recomputes one question there to check the cache is the model's)
        (model.get_base_model() if hasattr(model, "get_base_model") else model).confidence_config.feature_layer = layer
        scored_x = x[[index[q] for q in scored]]
        out: dict[str, list[np.ndarray]] = {}
        computed = False
        for seed in args.seeds:
            path = os.path.join(folder, f"layer-{layer:03d}-seed-{seed}.npz")
            done = load_run(path)
            if not set(expected(seed)) <= set(done):
                computed = True

                def head_only(start: dict[str, Any], rows: list[dict[str, Any]], stage: str = "calibration") -> Any:
                    return calibrated_confidences(model, start, cache, rows, scored, seed, settings, stage)

                done = {"Eli-Only-head": head_only(fresh, train, "elicitation")}
                stage1 = {k: v.clone() for k, v in confidence_head_module(model).state_dict().items()}
                for n in args.label_budgets:
                    labels = take_labels(train, n, seed).to_list()
                    done[f"Cal-Only-head@{n}"] = head_only(baseline, labels)
                    done[f"EliCal-head@{n}"] = head_only(stage1, labels)
                    for kind in probe_kinds:
                        probe = train_probe(kind, labels, x[[index[r["question"]] for r in labels]])
                        done[f"{PROBES[kind].paper_name}@{n}"] = probe.confidence(scored_x)
                save_run(path, done)
            for name in expected(seed):
                out.setdefault(name, []).append(np.asarray(done[name], dtype=np.float64))
        if "sep" in args.probes:  # label-free and seedless: one run per layer
            path = os.path.join(folder, f"layer-{layer:03d}-sep.npz")
            done = load_run(path)
            if "SEP" not in done:
                computed = True
                probe = train_probe("sep", train_records, x[[index[r["question"]] for r in train_records]])
                done = {"SEP": probe.confidence(scored_x)}
                save_run(path, done)
            out["SEP"] = [np.asarray(done["SEP"], dtype=np.float64)]
        return out, computed

    runs: dict[int, dict[str, list[np.ndarray]]] = {}  # layer -> run name -> one confidence array per seed
    seconds["layers"] = {}
    selection: dict[str, Any] = {"rule": args.layer_rule, "description": LAYER_RULES[args.layer_rule]}
    with torch_threads(args.fit_threads):
        for layer in layers:
            t = time.perf_counter()
            runs[layer], computed = measure(layer)
            seconds["layers"][layer] = round(time.perf_counter() - t, 1)
            print(f"layer {layer}: {seconds['layers'][layer]} s{'' if computed else ' (cached runs)'}", flush=True)
        del model
        if args.layer_rule == "train_cv":
            t = time.perf_counter()
            selection["train_cv"] = train_cv_curve(features, train_records, index, args)
            seconds["train_cv"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    result = summarize(args, runs, layers, dev_records, test_records, selection)
    seconds["evaluation"] = round(time.perf_counter() - t, 1)
    seconds["total"] = round(time.perf_counter() - started, 1)
    result.update(
        model=shown_path(model_path), records=shown_path(args.records), correctness=args.correctness, cpu=cpu,
        dtype=dtype, torch_threads=torch.get_num_threads(), fit_threads=args.fit_threads, seeds=args.seeds,
        label_budgets=args.label_budgets, probes=args.probes, head_settings=settings,
        baseline_head_init=BASELINE_HEAD_INIT, features_cache=features.folder,
        runs_folder=folder,
        sizes={"train": len(train_records), "dev": len(dev_records), "test": len(test_records),
               "in_domain_test": sum(r["paper_split"] == "in_domain_test" for r in test_records),
               "ood_test": sum(r["paper_split"] == "ood_test" for r in test_records)},
        seconds=seconds)
    write_results(args.output_dir, result)
    write_run_confidences(os.path.join(args.output_dir, "layer_runs.json"), result, runs, len(dev_records),
                          test_records)
    print(f"CPU: {cpu}; elapsed: records {seconds['records']} s, model {seconds['load']} s, features "
          f"{seconds['features']} s, layers {sum(seconds['layers'].values()):.1f} s, evaluation "
          f"{seconds['evaluation']} s, "
          f"total {seconds['total']} s", flush=True)
    return 0


class _Rows:
    """Some rows of every cached layer, indexed as [`~elical_hf.training.layer_cache.LayerFeatures`] is (for
    `probes.layer_curve` on the train pool only)."""

    def __init__(self, features: Any, rows: list[int]):
        self.features, self.rows, self.layers = features, rows, features.layers

    def __getitem__(self, layer: int) -> np.ndarray:
        return np.asarray(self.features[layer][self.rows], dtype=np.float32)


def train_cv_curve(features: Any, train_records: list[dict[str, Any]], index: dict[str, int],
                   args: argparse.Namespace) -> dict[str, Any]:
    """`elical-hf probe-layers`' curve (`probes.layer_curve`, correctness target) on the judged train records."""
    from elical_hf.evaluation.probes import layer_curve

    judged = [r for r in train_records if r.get("greedy_correctness") is not None]
    correct = [int(bool(r["greedy_correctness"])) for r in judged]
    return layer_curve(_Rows(features, [index[r["question"]] for r in judged]), correct,
                       {"correctness": [float(c) for c in correct]}, folds=args.folds,
                       bootstrap=args.bootstrap, seed=args.seeds[0], progress=False)


def summarize(args: argparse.Namespace, runs: dict[int, dict[str, list[list[float]]]], layers: list[int],
              dev_records: list[dict[str, Any]], test_records: list[dict[str, Any]],
              selection: dict[str, Any]) -> dict[str, Any]:
    """Per (run, layer): test AUROC of every dataset and of the in-domain / OOD averages and dev AUROC, mean over
    seeds (and per seed); the chosen layer of every run and its paired difference with the final layer on test."""
    from elical_hf.evaluation.tables import evaluate_table, paired_difference_over_draws

    test_correct = [int(bool(r["greedy_correctness"])) for r in test_records]
    test_datasets, test_splits = [r["dataset"] for r in test_records], [r["paper_split"] for r in test_records]
    dev = [i for i, r in enumerate(dev_records) if r.get("greedy_correctness") is not None]
    dev_correct = [int(bool(dev_records[i]["greedy_correctness"])) for i in dev]
    dev_datasets = [dev_records[i]["dataset"] for i in dev]
    n_dev = len(dev_records)
    final = layers[-1]
    names = list(runs[final])
    curves = []
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for name in names:
        for layer in layers:
            draws = runs[layer][name]
            test = evaluate_table(test_correct, test_datasets, test_splits,
                                  {str(s): d[n_dev:] for s, d in enumerate(draws)})
            per_seed = list(test.values())
            columns = list(per_seed[0])
            cell: dict[str, Any] = {"run": name, "method": name.split("@")[0],
                                    "labels": int(name.split("@")[1]) if "@" in name else 0, "layer": layer,
                                    "seeds": args.seeds if len(draws) > 1 else [], "test": {}}
            for column in columns:
                entry = {"auroc": _mean([row[column]["auroc"] for row in per_seed]),
                         "auroc_per_seed": [row[column]["auroc"] for row in per_seed]}
                if column in AVERAGES:
                    entry.update(ece=_mean([row[column]["ece"] for row in per_seed]), n=per_seed[0][column]["n"])
                cell["test"][column] = entry
            if dev:
                table = evaluate_table(dev_correct, dev_datasets, ["in_domain_test"] * len(dev),
                                       {str(s): [d[i] for i in dev] for s, d in enumerate(draws)})
                values = [row["in-domain avg"]["auroc"] for row in table.values()]
                cell["dev"] = {"auroc": _mean(values), "auroc_per_seed": values, "n": len(dev)}
            curves.append(cell)
            cells[(name, layer)] = cell
    comparisons = []
    for name in names:
        if args.layer_rule == "dev":
            def dev_auroc(layer: int) -> float:
                value = cells[(name, layer)]["dev"]["auroc"]
                return -math.inf if math.isnan(value) else value

            chosen = max(layers, key=lambda layer: (dev_auroc(layer), -layer))
            if dev_auroc(chosen) == -math.inf:  # no dev AUROC at any layer (one class): keep the final layer
                chosen = final
        else:
            chosen = selection["train_cv"]["recommended_layer"]
        difference = paired_difference_over_draws(
            test_correct, test_datasets, test_splits, [d[n_dev:] for d in runs[chosen][name]],
            [d[n_dev:] for d in runs[final][name]], args.bootstrap, args.seeds[0])
        comparisons.append({
            "run": name, "method": name.split("@")[0], "labels": cells[(name, final)]["labels"],
            "chosen_layer": chosen, "final_layer": final,
            "dev_auroc": {"chosen": cells[(name, chosen)].get("dev", {}).get("auroc"),
                          "final": cells[(name, final)].get("dev", {}).get("auroc")},
            "chosen": {c: cells[(name, chosen)]["test"][c]["auroc"] for c in AVERAGES if c in difference},
            "final": {c: cells[(name, final)]["test"][c]["auroc"] for c in AVERAGES if c in difference},
            "chosen_minus_final": {c: {k: difference[c][k] for k in ("auroc", "auroc_ci", "auroc_per_draw")}
                                   for c in AVERAGES if c in difference},
        })
    pairs = {}  # the method against its baseline at the final layer: the paper's comparison, head-only
    for method in names:
        baseline = method.replace("EliCal-head@", "Cal-Only-head@")
        if method.startswith("EliCal-head@") and baseline in runs[final]:
            difference = paired_difference_over_draws(
                test_correct, test_datasets, test_splits, [d[n_dev:] for d in runs[final][method]],
                [d[n_dev:] for d in runs[final][baseline]], args.bootstrap, args.seeds[0])
            pairs[f"{method} − {baseline}"] = {
                c: {k: difference[c][k] for k in ("auroc", "auroc_ci", "auroc_per_draw")} for c in AVERAGES
                if c in difference}
    return {"layers": layers, "final_layer": final, "selection": selection, "curves": curves,
            "chosen_vs_final": comparisons, "final_layer_pairs": pairs, "bootstrap": args.bootstrap,
            "test_accuracy": {c: _accuracy(test_records, c) for c in AVERAGES}}


def write_run_confidences(path: str, result: dict[str, Any], runs: dict[int, dict[str, list[np.ndarray]]], n_dev: int,
                          test_records: list[dict[str, Any]]) -> None:
    """`layer_runs.json`: the test confidences (6 decimals) of every run at its chosen and at the final layer, one list
    per seed, and the test questions' ids, datasets and correctness: what `chosen_vs_final` and `final_layer_pairs`
    recompute from."""
    from elical_hf.utils.atomic import atomic_write_text

    kept: dict[str, dict[str, list[list[float]]]] = {}
    for row in result["chosen_vs_final"]:
        for layer in dict.fromkeys((row["chosen_layer"], row["final_layer"])):
            kept.setdefault(row["run"], {})[str(layer)] = [np.round(d[n_dev:], 6).tolist() for d in
                                                            runs[layer][row["run"]]]
    atomic_write_text(path, json.dumps({"ids": [str(r.get("id")) for r in test_records],
                                        "datasets": [r["dataset"] for r in test_records],
                                        "splits": [r["paper_split"] for r in test_records],
                                        "correct": [int(bool(r["greedy_correctness"])) for r in test_records],
                                        "seeds": result["seeds"], "confidences": kept}) + "\n")  # compact: 1 MB


def _accuracy(records: list[dict[str, Any]], column: str) -> float:
    split = {"in-domain avg": "in_domain_test", "OOD avg": "ood_test"}[column]
    values = [bool(r["greedy_correctness"]) for r in records if r["paper_split"] == split]
    return 100 * float(np.mean(values)) if values else math.nan


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def _fmt(value: float | None, sign: bool = False) -> str:
    if value is None or math.isnan(value):
        return "–"
    return f"{value:+.1f}" if sign else f"{value:.1f}"


def markdown(result: dict[str, Any]) -> str:
    """`layers.md`: the chosen layer against the final layer, then the curves (test, in domain and OOD; dev)."""
    from elical_hf.evaluation.tables import SEED_INTERVAL

    sizes, secs = result["sizes"], result["seconds"]
    lines = [
        "# AUROC by feature layer (head-only, frozen base model)", "",
        f"Model `{result['model']}`; records `{result['records']}` (correctness `{result['correctness']}`): "
        f"{sizes['train']} train / {sizes['dev']} dev / {sizes['test']} test questions ({sizes['in_domain_test']} in "
        f"domain, {sizes['ood_test']} OOD). Seeds {', '.join(map(str, result['seeds']))}; label budgets "
        f"{', '.join(map(str, result['label_budgets']))}; head settings {result['head_settings']}; every head reads "
        "the frozen base model (no LoRA; EliCal-head starts from a head-only stage 1). AUROC x100: the "
        "size-weighted mean of per-dataset AUROC, averaged over seeds. Layer rule: "
        f"{result['selection']['description']} — never the test split. Features in {result['dtype']}; CPU: "
        f"{result['cpu']} ({result['torch_threads']} torch threads, {result['fit_threads']} while fitting); "
        f"{secs['total']} s in all ({secs['features']} s features).", "",
        f"## Chosen layer vs final layer ({result['final_layer']}): test AUROC, mean over seeds with its "
        f"{SEED_INTERVAL}", "",
        "| run | chosen layer | dev AUROC chosen / final | in-domain chosen | in-domain final | in-domain diff [95%] | "
        "OOD chosen | OOD final | OOD diff [95%] |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["chosen_vs_final"]:
        cells = []
        for column in AVERAGES:
            diff = row["chosen_minus_final"].get(column)
            interval = (f"{_fmt(diff['auroc'], True)} [{_fmt(diff['auroc_ci'][0], True)}, "
                        f"{_fmt(diff['auroc_ci'][1], True)}]") if diff else "–"
            cells += [_fmt(row["chosen"].get(column)), _fmt(row["final"].get(column)), interval]
        lines.append(f"| {row['run']} | {row['chosen_layer']} | {_fmt(row['dev_auroc']['chosen'])} / "
                     f"{_fmt(row['dev_auroc']['final'])} | " + " | ".join(cells) + " |")
    if result.get("final_layer_pairs"):
        lines += ["", f"## At the final layer: EliCal-head − Cal-Only-head (Cal-Only-head drawn "
                  f"`{result.get('baseline_head_init')}`), mean over seeds with its {SEED_INTERVAL}", "",
                  "| pair | in-domain diff [95%] | per seed | OOD diff [95%] | per seed |", "|---|---:|---|---:|---|"]
        for name, pair in result["final_layer_pairs"].items():
            cells = [f"{_fmt(pair[c]['auroc'], True)} [{_fmt(pair[c]['auroc_ci'][0], True)}, "
                     f"{_fmt(pair[c]['auroc_ci'][1], True)}] | "
                     + ", ".join(_fmt(v, True) for v in pair[c]["auroc_per_draw"]) for c in AVERAGES if c in pair]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    names = list(dict.fromkeys(cell["run"] for cell in result["curves"]))
    by = {(cell["run"], cell["layer"]): cell for cell in result["curves"]}
    tables = [(f"## Test AUROC by layer ({column})", lambda c, col=column: c["test"].get(col, {}).get("auroc"))
              for column in AVERAGES]
    if any("dev" in cell for cell in result["curves"]):
        tables.append(("## Dev AUROC by layer (in domain; what --layer_rule dev reads)",
                       lambda c: c.get("dev", {}).get("auroc")))
    for title, value in tables:
        lines += ["", title, "", "| layer | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        for layer in result["layers"]:
            lines.append(f"| {layer} | " + " | ".join(_fmt(value(by[(name, layer)])) for name in names) + " |")
    curve = result["selection"].get("train_cv")
    if curve:
        gap = curve["recommended_minus_final"]
        lines += ["", f"probe-layers rule on the train pool ({curve['questions']} questions, {curve['folds']} folds): "
                  f"layer {curve['recommended_layer']}, {gap['auroc']:+.1f} [{gap['auroc_ci'][0]:+.1f}, "
                  f"{gap['auroc_ci'][1]:+.1f}] cross-validated AUROC against the final layer."]
    lines += ["", "![AUROC vs layer](auroc_vs_layer.png)"]
    return "\n".join(lines) + "\n"


def write_results(output_dir: str, result: dict[str, Any]) -> None:
    """`layers.json`, `layers.md` and `auroc_vs_layer.png` (a panel per label budget and average)."""
    from elical_hf.utils.atomic import atomic_write_json, atomic_write_text
    from elical_hf.evaluation.plots import auroc_vs_layer_grid

    panels = {}
    for n in result["label_budgets"]:
        for column in AVERAGES:
            curves = {}
            for cell in result["curves"]:
                value = cell["test"].get(column, {}).get("auroc")
                if cell["labels"] in (0, n) and value is not None and not math.isnan(value):
                    curves.setdefault(cell["run"], {})[cell["layer"]] = value / 100
            if curves:
                panels[f"{n} labels, {column.removesuffix(' avg')}"] = curves
    plot = os.path.join(output_dir, "auroc_vs_layer.png")
    auroc_vs_layer_grid(panels, plot, marked=result["final_layer"], marked_label="final layer",
                        title=f"Test AUROC by layer ({os.path.basename(str(result['model']))})")
    result["paths"] = {"json": os.path.join(output_dir, "layers.json"),
                       "markdown": os.path.join(output_dir, "layers.md"), "plot": plot}
    atomic_write_json(result["paths"]["json"], result)
    text = markdown(result)
    atomic_write_text(result["paths"]["markdown"], text)
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
