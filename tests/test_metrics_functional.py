from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, roc_auc_score

from elical_hf.metrics import (
    METRICS,
    alignment,
    auprc,
    aurc,
    auroc,
    bootstrap_ci,
    bootstrap_indices,
    brier,
    check_inputs,
    compute_all,
    ece,
    prr,
    reliability_bins,
    risk_coverage_curve,
)


def _random_data(seed: int, n: int = 500, decimals: int | None = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    conf = rng.random(n)
    if decimals is not None:
        conf = np.round(conf, decimals)
    correct = (rng.random(n) < 0.3 + 0.4 * conf).astype(int)
    return conf, correct


def _loop_ece(conf, correct, n_bins):
    total = 0.0
    for i in range(n_bins):
        lo, hi = i / n_bins, (i + 1) / n_bins
        members = [j for j, c in enumerate(conf) if lo <= c < hi or (i == n_bins - 1 and c == hi)]
        if members:
            mean_conf = sum(conf[j] for j in members) / len(members)
            acc = sum(correct[j] for j in members) / len(members)
            total += len(members) / len(conf) * abs(mean_conf - acc)
    return total


confidence_lists = st.lists(st.integers(0, 20).map(lambda v: v / 20), min_size=2, max_size=60)


# ----------------------------------------------------------------------------------------------------------- auroc


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("decimals", [None, 2, 1, 0])
def test_auroc_matches_sklearn_with_ties(seed, decimals):
    conf, correct = _random_data(seed, n=300 + 97 * seed, decimals=decimals)
    assert auroc(conf, correct) == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)


def test_auroc_bool_labels_and_lists():
    assert auroc([0.1, 0.9, 0.5, 0.5], [False, True, True, False]) == pytest.approx(0.875, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(confidence_lists, st.data())
def test_auroc_invariant_under_monotone_transforms(conf, data):
    correct = data.draw(st.lists(st.integers(0, 1), min_size=len(conf), max_size=len(conf)))
    if len(set(correct)) < 2:
        return
    conf = np.array(conf)
    base = auroc(conf, correct)
    assert base == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)
    assert auroc(conf**2, correct) == pytest.approx(base, abs=1e-12)
    assert auroc(np.sqrt(conf), correct) == pytest.approx(base, abs=1e-12)
    assert auroc(0.1 + 0.5 * conf, correct) == pytest.approx(base, abs=1e-12)


@pytest.mark.parametrize("label", [0, 1])
def test_auroc_single_class_is_nan_with_warning(label):
    with pytest.warns(UserWarning, match="AUROC is undefined when only one class is present"):
        assert np.isnan(auroc([0.2, 0.4, 0.9], [label] * 3))


def test_auroc_exact_on_a_million_points():
    # Speed is measured by benchmarks/metrics_speed.py, not asserted here.
    conf, correct = _random_data(0, n=1_000_000, decimals=3)
    assert auroc(conf, correct) == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)


# ------------------------------------------------------------------------------------------------------------- ece


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n_bins", [1, 3, 10, 15])
def test_ece_matches_loop_implementation(seed, n_bins):
    conf, correct = _random_data(seed, n=200, decimals=1 if seed % 2 else None)
    conf[:3] = [0.0, 1.0, 0.3]  # edges: 0, 1 and an exact interior bin boundary
    assert ece(conf, correct, n_bins=n_bins) == pytest.approx(_loop_ece(conf, correct, n_bins), abs=1e-12)


def test_ece_zero_for_perfectly_calibrated_bins():
    conf = [0.25] * 4 + [0.75] * 4 + [0.05] * 20
    correct = [1, 0, 0, 0] + [1, 1, 1, 0] + [1] + [0] * 19
    assert ece(conf, correct) == pytest.approx(0.0, abs=1e-12)


def test_ece_counts_confidence_one():
    assert ece([1.0] * 6, [1] * 6) == pytest.approx(0.0, abs=1e-15)
    assert ece([1.0] * 6, [1, 0] * 3) == pytest.approx(0.5, abs=1e-15)
    bins = reliability_bins([1.0, 0.95, 0.0], [1, 1, 0], n_bins=10)
    assert bins["count"].tolist() == [1] + [0] * 8 + [2]
    assert bins["count"].sum() == 3


