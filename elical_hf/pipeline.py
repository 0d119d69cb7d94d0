"""The `"confidence-estimation"` transformers pipeline task, registered on `import elical_hf`.

```python
>>> import elical_hf  # noqa: F401
>>> from transformers import pipeline
>>> scorer = pipeline("confidence-estimation", model="my-confidence-model")  # a folder, a Hub repo or a model
>>> scorer("Who wrote Hamlet?")
{'confidence': 0.83, 'decision': 'answer'}
```

`pipeline()` only knows how to build transformers model classes. For this task it is given a loader whose
`from_pretrained` calls [`AutoModelForConfidence.from_pretrained`]; a failure there is raised as
[`ConfidencePipelineLoadError`] so that `pipeline()` does not silently fall back to the base architecture's class.

Before loading, `pipeline()` reads the `config.json` of the base model that the adapter names. For this task only,
and only when that read fails for an embedded default model (`HuggingFaceTB/SmolLM2-135M-Instruct` with no network
and no Hub cache), the config is read from the same offline copy that [`AutoModelForConfidence`] then loads (see
[`~elical_hf.embedded.resolve_model_path`]): `transformers.pipelines.AutoConfig` is wrapped on registration for that.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers.pipelines
from transformers import AutoConfig, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY

from .auto import _HUB_KWARGS, AutoModelForConfidence, PeftModelForConfidence, _find_saved_model
from .data import encode_prompts, ensure_pad_token
from .embedded import EMBEDDED_MODELS, resolve_model_path
from .modeling import UNKNOWN_CONFIDENCE_CONFIG, ForConfidenceMixin


TASK = "confidence-estimation"
_LOAD_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "force_download", "dtype", "device_map",
                "attn_implementation")


class ConfidencePipelineLoadError(Exception):
    """`pipeline("confidence-estimation", model=<name>)` could not load `<name>` as a confidence model."""


class ConfidenceModelLoader:
    """What `pipeline()` calls to build the model from a name: [`AutoModelForConfidence.from_pretrained`]."""

    @classmethod
    def from_pretrained(cls, name: str, **kwargs: Any) -> PeftModelForConfidence:
        options = {key: kwargs[key] for key in _LOAD_KWARGS if kwargs.get(key) is not None}
        if "revision" in options:  # pipeline() passes a ResolvedRevision of the *base* model: keep only the name
            options["revision"] = str(options["revision"])
        try:
            hub_options = {key: options[key] for key in _HUB_KWARGS if key in options}
            if _find_saved_model(name, **hub_options) is None:
                raise ValueError(
                    "it is not a saved confidence model (no confidence_config.json). The pipeline scores questions "
                    "with a trained model; to start one from a base model, use AutoModelForConfidence and train it"
                )
            return AutoModelForConfidence.from_pretrained(name, **options)
        except Exception as error:  # noqa: BLE001 - re-raised with its cause, so pipeline() does not try other classes
            raise ConfidencePipelineLoadError(
                f"Could not load {name!r} as a confidence model: {type(error).__name__}: {error}"
            ) from error


class ConfidenceEstimationPipeline(Pipeline):
    r"""
    Scores questions with a confidence model: how likely the model is to answer each one correctly, before it
    answers.

    Call it with a question or a list of questions; each gives `{"confidence": float}`, plus
    `"decision": "answer" | "abstain"` when a threshold is known (the model's
    `confidence_config.decision_threshold`, or `threshold=` at call time).

    Args:
        model ([`PeftModelForConfidence`]): A model from [`AutoModelForConfidence`].
        tokenizer (*optional*): Defaults to the model's own tokenizer.
        threshold (`float`, *optional*): Overrides the model's decision threshold.
    """

    _load_tokenizer = False  # the confidence model carries the tokenizer its prompts were rendered with
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    def __init__(self, model: Any, tokenizer: Any = None, **kwargs: Any) -> None:
        if not isinstance(model, (PeftModelForConfidence, ForConfidenceMixin)):
            raise TypeError(
                f"The {TASK!r} pipeline needs a model from AutoModelForConfidence, got {type(model).__name__}."
            )
        if model.confidence_config is None:
            raise ValueError(UNKNOWN_CONFIDENCE_CONFIG)
        tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        if tokenizer is None:
            raise ValueError("The confidence model has no tokenizer; pass `tokenizer=`.")
        super().__init__(model, tokenizer=ensure_pad_token(tokenizer), **kwargs)

    def _sanitize_parameters(self, threshold: float | None = None, **kwargs: Any) -> tuple[dict, dict, dict]:
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(f"`threshold` must lie in [0, 1], got {threshold}.")
        return {}, {}, {"threshold": threshold}

    def preprocess(self, question: str) -> dict[str, torch.Tensor]:
        ids = encode_prompts([question], self.tokenizer, self.model.confidence_config)[0]
        return {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}

    def _forward(self, model_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"confidence": self.model(**model_inputs).confidence}

    def postprocess(self, model_outputs: dict[str, torch.Tensor], threshold: float | None = None) -> dict[str, Any]:
        confidence = float(model_outputs["confidence"].reshape(-1)[0])
        result: dict[str, Any] = {"confidence": confidence}
        threshold = threshold if threshold is not None else self.model.confidence_config.decision_threshold
        if threshold is not None:
            result["decision"] = "answer" if confidence >= threshold else "abstain"
        return result


class _PipelineAutoConfig(AutoConfig):
    """`AutoConfig` as `pipeline()` uses it, plus one fallback: for this task, the config of an embedded default base
    model that the Hub (and its cache) cannot provide is read from the offline copy [`AutoModelForConfidence`]
    loads. Every other call is `AutoConfig.from_pretrained` unchanged."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return AutoConfig.from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except OSError:
            name = pretrained_model_name_or_path
            if kwargs.get("_from_pipeline") != TASK or not isinstance(name, str) or name not in EMBEDDED_MODELS:
                raise
        kwargs.pop("revision", None)  # the adapter repository's revision, not the base model's
        path, _ = resolve_model_path(name)
        return AutoConfig.from_pretrained(path, *args, **kwargs)


def register_pipeline() -> None:
    """Register the `"confidence-estimation"` task with transformers' `pipeline()` (idempotent)."""
    if transformers.pipelines.AutoConfig is AutoConfig:  # see the module docstring
        transformers.pipelines.AutoConfig = _PipelineAutoConfig
    registered = PIPELINE_REGISTRY.supported_tasks.get(TASK)
    if registered is not None and registered.get("impl") is ConfidenceEstimationPipeline:
        return
    PIPELINE_REGISTRY.register_pipeline(
        TASK, pipeline_class=ConfidenceEstimationPipeline, pt_model=ConfidenceModelLoader, type="text"
    )
