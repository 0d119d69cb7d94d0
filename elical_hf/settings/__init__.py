"""Settings: what every other floor reads and no torch is needed for: `ConfidenceConfig` (`configuration.py`), the
records' shared column names, a multiple-choice question as data, the paper's prompts, the one precision policy and
EliCal's training options and stages (docs/architecture.md).
"""
