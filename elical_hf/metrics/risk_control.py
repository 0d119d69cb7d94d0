"""Answer/abstain thresholds with a guaranteed error rate among answered questions (Learn-Then-Test style), and
optionally a guaranteed abstention rate at the same time.

"Answer when confidence >= t" has a *selective risk* `R(t)`: the probability that an answered question is answered
wrongly. [`risk_controlling_threshold`] picks, from labelled calibration rows, the lowest threshold (the most answers)
whose risk it can certify to be at most `alpha`, so that over the draw of the calibration rows

    P( R(t_hat) <= alpha ) >= 1 - delta.

How (Angelopoulos et al., "Learn then Test", 2021, with fixed-sequence testing): for each candidate threshold `t`
the null hypothesis is `R(t) > alpha`. Given the number `n_t` of calibration rows answered at `t`, their errors are
binomial, so `p_t = P(Binomial(n_t, alpha) <= errors_t)` (`scipy.stats.binom.cdf`) is a valid p-value (it is <=
`delta` exactly when the one-sided Clopper-Pearson upper bound of level `1 - delta`, `scipy.stats.beta.ppf`, lies below
`alpha`). The candidates are tested in a fixed order, from the highest threshold down, each at level `delta`, stopping
at the first one not rejected; this sequence controls the family-wise error at `delta`, so every threshold it
certifies, and in particular the lowest, has `R(t) <= alpha` with probability `1 - delta`. A threshold that answers
fewer calibration rows than [`min_answered`]`(alpha, delta)` is passed over: there even zero errors give
`p_t = (1 - alpha)^n_t > delta`, so its test could never reject and would only end the sequence before the thresholds
that answer enough rows (which of them are passed over depends on the confidences alone, never on the labels).

Two risks (`max_abstention`): the abstention rate `A(t) = P(confidence < t)` must also be at most `max_abstention`.
The two risks pull in opposite directions (a higher threshold lowers `R` and raises `A`), so no single fixed sequence
tests both: each risk gets its own family, its own sequence and half of `delta` (a Bonferroni split over the two
risks). The error family is tested as above at level `delta / 2`, from high to low (certifying every threshold from
the top down to `t_error`); the abstention family from low to high at level `delta / 2`, with the binomial p-value
`P(Binomial(n, max_abstention) <= abstained_t)` of the `n` calibration rows (certifying every threshold up to
`t_abstention`; `A` rises with `t`, so this sequence is exact, and needs no labels). By the union bound, with
probability at least `1 - delta` *both* hold at every threshold certified by both families, the interval `[t_error, t_abstention]`;
its lowest threshold, `t_error`, is chosen. When `t_error > t_abstention` (or either family certifies nothing) no
threshold satisfies both, and the result says what each family reached.

The guarantees assume the calibration rows and the questions the model later sees are drawn from the same
distribution (exchangeable); `tests/test_risk_control.py` checks them by simulation, and [`~elical_hf.drift`] tests
the confidences of new questions against the calibration set's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .functional import check_inputs


__all__ = ["RISK_CONTROL_METHOD", "TWO_RISK_METHOD", "binomial_cdf", "clopper_pearson_upper", "min_answered",
           "risk_controlling_threshold", "selective_risk"]

RISK_CONTROL_METHOD = "learn-then-test: binomial (Clopper-Pearson) p-values, fixed-sequence from high to low"
"""How [`risk_controlling_threshold`] chooses; recorded with the threshold in `confidence_config.json`."""
TWO_RISK_METHOD = ("learn-then-test, two risks: binomial (Clopper-Pearson) p-values; error rate fixed-sequence from "
                   "high to low, abstention rate from low to high, each at delta / 2 (Bonferroni over the two risks)")
"""How [`risk_controlling_threshold`] chooses with `max_abstention`; recorded as `method`."""


def min_answered(alpha: float, delta: float) -> int:
    """Fewest answered rows at which an error rate below `alpha` can be certified at level `1 - delta` at all: the
    smallest `n` with `(1 - alpha)^n <= delta` (22 for `alpha = delta = 0.1`)."""
    return math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12)


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


def _error_sequence(answered: list[int], errors: list[int], alpha: float, level: float) -> int | None:
    """Index in `grid` (highest threshold first) of the lowest threshold certified with error rate <= `alpha` by the
    fixed sequence at `level` (see the module docstring), or `None`."""
    chosen, fewest = None, min_answered(alpha, level)
    for i, (n_t, k_t) in enumerate(zip(answered, errors)):
        if n_t < fewest:  # no outcome could be certified here (see the module docstring)
            continue
        if binomial_cdf(k_t, n_t, alpha) > level:
            break
        chosen = i
    return chosen


def _abstention_sequence(answered: list[int], rows: int, max_abstention: float, level: float) -> int | None:
    """Index in the grid (highest threshold first) of the highest threshold certified with abstention rate <=
    `max_abstention` by the fixed sequence from the lowest threshold up at `level`, or `None`."""
    chosen = None
    for i in range(len(answered) - 1, -1, -1):
        if binomial_cdf(rows - answered[i], rows, max_abstention) > level:
            break
        chosen = i
    return chosen


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
    `max_abstention`, whose abstention rate is certified to be at most `max_abstention` too) with probability at least
    `1 - delta` over the calibration draw (see the module docstring for the tests).

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
        `risk` (their empirical error rate), `risk_upper_bound` (its Clopper-Pearson bound at the level its test ran:
        `1 - delta`, or `1 - delta / 2` with two risks) and `method` ([`RISK_CONTROL_METHOD`] or [`TWO_RISK_METHOD`]).
        With `max_abstention` also `max_abstention`, `abstention` (`1 - coverage`), `abstention_upper_bound`,
        `error_certified` (the lowest threshold the error family certified, `None` if none) and
        `abstention_certified` (the highest threshold the abstention family certified): when `threshold` is `None`
        they say how far apart the two risks are.

    Raises:
        `ValueError`: on bad inputs (see [`~elical_hf.metrics.check_inputs`]), or `alpha` / `delta` /
        `max_abstention` outside (0, 1).
    """
    conf, y = check_inputs(confidences, correct)
    _check_level("alpha", alpha)
    _check_level("delta", delta)
    if max_abstention is not None:
        _check_level("max_abstention", max_abstention)
    grid = np.round(np.arange(99, -1, -1) / 100, 2) if thresholds is None else np.asarray(thresholds, dtype=np.float64)
    grid = np.sort(grid.ravel())[::-1]
    if grid.size == 0 or not np.isfinite(grid).all():
        raise ValueError("`thresholds` must be a non-empty sequence of finite numbers.")
    order = np.argsort(-conf, kind="stable")
    sorted_conf, sorted_wrong = conf[order], 1 - y[order]
    errors_before = np.concatenate([[0], np.cumsum(sorted_wrong)])
    answered = np.searchsorted(-sorted_conf, -grid, side="right").tolist()  # rows with confidence >= t, for every t
    errors = [int(errors_before[n_t]) for n_t in answered]
    level = delta if max_abstention is None else delta / 2
    chosen = _error_sequence(answered, errors, alpha, level)
    result: dict[str, Any] = {"threshold": None, "alpha": float(alpha), "delta": float(delta), "n": int(conf.size),
                              "answered": 0, "coverage": 0.0, "risk": math.nan, "risk_upper_bound": math.nan,
                              "method": RISK_CONTROL_METHOD}
    if max_abstention is not None:
        ceiling = _abstention_sequence(answered, conf.size, max_abstention, level)
        result.update(max_abstention=float(max_abstention), abstention=1.0, abstention_upper_bound=1.0,
                      error_certified=None if chosen is None else float(grid[chosen]),
                      abstention_certified=None if ceiling is None else float(grid[ceiling]),
                      method=TWO_RISK_METHOD)
        if chosen is not None and (ceiling is None or chosen < ceiling):  # grid[chosen] > grid[ceiling]: disjoint
            chosen = None
    if chosen is not None:
        n_t, k_t = answered[chosen], errors[chosen]
        result.update(threshold=float(grid[chosen]), answered=n_t, coverage=n_t / conf.size, risk=k_t / n_t,
                      risk_upper_bound=clopper_pearson_upper(k_t, n_t, level))
        if max_abstention is not None:
            result.update(abstention=1 - n_t / conf.size,
                          abstention_upper_bound=clopper_pearson_upper(conf.size - n_t, conf.size, level))
    return result
