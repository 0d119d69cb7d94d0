"""Answer/abstain thresholds with a guaranteed error rate among answered questions (Learn-Then-Test), and optionally
a guaranteed abstention rate at the same time.

"Answer when confidence >= t" has a *selective risk* `R(t)`: the probability that an answered question is answered
wrongly. [`risk_controlling_threshold`] picks, from `n` labelled calibration rows, the lowest threshold (the most
answers) it can certify, so that over the draw of the calibration rows

    P( R(t_hat) <= alpha ) >= 1 - delta,

where writing no threshold (answer nothing: nothing answered, nothing wrong) counts as meeting it. This is a statement
about the procedure over calibration draws, not about one written threshold: at a small `n` the procedure seldom
writes one, and the few it writes may exceed alpha far more often than delta. [`certification_power`] says how often
calibration sets like the one given would certify any threshold (`elical-hf threshold` prints it).

Tests (Angelopoulos et al., "Learn then Test", 2021). For each candidate `t` the null hypothesis is `R(t) > alpha`.
Given the number `n_t` of rows answered at `t`, those rows are i.i.d. draws of the rows with confidence >= t, so their
errors are `Binomial(n_t, R(t))` and `p_t = P(Binomial(n_t, alpha) <= errors_t)` (`scipy.stats.binom.cdf`) is a valid
p-value (<= `level` exactly when the one-sided Clopper-Pearson bound at `1 - level` lies below alpha).

Two fixed sequences ([`RISK_CONTROL_METHOD`], [`fixed_sequences`]). The first gets `0.7 delta` and starts at the
highest threshold answering `min_answered(alpha, 0.7 delta)` rows (fewer could not be certified even with no error); the
second gets `0.3 delta` and starts where `3 min_answered(alpha, 0.3 delta)` rows are answered (102 at alpha = delta =
0.1), so that errors among the most confident rows, which end the first, do not end it. Each tests downwards,
certifying every threshold until its first non-rejection; the lowest threshold either certifies is chosen. When the
second start would answer more than half the rows, one sequence at `delta` starting at `min_answered(alpha, delta)`
rows is used: the single sequence of earlier versions. The starts depend on `n`, alpha and delta only; the shares and
multiple were chosen on the simulation of `benchmarks/gate_guarantee.py`.

Validity. A sequence certifies a threshold with `R(t) > alpha` only if it rejects the first such threshold it tests.
With a start fixed in advance that threshold is fixed and this has probability at most the sequence's level (the
fixed-sequence argument). Here the start is read off the confidences (never the labels): writing `u_1 > u_2 > ...` for
the thresholds with `R > alpha`, a sequence starting where `m` rows are answered first tests `u_i` exactly when
`n(u_i) >= m > n(u_{i-1})`. Given `n(u_i)`, the answered rows above `u_{i-1}` are a binomial share of them; when
`R(u_{i-1}) <= R(u_i)` (the risk does not fall as the threshold falls from one such threshold to the next: surer
answers are not more often wrong), fewer rows above `u_{i-1}` can only mean more errors, so "`n(u_{i-1}) < m`" and
"`p(u_i)` rejects" are negatively associated given `n(u_i)` (Chebyshev's association inequality): their joint
probability is at most `level * P(n(u_{i-1}) < m | n(u_i))`. These events are disjoint over `i`, so the sequence errs
with probability at most its level, and the union bound over the sequences (levels summing to delta) gives
`1 - delta` for every certified threshold at once. The same argument, with the same condition, covers the single
sequence of earlier versions. Without the condition (a model more often wrong at its highest confidences) the bound
is not proven; the simulation's adversarial setting measures it (`benchmarks/gate_guarantee.py`,
`tests/test_gate_guarantee.py`, a table in `docs/gate.md`).

Two risks (`max_abstention`): the abstention rate `A(t) = P(confidence < t)` must also be at most `max_abstention`.
The two risks pull apart (a higher threshold lowers `R` and raises `A`), so each gets its own family and half of
delta (Bonferroni over the two risks): the error family as above at `delta / 2` (shared by its sequences);
the abstention family from the lowest threshold up at `delta / 2` (a fixed start: exact, and it needs no labels), with
`P(Binomial(n, max_abstention) <= abstained_t)`, certifying every threshold up to `t_abstention`. By the union bound
both hold, with probability at least `1 - delta`, at every threshold certified by both; the lowest error-certified
threshold is chosen when it lies at or below `t_abstention`, and otherwise the result says what each family reached.

The guarantees assume the calibration rows and the questions the model later sees are drawn from the same
distribution (exchangeable, and never trained on); [`~elical_hf.evaluation.drift`] tests the confidences of new
questions against the calibration set's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .functional import check_inputs


__all__ = ["POWER_DOUBLINGS", "RISK_CONTROL_METHOD", "TWO_RISK_METHOD", "binomial_cdf", "certification_power", "certify",
           "clopper_pearson_upper", "grid_counts", "min_answered", "risk_controlling_threshold", "rows_for_power",
           "fixed_sequences", "selective_risk"]

RISK_CONTROL_METHOD = ("learn-then-test: binomial (Clopper-Pearson) p-values, two fixed sequences from high to low "
                       "(0.7 delta from min_answered rows, 0.3 delta from 3 x min_answered rows; one at delta when the "
                       "second would start past half the rows)")
"""How [`risk_controlling_threshold`] chooses; recorded with the threshold in `confidence_config.json` (configs saved
by earlier versions say "fixed-sequence from high to low", one sequence; they load as before)."""
TWO_RISK_METHOD = ("learn-then-test, two risks: binomial (Clopper-Pearson) p-values; error rate by the fixed sequences "
                   "from high to low at delta / 2, abstention rate from low to high at delta / 2 (Bonferroni over the "
                   "two risks)")
"""How [`risk_controlling_threshold`] chooses with `max_abstention`; recorded as `method`."""
FIRST_SHARE = 0.7
"""The share of the error family's level on the sequence starting at `min_answered` rows ([`fixed_sequences`])."""
LATER_START = 3
"""The second sequence starts where this many times `min_answered(alpha, rest of the level)` rows are answered."""
DEFAULT_GRID = np.round(np.arange(99, -1, -1) / 100, 2)
"""The candidate thresholds: 0.99, 0.98, ..., 0.00."""


