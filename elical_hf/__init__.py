"""elical-hf: EliCal (Elicitation-Then-Calibration) confidence models on top of transformers, peft and evaluate.

Importing the package changes nothing outside it, and imports nothing heavy: the public names below load their module
(and torch, transformers, peft) on first use, as TRL's package does, so `elical-hf --help` starts in a fraction of a
second. `register_pipeline()` adds the `"confidence-estimation"` task to
`transformers.pipeline()` when you want it.
"""

from typing import TYPE_CHECKING

from .utils.lazy import lazy_attributes
from .version import __version__


_LAZY = {
    "AutoModelForConfidence": ".models.auto",
    "CalibrationTrainable": ".settings.training_options",
    "ConfidenceCardCallback": ".training.callbacks",
    "ConfidenceConfig": ".settings.configuration",
    "ConfidenceDataCollator": ".data.training_table",
    "ConfidenceEstimationPipeline": ".pipeline",
    "ConfidenceModelCardData": ".models.model_card",
    "ConfidenceModelOutput": ".models.modeling",
    "ConfidenceTrainer": ".training.trainer",
    "ConfidenceTrainingArguments": ".training.training_args",
    "DEFAULT_MODEL": ".models.default_model",
    "EvalResultsSource": ".publishing.eval_results",
    "ForConfidenceMixin": ".models.modeling",
    "HubPublishError": ".publishing.hub",
    "ModelArguments": ".steps.arguments",
    "PeftModelForConfidence": ".models.auto",
    "RecordArguments": ".steps.arguments",
    "Stage": ".settings.training_options",
    "calibrate_head": ".training.head_calibration",
    "confidence_metrics": ".training.trainer",
    "convert_official": ".publishing.convert",
    "diagnose": ".evaluation.diagnosis",
    "install_metrics": ".publishing.metric_modules",
    "metric_module_path": ".publishing.metric_modules",
    "push_folder": ".publishing.hub",
    "push_gate_space": ".publishing.hub",
    "push_honestybench": ".publishing.hub",
    "push_metric_space": ".publishing.hub",
    "push_model": ".publishing.hub",
    "register_pipeline": ".pipeline",
    "train_elical": ".training.recipe",
    "write_honestybench": ".publishing.dataset_card",
}
"""Public name -> the module that defines it (imported on first access)."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static type checkers and IDEs see the eager imports
    from .steps.arguments import ModelArguments, RecordArguments
    from .models.auto import AutoModelForConfidence, PeftModelForConfidence
    from .training.callbacks import ConfidenceCardCallback
    from .settings.configuration import ConfidenceConfig
    from .publishing.convert import convert_official
    from .data.training_table import ConfidenceDataCollator
    from .models.default_model import DEFAULT_MODEL
    from .evaluation.diagnosis import diagnose
    from .training.head_calibration import calibrate_head
    from .models.model_card import ConfidenceModelCardData
    from .models.modeling import ConfidenceModelOutput, ForConfidenceMixin
    from .pipeline import ConfidenceEstimationPipeline, register_pipeline
    from .publishing.dataset_card import write_honestybench
    from .publishing.eval_results import EvalResultsSource
    from .publishing.hub import (
        HubPublishError, push_folder, push_gate_space, push_honestybench, push_metric_space, push_model,
    )
    from .publishing.metric_modules import install_metrics, metric_module_path
    from .training.recipe import train_elical
    from .training.trainer import ConfidenceTrainer, confidence_metrics
    from .training.training_args import ConfidenceTrainingArguments
    from .settings.training_options import CalibrationTrainable, Stage
