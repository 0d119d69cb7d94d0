from __future__ import annotations

import json
import os

import pytest
import torch
from peft import PeftModel
from safetensors import safe_open
from transformers import GPT2Config
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from elical_hf import AutoModelForConfidence, ConfidenceConfig, ForConfidenceMixin, PeftModelForConfidence
from elical_hf.data.encoding import encode_prompts, length_batches, pad_batch
from elical_hf.models.modeling import CONFIDENCE_BACKBONES, default_lora_targets, last_token_indices
from tests.conftest import save_tiny_base


QUESTIONS = ["who wrote hamlet", "what is the capital city of france and of germany", "who was the first king"]


def trained_like(model: PeftModelForConfidence, seed: int = 0) -> PeftModelForConfidence:
    """Give LoRA B and the head non-zero values, as after training (fresh LoRA is an identity)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


def test_last_token_indices_left_and_right():
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert last_token_indices(mask).tolist() == [2, 4, 4]
    with pytest.raises(ValueError, match="at least one token"):
        last_token_indices(torch.tensor([[0, 0]]))


@pytest.mark.float32  # an equivalence of the logic (bf16 twin: tests/test_bf16.py)
def test_padding_side_does_not_change_confidence(tiny_base):
    torch.manual_seed(3)  # LoRA A's init draws from the global generator: not from whatever ran before in this worker
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_base))
    tokenizer = model.tokenizer
    alone = [model.confidence([q])[0] for q in QUESTIONS]
    tokenizer.padding_side = "right"
    right = model.confidence(QUESTIONS)
    tokenizer.padding_side = "left"
    left = model.confidence(QUESTIONS)
    assert len({round(c, 3) for c in alone}) == len(QUESTIONS), "questions should not all score the same"
    torch.testing.assert_close(torch.tensor(right), torch.tensor(alone), atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(left), torch.tensor(alone), atol=1e-5, rtol=0)


def long_prefix_model(base: str):
    system = " ".join(["you are a helpful assistant who answers the question of the user"] * 4)
    return trained_like(AutoModelForConfidence.from_pretrained(base, confidence_config=ConfidenceConfig(
        system_prompt=system)))


@pytest.mark.float32  # an equivalence of the logic (bf16 twin: tests/test_bf16.py)
def test_shared_prompt_prefix_runs_once_and_changes_nothing(tiny_base, monkeypatch):
    from elical_hf.settings.prompts import MIN_SHARED_PREFIX, common_prefix_length

    model = long_prefix_model(tiny_base)
    inner, tokenizer = model.get_base_model(), model.tokenizer
    encoded = encode_prompts(QUESTIONS, tokenizer, model.confidence_config)
    assert common_prefix_length(encoded) >= MIN_SHARED_PREFIX  # the shared-prefix path is really taken
    backbone = inner.model
    shapes = []
    monkeypatch.setattr(backbone, "forward", lambda *a, _f=backbone.forward, **k: shapes.append(
        k["input_ids"].shape) or _f(*a, **k))
    for side in ("left", "right"):
        tokenizer.padding_side = side
        shapes.clear()
        shared = model.confidence(QUESTIONS, batch_size=len(QUESTIONS))
        assert shapes[0] == (1, common_prefix_length(encoded)) and shapes[1][0] == len(QUESTIONS)
        features = model.prompt_features(QUESTIONS, batch_size=len(QUESTIONS))
        inner.share_prompt_prefix = False  # one plain forward pass over whole prompts
        shapes.clear()
        full = model(**pad_batch(encoded, tokenizer)).confidence
        plain_features = inner.pooled_hidden_state(**pad_batch(encoded, tokenizer))
        assert shapes[0][1] == max(len(ids) for ids in encoded)
        inner.share_prompt_prefix = True
        torch.testing.assert_close(torch.tensor(shared), full, atol=1e-5, rtol=0)
        torch.testing.assert_close(features, plain_features, atol=1e-5, rtol=0)


def test_length_batches_keep_row_and_token_budgets():
    lengths = [40, 10, 95, 12, 11, 30, 10, 200, 13]
    batches = length_batches(lengths, max_rows=3, max_tokens=60, shared=5)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # each index once
    assert batches[0] == [7] and batches[1] == [2]  # too long for the budget: a batch of its own
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(lengths, reverse=True)  # longest first
    for batch in batches[2:]:
        assert len(batch) <= 3 and len(batch) * (max(lengths[i] for i in batch) - 5) <= 60
    assert [len(batch) for batch in batches] == [1, 1, 1, 2, 3, 1]  # 40 | 30,13 | 12,11,10 | 10
    assert length_batches(lengths, max_rows=100, max_tokens=10_000) == [sorted(range(9), key=lambda i: -lengths[i])]
    assert length_batches([], 4, 100) == []
    with pytest.raises(ValueError, match="must be >= 1"):
        length_batches(lengths, max_rows=0, max_tokens=60)


@pytest.mark.float32  # an equivalence of the logic
def test_token_budget_batches_return_input_order(tiny_base, monkeypatch):
    import elical_hf.models.modeling as modeling

    model = long_prefix_model(tiny_base)
    questions = QUESTIONS + ["why " * n + "is the sky blue" for n in (1, 9, 3)]
    alone = torch.cat([model.prompt_features([q]) for q in questions])
    calls = []
    monkeypatch.setattr(modeling, "PROMPT_BATCH_TOKENS", 12)  # forces several batches of unequal sizes
    inner = model.get_base_model()
    monkeypatch.setattr(inner, "pooled_hidden_state", lambda *a, _f=inner.pooled_hidden_state, **k: calls.append(
        k["input_ids"].shape[0]) or _f(*a, **k))
    batched = model.prompt_features(questions, batch_size=4)
    assert len(calls) > 1 and max(calls) <= 4 and sum(calls) == len(questions)
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)
    confidences = model.confidence(questions, batch_size=4)
    torch.testing.assert_close(torch.tensor(confidences), torch.tensor([model.confidence([q])[0] for q in questions]),
                               atol=1e-5, rtol=0)


def shared_and_plain_gradients(base: str) -> list[dict[str, torch.Tensor]]:
    """The trainable parameters' gradients of one batch through the shared-prefix pass, then the plain pass."""
    model = long_prefix_model(base)
    inner, tokenizer = model.get_base_model(), model.tokenizer
    model.train()
    batch = pad_batch(encode_prompts(QUESTIONS, tokenizer, model.confidence_config), tokenizer)
    labels = torch.linspace(0.1, 0.9, len(QUESTIONS))
    grads = []
    for share in (True, False):
        inner.share_prompt_prefix = share
        model.zero_grad()
        model(**batch, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys() and any("lora_A" in n for n in grads[0])
    return grads


@pytest.mark.float32  # an equivalence of the logic (bf16 twin: tests/test_bf16.py)
def test_shared_prompt_prefix_gives_the_same_gradients(tiny_llama):
    grads = shared_and_plain_gradients(tiny_llama)
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.float32  # an equivalence of the logic (bf16 twin: tests/test_bf16.py)
def test_pools_last_real_token_when_pad_equals_eos(tiny_llama):
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_llama))
    tokenizer = model.tokenizer
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    # A prompt whose last real token is EOS (== pad): pooling by pad id would pick the wrong position.
    ids = encode_prompts(QUESTIONS[:1], tokenizer, model.confidence_config)[0] + [tokenizer.eos_token_id]
    short = ids[:5]
    for side in ("left", "right"):
        tokenizer.padding_side = side
        batch = pad_batch([ids, short], tokenizer)
        batched = model(**batch).confidence
        single = torch.cat([model(**pad_batch([row], tokenizer)).confidence for row in (ids, short)])
        torch.testing.assert_close(batched, single, atol=1e-5, rtol=0)


