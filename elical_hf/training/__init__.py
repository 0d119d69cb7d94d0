"""Training: `ConfidenceTrainingArguments`, `ConfidenceTrainer` and its card callback, head-only calibration on
cached features, the per-layer feature cache and the two-stage recipe with Cal-Only (docs/architecture.md).
"""
