from __future__ import annotations

import os

import matplotlib
import numpy as np
import pytest

from elical_hf.plots import auroc_vs_labels_plot, reliability_diagram, risk_coverage_plot


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


def test_reliability_diagram_single_method(tmp_path):
    conf, correct = _data(0)
    backend = matplotlib.get_backend()
    out = reliability_diagram(conf, correct, tmp_path / "sub" / "rel.png", title="One method")
    assert out == str(tmp_path / "sub" / "rel.png")
    _assert_png(out)
    assert matplotlib.get_backend() == backend  # no global backend switch


def test_reliability_diagram_several_methods(tmp_path):
    conf_a, correct = _data(1)
    conf_b = np.clip(conf_a * 0.5 + 0.4, 0, 1)
    shared = reliability_diagram({"EliCal": conf_a, "Verbal-0": conf_b}, correct, tmp_path / "two.png", n_bins=5)
    _assert_png(shared)
    conf_c, correct_c = _data(2, n=50)
    per_method = reliability_diagram(
        {"A": conf_a, "C": conf_c}, {"A": correct, "C": correct_c}, tmp_path / "per.png"
    )
    _assert_png(per_method)


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
    out = risk_coverage_plot({"sharp": (conf_a, correct), "weak": (conf_b, correct_b)}, tmp_path / "rc.png")
    _assert_png(out)
    with pytest.raises(ValueError, match="non-empty dict"):
        risk_coverage_plot({}, tmp_path / "rc.png")
    with pytest.raises(ValueError, match="pair"):
        risk_coverage_plot({"a": conf_a}, tmp_path / "rc.png")
    with pytest.raises(ValueError, match="'a': .*0/1"):
        risk_coverage_plot({"a": (conf_a, correct * 2)}, tmp_path / "rc.png")


def test_auroc_vs_labels_plot(tmp_path):
    results = {
        "EliCal": {1000: {"auroc": 0.84, "auroc_ci_low": 0.82, "auroc_ci_high": 0.86}, 10000: (0.86, 0.85, 0.87)},
        "Cal-Only": {1000: 0.73, 10000: 0.80, 560000: {"auroc": 0.862, "low": 0.86, "high": 0.864}},
    }
    out = auroc_vs_labels_plot(results, tmp_path / "labels.png", baselines={"Consis-Sem": 0.736}, title="Qwen")
    _assert_png(out)


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
