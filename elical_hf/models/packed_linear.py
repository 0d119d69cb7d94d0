"""Linear layers with their weights packed once for oneDNN's bfloat16 kernels, while a model decodes on a CPU.

A bfloat16 `torch.nn.functional.linear` on a CPU hands oneDNN the weight in its plain layout, and oneDNN's blocked
(AMX / AVX-512) matmul copies it into its own blocks on every call: at every decoding step, for every projection and
the LM head. [`packed_linears`] packs each plain `torch.nn.Linear` of a model once
(`torch.ops.mkldnn._reorder_linear_weight`, what PyTorch's own compiler does with frozen weights on a CPU) and runs the
layer through the packed weight (`torch.ops.mkldnn._linear_pointwise`) until the block exits. The results agree with
the plain layer's to bfloat16 rounding (bit for bit on most shapes). On SmolLM2-135M's shapes with 96 rows a
projection ran 1.4-1.5x and the LM head 2x faster on machine B (docs/benchmarks.md section 2).

Memory stays where it was: a layer's plain bfloat16 weight is given up while it is packed, and laid out plainly again
when the block exits (`to_dense`, the same values); the freed heap goes back to the operating system every
[`TRIM_EVERY`] bytes, so the way there and back holds at most that much more. A weight that is also used elsewhere
(an LM head tied to the input embeddings) is kept beside its packed copy, and so is a float32 weight under autocast
(autocast would hold its bfloat16 copy as well).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from ..settings.precision import onednn_bf16
from ..utils.memory import release_memory


__all__ = ["can_pack", "packed_linears"]

TRIM_EVERY = 64 * 2**20
"""Bytes of plain weights given up (or of packed ones, on the way back) between two returns of the freed heap to the
operating system: glibc keeps freed tensors' memory, and the new layout is allocated apart."""


def _packed_forward(weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype, x: torch.Tensor):
    return torch.ops.mkldnn._linear_pointwise(x.to(dtype), weight, bias, "none", [], "")


def can_pack(model: Any, dtype: torch.dtype | None) -> bool:
    """Whether [`packed_linears`] packs `model`'s layers for `dtype`: bfloat16 on a CPU whose oneDNN runs bfloat16."""
    device = getattr(model, "device", torch.device("cpu"))
    return dtype == torch.bfloat16 and torch.device(device).type == "cpu" and onednn_bf16()


class _Trimmer:
    """Returns the freed heap to the operating system after every `TRIM_EVERY` bytes counted, and at `flush`."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, tensor: torch.Tensor) -> None:
        self.count += tensor.numel() * tensor.element_size()
        if self.count >= TRIM_EVERY:
            self.flush()

    def flush(self) -> None:
        release_memory(collect=False)
        self.count = 0


def _own_weights(model: Any, dtype: torch.dtype) -> set[int]:
    """Ids of the linear weights of `model` that may be given up while packed: stored in `dtype`, alone in their
    storage (no other parameter uses it: an LM head tied to the input embeddings does), and not a wrapper's base layer
    (PEFT's LoRA layers read it, e.g. DoRA's norm)."""
    storages = Counter(p.untyped_storage().data_ptr() for _, p in model.named_parameters(remove_duplicate=False))
    wrapped = {id(m.base_layer) for m in model.modules() if isinstance(getattr(m, "base_layer", None), torch.nn.Module)}
    return {
        id(m.weight) for m in model.modules()
        if isinstance(m, torch.nn.Linear) and id(m) not in wrapped and m.weight.dtype == dtype
        and m.weight.is_contiguous() and storages[m.weight.untyped_storage().data_ptr()] == 1
        and m.weight.untyped_storage().nbytes() == m.weight.numel() * m.weight.element_size()
    }


@contextmanager
def packed_linears(model: Any, dtype: torch.dtype | None, rows: int = 64) -> Iterator[None]:
    """Within this block, run `model`'s plain `torch.nn.Linear` layers on weights packed once for oneDNN, in `dtype`
    (their input is cast to it, as autocast would). For inference by this thread only: a packed layer's own weight is
    empty meanwhile (unless another module uses it or it is kept in float32) and comes back unchanged on exit. Does
    nothing unless `dtype` is bfloat16 on a CPU with oneDNN ([`can_pack`]). Layers that compute in another dtype (a
    LoRA kept in float32 on a bfloat16 model) and layers with a forward of their own (an `accelerate` hook) are left
    alone.

    Args:
        model (`torch.nn.Module`): The model.
        dtype (`torch.dtype`, *optional*): The dtype its linear layers compute in (the model's, or autocast's).
        rows (`int`, *optional*, defaults to 64): The rows a call is expected to have (oneDNN's layout hint).
    """
    if not can_pack(model, dtype):
        yield
        return
    # under autocast (a float32 model) every linear layer computes in `dtype`; else only those stored in it
    computes = {dtype, torch.float32} if getattr(model, "dtype", dtype) == torch.float32 else {dtype}
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear and "forward" not in m.__dict__
              and m.weight.dtype in computes]
    patched: list[tuple[torch.nn.Linear, torch.Tensor | None]] = []  # (layer, its packed weight if it gave up its own)
    own, trimmer = _own_weights(model, dtype), _Trimmer()
    try:
        with torch.no_grad():
            for module in layers:
                packed = torch.ops.mkldnn._reorder_linear_weight(module.weight.to(dtype), rows)
                bias = module.bias.to(dtype) if module.bias is not None else None
                module.forward = partial(_packed_forward, packed, bias, dtype)
                given_up = id(module.weight) in own
                patched.append((module, packed if given_up else None))
                if given_up:
                    module.weight.data = module.weight.new_empty(0)
                    trimmer.add(packed)
        trimmer.flush()
        yield
    finally:
        while patched:  # popped, so that each packed copy is freed as soon as its layer has its weight back
            module, packed = patched.pop()
            del module.forward
            if packed is not None:
                module.weight.data = packed.to_dense()
                trimmer.add(module.weight)
            del packed
        trimmer.flush()
