"""What every layer knows before the answer: the last prompt token's hidden state at each layer, cached on disk.

The confidence head reads one hidden state of the last prompt token (the final layer's, as in the paper). To see which
layer carries the most signal, and to train the pre-generation probes of [`elical_hf.evaluation.probes`] on any layer,
[`cache_layer_features`] runs the model once over the questions and keeps that token's state at every chosen layer:
one float16 `.npy` file per layer, written batch by batch through a memory map, so memory holds one batch of every
chosen layer, never every layer of every question.

Layers are indexed as [`~elical_hf.settings.configuration.ConfidenceConfig.feature_layer`] indexes them (transformers'
`output_hidden_states`): `i` in `1 .. L - 1` is the residual stream after decoder block `i` (before the final norm),
`L` (also -1) the final normed state, what the paper's head reads; negative indices count from the end. The embedding
output (0) is left out: a question prompt's last token is the template's, the same for every question.

What it weighs: a layer's file holds `questions x hidden_size x 2` bytes. For 560k questions on a 7B model (32 layers
of 4096 values), every layer is 560,000 x 32 x 4096 x 2 bytes = 147 GB (137 GiB) on disk, 4.6 GB a layer (with the
embeddings, as 33 hidden states, it would be 151 GB). Computing it holds one batch (e.g. 16 x 32 x 4096 float32
values, 8.4 MB, plus the hidden states of that batch's forward pass, which `output_hidden_states` keeps for every
layer: 16 prompts x 100 tokens x 33 x 4096 in bf16, 0.4 GB); a probe then reads one layer (4.6 GB, 9.2 GB once in
float32). Ask only for the layers you need (`layers=`): the model then also runs only the blocks up to the deepest.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..utils.loading import unwrap_peft


__all__ = ["FEATURE_DTYPE", "LayerFeatures", "cache_layer_features", "features_fingerprint", "resolve_layers"]

FEATURE_DTYPE = np.float16
"""How cached features are stored (half the bytes of float32; a probe computes in float32)."""

_META = "features.json"


def resolve_layers(layers: int | Sequence[int] | None, num_hidden_layers: int, option: str = "--layers") -> list[int]:
    """The hidden-state indices `layers` names in a backbone of `num_hidden_layers` blocks (all of them, `1 ..
    num_hidden_layers`, when `None`), in increasing order; one `ValueError` line naming the valid range for an index
    outside it ([`~elical_hf.settings.configuration.resolve_feature_layer`], the one rule for a layer index)."""
    from ..settings.configuration import resolve_feature_layer

    if layers is None:
        return list(range(1, num_hidden_layers + 1))
    chosen = [layers] if isinstance(layers, int) else list(layers)
    if not chosen:
        raise ValueError(f"{option}: name at least one layer.")
    resolved = set()
    for layer in chosen:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
            raise ValueError(f"{option}: a layer is an integer, got {layer!r}.")
        try:
            resolved.add(resolve_feature_layer(int(layer), num_hidden_layers))
        except ValueError as error:
            raise ValueError(f"{option}: {error}") from None
    return sorted(resolved)


@dataclass
class LayerFeatures:
    """The cached features of one model on one list of questions.

    Args:
        folder (`str`): Where the layer files lie (`layer-<index>.npy`).
        layers (`list[int]`): The hidden-state indices cached.
        num_questions (`int`), hidden_size (`int`): Each layer's array is `(num_questions, hidden_size)`.
    """

    folder: str
    layers: list[int]
    num_questions: int
    hidden_size: int

    def __getitem__(self, layer: int) -> np.ndarray:
        """Layer `layer`'s features, one row per question in input order: a read-only float16 memory map."""
        if layer not in self.layers:
            raise KeyError(f"layer {layer} is not cached (cached: {self.layers}).")
        return np.load(_layer_path(self.folder, layer), mmap_mode="r")


def _layer_path(folder: str, layer: int) -> str:
    return os.path.join(folder, f"layer-{layer:03d}.npy")


HASH_CHUNK = 1 << 24
"""Bytes of a weight copied to the CPU at a time while it is hashed ([`features_fingerprint`])."""


