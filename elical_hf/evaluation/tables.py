"""Paper-style evaluation: methods x datasets tables of AUROC, ECE and alignment, with plots and a report.

Rows are confidence sources (trained models, training-free baselines), columns are test datasets, plus in-domain
and out-of-domain averages weighted by test-set size, exactly as the paper averages.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..utils.atomic import atomic_write_json, atomic_write_text
from ..settings.configuration import ConfidenceConfig
from ..metrics import METRIC_NAMES, alignment, auroc, bootstrap_indices, ece, percentile_interval
from ..metrics.resampled import resampled_alignment, resampled_auroc, resampled_ece


SPLIT_AVERAGES = {"in_domain_test": "in-domain avg", "ood_test": "OOD avg"}
CALIBRATION_FRACTION = 0.2
"""Share of each dataset's rows (its first rows, in file order) that chooses the alignment threshold."""
SEED_INTERVAL = "95% two-level bootstrap interval (seeds resampled with replacement, then test questions)"
"""What the interval of a mean over seeds ([`paired_difference_over_draws`]) is, in the words of the captions that
print one."""


def _auroc(confidences: np.ndarray, correct: np.ndarray) -> float:
    """AUROC x100; NaN when `correct` holds one class."""
    return 100 * auroc(confidences, correct) if 0 < correct.sum() < len(correct) else math.nan


def _ece(confidences: np.ndarray, correct: np.ndarray) -> float:
    """ECE (10 uniform bins) x100."""
    return 100 * ece(confidences, correct)


def _alignment(confidences: np.ndarray, correct: np.ndarray) -> float:
    """Alignment (already x100); NaN with fewer than 2 rows."""
    if len(correct) < 2:
        return math.nan
    return alignment(confidences, correct, calibration_fraction=CALIBRATION_FRACTION)["alignment"]


TABLE_METRICS = {"auroc": _auroc, "ece": _ece, "alignment": _alignment}
"""The metrics of the paper's tables, in column order: name (a key of [`~elical_hf.metrics.METRIC_NAMES`]) ->
function of `(confidences, correct)` on the table's x100 scale."""
_LOWER_IS_BETTER = {"ece"}


def _header(metric: str) -> str:
    """`AUROC ↑`, `ECE ↓`: the metric's display name and the direction that is better."""
    return f"{METRIC_NAMES[metric]} {'↓' if metric in _LOWER_IS_BETTER else '↑'}"


