"""Against a real vLLM: the shipped two-stage demo model exported by `elical-hf export` and served by vLLM's pooling
runner (`--runner pooling`, `POST /classify`) gives `AutoModelForConfidence`'s confidences on 64 bundled questions,
and the same answer/abstain decisions at the saved threshold. Skipped, saying why, where vLLM cannot run."""

from __future__ import annotations

import json

import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.bundled import load_bundled_questions
from elical_hf.demo import DEMO_CALIBRATED
from elical_hf.export import EXPORT_CONFIG_NAME, export_prompt_ids
from tests.vllm_server import classify, exported_demo_model, vllm_server, why_not_here


pytestmark = [pytest.mark.slow, pytest.mark.float32]

TOLERANCE = 1e-4
"""Largest absolute difference allowed between vLLM's float32 confidence and ours (benchmarks/vllm_export_agreement.py
measures it)."""


def test_vllm_serves_the_export_with_the_confidence_models_numbers(tmp_path):
    reason = why_not_here()
    if reason:
        pytest.skip(reason)
    folder = exported_demo_model(str(tmp_path / "export"))
    questions = [row["question"] for name in ("nq", "pararel") for row in load_bundled_questions(name, limit=32)]
    model = AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32")
    ours = model.confidence(questions)
    threshold = json.loads((tmp_path / "export" / EXPORT_CONFIG_NAME).read_text())["confidence_config"][
        "decision_threshold"]
    assert threshold is not None
    server = vllm_server(folder, "confidence", "--runner", "pooling")
    try:
        served = classify(server.url, "confidence", export_prompt_ids(questions, folder))
    finally:
        server.stop()
    difference = max(abs(a - b) for a, b in zip(served, ours))
    print(f"64 questions: largest |vLLM - AutoModelForConfidence| = {difference:.2e}")
    assert len(served) == 64 and difference <= TOLERANCE
    assert [c >= threshold for c in served] == [c >= threshold for c in ours]


def test_one_vllm_serves_the_base_and_several_confidence_adapters(tmp_path):
    """`--form base` served once with two `--form lora` adapters (vLLM's per-request classification LoRA): each
    adapter gives its confidence model's numbers, the base alone 0.5 (its `score` is zero)."""
    reason = why_not_here()
    if reason:
        pytest.skip(reason)
    from elical_hf.export import export_confidence_model
    from tests.vllm_server import random_lora_model

    questions = [row["question"] for row in load_bundled_questions("nq", limit=16)]
    lora = random_lora_model()
    models = {"demo": AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32"), "random": lora}
    base = export_confidence_model(lora, tmp_path / "base", form="base")
    adapters = {"demo": exported_demo_model(str(tmp_path / "demo"), form="lora"),
                "random": export_confidence_model(lora, tmp_path / "random", form="lora")}
    server = vllm_server(base, "base", "--runner", "pooling", "--enable-lora", "--max-lora-rank", "8",
                         "--lora-modules", *(f"{name}={folder}" for name, folder in adapters.items()))
    try:
        for name, folder in adapters.items():
            served = classify(server.url, name, export_prompt_ids(questions, folder))
            assert served == pytest.approx(models[name].confidence(questions), abs=TOLERANCE), name
        assert set(classify(server.url, "base", export_prompt_ids(questions[:2], base))) == {0.5}
    finally:
        server.stop()