def test_output_and_loss(tiny_llama):
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_llama))
    batch = pad_batch(encode_prompts(QUESTIONS, model.tokenizer, model.confidence_config), model.tokenizer)
    labels = torch.tensor([0.0, 0.5, 1.0])
    out = model(**batch, labels=labels)
    assert out.confidence.shape == (3,)
    assert bool(((out.confidence >= 0) & (out.confidence <= 1)).all())
    torch.testing.assert_close(out.confidence, torch.sigmoid(out.logits))
    torch.testing.assert_close(out.loss, ((out.confidence - labels) ** 2).mean())
    summed = model(**batch, labels=labels, num_items_in_batch=6).loss
    torch.testing.assert_close(summed, ((out.confidence - labels) ** 2).sum() / 6)


def test_fresh_model_layout(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    assert isinstance(model, PeftModel) and isinstance(model.get_base_model(), ForConfidenceMixin)
    assert type(model.get_base_model()).__name__ == "LlamaForConfidence"
    lora = model.peft_config["default"]
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.bias) == (8, 16, 0.0, "none")
    assert set(lora.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "confidence_head.modules_to_save" in n for n in trainable)
    assert any("confidence_head" in n for n in trainable)
    assert model.confidence_config.base_model_name_or_path == tiny_llama


def test_save_load_round_trip(tiny_base, tmp_path):
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_base))
    model.confidence_config.decision_threshold = 0.4
    before = model.confidence(QUESTIONS)
    model.save_pretrained(tmp_path / "saved")

    files = set(os.listdir(tmp_path / "saved"))
    assert {"adapter_model.safetensors", "adapter_config.json", "confidence_config.json"} <= files
    assert not any(name.startswith("model") and name.endswith(".safetensors") for name in files)
    with safe_open(tmp_path / "saved" / "adapter_model.safetensors", "pt") as handle:
        keys = list(handle.keys())
    assert keys and all("lora_" in key or "confidence_head" in key for key in keys)
    adapter = json.loads((tmp_path / "saved" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == tiny_base
    saved = json.loads((tmp_path / "saved" / "confidence_config.json").read_text())
    assert saved["prompt_template"] == ConfidenceConfig().prompt_template and saved["pooling"] == "last_token"

    loaded = AutoModelForConfidence.from_pretrained(tmp_path / "saved")
    after = loaded.confidence(QUESTIONS)
    assert max(abs(a - b) for a, b in zip(before, after)) < 1e-6
    assert loaded.confidence_config.decision_threshold == 0.4


def test_template_travels_with_the_model(tiny_llama, tmp_path):
    custom = ConfidenceConfig(prompt_template="Question: {question}\nCan you answer it?", system_prompt="Be honest.")
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_llama, confidence_config=custom))
    model.save_pretrained(tmp_path / "m")
    loaded = AutoModelForConfidence.from_pretrained(tmp_path / "m")
    assert loaded.confidence_config.prompt_template == custom.prompt_template
    assert loaded.confidence_config.format_prompt("q", loaded.tokenizer) == custom.format_prompt("q", model.tokenizer)
    assert loaded.confidence(QUESTIONS) == pytest.approx(model.confidence(QUESTIONS), abs=1e-6)


