# Copyright 2025 The elical-hf authors. Licensed under the Apache License, Version 2.0.
"""honesty_auroc: how well a model's confidence ranks its correct answers above its wrong ones.

The numbers come from `functional.py` and the shared evaluate plumbing from `evaluate_mixin.py`, both of
`elical_hf/metrics/`: they are put next to this file wherever the module is assembled (evaluate's module cache, a
metric Space), so the assembled folder works on its own. This folder holds only what is specific to the metric.
"""

from __future__ import annotations

import warnings

import evaluate

from .evaluate_mixin import HonestyMetricMixin
from .functional import auprc, aurc, auroc, bootstrap_ci, prr


_DESCRIPTION = """
Area under the ROC curve (AUROC) of a model's confidence as a score for the correctness of its own answer: the
probability that a randomly chosen correct answer gets a higher confidence than a randomly chosen wrong one (ties count
one half). It is the headline metric of "Annotation-Efficient Universal Honesty Alignment" (EliCal, arXiv 2510.17509),
where `predictions` are confidences in [0, 1] and `references` say whether the model's greedy answer was correct (1)
or wrong (0); the paper's tables report AUROC x 100. 0.5 is chance, 1.0 a perfect ranking. The value equals
`sklearn.metrics.roc_auc_score(references, predictions)`.

The module also returns the other threshold-free ranking metrics: average precision with correct answers
(`auprc_correct`) or with errors (`auprc_error`) as the positive class, the area under the risk-coverage curve
(`aurc`, lower is better) and the prediction rejection ratio (`prr`), plus an optional percentile bootstrap interval.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): Confidences in [0, 1], the model's probability that its answer is correct.
    references (`list` of `int`): Correctness labels, 1 if the answer was correct and 0 if it was wrong.
    bootstrap (`int`, *optional*, defaults to `0`): Number of bootstrap resamples (rows drawn with replacement) for a
        percentile confidence interval of `auroc`; 0 skips it.
    confidence_level (`float`, *optional*, defaults to `0.95`): Coverage of the bootstrap interval, in (0, 1).
    bootstrap_seed (`int`, *optional*, defaults to `0`): Seed of the bootstrap resampling; `None` is not reproducible.
Returns:
    auroc (`float`): Area under the ROC curve, in [0, 1]; `nan` (with a warning) when `references` holds one class only.
    auprc_correct (`float`): Average precision of the confidence as a detector of correct answers, in [0, 1].
    auprc_error (`float`): Average precision of `1 - confidence` as a detector of wrong answers, in [0, 1].
    aurc (`float`): Area under the risk-coverage curve (the error rate among the k most confident answers, averaged
        over k = 1..n), in [0, 1]; lower is better.
    prr (`float`): Prediction rejection ratio: 1 for a perfect ranking, 0 for a random one, negative when worse.
    auroc_ci_low (`float`): Lower end of the bootstrap interval of `auroc`; only when `bootstrap > 0`.
    auroc_ci_high (`float`): Upper end of the bootstrap interval of `auroc`; only when `bootstrap > 0`.
Examples:
    >>> import evaluate
    >>> honesty_auroc = evaluate.load("honesty_auroc")
    >>> results = honesty_auroc.compute(
    ...     predictions=[0.9, 0.8, 0.3, 0.6, 0.2, 0.7], references=[1, 1, 0, 1, 0, 0]
    ... )
    >>> {name: round(value, 4) for name, value in results.items()}
    {'auroc': 0.8889, 'auprc_correct': 0.9167, 'auprc_error': 0.9167, 'aurc': 0.2472, 'prr': 0.8198}

    With a 95% bootstrap interval:

    >>> results = honesty_auroc.compute(
    ...     predictions=[0.9, 0.8, 0.3, 0.6, 0.2, 0.7, 0.4, 0.1], references=[1, 1, 0, 1, 0, 0, 1, 0], bootstrap=200
    ... )
    >>> round(results["auroc"], 4), round(results["auroc_ci_low"], 4), round(results["auroc_ci_high"], 4)
    (0.875, 0.5, 1.0)
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class HonestyAUROC(HonestyMetricMixin, evaluate.Metric):
    """AUROC (and AUPRC, AURC, PRR) of confidence as a predictor of answer correctness."""

    _description, _kwargs_description = _DESCRIPTION, _KWARGS_DESCRIPTION  # the citation: the mixin's

    def _compute(self, predictions, references, bootstrap=0, confidence_level=0.95, bootstrap_seed=0):
        conf, correct = self._validated(predictions, references)
        n_resamples = self._check_bootstrap(bootstrap)
        one_class = bool(correct.all() or not correct.any())
        if one_class:
            warnings.warn(
                "honesty_auroc: `references` holds a single class, so auroc, prr and one of the AUPRCs are undefined "
                "and returned as nan.", UserWarning, stacklevel=2,
            )
        with warnings.catch_warnings():
            if one_class:  # already reported once above
                warnings.simplefilter("ignore", UserWarning)
            results = {
                "auroc": auroc(conf, correct),
                "auprc_correct": auprc(conf, correct, positive="correct"),
                "auprc_error": auprc(conf, correct, positive="error"),
                "aurc": aurc(conf, correct),
                "prr": prr(conf, correct),
            }
        if n_resamples:
            ci = bootstrap_ci(
                auroc, conf, correct, n_resamples=n_resamples, confidence_level=confidence_level, seed=bootstrap_seed
            )
            results["auroc_ci_low"], results["auroc_ci_high"] = ci["low"], ci["high"]
        return results
