"""Export a confidence model as a one-label sequence classifier: the form serving engines load.

The EliCal confidence is `sigmoid(w . h + b)`, `h` the final hidden state (after the final norm) of the prompt's last
token. A `*ForSequenceClassification` checkpoint with one label computes exactly that: last-token pooling, a `score`
layer, and the sigmoid that vLLM's pooling runner applies to a one-label classifier (`vllm serve MODEL --runner
pooling`, `POST /classify`). [`export_confidence_model`] merges the LoRA weights into the base weights, names the head
`score` (weight and bias), and writes:

- `model.safetensors` and `config.json` (`architectures: ["<Arch>ForSequenceClassification"]`, `num_labels: 1`),
- the tokenizer with the chat template the confidence was trained with,
- `elical_confidence.json`: `exported_from` and `confidence_config` (prompt template, system prompt, the saved
  thresholds and their guarantee), which renders the prompts an engine scores ([`export_prompt_ids`]),
- a `README.md` model card saying how to serve it and what the number means.

Only exact exports are written: a head that is not one linear layer, a middle `feature_layer` (its hidden state has
no final norm, which a sequence classifier always applies), another pooling or activation, or a 4-bit backbone (its
merged weights would not be the weights it scored with) is refused in one line saying why.

transformers' own `*ForSequenceClassification` classes have no bias in `score`: loaded there, the file's
`score.bias` is reported as unexpected and dropped. vLLM loads it ([`as_seq_cls_model`'s `score.bias`]).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch


__all__ = ["EXPORT_CONFIG_NAME", "EXPORT_FORMS", "export_confidence_model", "export_problem", "export_prompt_ids",
           "load_export"]

EXPORT_CONFIG_NAME = "elical_confidence.json"
"""The exported folder's confidence config (not `confidence_config.json`: the export is not an adapter folder)."""


def export_problem(model: Any) -> str | None:
    """Why `model` (a loaded confidence model) cannot be exported as an exact sequence classifier, or `None`."""
    from ..models.feature_layer import num_layers

    config, inner = model.confidence_config, model.get_base_model()
    backbone = getattr(inner, inner.base_model_prefix)
    layers = num_layers(backbone)
    if config.head_type != "linear":
        return f"its head is {config.head_type!r}, not one linear layer: a classifier's `score` cannot hold it"
    if config.pooling != "last_token" or config.head_activation != "sigmoid":
        return (f"it pools by {config.pooling!r} with a {config.head_activation!r} head; an engine's one-label "
                "classifier pools the last token and applies a sigmoid")
    if model.feature_layer_index != layers:
        return (f"its head reads layer {model.feature_layer_index} of {layers}, and a sequence classifier reads the "
                "final layer after the final norm; a model truncated at that layer would still apply the norm, so no "
                "exported model gives the same number")
    if getattr(inner, "is_loaded_in_4bit", False) or getattr(inner.config, "quantization_config", None):
        return "its backbone is quantized (4-bit): merging LoRA into dequantized weights changes the confidences"
    architectures = getattr(inner.config, "architectures", None) or []
    if not architectures or not str(architectures[0]).endswith("ForCausalLM"):
        return f"its base config names no `*ForCausalLM` architecture ({architectures}) to derive a classifier from"
    return None


EXPORT_FORMS = ("merged", "lora", "base")
"""What [`export_confidence_model`] writes: `"merged"`, one classifier (LoRA merged, the head as `score`); `"lora"`, the
LoRA and the head as a PEFT adapter in vLLM's classification form (`modules_to_save: ["score"]`), served on `"base"`,
the base model as a one-label classifier (its `score` zero: the adapters bring theirs)."""