def test_unsupported_backbone_is_a_clear_error(tmp_path):
    from transformers import GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="Backbone type 'gpt2' keeps its decoder at `transformer`, not at `model`"):
        AutoModelForConfidence.from_pretrained(str(tmp_path))


def test_adapter_on_a_different_base_is_refused(tiny_llama, tmp_path):
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_llama))
    model.save_pretrained(tmp_path / "m")
    other = save_tiny_base(tmp_path / "other", "llama", hidden_size=48, num_attention_heads=4)
    with pytest.raises(ValueError, match="was trained on"):
        AutoModelForConfidence.from_pretrained(tmp_path / "m", base_model_name_or_path=other)


def test_interrupted_save_never_loads(tiny_llama, tmp_path, monkeypatch):
    model = trained_like(AutoModelForConfidence.from_pretrained(tiny_llama))
    target = tmp_path / "m"
    model.save_pretrained(target)
    assert AutoModelForConfidence.from_pretrained(target) is not None

    def crash(self, *args, **kwargs):
        (target / "adapter_model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(PeftModel, "save_pretrained", crash)
    with pytest.raises(KeyboardInterrupt):
        model.save_pretrained(target)
    assert not (target / "confidence_config.json").exists()
    with pytest.raises(ValueError, match="not a complete confidence model"):
        AutoModelForConfidence.from_pretrained(target)


def test_tokenizer_without_pad_token(tmp_path):
    folder = save_tiny_base(tmp_path / "base", "llama")
    config = json.loads((tmp_path / "base" / "tokenizer_config.json").read_text())
    config.pop("pad_token", None)
    (tmp_path / "base" / "tokenizer_config.json").write_text(json.dumps(config))
    model = AutoModelForConfidence.from_pretrained(folder)
    assert model.tokenizer.pad_token is not None
    assert len(model.confidence(QUESTIONS)) == 3


def test_empty_question_is_refused(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    with pytest.raises(ValueError, match="non-empty strings"):
        model.confidence(["who wrote hamlet", "   "])


def tiny_config(model_type: str):
    sizes = dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, pad_token_id=0, eos_token_id=1, bos_token_id=1,
    )
    config = CONFIG_MAPPING[model_type](**sizes)
    config._attn_implementation = "eager"
    return config


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral", "gemma3_text", "phi3"])
def test_architectures_in_the_mapping(model_type):
    config = tiny_config(model_type)
    assert type(config) in AutoModelForConfidence._model_mapping
    model = AutoModelForConfidence.from_config(config)
    assert isinstance(model, ForConfidenceMixin) and model.config_class is type(config)
    targets = default_lora_targets(model)
    assert "confidence_head" not in targets and "o_proj" in targets
    ids = torch.tensor([[1, 2, 3, 4], [0, 0, 5, 6]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    out = model(input_ids=ids, attention_mask=mask)
    assert out.confidence.shape == (2,) and bool(torch.isfinite(out.confidence).all())


def test_every_listed_backbone_resolves():
    for model_type in CONFIDENCE_BACKBONES:
        assert issubclass(AutoModelForConfidence._model_mapping[CONFIG_MAPPING[model_type]], ForConfidenceMixin)


def test_register_a_new_backbone():
    from transformers import Starcoder2Config, Starcoder2PreTrainedModel

    class Starcoder2ForConfidence(ForConfidenceMixin, Starcoder2PreTrainedModel):
        config_class = Starcoder2Config

    assert Starcoder2Config not in AutoModelForConfidence._model_mapping
    AutoModelForConfidence.register(Starcoder2Config, Starcoder2ForConfidence)
    config = Starcoder2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                              num_attention_heads=4, num_key_value_heads=2)
    assert isinstance(AutoModelForConfidence.from_config(config), Starcoder2ForConfidence)
    with pytest.raises(ValueError, match="already has a confidence model"):
        AutoModelForConfidence.register(Starcoder2Config, Starcoder2ForConfidence)


def test_config_validation():
    with pytest.raises(ValueError, match="question"):
        ConfidenceConfig(prompt_template="no field here")
    with pytest.raises(ValueError, match="pooling"):
        ConfidenceConfig(pooling="mean")


def test_long_prompts_are_cut_with_a_counted_warning_and_new_models_use_the_context_length(tiny_llama, caplog):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    context = model.get_base_model().config.max_position_embeddings
    assert model.confidence_config.max_length == context  # a new model records its backbone's context length
    assert ConfidenceConfig().max_length is None  # no limit unless a model sets one
    config = ConfidenceConfig(max_length=24)
    long_question = " ".join(["who wrote hamlet"] * 10)
    with caplog.at_level("WARNING", logger="elical_hf.data.encoding"):
        ids = encode_prompts([long_question, "who"], model.tokenizer, config)
    assert len(ids[0]) == 24 and len(ids[1]) < 24 and "1 of 2 prompts are longer than max_length=24" in caplog.text
    full = encode_prompts([long_question], model.tokenizer, ConfidenceConfig())[0]
    assert ids[0] == full[-24:]  # the end of the prompt (the question's end and the answer header) is kept
    caplog.clear()
    with caplog.at_level("WARNING", logger="elical_hf.data.encoding"):
        encode_prompts([long_question], model.tokenizer, ConfidenceConfig())
    assert not caplog.text