def test_reliability_bins_uniform_layout():
    bins = reliability_bins([0.1, 0.15, 0.55], [1, 0, 1], n_bins=4)
    np.testing.assert_allclose(bins["bin_lower"], [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(bins["bin_upper"], [0.25, 0.5, 0.75, 1.0])
    assert bins["count"].tolist() == [2, 0, 1, 0]
    np.testing.assert_allclose(bins["mean_confidence"], [0.125, np.nan, 0.55, np.nan])
    np.testing.assert_allclose(bins["accuracy"], [0.5, np.nan, 1.0, np.nan])


def test_quantile_strategy():
    conf, correct = _random_data(3, n=103, decimals=None)
    bins = reliability_bins(conf, correct, n_bins=10, strategy="quantile")
    assert bins["count"].tolist() == [11, 11, 11] + [10] * 7
    assert np.all(bins["bin_lower"] <= bins["bin_upper"])
    assert np.all(bins["bin_upper"][:-1] <= bins["bin_lower"][1:])
    assert bins["bin_lower"][0] == conf.min() and bins["bin_upper"][-1] == conf.max()
    # loop reference on the sorted groups
    order = np.argsort(conf, kind="stable")
    expected = sum(len(g) / len(conf) * abs(conf[g].mean() - correct[g].mean()) for g in np.array_split(order, 10))
    assert ece(conf, correct, n_bins=10, strategy="quantile") == pytest.approx(expected, abs=1e-12)
    # one bin: |mean conf - accuracy|, same for both strategies
    one = abs(conf.mean() - correct.mean())
    assert ece(conf, correct, n_bins=1, strategy="quantile") == pytest.approx(one, abs=1e-12)
    assert ece(conf, correct, n_bins=1) == pytest.approx(one, abs=1e-12)
    # more bins than points: empty bins are ignored; each point alone gives mean |conf - correct|
    few = reliability_bins([0.2, 0.2, 0.9], [0, 1, 1], n_bins=5, strategy="quantile")
    assert few["count"].tolist() == [1, 1, 1, 0, 0]
    assert np.isnan(few["bin_lower"][-1])
    assert ece([0.2, 0.2, 0.9], [0, 1, 1], n_bins=5, strategy="quantile") == pytest.approx((0.2 + 0.8 + 0.1) / 3)


def test_reference_binning_drops_confidence_one_but_counts_it_in_n():
    # 10 rows: six at 1.0 (three right) and four at 0.55 (two right). The 0.55 bin contributes 4/10 * |0.55 - 0.5|.
    conf, correct = [1.0] * 6 + [0.55] * 4, [1, 1, 1, 0, 0, 0, 1, 1, 0, 0]
    assert ece(conf, correct, strategy="reference") == pytest.approx(0.02, abs=1e-12)  # the 1.0 rows are skipped
    assert ece(conf, correct) == pytest.approx(0.02 + 6 / 10 * 0.5, abs=1e-12)  # 0.32: they form the last bin
    bins = reliability_bins(conf, correct, strategy="reference")
    assert bins["count"].tolist() == [0] * 5 + [4] + [0] * 4  # sums to 4 of the 10 rows
    np.testing.assert_allclose(bins["bin_lower"], np.arange(10) / 10)
    assert ece([1.0] * 6, [0] * 6, strategy="reference") == 0.0  # nothing binned at all


def test_reference_binning_puts_some_edges_in_the_bin_below():
    # linspace(0, 1, 11) holds 0.30000000000000004, 0.6000000000000001, 0.7000000000000001 but exactly 0.2 and 0.5
    conf, correct = [0.2, 0.3, 0.5, 0.6, 0.65, 0.7], [0, 1, 0, 1, 1, 0]
    bins = reliability_bins(conf, correct, strategy="reference")
    assert bins["count"].tolist() == [0, 0, 2, 0, 0, 2, 2, 0, 0, 0]  # {0.2, 0.3}, {0.5, 0.6}, {0.65, 0.7}
    # each pair has accuracy 0.5: |0.25 - 0.5| + |0.55 - 0.5| + |0.675 - 0.5|, each weighted 2/6
    assert ece(conf, correct, strategy="reference") == pytest.approx((0.25 + 0.05 + 0.175) * 2 / 6, abs=1e-12)
    # equal width: {0.2}, {0.3}, {0.5}, {0.6, 0.65}, {0.7} -> (0.2 + 0.7 + 0.5 + 2 * 0.375 + 0.7) / 6
    assert reliability_bins(conf, correct)["count"].tolist() == [0, 0, 1, 1, 0, 1, 2, 1, 0, 0]
    assert ece(conf, correct) == pytest.approx(2.85 / 6, abs=1e-12)


# ------------------------------------------------------------------------------------------------- brier, auprc


def test_brier():
    assert brier([1.0, 0.0, 0.5, 0.8], [1, 0, 1, 0]) == pytest.approx((0 + 0 + 0.25 + 0.64) / 4)
    conf, correct = _random_data(5)
    assert brier(conf, correct) == pytest.approx(np.mean((conf - correct) ** 2))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("decimals", [None, 1])
def test_auprc_matches_sklearn(seed, decimals):
    conf, correct = _random_data(seed, n=400, decimals=decimals)
    assert auprc(conf, correct) == pytest.approx(average_precision_score(correct, conf), abs=1e-12)
    expected_err = average_precision_score(1 - correct, 1 - conf)
    assert auprc(conf, correct, positive="error") == pytest.approx(expected_err, abs=1e-12)


def test_auprc_without_positives_warns():
    with pytest.warns(UserWarning, match="AUPRC is undefined"):
        assert np.isnan(auprc([0.3, 0.6], [1, 1], positive="error"))


# ----------------------------------------------------------------------------------------------------- alignment


def test_alignment_hand_built():
    # calibration prefix (first 4 rows of 10): threshold 0.5 separates perfectly; 0.41..0.6 all tie, 0.41 is the smallest
    conf = [0.3, 0.4, 0.6, 0.7] + [0.2, 0.45, 0.8, 0.9, 0.35, 0.65]
    correct = [0, 0, 1, 1] + [0, 1, 1, 0, 0, 1]
    out = alignment(conf, correct, calibration_fraction=0.4)
    assert out["threshold"] == pytest.approx(0.41)
    # eval rows with t=0.41: preds 0,1,1,1,0,1 vs 0,1,1,0,0,1 -> 5/6
    assert out["alignment"] == pytest.approx(500 / 6)
    assert set(out) == {"alignment", "threshold"}


def test_alignment_tie_breaks_to_smallest_threshold():
    conf = [0.2, 0.8, 0.5, 0.5]
    correct = [0, 1, 0, 1]
    out = alignment(conf, correct, calibration_fraction=0.5, thresholds=[0.7, 0.3, 0.5])
    # on the prefix every threshold in (0.2, 0.8] is perfect -> 0.3 wins; 0.5 >= 0.3 predicts 1 for both eval rows
    assert out["threshold"] == 0.3
    assert out["alignment"] == pytest.approx(50.0)


def test_alignment_skips_degenerate_thresholds_and_falls_back():
    # prefix is all wrong with conf 0.9: thresholds <= 0.9 predict all 1, > 0.9 all 0 -> nothing valid -> 0.5
    out = alignment([0.9, 0.9, 0.1, 0.7], [0, 0, 0, 1], calibration_fraction=0.5)
    assert out["threshold"] == 0.5
    assert out["alignment"] == pytest.approx(100.0)
    # degenerate-but-accurate thresholds are skipped: prefix all wrong, but 0.99 (predicts all 0) would be perfect
    out = alignment([0.3, 0.6, 0.5], [0, 0, 1], calibration_fraction=0.67)
    assert out["threshold"] == pytest.approx(0.31)  # only (0.3, 0.6] are valid, each 1/2 accurate -> smallest
    # empty prefix falls back to 0.5
    out = alignment([0.4, 0.6], [0, 1], calibration_fraction=0.2)
    assert out == {"alignment": 100.0, "threshold": 0.5}


def test_alignment_shuffle_seed():
    conf, correct = _random_data(7, n=200, decimals=2)
    perm = np.random.default_rng(3).permutation(200)
    assert alignment(conf, correct, shuffle_seed=3) == alignment(conf[perm], correct[perm])
    assert alignment(conf, correct, shuffle_seed=3) == alignment(conf, correct, shuffle_seed=3)


def test_alignment_matches_brute_force():
    conf, correct = _random_data(11, n=250, decimals=2)
    k = int(0.2 * 250)
    best_t, best_acc = 0.5, -1.0
    for t in np.round(np.arange(1, 100) / 100, 2):
        pred = conf[:k] >= t
        if pred.all() or not pred.any():
            continue
        acc = np.mean(pred == correct[:k])
        if acc > best_acc:
            best_t, best_acc = t, acc
    out = alignment(conf, correct)
    assert out["threshold"] == best_t
    assert out["alignment"] == pytest.approx(100 * np.mean((conf[k:] >= best_t) == correct[k:]))


# -------------------------------------------------------------------------------------------------- aurc, prr


def test_risk_coverage_curve_and_aurc():
    coverage, risk = risk_coverage_curve([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0])
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0, 1 / 2, 1 / 3, 2 / 4])
    assert aurc([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0]) == pytest.approx((0 + 0.5 + 1 / 3 + 0.5) / 4)


