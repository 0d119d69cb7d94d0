"""Thresholds with a guaranteed error rate among answered questions: the binomial tools, the two fixed sequences,
and the guarantee itself checked by simulation on a distribution whose selective risk is known in closed form
(every setting of `benchmarks/gate_guarantee.py`: tests/test_gate_guarantee.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elical_hf.metrics import (
    binomial_cdf, clopper_pearson_upper, min_answered, risk_controlling_threshold, select_threshold, selective_risk,
)
from elical_hf.metrics.risk_control import RISK_CONTROL_METHOD, certify, fixed_sequences, grid_counts


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


def test_sequences_start_where_enough_rows_are_answered():
    """The figures docs/gate.md quotes: at alpha = delta = 0.1, 0.07 from 26 answered rows and 0.03 from 102; at
    n = 200 the second start would answer more than half the rows: one sequence at 0.1 from 22 (earlier versions')."""
    (first, first_level), (second, second_level) = fixed_sequences(1000, 0.1, 0.1)
    assert (first, second) == (min_answered(0.1, 0.07), 3 * min_answered(0.1, 0.03)) == (26, 102)
    assert (first_level, second_level) == (pytest.approx(0.07), pytest.approx(0.03))
    assert [rows for rows, _ in fixed_sequences(204, 0.1, 0.1)] == [26, 102]
    assert fixed_sequences(200, 0.1, 0.1) == [(22, 0.1)] and min_answered(0.1, 0.1) == 22
    assert sum(level for _, level in fixed_sequences(1000, 0.05, 0.05)) == pytest.approx(0.05)


def test_an_early_error_no_longer_ends_everything():
    """Two errors among the 30 most confident of 1,000 rows end the single fixed sequence (its first test, at 22 rows,
    fails) and the first of the two (from 26 rows); the second, from 102 answered rows at 0.3 delta, certifies past
    them."""
    conf = np.round(np.linspace(0.999, 0.0, 1000), 4)
    correct = np.ones(1000, dtype=int)
    correct[[3, 17]] = 0
    correct[400:] = np.arange(600) % 2  # half wrong below 0.6
    grid, answered, errors = grid_counts(conf, correct)
    single = certify(answered, errors, 1000, 0.1, 0.1, sequences=[(min_answered(0.1, 0.1), 0.1)])["chosen"][0]
    result = risk_controlling_threshold(conf, correct, alpha=0.1, delta=0.1)
    assert single == -1 and result["threshold"] is not None and result["sequences"] == 2
    assert result["method"] == RISK_CONTROL_METHOD and "two fixed sequences" in result["method"]
    n_t, k_t = result["answered"], round(result["risk"] * result["answered"])
    assert result["risk_upper_bound"] == pytest.approx(clopper_pearson_upper(k_t, n_t, 0.03))  # its test's level
    below = selective_risk(conf, correct, round(result["threshold"] - 0.01, 2))
    assert binomial_cdf(k_t, n_t, 0.1) <= 0.03 < binomial_cdf(round(below["risk"] * below["answered"]),
                                                               below["answered"], 0.1)


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
    # one grid step lower the binomial test fails at the sequences' level (each sequence stops there)
    below = selective_risk(conf, correct, round(t - 0.01, 2))
    errors = round(below["risk"] * below["answered"])
    assert binomial_cdf(errors, below["answered"], 0.1) > 0.07  # the larger of the two levels
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
    assert np.mean(chosen < 1.0) > 0.8  # and not vacuous: a threshold is found in most draws (96% here)
    assert 0.15 < float(np.mean(1 - chosen)) < 0.3  # coverage approaches the best possible 30% from below


def test_risk_control_differs_from_the_alignment_threshold():
    rng = np.random.default_rng(3)
    conf = rng.uniform(size=1000)
    correct = (rng.uniform(size=1000) < conf).astype(int)
    assert risk_controlling_threshold(conf, correct, 0.1, 0.1)["threshold"] > select_threshold(conf, correct)


def test_scipy_binomial_and_clopper_pearson_match_exact_arithmetic():
    """`binomial_cdf` / `clopper_pearson_upper` are scipy's `binom.cdf` / `beta.ppf`: equal to the CDF summed in exact
    rational arithmetic, and the bound is where that exact CDF equals delta, on a grid of k, n, p and delta."""
    from fractions import Fraction

    for n in (1, 7, 22, 60, 300):
        for k in sorted({0, 1, n // 10, n // 3, n - 1}):
            for p in (Fraction(1, 100), Fraction(1, 10), Fraction(3, 10)):
                exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
                assert binomial_cdf(k, n, float(p)) == pytest.approx(float(exact), rel=1e-10, abs=1e-300)
            for delta in (0.01, 0.1, 0.2) if k < n else ():  # k = n: the bound is 1
                bound = clopper_pearson_upper(k, n, delta)
                exact_at_bound = sum(math.comb(n, i) * Fraction(bound) ** i * (1 - Fraction(bound)) ** (n - i)
                                     for i in range(k + 1))
                assert float(exact_at_bound) == pytest.approx(delta, rel=1e-8)


def _two_risk_grid(conf: np.ndarray, correct: np.ndarray, alpha: float, max_abstention: float) -> float:
    """The naive two-risk threshold: the lowest of GRID whose calibration error rate is <= alpha and whose
    calibration abstention rate is <= max_abstention (1.0 when none)."""
    answered, empirical = _risk_on_grid(conf, correct)
    ok = GRID[(empirical <= alpha) & (1 - answered / conf.size <= max_abstention)]
    return float(ok.min()) if ok.size else 1.0


TWO_RISKS = {"alpha": 0.15, "max_abstention": 0.8, "delta": 0.1}
"""With c ~ Uniform(0, 1) and P(correct | c) = c the error rate is (1 - t) / 2 and the abstention rate t, so these
bounds leave only thresholds in [0.7, 0.8]: both bind."""


def _two_risk_draws() -> dict[str, float]:
    """DRAWS calibration draws of the two-risk procedure and of the naive rule: the share of draws where a threshold
    is found, and where it is found and either true risk exceeds its bound."""
    alpha, max_abstention, delta = TWO_RISKS["alpha"], TWO_RISKS["max_abstention"], TWO_RISKS["delta"]
    rng = np.random.default_rng(77)
    chosen, naive = np.ones(DRAWS), np.ones(DRAWS)
    for draw in range(DRAWS):
        conf = rng.uniform(size=N_CALIBRATION)
        correct = (rng.uniform(size=N_CALIBRATION) < conf).astype(np.int64)
        result = risk_controlling_threshold(conf, correct, alpha, delta, max_abstention=max_abstention)
        if result["threshold"] is not None:
            chosen[draw] = result["threshold"]
            assert result["risk_upper_bound"] <= alpha and result["abstention_upper_bound"] <= max_abstention
            assert result["error_certified"] == result["threshold"] <= result["abstention_certified"]
        naive[draw] = _two_risk_grid(conf, correct, alpha, max_abstention)

    def failed(t: np.ndarray) -> float:
        return float(((t < 1.0) & ((_true_risk(t) > alpha) | (t > max_abstention))).mean())

    return {"found": float((chosen < 1.0).mean()), "failed": failed(chosen), "naive_found": float((naive < 1.0).mean()),
            "naive_failed": failed(naive)}


def test_two_risks_hold_together_by_simulation():
    """Error rate among answered <= alpha *and* abstention rate <= max_abstention, jointly with probability >= 1 -
    delta ([`TWO_RISKS`]: both bounds bind). The naive rule (the lowest threshold whose calibration error and
    abstention rates are within the bounds) fails in about half the draws, so the check can fail; the procedure still
    finds a threshold in a fair share of them."""
    shares = _two_risk_draws()
    assert shares["failed"] <= TWO_RISKS["delta"] + TOLERANCE, shares
    assert shares["naive_failed"] > 0.3, shares
    assert shares["found"] > 0.2, shares  # not vacuous (about a third of the draws here)


def test_two_risks_that_cannot_both_hold_say_what_each_reached():
    rng = np.random.default_rng(5)
    conf = rng.uniform(size=2000)
    correct = (rng.uniform(size=2000) < conf).astype(int)
    single = risk_controlling_threshold(conf, correct, alpha=0.15, delta=0.1)
    result = risk_controlling_threshold(conf, correct, alpha=0.15, delta=0.1, max_abstention=0.5)
    assert result["threshold"] is None and result["coverage"] == 0.0 and result["max_abstention"] == 0.5
    # the error family alone (at delta / 2) certifies ~0.8; the abstention family stops below 0.5
    assert result["error_certified"] >= single["threshold"] > 0.5 > result["abstention_certified"] > 0.4
    loose = risk_controlling_threshold(conf, correct, alpha=0.15, delta=0.1, max_abstention=0.95)
    assert loose["threshold"] == loose["error_certified"] >= single["threshold"]  # delta / 2 is a little stricter
    assert loose["abstention"] == pytest.approx(1 - loose["coverage"]) and loose["abstention_upper_bound"] <= 0.95
    with pytest.raises(ValueError, match="max_abstention"):
        risk_controlling_threshold(conf, correct, max_abstention=1.0)


def _mapie_threshold(conf: np.ndarray, correct: np.ndarray, alpha: float, delta: float, grid: np.ndarray,
                     fwer_method: str) -> tuple[float | None, np.ndarray]:
    """MAPIE's Learn-Then-Test on the same rows: precision of "answer when confidence >= t" at least 1 - alpha,
    i.e. the error rate among answered at most alpha; its chosen threshold and its p-values on `grid`."""
    import warnings

    from mapie.risk_control import BinaryClassificationController, precision

    controller = BinaryClassificationController(
        lambda x: np.stack([1 - x, x], axis=1), precision, target_level=1 - alpha, confidence_level=1 - delta,
        list_predict_params=grid, fwer_method=fwer_method)
    with warnings.catch_warnings():  # "the risk is not monotonic in the threshold": selective risk need not be
        warnings.simplefilter("ignore", UserWarning)
        controller.calibrate(conf, correct)
    return controller.best_predict_param, controller.p_values[:, 0]


def _mapie_comparison() -> dict[str, int]:
    """40 random calibration sets, each run through our Learn-Then-Test and MAPIE's (see
    [`test_our_learn_then_test_against_mapie`]): counts of what agrees, asserting the per-draw relations on the way."""
    rng = np.random.default_rng(0)
    full = np.round(np.arange(100) / 100, 2)
    equal = holm_lower = holm_higher = exact_p = tested = 0
    for _ in range(40):
        n = int(rng.integers(100, 1500))
        conf = np.round(rng.uniform(size=n), 4)
        correct = (rng.uniform(size=n) < conf ** rng.uniform(0.3, 2)).astype(int)
        alpha, delta = float(rng.choice([0.05, 0.1, 0.2, 0.3])), float(rng.choice([0.05, 0.1, 0.2]))
        answered = (conf[None, :] >= full[:, None]).sum(axis=1)
        grid = full[answered >= min_answered(alpha, delta)]
        ordered, counts, wrong = grid_counts(conf, correct, grid)  # earlier versions' single sequence, from the top
        single = certify(counts, wrong, n, alpha, delta, sequences=[(min_answered(alpha, delta), delta)])["chosen"][0]
        ours = None if single < 0 else float(ordered[single])
        theirs, p_values = _mapie_threshold(conf, correct, alpha, delta, grid, "fixed_sequence")
        for t, p in zip(grid, p_values):
            n_t, k_t = int((conf >= t).sum()), int((1 - correct[conf >= t]).sum())
            exact, rounded_up = binomial_cdf(k_t, n_t, alpha), binomial_cdf(k_t + 1, n_t, alpha)
            assert exact * (1 - 1e-9) <= p <= rounded_up * (1 + 1e-9)
            exact_p += p == pytest.approx(exact, rel=1e-9)
            tested += 1
        assert (theirs is None) if ours is None else (theirs is None or theirs >= ours)
        equal += theirs == ours
        ours_default = risk_controlling_threshold(conf, correct, alpha, delta)["threshold"]
        holm, _ = _mapie_threshold(conf, correct, alpha, delta, full, "bonferroni_holm")
        ours_default, holm = (1.0 if t is None else t for t in (ours_default, holm))  # 1.0: nothing certified
        holm_lower += holm < ours_default
        holm_higher += holm > ours_default
    return {"draws": 40, "equal": equal, "exact_p": exact_p, "tested": tested, "holm_higher": holm_higher,
            "holm_lower": holm_lower}


def test_our_learn_then_test_against_mapie():
    """MAPIE's `BinaryClassificationController` (risk `precision`, binary Hoeffding-Bentkus p-values) on the same
    rows, grid, alpha and delta (docs/gate.md, "Cross-check with MAPIE").

    With MAPIE's fixed-sequence testing over our grid (the thresholds answering at least `min_answered` rows, as our
    single sequence, the earlier procedure and building block, tests them) its p-value at every threshold is our exact binomial one, `P(Binomial(n_t, alpha) <= k_t)`, except
    where MAPIE's error count `ceil(n_t * (1 - precision))` rounds a float like 113.00000000000001 up to `k_t + 1`:
    then it is the smaller of that count's binomial p-value and the Hoeffding one, between ours and `k_t + 1`'s,
    never smaller than ours. So its threshold is never lower than ours, and equal in most draws. MAPIE's default,
    Bonferroni-Holm over all 100 thresholds, pays for the 100 tests and picks a higher threshold than our default (two
    fixed sequences) in most draws; it could be lower only where both our sequences stopped early."""
    counts = _mapie_comparison()
    assert counts["exact_p"] >= 0.6 * counts["tested"], counts  # most float counts are exact (81% here)
    assert counts["equal"] >= 28, counts  # 34 of 40 here; the rest differ only by MAPIE's rounded-up error counts
    assert counts["holm_higher"] >= 20 and counts["holm_lower"] <= 4, counts  # 31 and 0 here (9 equal)


if __name__ == "__main__":  # the simulation's figures quoted in docs/gate.md (the same draws as the test)
    rng = np.random.default_rng(1234)
    thresholds, single = [], []
    for _ in range(DRAWS):
        conf = rng.uniform(size=N_CALIBRATION)
        correct = (rng.uniform(size=N_CALIBRATION) < conf).astype(np.int64)
        t = risk_controlling_threshold(conf, correct, alpha=0.15, delta=0.1)["threshold"]
        thresholds.append(1.0 if t is None else t)
        _, counts, wrong = grid_counts(conf, correct)  # earlier versions' single fixed sequence, on the same draws
        index = certify(counts, wrong, N_CALIBRATION, 0.15, 0.1, sequences=[(min_answered(0.15, 0.1), 0.1)])
        single.append(1.0 if index["chosen"][0] < 0 else float(GRID[index["chosen"][0]]))
        rng.uniform(size=N_TEST), rng.uniform(size=N_TEST)  # the test set of the test, drawn in the same order
    for name, chosen in (("", np.asarray(thresholds)), ("Single fixed sequence: ", np.asarray(single))):
        print(f"{name}{DRAWS} draws of {N_CALIBRATION} calibration questions, alpha 0.15, delta 0.1: risk > alpha in "
              f"{np.mean(_true_risk(chosen) > 0.15):.3f} of draws; a threshold found in {np.mean(chosen < 1):.3f}; "
              f"mean coverage {np.mean(1 - chosen):.3f} (best possible 0.300)")
    shares = _two_risk_draws()
    print(f"Two risks, {DRAWS} draws, alpha {TWO_RISKS['alpha']}, max_abstention {TWO_RISKS['max_abstention']}, "
          f"delta {TWO_RISKS['delta']}: a threshold found in {shares['found']:.3f} of draws, either risk above its "
          f"bound in {shares['failed']:.3f}; the naive rule found one in {shares['naive_found']:.3f}, failed in "
          f"{shares['naive_failed']:.3f}")
    counts = _mapie_comparison()
    print(f"MAPIE, {counts['draws']} calibration sets: fixed-sequence threshold equal to ours in {counts['equal']}, "
          f"p-values equal to ours at {counts['exact_p']} of {counts['tested']} thresholds; Bonferroni-Holm higher "
          f"than ours in {counts['holm_higher']}, lower in {counts['holm_lower']}")
