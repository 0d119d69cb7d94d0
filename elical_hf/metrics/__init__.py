"""Confidence-quality metrics (AUROC, ECE, Brier, alignment, AUPRC, AURC, PRR) and bootstrap intervals."""

from .functional import (
    METRICS,
    METRIC_NAMES,
    alignment,
    select_threshold,
    auprc,
    aurc,
    auroc,
    bootstrap_ci,
    bootstrap_indices,
    bootstrap_samples,
    brier,
    check_inputs,
    compute_all,
    ece,
    percentile_interval,
    prr,
    reliability_bins,
    risk_coverage_curve,
)


__all__ = [
    "METRICS",
    "METRIC_NAMES",
    "alignment",
    "select_threshold",
    "auprc",
    "aurc",
    "auroc",
    "bootstrap_ci",
    "bootstrap_indices",
    "bootstrap_samples",
    "brier",
    "check_inputs",
    "compute_all",
    "ece",
    "percentile_interval",
    "prr",
    "reliability_bins",
    "risk_coverage_curve",
]
