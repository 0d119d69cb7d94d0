"""Calibration and confidence-quality metrics, in plain numpy.

Every function takes `confidences` (floats in [0, 1], the model's probability that its answer is correct) and `correct`
(0/1 labels, 1 = the answer was correct) of equal length, validated by [`check_inputs`], and returns Python floats (or
dicts of them). Nothing here needs scikit-learn at runtime; [`auroc`] and [`auprc`] reproduce `roc_auc_score` and
`average_precision_score` exactly, including ties.

The `honesty_*` evaluate modules compute with this very file: it is put next to each module script wherever a
runnable module is assembled (`elical_hf/publishing/metric_modules.py`), so it must import nothing but numpy and the
standard library.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
from numpy.typing import ArrayLike


__all__ = [
    "DEFAULT_THRESHOLDS", "METRICS", "METRIC_NAMES", "alignment", "auprc", "aurc", "auroc", "bootstrap_ci",
    "bootstrap_indices", "bootstrap_samples", "brier", "check_inputs", "compute_all", "ece", "percentile_interval",
    "prr", "reliability_bins", "risk_coverage_curve", "tie_groups", "uniform_bin_ids",
]

_STRATEGIES = ("uniform", "quantile", "reference")


def check_inputs(confidences: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validate the inputs shared by every metric; return them as float64 and int64 arrays.

    Raises `ValueError` on a non-numeric or non-1-D input, a length mismatch, empty input, NaN/inf, confidences outside
    [0, 1], or labels other than 0/1 (booleans are accepted).
    """
    kind = np.asarray(confidences).dtype.kind
    if kind not in "biuf":  # numpy would parse strings such as "0.9": a caller passing text has a bug upstream
        raise ValueError(f"confidences must be numeric, got dtype {np.asarray(confidences).dtype} (e.g. strings)")
    try:
        conf = np.asarray(confidences, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"confidences must be numeric, got {type(confidences).__name__}: {err}") from None
    raw = np.asarray(correct)
    if raw.dtype.kind not in "biuf":
        raise ValueError(f"correct must contain only 0/1 (or booleans), got dtype {raw.dtype}")
    if conf.ndim != 1 or raw.ndim != 1:
        raise ValueError(f"confidences and correct must be 1-D, got shapes {conf.shape} and {raw.shape}")
    if conf.shape[0] != raw.shape[0]:
        raise ValueError(f"confidences and correct must have the same length, got {conf.shape[0]} and {raw.shape[0]}")
    if conf.size == 0:
        raise ValueError("confidences and correct must be non-empty")
    if not np.isfinite(conf).all():
        raise ValueError("confidences must be finite, found NaN or inf")
    if conf.min() < 0.0 or conf.max() > 1.0:
        raise ValueError(f"confidences must lie in [0, 1], got values in [{conf.min()!r}, {conf.max()!r}]")
    if raw.dtype.kind != "b" and not np.isin(raw, (0, 1)).all():
        bad = raw[~np.isin(raw, (0, 1))][:5].tolist()
        raise ValueError(f"correct must contain only 0/1 (or booleans), found e.g. {bad}")
    return conf, raw.astype(np.int64)


