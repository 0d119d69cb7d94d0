"""The vectorized bootstrap metrics equal the metric called on each resample."""

import warnings

import numpy as np
import pytest

from elical_hf.metrics import alignment, auroc, bootstrap_indices, bootstrap_samples, ece
from elical_hf.metrics.resampled import resample_counts, resampled_alignment, resampled_auroc, resampled_ece


def _auroc_or_nan(conf, y):
    return auroc(conf, y) if 0 < y.sum() < len(y) else np.nan


def _cases():
    rng = np.random.default_rng(0)
    for trial in range(60):
        n = int(rng.integers(1, 120))
        conf = [rng.random(n), np.round(rng.random(n), 1), rng.choice([0.0, 0.01, 0.5, 0.99, 1.0], n)][trial % 3]
        y = (rng.random(n) < rng.random()).astype(int)
        yield conf, y, rng


def test_counts_say_how_often_each_row_is_drawn():
    counts = resample_counts(np.array([[0, 0, 2], [1, 2, 2]]), 4)
    assert counts.tolist() == [[2, 0, 1, 0], [0, 1, 2, 0]]


def test_auroc_equals_the_metric_on_each_resample_bit_for_bit():
    for conf, y, rng in _cases():
        indices = bootstrap_indices(len(y), 40, rng)
        expected = bootstrap_samples(_auroc_or_nan, conf, y, indices)
        assert np.array_equal(resampled_auroc(conf, y, indices), expected, equal_nan=True)


def test_one_class_resamples_are_nan():
    values = resampled_auroc(np.array([0.2, 0.8]), np.array([0, 1]), np.array([[0, 0], [0, 1], [1, 1]]))
    assert np.isnan(values[0]) and values[1] == 1.0 and np.isnan(values[2])


def test_ece_equals_the_metric_on_each_resample():
    for conf, y, rng in _cases():
        indices = bootstrap_indices(len(y), 40, rng)
        np.testing.assert_allclose(resampled_ece(conf, y, indices), bootstrap_samples(ece, conf, y, indices),
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("thresholds", [None, np.array([0.9, 0.1, 0.5, 0.5, 0.3])])
def test_alignment_equals_the_metric_on_each_resample_bit_for_bit(thresholds):
    def reference(conf, y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return alignment(conf, y, calibration_fraction=0.2, thresholds=thresholds)["alignment"]

    for conf, y, rng in _cases():
        indices = bootstrap_indices(len(y), 40, rng, calibration_fraction=0.2)
        expected = bootstrap_samples(reference, conf, y, indices)
        assert np.array_equal(resampled_alignment(conf, y, indices, 0.2, thresholds), expected)


def test_chunks_give_the_same_values(monkeypatch):
    import elical_hf.metrics.resampled as resampled

    conf, y, rng = next(_cases())
    indices = bootstrap_indices(len(y), 30, rng)
    whole = resampled_auroc(conf, y, indices)
    monkeypatch.setattr(resampled, "_CHUNK_CELLS", 1)  # one resample per chunk
    assert np.array_equal(resampled_auroc(conf, y, indices), whole, equal_nan=True)


def test_alignment_refuses_no_scored_rows():
    with pytest.raises(ValueError, match="scored row"):
        resampled_alignment(np.array([0.5, 0.6]), np.array([0, 1]), np.array([[0, 1]]), calibration_fraction=1.0)
