"""The prompt prefix a batch shares, run once: one KV prefill for scoring, sampling and the gate.

Every question prompt starts with the same chat-template and instruction tokens ([`~elical_hf.settings.prompts.
shared_prefix_length`] decides how many are worth sharing). [`prefill_shared_prefix`] runs that prefix once into a
`DynamicCache`, repeats the cache for every row, then runs each row's own tokens after it, padded on the side the
caller needs (left for decoding, right for pooling the last prompt token): the same positions and attention as a full
forward pass over each whole prompt. [`cache_kwarg`] is the one rule for which keyword a model's `forward` takes its
cache under.

Used by [`~elical_hf.models.modeling.ForConfidenceMixin.pooled_hidden_state`] (scoring and training),
[`~elical_hf.signals.decoding.Decoder`] (sampling, completions) and [`~elical_hf.gate.BaseLanguageModel`] (the gate).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from ..utils.loading import unwrap_peft
from .prefix_attention import prefix_attention, supports_prefix_attention


__all__ = ["ReservedLayer", "SharedPrefill", "cache_kwarg", "forward_parameters", "position_ids_from_attention_mask",
           "prefill_shared_prefix", "reserve_positions"]

PADDING_SIDES = ("left", "right")


def forward_parameters(model: Any) -> Mapping[str, inspect.Parameter]:
    """The parameters of `model.forward` (of the wrapped model for a PEFT wrapper, whose own `forward` passes its
    keyword arguments on)."""
    base = unwrap_peft(model)
    return inspect.signature(base.forward).parameters


def cache_kwarg(model: Any) -> str:
    """The keyword under which `model.forward` takes its KV cache: `"cache"` where the forward names it so (the
    gate's [`~elical_hf.gate.BaseLanguageModel`]), else transformers' `"past_key_values"`."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


def position_ids_from_attention_mask(attention_mask: torch.Tensor) -> torch.LongTensor:
    """Positions that count only real tokens, so a left-padded row sees the same positions as a right-padded one."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


@dataclass
class SharedPrefill:
    """What [`prefill_shared_prefix`] computed for a batch.

    Args:
        input_ids (`torch.LongTensor` of shape `(batch, shared + length)`): The shared prefix, then each row's own
            tokens, padded.
        attention_mask (`torch.LongTensor` of the same shape): 1 for the prefix and each row's real tokens.
        output: What `run` returned for the rows' own tokens (the prefix's output is not kept).
        cache (`transformers.DynamicCache`): The prefix's and the rows' keys and values, one row per sequence.
        shared (`int`): Number of prefix tokens run once (0: none, each row ran whole).
        prefix (`transformers.DynamicCache`, *optional*): With `prefix_model`, the prefix's keys and values (batch 1,
            never repeated); `cache` then holds the rows' own tokens only, and every later forward pass over them runs
            inside [`~elical_hf.models.prefix_attention.prefix_attention`] with `attention_mask[:, shared:]`.
    """

    input_ids: torch.LongTensor
    attention_mask: torch.LongTensor
    output: Any
    cache: DynamicCache
    shared: int
    prefix: DynamicCache | None = None


def prefill_shared_prefix(
    run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, DynamicCache], Any],
    sequences: list[list[int]],
    shared: int,
    config: Any,
    device: torch.device | str,
    *,
    padding_side: str = "left",
    pad_id: int = 0,
    prefix_model: Any | None = None,
    prefix: DynamicCache | None = None,
) -> SharedPrefill:
    """
    Run `sequences[0][:shared]` once, repeat its KV cache for every row, then run the rest of each sequence after it.

    Args:
        run (`Callable`): `run(input_ids, attention_mask, position_ids, cache)` calls the model (with `use_cache=True`
            and `cache` under [`cache_kwarg`]) and returns its output; called once for the prefix (when `shared > 0`)
            and once for the rows. `attention_mask` covers the cache and the new tokens.
        sequences (`list[list[int]]`): Token ids, one list per row; every row must start with the same `shared`
            tokens and keep at least one of its own ([`~elical_hf.settings.prompts.shared_prefix_length`] ensures both).
        shared (`int`): Prefix length; `0` runs each row whole (one call of `run`).
        config: The model config the `DynamicCache` is built for.
        device (`torch.device` or `str`): Where the inputs go.
        padding_side (`str`, *optional*, defaults to `"left"`): Where the rows' own tokens are padded, between the
            prefix and them (`"left"`, as decoding needs) or after them (`"right"`).
        pad_id (`int`, *optional*, defaults to 0): The id in padded slots (masked, so it only matters to callers that
            read `input_ids`).
        prefix_model (*optional*): The model `run` calls. When it [`~elical_hf.models.prefix_attention.
            supports_prefix_attention`], the prefix's cache is not repeated: the rows attend to it through
            [`~elical_hf.models.prefix_attention.prefix_attention`] (`SharedPrefill.prefix`), `rows x shared` fewer
            cached positions.
        prefix (`transformers.DynamicCache`, *optional*): With `prefix_model`, the cache of exactly
            `sequences[0][:shared]` from an earlier call (the same prefix in another batch): it is not run again.

    Returns:
        [`SharedPrefill`]: inputs, mask, the rows' output and the cache, positions counted over real tokens only.
    """
    if padding_side not in PADDING_SIDES:
        raise ValueError(f"`padding_side` must be one of {PADDING_SIDES}, got {padding_side!r}.")
    batch = len(sequences)
    separate = bool(shared) and prefix_model is not None and supports_prefix_attention(prefix_model)
    prefix_ids = torch.tensor([sequences[0][:shared]], dtype=torch.long, device=device)
    if separate and prefix is not None:
        if prefix.get_seq_length() != shared:
            raise ValueError(f"`prefix` holds {prefix.get_seq_length()} positions, not the {shared} shared tokens.")
    elif shared:
        prefix = DynamicCache(config=config)
        run(prefix_ids, torch.ones_like(prefix_ids), torch.arange(shared, device=device)[None], prefix)
    if separate:  # the rows' cache starts empty; the prefix stays a batch of one
        cache = DynamicCache(config=config)
    elif shared:  # the prefix's cache, repeated for every row, becomes the rows' cache
        cache, prefix = prefix, None
        cache.batch_repeat_interleave(batch)
    else:
        cache, prefix = DynamicCache(config=config), None
    rest = [ids[shared:] for ids in sequences]
    length = max(len(ids) for ids in rest)
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, length), dtype=torch.long)
    for row, ids in enumerate(rest):
        span = slice(length - len(ids), length) if padding_side == "left" else slice(0, len(ids))
        input_ids[row, span] = torch.tensor(ids, dtype=torch.long)
        mask[row, span] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    full_mask = torch.cat([mask.new_ones((batch, shared)), mask], dim=-1)
    positions = shared + position_ids_from_attention_mask(mask)
    if separate:
        with prefix_attention(prefix_model, prefix):
            output = run(input_ids, mask, positions, cache)
    else:
        output = run(input_ids, full_mask, positions, cache)
    return SharedPrefill(torch.cat([prefix_ids.expand(batch, -1), input_ids], dim=-1), full_mask, output, cache, shared,
                         prefix)


class ReservedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values live in a buffer with room for more positions: `update` writes the new
    positions in place and `keys` / `values` are views of the filled part, instead of a `torch.cat` that copies the
    whole layer at every decoding step (a quarter of a CPU decoding step's time on SmolLM2, `docs/benchmarks.md`).
    Past its room it grows like a `DynamicLayer` (with room again). Same values, same shapes."""

    def reserve(self, extra: int, repeats: int = 1) -> None:
        """Move keys and values into buffers with room for `extra` more positions, each batch row repeated `repeats`
        times (as `batch_repeat_interleave` would, without its intermediate copy of the whole layer)."""
        batch, length = self.keys.shape[0], self.keys.shape[-2]
        shape = (batch * repeats, *self.keys.shape[1:-2], length + extra, self.keys.shape[-1])

        def moved(source: torch.Tensor) -> torch.Tensor:
            buffer = source.new_empty(shape)
            buffer.view(batch, repeats, *shape[1:])[..., :length, :].copy_(source.unsqueeze(1))
            return buffer

        self._key_buffer = moved(self.keys)
        self.keys = None  # the old keys go before the values' buffer comes
        self._value_buffer = moved(self.values)
        self._view(length)

    def _view(self, length: int) -> None:
        self.keys, self.values = self._key_buffer[..., :length, :], self._value_buffer[..., :length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        start, new = self.keys.shape[-2], key_states.shape[-2]
        if start + new > self._key_buffer.shape[-2]:
            self.reserve(max(new, start))  # out of room: copy once into a buffer twice the size
        self._key_buffer[..., start : start + new, :] = key_states
        self._value_buffer[..., start : start + new, :] = value_states
        self._view(start + new)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        # `index_select` copies whole rows; advanced indexing (`buffer[indices]`) was 3x slower on bf16 CPU buffers
        length, indices = self.keys.shape[-2], indices.to(self._key_buffer.device)
        self._key_buffer = self._key_buffer.index_select(0, indices)
        self._value_buffer = self._value_buffer.index_select(0, indices)
        self._view(length)

    def batch_repeat_interleave(self, repeats: int) -> None:
        length = self.keys.shape[-2]
        self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
        self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
        self._view(length)

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self._view(self.keys.shape[-2])


def reserve_positions(cache: Any, extra: int, repeats: int = 1) -> None:
    """Give every plain `DynamicLayer` of `cache` (already filled, e.g. by a prefill) room for `extra` more positions
    ([`ReservedLayer`]), with every batch row repeated `repeats` times as `cache.batch_repeat_interleave(repeats)`
    would, in one copy per layer: the repeated cache without room is never built (for the demo's 24 questions x 5
    rows on SmolLM2 the sampler's peak RSS went 1732 -> 1674 MiB, `docs/benchmarks.md`). Other layer kinds (sliding
    windows, quantized) are only repeated, and a cache without `layers` is repeated as a whole."""
    if not hasattr(cache, "layers"):
        if repeats > 1:
            cache.batch_repeat_interleave(repeats)
        return
    for layer in cache.layers:
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys is not None and layer.keys.dim() == 4:
            layer.__class__ = ReservedLayer
            layer.reserve(extra, repeats)
        elif repeats > 1:
            layer.batch_repeat_interleave(repeats)
