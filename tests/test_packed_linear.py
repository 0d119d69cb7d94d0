"""Linear layers on weights packed once for oneDNN while the sampler decodes (`elical_hf.models.packed_linear`)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import LoraLayer

from elical_hf.models.packed_linear import can_pack, packed_linears
from elical_hf.settings.precision import onednn_bf16
from elical_hf.signals import SamplingSettings, decoding, generate_answers
from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer


needs_bf16 = pytest.mark.skipif(not onednn_bf16(), reason="this CPU's oneDNN runs no bfloat16")
IDS = torch.tensor([[5, 9, 13, 2, 7, 11], [3, 4, 8, 12, 6, 10]])
# one bf16 rounding of the logits apart at most: the packed layers run oneDNN's kernels on the same numbers
BF16 = dict(rtol=2**-7, atol=2**-7)


def tiny(dtype: torch.dtype, **overrides) -> torch.nn.Module:
    model = make_tiny_causal_lm(make_tiny_tokenizer(), **overrides)
    with torch.no_grad():
        for module in model.modules():  # biases that add something (they start at zero)
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    return model.to(dtype)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def packed_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if "forward" in m.__dict__]


def assert_restored(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = dict(model.named_parameters())
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert not packed_layers(model)


@needs_bf16
@pytest.mark.parametrize("arch, tied", [("llama", False), ("llama", True), ("qwen2", False)])  # qwen2: biases
def test_a_bf16_model_runs_on_packed_weights_and_gets_its_own_back(arch, tied):
    model = tiny(torch.bfloat16, arch=arch, tie_word_embeddings=tied)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    before = weights(model)
    with torch.no_grad():
        plain = model(IDS).logits
        with packed_linears(model, torch.bfloat16):
            assert set(packed_layers(model)) == set(linears)
            given_up = {m for m in linears if m.weight.numel() == 0}  # the plain path could not run on them
            assert given_up == (set(linears) - {model.lm_head} if tied else set(linears))  # the embeddings read it
            packed = model(IDS).logits
    torch.testing.assert_close(packed, plain, **BF16)
    assert_restored(model, before)


@needs_bf16
def test_the_weights_come_back_when_the_block_fails():
    model = tiny(torch.bfloat16)
    before = weights(model)
    with pytest.raises(RuntimeError, match="interrupted"), packed_linears(model, torch.bfloat16):
        raise RuntimeError("interrupted")
    assert_restored(model, before)


@needs_bf16
def test_a_float32_model_under_autocast_packs_bf16_copies_and_keeps_its_weights():
    model = tiny(torch.float32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model(IDS).logits
        with packed_linears(model, torch.bfloat16):
            assert len(packed_layers(model)) == 15  # 7 per layer and the head
            assert all(p.numel() for p in model.parameters())  # float32 weights are kept
            packed = model(IDS).logits
    torch.testing.assert_close(packed, plain, **BF16)


@needs_bf16
def test_layers_that_compute_in_another_dtype_or_have_a_forward_of_their_own_are_left_alone():
    """A LoRA kept in float32 on a bf16 model computes in float32: not packed. Its base layer is packed but keeps its
    weight (PEFT reads it). A layer whose forward an `accelerate` hook replaced keeps that forward."""
    model = get_peft_model(tiny(torch.bfloat16), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    lora = [m for m in model.modules() if isinstance(m, LoraLayer)]
    assert lora and all(layer.lora_A["default"].weight.dtype == torch.float32 for layer in lora)
    with torch.no_grad():
        for layer in lora:  # an adapter that adds something
            layer.lora_B["default"].weight.fill_(0.1)
    hooked = model.base_model.model.model.layers[0].mlp.down_proj
    hooked.forward = hooked.forward
    before = weights(model)
    with torch.no_grad():
        plain = model(input_ids=IDS).logits
        with packed_linears(model, torch.bfloat16):
            packed = set(packed_layers(model)) - {hooked}
            assert packed.isdisjoint(m for layer in lora for m in (layer.lora_A["default"], layer.lora_B["default"]))
            assert {layer.base_layer for layer in lora} <= packed
            assert all(layer.base_layer.weight.numel() for layer in lora)
            assert hooked.forward.__self__ is hooked  # still its own bound forward, not a packed one
            out = model(input_ids=IDS).logits
    torch.testing.assert_close(out, plain, **BF16)
    del hooked.forward
    assert_restored(model, before)


def test_nothing_is_packed_outside_bf16_on_a_cpu():
    model = tiny(torch.float32)
    assert not can_pack(model, torch.float32) and not can_pack(model, None)
    with packed_linears(model, torch.float32):
        assert not packed_layers(model)


@needs_bf16
def test_the_sampler_packs_its_model_for_the_run_and_answers_as_without(monkeypatch):
    """`generate_answers` decodes a bf16 model on packed weights and gives the answers it gives without them."""
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_causal_lm(tokenizer).to(torch.bfloat16)
    settings = SamplingSettings(num_samples=3, max_new_tokens=6, prompt_template="{question}",
                                use_chat_template=False)
    questions = ["who wrote hamlet?", "what is the capital of france?", "who was the first president?"]
    seen = []
    real = decoding.packed_linears

    @contextlib.contextmanager
    def watched(*args, **kwargs):
        with real(*args, **kwargs):
            seen.append(len(packed_layers(model)))
            yield

    monkeypatch.setattr(decoding, "packed_linears", watched)
    packed = generate_answers(model, tokenizer, questions, settings, progress=False)
    assert seen == [15]
    monkeypatch.setattr(decoding, "packed_linears", lambda *args, **kwargs: contextlib.nullcontext())
    assert [r["sampling_response"] for r in generate_answers(model, tokenizer, questions, settings, progress=False)
            ] == [r["sampling_response"] for r in packed]
