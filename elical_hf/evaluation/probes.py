"""Pre-generation probes: linear read-outs of one layer's last-prompt-token state, baselines to compare EliCal with.

Every probe here is a linear probe `sigmoid(w . z + b)` on standardised features `z = (x - mean) / std` (mean and
standard deviation per dimension, from the training rows only), trained on the features [`cache_layer_features`]
writes ([`~elical_hf.training.layer_cache`]). They differ in their target and in how `w` is found:

- `pik`, the P(IK) probe (Kadavath et al. 2022): logistic regression ([`fit_logistic`]) on greedy correctness labels.
- `dim`, the difference-of-means accuracy probe ("No Answer Needed", ICLR 2026): the direction is the mean of the
  correct rows' raw activations minus that of the wrong rows' ([`mean_difference`] on the features as they are, the
  paper's; not on standardised features, which give another direction), no optimisation; a 1-d logistic fit on the
  training rows' projections scales it (stored in standardised coordinates, so every probe scores the same way).
- `sep`, the semantic-entropy probe (Kossen et al. 2024): logistic regression on the label-free target, high vs low
  semantic entropy of the question's k samples; its confidence is 1 - P(high entropy).

The logistic fit minimises the summed cross-entropy plus `l2 / 2 * |w|^2` (scikit-learn's `LogisticRegression` with
`C = 1 / l2`; the bias is not penalised), with L-BFGS: a convex problem, so the probe does not depend on a seed,
a learning rate or a number of epochs. The difference-of-means probe's projection `(x - mean) . direction` is
squashed to [0, 1] by a 1-d logistic fit on the same training rows (Platt scaling, on the projection divided by its
standard deviation): its ranking, hence its AUROC, is the raw projection's, and its confidences are calibrated on the
training rows, so ECE and alignment mean something.

Semantic entropy ([`semantic_entropy`]): the records hold one judgement per sample, *is it equivalent to the greedy
answer*, not judgements between samples. So the samples judged equivalent to the greedy answer form one cluster, and
the others are clustered by their normalised text (SQuAD normalisation: two wordings of one wrong answer count as two
clusters, so the entropy is at least that of a clustering that judged the samples pairwise). Discrete semantic entropy
is the entropy of the cluster sizes. [`sep_targets`] binarises it at the threshold that best splits it (Kossen et
al.: the split of least within-group squared error, [`best_split`]).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_L2", "PROBES", "LinearProbe", "Probe", "best_split", "check_folds", "fit_logistic", "fit_probe",
    "layer_curve", "mean_difference", "semantic_entropy", "sep_targets", "train_probe",
]

DEFAULT_L2 = 1.0
"""L2 strength of every logistic fit (scikit-learn's default, `C = 1`)."""

_ROWS = 65536
"""Rows of a memory-mapped layer read at a time when standardising or scoring."""


@dataclass(frozen=True)
class Probe:
    """A registered probe: how tables name it and whether it needs correctness labels."""

    paper_name: str
    supervised: bool
    description: str


PROBES: dict[str, Probe] = {
    "pik": Probe("P(IK)", True, "logistic probe on greedy correctness (Kadavath et al. 2022)"),
    "dim": Probe("DiM", True, "difference-of-means accuracy probe on raw activations, no optimisation (No Answer "
                 "Needed, ICLR 2026)"),
    "sep": Probe("SEP", False, "semantic-entropy probe, label-free (Kossen et al. 2024)"),
}
"""Probes by name (`elical-hf evaluate --probes`)."""


@dataclass
class LinearProbe:
    """`confidence(x) = sigmoid(((x - mean) / scale) . weight + bias)`.

    Args:
        mean, scale (`np.ndarray` of shape `(hidden_size,)`): The training rows' standardisation.
        weight (`np.ndarray` of shape `(hidden_size,)`), bias (`float`): The probe on standardised features.
    """

    mean: np.ndarray
    scale: np.ndarray
    weight: np.ndarray
    bias: float

    def logits(self, features: np.ndarray) -> np.ndarray:
        """`w . z + b` of every row of `features` (any float array, e.g. a float16 memory map)."""
        out = np.empty(len(features), dtype=np.float64)
        for start in range(0, len(features), _ROWS):
            rows = (np.asarray(features[start : start + _ROWS], dtype=np.float32) - self.mean) / self.scale
            out[start : start + _ROWS] = rows @ self.weight + self.bias
        return out

    def confidence(self, features: np.ndarray) -> np.ndarray:
        """One confidence in [0, 1] per row of `features`."""
        return _sigmoid(self.logits(features))


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    """The logistic function, without overflow for large logits."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits, dtype=np.float64)))


def _standardisation(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation (population, floored at 1e-6) of every column, in float32."""
    total, squares = np.zeros(features.shape[1]), np.zeros(features.shape[1])
    for start in range(0, len(features), _ROWS):
        rows = np.asarray(features[start : start + _ROWS], dtype=np.float64)
        total += rows.sum(axis=0)
        squares += (rows**2).sum(axis=0)
    mean = total / len(features)
    std = np.sqrt(np.maximum(squares / len(features) - mean**2, 0.0))
    return mean.astype(np.float32), np.maximum(std, 1e-6).astype(np.float32)


def _check_targets(features: np.ndarray, targets: Any) -> np.ndarray:
    """`targets` as float64, once they are one value in [0, 1] per row of the 2-d `features`."""
    y = np.asarray(targets, dtype=np.float64)
    if np.ndim(features) != 2 or y.ndim != 1 or len(features) != len(y) or not len(y):
        raise ValueError(f"features {np.shape(features)} and targets {y.shape} do not match.")
    if np.isnan(y).any() or y.min() < 0 or y.max() > 1:
        raise ValueError("Probe targets must lie in [0, 1].")
    return y


def fit_logistic(
    features: np.ndarray, targets: np.ndarray, l2: float = DEFAULT_L2, max_iter: int = 200
) -> tuple[np.ndarray, float]:
    """
    L2-regularised logistic regression: the `(weight, bias)` that minimise the summed binary cross-entropy of
    `sigmoid(features @ weight + bias)` against `targets` (in [0, 1]; soft targets are allowed) plus
    `l2 / 2 * |weight|^2`, found by L-BFGS (strong Wolfe line search) from zero.

    Args:
        features (`np.ndarray` of shape `(n, d)`), targets (`np.ndarray` of shape `(n,)`): The training rows.
        l2 (`float`, *optional*, defaults to [`DEFAULT_L2`]): The penalty's strength (`1 / C` in scikit-learn).
        max_iter (`int`, *optional*, defaults to 200): Most L-BFGS iterations.

    Returns:
        `tuple[np.ndarray, float]`: the weight (float32, shape `(d,)`) and the bias.
    """
    import torch

    _check_targets(features, targets)
    x = torch.as_tensor(np.asarray(features, dtype=np.float32))
    y = torch.as_tensor(np.asarray(targets, dtype=np.float32))
    weight = torch.zeros(x.shape[1], requires_grad=True)
    bias = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=max_iter, history_size=20, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-6, tolerance_change=1e-10)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ weight + bias, y, reduction="sum")
        loss = loss + 0.5 * l2 * weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return weight.detach().numpy().copy(), float(bias.detach())


