"""elical-hf: EliCal (Elicitation-Then-Calibration) confidence models on top of transformers, peft and evaluate.

Importing the package changes nothing outside it, and imports nothing heavy: the public names below load their module
(and torch, transformers, peft) on first use, as TRL's package does, so `elical-hf --help` starts in a fraction of a
second. `register_pipeline()` adds the `"confidence-estimation"` task to
`transformers.pipeline()` when you want it.
"""

from typing import TYPE_CHECKING

from .lazy import lazy_attributes
from .version import __version__


_LAZY = {
    "AutoModelForConfidence": ".auto",
    "CalibrationTrainable": ".training_options",
    "ConfidenceCardCallback": ".callbacks",
    "ConfidenceConfig": ".configuration",
    "ConfidenceDataCollator": ".data",
    "ConfidenceEstimationPipeline": ".pipeline",
    "ConfidenceModelCardData": ".model_card",
    "ConfidenceModelOutput": ".modeling",
    "ConfidenceTrainer": ".trainer",
    "ConfidenceTrainingArguments": ".training_args",
    "DEFAULT_MODEL": ".default_model",
    "ForConfidenceMixin": ".modeling",
    "HubPublishError": ".hub",
    "PeftModelForConfidence": ".auto",
    "Stage": ".training_options",
    "calibrate_head": ".head_calibration",
    "confidence_metrics": ".trainer",
    "convert_official": ".convert",
    "diagnose": ".diagnosis",
    "push_folder": ".hub",
    "push_gate_space": ".hub",
    "push_honestybench": ".hub",
    "push_metric_space": ".hub",
    "push_model": ".hub",
    "register_pipeline": ".pipeline",
    "train_elical": ".recipe",
    "write_honestybench": ".dataset_card",
}
"""Public name -> the module that defines it (imported on first access)."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static type checkers and IDEs see the eager imports
    from .auto import AutoModelForConfidence, PeftModelForConfidence
    from .callbacks import ConfidenceCardCallback
    from .configuration import ConfidenceConfig
    from .convert import convert_official
    from .data import ConfidenceDataCollator
    from .dataset_card import write_honestybench
    from .default_model import DEFAULT_MODEL
    from .diagnosis import diagnose
    from .head_calibration import calibrate_head
    from .hub import HubPublishError, push_folder, push_gate_space, push_honestybench, push_metric_space, push_model
    from .model_card import ConfidenceModelCardData
    from .modeling import ConfidenceModelOutput, ForConfidenceMixin
    from .pipeline import ConfidenceEstimationPipeline, register_pipeline
    from .recipe import train_elical
    from .trainer import ConfidenceTrainer, confidence_metrics
    from .training_args import ConfidenceTrainingArguments
    from .training_options import CalibrationTrainable, Stage