def test_aurc_ties_are_one_group():
    # all tied: risk is the overall error rate at every coverage, whatever the row order
    _, risk = risk_coverage_curve([0.5] * 4, [1, 0, 0, 1])
    np.testing.assert_allclose(risk, [0.5] * 4)
    a = aurc([0.9, 0.5, 0.5, 0.1], [1, 0, 1, 0])
    b = aurc([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0])
    assert a == pytest.approx(b)


def test_prr_oracle_random_and_reversed():
    rng = np.random.default_rng(0)
    correct = (rng.random(4000) < 0.6).astype(int)
    oracle = np.where(correct == 1, 0.9, 0.1)
    assert prr(oracle, correct) == pytest.approx(1.0)
    assert prr(1 - oracle, correct) < -0.9
    assert abs(prr(rng.random(4000), correct)) < 0.1
    assert prr([0.5] * 10, [1, 0] * 5) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("label", [0, 1])
def test_prr_undefined(label):
    with pytest.warns(UserWarning, match="PRR is undefined"):
        assert np.isnan(prr([0.2, 0.8], [label, label]))


# ---------------------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_contains_point_and_is_deterministic():
    conf, correct = _random_data(1, n=300, decimals=2)
    out = bootstrap_ci(auroc, conf, correct, n_resamples=200, seed=4)
    assert set(out) == {"low", "high", "point"}
    assert out["point"] == auroc(conf, correct)
    assert out["low"] <= out["point"] <= out["high"]
    assert out == bootstrap_ci(auroc, conf, correct, n_resamples=200, seed=4)
    assert out != bootstrap_ci(auroc, conf, correct, n_resamples=200, seed=5)
    wide = bootstrap_ci(brier, conf, correct, n_resamples=200, confidence_level=0.99)
    narrow = bootstrap_ci(brier, conf, correct, n_resamples=200, confidence_level=0.5)
    assert wide["low"] <= narrow["low"] <= narrow["high"] <= wide["high"]


