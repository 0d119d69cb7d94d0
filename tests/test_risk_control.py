"""Thresholds with a guaranteed error rate among answered questions: the binomial tools, and the guarantee itself
checked by simulation on a distribution whose selective risk is known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elical_hf.metrics import (
    binomial_cdf, clopper_pearson_upper, min_answered, risk_controlling_threshold, select_threshold, selective_risk,
)


def test_binomial_cdf_matches_the_exact_sum():
    for n, p in ((1, 0.3), (17, 0.1), (200, 0.07)):
        for k in (0, 1, n // 3, n - 1, n):
            exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
            assert binomial_cdf(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-300)
    assert binomial_cdf(-1, 5, 0.5) == 0.0 and binomial_cdf(0, 0, 0.5) == 1.0


def test_clopper_pearson_upper_is_where_the_tail_equals_delta():
    bound = clopper_pearson_upper(3, 50, 0.1)
    assert binomial_cdf(3, 50, bound) == pytest.approx(0.1, abs=1e-9)
    assert 3 / 50 < bound < clopper_pearson_upper(3, 50, 0.01)  # a smaller delta gives a wider bound
    assert clopper_pearson_upper(0, 0, 0.1) == 1.0


def test_min_answered_is_the_first_count_that_can_be_certified():
    n = min_answered(0.1, 0.1)
    assert (0.9**n <= 0.1) and (0.9 ** (n - 1) > 0.1)


def test_threshold_answers_the_most_questions_it_can_certify():
    rng = np.random.default_rng(0)
    conf = rng.uniform(size=2000)
    correct = (rng.uniform(size=2000) < conf).astype(int)
    result = risk_controlling_threshold(conf, correct, alpha=0.1, delta=0.1)
    t = result["threshold"]
    assert t is not None and result["risk_upper_bound"] <= 0.1
    measured = selective_risk(conf, correct, t)
    assert result["coverage"] == measured["coverage"] and result["risk"] == pytest.approx(measured["risk"])
    assert result["n"] == 2000 and result["alpha"] == 0.1 and result["delta"] == 0.1
    # one grid step lower the binomial test fails (fixed-sequence testing stops there)
    below = selective_risk(conf, correct, round(t - 0.01, 2))
    errors = round(below["risk"] * below["answered"])
    assert binomial_cdf(errors, below["answered"], 0.1) > 0.1
    # a looser alpha answers more
    assert risk_controlling_threshold(conf, correct, alpha=0.2, delta=0.1)["coverage"] > result["coverage"]


def test_nothing_certifiable_gives_no_threshold():
    result = risk_controlling_threshold([0.9] * 10 + [0.2] * 10, [1] * 10 + [0] * 10, alpha=0.1, delta=0.1)
    assert result["threshold"] is None and result["coverage"] == 0.0  # 10 answered rows cannot certify 10%


@pytest.mark.parametrize("alpha, delta", [(0.0, 0.1), (0.1, 1.0), (-0.2, 0.5)])
def test_bad_levels_are_refused(alpha, delta):
    with pytest.raises(ValueError, match="must lie in"):
        risk_controlling_threshold([0.5, 0.6], [1, 0], alpha=alpha, delta=delta)


def _true_risk(t: np.ndarray) -> np.ndarray:
    """Selective risk of "answer when c >= t" when c ~ Uniform(0, 1) and P(correct | c) = c:
    P(wrong | c >= t) = (1 - t) / 2 (so alpha = 0.15 is reached at t = 0.7, answering 30%)."""
    return (1 - np.asarray(t, dtype=np.float64)) / 2


DRAWS, N_CALIBRATION, N_TEST = 800, 1000, 2000
TOLERANCE = 0.032
"""Three binomial standard deviations of a share estimated from DRAWS draws at delta = 0.1 (sqrt(0.09 / 800) = 0.0106)."""
GRID = np.round(np.arange(99, -1, -1) / 100, 2)


def _risk_on_grid(conf: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Answered rows and their error rate at every threshold of GRID (NaN where none is answered)."""
    order = np.argsort(-conf)
    errors = np.concatenate([[0], np.cumsum(1 - correct[order])])
    answered = np.searchsorted(-conf[order], -GRID, side="right")
    with np.errstate(invalid="ignore"):
        return answered, errors[answered] / answered