def features_fingerprint(model: Any, encoded: Sequence[Sequence[int]]) -> str:
    """A key for the features of `model` on these token ids: the backbone's config, every weight whole (its name,
    shape, dtype and bytes, streamed through the hash a slice at a time), the LoRA weights and scaling that change
    the features (an adapter whose `lora_B` is all zero, as a fresh or a `use_lora=False` one, changes nothing and is
    left out) and the prompts' token ids. The head is left out: it does not change the features. Equal keys: the same
    features, up to the device's rounding; two models that differ anywhere in a weight get different keys (hashing
    the weights costs far less than the forward pass it saves)."""
    inner = unwrap_peft(model)
    digest = hashlib.sha256()
    config = {key: value for key, value in inner.config.get_text_config().to_dict().items()
              if key not in ("_name_or_path", "transformers_version", "_commit_hash")}  # where it lies changes nothing
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    parameters = dict(inner.named_parameters())
    for name, parameter in parameters.items():
        if name.startswith("confidence_head") or "lora_A" in name:
            continue
        if "lora_B" in name:
            if not bool(parameter.detach().any()):
                continue
            partner = name.replace("lora_B", "lora_A")
            hashed = [(name, parameter), (partner, parameters[partner])]
        else:
            hashed = [(name, parameter)]
        for key, tensor in hashed:
            _hash_tensor(digest, key, tensor)
    for name, module in inner.named_modules():  # a LoRA's output is scaled by alpha / r, which no weight holds
        scaling = getattr(module, "scaling", None)
        if isinstance(scaling, dict) and scaling:
            digest.update(f"{name}{sorted(scaling.items())}{getattr(module, 'disable_adapters', False)}".encode())
    digest.update(json.dumps([list(map(int, ids)) for ids in encoded]).encode())
    return digest.hexdigest()[:20]


