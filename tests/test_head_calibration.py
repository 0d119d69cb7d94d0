"""Head-only calibration on cached prompt features (`elical_hf.head_calibration`)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.head_calibration import calibrate_head, confidence_head_module, fit_head


QUESTIONS = [f"who wrote book number {i} of the series" for i in range(24)]


def _rows(n: int = 24) -> list[dict]:
    return [{"question": q, "correctness": float(i % 3 == 0)} for i, q in enumerate(QUESTIONS[:n])]


def test_prompt_features_are_what_the_head_reads(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    features = model.prompt_features(QUESTIONS[:5], batch_size=2)
    assert features.shape == (5, model.config.hidden_size) and features.dtype == torch.float32
    head = confidence_head_module(model)
    expected = torch.sigmoid(head(features).squeeze(-1)).tolist()
    assert model.confidence(QUESTIONS[:5], batch_size=3) == pytest.approx(expected, abs=1e-5)
    assert model.prompt_features([]).shape == (0, model.config.hidden_size)


def test_fit_head_learns_and_restores_the_best_epoch():
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(200, 6, generator=generator)
    targets = (features[:, 0] > 0).float()
    head = torch.nn.Linear(6, 1)
    before = ((torch.sigmoid(head(features).squeeze(-1)) - targets) ** 2).mean().item()
    summary = fit_head(head, features[:160], targets[:160], features[160:], targets[160:], num_train_epochs=30,
                       learning_rate=0.05, early_stopping_patience=3)
    with torch.no_grad():
        dev = ((torch.sigmoid(head(features[160:]).squeeze(-1)) - targets[160:]) ** 2).mean().item()
    assert dev < before / 2
    assert dev == pytest.approx(summary["eval_loss"], abs=1e-6)  # the best epoch's head is what is left
    assert 1 <= summary["best_epoch"] <= summary["epochs"] <= 30


def test_fit_head_rejects_bad_targets():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_head(torch.nn.Linear(2, 1), torch.zeros(3, 2), [0.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="do not match"):
        fit_head(torch.nn.Linear(2, 1), torch.zeros(3, 2), [0.0, 1.0])


def test_calibrate_head_changes_only_the_head_and_saves(tiny_llama, tmp_path):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    lora_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    head_before = confidence_head_module(model).weight.detach().clone()
    summary = calibrate_head(model, _rows(), tmp_path / "cal", num_train_epochs=5, learning_rate=0.05)
    assert summary["epochs"] >= 1
    assert not torch.equal(confidence_head_module(model).weight, head_before)
    for name, parameter in model.named_parameters():
        if "lora_" in name:
            assert torch.equal(parameter, lora_before[name]), name
    reloaded = AutoModelForConfidence.from_pretrained(str(tmp_path / "cal"))
    assert reloaded.confidence(QUESTIONS[:4]) == pytest.approx(model.confidence(QUESTIONS[:4]), abs=1e-5)
    with open(os.path.join(tmp_path, "cal", "confidence_config.json")) as handle:
        entry = json.load(handle)["training_history"][-1]
    assert entry["calibration_trainable"] == "head" and entry["lora_trainable"] is False
    assert entry["num_examples"] < 24  # the dev questions came out of the labels


def test_calibrate_head_uses_given_features(tiny_llama, monkeypatch):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    cache = dict(zip(QUESTIONS, model.prompt_features(QUESTIONS)))
    inner = model.get_base_model()
    monkeypatch.setattr(inner, "prompt_features", lambda *a, **k: pytest.fail("features were recomputed"))
    calibrate_head(model, _rows(), features=cache, num_train_epochs=2)


def test_calibrate_head_needs_the_label_column(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    with pytest.raises(ValueError, match="'correctness'"):
        calibrate_head(model, [{"question": "q", "consistency": 0.5}] * 4)


def test_calibrate_head_of_a_model_loaded_for_inference(tiny_llama, tmp_path):
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "stage1")
    model = AutoModelForConfidence.from_pretrained(str(tmp_path / "stage1"))  # not is_trainable: frozen head
    head = confidence_head_module(model)
    assert not head.weight.requires_grad
    before = head.weight.detach().clone()
    calibrate_head(model, _rows(), num_train_epochs=3, learning_rate=0.05)
    assert not torch.equal(head.weight, before)
    assert not head.weight.requires_grad  # left as it was