def test_bootstrap_indices_resample_the_threshold_rows_apart():
    rng = np.random.default_rng(0)
    split = bootstrap_indices(50, 300, rng, calibration_fraction=0.2)  # alignment's first 10 rows choose the threshold
    assert split.shape == (300, 50)
    assert set(split[:, :10].ravel()) == set(range(10)) and set(split[:, 10:].ravel()) == set(range(10, 50))
    together = bootstrap_indices(50, 300, rng)
    assert together.shape == (300, 50) and together[:, :10].max() >= 10 and set(together.ravel()) == set(range(50))
    assert bootstrap_indices(4, 3, rng, calibration_fraction=0.2).shape == (3, 4)  # no threshold row: one part
    with pytest.raises(ValueError, match="at least one of the 4 rows"):
        bootstrap_indices(4, 3, rng, calibration_fraction=1.0)


def test_bootstrap_ci_of_alignment_keeps_the_threshold_rows_apart():
    conf, correct = _random_data(2, n=200)
    fn = lambda c, y: alignment(c, y)["alignment"]  # noqa: E731
    apart = bootstrap_ci(fn, conf, correct, n_resamples=100, seed=1, calibration_fraction=0.2)
    rng = np.random.default_rng(1)
    expected = [fn(conf[rows], correct[rows]) for rows in bootstrap_indices(200, 100, rng, calibration_fraction=0.2)]
    assert [apart["low"], apart["high"]] == pytest.approx(np.percentile(expected, [2.5, 97.5]))
    assert apart != bootstrap_ci(fn, conf, correct, n_resamples=100, seed=1)