def export_confidence_model(
    model: str | os.PathLike | Any,
    output_dir: str | os.PathLike,
    *,
    form: str = "merged",
    overwrite: bool = False,
    **load_kwargs: Any,
) -> str:
    """
    Write `model` as a one-label `*ForSequenceClassification` checkpoint in float32 (see the module docstring), or as
    a classification LoRA adapter with the base classifier it is served on.

    Args:
        model (`str`, `os.PathLike` or a loaded confidence model): A saved confidence model (folder or Hub id), or
            one loaded with [`AutoModelForConfidence`] (it is not changed: the export works on a copy).
        output_dir (`str` or `os.PathLike`): The export folder: new, or (with `overwrite`) replaced as a whole once
            everything is written.
        form (`str`, *optional*, defaults to `"merged"`): One of [`EXPORT_FORMS`]: `"merged"` (one checkpoint,
            `vllm serve OUT --runner pooling`), `"lora"` (an adapter for `vllm serve BASE --runner pooling
            --enable-lora --lora-modules NAME=OUT`) or `"base"` (that `BASE`, once for all the adapters of one base).
        overwrite (`bool`, *optional*, defaults to `False`): Replace an existing non-empty `output_dir`.
        load_kwargs: Passed to [`AutoModelForConfidence.from_pretrained`] when `model` is a name.

    Returns:
        `str`: `output_dir`.

    Raises:
        `ValueError`: a model that cannot be exported exactly ([`export_problem`]), an unknown `form`, an output over
        the model's own folder, or an existing non-empty `output_dir` without `overwrite`.
    """
    import copy

    from ..utils.atomic import atomic_folder, atomic_write_json
    from ..models.auto import AutoModelForConfidence
    from ..utils.files import check_output_extension, refuse_output_over_inputs

    if form not in EXPORT_FORMS:
        raise ValueError(f"Unknown export form {form!r}; choose one of {', '.join(EXPORT_FORMS)}.")
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    refuse_output_over_inputs(output_dir, {"MODEL": source}, "--output_dir")
    check_output_extension(output_dir, None, "--output_dir")
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        raise ValueError(f"--output_dir {os.fspath(output_dir)} is not empty; pass --overwrite_output_dir to replace "
                         "it.")
    if source is not None:
        model = AutoModelForConfidence.from_pretrained(source, dtype=torch.float32, **load_kwargs)
    problem = export_problem(model)
    if problem is not None:
        raise ValueError(f"{source or 'This model'} cannot be exported as a sequence classifier: {problem}.")
    work = (model if source is not None else copy.deepcopy(model)).float()
    confidence, tokenizer = model.confidence_config, model.tokenizer
    with atomic_folder(output_dir) as staging:
        if form == "lora":
            _write_adapter(work, staging)
        else:
            _write_classifier(work, staging, tokenizer, zero_score=form == "base")
        tokenizer.save_pretrained(staging)
        atomic_write_json(staging / EXPORT_CONFIG_NAME, {"exported_from": source, "form": form,
                                                         "confidence_config": confidence.to_dict()})
        rank = model.peft_config[model.active_adapter].r
        (staging / "README.md").write_text(_card(confidence, form, source, rank), encoding="utf-8")
    return os.fspath(output_dir)


def _write_classifier(model: Any, folder: Any, tokenizer: Any, zero_score: bool) -> None:
    """The backbone (the LoRA merged into it, or left out for the base) and the head as `score` (zero for the base)
    as `model.safetensors` and `config.json`."""
    import copy

    from safetensors.torch import save_file

    inner = model.unload() if zero_score else model.merge_and_unload()
    backbone = getattr(inner, inner.base_model_prefix)
    state = {f"{inner.base_model_prefix}.{name}": tensor.contiguous() for name, tensor in backbone.state_dict().items()}
    head = inner.confidence_head
    state["score.weight"], state["score.bias"] = (
        (torch.zeros_like(head.weight), torch.zeros_like(head.bias)) if zero_score
        else (head.weight.detach().contiguous(), head.bias.detach().contiguous()))
    config = copy.deepcopy(inner.config)
    config.architectures = [str(config.architectures[0])[: -len("ForCausalLM")] + "ForSequenceClassification"]
    config.num_labels, config.id2label, config.label2id = 1, {0: "confidence"}, {"confidence": 0}
    config.tie_word_embeddings = False  # no LM head: nothing to tie
    config.dtype = "float32"
    if config.pad_token_id is None and tokenizer.pad_token_id is not None:
        config.pad_token_id = tokenizer.pad_token_id
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(folder)


