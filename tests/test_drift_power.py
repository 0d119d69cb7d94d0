"""What `elical-hf monitor`'s test can claim (`elical_hf.evaluation.drift`): each distinct question counts once, so repeated
questions raise no false alarms beyond its level (a simulation); its power at the sizes given; what checks on a
schedule risk together. The numbers the monitor section of docs/gate.md quotes are recomputed here."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

from elical_hf.evaluation.drift import (
    confidence_drift, detection_power, distinct_confidences, first_rows, scheduled_checks,
)


LEVEL, TRIALS = 0.05, 400
SLACK = 3 * (LEVEL * (1 - LEVEL) / TRIALS) ** 0.5
"""Three Monte-Carlo standard errors of a false-alarm rate of `LEVEL` over `TRIALS` draws (0.033)."""
GATE = Path(__file__).resolve().parents[1] / "docs" / "gate.md"


@functools.cache
def false_alarms() -> dict[str, float]:
    """Both sides drawn from one distribution (Beta(2, 8), mean 0.2) as served logs: 200 calibration and 60 new
    distinct questions, each asked 1-5 times. The share of `TRIALS` seeded draws the test at `LEVEL` flags, counting
    each question once (`distinct`, what `monitor` does) and every row (`rows`, what it did)."""
    rng = np.random.default_rng(0)
    flagged = {"distinct": 0, "rows": 0}
    for _ in range(TRIALS):
        sides = []
        for size in (200, 60):
            repeats = rng.integers(1, 6, size)
            sides.append((np.repeat(rng.beta(2, 8, size), repeats), np.repeat(np.arange(size), repeats)))
        (reference, reference_ids), (new, new_ids) = sides
        flagged["distinct"] += confidence_drift(reference, new, LEVEL, reference_questions=reference_ids,
                                                new_questions=new_ids, shift=None)["drift"]
        flagged["rows"] += confidence_drift(reference, new, LEVEL, shift=None)["drift"]
    return {name: count / TRIALS for name, count in flagged.items()}


@functools.cache
def powers() -> dict[int, float]:
    """The power against a shift of 0.04 (mean 0.20 -> 0.24) at level 0.01 of a 300-question reference (Beta(2, 8))
    with 30, 300 and 3000 new questions."""
    reference = np.random.default_rng(1).beta(2, 8, 300)
    return {n_new: detection_power(reference, n_new, 0.04, 0.01) for n_new in (30, 300, 3000)}


def test_each_question_counts_once():
    """A question asked again (the same text up to surrounding spaces, or the same id) is no new draw: the test, its
    sizes and means use one confidence per distinct question, and say how many rows they came from."""
    assert first_rows(["who", " who ", "what", "who"]) == [0, 0, 2, 0]
    assert distinct_confidences([0.1, 0.1, 0.9], ["a", "a ", "b"]) == [0.1, 0.9]
    assert distinct_confidences([0.1, 0.1, 0.9], [0, 0, 1]) == [0.1, 0.9]
    result = confidence_drift([0.1, 0.2, 0.3, 0.3], [0.7, 0.7, 0.7, 0.8], reference_questions=[0, 1, 2, 2],
                              new_questions=["x", " x", "x ", "y"], shift=None)
    assert (result["rows_reference"], result["n_reference"], result["rows_new"], result["n_new"]) == (4, 3, 4, 2)
    assert result["mean_new"] == pytest.approx(0.75) and result["mean_reference"] == pytest.approx(0.2)
    assert result["power"] is None
    with pytest.raises(ValueError, match="Got 2 questions for 3 confidences"):
        confidence_drift([0.1, 0.2, 0.3], [0.5], reference_questions=["a", "b"])
    with pytest.raises(ValueError, match=r"`shift` must lie in \(0, 1\)"):
        confidence_drift([0.1], [0.5], shift=0.0)


def test_repeated_questions_raise_no_more_false_alarms_than_the_level():
    """Counting every row of a log whose questions recur 1-5 times flags drift where there is none far more often
    than the level; counting each question once stays within it (up to three Monte-Carlo standard errors)."""
    rates = false_alarms()
    assert rates["distinct"] <= LEVEL + SLACK
    assert rates["rows"] >= 3 * LEVEL  # what the test did before, and what this one would catch again


def test_power_is_that_of_the_test_at_these_sizes():
    """The power, simulated from the smoothed reference, matches the test's rejection rate on fresh samples of the
    true distributions; it grows with the new questions, is deterministic, and with no shift is the false-alarm
    rate."""
    from scipy.stats import ks_2samp

    power = powers()
    rng = np.random.default_rng(2)
    truth = np.mean([ks_2samp(rng.beta(2, 8, 300), rng.beta(2, 8, 30) + 0.04).pvalue < 0.01 for _ in range(400)])
    assert abs(power[30] - truth) <= 0.06
    assert power[30] < power[300] < power[3000] and power[30] < 0.5 < power[3000]
    reference = np.random.default_rng(1).beta(2, 8, 300)
    assert detection_power(reference, 30, 0.04, 0.01) == power[30]
    assert detection_power(reference, 100, 1e-9, LEVEL) <= LEVEL + 2 * (LEVEL / 400) ** 0.5
    assert confidence_drift(reference, reference[:30], 0.01)["power"] == power[30]


def test_scheduled_checks_add_up():
    month = scheduled_checks(0.01, 30)
    assert month["false_alarm"] == pytest.approx(1 - 0.99 ** 30) and month["bonferroni"] == pytest.approx(0.01 / 30)
    assert scheduled_checks(month["bonferroni"], 30)["false_alarm"] <= 0.01  # Bonferroni keeps the period's rate
    with pytest.raises(ValueError, match="at least one check"):
        scheduled_checks(0.01, 0)


def test_the_monitor_section_quotes_these_numbers():
    """Every number the monitor section of docs/gate.md gives for the test is recomputed here."""
    text = GATE.read_text(encoding="utf-8")
    section = re.search(r"### When the questions change: `elical-hf monitor`\n(.*?)\n## ", text, re.S).group(1)
    rates, power, month = false_alarms(), powers(), scheduled_checks(0.01, 30)
    for quoted in (f"{100 * rates['rows']:.1f}%", f"{100 * rates['distinct']:.1f}%", f"{100 * LEVEL:.0f}%",
                   f"{TRIALS} draws", f"{SLACK:.3f}", *(f"{n_new} new questions: {value:.2f}"
                                                      for n_new, value in power.items()),
                   f"{100 * month['false_alarm']:.0f}%", f"{month['bonferroni']:.2g}"):
        assert quoted in section, quoted