def uniform_bin_ids(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each confidence among `n_bins` equal-width bins `[i/n, (i+1)/n)`, 1.0 in the last one (the bins of
    [`reliability_bins`] with `strategy="uniform"`)."""
    edges = np.arange(n_bins + 1) / n_bins  # exact i/n, so bin membership matches the documented intervals
    return np.clip(np.searchsorted(edges, conf, side="right") - 1, 0, n_bins - 1)


def tie_groups(sorted_values: np.ndarray) -> np.ndarray:
    """Start indices of the runs of equal values in an already sorted array."""
    return np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])


def auroc(confidences: ArrayLike, correct: ArrayLike) -> float:
    """Area under the ROC curve of `confidences` as a score for `correct` (the positive class is 1).

    Computed as the Mann-Whitney U statistic with average ranks for ties, which equals
    `sklearn.metrics.roc_auc_score(correct, confidences)` (a tie between a correct and a wrong answer counts 1/2).
    O(n log n), exact integer arithmetic up to the final division.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.

    Returns:
        `float`: AUROC in [0, 1]; `nan` (with a `UserWarning`) when only one class is present.
    """
    conf, y = check_inputs(confidences, correct)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        warnings.warn("AUROC is undefined when only one class is present in `correct`; returning nan.", UserWarning)
        return float("nan")
    order = np.argsort(conf)
    starts = tie_groups(conf[order])
    ends = np.r_[starts[1:], y.size]
    pos_per_group = np.add.reduceat(y[order], starts)
    # 1-based ranks start+1..end have average (start+1+end)/2; keep twice that as an integer.
    twice_rank_sum = int(np.dot(starts + ends + 1, pos_per_group))
    return float((twice_rank_sum - n_pos * (n_pos + 1)) / (2 * n_pos * n_neg))


def _check_binning(n_bins: int, strategy: str) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")


def reliability_bins(
    confidences: ArrayLike, correct: ArrayLike, n_bins: int = 10, strategy: str = "uniform"
) -> dict[str, np.ndarray]:
    """Bin the predictions by confidence: the single binning used by [`ece`] and by reliability diagrams.

    With `strategy="uniform"`, bin `i` holds confidences in `[i/n_bins, (i+1)/n_bins)`, except the last bin, which
    also holds 1.0 (a confidence of exactly 1.0 is *not* dropped into an extra bin, unlike `np.digitize`-based code).
    With `strategy="quantile"`, the confidences are stably sorted and split into `n_bins` groups whose sizes differ by
    at most one (larger groups first, as `np.array_split`); equal confidences may straddle two bins.

    `strategy="reference"` reproduces the paper's code (not a correct binning): bin = `np.digitize(confidence,
    np.linspace(0, 1, n_bins + 1)) - 1`, so rows at exactly 1.0 are in no bin (`count` sums to fewer than the rows)
    and 0.3 / 0.6 / 0.7 (edges that `linspace` rounds up) fall in the bin below.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.
        n_bins (`int`, *optional*, defaults to `10`): Number of bins, >= 1.
        strategy (`str`, *optional*, defaults to `"uniform"`): `"uniform"` (equal width), `"quantile"` (equal mass)
            or `"reference"` (the paper's code, see above).

    Returns:
        `dict[str, np.ndarray]`: arrays of length `n_bins`: `bin_lower` and `bin_upper` (the bin edges for
        `"uniform"` and `"reference"`; the smallest and largest confidence in the bin for `"quantile"`), `count`
        (int), `mean_confidence` and `accuracy` (`nan` for empty bins, and both edges are `nan` for empty quantile
        bins).
    """
    conf, y = check_inputs(confidences, correct)
    _check_binning(n_bins, strategy)
    n_bins = int(n_bins)
    if strategy == "uniform":
        edges = np.arange(n_bins + 1) / n_bins
        ids = uniform_bin_ids(conf, n_bins)
        lower, upper = edges[:-1], edges[1:]
    elif strategy == "reference":
        edges = np.linspace(0, 1, n_bins + 1)
        ids = np.digitize(conf, edges) - 1
        conf, y, ids = conf[ids < n_bins], y[ids < n_bins], ids[ids < n_bins]  # 1.0: the bin the reference skips
        lower, upper = edges[:-1], edges[1:]
    else:
        order = np.argsort(conf, kind="stable")
        sizes = np.full(n_bins, conf.size // n_bins)
        sizes[: conf.size % n_bins] += 1
        ids = np.empty(conf.size, dtype=np.int64)
        ids[order] = np.repeat(np.arange(n_bins), sizes)
        starts = np.cumsum(sizes) - sizes
        full = sizes > 0
        lower = np.full(n_bins, np.nan)
        upper = np.full(n_bins, np.nan)
        lower[full] = conf[order][starts[full]]
        upper[full] = conf[order][starts[full] + sizes[full] - 1]
    count = np.bincount(ids, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(ids, weights=conf, minlength=n_bins) / count
        acc = np.bincount(ids, weights=y, minlength=n_bins) / count
    return {
        "bin_lower": np.asarray(lower, dtype=np.float64),
        "bin_upper": np.asarray(upper, dtype=np.float64),
        "count": count,
        "mean_confidence": mean_conf,
        "accuracy": acc,
    }


def ece(confidences: ArrayLike, correct: ArrayLike, n_bins: int = 10, strategy: str = "uniform") -> float:
    """Expected calibration error: `sum_b |b|/N * |mean(confidence in b) - accuracy(b)|` over non-empty bins.

    The bins come from [`reliability_bins`] (see there for the exact bin boundaries); `N` is the number of rows.
    `strategy="reference"` reproduces the ECE the paper reports, whose code leaves the rows at 1.0 out of every bin
    while still counting them in `N` (10 rows, six at 1.0: 0.02 where the correct ECE is 0.32); use it only to compare
    with the paper's numbers.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.
        n_bins (`int`, *optional*, defaults to `10`): Number of bins, >= 1.
        strategy (`str`, *optional*, defaults to `"uniform"`): `"uniform"` (equal width), `"quantile"` (equal mass)
            or `"reference"` (the paper's code).

    Returns:
        `float`: ECE in [0, 1].
    """
    conf, y = check_inputs(confidences, correct)
    bins = reliability_bins(conf, y, n_bins=n_bins, strategy=strategy)
    count = bins["count"]
    full = count > 0
    gaps = np.abs(bins["mean_confidence"][full] - bins["accuracy"][full])
    return float(np.sum(count[full] / conf.size * gaps))


def brier(confidences: ArrayLike, correct: ArrayLike) -> float:
    """Brier score: the mean squared difference between confidence and correctness.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.

    Returns:
        `float`: Brier score in [0, 1] (lower is better).
    """
    conf, y = check_inputs(confidences, correct)
    return float(np.mean((conf - y) ** 2))


DEFAULT_THRESHOLDS = np.round(np.arange(1, 100) / 100, 2)
"""The alignment threshold's candidates when none are given: 0.01, 0.02, ..., 0.99."""

MIN_THRESHOLD_ROWS = 5
"""Fewer rows than this choose the alignment threshold with a warning (the paper's 20% rule needs n >= 25 for 5)."""


def _warn_threshold_rows(conf: np.ndarray, y: np.ndarray, fallback: bool) -> None:
    """Warn when the rows choosing a threshold are too few (< [`MIN_THRESHOLD_ROWS`]) or hold one class."""
    classes = len(np.unique(y))
    if not fallback and conf.size >= MIN_THRESHOLD_ROWS and classes == 2:
        return
    what = "no threshold separates them, so t = 0.5 is used" if fallback else "the threshold is unreliable"
    warnings.warn(
        f"The alignment threshold is chosen on {conf.size} row(s) holding {classes} class(es) (at least "
        f"{MIN_THRESHOLD_ROWS} rows with both correct and wrong answers are needed): {what}.",
        UserWarning,
        stacklevel=4,
    )


def _best_threshold(conf: np.ndarray, y: np.ndarray, thresholds: np.ndarray) -> float:
    """Threshold maximising the accuracy of `conf >= t` as a predictor of `y`; see [`alignment`]. Warns when the
    rows are too few or one class ([`_warn_threshold_rows`])."""
    if conf.size == 0:
        _warn_threshold_rows(conf, y, fallback=True)
        return 0.5
    pos, neg = np.sort(conf[y == 1]), np.sort(conf[y == 0])
    pos_ge = pos.size - np.searchsorted(pos, thresholds, side="left")  # correct rows predicted 1
    neg_ge = neg.size - np.searchsorted(neg, thresholds, side="left")  # wrong rows predicted 1
    predicted_one = pos_ge + neg_ge
    hits = pos_ge + (neg.size - neg_ge)
    valid = (predicted_one > 0) & (predicted_one < conf.size)
    _warn_threshold_rows(conf, y, fallback=not valid.any())
    if not valid.any():
        return 0.5
    best = hits[valid].max()
    return float(thresholds[valid & (hits == best)].min())


def select_threshold(confidences: ArrayLike, correct: ArrayLike, thresholds: ArrayLike | None = None) -> float:
    """
    The answer/abstain threshold that [`alignment`] would pick on these rows (e.g. a dev split), for a model to
    carry as its decision rule: maximises the accuracy of `(confidence >= t) == correct`, skipping thresholds that
    predict all 0 or all 1; ties go to the smallest `t`; 0.5 when none is valid. A `UserWarning` says so when the
    rows are fewer than [`MIN_THRESHOLD_ROWS`] or hold one class.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.
        thresholds (`ArrayLike`, *optional*, defaults to `None`): Candidates; `None` means 0.01, 0.02, ..., 0.99.

    Returns:
        `float`: the threshold.
    """
    conf, y = check_inputs(confidences, correct)
    thr = DEFAULT_THRESHOLDS if thresholds is None else np.asarray(thresholds, dtype=np.float64)
    return _best_threshold(conf, y, thr.ravel())


def alignment(
    confidences: ArrayLike,
    correct: ArrayLike,
    calibration_fraction: float = 0.2,
    thresholds: ArrayLike | None = None,
    shuffle_seed: int | None = None,
) -> dict[str, float]:
    """The paper's alignment: accuracy of thresholded confidence as a predictor of correctness, on held-out rows.

    The first `int(calibration_fraction * n)` rows (in the given order, or after
    `np.random.default_rng(shuffle_seed).permutation(n)` when `shuffle_seed` is set) pick the threshold `t` maximising
    the accuracy of `(confidence >= t) == correct`, skipping thresholds that predict all 0 or all 1 on those rows; ties
    go to the smallest `t`, and `t = 0.5` when no threshold is valid (or the prefix is empty); a `UserWarning` says so
    when the prefix holds fewer than [`MIN_THRESHOLD_ROWS`] rows or one class. The rule is then scored on the remaining
    rows.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.
        calibration_fraction (`float`, *optional*, defaults to `0.2`): Fraction of rows used to choose the threshold.
        thresholds (`ArrayLike`, *optional*, defaults to `None`): Candidate thresholds; `None` means 0.01, 0.02, ...,
        0.99.
        shuffle_seed (`int`, *optional*, defaults to `None`): Seed of a row permutation applied before splitting.

    Returns:
        `dict[str, float]`: `{"alignment": accuracy * 100 on the remaining rows, "threshold": t}`.

    Raises:
        `ValueError`: if `calibration_fraction` is outside [0, 1], `thresholds` is empty or not finite, or no rows
            remain after the calibration prefix.
    """
    conf, y = check_inputs(confidences, correct)
    if not 0.0 <= calibration_fraction <= 1.0:
        raise ValueError(f"calibration_fraction must lie in [0, 1], got {calibration_fraction!r}")
    if thresholds is None:
        thr = DEFAULT_THRESHOLDS
    else:
        thr = np.asarray(thresholds, dtype=np.float64).ravel()
        if thr.size == 0 or not np.isfinite(thr).all():
            raise ValueError("thresholds must be a non-empty sequence of finite numbers")
    n = conf.size
    if shuffle_seed is not None:
        perm = np.random.default_rng(shuffle_seed).permutation(n)
        conf, y = conf[perm], y[perm]
    k = int(calibration_fraction * n)
    if k >= n:
        raise ValueError(
            f"alignment needs at least one evaluation row after the calibration prefix, got n={n} and "
            f"calibration_fraction={calibration_fraction!r}"
        )
    t = _best_threshold(conf[:k], y[:k], thr)
    acc = np.mean((conf[k:] >= t) == (y[k:] == 1))
    return {"alignment": float(acc * 100), "threshold": t}


def auprc(confidences: ArrayLike, correct: ArrayLike, positive: str = "correct") -> float:
    """Area under the precision-recall curve as average precision, `sum_n (R_n - R_{n-1}) P_n`.

    Same definition as `sklearn.metrics.average_precision_score` (one operating point per distinct score, no
    interpolation).

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.
        positive (`str`, *optional*, defaults to `"correct"`): `"correct"` scores `correct == 1` by `confidences`;
            `"error"` scores `correct == 0` by `1 - confidences` (error detection).

    Returns:
        `float`: Average precision in [0, 1]; `nan` (with a `UserWarning`) when there is no positive example.
    """
    conf, y = check_inputs(confidences, correct)
    if positive == "correct":
        score, target = conf, y
    elif positive == "error":
        score, target = 1.0 - conf, 1 - y
    else:
        raise ValueError(f"positive must be 'correct' or 'error', got {positive!r}")
    n_pos = int(target.sum())
    if n_pos == 0:
        warnings.warn(f"AUPRC is undefined when there is no positive ({positive!r}) example; returning nan.", UserWarning)
        return float("nan")
    order = np.argsort(-score, kind="stable")
    sorted_score = score[order]
    last = np.flatnonzero(np.r_[sorted_score[1:] != sorted_score[:-1], True])  # end of each tie group
    tps = np.cumsum(target[order])[last]
    precision = tps / (last + 1)
    recall = tps / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def risk_coverage_curve(confidences: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Selective risk at every coverage `k/n`, keeping the `k` most confident predictions.

    Ties: predictions with equal confidence form one group that is accepted or rejected as a whole, so for a `k` that
    cuts through a group the risk is the *expected* one under a random order inside the group (its errors count
    pro rata). The curve therefore does not depend on how tied rows happen to be ordered, and it is exact at the group
    boundaries.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.

    Returns:
        `tuple[np.ndarray, np.ndarray]`: `(coverage, risk)`, each of length n, with `coverage = k/n` for `k = 1..n`
        and `risk` the error rate among the top `k`.
    """
    conf, y = check_inputs(confidences, correct)
    n = conf.size
    order = np.argsort(-conf, kind="stable")
    starts = tie_groups(conf[order])
    sizes = np.diff(np.r_[starts, n])
    group_errors = np.add.reduceat(1 - y[order], starts).astype(np.float64)
    errors_before = np.cumsum(group_errors) - group_errors
    group = np.repeat(np.arange(starts.size), sizes)
    k = np.arange(1, n + 1)
    cum_errors = errors_before[group] + (k - starts[group]) * group_errors[group] / sizes[group]
    return k / n, cum_errors / k


def aurc(confidences: ArrayLike, correct: ArrayLike) -> float:
    """Area under the risk-coverage curve: the mean of [`risk_coverage_curve`]'s risks over `k = 1..n`.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.

    Returns:
        `float`: AURC in [0, 1] (lower is better).
    """
    return float(np.mean(risk_coverage_curve(confidences, correct)[1]))


def prr(confidences: ArrayLike, correct: ArrayLike) -> float:
    """Prediction rejection ratio `(AURC_random - AURC_model) / (AURC_random - AURC_oracle)`.

    `AURC_random` is the overall error rate (a constant risk curve) and `AURC_oracle` the AURC of the ordering that puts
    every correct answer first. 1 is perfect ranking, 0 is random, negative is worse than random.

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.

    Returns:
        `float`: PRR; `nan` (with a `UserWarning`) when all answers are correct or all are wrong.
    """
    conf, y = check_inputs(confidences, correct)
    if y.all() or not y.any():
        warnings.warn("PRR is undefined when all answers are correct or all are wrong; returning nan.", UserWarning)
        return float("nan")
    random_aurc = 1.0 - y.mean()
    oracle_aurc = aurc(y.astype(np.float64), y)
    return float((random_aurc - aurc(conf, y)) / (random_aurc - oracle_aurc))


def bootstrap_indices(
    n: int, n_resamples: int, rng: np.random.Generator, calibration_fraction: float | None = None
) -> np.ndarray:
    """Row indices of `n_resamples` bootstrap resamples of `n` rows (drawn with replacement): the one resampling rule
    of this library, used by [`bootstrap_ci`] and by `elical_hf.evaluation.tables`.

    With `calibration_fraction`, for a metric that chooses something on the first `k = int(calibration_fraction * n)`
    rows and scores the rest, as [`alignment`] does, the two parts are resampled separately: positions `:k` draw from
    rows `0..k-1` and positions `k:` from rows `k..n-1`, so that no resampled row is both used to choose the threshold
    and scored, as in the point estimate.

    Args:
        n (`int`): Number of rows, >= 1.
        n_resamples (`int`): Number of resamples.
        rng (`np.random.Generator`): Source of the draws.
        calibration_fraction (`float`, *optional*, defaults to `None`): Fraction of leading rows resampled apart from
            the rest; `None` resamples all rows together.

    Returns:
        `np.ndarray`: int64 array of shape `(n_resamples, n)`.
    """
    k = 0 if calibration_fraction is None else int(calibration_fraction * n)
    if not 0 <= k < n:
        raise ValueError(
            f"calibration_fraction must leave at least one of the {n} rows to score, got {calibration_fraction!r}"
        )
    if k == 0:
        return rng.integers(0, n, size=(n_resamples, n))
    prefix = rng.integers(0, k, size=(n_resamples, k))
    return np.concatenate([prefix, rng.integers(k, n, size=(n_resamples, n - k))], axis=1)


def bootstrap_samples(
    metric_fn: Callable[[np.ndarray, np.ndarray], float],
    confidences: ArrayLike,
    correct: ArrayLike,
    indices: np.ndarray,
) -> np.ndarray:
    """`metric_fn(confidences[rows], correct[rows])` for each row of `indices` (see [`bootstrap_indices`]), with the
    metric's warnings silenced (a resample may hold one class); `nan` where the metric is undefined.

    Returns:
        `np.ndarray`: float64 array with one value per resample.
    """
    conf, y = check_inputs(confidences, correct)
    stats = np.empty(len(indices))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, rows in enumerate(indices):
            stats[i] = metric_fn(conf[rows], y[rows])
    return stats


def percentile_interval(samples: ArrayLike, confidence_level: float = 0.95) -> tuple[float, float]:
    """Percentile interval `(low, high)` of bootstrap samples covering `confidence_level`, ignoring `nan` samples;
    `(nan, nan)` when every sample is `nan`."""
    values = np.asarray(samples, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    alpha = 100 * (1 - confidence_level) / 2
    low, high = np.percentile(values, [alpha, 100 - alpha])
    return float(low), float(high)


def bootstrap_ci(
    metric_fn: Callable[[np.ndarray, np.ndarray], float],
    confidences: ArrayLike,
    correct: ArrayLike,
    n_resamples: int = 1000,
    confidence_level: float = 0.95,
    seed: int | None = 0,
    calibration_fraction: float | None = None,
) -> dict[str, float]:
    """Percentile bootstrap confidence interval of a metric, resampling rows with replacement ([`bootstrap_indices`]).

    Resamples on which the metric is `nan` (e.g. a single class for [`auroc`]) are skipped, and their warnings are
    silenced. For [`alignment`], pass its `calibration_fraction`: the threshold rows and the scored rows are then
    resampled separately, the rule `elical-hf evaluate` uses too (same data and seed, same interval).

    Args:
        metric_fn (`Callable[[np.ndarray, np.ndarray], float]`): Metric called as `metric_fn(confidences, correct)`,
            e.g. [`auroc`] or `functools.partial(ece, n_bins=15)`.
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.
        n_resamples (`int`, *optional*, defaults to `1000`): Number of bootstrap resamples, >= 1.
        confidence_level (`float`, *optional*, defaults to `0.95`): Coverage of the interval, in (0, 1).
        seed (`int`, *optional*, defaults to `0`): Seed of `np.random.default_rng`; `None` is not reproducible.
        calibration_fraction (`float`, *optional*, defaults to `None`): For a metric that chooses a threshold on the
            first `int(calibration_fraction * n)` rows and scores the rest, as [`alignment`] does: resample the two
            parts separately. `None` resamples all rows together.

    Returns:
        `dict[str, float]`: `{"low", "high", "point"}`; `low`/`high` are `nan` if every resample gave `nan`.
    """
    conf, y = check_inputs(confidences, correct)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an integer >= 1, got {n_resamples!r}")
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level!r}")
    point = float(metric_fn(conf, y))
    indices = bootstrap_indices(conf.size, int(n_resamples), np.random.default_rng(seed), calibration_fraction)
    low, high = percentile_interval(bootstrap_samples(metric_fn, conf, y, indices), confidence_level)
    return {"low": low, "high": high, "point": point}


METRICS: dict[str, Callable[..., float]] = {
    "auroc": auroc, "ece": ece, "brier": brier, "auprc": auprc, "aurc": aurc, "prr": prr
}
"""Name -> metric function, for every metric that maps `(confidences, correct)` to one float."""

METRIC_NAMES: dict[str, str] = {
    "auroc": "AUROC", "ece": "ECE", "alignment": "Alignment", "brier": "Brier score", "loss": "MSE"
}
"""Display names of the metrics that model cards and evaluation reports show, in their column order: those of
[`compute_all`] (whose `threshold` is a setting, not a metric) and `loss`, the trainer's mean squared error between
confidence and target."""


def compute_all(
    confidences: ArrayLike,
    correct: ArrayLike,
    *,
    n_bins: int = 10,
    calibration_fraction: float = 0.2,
    shuffle_seed: int | None = None,
) -> dict[str, float]:
    """The paper's headline metrics in one call.

    Values are raw: `auroc`, `ece` and `brier` lie in [0, 1] (the paper's tables multiply AUROC and ECE by 100), while
    `alignment` is already a percentage, as returned by [`alignment`].

    Args:
        confidences (`ArrayLike`): Confidences in [0, 1].
        correct (`ArrayLike`): 0/1 correctness labels.
        n_bins (`int`, *optional*, defaults to `10`): Uniform bins for [`ece`].
        calibration_fraction (`float`, *optional*, defaults to `0.2`): Passed to [`alignment`].
        shuffle_seed (`int`, *optional*, defaults to `None`): Passed to [`alignment`].

    Returns:
        `dict[str, float]`: `{"auroc", "ece", "brier", "alignment", "threshold"}`.
    """
    conf, y = check_inputs(confidences, correct)
    align = alignment(conf, y, calibration_fraction=calibration_fraction, shuffle_seed=shuffle_seed)
    return {
        "auroc": auroc(conf, y),
        "ece": ece(conf, y, n_bins=n_bins),
        "brier": brier(conf, y),
        "alignment": align["alignment"],
        "threshold": align["threshold"],
    }