def mean_difference(features: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """The difference-of-means direction: the mean row of the correct (1) rows minus that of the wrong (0) rows, in
    the coordinates of `features` as given ([`fit_probe`] `"dim"` passes the raw activations)."""
    labels = np.asarray(correct, dtype=np.float64)
    if not np.isin(labels, (0.0, 1.0)).all():
        raise ValueError("The difference-of-means probe needs 0/1 correctness labels.")
    correct = labels.astype(bool)
    if correct.all() or not correct.any():
        raise ValueError("The difference-of-means probe needs correct and wrong answers among its labels.")
    features = np.asarray(features, dtype=np.float32)
    return features[correct].mean(axis=0) - features[~correct].mean(axis=0)


def fit_probe(kind: str, features: np.ndarray, targets: Sequence[float], l2: float = DEFAULT_L2) -> LinearProbe:
    """
    Fit a probe of [`PROBES`] (or `"logistic"`: a logistic probe of any target in [0, 1]) on training rows.

    Args:
        kind (`str`): `"pik"`, `"dim"` (targets: 0/1 correctness), `"sep"` (targets: 1 for high semantic entropy,
            [`sep_targets`]; the probe's confidence is 1 - P(high entropy)) or `"logistic"`.
        features (`np.ndarray` of shape `(n, hidden_size)`): The training rows' features (any float dtype).
        targets (`list[float]`): One target per row.
        l2 (`float`, *optional*): The logistic fits' L2 strength.

    Returns:
        [`LinearProbe`]: with targets all alike (one class, as a small label draw may give), a constant confidence,
        and a warning.
    """
    if kind not in (*PROBES, "logistic"):
        raise ValueError(f"Unknown probe {kind!r}; choose from {sorted(PROBES)}.")
    y = _check_targets(features, targets)
    mean, scale = _standardisation(features)
    if y.min() == y.max():  # one class (as a small label draw may be): the best is a constant
        logger.warning("The %s probe's %d training targets are all %s: it can only learn a constant confidence.",
                       kind, len(y), y[0])
        value = min(max(float(y[0]), 1e-4), 1 - 1e-4)
        bias = math.log(value / (1 - value))
        return LinearProbe(mean, scale, np.zeros_like(mean), -bias if kind == "sep" else bias)
    centred = np.asarray(features, dtype=np.float32) - mean
    if kind == "dim":  # the raw activations' direction; z . (scale * direction) is the raw projection, centred
        direction = mean_difference(features, y)
        projection = centred @ direction
        spread = float(projection.std()) or 1.0
        (slope,), bias = fit_logistic((projection / spread)[:, None], y, l2)
        return LinearProbe(mean, scale, (slope / spread * scale * direction).astype(np.float32), bias)
    weight, bias = fit_logistic(centred / scale, y, l2)
    if kind == "sep":  # the probe predicts high entropy; its confidence is the other side
        weight, bias = -weight, -bias
    return LinearProbe(mean, scale, weight, bias)


def semantic_entropy(record: Mapping[str, Any]) -> float | None:
    """
    Discrete semantic entropy (natural log) of a record's samples: the entropy of the sizes of their clusters, where
    the samples judged equivalent to the greedy answer (`consistency_judgement`) form one cluster and the others are
    grouped by their SQuAD-normalised `sampling_response` (each apart when its text is missing or empty). Samples
    without a verdict are left out; `None` when none has one.
    """
    from ..signals.lexical_judge import normalize_answer

    verdicts = record.get("consistency_judgement") or []
    responses = list(record.get("sampling_response") or [])
    responses += [None] * (len(verdicts) - len(responses))
    clusters: Counter = Counter()
    for index, (verdict, response) in enumerate(zip(verdicts, responses)):
        if verdict is None:
            continue
        text = normalize_answer(str(response)) if response is not None else ""
        clusters["greedy" if bool(verdict) else ("text", text) if text else ("sample", index)] += 1
    total = sum(clusters.values())
    if not total:
        return None
    return float(-sum(n / total * math.log(n / total) for n in clusters.values()))


def best_split(values: Sequence[float]) -> float:
    """The threshold that best splits `values` in two (Kossen et al. 2024): of the midpoints between consecutive
    distinct values, the one whose two groups have the least summed squared deviation from their means (the first
    of equal ones). A `ValueError` when the values do not differ."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    cuts = np.flatnonzero(np.diff(v) > 0) + 1  # group sizes of the low side
    if not cuts.size:
        raise ValueError(f"All {len(v)} semantic entropies are equal ({v[0] if len(v) else 'none'}): there is "
                         "nothing to split, and the semantic-entropy probe nothing to learn.")
    prefix, squares = np.cumsum(v), float((v**2).sum())
    low, high = prefix[cuts - 1], prefix[-1] - prefix[cuts - 1]
    errors = squares - low**2 / cuts - high**2 / (len(v) - cuts)
    best = cuts[int(np.argmin(errors))]
    return float((v[best - 1] + v[best]) / 2)


def sep_targets(records: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray, float]:
    """The semantic-entropy probe's targets: `(rows, targets, threshold)`, the indices of the records that have
    judged samples, 1 where their [`semantic_entropy`] is above the [`best_split`] threshold and 0 below it, and
    that threshold. Entropies all equal give no split: every target is 0 (with a warning; a probe of them is a
    constant). A `ValueError` when no record has judged samples."""
    entropies = [semantic_entropy(record) for record in records]
    rows = np.asarray([i for i, value in enumerate(entropies) if value is not None], dtype=np.int64)
    if not rows.size:
        raise ValueError(f"None of the {len(records)} records has consistency judgements of its samples: the "
                         "semantic-entropy probe needs them (`elical-hf judge --consistency embedding`).")
    values = np.asarray([entropies[i] for i in rows])
    if values.min() == values.max():
        logger.warning("All %d semantic entropies are %.3f: nothing splits them, so every SEP target is the same.",
                       len(values), values[0])
        return rows, np.zeros(len(values)), float(values[0])
    threshold = best_split(values)
    return rows, (values > threshold).astype(np.float64), threshold


def train_probe(kind: str, records: Sequence[Mapping[str, Any]], features: np.ndarray,
                l2: float = DEFAULT_L2) -> LinearProbe:
    """
    Fit probe `kind` of [`PROBES`] on records, one row of `features` per record (in order): `pik` and `dim` on their
    greedy correctness (the labels; a `ValueError` naming the judge option when one lacks it), `sep` on the
    [`sep_targets`] of their samples (no labels; records without judged samples are left out).
    """
    if kind not in PROBES:
        raise ValueError(f"Unknown probe {kind!r}; choose from {sorted(PROBES)}.")
    if len(features) != len(records):
        raise ValueError(f"{len(records)} records but {len(features)} feature rows.")
    if kind == "sep":
        rows, targets, _ = sep_targets(records)
        return fit_probe(kind, np.asarray(features)[rows], targets, l2)
    labels = [record.get("greedy_correctness") for record in records]
    if any(label is None for label in labels):
        from ..signals.records import JUDGE_OPTIONS

        raise ValueError(f"The {PROBES[kind].paper_name} probe trains on greedy correctness, which "
                         f"{sum(label is None for label in labels)} of its {len(labels)} records lack: run "
                         f"`{JUDGE_OPTIONS['greedy_correctness']}` on them first.")
    return fit_probe(kind, np.asarray(features), [float(bool(label)) for label in labels], l2)


def check_folds(correct: Sequence[int], folds: int) -> None:
    """Refuse `folds`-fold cross-validation that cannot train on both classes in every fold: fewer than 2 folds, or
    fewer correct or wrong answers than folds (one `ValueError` line)."""
    if folds < 2:
        raise ValueError(f"--folds must be >= 2, got {folds}.")
    positives = int(np.sum(correct))
    if min(positives, len(correct) - positives) < folds:
        raise ValueError(f"{folds}-fold probes need at least {folds} correct and {folds} wrong greedy answers; the "
                         f"pool has {positives} correct and {len(correct) - positives} wrong.")


def _folds(correct: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """A fold index per row, stratified by `correct` (each class shuffled, then dealt round-robin)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(correct), dtype=np.int64)
    for value in (0, 1):
        rows = np.flatnonzero(correct == value)
        rng.shuffle(rows)
        fold[rows] = np.arange(len(rows)) % folds
    return fold


