"""What the three `honesty_*` evaluate modules share: their `MetricInfo`, and input validation in `add` / `add_batch`
/ `compute`, before evaluate casts the inputs to its features (which would silently turn a label of 0.5 into 0).

Only evaluate modules use this file. It is no module folder's own: the folders `elical_hf/metrics/honesty_*/` hold just
their module script and card, and this file and `functional.py` are put next to the script wherever a runnable module
is assembled (evaluate's module cache, `publishing.metric_modules.install_metrics`; a metric Space,
`publishing.metric_cards.write_metric_space`). Hence the one relative import: `functional.py` is always its sibling.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .functional import check_inputs


__all__ = ["CITATION", "HonestyMetricMixin"]

CITATION = """\
@misc{ni2025annotationefficient,
  title         = {Annotation-Efficient Universal Honesty Alignment},
  author        = {Ni, Shiyu and Bi, Keping and Guo, Jiafeng and Tang, Minghao and Wu, Jingtong and Han, Zengxin
                   and Cheng, Xueqi},
  year          = {2025},
  eprint        = {2510.17509},
  archivePrefix = {arXiv},
  url           = {https://arxiv.org/abs/2510.17509}
}
"""
"""The paper every `honesty_*` module cites (EliCal, arXiv 2510.17509)."""


class HonestyMetricMixin:
    """Mix in before `evaluate.Metric` and set `_description` and `_kwargs_description` on the subclass (`_citation`
    defaults to [`CITATION`])."""

    _inputs = "`predictions` are confidences in [0, 1], `references` are 0/1 correctness labels"
    _description = _kwargs_description = ""
    _citation = CITATION

    @property
    def _metric_name(self) -> str:
        return getattr(self, "name", None) or type(self).__name__

    def _validated(self, predictions: Any, references: Any) -> tuple[np.ndarray, np.ndarray]:
        try:
            return check_inputs(predictions, references)
        except ValueError as err:
            raise ValueError(f"{self._metric_name}: invalid inputs ({self._inputs}): {err}") from None

    def _check_bootstrap(self, bootstrap: Any) -> int:
        if isinstance(bootstrap, bool) or not isinstance(bootstrap, numbers.Integral) or bootstrap < 0:
            raise ValueError(
                f"{self._metric_name}: bootstrap must be an integer >= 0 (number of resamples), got {bootstrap!r}"
            )
        return int(bootstrap)

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Add a batch of confidences and 0/1 labels, validated before evaluate casts them (0.5 -> 0 otherwise)."""
        self._validated(predictions, references)
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """Add one confidence and its 0/1 label, validated first."""
        self._validated([prediction], [reference])
        super().add(prediction=prediction, reference=reference, **kwargs)

    def _info(self) -> Any:
        import datasets
        import evaluate

        return evaluate.MetricInfo(
            description=self._description,
            citation=self._citation,
            inputs_description=self._kwargs_description,
            features=datasets.Features({"predictions": datasets.Value("float64"), "references": datasets.Value("int32")}),
            reference_urls=["https://arxiv.org/abs/2510.17509"],
        )
