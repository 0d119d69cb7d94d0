"""`peft.AutoPeftModel` loads a saved confidence model but not its confidence_config.json: it must refuse to score."""

from __future__ import annotations

import os

import pytest
import torch
from peft import AutoPeftModel
from transformers import AutoTokenizer

from elical_hf import AutoModelForConfidence, ConfidenceConfig, ConfidenceEstimationPipeline
from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME


pytestmark = pytest.mark.float32  # PEFT's loader vs ours, to float32 rounding


QUESTIONS = ["Who wrote Hamlet?", "What is the capital of France?"]
CUSTOM = dict(prompt_template="Question: {question}\nCan you answer it?", system_prompt="Be honest.")


@pytest.fixture(scope="module")
def custom_folder(tiny_llama, tmp_path_factory):
    """A saved model whose template is not the default, with a head that tells the two templates apart."""
    model = AutoModelForConfidence.from_pretrained(tiny_llama, confidence_config=ConfidenceConfig(**CUSTOM),
                                                  dtype=torch.float32)  # a module fixture: the mark does not reach it
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    folder = tmp_path_factory.mktemp("custom-template")
    model.save_pretrained(folder)
    return str(folder), model.confidence(QUESTIONS)


def test_auto_peft_model_refuses_to_score_with_an_unknown_template(custom_folder):
    folder, expected = custom_folder
    peft_model = AutoPeftModel.from_pretrained(folder, import_allowlist=["elical_hf"])
    inner = peft_model.get_base_model()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert inner.confidence_config is None  # not the default ConfidenceConfig(): unknown
    for score in (lambda: peft_model.confidence(QUESTIONS, tokenizer=tokenizer),
                  lambda: peft_model.prompt_features(QUESTIONS, tokenizer=tokenizer),
                  lambda: ConfidenceEstimationPipeline(inner, tokenizer=tokenizer)):
        with pytest.raises(ValueError, match="confidence_config.json"):
            score()

    # The documented route: give the inner model its saved config and tokenizer, and it scores as saved.
    inner.confidence_config = ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))
    inner.tokenizer = tokenizer
    got = peft_model.confidence(QUESTIONS)
    assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-5
    inner.confidence_config = ConfidenceConfig()  # the default template gives other scores: a silent default would show
    assert max(abs(a - b) for a, b in zip(peft_model.confidence(QUESTIONS), expected)) > 1e-4


def test_our_loader_still_sets_the_config(custom_folder, tiny_llama):
    folder, expected = custom_folder
    loaded = AutoModelForConfidence.from_pretrained(folder)
    assert loaded.confidence_config.prompt_template == CUSTOM["prompt_template"]
    assert max(abs(a - b) for a, b in zip(loaded.confidence(QUESTIONS), expected)) < 1e-6
    fresh = AutoModelForConfidence.from_pretrained(tiny_llama)  # a fresh model: the default template, on purpose
    assert fresh.confidence_config.prompt_template == ConfidenceConfig().prompt_template
    assert len(fresh.confidence(QUESTIONS)) == 2
