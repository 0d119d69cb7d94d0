"""The feature layer: run only the decoder blocks the confidence head needs, and read its hidden state from a pass.

[`~elical_hf.settings.configuration.ConfidenceConfig.feature_layer`] names the hidden state the head reads as
transformers' `output_hidden_states` indexes them, for a backbone of `L` decoder blocks: `i` in `1 .. L - 1` is the
residual stream after the first `i` blocks, without the final norm; `L` is the final hidden state, after the final norm
(`last_hidden_state`). [`stop_after_layer`] makes a backbone call compute exactly that state and nothing past it
(scoring, training); [`last_position_states`] reads it from a full pass that runs on anyway (the gate's prefill,
whose answer needs every block).

Both change nothing for the final layer. Below it they need the backbone's decoder blocks in `backbone.layers` and its
final norm in `backbone.norm`, as every architecture of [`~elical_hf.models.modeling.CONFIDENCE_BACKBONES`] keeps them.

[`idle_adapters_off`] leaves out of a scoring pass the LoRA layers that add nothing (a fresh model's).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn


__all__ = ["blocks_with_lora", "decoder_blocks", "last_position_states", "num_layers", "stop_after_layer"]


def num_layers(backbone: Any) -> int:
    """The number of decoder blocks of `backbone` (its text config's `num_hidden_layers`)."""
    config = backbone.config
    return (config.get_text_config() if hasattr(config, "get_text_config") else config).num_hidden_layers


def decoder_blocks(backbone: Any) -> nn.ModuleList:
    """The decoder blocks of `backbone` (`backbone.layers`); one `ValueError` line where it keeps them elsewhere."""
    blocks = getattr(backbone, "layers", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ValueError(f"{type(backbone).__name__} keeps no decoder blocks in `.layers`: elical-hf reads a feature "
                         "layer below the final one only there (use the final layer, feature_layer=-1).")
    return blocks


@contextmanager
def stop_after_layer(backbone: Any, layer: int) -> Iterator[None]:
    """Within this context a call of `backbone` runs only its first `layer` decoder blocks, and its
    `last_hidden_state` is `hidden_states[layer]` of a full call: the residual stream after block `layer`, without the
    final norm (the final norm is left out only below the final layer). The KV cache, prefix attention, LoRA and
    gradient checkpointing work as in a full call; the cache holds the first `layer` blocks only. The blocks and the
    norm are swapped on the module itself, so another thread must not run the same backbone meanwhile (the library's
    server runs its model on one worker thread). `layer` is an index from 1 to [`num_layers`]."""
    if layer >= num_layers(backbone):
        yield
        return
    blocks, norm = decoder_blocks(backbone), getattr(backbone, "norm", None)
    if not isinstance(norm, nn.Module):
        raise ValueError(f"{type(backbone).__name__} keeps no final norm in `.norm`: elical-hf reads a feature layer "
                         "below the final one only there (use the final layer, feature_layer=-1).")
    backbone.layers, backbone.norm = blocks[:layer], nn.Identity()
    try:
        yield
    finally:
        backbone.layers, backbone.norm = blocks, norm


@contextmanager
def last_position_states(backbone: Any, layer: int) -> Iterator[list[torch.Tensor]]:
    """Within this context each call of `backbone` appends to the yielded list `hidden_states[layer][:, -1]` (the state
    of the last position of every row, at `layer` as in [`stop_after_layer`]) from a forward hook, while the call runs
    every block as usual: nothing past that one state per row is kept."""
    states: list[torch.Tensor] = []

    def keep(module: nn.Module, args: Any, output: Any) -> None:
        hidden = getattr(output, "last_hidden_state", None)
        if hidden is None:
            hidden = output[0] if isinstance(output, tuple) else output
        states.append(hidden[:, -1].clone())  # a copy: the pass's activations are not held on to

    target = backbone if layer >= num_layers(backbone) else decoder_blocks(backbone)[layer - 1]
    handle = target.register_forward_hook(keep)
    try:
        yield states
    finally:
        handle.remove()


def blocks_with_lora(backbone: Any) -> list[int]:
    """Indices (from 0) of the decoder blocks of `backbone` that hold a PEFT adapter layer (LoRA)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [index for index, block in enumerate(decoder_blocks(backbone))
            if any(isinstance(module, BaseTunerLayer) for module in block.modules())]


@contextmanager
def idle_adapters_off(model: torch.nn.Module) -> Iterator[None]:
    """For the block, switch off every LoRA layer inside `model` whose active adapters add exactly nothing: plain LoRA
    (no DoRA, no bias) whose `lora_B` is all zero, as in a fresh model or one whose head alone was trained. Such a
    layer adds a zero to its base layer's output, so the outputs are the same, without the adapters' matmuls and
    dtype casts (about half of a bf16 forward pass of SmolLM2-135M). Only where gradients are off (under `no_grad` or
    `inference_mode`), since they would no longer reach those adapters. Each layer's switch is restored after."""
    from peft.tuners.lora import Linear as LoraLinear

    idle = [] if torch.is_grad_enabled() else [
        module for module in model.modules() if isinstance(module, LoraLinear) and not module.disable_adapters
        and not module.merged and _adds_nothing(module)]
    try:
        for layer in idle:
            layer._disable_adapters = True  # not enable_adapters(False), which also freezes the adapters' weights
        yield
    finally:
        for layer in idle:
            layer._disable_adapters = False


def _adds_nothing(layer: Any) -> bool:
    adapters = [name for name in layer.active_adapters if name in layer.lora_A]
    return all(name not in layer.lora_variant and not layer.lora_bias.get(name, False)
               and not bool(layer.lora_B[name].weight.any()) for name in adapters)
