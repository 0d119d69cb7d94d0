"""The answer/abstain/retrieve gate: decisions, answers of the unadapted base model, the zero-overhead mode (one
prefill for confidence and answer) and models without LoRA through the Trainer and `calibrate_head`."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from elical_hf import AutoModelForConfidence, ConfidenceEstimationPipeline, calibrate_head
from elical_hf.gate import base_model_only, decide
from elical_hf.settings.prompts import CONTEXT_QA_PROMPT
from elical_hf.signals import SamplingSettings, generate_answers
from tests.conftest import save_tiny_base


pytestmark = pytest.mark.float32  # token-for-token answers and exact confidences (bf16 twins: tests/test_bf16.py)


QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
             "when was the king born"]
MAX_NEW_TOKENS = 10
CONFIDENCE_TOLERANCE = 1e-5
"""Zero-overhead confidences vs `model.confidence()`: the same hidden state from another batch layout (left-padded
rows after a shared prefix vs right-padded), float32: they agree to about 1e-7."""


@pytest.fixture(scope="module")
def peaky_base(tmp_path_factory) -> str:
    """A tiny base with peaked logits (so greedy answers are not near-ties)."""
    return save_tiny_base(tmp_path_factory.mktemp("peaky"), "llama", seed=3, initializer_range=0.2)


def perturbed(base: str, use_lora: bool, seed: int = 0):
    """A confidence model whose trainable weights (LoRA and head, or the head alone) moved away from their init."""
    model = AutoModelForConfidence.from_pretrained(base, use_lora=use_lora)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad or (use_lora and "lora_" in name):
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    return model


def base_greedy(base: str, prompts: list[str], raw: bool = False) -> list[list[str]]:
    """Plain greedy generation of the base causal LM with the sampler's prompt: tokens of each answer."""
    lm, tokenizer = AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    settings = SamplingSettings(num_samples=1, max_new_tokens=MAX_NEW_TOKENS,
                                prompt_template="{question}" if raw else SamplingSettings.prompt_template)
    return [r["greedy_tokens"] for r in generate_answers(lm, tokenizer, prompts, settings, progress=False,
                                                          autocast_dtype=None)]


def hf_generate(base: str, question: str) -> list[int]:
    """`transformers`' own greedy `generate` of one prompt: the generated token ids."""
    from elical_hf.signals.generation import build_prompt_ids

    lm, tokenizer = AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    ids = build_prompt_ids(tokenizer, [question], SamplingSettings(num_samples=1))[0]
    out = lm.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    return out[0, len(ids):].tolist()


def between(values: list[float], k: int) -> float:
    """A threshold halfway between the k-th and (k+1)-th smallest of `values` (never on a value: no float ties)."""
    ranked = sorted(values)
    return (ranked[k] + ranked[k + 1]) / 2


def test_decide_applies_the_two_thresholds():
    assert [decide(c, 0.6) for c in (0.7, 0.6, 0.5)] == ["answer", "answer", "abstain"]
    assert [decide(c, 0.6, 0.3) for c in (0.6, 0.59, 0.3, 0.29)] == ["answer", "retrieve", "retrieve", "abstain"]


def test_lora_model_answers_with_the_unadapted_base_model(peaky_base):
    model = perturbed(peaky_base, use_lora=True)
    before = model.confidence(QUESTIONS)
    with base_model_only(model):
        base_confidences = model.confidence(QUESTIONS)
    assert max(abs(a - b) for a, b in zip(before, base_confidences)) > 1e-3  # the LoRA matters for the confidence
    threshold = between(before, 0)
    results = model.answer(QUESTIONS, threshold=threshold, max_new_tokens=MAX_NEW_TOKENS)
    reference = base_greedy(peaky_base, QUESTIONS)
    for result, confidence, tokens in zip(results, before, reference):
        assert result["confidence"] == pytest.approx(confidence, abs=CONFIDENCE_TOLERANCE)  # scored with the LoRA
        if confidence >= threshold:
            assert result["decision"] == "answer" and result["answer_tokens"] == tokens  # answered without it
        else:
            assert result["decision"] == "abstain" and result["answer"] is None
    assert model.confidence(QUESTIONS) == pytest.approx(before, abs=1e-7)  # the LoRA is back on afterwards


