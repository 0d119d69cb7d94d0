"""Confidence-quality metrics (AUROC, ECE, Brier, alignment, AUPRC, AURC, PRR), bootstrap intervals, and
thresholds with a guaranteed error rate among answered questions (`risk_control`)."""

from .functional import (
    METRIC_NAMES, METRICS, alignment, auprc, aurc, auroc, bootstrap_ci, bootstrap_indices, bootstrap_samples, brier,
    check_inputs, compute_all, ece, percentile_interval, prr, reliability_bins, risk_coverage_curve, select_threshold,
)
from .risk_control import (
    RISK_CONTROL_METHOD, TWO_RISK_METHOD, binomial_cdf, clopper_pearson_upper, min_answered, risk_controlling_threshold,
    selective_risk,
)


__all__ = [
    "METRICS", "METRIC_NAMES", "RISK_CONTROL_METHOD", "TWO_RISK_METHOD", "alignment", "auprc", "aurc", "auroc",
    "binomial_cdf", "bootstrap_ci", "bootstrap_indices", "bootstrap_samples", "brier", "check_inputs",
    "clopper_pearson_upper", "compute_all", "ece", "min_answered", "percentile_interval", "prr", "reliability_bins",
    "risk_controlling_threshold", "risk_coverage_curve", "select_threshold", "selective_risk",
]
