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
    "EvalResultsSource": ".publishing.eval_results",
    "ForConfidenceMixin": ".modeling",
    "HubPublishError": ".publishing.hub",
    "ModelArguments": ".arguments",
    "PeftModelForConfidence": ".auto",
    "RecordArguments": ".arguments",
    "Stage": ".training_options",
    "calibrate_head": ".head_calibration",
    "confidence_metrics": ".trainer",
    "convert_official": ".convert",
    "diagnose": ".diagnosis",
    "install_metrics": ".publishing.metric_modules",
    "metric_module_path": ".publishing.metric_modules",
    "push_folder": ".publishing.hub",
    "push_gate_space": ".publishing.hub",
    "push_honestybench": ".publishing.hub",
    "push_metric_space": ".publishing.hub",
    "push_model": ".publishing.hub",
    "register_pipeline": ".pipeline",
    "train_elical": ".recipe",
    "write_honestybench": ".publishing.dataset_card",
}
"""Public name -> the module that defines it (imported on first access)."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static type checkers and IDEs see the eager imports
    from .arguments import ModelArguments, RecordArguments
    from .auto import AutoModelForConfidence, PeftModelForConfidence
    from .callbacks import ConfidenceCardCallback
    from .configuration import ConfidenceConfig
    from .convert import convert_official
    from .data import ConfidenceDataCollator
    from .default_model import DEFAULT_MODEL
    from .diagnosis import diagnose
    from .head_calibration import calibrate_head
    from .model_card import ConfidenceModelCardData
    from .modeling import ConfidenceModelOutput, ForConfidenceMixin
    from .pipeline import ConfidenceEstimationPipeline, register_pipeline
    from .publishing.dataset_card import write_honestybench
    from .publishing.eval_results import EvalResultsSource
    from .publishing.hub import (
        HubPublishError, push_folder, push_gate_space, push_honestybench, push_metric_space, push_model,
    )
    from .publishing.metric_modules import install_metrics, metric_module_path
    from .recipe import train_elical
    from .trainer import ConfidenceTrainer, confidence_metrics
    from .training_args import ConfidenceTrainingArguments
    from .training_options import CalibrationTrainable, Stage
