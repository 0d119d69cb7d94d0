"""Does a mean over a range of layers earn a place beside `feature_layer`? Probes on range-means against single layers.

    HF_HUB_OFFLINE=1 python experiments/layer_mean_check.py --output_dir outputs/layers

Runs after `experiments/layer_experiment.py` with the same `--output_dir` (or `--cache_dir`): it reuses its cached
last-prompt-token states of every layer (the frozen base model), so it only fits probes (about 3 minutes on 2 cores).

For every contiguous window of layers (widths `--widths`, starting every 5 layers, plus all layers) the feature is
the mean of the window's states; each probe of `elical_hf.evaluation.probes` (P(IK)@n and DiM@n on the replication's label
draws `take_labels(train, n, seed)` for seeds 42-44; the label-free SEP) is fit on it and on every single layer. Per
probe, the window and the single layer are each chosen **on dev** (highest dev AUROC, mean over seeds), then compared
on test: the chosen window against the final layer and against the chosen single layer, mean per-dataset AUROC x100
with the 95% two-level bootstrap interval of the mean over seeds (seeds, then test questions, resampled:
`evaluation.paired_difference_over_draws`). Probes, not the
MSE heads: they standardise their features, so a mean of layers of different scales is compared on what it holds,
not on how a head copes with its scale (docs/results.md's caveat). Writes `layer_means.json` and `layer_means.md`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np


import experiments_common as common  # noqa: E402,F401 - experiments/ and examples/ on the path (the shared module)
import layer_experiment  # noqa: E402 - its sibling: partitions, the model, the feature cache and the summary
import reproduce_paper  # noqa: E402 - the replication's training rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=layer_experiment.RECORDS, help="Judged records with partitions.")
    parser.add_argument("--model", default=None, help="The base model (default: the embedded SmolLM2-135M).")
    parser.add_argument("--output_dir", default="outputs/layers", help="layer_experiment.py's folder.")
    parser.add_argument("--cache_dir", default=None, help="The feature cache (default: OUTPUT_DIR/features).")
    parser.add_argument("--widths", type=int, nargs="+", default=[5, 10, 15], help="Window widths in layers.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44], help="Label draws.")
    parser.add_argument("--label_budgets", type=int, nargs="+", default=[100, 1000], help="Correctness labels.")
    parser.add_argument("--correctness", default="has_answer", help="Correctness judge (as layer_experiment.py).")
    parser.add_argument("--bootstrap", type=int, default=1000, help="Resamples of the paired intervals.")
    parser.add_argument("--batch_size", type=int, default=32, help="Questions per forward pass (cache misses).")
    return parser.parse_args(argv)


def windows(total: int, widths: list[int]) -> list[tuple[int, int]]:
    """Every window `(first, last)` of each width starting at layer 1, 6, 11, ... inside `1..total`, and all layers."""
    found = {(start, start + width - 1) for width in widths for start in range(1, total + 1, 5)
             if start + width - 1 <= total}
    return sorted(found | {(1, total)})


def main(argv: list[str] | None = None) -> int:
    from elical_hf.evaluation.tables import paired_difference_over_draws
    from elical_hf.training.layer_cache import cache_layer_features
    from elical_hf.evaluation.probes import PROBES, train_probe
    from elical_hf.training.recipe import take_labels
    from elical_hf.steps.probe_layers import feature_model

    args = parse_args(argv)
    parts = layer_experiment.load_partitions(args.records, args.correctness)
    train_records, dev_records, test_records = parts["train"], parts["dev"], parts["test"]
    train = reproduce_paper.rows_of(train_records, "train")
    model = feature_model(layer_experiment.resolve_model(args.model, args.output_dir))
    total = model.config.get_text_config().num_hidden_layers
    texts = list(dict.fromkeys(r["question"] for r in train_records + dev_records + test_records))
    features = cache_layer_features(model, texts, args.cache_dir or os.path.join(args.output_dir, "features"),
                                    layers=list(range(1, total + 1)), batch_size=args.batch_size)
    del model
    index = {text: i for i, text in enumerate(texts)}
    scored = [index[r["question"]] for r in dev_records + test_records]
    spans = windows(total, args.widths)
    keys = {layer: layer for layer in range(1, total + 1)}  # runs are keyed by int: single layers, then windows
    keys.update({span: 1000 + i for i, span in enumerate(spans)})

    def states(key: Any) -> np.ndarray:
        if isinstance(key, int):
            return np.asarray(features[key], dtype=np.float32)
        return np.mean([np.asarray(features[layer], dtype=np.float32) for layer in range(key[0], key[1] + 1)], axis=0)

    runs: dict[int, dict[str, list[np.ndarray]]] = {}
    with layer_experiment.torch_threads(1):
        for key, number in keys.items():
            x = states(key)
            out: dict[str, list[np.ndarray]] = {}
            for n in args.label_budgets:
                for seed in args.seeds:
                    labels = take_labels(train, n, seed).to_list()
                    rows = x[[index[r["question"]] for r in labels]]
                    for kind in ("pik", "dim"):
                        out.setdefault(f"{PROBES[kind].paper_name}@{n}", []).append(
                            np.asarray(train_probe(kind, labels, rows).confidence(x[scored]), dtype=np.float64))
            sep = train_probe("sep", train_records, x[[index[r["question"]] for r in train_records]])
            out["SEP"] = [np.asarray(sep.confidence(x[scored]), dtype=np.float64)]
            runs[number] = out
            print(f"{'layer' if isinstance(key, int) else 'window'} {key}: fitted", flush=True)

    settings = argparse.Namespace(layer_rule="dev", seeds=args.seeds, label_budgets=args.label_budgets,
                                  bootstrap=args.bootstrap)
    singles = layer_experiment.summarize(settings, runs, list(range(1, total + 1)), dev_records, test_records, {})
    window_keys = [keys[span] for span in spans] + [total]  # the final layer last: the comparison's reference
    means = layer_experiment.summarize(settings, runs, window_keys, dev_records, test_records, {})
    test_correct = [int(bool(r["greedy_correctness"])) for r in test_records]
    datasets, splits = [r["dataset"] for r in test_records], [r["paper_split"] for r in test_records]
    n_dev, label_of = len(dev_records), {number: key for key, number in keys.items()}
    rows = []
    for single, mean in zip(singles["chosen_vs_final"], means["chosen_vs_final"]):
        name = single["run"]
        window, layer = mean["chosen_layer"], single["chosen_layer"]
        versus_single = paired_difference_over_draws(
            test_correct, datasets, splits, [d[n_dev:] for d in runs[window][name]],
            [d[n_dev:] for d in runs[layer][name]], args.bootstrap, args.seeds[0])
        dev = {_label(label_of[cell["layer"]] if cell["layer"] != total else None): cell["dev"]["auroc"]
               for cell in means["curves"] if cell["run"] == name}
        rows.append({
            "dev_auroc": dev, "run": name, "window": list(label_of[window]) if window != total else None, "single_layer": layer,
            "window_test": mean["chosen"], "single_test": single["chosen"], "final_test": single["final"],
            "window_minus_final": {c: {k: v[k] for k in ("auroc", "auroc_ci")} for c, v in
                                   mean["chosen_minus_final"].items()},
            "window_minus_single": {c: {k: versus_single[c][k] for k in ("auroc", "auroc_ci")}
                                    for c in mean["chosen_minus_final"]},
        })
    result = {"windows": [list(span) for span in spans], "final_layer": total, "rows": rows,
              "seeds": args.seeds, "label_budgets": args.label_budgets, "bootstrap": args.bootstrap,
              "cpu": layer_experiment.cpu_model(), "features_cache": features.folder}
    write(args.output_dir, result)
    print(markdown(result))
    return 0


def _label(window: tuple[int, int] | None) -> str:
    return "final layer" if window is None else f"{window[0]}–{window[1]}"


def _ci(cell: dict[str, Any]) -> str:
    low, high = cell["auroc_ci"]
    return f"{cell['auroc']:+.1f} [{low:+.1f}, {high:+.1f}]"


def markdown(result: dict[str, Any]) -> str:
    lines = ["| probe | window (dev) | single layer (dev) | in domain: window − final | in domain: window − single "
             "| OOD: window − final | OOD: window − single |", "|---|---|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        window = _label(row["window"])
        cells = [_ci(row[f"window_minus_{ref}"][column]) for column in ("in-domain avg", "OOD avg")
                 for ref in ("final", "single")]
        lines.append(f"| {row['run']} | {window} | {row['single_layer']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(output_dir: str, result: dict[str, Any]) -> None:
    from elical_hf.utils.atomic import atomic_write_json, atomic_write_text

    atomic_write_json(os.path.join(output_dir, "layer_means.json"), result)
    atomic_write_text(os.path.join(output_dir, "layer_means.md"),
                      f"# Range-means of layers against single layers (CPU: {result['cpu']})\n\n"
                      + markdown(result) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
