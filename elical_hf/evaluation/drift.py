"""Do new questions still look like the calibration questions? A two-sample test of their confidences.

A saved threshold's guarantee (`elical-hf threshold --alpha`, [`~elical_hf.metrics.risk_controlling_threshold`])
holds for questions drawn like its calibration rows (exchangeable with them). The questions a served model gets have
no labels, but they have confidences: [`confidence_drift`] compares those of new questions with those of the
calibration rows by the two-sample Kolmogorov-Smirnov test (`scipy.stats.ks_2samp`, two-sided). A small p-value says
the two samples are unlikely to come from one distribution, so the guarantee's assumption no longer holds; a large
one is no proof that it does (a change in how often the model is right at a given confidence leaves the
confidences alike: only fresh labels show that).

The reference confidences are the calibration rows' own, saved by `elical-hf threshold` in the model folder
([`save_reference`], `calibration_confidences.json`), so a served model is monitored without its records; they can
also be recomputed from labelled records. A saved reference belongs to one trained model and threshold
([`model_fingerprint`]): after the model is trained again in its folder, or its threshold is set otherwise, it is
refused rather than compared with another model's confidences.

A served log asks many questions more than once, and one prompt always gets one confidence: the test counts each
distinct question once on both sides ([`distinct_confidences`]; `elical-hf threshold` saves which calibration rows
repeat a question, [`first_rows`]), since repeated rows are not independent draws and would make it flag drift far more
often than its level. Beside its verdict it reports its power ([`detection_power`]: how likely it is to see a given
shift at these sizes) and, for checks run on a schedule, what they risk together ([`scheduled_checks`]).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from ..utils.atomic import atomic_write_json
from ..settings.configuration import CONFIDENCE_CONFIG_NAME
from ..models.saved_model import REFERENCE_NAME, config_fingerprint, reference_data


__all__ = ["DRIFT_SHIFT", "DRIFT_SIGNIFICANCE", "POWER_DRAWS", "REFERENCE_NAME", "confidence_drift",
           "detectable_distance", "detection_power", "distinct_confidences", "first_rows", "load_reference",
           "model_fingerprint", "new_questions_for", "save_reference", "scheduled_checks"]

DRIFT_SIGNIFICANCE = 0.01
"""Default level of [`confidence_drift`]: a p-value below it is reported as drift."""
LOW_POWER_DISTANCE = 0.5
"""A [`detectable_distance`] at or above which a verdict of no drift says the test has almost no power (it counts as
drift only CDFs at least half apart)."""
TARGET_DISTANCE = 0.1
"""The KS distance such a verdict says how many new questions it would take to detect."""
DRIFT_SHIFT = 0.04
"""The shift of every confidence whose probability of detection [`confidence_drift`] reports (its power)."""
POWER_DRAWS = 400
"""The seeded simulations [`detection_power`] runs: two standard errors of its estimate are at most 0.05."""


def model_fingerprint(model_dir: str | os.PathLike) -> dict[str, Any] | None:
    """What a saved reference belongs to: the [`~elical_hf.models.saved_model.config_fingerprint`] of the model folder's
    `confidence_config.json` (its `decision_threshold` and a SHA-256 of its `training_history`); `None` for a folder
    without that file."""
    path = os.path.join(model_dir, CONFIDENCE_CONFIG_NAME)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return config_fingerprint(json.load(handle))


def save_reference(model_dir: str | os.PathLike, confidences: Sequence[float], source: Mapping[str, Any]) -> str:
    """Write the calibration rows' `confidences` (with `source`: where the rows came from, and the
    [`model_fingerprint`] of the folder as it is now, after its threshold was written) into `model_dir` as
    [`REFERENCE_NAME`], atomically; returns its path."""
    path = os.path.join(model_dir, REFERENCE_NAME)
    atomic_write_json(path, reference_data(confidences, source, model_fingerprint(model_dir)))
    return path


def load_reference(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The saved reference of `model_dir` ([`save_reference`]); one `ValueError` when it has none or it is broken."""
    path = os.path.join(model_dir, REFERENCE_NAME)
    if not os.path.isfile(path):
        raise ValueError(f"{model_dir} has no {REFERENCE_NAME}: `elical-hf threshold` saves the calibration rows' "
                         "confidences there; run it, or pass the labelled records to compare with (--reference).")
    with open(path, encoding="utf-8") as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}).") from None
    values = data.get("confidences") if isinstance(data, dict) else None
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"{path} must hold a non-empty list `confidences` of numbers in [0, 1].")
    ids = data.get("question_ids")
    if ids is not None and (not isinstance(ids, list) or len(ids) != len(values) or not all(
            isinstance(i, (int, str)) for i in ids)):
        raise ValueError(f"{path}: `question_ids` must be a list of one id (a number or text) per confidence.")
    saved_for, now = data.get("saved_for"), model_fingerprint(model_dir)
    if saved_for and now and saved_for != now:
        raise ValueError(
            f"{path} holds the confidences of another state of this model: it was saved with the decision threshold "
            f"{saved_for.get('decision_threshold')} and the model has {now['decision_threshold']} now"
            + (", after training again" if saved_for.get("training_history_sha256") != now["training_history_sha256"]
               else "") + ". Run `elical-hf threshold` again (it saves a new reference), or pass the labelled records "
            "to compare with (--reference)."
        )
    return data