def min_answered(alpha: float, delta: float) -> int:
    """Fewest answered rows at which an error rate below `alpha` can be certified at level `1 - delta` at all: the
    smallest `n` with `(1 - alpha)^n <= delta` (22 for `alpha = delta = 0.1`)."""
    return math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12)


def fixed_sequences(n: int, alpha: float, level: float) -> list[tuple[int, float]]:
    """The fixed sequences of the error family at `level`, as `(answered rows where it starts, its level)` (see the
    module docstring): [`FIRST_SHARE`] of the level from `min_answered` rows and the rest from [`LATER_START`] times
    that of the rest, or, when that start would answer more than half of the `n` rows, one sequence at the whole level
    from `min_answered(alpha, level)` rows (earlier versions' procedure). Depends on `n`, alpha and the level only."""
    first, rest = FIRST_SHARE * level, (1 - FIRST_SHARE) * level
    later = LATER_START * min_answered(alpha, rest)
    if later > n // 2:
        return [(min_answered(alpha, level), level)]
    return [(min_answered(alpha, first), first), (later, rest)]


def binomial_cdf(k: int, n: int, p: float) -> float:
    """`P(Binomial(n, p) <= k)` (`scipy.stats.binom.cdf`; 1.0 for `n = 0` or `k >= n`, 0.0 for `k < 0`)."""
    from scipy.stats import binom

    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return float(binom.cdf(k, n, p))


def clopper_pearson_upper(k: int, n: int, delta: float) -> float:
    """One-sided Clopper-Pearson upper bound, at level `1 - delta`, of a binomial proportion with `k` successes in
    `n` trials: the `p` where `P(Binomial(n, p) <= k) = delta`, the `1 - delta` quantile of `Beta(k + 1, n - k)`
    (`scipy.stats.beta.ppf`; 1.0 when `n = 0` or `k = n`)."""
    from scipy.stats import beta

    if n == 0 or k >= n:
        return 1.0
    return float(beta.ppf(1.0 - delta, k + 1, n - k))


def selective_risk(confidences: ArrayLike, correct: ArrayLike, threshold: float) -> dict[str, float]:
    """Error rate among the rows answered by "answer when confidence >= threshold", and the share answered.

    Returns:
        `dict`: `risk` (errors / answered; NaN when nothing is answered), `coverage` (answered / rows), `answered`.
    """
    conf, y = check_inputs(confidences, correct)
    answered = conf >= threshold
    count = int(answered.sum())
    risk = float(1.0 - y[answered].mean()) if count else math.nan
    return {"risk": risk, "coverage": count / conf.size, "answered": count}


def _check_level(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"`{name}` must lie in (0, 1), got {value!r}.")


def _grid(thresholds: ArrayLike | None) -> np.ndarray:
    grid = DEFAULT_GRID if thresholds is None else np.sort(np.asarray(thresholds, dtype=np.float64).ravel())[::-1]
    if grid.size == 0 or not np.isfinite(grid).all():
        raise ValueError("`thresholds` must be a non-empty sequence of finite numbers.")
    return grid


