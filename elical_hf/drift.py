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
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .atomic import atomic_write_json
from .configuration import CONFIDENCE_CONFIG_NAME
from .saved_model import REFERENCE_NAME, config_fingerprint, reference_data


__all__ = ["DRIFT_SIGNIFICANCE", "REFERENCE_NAME", "confidence_drift", "detectable_distance", "load_reference",
           "model_fingerprint", "new_questions_for", "save_reference"]

DRIFT_SIGNIFICANCE = 0.01
"""Default level of [`confidence_drift`]: a p-value below it is reported as drift."""
LOW_POWER_DISTANCE = 0.5
"""A [`detectable_distance`] at or above which a verdict of no drift says the test has almost no power (it counts as
drift only CDFs at least half apart)."""
TARGET_DISTANCE = 0.1
"""The KS distance such a verdict says how many new questions it would take to detect."""


def model_fingerprint(model_dir: str | os.PathLike) -> dict[str, Any] | None:
    """What a saved reference belongs to: the [`~elical_hf.saved_model.config_fingerprint`] of the model folder's
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
    reference: Sequence[float], new: Sequence[float], significance: float = DRIFT_SIGNIFICANCE
) -> dict[str, Any]:
    """
    The two-sample Kolmogorov-Smirnov test of the confidences of new questions against the calibration rows'.

    Args:
        reference (`list[float]`): The calibration rows' confidences.
        new (`list[float]`): The new questions' confidences.
        significance (`float`, *optional*, defaults to 0.01): A p-value below it is reported as drift.

    Returns:
        `dict`: `statistic` (the largest gap between the two empirical CDFs), `p_value`, `drift` (`p_value <
        significance`), `significance`, `n_reference`, `n_new`, `mean_reference`, `mean_new`,
        `min_detectable_distance` (the smallest KS distance the test can flag at these sample sizes,
        [`detectable_distance`]) and `verdict` (one plain sentence, with the sample sizes; without drift, what the
        test could have seen, and on so few new questions that it has almost no power, how many it would need).

    Raises:
        `ValueError`: an empty sample, a confidence outside [0, 1] or not finite, or `significance` outside (0, 1).
    """
    from scipy.stats import ks_2samp

    if not 0.0 < significance < 1.0:
        raise ValueError(f"`significance` must lie in (0, 1), got {significance!r}.")
    samples = {}
    for name, values in (("reference", reference), ("new", new)):
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"The {name} confidences are empty: nothing to compare.")
        if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values):
            raise ValueError(f"The {name} confidences must be numbers in [0, 1].")
        samples[name] = values
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
    return {"statistic": float(test.statistic), "p_value": p_value, "drift": drift, "significance": significance,
            "n_reference": n_reference, "n_new": n_new,
            "mean_reference": sum(samples["reference"]) / n_reference, "mean_new": sum(samples["new"]) / n_new,
            "min_detectable_distance": distance, "verdict": verdict}


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