def test_zero_overhead_mode_answers_token_for_token_and_scores_like_confidence(peaky_base, monkeypatch):
    model = perturbed(peaky_base, use_lora=False)
    assert not model.uses_lora and model.confidence_config.use_lora is False
    expected = model.confidence(QUESTIONS)
    inner = model.get_base_model()

    def no_second_pass(*args, **kwargs):
        raise AssertionError("the zero-overhead mode must not run a separate confidence pass")

    monkeypatch.setattr(inner, "confidence", no_second_pass)
    results = model.answer(QUESTIONS, threshold=0.0, max_new_tokens=MAX_NEW_TOKENS)
    assert [r["confidence"] for r in results] == pytest.approx(expected, abs=CONFIDENCE_TOLERANCE)
    assert [r["answer_tokens"] for r in results] == base_greedy(peaky_base, QUESTIONS)
    tokenizer = AutoTokenizer.from_pretrained(peaky_base)
    generated = hf_generate(peaky_base, QUESTIONS[0])
    assert results[0]["answer_tokens"] == tokenizer.batch_decode([[t] for t in generated])  # transformers agrees
    # abstained questions stop after the prefill: no answer, and their confidence is still exact
    threshold = between(expected, 1)
    gated = model.answer(QUESTIONS, threshold=threshold, max_new_tokens=MAX_NEW_TOKENS)
    for result, full, confidence in zip(gated, results, expected):
        assert result["confidence"] == pytest.approx(confidence, abs=CONFIDENCE_TOLERANCE)
        assert result["answer"] == (full["answer"] if confidence >= threshold else None)


def test_a_differing_confidence_prompt_falls_back_to_a_separate_pass(peaky_base, caplog):
    model = perturbed(peaky_base, use_lora=False)
    model.confidence_config.prompt_template = "Question: {question}\nAnswer:"  # not the answer prompt
    expected = model.confidence(QUESTIONS)
    results = model.answer(QUESTIONS, threshold=0.0, max_new_tokens=MAX_NEW_TOKENS)
    assert [r["confidence"] for r in results] == pytest.approx(expected, abs=CONFIDENCE_TOLERANCE)
    assert [r["answer_tokens"] for r in results] == base_greedy(peaky_base, QUESTIONS)
    assert "scored with a separate prefill" in caplog.text


def test_retrieve_callback_answers_with_context(peaky_base):
    model = perturbed(peaky_base, use_lora=True)
    confidences = model.confidence(QUESTIONS)
    ranked = sorted(confidences)
    band = [q for q, c in zip(QUESTIONS, confidences) if ranked[0] < c < ranked[3]]  # the two in the middle
    asked = []

    def retrieve(question: str) -> str | None:
        asked.append(question)
        return None if question == band[1] else f"Notes about {question}."

    results = model.answer(QUESTIONS, threshold=between(confidences, 2), retrieve_threshold=between(confidences, 0),
                           retrieve=retrieve, max_new_tokens=MAX_NEW_TOKENS)
    assert asked == band
    prompt = CONTEXT_QA_PROMPT.format(context=f"Notes about {band[0]}.", question=band[0])
    decisions = {r["question"]: r for r in results}
    assert decisions[band[0]]["answer_tokens"] == base_greedy(peaky_base, [prompt], raw=True)[0]
    assert decisions[band[0]]["context"] == f"Notes about {band[0]}."
    assert decisions[band[1]]["decision"] == "retrieve" and decisions[band[1]]["answer"] is None  # nothing found
    assert [r["decision"] for r in results].count("answer") == 1
    assert [r["decision"] for r in results].count("abstain") == 1


def test_answer_needs_a_threshold(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    with pytest.raises(ValueError, match="no decision threshold"):
        model.answer(["who wrote hamlet"])


def test_tied_embeddings_serve_as_the_lm_head(tmp_path):
    base = save_tiny_base(tmp_path / "tied", "qwen2", seed=1, initializer_range=0.2, tie_word_embeddings=True)
    model = perturbed(base, use_lora=False)
    results = model.answer(QUESTIONS[:2], threshold=0.0, max_new_tokens=MAX_NEW_TOKENS)
    assert [r["answer_tokens"] for r in results] == base_greedy(base, QUESTIONS[:2])


def test_model_without_lora_trains_only_its_head_in_both_stages(tiny_llama, tmp_path):
    from elical_hf import ConfidenceTrainingArguments
    from elical_hf.training.recipe import train_stage

    model = AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False)
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    head = {n: p.detach().clone() for n, p in model.named_parameters() if "confidence_head.modules_to_save" in n}
    rows = [{"question": f"question number {i} about plays", "consistency": (i % 5) / 4, "correctness": float(i % 2)}
            for i in range(24)]
    train_stage(model, rows, str(tmp_path / "stage1"), "elicitation", dev_fraction=0.0,
                training_args=ConfidenceTrainingArguments(num_train_epochs=1, per_device_train_batch_size=8,
                                                          learning_rate=1e-2, report_to="none"))
    stage1 = AutoModelForConfidence.from_pretrained(tmp_path / "stage1")
    assert stage1.confidence_config.use_lora is False and not stage1.uses_lora
    trained = dict(stage1.named_parameters())
    assert all(torch.equal(trained[n], p) for n, p in lora.items())  # the placeholder LoRA never trains
    assert all(not torch.equal(trained[n], p) for n, p in head.items())
    entry = stage1.confidence_config.training_history[-1]
    assert entry["stage"] == "elicitation" and entry["lora_trainable"] is False
    assert "head only (no LoRA)" in (tmp_path / "stage1" / "README.md").read_text()
    # stage 1 again, head only on cached features: `calibrate_head` takes the elicitation stage for such a model
    fresh = AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False)
    calibrate_head(fresh, rows, stage="elicitation", dev_fraction=0.0, num_train_epochs=2)
    assert fresh.confidence_config.trained_stages == ["elicitation"]
    # stage 2 on labels, head only
    calibrate_head(stage1, rows, dev_fraction=0.0, num_train_epochs=2)
    assert stage1.confidence_config.trained_stages == ["elicitation", "calibration"]
    with pytest.raises(ValueError, match="may also run stage 1"):
        calibrate_head(AutoModelForConfidence.from_pretrained(tiny_llama), rows, stage="elicitation")