def confidence_drift(
    reference: Sequence[float], new: Sequence[float], significance: float = DRIFT_SIGNIFICANCE, *,
    reference_questions: Sequence[Hashable] | None = None, new_questions: Sequence[Hashable] | None = None,
    shift: float | None = DRIFT_SHIFT,
) -> dict[str, Any]:
    """
    The two-sample Kolmogorov-Smirnov test of the confidences of new questions against the calibration rows', one
    confidence per distinct question on each side ([`distinct_confidences`]).

    Args:
        reference (`list[float]`): The calibration rows' confidences.
        new (`list[float]`): The new questions' confidences.
        significance (`float`, *optional*, defaults to 0.01): A p-value below it is reported as drift.
        reference_questions (`list`, *optional*), new_questions (`list`, *optional*): Each row's question (its text
            or an id), to count each distinct question once; without them every row counts.
        shift (`float`, *optional*, defaults to 0.04): The shift of every confidence whose probability of detection
            at these sizes is reported ([`detection_power`]); `None` skips it.

    Returns:
        `dict`: `statistic` (the largest gap between the two empirical CDFs), `p_value`, `drift` (`p_value <
        significance`), `significance`, `rows_reference` and `rows_new` (the rows given), `n_reference` and `n_new`
        (the distinct questions tested), `mean_reference`, `mean_new`, `min_detectable_distance` (the smallest KS
        distance the test can flag at these sample sizes, [`detectable_distance`]), `shift` and `power` (`None`
        without a shift), and `verdict` (one plain sentence, with the sample sizes; without drift, what the test could
        have seen, and on so few new questions that it has almost no power, how many it would need).

    Raises:
        `ValueError`: an empty sample, a confidence outside [0, 1] or not finite, questions not one per row, or
        `significance` or `shift` outside (0, 1).
    """
    from scipy.stats import ks_2samp

    if not 0.0 < significance < 1.0:
        raise ValueError(f"`significance` must lie in (0, 1), got {significance!r}.")
    if shift is not None and not 0.0 < shift < 1.0:
        raise ValueError(f"`shift` must lie in (0, 1), got {shift!r}.")
    samples, rows = {}, {}
    for name, values, questions in (("reference", reference, reference_questions), ("new", new, new_questions)):
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"The {name} confidences are empty: nothing to compare.")
        if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values):
            raise ValueError(f"The {name} confidences must be numbers in [0, 1].")
        rows[name], samples[name] = len(values), distinct_confidences(values, questions)
    test = ks_2samp(samples["reference"], samples["new"])
    p_value, drift = float(test.pvalue), float(test.pvalue) < significance
    n_reference, n_new = len(samples["reference"]), len(samples["new"])
    distance = detectable_distance(n_reference, n_new, significance)
    sizes = f"{n_new} new question{'s' if n_new > 1 else ''} against {n_reference} calibration rows"
    if drift:
        verdict = (f"drift: the new questions' confidences differ from the calibration set's (KS p = {p_value:.2g} < "
                   f"{significance}, {sizes}); the threshold's guarantee assumes they do not: recalibrate on fresh "
                   "labelled rows")
    elif distance < LOW_POWER_DISTANCE:
        verdict = (f"no evidence of drift (KS p = {p_value:.2g} >= {significance}): with {sizes} the confidences "
                   f"look like the calibration set's, up to a KS distance of {distance:.2g} (the smallest this test "
                   "flags at these sizes)")
    else:
        needed = new_questions_for(TARGET_DISTANCE, n_reference, significance)
        advice = (f"about {needed} new questions detect a distance of {TARGET_DISTANCE}" if needed is not None else
                  f"no number of new questions detects a distance of {TARGET_DISTANCE} against {n_reference} "
                  "calibration rows: it needs more of them too")
        verdict = (f"no evidence of drift (KS p = {p_value:.2g} >= {significance}), but {sizes} "
                   f"{'are' if n_new > 1 else 'is'} too few to tell: the test flags only a KS distance of at least "
                   f"{distance:.2g} between the two confidence distributions, so it has almost no power here; "
                   f"{advice}")
    power = None if shift is None else detection_power(samples["reference"], n_new, shift, significance)
    return {"statistic": float(test.statistic), "p_value": p_value, "drift": drift, "significance": significance,
            "rows_reference": rows["reference"], "rows_new": rows["new"], "n_reference": n_reference, "n_new": n_new,
            "mean_reference": sum(samples["reference"]) / n_reference, "mean_new": sum(samples["new"]) / n_new,
            "min_detectable_distance": distance, "shift": shift, "power": power, "verdict": verdict}


def _same(question: Hashable) -> Hashable:
    """What tells two rows' questions apart: a text as the prompt reads it (stripped), an id as it is."""
    return question.strip() if isinstance(question, str) else question


