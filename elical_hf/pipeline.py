"""The `"confidence-estimation"` transformers pipeline task, added to `pipeline()` by [`register_pipeline`].

```python
>>> import elical_hf
>>> from transformers import pipeline
>>> elical_hf.register_pipeline()  # once per process; importing elical_hf alone changes nothing in transformers
>>> scorer = pipeline("confidence-estimation", model="my-confidence-model")  # a folder, a Hub repo or a model
>>> scorer("Who wrote Hamlet?")
{'confidence': 0.83, 'decision': 'answer'}
```

`pipeline()` only knows how to build transformers model classes. For this task it is given a loader whose
`from_pretrained` calls [`AutoModelForConfidence.from_pretrained`]; a failure there is raised as
[`ConfidencePipelineLoadError`] so that `pipeline()` does not silently fall back to the base architecture's class.

Given a name, `pipeline()` first reads the `config.json` of the base model that the adapter names, with
`transformers.AutoConfig`, before any code of this task runs. When the base model is the embedded default and neither
the Hub nor its cache has it (see [`~elical_hf.models.default_model.resolve_model_path`]), that read fails: build the
pipeline with [`ConfidenceEstimationPipeline.from_pretrained`] instead (or pass `pipeline()` a model loaded with
[`AutoModelForConfidence`]), which loads the model first, from the same offline copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from transformers import Pipeline
from transformers.pipelines import PIPELINE_REGISTRY

from .models.auto import HUB_KWARGS, AutoModelForConfidence, PeftModelForConfidence
from .data.encoding import encode_prompts, ensure_pad_token
from .utils.files import looks_local
from .gate import answer_questions, check_threshold, decide, thresholds_for
from .models.modeling import UNKNOWN_CONFIDENCE_CONFIG, ForConfidenceMixin
from .models.saved_model import find_saved_model


TASK = "confidence-estimation"
_LOAD_KWARGS = (*HUB_KWARGS, "dtype", "device_map", "attn_implementation")  # what pipeline() passes on to loading


class ConfidencePipelineLoadError(Exception):
    """`pipeline("confidence-estimation", model=<name>)` could not load `<name>` as a confidence model."""


def load_confidence_model(name: str, **kwargs: Any) -> PeftModelForConfidence:
    """[`AutoModelForConfidence.from_pretrained`] of a *saved* confidence model; anything else (a base model, a
    failed load) raises [`ConfidencePipelineLoadError`] with the cause."""
    try:
        if looks_local(name) and not os.path.exists(name):  # never looked up on the Hub
            raise FileNotFoundError(2, "No such model folder", name)
        hub_options = {key: kwargs[key] for key in HUB_KWARGS if key in kwargs}
        if find_saved_model(name, **hub_options) is None:
            raise ValueError(
                "it is not a saved confidence model (no confidence_config.json). The pipeline scores questions "
                "with a trained model; to start one from a base model, use AutoModelForConfidence and train it"
            )
        return AutoModelForConfidence.from_pretrained(name, **kwargs)
    except Exception as error:  # noqa: BLE001 - re-raised with its cause, so pipeline() does not try other classes
        raise ConfidencePipelineLoadError(
            f"Could not load {name!r} as a confidence model: {type(error).__name__}: {error}"
        ) from error


class ConfidenceModelLoader:
    """What `pipeline()` calls to build the model from a name: [`load_confidence_model`], given the loading options
    among the keyword arguments `pipeline()` passes."""

    @classmethod
    def from_pretrained(cls, name: str, **kwargs: Any) -> PeftModelForConfidence:
        options = {key: kwargs[key] for key in _LOAD_KWARGS if kwargs.get(key) is not None}
        if "revision" in options:  # pipeline() passes a ResolvedRevision of the *base* model: keep only the name
            options["revision"] = str(options["revision"])
        return load_confidence_model(name, **options)


class ConfidenceEstimationPipeline(Pipeline):
    r"""
    Scores questions with a confidence model: how likely the model is to answer each one correctly, before it
    answers.

    Call it with a question or a list of questions; each gives `{"confidence": float}`, plus
    `"decision": "answer" | "retrieve" | "abstain"` when a threshold is known (the model's
    `confidence_config.decision_threshold` and `retrieve_threshold`, those of a `domain=`, or `threshold=` at call
    time).

    With `generate=True` it is the gate ([`~elical_hf.gate.answer_questions`]): each question also gets `"answer"`,
    the unadapted base model's greedy answer when the decision is to answer (else `None`), and `"context"` (what a
    `retrieve=` callback returned for a retrieve decision, answered with it).

    Args:
        model ([`PeftModelForConfidence`]): A model from [`AutoModelForConfidence`].
        tokenizer (*optional*): Defaults to the model's own tokenizer.
        threshold (`float`, *optional*): Overrides the model's decision threshold.
        domain (`str`, *optional*): The questions' domain: they are decided with its saved thresholds
            ([`~elical_hf.gate.thresholds_for`], `elical-hf threshold --by dataset`); an unknown domain is refused.
        generate (`bool`, *optional*, defaults to `False`): Answer the questions the gate lets through.
        retrieve (`Callable[[str], str | None]`, *optional*), max_new_tokens (`int`, *optional*, defaults to 64):
            With `generate=True`, see [`~elical_hf.gate.answer_questions`].
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

    @classmethod
    def from_pretrained(
        cls, model_name_or_path: str | os.PathLike, *, model_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> ConfidenceEstimationPipeline:
        """
        Load a saved confidence model and build the pipeline around it, without `transformers.pipeline()`.

        Unlike `pipeline("confidence-estimation", model=name)`, nothing of the base model is read before
        [`AutoModelForConfidence`] loads it, so this also works when the base is the embedded default and only its
        offline copy is available. It needs no [`register_pipeline`].

        Args:
            model_name_or_path (`str` or `os.PathLike`):
                A folder or Hub repo written by `save_pretrained` / `push_to_hub`.
            model_kwargs (`dict`, *optional*):
                Passed to [`AutoModelForConfidence.from_pretrained`] (`revision`, `token`, `dtype`, `device_map`, ...).
            kwargs:
                Passed to the pipeline (`device`, `batch_size`, `threshold`, ...).
        """
        model = load_confidence_model(os.fspath(model_name_or_path), **(model_kwargs or {}))
        kwargs.setdefault("task", TASK)
        return cls(model, **kwargs)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        questions = [inputs] if isinstance(inputs, str) else inputs
        if isinstance(questions, (list, tuple)):
            if not questions:
                raise ValueError("The pipeline got an empty list of questions: pass a question or a non-empty list.")
            for row, question in enumerate(questions):
                if not isinstance(question, str) or not question.strip():
                    raise ValueError(f"Questions must be non-empty strings; row {row} is {question!r}.")
        return super().__call__(inputs, *args, **kwargs)

    def _sanitize_parameters(
        self,
        threshold: float | None = None,
        generate: bool | None = None,
        retrieve: Callable[[str], str | None] | None = None,
        max_new_tokens: int | None = None,
        domain: str | None = None,
        **kwargs: Any,
    ) -> tuple[dict, dict, dict]:
        if threshold is not None:
            threshold = check_threshold(threshold)
        if domain is not None:
            thresholds_for(self.model.confidence_config, domain)  # an unknown domain: one line, before any scoring
        # Only what is given: a call without an option keeps the one given when the pipeline was built.
        given = {"threshold": threshold, "generate": generate, "retrieve": retrieve, "max_new_tokens": max_new_tokens,
                 "domain": domain}
        forward = {key: value for key, value in given.items() if value is not None}
        post = {key: value for key, value in (("threshold", threshold), ("domain", domain)) if value is not None}
        return {}, forward, post

    def preprocess(self, question: str) -> dict[str, Any]:
        ids = encode_prompts([question], self.tokenizer, self.model.confidence_config)[0]
        return {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
                "question": question}

    def _forward(self, model_inputs: dict[str, Any], generate: bool = False, **gate: Any) -> dict[str, Any]:
        if generate:  # `question` is a list when the pipeline batches (`batch_size > 1`)
            question = model_inputs["question"]
            gated = answer_questions(self.model, question, **gate)
            return {"gated": gated[0] if isinstance(question, str) else gated}
        return {"confidence": self.model(input_ids=model_inputs["input_ids"],
                                         attention_mask=model_inputs["attention_mask"]).confidence}

    def postprocess(
        self, model_outputs: dict[str, Any], threshold: float | None = None, domain: str | None = None
    ) -> dict[str, Any]:
        if "gated" in model_outputs:
            return {key: value for key, value in model_outputs["gated"].items() if key != "question"}
        confidence = float(model_outputs["confidence"].reshape(-1)[0])
        result: dict[str, Any] = {"confidence": confidence}
        saved, retrieve_threshold = thresholds_for(self.model.confidence_config, domain)
        threshold = threshold if threshold is not None else saved
        if threshold is not None:
            result["decision"] = decide(confidence, threshold, retrieve_threshold)
        return result


def register_pipeline() -> None:
    """Add the `"confidence-estimation"` task to transformers' `pipeline()` (idempotent).

    Call it once before `pipeline("confidence-estimation", ...)`; importing `elical_hf` does not (it changes nothing
    outside the package). It only adds this task to `transformers.pipelines.PIPELINE_REGISTRY`: no transformers
    object is replaced.
    """
    registered = PIPELINE_REGISTRY.supported_tasks.get(TASK)
    if registered is not None and registered.get("impl") is ConfidenceEstimationPipeline:
        return
    PIPELINE_REGISTRY.register_pipeline(
        TASK, pipeline_class=ConfidenceEstimationPipeline, pt_model=ConfidenceModelLoader, type="text"
    )