def layer_curve(
    features: Any,
    correct: Sequence[int],
    targets: Mapping[str, Sequence[float]],
    *,
    folds: int = 5,
    bootstrap: int = 1000,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """
    Cross-validated AUROC of a logistic probe per layer, for each target, against greedy correctness.

    For every layer and target, a probe ([`fit_probe`] `"logistic"`) is trained on `folds - 1` folds (stratified by
    `correct`) and scores the held-out fold; the AUROC (x100) of the pooled held-out scores against `correct` gets a
    95% bootstrap interval, every layer and target scored on the same resamples, so the difference between the
    recommended and the final layer is paired.

    Args:
        features ([`~elical_hf.training.layer_cache.LayerFeatures`]): Cached features of the pool's questions, in order.
        correct (`list[int]`): Greedy correctness (0/1) of each question.
        targets (`dict[str, list[float]]`): Target name -> one value in [0, 1] per question (e.g. `"correctness"`:
            `correct` itself; `"consistency"`: the label-free stage-1 target).
        folds (`int`, *optional*, defaults to 5), bootstrap (`int`, *optional*, defaults to 1000), seed (`int`,
            *optional*, defaults to 0): Folds, resamples and their seed.

    Returns:
        `dict`: `layers`, `questions`, `correct`, `folds`, `bootstrap`, `curves` (target -> one `{"layer", "auroc",
        "auroc_ci", "minus_final"}` per layer, `minus_final` the paired `{"auroc", "auroc_ci"}` of that layer minus
        the final one), `recommended_layer` (the highest AUROC of the first target's probe, the earliest of equal
        ones), `rule`, `final_layer` (the deepest of `features.layers`: include the model's final layer) and
        `recommended_minus_final` (the recommended layer's `minus_final`). The recommended layer's own interval
        is read on the rows that chose it (a winner's curse): choose on one pool and read the other's `minus_final`
        at that layer for an honest one (`experiments/layer_depth_check.py`).
    """
    from tqdm.auto import tqdm

    from ..metrics import auroc, bootstrap_indices, percentile_interval
    from ..metrics.resampled import resampled_auroc

    check_folds(correct, folds)
    y = np.asarray(correct, dtype=np.int64)
    positives = int(y.sum())
    fold = _folds(y, folds, seed)
    draws = bootstrap_indices(len(y), bootstrap, np.random.default_rng(seed))
    curves: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
    samples: dict[str, dict[int, np.ndarray]] = {name: {} for name in targets}
    for layer in tqdm(features.layers, desc="Probes", unit="layer", disable=not progress):
        x = np.asarray(features[layer], dtype=np.float32)
        for name, values in targets.items():
            target = np.asarray(values, dtype=np.float64)
            scores = np.empty(len(y))
            for k in range(folds):
                held = fold == k
                scores[held] = fit_probe("logistic", x[~held], target[~held]).logits(x[held])
            resampled = 100 * resampled_auroc(_sigmoid(scores), y, draws)
            samples[name][layer] = resampled
            curves[name].append({"layer": layer, "auroc": 100 * auroc(_sigmoid(scores), y),
                                 "auroc_ci": list(percentile_interval(resampled))})
    final = features.layers[-1]
    for name, cells in curves.items():  # every layer against the final one, paired (the same resamples)
        last = cells[-1]["auroc"]
        for cell in cells:
            difference = samples[name][cell["layer"]] - samples[name][final]
            cell["minus_final"] = {"auroc": cell["auroc"] - last, "auroc_ci": list(percentile_interval(difference))}
    first = next(iter(targets))
    best = max(curves[first], key=lambda cell: (cell["auroc"], -cell["layer"]))
    return {
        "layers": list(features.layers), "questions": len(y), "correct": positives, "folds": folds,
        "bootstrap": bootstrap, "curves": curves, "recommended_layer": best["layer"], "final_layer": final,
        "rule": f"the layer whose {first} probe has the highest cross-validated AUROC (the earliest of equal ones)",
        "recommended_minus_final": best["minus_final"],
    }
