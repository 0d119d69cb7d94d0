"""Any decoder transformers has a causal LM for, with its backbone at `model` (layers and a final norm), gets a
confidence model without being listed: tiny random checkpoints of eight families the fixed list refused load, score,
save and reload to the same confidences (a decoder the generic code cannot read, GPT-2, is refused saying why:
tests/test_modeling.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from elical_hf import AutoModelForConfidence
from elical_hf.models.modeling import CONFIDENCE_BACKBONES
from tests.tiny import make_tiny_tokenizer


pytestmark = pytest.mark.float32

FAMILIES = ["qwen3_moe", "gpt_oss", "mixtral", "olmo3", "smollm3", "glm4", "granitemoe", "seed_oss"]
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, max_position_embeddings=512, moe_intermediate_size=32, num_experts=4, num_local_experts=4,
             num_experts_per_tok=2)
QUESTIONS = ["who wrote hamlet?", "what is the capital of france?"]


def save_tiny(model_type: str, folder) -> str:
    tokenizer = make_tiny_tokenizer()
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id, bos_token_id=None, **SIZES)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("model_type", [t for t in FAMILIES if t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES])
def test_an_unlisted_decoder_loads_scores_saves_and_reloads(model_type, tmp_path):
    assert model_type not in CONFIDENCE_BACKBONES
    model = AutoModelForConfidence.from_pretrained(save_tiny(model_type, tmp_path / "base"), dtype=torch.float32)
    inner = model.get_base_model()
    assert type(inner).__name__.endswith("ForConfidence") and inner.config.model_type == model_type
    assert any("lora_" in name for name, _ in model.named_parameters())
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)))
    scores = model.confidence(QUESTIONS)
    assert all(0.0 < s < 1.0 for s in scores)
    model.save_pretrained(tmp_path / "saved")
    again = AutoModelForConfidence.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert again.confidence(QUESTIONS) == pytest.approx(scores, abs=1e-6)
