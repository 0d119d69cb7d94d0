"""elical-hf: EliCal (Elicitation-Then-Calibration) confidence models on top of transformers, peft and evaluate."""

__version__ = "0.1.0"

from .auto import AutoModelForConfidence, PeftModelForConfidence
from .configuration import ConfidenceConfig
from .data import ConfidenceDataCollator
from .embedded import DEFAULT_MODEL
from .modeling import ConfidenceModelOutput, ForConfidenceMixin
from .trainer import ConfidenceTrainer, confidence_metrics
from .training_args import CalibrationTrainable, ConfidenceTrainingArguments, Stage


__all__ = [
    "DEFAULT_MODEL",
    "AutoModelForConfidence",
    "CalibrationTrainable",
    "ConfidenceConfig",
    "ConfidenceDataCollator",
    "ConfidenceModelOutput",
    "ConfidenceTrainer",
    "ConfidenceTrainingArguments",
    "ForConfidenceMixin",
    "PeftModelForConfidence",
    "Stage",
    "confidence_metrics",
]