def _cells(conf: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each row's cell: the index of the highest threshold of `grid` (sorted high to low) that answers it, or
    `len(grid)` when none does."""
    return np.searchsorted(-grid, -conf, side="left")


def grid_counts(confidences: ArrayLike, correct: ArrayLike,
                thresholds: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The thresholds from high to low (default: 0.99 ... 0.00) and, at each, the rows answered (confidence >= t) and
    the errors among them: what [`certify`] tests."""
    conf, y = check_inputs(confidences, correct)
    grid = _grid(thresholds)
    cells = _cells(conf, grid)
    answered = np.cumsum(np.bincount(cells, minlength=grid.size + 1)[: grid.size])
    errors = np.cumsum(np.bincount(cells, weights=1 - y, minlength=grid.size + 1)[: grid.size]).astype(np.int64)
    return grid, answered, errors


def certify(answered: np.ndarray, errors: np.ndarray, n: int, alpha: float, delta: float,
            max_abstention: float | None = None,
            sequences: list[tuple[int, float]] | None = None) -> dict[str, np.ndarray]:
    """
    The tests of the module docstring on many calibration sets at once: `answered` and `errors` are arrays of shape
    `(draws, thresholds)` (or one row), the thresholds sorted from high to low, each set of `n` rows.

    Args:
        sequences (`list[tuple[int, float]]`, *optional*): The error family's fixed sequences, each `(answered rows
            where it starts, its level)`; their levels should sum to delta (delta / 2 with `max_abstention`). Default:
            [`fixed_sequences`]. `[(min_answered(alpha, delta), delta)]` is the single fixed sequence of earlier
            versions (the benchmark's "old" procedure).

    Returns:
        `dict` of arrays, one entry per draw: `chosen` (index of the chosen threshold, -1 for none),
        `error_certified` (the lowest threshold the error family certified, -1 for none), `level` (the level of the
        test that certified it, the larger where two did, NaN for none) and, with `max_abstention`,
        `abstention_certified` (the highest threshold the abstention family certified, -1 for none).
    """
    from scipy.stats import binom

    answered, errors = np.atleast_2d(answered), np.atleast_2d(errors)
    family = delta if max_abstention is None else delta / 2
    tested = fixed_sequences(n, alpha, family) if sequences is None else list(sequences)
    columns = np.arange(answered.shape[1])
    p_values = binom.cdf(errors, answered, alpha)  # no answered row: 1, never rejected
    lowest, level = np.full(answered.shape[0], -1), np.full(answered.shape[0], np.nan)
    for start_rows, share in tested:
        reaches = answered >= start_rows
        start = np.where(reaches.any(axis=1), reaches.argmax(axis=1), answered.shape[1])
        stops = (p_values > share) & (columns >= start[:, None])
        last = np.where(stops.any(axis=1), stops.argmax(axis=1), answered.shape[1]) - 1  # before the first failure
        better = (last >= start) & ((last > lowest) | ((last == lowest) & ~(level >= share)))
        lowest, level = np.where(better, last, lowest), np.where(better, share, level)
    out = {"chosen": lowest, "error_certified": lowest, "level": level}
    if max_abstention is not None:
        fails = binom.cdf(n - answered, n, max_abstention) > family  # abstention not certified at this threshold
        last_failure = np.where(fails.any(axis=1), columns[-1] - fails[:, ::-1].argmax(axis=1), -1)
        ceiling = np.where(last_failure < columns[-1], last_failure + 1, -1)  # the highest certified, or none
        both = (lowest >= 0) & (ceiling >= 0) & (lowest >= ceiling)
        out.update(chosen=np.where(both, lowest, -1), abstention_certified=ceiling)
    return out


def risk_controlling_threshold(
    confidences: ArrayLike,
    correct: ArrayLike,
    alpha: float = 0.1,
    delta: float = 0.1,
    thresholds: ArrayLike | None = None,
    max_abstention: float | None = None,
) -> dict[str, Any]:
    """
    The lowest threshold whose error rate among answered questions is certified to be at most `alpha` (and, with
    `max_abstention`, whose abstention rate is certified to be at most `max_abstention` too), so that over the draw
    of the calibration rows `P(R(t_hat) <= alpha) >= 1 - delta`, no threshold counting as success (see the module
    docstring for the tests and their validity).

    Args:
        confidences (`ArrayLike`): Confidences of the calibration rows, in [0, 1].
        correct (`ArrayLike`): Their 0/1 correctness labels (1 = the model's answer was right).
        alpha (`float`, *optional*, defaults to 0.1): The error rate allowed among answered questions, in (0, 1).
        delta (`float`, *optional*, defaults to 0.1): The allowed probability that the guarantee fails, in (0, 1)
            (with `max_abstention`: that either of the two fails).
        thresholds (`ArrayLike`, *optional*): Candidate thresholds. `None` means 0.99, 0.98, ..., 0.00.
        max_abstention (`float`, *optional*): The abstention rate allowed (share of questions not answered), in
            (0, 1); `None`: the error rate alone.

    Returns:
        `dict`: `threshold` (`None` when no candidate could be certified: answer nothing),
        `alpha`, `delta`, `n` (calibration rows), `answered`, `coverage` (share of calibration rows answered),
        `risk` (their empirical error rate), `risk_upper_bound` (its Clopper-Pearson bound at the level of the test
        that certified it, e.g. `1 - 0.7 delta`), `sequences` (how many, [`fixed_sequences`]) and `method`
        ([`RISK_CONTROL_METHOD`] or [`TWO_RISK_METHOD`]). With `max_abstention` also `max_abstention`, `abstention`
        (`1 - coverage`), `abstention_upper_bound` (at `1 - delta / 2`), `error_certified` (the lowest threshold the
        error family certified, `None` if none) and `abstention_certified` (the highest threshold the abstention
        family certified): when `threshold` is `None` they say how far apart the two risks are.

    Raises:
        `ValueError`: on bad inputs (see [`~elical_hf.metrics.check_inputs`]), or `alpha` / `delta` /
        `max_abstention` outside (0, 1).
    """
    _check_level("alpha", alpha)
    _check_level("delta", delta)
    if max_abstention is not None:
        _check_level("max_abstention", max_abstention)
    grid, answered, errors = grid_counts(confidences, correct, thresholds)
    n = int(np.asarray(confidences).size)
    tested = fixed_sequences(n, alpha, delta if max_abstention is None else delta / 2)
    found = certify(answered, errors, n, alpha, delta, max_abstention, tested)
    chosen = int(found["chosen"][0])
    result: dict[str, Any] = {"threshold": None, "alpha": float(alpha), "delta": float(delta), "n": n,
                              "answered": 0, "coverage": 0.0, "risk": math.nan, "risk_upper_bound": math.nan,
                              "sequences": len(tested), "method": RISK_CONTROL_METHOD}
    if max_abstention is not None:
        low, high = int(found["error_certified"][0]), int(found["abstention_certified"][0])
        result.update(max_abstention=float(max_abstention), abstention=1.0, abstention_upper_bound=1.0,
                      error_certified=None if low < 0 else float(grid[low]),
                      abstention_certified=None if high < 0 else float(grid[high]), method=TWO_RISK_METHOD)
    if chosen >= 0:
        n_t, k_t = int(answered[chosen]), int(errors[chosen])
        result.update(threshold=float(grid[chosen]), answered=n_t, coverage=n_t / n, risk=k_t / n_t,
                      risk_upper_bound=clopper_pearson_upper(k_t, n_t, float(found["level"][0])))
        if max_abstention is not None:
            result.update(abstention=1 - n_t / n,
                          abstention_upper_bound=clopper_pearson_upper(n - n_t, n, delta / 2))
    return result


def certification_power(confidences: ArrayLike, correct: ArrayLike, alpha: float, delta: float,
                        max_abstention: float | None = None, rows: int | None = None, draws: int = 400,
                        seed: int = 0) -> float:
    """
    How often a calibration set of `rows` rows (default: as many as given) drawn like these rows would certify a
    threshold: the share of `draws` bootstrap sets (rows drawn with replacement from the given ones, seeded) for which
    [`risk_controlling_threshold`] writes one. An estimate from the rows at hand; the sets are drawn as counts per
    threshold cell (`numpy` multinomial), so it costs milliseconds.
    """
    conf, y = check_inputs(confidences, correct)
    grid = DEFAULT_GRID
    categories = _cells(conf, grid) * 2 + (1 - y)  # (cell, wrong)
    share = np.bincount(categories, minlength=2 * (grid.size + 1)) / conf.size
    rows = conf.size if rows is None else int(rows)
    counts = np.random.default_rng(seed).multinomial(rows, share, size=draws)[:, : 2 * grid.size]
    counts = counts.reshape(draws, grid.size, 2)
    answered, errors = np.cumsum(counts.sum(axis=2), axis=1), np.cumsum(counts[:, :, 1], axis=1)
    return float((certify(answered, errors, rows, alpha, delta, max_abstention)["chosen"] >= 0).mean())


POWER_DOUBLINGS = 6
"""[`rows_for_power`] tries up to `2^POWER_DOUBLINGS` (64) times the rows given."""


def rows_for_power(confidences: ArrayLike, correct: ArrayLike, alpha: float, delta: float,
                   max_abstention: float | None = None, target: float = 0.8,
                   doublings: int = POWER_DOUBLINGS) -> int | None:
    """The smallest of `n, 2n, 4n, ...` (`n` the rows given, up to `2^doublings n`) at which
    [`certification_power`] reaches `target`, or `None` when none does (the model's errors at its confidences may
    not allow alpha at any size)."""
    n = int(np.asarray(confidences).size)
    for k in range(doublings + 1):
        if certification_power(confidences, correct, alpha, delta, max_abstention, rows=n * 2**k) >= target:
            return n * 2**k
    return None