def _metrics(confidences: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """AUROC and ECE x100, alignment (already x100); NaN where a metric is undefined (one class, too few rows)."""
    out = {"n": int(len(correct)), "accuracy": 100 * float(np.mean(correct))}
    out.update({metric: fn(confidences, correct) for metric, fn in TABLE_METRICS.items()})
    return out


def _bootstrap_draws(size: int, bootstrap: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Row indices of `bootstrap` resamples of one dataset for each metric, by the rule of
    [`~elical_hf.metrics.bootstrap_indices`]: alignment resamples its threshold rows and its scored rows separately,
    AUROC and ECE share one resampling of all rows."""
    split = bootstrap_indices(size, bootstrap, rng, calibration_fraction=CALIBRATION_FRACTION)
    rows = bootstrap_indices(size, bootstrap, rng)
    return {"alignment": split, "auroc": rows, "ece": rows}


def _resampled_metrics(confidences: np.ndarray, correct: np.ndarray, draws: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each metric on every bootstrap resample of [`_bootstrap_draws`], on the table's x100 scale: the values
    [`TABLE_METRICS`] gives on each resample, computed for all resamples at once ([`~elical_hf.metrics.resampled`])."""
    out = {"auroc": 100 * resampled_auroc(confidences, correct, draws["auroc"]),
           "ece": 100 * resampled_ece(confidences, correct, draws["ece"])}
    if len(correct) < 2:
        out["alignment"] = np.full(len(draws["alignment"]), math.nan)
    else:
        out["alignment"] = resampled_alignment(confidences, correct, draws["alignment"], CALIBRATION_FRACTION)
    return out


def _intervals(cell: dict[str, Any], samples: dict[str, np.ndarray], level: float = 0.95) -> None:
    """Add `<metric>_ci` = [low, high] percentile intervals to `cell` (NaN when every resample is NaN)."""
    for metric, values in samples.items():
        cell[f"{metric}_ci"] = list(percentile_interval(values, level))


def evaluate_table(
    correct: Sequence[int],
    datasets: Sequence[str],
    splits: Sequence[str],
    confidences: Mapping[str, Sequence[float]],
    bootstrap: int = 0,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """
    Metrics of every confidence source on every dataset, plus size-weighted in-domain / OOD averages.

    Args:
        correct (`list[int]`): 0/1 correctness of each test record's greedy answer.
        datasets (`list[str]`): Dataset name of each record (rows keep their file order within a dataset, which the
            alignment metric relies on).
        splits (`list[str]`): `"in_domain_test"` or `"ood_test"` (other values get no average) of each record.
        confidences (`dict[str, list[float]]`): Method name -> one confidence per record.
        bootstrap (`int`, *optional*, defaults to 0): Bootstrap resamples for 95% percentile intervals of every
            metric (`auroc_ci`, `ece_ci`, `alignment_ci`). Rows are resampled within each dataset, the same resamples
            for every method (paired), alignment's threshold rows apart from its scored rows (the rule of
            [`~elical_hf.metrics.bootstrap_ci`], so the `honesty_alignment` module gives the same interval), and an
            average's interval comes from the weighted averages of the resampled per-dataset metrics. ECE's
            resamples are biased upward (resampling noise tends to widen its absolute bin gaps), so near zero its
            interval can lie above the point estimate: it is the spread of a resample's ECE, not a bound on the
            true calibration error.
        seed (`int`, *optional*, defaults to 0): Bootstrap seed.

    Returns:
        `dict`: `table[method][column]` -> `{"n", "accuracy", "auroc", "ece", "alignment"[, "<metric>_ci"]}`, where
        the columns are the datasets followed by `"in-domain avg"` / `"OOD avg"` when those splits are present.
    """
    correct_array, masks, split_of, draws = _prepare(correct, datasets, splits, confidences, bootstrap, seed)
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for method, values in confidences.items():
        row, samples = _evaluate_method(method, values, correct_array, masks, split_of, draws)
        for column, column_samples in samples.items():
            _intervals(row[column], column_samples)
        table[method] = row
    return table


def paired_differences(
    correct: Sequence[int],
    datasets: Sequence[str],
    splits: Sequence[str],
    confidences: Mapping[str, Sequence[float]],
    pairs: Sequence[tuple[str, str]],
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """
    Differences `metric(a) - metric(b)` for each pair of methods, per dataset and for the in-domain / OOD averages,
    with paired 95% bootstrap intervals: both methods are scored on the same resamples (the ones [`evaluate_table`]
    draws with the same `seed`), so the interval reflects the difference itself, not two overlapping intervals.

    Arguments as in [`evaluate_table`]; `pairs` lists `(a, b)` names of `confidences`.

    Returns:
        `dict`: `"<a> − <b>"` -> column -> `{"auroc", "ece", "alignment"}` differences and their `<metric>_ci`.
    """
    if bootstrap < 1:
        raise ValueError(f"paired_differences needs bootstrap >= 1, got {bootstrap}.")
    missing = sorted({name for pair in pairs for name in pair} - set(confidences))
    if missing:
        raise ValueError(f"Unknown method(s) {missing}; known: {sorted(confidences)}.")
    correct_array, masks, split_of, draws = _prepare(correct, datasets, splits, confidences, bootstrap, seed)
    results = {}
    for a, b in pairs:
        row_a, samples_a = _evaluate_method(a, confidences[a], correct_array, masks, split_of, draws)
        row_b, samples_b = _evaluate_method(b, confidences[b], correct_array, masks, split_of, draws)
        out = {}
        for column in row_a:
            cell = {metric: row_a[column][metric] - row_b[column][metric] for metric in TABLE_METRICS}
            _intervals(cell, {m: samples_a[column][m] - samples_b[column][m] for m in TABLE_METRICS})
            out[column] = cell
        results[f"{a} − {b}"] = out
    return results


def paired_difference_over_draws(
    correct: Sequence[int],
    datasets: Sequence[str],
    splits: Sequence[str],
    a_draws: Sequence[Sequence[float]],
    b_draws: Sequence[Sequence[float]] | None,
    bootstrap: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """
    `metric(a) - metric(b)` (or `metric(a)` alone, `b_draws=None`) averaged over several label draws (or training
    seeds), with a 95% (`level`) two-level (hierarchical) bootstrap interval of that mean. Each of the `bootstrap`
    resamples draws as many draws as there are, with replacement, and one resample of the test questions (the paired
    resamples of [`evaluate_table`], shared by every draw and both methods), and scores the mean over the drawn draws on
    it; the interval holds the middle 95% of those means. It is the interval of the printed mean over draws, for the
    spread of the test questions and of the draws together, but the draws' part only as far as the draws at hand show
    it: with 3 seeds a resample re-weights three values (one value three times in 1 of 9 resamples), so it is rough and
    narrower than many seeds would give. With one draw it is [`paired_differences`]'s interval.

    Args:
        correct, datasets, splits: As in [`evaluate_table`].
        a_draws, b_draws (`list[list[float]]`): One confidence list per draw for each method; draw `d` of `a` and of
            `b` used the same labels (the difference is paired within a draw). `b_draws=None`: `a`'s own metrics.
        bootstrap (`int`, *optional*, defaults to 1000), seed (`int`, *optional*, defaults to 0): Resamples and seed.
        level (`float`, *optional*, defaults to 0.95): The interval's coverage; a family of `m` comparisons read
            together takes `1 - 0.05 / m` (Bonferroni), with resamples enough for its tails.

    Returns:
        `dict`: column -> `{metric: mean difference, "<metric>_ci": [low, high], "<metric>_per_draw": [...]}`.
    """
    if b_draws is not None and len(a_draws) != len(b_draws) or not a_draws:
        raise ValueError(f"Need the same number (>= 1) of draws for both methods, got {len(a_draws)} and "
                         f"{len(b_draws or [])}.")
    if bootstrap < 1:
        raise ValueError(f"paired_difference_over_draws needs bootstrap >= 1, got {bootstrap}.")
    correct_array, masks, split_of, draws = _prepare(
        correct, datasets, splits, {"a": a_draws[0]}, bootstrap, seed
    )
    rows, samples = [], []
    for index, a in enumerate(a_draws):
        row_a, samples_a = _evaluate_method("a", a, correct_array, masks, split_of, draws)
        if b_draws is None:
            rows.append({c: {m: row_a[c][m] for m in TABLE_METRICS} for c in row_a})
            samples.append({c: {m: samples_a[c][m] for m in TABLE_METRICS} for c in row_a})
            continue
        row_b, samples_b = _evaluate_method("b", b_draws[index], correct_array, masks, split_of, draws)
        rows.append({c: {m: row_a[c][m] - row_b[c][m] for m in TABLE_METRICS} for c in row_a})
        samples.append({c: {m: samples_a[c][m] - samples_b[c][m] for m in TABLE_METRICS} for c in row_a})
    # the draws resampled with replacement (as many as there are) for each test resample, then averaged
    pick = np.random.default_rng(seed + 1).integers(0, len(rows), size=(bootstrap, len(rows)))
    out: dict[str, dict[str, Any]] = {}
    for column in rows[0]:
        cell: dict[str, Any] = {}
        for metric in TABLE_METRICS:
            per_draw = [row[column][metric] for row in rows]
            cell[metric] = float(np.nanmean(per_draw)) if not all(math.isnan(v) for v in per_draw) else math.nan
            cell[f"{metric}_per_draw"] = per_draw
        stacked = {m: np.stack([s[column][m] for s in samples]) for m in TABLE_METRICS}  # draws x resamples
        resampled = {m: stacked[m][pick, np.arange(bootstrap)[:, None]].mean(axis=1) for m in TABLE_METRICS}
        _intervals(cell, resampled, level)
        out[column] = cell
    return out


def _prepare(
    correct: Sequence[int], datasets: Sequence[str], splits: Sequence[str], confidences: Mapping[str, Any],
    bootstrap: int, seed: int,
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, str], dict[str, dict[str, np.ndarray]]]:
    """Validated labels, per-dataset row masks (in first-appearance order), each dataset's split, bootstrap draws."""
    correct_array = np.asarray(correct, dtype=np.int64)
    n = len(correct_array)
    if len(datasets) != n or len(splits) != n:
        raise ValueError(f"correct, datasets and splits must have one entry per record ({n}).")
    if not confidences:
        raise ValueError("No confidence source to evaluate.")
    dataset_array, split_array = np.asarray(datasets), np.asarray(splits)
    masks = {name: dataset_array == name for name in dict.fromkeys(datasets)}
    split_of = {name: str(split_array[mask][0]) for name, mask in masks.items()}
    rng = np.random.default_rng(seed)
    draws = {name: _bootstrap_draws(int(mask.sum()), bootstrap, rng) for name, mask in masks.items()} if bootstrap else {}
    return correct_array, masks, split_of, draws


def _evaluate_method(
    method: str, values: Sequence[float], correct: np.ndarray, masks: dict[str, np.ndarray], split_of: dict[str, str],
    draws: dict[str, dict[str, np.ndarray]],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, np.ndarray]]]:
    """One method's row (datasets, then the averages) and, with `draws`, its resampled metrics per column."""
    scores = np.asarray(values, dtype=np.float64)
    if scores.shape != correct.shape:
        raise ValueError(f"{method!r} has {scores.size} confidences for {correct.size} records.")
    if np.isnan(scores).any() or scores.min() < 0 or scores.max() > 1:
        raise ValueError(f"{method!r} has confidences outside [0, 1] or NaN.")
    row, samples = {}, {}
    for name, mask in masks.items():
        row[name] = _metrics(scores[mask], correct[mask])
        if draws:
            samples[name] = _resampled_metrics(scores[mask], correct[mask], draws[name])
    for split, label in SPLIT_AVERAGES.items():
        members = [name for name in masks if split_of[name] == split]
        if members:
            row[label] = _weighted_average([row[name] for name in members])
            if draws:
                samples[label] = _weighted_samples([row[name] for name in members], [samples[m] for m in members])
    return row, samples


def _weighted_average(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Average of per-dataset metrics weighted by test-set size (datasets where a metric is NaN are left out)."""
    out: dict[str, Any] = {"n": sum(cell["n"] for cell in cells)}
    for key in ("accuracy", *TABLE_METRICS):
        pairs = [(cell[key], cell["n"]) for cell in cells if not math.isnan(cell[key])]
        weight = sum(w for _, w in pairs)
        out[key] = sum(v * w for v, w in pairs) / weight if weight else math.nan
    return out


def _weighted_samples(cells: list[dict[str, Any]], samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-resample weighted averages of per-dataset resampled metrics (NaN resamples of a dataset left out)."""
    out = {}
    weights = np.asarray([cell["n"] for cell in cells], dtype=np.float64)[:, None]
    for metric in TABLE_METRICS:
        stacked = np.stack([sample[metric] for sample in samples])  # datasets x resamples
        valid = ~np.isnan(stacked)
        total = (weights * valid).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[metric] = np.where(total > 0, (np.where(valid, stacked, 0.0) * weights).sum(axis=0) / total, np.nan)
    return out


def table_to_markdown(table: Mapping[str, Mapping[str, Mapping[str, Any]]], metric: str = "auroc") -> str:
    """One Markdown table of `metric` (rows: methods, columns: datasets and averages), with bootstrap intervals in
    brackets when the table has them."""
    columns = list(next(iter(table.values())))
    header = "| method | " + " | ".join(columns) + " |"
    lines = [header, "|---|" + "---:|" * len(columns)]
    for method, row in table.items():
        cells = [_cell(row[column], metric) for column in columns]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def averages_to_markdown(table: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """One Markdown table of the in-domain and OOD averages of AUROC, ECE and alignment (rows: methods), with
    bootstrap intervals in brackets when the table has them."""
    averages = [label for label in SPLIT_AVERAGES.values() if label in next(iter(table.values()))]
    columns = [(avg, metric) for avg in averages for metric in TABLE_METRICS]
    lines = ["| method | " + " | ".join(f"{avg.removesuffix(' avg')} {_header(m)}" for avg, m in columns) + " |"]
    lines.append("|---|" + "---:|" * len(columns))
    for method, row in table.items():
        lines.append(f"| {method} | " + " | ".join(_cell(row[avg], m) for avg, m in columns) + " |")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def _cell(cell: Mapping[str, Any], metric: str) -> str:
    """`72.10`, or `72.10 [69.4, 75.0]` when the cell has a bootstrap interval."""
    interval = cell.get(f"{metric}_ci")
    text = _fmt(cell[metric])
    if interval and not any(math.isnan(v) for v in interval):
        text += f" [{interval[0]:.1f}, {interval[1]:.1f}]"
    return text


def write_report(
    table: Mapping[str, Mapping[str, Mapping[str, Any]]],
    output_dir: str,
    correct: Sequence[int] | None = None,
    confidences: Mapping[str, Sequence[float]] | None = None,
    label_curves: Mapping[str, Mapping[float, float]] | None = None,
    title: str = "Confidence evaluation",
    notes: str = "",
) -> dict[str, str]:
    """
    Write `results.json`, `report.md` and PNG plots (reliability diagrams and risk-coverage curves when the raw
    `correct`/`confidences` are given; AUROC (in [0, 1]) vs number of labels when `label_curves`, method -> {number
    of labels: AUROC}, is given).

    Returns:
        `dict[str, str]`: paths of what was written.
    """
    from .plots import auroc_vs_labels_plot, reliability_diagram, risk_coverage_plot

    os.makedirs(output_dir, exist_ok=True)
    paths = {"results": os.path.join(output_dir, "results.json"), "report": os.path.join(output_dir, "report.md")}
    atomic_write_json(paths["results"], table)  # undefined metrics (NaN) as null
    sections = [f"# {title}\n", notes] if notes else [f"# {title}\n"]
    if set(SPLIT_AVERAGES.values()) & set(next(iter(table.values()))):
        sections.append(f"## In-domain and OOD averages (x100)\n\n{averages_to_markdown(table)}\n")
    for metric in TABLE_METRICS:
        sections.append(f"## {_header(metric)} (x100)\n\n{table_to_markdown(table, metric)}\n")
    if correct is not None and confidences is not None:
        paths["reliability"] = reliability_diagram(
            {name: np.asarray(v) for name, v in confidences.items()},
            {name: np.asarray(correct) for name in confidences},
            os.path.join(output_dir, "reliability.png"),
        )
        curves = {name: (np.asarray(v), np.asarray(correct)) for name, v in confidences.items()}
        paths["risk_coverage"] = risk_coverage_plot(curves, os.path.join(output_dir, "risk_coverage.png"))
        sections.append("## Reliability diagrams\n\n![reliability](reliability.png)\n")
        sections.append("## Risk–coverage curves\n\n![risk-coverage](risk_coverage.png)\n")
    if label_curves:
        paths["labels"] = auroc_vs_labels_plot(label_curves, os.path.join(output_dir, "auroc_vs_labels.png"))
        sections.append("## AUROC vs number of correctness labels\n\n![labels](auroc_vs_labels.png)\n")
    atomic_write_text(paths["report"], "\n".join(sections))
    return paths


def decision_table(
    correct: Sequence[int],
    splits: Sequence[str],
    confidences: Mapping[str, Sequence[float]],
    configs: Mapping[str, ConfidenceConfig],
    chosen_on: Mapping[str, Sequence[bool] | None] | None = None,
) -> dict[str, dict[str, Any]]:
    """
    What each model's saved decision rule does on test records: its error rate among answered questions (`risk`) and
    the share it answers (`coverage`), per split and over all rows, next to the `alpha` it was chosen to guarantee.
    The rows a model's threshold was chosen on are left out of its table (they would flatter it).

    Args:
        correct (`list[int]`), splits (`list[str]`): 0/1 correctness and split of each record.
        confidences (`dict[str, list[float]]`): Model name -> one confidence per record.
        configs (`dict[str, ConfidenceConfig]`): Model name -> its config; models without a `decision_threshold`
            are left out.
        chosen_on (`dict[str, list[bool]]`, *optional*): Model name -> for each record, whether its threshold was
            chosen on it ([`~elical_hf.models.saved_model.digest_members`]); `None` (or a missing name) when not known.

    Returns:
        `dict`: model -> `{"threshold", "alpha", "delta", "left_out", "columns": {split or "all": {"risk",
        "coverage", "answered", "n"}}}`, `left_out` the rows its threshold was chosen on (`None`: not known). A column
        with no row left is dropped.
    """
    from ..metrics import selective_risk

    out: dict[str, dict[str, Any]] = {}
    split_array = np.asarray(splits)
    for name, config in configs.items():
        if config.decision_threshold is None:
            continue
        scores = np.asarray(confidences[name], dtype=np.float64)
        labels = np.asarray(correct, dtype=np.int64)
        known = (chosen_on or {}).get(name)
        kept = np.ones(len(labels), bool) if known is None else ~np.asarray(known, bool)
        columns = {}
        for column in [*dict.fromkeys(splits), "all"]:
            mask = kept & (True if column == "all" else split_array == column)
            if mask.any():
                columns[column] = {**selective_risk(scores[mask], labels[mask], config.decision_threshold),
                                   "n": int(mask.sum())}
        guarantee = config.risk_control or {}
        out[name] = {"threshold": config.decision_threshold, "alpha": guarantee.get("alpha"),
                     "delta": guarantee.get("delta"), "left_out": None if known is None else int(sum(known)),
                     "columns": columns}
    return out


def decision_table_to_markdown(decisions: Mapping[str, Mapping[str, Any]]) -> str:
    """[`decision_table`] as Markdown: one row per model and column, error rate among answered and coverage."""
    lines = ["| model | threshold | guarantee | rows | answered | coverage | error rate among answered |",
             "|---|---:|---|---|---:|---:|---:|"]
    notes = []
    for name, entry in decisions.items():
        guarantee = f"<= {entry['alpha']} w.p. {1 - entry['delta']:.2f}" if entry["alpha"] is not None else "alignment rule"
        for column, cell in entry["columns"].items():
            lines.append(f"| {name} | {entry['threshold']:.2f} | {guarantee} | {column} ({cell['n']}) | "
                         f"{cell['answered']} | {100 * cell['coverage']:.1f}% | {_fmt(cell['risk'])} |")
        if entry.get("left_out"):
            notes.append(f"{name}: {entry['left_out']} row(s) left out, the ones its threshold was chosen on.")
        elif entry.get("left_out", 0) is None:
            notes.append(f"{name}: which rows its threshold was chosen on is not recorded (set before elical-hf kept "
                         "them): if they are among these, its row is optimistic.")
    return "\n".join(lines + ([""] + notes if notes else []))