def _hash_tensor(digest: Any, key: str, tensor: Any) -> None:
    """Feed `tensor`'s name, shape, dtype and bytes to `digest`, [`HASH_CHUNK`] bytes at a time (a weight on a GPU
    is copied to the CPU one slice at a time, never whole)."""
    import torch

    flat = tensor.detach().reshape(-1)
    digest.update(f"{key}{tuple(tensor.shape)}{flat.dtype}".encode())
    step = max(1, HASH_CHUNK // max(1, flat.element_size()))
    for start in range(0, flat.numel(), step):
        digest.update(flat[start:start + step].to("cpu").contiguous().view(torch.uint8).numpy())


def cache_layer_features(
    model: Any,
    questions: Sequence[str],
    cache_dir: str | os.PathLike,
    *,
    layers: int | Sequence[int] | None = None,
    batch_size: int = 16,
    tokenizer: Any | None = None,
    progress: bool = True,
) -> LayerFeatures:
    """
    The last prompt token's hidden state at each of `layers` for every question, cached under `cache_dir`.

    The prompts are rendered, tokenized and batched exactly as [`~ForConfidenceMixin.prompt_features`] does it (the
    model's template, longest first within a token budget, the shared prompt prefix run once per batch), so the final
    layer's features are what the head reads. Each layer goes to its own float16 `.npy` file, written through a memory
    map one batch at a time (memory: one batch x the chosen layers; the weight of a full cache is in the module
    docstring). The files lie in `cache_dir/<fingerprint>/` ([`features_fingerprint`] of the model and the prompts):
    a later call with the same model and questions reads the layers already there and computes only the missing ones
    (a second process meanwhile waits for the first: [`~elical_hf.utils.atomic.cache_lock`]), and a file appears only
    once complete (an interrupted run leaves none half-written).

    Args:
        model ([`PeftModelForConfidence`]): A confidence model (e.g. `AutoModelForConfidence.from_pretrained(base,
            use_lora=False)` for the frozen base model's features).
        questions (`list[str]`): The raw questions.
        cache_dir (`str`): The cache's folder (created).
        layers (`int` or `list[int]`, *optional*): Hidden-state indices (negative from the end); all by default.
        batch_size (`int`, *optional*, defaults to 16): At most this many questions per forward pass.
        tokenizer (*optional*): Defaults to the model's.
        progress (`bool`, *optional*, defaults to `True`): Show a progress bar.

    Returns:
        [`LayerFeatures`]: index it with a layer for a `(len(questions), hidden_size)` float16 array.

    Raises:
        `ValueError`: a layer out of range, no questions, an unknown template, or a state beyond float16's range.
    """
    from ..utils.atomic import atomic_write_json, cache_lock
    from ..data.encoding import encode_prompts
    from ..models.feature_layer import num_layers
    from ..models.modeling import UNKNOWN_CONFIDENCE_CONFIG

    inner = unwrap_peft(model)
    chosen = resolve_layers(layers, num_layers(getattr(inner, inner.base_model_prefix)))
    if inner.confidence_config is None:
        raise ValueError(UNKNOWN_CONFIDENCE_CONFIG)
    if isinstance(questions, str) or not questions:
        raise ValueError("cache_layer_features needs a non-empty list of questions.")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    tokenizer = tokenizer if tokenizer is not None else inner.tokenizer
    if tokenizer is None:
        raise ValueError("No tokenizer: pass `tokenizer=` or load the model with `AutoModelForConfidence`.")
    encoded = encode_prompts(list(questions), tokenizer, inner.confidence_config)
    folder = os.path.join(os.fspath(cache_dir), features_fingerprint(inner, encoded))
    hidden = int(inner.config.get_text_config().hidden_size)
    with cache_lock(folder):  # a second process with the same model and questions waits, then reads these files
        os.makedirs(folder, exist_ok=True)
        missing = [layer for layer in chosen if not _usable(_layer_path(folder, layer), len(encoded), hidden)]
        if missing:
            _compute(inner, encoded, missing, folder, hidden, batch_size, progress)
        done = sorted(int(name[len("layer-"):-len(".npy")]) for name in os.listdir(folder)
                      if name.startswith("layer-") and name.endswith(".npy"))
        atomic_write_json(os.path.join(folder, _META), {  # what the folder holds, for whoever finds it
            "model": getattr(inner.config, "_name_or_path", None), "questions": len(encoded), "hidden_size": hidden,
            "dtype": np.dtype(FEATURE_DTYPE).name, "layers": done})
    return LayerFeatures(folder, chosen, len(encoded), hidden)


def _usable(path: str, rows: int, hidden: int) -> bool:
    """Whether `path` is a complete layer file of the expected shape."""
    if not os.path.isfile(path):
        return False
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return array.shape == (rows, hidden) and array.dtype == FEATURE_DTYPE


def _compute(inner: Any, encoded: list[list[int]], layers: list[int], folder: str, hidden: int, batch_size: int,
             progress: bool) -> None:
    """Run the model over `encoded` and write `layers` to their files (each through a `.partial` file renamed once
    complete; the caller holds the folder's lock)."""
    import torch
    from tqdm.auto import tqdm

    from ..data.encoding import length_batches
    from ..models.modeling import PROMPT_BATCH_TOKENS
    from ..settings.prompts import shared_prefix_length

    partial = {layer: f"{_layer_path(folder, layer)}.partial" for layer in layers}
    arrays = {layer: np.lib.format.open_memmap(partial[layer], mode="w+", dtype=FEATURE_DTYPE,
                                               shape=(len(encoded), hidden)) for layer in layers}
    shared = shared_prefix_length(encoded) if inner.share_prompt_prefix else 0
    batches = length_batches([len(ids) for ids in encoded], batch_size, PROMPT_BATCH_TOKENS, shared)
    was_training = inner.training
    inner.eval()
    try:
        with torch.inference_mode():
            for batch in tqdm(batches, desc="Layer features", unit="batch", disable=not progress):
                states = _last_token_states(inner, [encoded[i] for i in batch], layers).float().cpu().numpy()
                for column, layer in enumerate(layers):
                    values = states[:, column].astype(FEATURE_DTYPE)
                    if not np.isfinite(values).all():
                        raise ValueError(f"Layer {layer}'s hidden states exceed float16's range (|x| > 65504) for "
                                         "some question: these features cannot be cached in float16.")
                    arrays[layer][batch] = values
        for layer in layers:
            arrays[layer].flush()
            del arrays[layer]
            os.replace(partial[layer], _layer_path(folder, layer))
    finally:
        inner.train(was_training)
        arrays.clear()
        for path in partial.values():
            if os.path.exists(path):
                os.remove(path)


def _last_token_states(inner: Any, sequences: list[list[int]], layers: list[int]) -> Any:
    """`(rows, len(layers), hidden_size)`: the last token's hidden state at each of `layers` (increasing), the rows'
    shared prefix run once ([`~elical_hf.models.kv_prefix.prefill_shared_prefix`], as [`~ForConfidenceMixin.
    pooled_hidden_state`] runs it) and no block past the deepest layer
    ([`~elical_hf.models.feature_layer.stop_after_layer`]: the states up to it are those of a full pass)."""
    import torch

    from ..models.feature_layer import stop_after_layer
    from ..models.kv_prefix import cache_kwarg, prefill_shared_prefix
    from ..models.modeling import last_token_indices
    from ..settings.prompts import shared_prefix_length

    backbone = getattr(inner, inner.base_model_prefix)
    name = cache_kwarg(backbone)

    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, cache: Any) -> Any:
        output = backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=True, output_hidden_states=True, **{name: cache})
        last = last_token_indices(attention_mask[:, -input_ids.shape[1]:])
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        return torch.stack([output.hidden_states[layer][rows, last] for layer in layers], dim=1)

    shared = shared_prefix_length(sequences) if inner.share_prompt_prefix else 0
    with stop_after_layer(backbone, layers[-1]):
        return prefill_shared_prefix(run, sequences, shared, inner.config, inner.device, padding_side="right").output
