"""Attention over a shared prompt prefix that is never repeated per row (cascade attention).

[`~elical_hf.models.kv_prefix.prefill_shared_prefix`] runs the prefix that a batch of prompts shares once. Repeating its
KV cache for every row (and, when sampling, for every sample row) gives each row the plain attention a model expects,
but it costs `rows x prefix` cached positions, read again at every decoding step: for Verbal-10's ten demonstrations
(~870 tokens on SmolLM2) that is 40 MB per row. Here the prefix's keys and values stay a batch of one, the rows' cache
holds only their own tokens, and each attention layer scores every row's queries against both in one softmax:

    softmax([q . K_prefix, q . K_row + mask]) @ [V_prefix; V_row]

which is the attention over the whole sequence (the prefix is unpadded and precedes every row's tokens, so no mask
applies to it), computed as transformers' eager attention computes it. The layers find it through transformers'
`AttentionInterface` under [`ATTENTION_NAME`], which [`prefix_attention`] switches the model to while the rows run.

Only models that dispatch attention through that interface and attend fully at every layer take this path
([`supports_prefix_attention`]); others (sliding windows, soft-capped logits, custom forwards) keep the repeated cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from ..utils.loading import unwrap_peft


__all__ = ["ATTENTION_NAME", "prefix_attention", "shared_prefix_attention", "supports_prefix_attention"]

ATTENTION_NAME = "elical_shared_prefix"
"""The name the shared-prefix attention is registered under in transformers' attention and mask interfaces."""

_PREFIX: ContextVar[Any | None] = ContextVar("elical_shared_prefix", default=None)


def supports_prefix_attention(model: Any) -> bool:
    """Whether `model` can attend to a separate, unrepeated prefix cache: a transformers model whose attention goes
    through `AttentionInterface` (`_supports_attention_backend`), causal, with full attention at every layer (no
    sliding window) and no soft-capped attention logits."""
    base = unwrap_peft(model)
    config = getattr(base, "config", None)
    if config is None or not getattr(type(base), "_supports_attention_backend", False):
        return False
    if getattr(config, "sub_configs", None) and any(getattr(config, key, None) is not None for key in config.sub_configs):
        return False  # multimodal wrappers: their text model is not the one whose config we switch
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and any(kind != "full_attention" for kind in layer_types):
        return False
    if layer_types is None and getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    return getattr(config, "is_causal", True) and not getattr(config, "attn_logit_softcapping", None)


@contextmanager
def prefix_attention(model: Any, prefix: Any) -> Iterator[None]:
    """Within this context the attention layers of `model` attend to `prefix` (a filled `DynamicCache` of batch 1,
    left untouched) before each row's own cached tokens. The attention mask and cache given to the model then cover
    the rows' own tokens only; positions stay counted from the prefix's start (pass `position_ids`). The switch is
    made on the model's config, so another thread must not run the same model meanwhile (the library's server runs
    its model on one worker thread)."""
    config = unwrap_peft(model).config
    previous = config._attn_implementation
    token = _PREFIX.set(prefix)
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = previous
        _PREFIX.reset(token)


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """An `AttentionInterface` function: `query` `(batch, heads, length, dim)` attends to the prefix of
    [`prefix_attention`] (`(1, kv_heads, prefix, dim)`, shared by every row) and to the row's own `key` / `value`
    `(batch, kv_heads, own, dim)` under `attention_mask` (an additive `(batch, 1, length, own)` mask). Grouped-query
    heads share their key/value head without copies. Returns `(batch, length, heads, dim)` and no weights."""
    prefix = _PREFIX.get()
    if prefix is None:
        raise RuntimeError(f"The {ATTENTION_NAME!r} attention runs only inside `prefix_attention(model, prefix)`.")
    layer = prefix.layers[module.layer_idx]
    prefix_keys, prefix_values = layer.keys[0].to(query.dtype), layer.values[0].to(query.dtype)  # (kv_heads, P, d)
    batch, heads, length, dim = query.shape
    kv_heads, own = key.shape[1], key.shape[-2]
    size, group = prefix_keys.shape[-2], heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # kv head j serves query heads j * group ... j * group + group - 1 (transformers' repeat_kv)
    grouped = query.reshape(batch, kv_heads, group * length, dim)
    flat = grouped.transpose(0, 1).reshape(kv_heads, batch * group * length, dim)
    prefix_scores = torch.matmul(flat, prefix_keys.transpose(-1, -2)) * scale  # one matmul for all rows
    prefix_scores = prefix_scores.view(kv_heads, batch, group * length, size).transpose(0, 1)
    # the rows' cached keys as the left operand, in their own layout: `grouped @ key^T` copied every layer's keys,
    # transposed, at every decoding step (a view of the reserved buffer is not a plain transpose for the bf16 kernel)
    own_scores = torch.matmul(key, grouped.transpose(-1, -2)).transpose(-1, -2) * scale
    if attention_mask is not None:
        mask = attention_mask[:, :, :, -own:]
        own_scores = (own_scores.view(batch, kv_heads, group, length, own) + mask[:, :, None]).flatten(2, 3)
    scores = torch.cat([prefix_scores, own_scores], dim=-1)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout and module.training:
        weights = torch.nn.functional.dropout(weights, p=dropout, training=True)
    prefix_weights, own_weights = weights.split([size, own], dim=-1)
    flat_weights = prefix_weights.transpose(0, 1).reshape(kv_heads, batch * group * length, size)
    out = torch.matmul(flat_weights, prefix_values).view(kv_heads, batch, group * length, dim).transpose(0, 1)
    out = out + torch.matmul(own_weights, value)
    return out.reshape(batch, heads, length, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION_NAME, shared_prefix_attention)
AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)
