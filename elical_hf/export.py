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


__all__ = ["EXPORT_CONFIG_NAME", "export_confidence_model", "export_problem", "export_prompt_ids"]

EXPORT_CONFIG_NAME = "elical_confidence.json"
"""The exported folder's confidence config (not `confidence_config.json`: the export is not an adapter folder)."""


def export_problem(model: Any) -> str | None:
    """Why `model` (a loaded confidence model) cannot be exported as an exact sequence classifier, or `None`."""
    from .feature_layer import num_layers

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


def export_confidence_model(
    model: str | os.PathLike | Any,
    output_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    **load_kwargs: Any,
) -> str:
    """
    Write `model` as a one-label `*ForSequenceClassification` checkpoint in float32 (see the module docstring).

    Args:
        model (`str`, `os.PathLike` or a loaded confidence model): A saved confidence model (folder or Hub id), or
            one loaded with [`AutoModelForConfidence`] (it is not changed: the export merges a copy).
        output_dir (`str` or `os.PathLike`): The export folder: new, or (with `overwrite`) replaced as a whole once
            everything is written.
        overwrite (`bool`, *optional*, defaults to `False`): Replace an existing non-empty `output_dir`.
        load_kwargs: Passed to [`AutoModelForConfidence.from_pretrained`] when `model` is a name.

    Returns:
        `str`: `output_dir`.

    Raises:
        `ValueError`: a model that cannot be exported exactly ([`export_problem`]), an output over the model's own
        folder, or an existing non-empty `output_dir` without `overwrite`.
    """
    import copy

    from safetensors.torch import save_file

    from .atomic import atomic_folder, atomic_write_json
    from .auto import AutoModelForConfidence
    from .files import check_output_extension, refuse_output_over_inputs

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
    merged = (model if source is not None else copy.deepcopy(model)).float().merge_and_unload()
    backbone = getattr(merged, merged.base_model_prefix)
    state = {f"{merged.base_model_prefix}.{name}": tensor.contiguous()
             for name, tensor in backbone.state_dict().items()}
    head = merged.confidence_head
    state.update({"score.weight": head.weight.detach().contiguous(), "score.bias": head.bias.detach().contiguous()})
    config = copy.deepcopy(merged.config)
    architecture = str(config.architectures[0])
    config.architectures = [architecture[: -len("ForCausalLM")] + "ForSequenceClassification"]
    config.num_labels, config.id2label, config.label2id = 1, {0: "confidence"}, {"confidence": 0}
    config.tie_word_embeddings = False  # no LM head: nothing to tie
    config.dtype = "float32"
    tokenizer = model.tokenizer
    if config.pad_token_id is None and tokenizer.pad_token_id is not None:
        config.pad_token_id = tokenizer.pad_token_id
    confidence = model.confidence_config
    with atomic_folder(output_dir) as staging:
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        atomic_write_json(staging / EXPORT_CONFIG_NAME, {"exported_from": source, "confidence_config": confidence.to_dict()})
        (staging / "README.md").write_text(_card(confidence, config.architectures[0], source), encoding="utf-8")
    return os.fspath(output_dir)


def export_prompt_ids(questions: Sequence[str], export_dir: str | os.PathLike) -> list[list[int]]:
    """The token ids of the prompts an engine serving the export at `export_dir` scores for `questions` (the saved
    template, system prompt and chat template, as the confidence was trained with): send them as `/classify`'s
    `input`, so that the engine does not tokenize again."""
    import json

    from .configuration import ConfidenceConfig
    from .encoding import encode_prompts, load_tokenizer

    with open(os.path.join(export_dir, EXPORT_CONFIG_NAME), encoding="utf-8") as handle:
        config = ConfidenceConfig.from_dict(json.load(handle)["confidence_config"])
    return encode_prompts(list(questions), load_tokenizer(export_dir), config)


def _card(config: Any, architecture: str, source: str | None) -> str:
    """The export's model card: what the number is, how to serve it, how to render its prompts."""
    threshold = config.decision_threshold
    rule = (f"The model's saved decision threshold is {threshold:g}: answer when the confidence is at least that, "
            "else abstain." if threshold is not None else "No decision threshold was saved with the model.")
    return f"""---
library_name: transformers
pipeline_tag: text-classification
tags: [elical-hf, confidence, honesty]
base_model: {config.base_model_name_or_path or "unknown"}
---

# EliCal confidence, exported as a sequence classifier

`{architecture}` with one label, exported by `elical-hf export` from `{source or "a confidence model"}`. Its one
output, after a sigmoid, is the model's confidence, *before* answering, that it answers the question correctly
(EliCal: "Annotation-Efficient Universal Honesty Alignment"). {rule}

The number is only the trained confidence when the prompt is rendered as in training: the question inside the
prompt template and chat template saved in `{EXPORT_CONFIG_NAME}`, scored at the prompt's last token. Render it with
elical-hf and send the token ids:

```python
from elical_hf.export import export_prompt_ids
ids = export_prompt_ids(["Who wrote Hamlet?"], "THIS_FOLDER")
# POST http://HOST:8000/classify  {{"model": "THIS_FOLDER", "input": ids}}  -> data[i].probs[0]
```

Serve with vLLM's pooling runner: `vllm serve THIS_FOLDER --runner pooling --dtype float32`. vLLM loads
`score.bias`; transformers' `AutoModelForSequenceClassification` drops it (its `score` has no bias): add
`score.bias` to its logit before the sigmoid.
"""
