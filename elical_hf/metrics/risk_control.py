"""Answer/abstain thresholds with a guaranteed error rate among answered questions (Learn-Then-Test style).

"Answer when confidence >= t" has a *selective risk* `R(t)`: the probability that an answered question is answered
wrongly. [`risk_controlling_threshold`] picks, from labelled calibration rows, the lowest threshold (the most answers)
whose risk it can certify to be at most `alpha`, so that over the draw of the calibration rows

    P( R(t_hat) <= alpha ) >= 1 - delta.

How (Angelopoulos et al., "Learn then Test", 2021, with fixed-sequence testing): for each candidate threshold `t`
the null hypothesis is `R(t) > alpha`. Given the number `n_t` of calibration rows answered at `t`, their errors are
binomial, so `p_t = P(Binomial(n_t, alpha) <= errors_t)` is a valid p-value (it is <= `delta` exactly when the
one-sided Clopper-Pearson upper bound of level `1 - delta` lies below `alpha`). The candidates are tested in a fixed
order, from the highest threshold down, each at level `delta`, stopping at the first one not rejected; this
sequence controls the family-wise error at `delta`, so every threshold it certifies, and in particular the lowest,
has `R(t) <= alpha` with probability `1 - delta`. A threshold that answers fewer calibration rows than
[`min_answered`]`(alpha, delta)` is passed over: there even zero errors give `p_t = (1 - alpha)^n_t > delta`, so its
test could never reject and would only end the sequence before the thresholds that answer enough rows (which of them
are passed over depends on the confidences alone, never on the labels). The guarantee assumes the calibration rows and the questions the model later sees are drawn from the
same distribution (exchangeable); `tests/test_risk_control.py` checks it by simulation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .functional import check_inputs


__all__ = ["RISK_CONTROL_METHOD", "binomial_cdf", "clopper_pearson_upper", "min_answered",
           "risk_controlling_threshold", "selective_risk"]

RISK_CONTROL_METHOD = "learn-then-test: binomial (Clopper-Pearson) p-values, fixed-sequence from high to low"
"""How [`risk_controlling_threshold`] chooses; recorded with the threshold in `confidence_config.json`."""


def min_answered(alpha: float, delta: float) -> int:
    """Fewest answered rows at which an error rate below `alpha` can be certified at level `1 - delta` at all: the
    smallest `n` with `(1 - alpha)^n <= delta` (22 for `alpha = delta = 0.1`)."""
    return math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """`P(Binomial(n, p) <= k)`, summed exactly in log space (1.0 for `n = 0` or `k >= n`)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    i = np.arange(k + 1, dtype=np.float64)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log((n - i[1:] + 1) / i[1:]))])  # log C(n, i)
    log_terms = log_choose + i * math.log(p) + (n - i) * math.log1p(-p)
    top = log_terms.max()
    return float(min(1.0, math.exp(top) * np.exp(log_terms - top).sum()))


def clopper_pearson_upper(k: int, n: int, delta: float) -> float:
    """One-sided Clopper-Pearson upper bound, at level `1 - delta`, of a binomial proportion with `k` successes in
    `n` trials: the `p` where `P(Binomial(n, p) <= k) = delta` (1.0 when `n = 0` or `k = n`)."""
    if n == 0 or k >= n:
        return 1.0
    low, high = k / n, 1.0
    for _ in range(34):  # bisection (to 1e-10): binomial_cdf decreases in p
        middle = (low + high) / 2
        low, high = (middle, high) if binomial_cdf(k, n, middle) > delta else (low, middle)
    return high


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


def risk_controlling_threshold(
    confidences: ArrayLike,
    correct: ArrayLike,
    alpha: float = 0.1,
    delta: float = 0.1,
    thresholds: ArrayLike | None = None,
) -> dict[str, Any]:
    """
    The lowest threshold whose error rate among answered questions is certified to be at most `alpha` with
    probability at least `1 - delta` over the calibration draw (see the module docstring for the test).

    Args:
        confidences (`ArrayLike`): Confidences of the calibration rows, in [0, 1].
        correct (`ArrayLike`): Their 0/1 correctness labels (1 = the model's answer was right).
        alpha (`float`, *optional*, defaults to 0.1): The error rate allowed among answered questions, in (0, 1).
        delta (`float`, *optional*, defaults to 0.1): The allowed probability that the guarantee fails, in (0, 1).
        thresholds (`ArrayLike`, *optional*): Candidate thresholds; tested from the highest down. `None` means
            0.99, 0.98, ..., 0.00.

    Returns:
        `dict`: `threshold` (`None` when no candidate could be certified: answer nothing),
        `alpha`, `delta`, `n` (calibration rows), `answered`, `coverage` (share of calibration rows answered),
        `risk` (their empirical error rate), `risk_upper_bound` (its Clopper-Pearson bound at level `1 - delta`) and
        `method` ([`RISK_CONTROL_METHOD`]).

    Raises:
        `ValueError`: on bad inputs (see [`~elical_hf.metrics.check_inputs`]) or `alpha` / `delta` outside (0, 1).
    """
    conf, y = check_inputs(confidences, correct)
    for name, value in (("alpha", alpha), ("delta", delta)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"`{name}` must lie in (0, 1), got {value!r}.")
    grid = np.round(np.arange(99, -1, -1) / 100, 2) if thresholds is None else np.asarray(thresholds, dtype=np.float64)
    grid = np.sort(grid.ravel())[::-1]
    if grid.size == 0 or not np.isfinite(grid).all():
        raise ValueError("`thresholds` must be a non-empty sequence of finite numbers.")
    order = np.argsort(-conf, kind="stable")
    sorted_conf, sorted_wrong = conf[order], 1 - y[order]
    errors_before = np.concatenate([[0], np.cumsum(sorted_wrong)])
    answered = np.searchsorted(-sorted_conf, -grid, side="right")  # rows with confidence >= t, for every t
    chosen: tuple[float, int, int] | None = None
    fewest = min_answered(alpha, delta)
    for t, n_t in zip(grid.tolist(), answered.tolist()):
        if n_t < fewest:  # no outcome could be certified here (see the module docstring)
            continue
        k_t = int(errors_before[n_t])
        if binomial_cdf(k_t, n_t, alpha) > delta:
            break
        chosen = (t, n_t, k_t)
    result: dict[str, Any] = {"threshold": None, "alpha": float(alpha), "delta": float(delta), "n": int(conf.size),
                              "answered": 0, "coverage": 0.0, "risk": math.nan, "risk_upper_bound": math.nan,
                              "method": RISK_CONTROL_METHOD}
    if chosen is not None:
        t, n_t, k_t = chosen
        result.update(threshold=t, answered=n_t, coverage=n_t / conf.size, risk=k_t / n_t,
                      risk_upper_bound=clopper_pearson_upper(k_t, n_t, delta))
    return result