def _write_adapter(model: Any, folder: Any) -> None:
    """The LoRA weights as they are and the head as `score` (`modules_to_save`), in PEFT's file layout: the form
    vLLM's per-request LoRA loads for a classification model."""
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    from ..utils.atomic import atomic_write_json
    from ..models.auto import HEAD_MODULE

    prefix = f"base_model.model.{HEAD_MODULE}."
    state = {(f"base_model.model.score.{name[len(prefix):]}" if name.startswith(prefix) else name): tensor.contiguous()
             for name, tensor in get_peft_model_state_dict(model, save_embedding_layers=False).items()}
    settings = model.peft_config[model.active_adapter].to_dict()
    settings.update(modules_to_save=["score"], task_type="SEQ_CLS", auto_mapping=None)
    save_file(state, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    atomic_write_json(folder / "adapter_config.json", {key: sorted(value) if isinstance(value, set) else value
                                                        for key, value in settings.items()})


def load_export(export_dir: str | os.PathLike) -> tuple[Any, Any, str]:
    """The confidence config, the tokenizer and the form of a folder `elical-hf export` wrote (what renders the prompts
    an engine serving it scores); a `ValueError` for a folder that is not one."""
    import json

    from ..settings.configuration import ConfidenceConfig
    from ..data.encoding import load_tokenizer

    path = os.path.join(export_dir, EXPORT_CONFIG_NAME)
    if not os.path.isfile(path):
        raise ValueError(f"{os.fspath(export_dir)} holds no {EXPORT_CONFIG_NAME}: it is not a folder `elical-hf "
                         "export` wrote for an engine (that folder holds the prompts and thresholds).")
    with open(path, encoding="utf-8") as handle:
        saved = json.load(handle)
    return ConfidenceConfig.from_dict(saved["confidence_config"]), load_tokenizer(export_dir), saved.get("form", "merged")


def export_prompt_ids(questions: Sequence[str], export_dir: str | os.PathLike) -> list[list[int]]:
    """The token ids of the prompts an engine serving the export at `export_dir` scores for `questions` (the saved
    template, system prompt and chat template, as the confidence was trained with): send them as `/classify`'s
    `input`, so that the engine does not tokenize again."""
    from ..data.encoding import encode_prompts

    config, tokenizer, _ = load_export(export_dir)
    return encode_prompts(list(questions), tokenizer, config)


def _card(config: Any, form: str, source: str | None, rank: int) -> str:
    """The export's model card: what the number is, how to serve it, how to render its prompts (`rank`: the LoRA's,
    for vLLM's `--max-lora-rank`, a power of two from 8)."""
    threshold = config.decision_threshold
    rule = (f"The model's saved decision threshold is {threshold:g}: answer when the confidence is at least that, "
            "else abstain." if threshold is not None else "No decision threshold was saved with the model.")
    what, serve, model = {
        "merged": ("a one-label sequence classifier (LoRA merged, the head as `score`)",
                   "vllm serve THIS_FOLDER --runner pooling --dtype float32", "THIS_FOLDER"),
        "lora": ("a classification LoRA adapter (the LoRA and the head as `score`, `modules_to_save`), served on the "
                 "base classifier that `elical-hf export MODEL --form base` writes",
                 "vllm serve BASE_FOLDER --runner pooling --dtype float32 --enable-lora --max-lora-rank "
                 f"{max(8, 1 << (rank - 1).bit_length())} --lora-modules elical=THIS_FOLDER", "elical"),
        "base": ("the base model as a one-label sequence classifier whose `score` is zero (0.5 for every prompt): "
                 "the classification LoRA adapters of its confidence models (`--form lora`) bring their heads",
                 "vllm serve THIS_FOLDER --runner pooling --dtype float32 --enable-lora --lora-modules "
                 "NAME=ADAPTER_FOLDER ...", "NAME"),
    }[form]
    return f"""---
library_name: {"peft" if form == "lora" else "transformers"}
pipeline_tag: text-classification
tags: [elical-hf, confidence, honesty]
base_model: {config.base_model_name_or_path or "unknown"}
---

# EliCal confidence, exported for serving engines

{what}, exported by `elical-hf export --form {form}` from `{source or "a confidence model"}`. The one output, after a
sigmoid, is the model's confidence, *before* answering, that it answers the question correctly (EliCal:
"Annotation-Efficient Universal Honesty Alignment"). {rule}

The number is only the trained confidence when the prompt is rendered as in training: the question inside the
prompt template and chat template saved in `{EXPORT_CONFIG_NAME}`, scored at the prompt's last token. Render it with
elical-hf and send the token ids:

```python
from elical_hf.publishing.export import export_prompt_ids
ids = export_prompt_ids(["Who wrote Hamlet?"], "THIS_FOLDER")
# POST http://HOST:8000/classify  {{"model": "{model}", "input": ids}}  -> data[i].probs[0]
```

Serve with vLLM's pooling runner: `{serve}`. vLLM loads `score.bias`; transformers'
`AutoModelForSequenceClassification` drops it (its `score` has no bias): add `score.bias` to its logit before the
sigmoid.
"""