def test_bootstrap_ci_skips_nan_resamples_silently():
    conf = [0.9, 0.2, 0.8, 0.7, 0.6]
    correct = [1, 0, 1, 1, 1]  # many resamples contain only correct rows
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = bootstrap_ci(auroc, conf, correct, n_resamples=100)
    assert 0.0 <= out["low"] <= out["high"] <= 1.0


# ------------------------------------------------------------------------------------------- registry, compute_all


def test_metrics_registry_and_compute_all():
    conf, correct = _random_data(2, n=300, decimals=2)
    assert set(METRICS) == {"auroc", "ece", "brier", "auprc", "aurc", "prr"}
    for fn in METRICS.values():
        assert isinstance(fn(conf, correct), float)
    out = compute_all(conf, correct)
    assert set(out) == {"auroc", "ece", "brier", "alignment", "threshold"}
    assert all(isinstance(v, float) for v in out.values())
    assert out["auroc"] == auroc(conf, correct) and out["ece"] == ece(conf, correct)
    assert out["alignment"] == alignment(conf, correct)["alignment"]


# ------------------------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("conf", "correct", "match"),
    [
        ([0.1, 0.2], [1], "same length"),
        ([], [], "non-empty"),
        ([0.1, float("nan")], [1, 0], "finite"),
        ([0.1, float("inf")], [1, 0], "finite"),
        ([0.1, 1.2], [1, 0], r"lie in \[0, 1\]"),
        ([-0.1, 0.2], [1, 0], r"lie in \[0, 1\]"),
        ([0.1, 0.2], [1, 2], "only 0/1"),
        ([0.1, 0.2], [1, 0.5], "only 0/1"),
        ([0.1, 0.2], ["a", "b"], "only 0/1"),
        (["x", 0.2], [1, 0], "numeric"),
        ([[0.1, 0.2]], [[1, 0]], "1-D"),
    ],
)
@pytest.mark.parametrize("fn", [auroc, ece, brier, auprc, aurc, prr, alignment, reliability_bins, compute_all])
def test_bad_inputs_raise(conf, correct, match, fn):
    with pytest.raises(ValueError, match=match):
        fn(conf, correct)


def test_check_inputs_converts():
    conf, correct = check_inputs([0, 1], [True, False])
    assert conf.dtype == np.float64 and correct.dtype == np.int64
    assert correct.tolist() == [1, 0]


@pytest.mark.parametrize(("kwargs", "match"), [({"n_bins": 0}, "n_bins"), ({"n_bins": 2.5}, "n_bins"),
                                               ({"strategy": "equal"}, "strategy")])
def test_bad_binning_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ece([0.1, 0.2], [1, 0], **kwargs)
    with pytest.raises(ValueError, match=match):
        reliability_bins([0.1, 0.2], [1, 0], **kwargs)


def test_bad_options_raise():
    with pytest.raises(ValueError, match="positive must be"):
        auprc([0.1, 0.2], [1, 0], positive="wrong")
    with pytest.raises(ValueError, match="at least one evaluation row"):
        alignment([0.1, 0.2], [1, 0], calibration_fraction=1.0)
    with pytest.raises(ValueError, match="calibration_fraction must lie"):
        alignment([0.1, 0.2], [1, 0], calibration_fraction=-0.1)
    with pytest.raises(ValueError, match="thresholds must be"):
        alignment([0.1, 0.2], [1, 0], thresholds=[])
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci(auroc, [0.1, 0.2], [1, 0], n_resamples=0)
    with pytest.raises(ValueError, match="confidence_level"):
        bootstrap_ci(auroc, [0.1, 0.2], [1, 0], confidence_level=1.0)
    with pytest.raises(ValueError, match="same length"):
        bootstrap_ci(auroc, [0.1, 0.2], [1])
