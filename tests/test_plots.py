from __future__ import annotations

import os

import matplotlib
import matplotlib.colors
import numpy as np
import pytest
from matplotlib.collections import LineCollection

from elical_hf.metrics.functional import aurc, ece, reliability_bins, risk_coverage_curve
from elical_hf.evaluation.plots import auroc_vs_labels_plot, reliability_diagram, risk_coverage_plot


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path) -> None:
    assert os.path.isfile(path) and os.path.getsize(path) > 0
    with open(path, "rb") as handle:
        assert handle.read(8) == PNG_MAGIC


def _data(seed: int, n: int = 300, sharp: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    conf = rng.random(n)
    conf[:3] = [0.0, 1.0, 1.0]  # edges must land in the first/last bin
    correct = (rng.random(n) < 0.5 + sharp * (conf - 0.5)).astype(int)
    return conf, correct


def _bars(ax, label: str) -> list:
    (container,) = [c for c in ax.containers if c.get_label() == label]
    return list(container)


def _histogram(ax) -> list[float]:
    (container,) = ax.containers
    return [bar.get_height() for bar in container]


def _legend(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def _line(ax, label: str):
    (line,) = [line for line in ax.lines if line.get_label() == label]
    return line


def _check_reliability_panel(top, bottom, conf, correct, n_bins: int) -> None:
    """The panel shows the numbers of `reliability_bins` and `ece`: bars, gaps, diagonal, legend, histogram."""
    bins = reliability_bins(conf, correct, n_bins=n_bins)
    full = bins["count"] > 0
    centers = (bins["bin_lower"] + bins["bin_upper"]) / 2
    accuracy = np.where(full, bins["accuracy"], 0.0)
    bars = _bars(top, "Accuracy")
    np.testing.assert_allclose([b.get_x() + b.get_width() / 2 for b in bars], centers)
    np.testing.assert_allclose([b.get_height() for b in bars], accuracy)
    gaps = _bars(top, "Gap to mean confidence")  # from the accuracy to the mean confidence, non-empty bins only
    np.testing.assert_allclose([b.get_y() for b in gaps], accuracy[full])
    np.testing.assert_allclose([b.get_y() + b.get_height() for b in gaps], bins["mean_confidence"][full])
    diagonal = _line(top, "Perfect calibration")
    assert list(diagonal.get_xdata()) == [0, 1] and list(diagonal.get_ydata()) == [0, 1]
    assert f"ECE = {ece(conf, correct, n_bins=n_bins):.3f}" in _legend(top)
    assert _histogram(bottom) == list(bins["count"]) and sum(_histogram(bottom)) == len(conf)
    assert bottom.get_xlabel() == "Confidence" and top.get_xlim() == bottom.get_xlim() == (0, 1)


def test_reliability_diagram_single_method(tmp_path):
    conf, correct = _data(0)
    backend = matplotlib.get_backend()
    out = reliability_diagram(conf, correct, tmp_path / "sub" / "rel.png", title="One method")
    assert out == str(tmp_path / "sub" / "rel.png")
    _assert_png(out)
    fig = reliability_diagram(conf, correct, None, title="One method")
    assert matplotlib.get_backend() == backend  # no global backend switch
    top, bottom = fig.axes
    _check_reliability_panel(top, bottom, conf, correct, n_bins=10)
    assert fig.get_suptitle() == "One method" and top.get_title() == ""
    assert (top.get_ylabel(), bottom.get_ylabel()) == ("Accuracy", "Count")


def test_reliability_diagram_several_methods(tmp_path):
    conf_a, correct = _data(1)
    conf_b = np.clip(conf_a * 0.5 + 0.4, 0, 1)
    shared = reliability_diagram({"EliCal": conf_a, "Verbal-0": conf_b}, correct, tmp_path / "two.png", n_bins=5)
    _assert_png(shared)
    fig = reliability_diagram({"EliCal": conf_a, "Verbal-0": conf_b}, correct, None, n_bins=5)
    top_a, bottom_a, top_b, bottom_b = fig.axes  # one column per method, in the dict's order
    assert (top_a.get_title(), top_b.get_title()) == ("EliCal", "Verbal-0")
    _check_reliability_panel(top_a, bottom_a, conf_a, correct, n_bins=5)
    _check_reliability_panel(top_b, bottom_b, conf_b, correct, n_bins=5)
    conf_c, correct_c = _data(2, n=50)
    per_method = reliability_diagram(
        {"A": conf_a, "C": conf_c}, {"A": correct, "C": correct_c}, tmp_path / "per.png"
    )
    _assert_png(per_method)
    fig = reliability_diagram({"A": conf_a, "C": conf_c}, {"A": correct, "C": correct_c}, None)
    _check_reliability_panel(*fig.axes[:2], conf_a, correct, n_bins=10)
    _check_reliability_panel(*fig.axes[2:], conf_c, correct_c, n_bins=10)


def test_reliability_diagram_errors(tmp_path):
    conf, correct = _data(3)
    with pytest.raises(ValueError, match=r"must end with \.png"):
        reliability_diagram(conf, correct, tmp_path / "rel.jpg")
    with pytest.raises(ValueError, match="same length"):
        reliability_diagram(conf, correct[:-1], tmp_path / "rel.png")
    with pytest.raises(ValueError, match="'B': .*must lie in"):
        reliability_diagram({"A": conf, "B": conf + 1}, correct, tmp_path / "rel.png")
    with pytest.raises(ValueError, match="same methods"):
        reliability_diagram({"A": conf}, {"B": correct}, tmp_path / "rel.png")
    with pytest.raises(ValueError, match="empty dict"):
        reliability_diagram({}, correct, tmp_path / "rel.png")
    with pytest.raises(ValueError, match="n_bins"):
        reliability_diagram(conf, correct, tmp_path / "rel.png", n_bins=0)
    assert not (tmp_path / "rel.png").exists()


def test_risk_coverage_plot(tmp_path):
    conf_a, correct = _data(4)
    conf_b, correct_b = _data(5, sharp=0.1)
    curves = {"sharp": (conf_a, correct), "weak": (conf_b, correct_b)}
    out = risk_coverage_plot(curves, tmp_path / "rc.png")
    _assert_png(out)
    (ax,) = risk_coverage_plot(curves, None).axes
    for method, (conf, y) in curves.items():
        line = _line(ax, f"{method} (AURC = {aurc(conf, y):.3f})")
        coverage, risk = risk_coverage_curve(conf, y)
        np.testing.assert_allclose(line.get_xdata(), coverage)
        np.testing.assert_allclose(line.get_ydata(), risk)
        (overall,) = [h for h in ax.lines if h.get_color() == line.get_color() and h.get_linestyle() == ":"]
        np.testing.assert_allclose(overall.get_ydata(), [1 - y.mean()] * 2)  # the error rate at full coverage
    assert "Random ranking (overall error rate)" in _legend(ax)
    assert ax.get_xlim() == (0, 1) and ax.get_ylim()[0] == 0
    with pytest.raises(ValueError, match="non-empty dict"):
        risk_coverage_plot({}, tmp_path / "rc.png")
    with pytest.raises(ValueError, match="pair"):
        risk_coverage_plot({"a": conf_a}, tmp_path / "rc.png")
    with pytest.raises(ValueError, match="'a': .*0/1"):
        risk_coverage_plot({"a": (conf_a, correct * 2)}, tmp_path / "rc.png")


def test_auroc_vs_labels_plot(tmp_path):
    results = {
        "EliCal": {10000: (0.86, 0.85, 0.87), 1000: {"auroc": 0.84, "auroc_ci_low": 0.82, "auroc_ci_high": 0.86}},
        "Cal-Only": {1000: 0.73, 10000: 0.80, 560000: {"auroc": 0.862, "low": 0.86, "high": 0.864}},
    }
    out = auroc_vs_labels_plot(results, tmp_path / "labels.png", baselines={"Consis-Sem": 0.736}, title="Qwen")
    _assert_png(out)
    (ax,) = auroc_vs_labels_plot(results, None, baselines={"Consis-Sem": 0.736}, title="Qwen").axes
    assert ax.get_xscale() == "log" and ax.get_title() == "Qwen" and ax.get_ylabel() == "AUROC x 100"
    expected = {"EliCal": ([1000, 10000], [84, 86], [(82, 86), (85, 87)]),
                "Cal-Only": ([1000, 10000, 560000], [73, 80, 86.2], [None, None, (86, 86.4)])}
    intervals = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(intervals) == 2
    for method, (n, auroc, cis) in expected.items():
        line = _line(ax, method)
        np.testing.assert_allclose(line.get_xdata(), n)  # sorted by number of labels
        np.testing.assert_allclose(line.get_ydata(), auroc)
        (bars,) = [c for c in intervals if np.allclose(c.get_colors()[0], matplotlib.colors.to_rgba(line.get_color()))]
        np.testing.assert_allclose(bars.get_segments(), [[(x, ci[0]), (x, ci[1])] for x, ci in zip(n, cis) if ci])
    (baseline,) = [h for h in ax.lines if h.get_linestyle() == "--"]
    np.testing.assert_allclose(baseline.get_ydata(), [73.6, 73.6])
    assert [text.get_text() for text in ax.texts] == ["Consis-Sem"]
    assert _legend(ax) == ["EliCal", "Cal-Only"]


@pytest.mark.parametrize(
    "results, match",
    [
        ({}, "non-empty dict"),
        ({"a": {}}, "non-empty dict"),
        ({"a": {0: 0.7}}, "positive numbers"),
        ({"a": {100: 1.7}}, r"in \[0, 1\]"),
        ({"a": {100: "high"}}, "must be numbers"),
        ({"a": {100: (0.7, 0.6)}}, r"\(auroc, ci_low, ci_high\)"),
        ({"a": {100: (0.7, 0.8, 0.6)}}, "ci_low <= ci_high"),
        ({"a": {100: {"auroc": 0.7, "auroc_ci_low": 0.6}}}, "ci_low <= ci_high"),
    ],
)
def test_auroc_vs_labels_plot_errors(tmp_path, results, match):
    with pytest.raises(ValueError, match=match):
        auroc_vs_labels_plot(results, tmp_path / "labels.png")


def test_auroc_vs_labels_plot_bad_baseline(tmp_path):
    with pytest.raises(ValueError, match="baseline 'x'"):
        auroc_vs_labels_plot({"a": {10: 0.6}}, tmp_path / "labels.png", baselines={"x": 2.0})