def first_rows(questions: Sequence[Hashable]) -> list[int]:
    """For each row, the index of the first row with the same question (texts compared stripped, as the prompt reads
    them): the ids `elical-hf threshold` saves beside the reference's confidences (`question_ids`), so that `monitor`
    counts each calibration question once without the file holding their text."""
    first: dict[Hashable, int] = {}
    return [first.setdefault(_same(question), row) for row, question in enumerate(questions)]


def distinct_confidences(confidences: Sequence[float], questions: Sequence[Hashable] | None) -> list[float]:
    """One confidence per distinct question of `questions` (each row's text, compared stripped, or id), the first
    row's: one prompt gets one confidence, and a question asked again is no new draw. `None` keeps every row.

    Raises:
        `ValueError`: `questions` not one per confidence.
    """
    if questions is None:
        return [float(c) for c in confidences]
    if len(questions) != len(confidences):
        raise ValueError(f"Got {len(questions)} questions for {len(confidences)} confidences: give one per row.")
    return [float(confidence) for row, (first, confidence) in enumerate(zip(first_rows(questions), confidences))
            if first == row]


def detection_power(reference: Sequence[float], n_new: int, shift: float = DRIFT_SHIFT,
                    significance: float = DRIFT_SIGNIFICANCE, draws: int = POWER_DRAWS) -> float:
    """
    The probability that [`confidence_drift`] reports drift when every confidence moved by `shift` (toward the middle
    of [0, 1], so rarely cut at its ends), with as many calibration rows as `reference` and `n_new` new questions: the
    share of `draws` seeded simulations of the test (`scipy.stats.ks_2samp` at `significance`, as run) that flag it,
    both samples drawn from the smoothed reference (its confidences plus Gaussian noise of Silverman's bandwidth,
    cut to [0, 1]), the new one moved. Deterministic; two standard errors are at most `1 / sqrt(draws)`.

    The test's p-value falls as its statistic grows (at fixed sizes), so the statistics of all draws are computed
    first and the exact p-value only at a bisection of their order.
    """
    from scipy.stats import ks_2samp

    values = np.asarray(reference, dtype=np.float64)
    bandwidth = 1.06 * values.std() * values.size ** -0.2
    moved = shift if values.mean() <= 0.5 else -shift

    def draw(seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        return tuple(np.clip(rng.choice(values, size) + rng.normal(0.0, bandwidth, size) + by, 0.0, 1.0)
                     for size, by in ((values.size, 0.0), (n_new, moved)))

    order = np.argsort([ks_2samp(*draw(seed), method="asymp").statistic for seed in range(draws)], kind="stable")
    low, high = 0, draws  # the first draw, by growing statistic, that the test flags
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if ks_2samp(*draw(int(order[middle]))).pvalue < significance else (middle + 1, high)
    return (draws - low) / draws


def scheduled_checks(significance: float, checks: int) -> dict[str, float]:
    """What `checks` runs of the test per period (30 daily checks a month) risk when nothing changed: `false_alarm`,
    the probability that at least one flags drift, `1 - (1 - significance) ** checks` for independent checks (at most
    `checks * significance` whatever their dependence), and `bonferroni`, the level of each check that keeps it at
    most `significance` (`significance / checks`)."""
    if not 0.0 < significance < 1.0 or checks < 1:
        raise ValueError(f"Need a significance in (0, 1) and at least one check, got {significance!r} and {checks!r}.")
    return {"false_alarm": 1.0 - (1.0 - significance) ** checks, "bonferroni": significance / checks}


def detectable_distance(n_reference: int, n_new: int, significance: float = DRIFT_SIGNIFICANCE) -> float:
    """
    The smallest KS distance (the largest gap between the two empirical CDFs) that the two-sample test flags at
    `significance` with these sample sizes: the critical value of the Kolmogorov distribution at the effective size
    `n_reference * n_new / (n_reference + n_new)` (`scipy.stats.kstwo`; for large samples Smirnov's
    `c(significance) * sqrt(1 / n_reference + 1 / n_new)`). It is the smallest observed gap that counts as drift, so a
    verdict of no drift vouches for no difference much smaller than it.
    """
    from scipy.stats import kstwo

    effective = max(1, round(n_reference * n_new / (n_reference + n_new)))
    return float(kstwo.isf(significance, effective))


def new_questions_for(distance: float, n_reference: int, significance: float = DRIFT_SIGNIFICANCE) -> int | None:
    """How many new questions the test needs to flag a KS `distance` against `n_reference` calibration rows
    ([`detectable_distance`]); `None` when no number does (the calibration rows are too few)."""
    from scipy.stats import kstwo

    low, high = 1, 1
    while kstwo.isf(significance, high) > distance:  # the effective size needed, by doubling then bisection
        low, high = high, 2 * high
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if kstwo.isf(significance, middle) <= distance else (middle + 1, high)
    return math.ceil(low * n_reference / (n_reference - low)) if low < n_reference else None
