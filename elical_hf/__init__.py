"""elical-hf: EliCal (Elicitation-Then-Calibration) confidence models on top of transformers, peft and evaluate.

Importing the package changes nothing outside it. `register_pipeline()` adds the `"confidence-estimation"` task to
`transformers.pipeline()` when you want it.
"""

__version__ = "0.1.0"

from .auto import AutoModelForConfidence, PeftModelForConfidence
from .callbacks import ConfidenceCardCallback
from .cards import ConfidenceModelCardData
from .configuration import ConfidenceConfig
from .data import ConfidenceDataCollator
from .convert import convert_official
from .default_model import DEFAULT_MODEL
from .diagnosis import diagnose
from .head_calibration import calibrate_head
from .hub import HubPublishError, push_folder, push_honestybench, push_metric_space, push_model
from .modeling import ConfidenceModelOutput, ForConfidenceMixin
from .pipeline import ConfidenceEstimationPipeline, register_pipeline
from .recipe import train_elical
from .signals.honestybench import write_honestybench
from .trainer import ConfidenceTrainer, confidence_metrics
from .training_args import CalibrationTrainable, ConfidenceTrainingArguments, Stage


__all__ = [
    "DEFAULT_MODEL",
    "AutoModelForConfidence",
    "CalibrationTrainable",
    "ConfidenceCardCallback",
    "ConfidenceConfig",
    "ConfidenceDataCollator",
    "ConfidenceEstimationPipeline",
    "ConfidenceModelCardData",
    "ConfidenceModelOutput",
    "ConfidenceTrainer",
    "ConfidenceTrainingArguments",
    "ForConfidenceMixin",
    "HubPublishError",
    "PeftModelForConfidence",
    "Stage",
    "calibrate_head",
    "confidence_metrics",
    "convert_official",
    "diagnose",
    "push_folder",
    "push_honestybench",
    "push_metric_space",
    "push_model",
    "register_pipeline",
    "train_elical",
    "write_honestybench",
]