def test_pipeline_generate(peaky_base, tmp_path):
    model = perturbed(peaky_base, use_lora=True)
    confidences = model.confidence(QUESTIONS)
    model.confidence_config.decision_threshold = between(confidences, 0)
    model.save_pretrained(tmp_path / "m")
    gate = ConfidenceEstimationPipeline.from_pretrained(tmp_path / "m", device="cpu")
    direct = AutoModelForConfidence.from_pretrained(tmp_path / "m").answer(QUESTIONS, max_new_tokens=MAX_NEW_TOKENS)
    for batch_size in (1, 2):
        outputs = gate(QUESTIONS, generate=True, max_new_tokens=MAX_NEW_TOKENS, batch_size=batch_size)
        assert [o["decision"] for o in outputs] == [d["decision"] for d in direct]
        assert [o["answer"] for o in outputs] == [d["answer"] for d in direct]
    assert set(gate(QUESTIONS[0])) == {"confidence", "decision"}  # without generate: the score alone


def with_domains(model, pooled: float, **domains: float | None):
    """Give `model` a saved per-domain map (as `elical-hf threshold --by dataset` writes it) around `pooled`."""
    config = model.confidence_config
    config.decision_threshold, config.retrieve_threshold = pooled, None
    config.domain_thresholds = {"by": "dataset", "min_rows": 30, "domains": {
        name: {"decision_threshold": t, "rows": 40, "answered": None, "risk_control": None,
               "fallback": None if t is not None else "5 rows, fewer than 30"} for name, t in domains.items()}}
    return model


def test_thresholds_for_a_domain_its_own_or_the_fallback():
    from elical_hf.settings.configuration import ConfidenceConfig
    from elical_hf.gate import thresholds_for

    config = ConfidenceConfig(decision_threshold=0.6, retrieve_threshold=0.4, domain_thresholds={
        "by": "category", "domains": {"math": {"decision_threshold": 0.8}, "trivia": {"decision_threshold": 0.3},
                                      "tiny": {"decision_threshold": None, "fallback": "3 rows, fewer than 30"}}})
    assert thresholds_for(config) == thresholds_for(config, None) == (0.6, 0.4)
    assert thresholds_for(config, "math") == (0.8, 0.4)
    assert thresholds_for(config, "trivia") == (0.3, 0.3)  # the retrieve band never starts above the threshold
    assert thresholds_for(config, "tiny") == (0.6, 0.4)  # the map's fallback
    with pytest.raises(ValueError, match=r"Unknown domain 'law': .*'category' values 'math', 'tiny', 'trivia'"):
        thresholds_for(config, "law")
    with pytest.raises(ValueError, match="must be a string"):
        thresholds_for(config, 3)
    with pytest.raises(ValueError, match="no per-domain thresholds"):
        thresholds_for(ConfidenceConfig(decision_threshold=0.6), "math")
    # an old config (no map) loads and gates exactly as before
    assert ConfidenceConfig.from_dict({"decision_threshold": 0.6}).domain_thresholds is None


def test_answer_gates_each_question_with_its_domain(peaky_base):
    model = perturbed(peaky_base, use_lora=True)
    confidences = model.confidence(QUESTIONS)
    pooled = between(confidences, 1)
    with_domains(model, pooled, strict=1.0, lenient=0.0, small=None)
    expected_pooled = ["answer" if c >= pooled else "abstain" for c in confidences]
    assert [r["decision"] for r in model.answer(QUESTIONS, max_new_tokens=2)] == expected_pooled
    assert [r["decision"] for r in model.answer(QUESTIONS, domain="small", max_new_tokens=2)] == expected_pooled
    assert {r["decision"] for r in model.answer(QUESTIONS, domain="strict", max_new_tokens=2)} == {"abstain"}
    mixed = model.answer(QUESTIONS, domain=["strict", "lenient", None, "lenient"], max_new_tokens=2)
    assert [r["decision"] for r in mixed] == ["abstain", "answer", expected_pooled[2], "answer"]
    assert mixed[1]["answer"] is not None and mixed[0]["answer"] is None
    # threshold= overrides the domain's, as it overrides the saved one
    assert {r["decision"] for r in model.answer(QUESTIONS, domain="strict", threshold=0.0, max_new_tokens=2)} == {
        "answer"}
    with pytest.raises(ValueError, match="Unknown domain 'law'"):
        model.answer(QUESTIONS, domain="law")
    with pytest.raises(ValueError, match=r"one per question \(4\), got 2 domains"):
        model.answer(QUESTIONS, domain=["strict", "lenient"])
