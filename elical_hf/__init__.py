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
    ".data.training_table": ("ConfidenceDataCollator",),
    ".evaluation.diagnosis": ("diagnose",),
    ".models.auto": ("AutoModelForConfidence", "PeftModelForConfidence"),
    ".models.default_model": ("DEFAULT_MODEL",),
    ".models.model_card": ("ConfidenceModelCardData",),
    ".models.modeling": ("ConfidenceModelOutput", "ForConfidenceMixin"),
    ".pipeline": ("ConfidenceEstimationPipeline", "register_pipeline"),
    ".publishing.convert": ("convert_official",),
    ".publishing.dataset_card": ("write_honestybench",),
    ".publishing.eval_results": ("EvalResultsSource",),
    ".publishing.hub": ("HubPublishError", "push_folder", "push_gate_space", "push_honestybench", "push_metric_space",
        "push_model"),
    ".publishing.metric_modules": ("install_metrics", "metric_module_path"),
    ".settings.configuration": ("ConfidenceConfig",),
    ".settings.training_options": ("CalibrationTrainable", "Stage"),
    ".steps.arguments": ("ModelArguments", "RecordArguments"),
    ".training.callbacks": ("ConfidenceCardCallback",),
    ".training.head_calibration": ("calibrate_head",),
    ".training.recipe": ("train_elical",),
    ".training.trainer": ("ConfidenceTrainer", "confidence_metrics"),
    ".training.training_args": ("ConfidenceTrainingArguments",),
}
"""Module -> the public names it defines (each imported on first access)."""

__all__ = sorted(name for names in _LAZY.values() for name in names)


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
