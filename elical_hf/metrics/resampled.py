"""AUROC, ECE and alignment on many bootstrap resamples at once, equal to calling the metric on each resample.

[`~elical_hf.metrics.bootstrap_samples`] calls a metric once per resample: 1,000 resamples of 30 methods on 5 datasets
are 450,000 calls, most of their time spent validating inputs. A resample of `n` rows drawn with replacement is
fully described by how many times it holds each row, so the functions here turn the `(resamples, n)` index matrix of
[`~elical_hf.metrics.bootstrap_indices`] into a count matrix and compute every resample's metric with array operations
on it:

- AUROC: Mann-Whitney U from per-resample counts of correct and wrong rows in each group of tied confidences, in
  integer arithmetic up to the final division, so each value equals [`~elical_hf.metrics.auroc`] on that resample bit
  for bit;
- alignment: every candidate threshold's hits on the resampled threshold rows at once, the same choice rule as
  [`~elical_hf.metrics.alignment`] (valid thresholds only, ties to the smallest, 0.5 when none), then the accuracy on
  the resampled scored rows: equal bit for bit;
- ECE: per-bin counts and sums from the count matrix (10 uniform bins, as [`~elical_hf.metrics.ece`]); the same
  value up to float summation order (about 1e-16).

Plain numpy; resamples are processed in chunks so the count matrix stays under a few tens of MB.
"""

from __future__ import annotations

import numpy as np

from .functional import DEFAULT_THRESHOLDS, tie_groups, uniform_bin_ids, check_inputs


__all__ = ["resampled_alignment", "resampled_auroc", "resampled_ece", "resample_counts"]

_CHUNK_CELLS = 4_000_000
"""Count-matrix cells (resamples x rows) per chunk."""


def resample_counts(indices: np.ndarray, n: int) -> np.ndarray:
    """How many times each of `n` rows appears in each resample: int64 array `(len(indices), n)`."""
    resamples = len(indices)
    offsets = (np.arange(resamples, dtype=np.int64) * n)[:, None]
    return np.bincount((indices + offsets).ravel(), minlength=resamples * n).reshape(resamples, n)


def _chunks(indices: np.ndarray, n: int):
    step = max(1, _CHUNK_CELLS // max(n, 1))
    for start in range(0, len(indices), step):
        yield resample_counts(indices[start : start + step], n)


def resampled_auroc(confidences: np.ndarray, correct: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """[`~elical_hf.metrics.auroc`] of `confidences[rows]`, `correct[rows]` for each row of `indices`; `nan` where a
    resample holds one class. float64 array with one value per resample."""
    conf, y = check_inputs(confidences, correct)
    order = np.argsort(conf, kind="stable")
    starts = tie_groups(conf[order])  # groups of tied confidences
    pos_sorted = y[order].astype(bool)
    out = []
    for counts in _chunks(indices, conf.size):
        counts = counts[:, order]
        pos = np.where(pos_sorted, counts, 0)
        neg = counts - pos
        pos_groups = np.add.reduceat(pos, starts, axis=1)
        neg_groups = np.add.reduceat(neg, starts, axis=1)
        neg_below = np.cumsum(neg_groups, axis=1) - neg_groups
        twice_u = (pos_groups * (2 * neg_below + neg_groups)).sum(axis=1)  # 2U: each tie counts 1/2
        n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
        denominator = 2 * n_pos * n_neg
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(np.where(denominator > 0, twice_u / np.maximum(denominator, 1), np.nan))
    return np.concatenate(out) if out else np.zeros(0)


def resampled_ece(confidences: np.ndarray, correct: np.ndarray, indices: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """[`~elical_hf.metrics.ece`] (uniform bins) of each resample of `indices`: float64 array, one per resample."""
    conf, y = check_inputs(confidences, correct)
    bins = uniform_bin_ids(conf, n_bins)  # the bins of reliability_bins(strategy="uniform")
    one_hot = np.zeros((conf.size, n_bins))
    one_hot[np.arange(conf.size), bins] = 1.0
    out = []
    for counts in _chunks(indices, conf.size):
        weights = counts.astype(np.float64)
        count = weights @ one_hot
        with np.errstate(invalid="ignore", divide="ignore"):
            gaps = np.abs((weights * conf) @ one_hot / count - (weights * y) @ one_hot / count)
        out.append(np.where(count > 0, count / conf.size * np.nan_to_num(gaps), 0.0).sum(axis=1))
    return np.concatenate(out) if out else np.zeros(0)


def resampled_alignment(
    confidences: np.ndarray, correct: np.ndarray, indices: np.ndarray, calibration_fraction: float = 0.2,
    thresholds: np.ndarray | None = None,
) -> np.ndarray:
    """[`~elical_hf.metrics.alignment`] (x100) of each resample of `indices`, which must resample the threshold rows
    and the scored rows apart ([`~elical_hf.metrics.bootstrap_indices`] with the same `calibration_fraction`): float64
    array, one value per resample."""
    conf, y = check_inputs(confidences, correct)
    thr = DEFAULT_THRESHOLDS if thresholds is None else np.asarray(thresholds, dtype=np.float64).ravel()
    n = conf.size
    k = int(calibration_fraction * n)
    if k >= n:
        raise ValueError(f"alignment needs at least one scored row after the {k} threshold rows of {n}.")
    at_or_above = (conf[:k, None] >= thr[None, :]).astype(np.int64)  # threshold rows x candidates
    positive = y[:k] == 1
    out = []
    for counts in _chunks(indices, n):
        head, tail = counts[:, :k], counts[:, k:]
        wrong = np.where(positive, 0, head)
        pos_ge = np.where(positive, head, 0) @ at_or_above  # correct threshold rows predicted 1
        neg_ge = wrong @ at_or_above  # wrong threshold rows predicted 1
        hits = pos_ge + (wrong.sum(axis=1, keepdims=True) - neg_ge)
        predicted_one = pos_ge + neg_ge
        valid = (predicted_one > 0) & (predicted_one < k)
        best = np.where(valid, hits, -1).max(axis=1, keepdims=True)
        smallest_best = np.where(valid & (hits == best), thr[None, :], np.inf).min(axis=1)  # ties: the smallest t
        t = np.where(valid.any(axis=1), smallest_best, 0.5)
        scored_right = (conf[k:][None, :] >= t[:, None]) == (y[k:] == 1)[None, :]
        accuracy = (tail * scored_right).sum(axis=1) / (n - k)
        out.append(accuracy * 100)
    return np.concatenate(out) if out else np.zeros(0)