def test_guarantee_holds_by_simulation():
    """Over many calibration / test draws, the share of draws whose test risk at the chosen threshold exceeds alpha is
    at most delta + TOLERANCE. The test risk is measured twice: exactly (the test distribution's selective risk, in
    closed form) and on a fresh test set of N_TEST questions, which adds that set's own sampling noise: there a draw
    counts as exceeding when the test error rate is above alpha by more than 3.3 binomial standard deviations of
    that noise. A naive threshold (the lowest whose calibration error rate is <= alpha) fails far more often, so the
    check can fail."""
    alpha, delta = 0.15, 0.1
    rng = np.random.default_rng(1234)
    chosen, naive, finite_exceeds = np.ones(DRAWS), np.ones(DRAWS), 0
    for draw in range(DRAWS):
        conf = rng.uniform(size=N_CALIBRATION)
        correct = (rng.uniform(size=N_CALIBRATION) < conf).astype(np.int64)
        t = risk_controlling_threshold(conf, correct, alpha=alpha, delta=delta)["threshold"]
        chosen[draw] = 1.0 if t is None else t
        _, empirical = _risk_on_grid(conf, correct)
        ok = GRID[empirical <= alpha]
        naive[draw] = ok.min() if ok.size else 1.0
        test_conf = rng.uniform(size=N_TEST)
        test_correct = (rng.uniform(size=N_TEST) < test_conf).astype(np.int64)
        answered = test_conf >= chosen[draw]
        if answered.any():
            noise = math.sqrt(alpha * (1 - alpha) / answered.sum())
            finite_exceeds += (1 - test_correct[answered].mean()) > alpha + 3.3 * noise
    exceeded = float(np.mean(_true_risk(chosen) > alpha))
    assert exceeded <= delta + TOLERANCE, exceeded
    assert finite_exceeds / DRAWS <= delta + TOLERANCE
    assert float(np.mean(_true_risk(naive) > alpha)) > 0.3  # without the bound the rate is not controlled
    assert np.mean(chosen < 1.0) > 0.8  # and not vacuous: a threshold is found in most draws (85% here)
    assert 0.15 < float(np.mean(1 - chosen)) < 0.3  # coverage approaches the best possible 30% from below


def test_risk_control_differs_from_the_alignment_threshold():
    rng = np.random.default_rng(3)
    conf = rng.uniform(size=1000)
    correct = (rng.uniform(size=1000) < conf).astype(int)
    assert risk_controlling_threshold(conf, correct, 0.1, 0.1)["threshold"] > select_threshold(conf, correct)


if __name__ == "__main__":  # the simulation's figures quoted in docs/gate.md (the same draws as the test)
    rng = np.random.default_rng(1234)
    thresholds = []
    for _ in range(DRAWS):
        conf = rng.uniform(size=N_CALIBRATION)
        correct = (rng.uniform(size=N_CALIBRATION) < conf).astype(np.int64)
        t = risk_controlling_threshold(conf, correct, alpha=0.15, delta=0.1)["threshold"]
        thresholds.append(1.0 if t is None else t)
        rng.uniform(size=N_TEST), rng.uniform(size=N_TEST)  # the test set of the test, drawn in the same order
    thresholds = np.asarray(thresholds)
    print(f"{DRAWS} draws of {N_CALIBRATION} calibration questions, alpha 0.15, delta 0.1: risk > alpha in "
          f"{np.mean(_true_risk(thresholds) > 0.15):.3f} of draws; a threshold found in {np.mean(thresholds < 1):.3f}; "
          f"mean coverage {np.mean(1 - thresholds):.3f} (best possible 0.300)")
