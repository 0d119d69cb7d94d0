"""`SamplingSettings.greedy_repetition_penalty`: the greedy answer with the repetition penalty the paper's reference
code passes to its greedy decoding too (`infer_scripts/run_infer_consistency.sh:54-56`), in our decoder, completions,
the vLLM requests, `elical-hf sample`, and old sampling manifests that predate it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from elical_hf.signals import HFBackend, SamplingSettings, build_prompt_ids, generate_answers, sample_records
from elical_hf.signals.backends import vllm_request_params
from elical_hf.signals.generation import complete_prompts
from tests.test_signals_generation import QUESTIONS, model, tokenizer  # noqa: F401 - the same tiny models and questions


pytestmark = pytest.mark.float32  # token-for-token comparisons with `generate`

MAX_NEW_TOKENS = 12
PENALTY = 1.3


def greedy(model, tokenizer, penalty: float) -> list[dict]:
    settings = SamplingSettings(num_samples=2, max_new_tokens=MAX_NEW_TOKENS, batch_size=4,
                                greedy_repetition_penalty=penalty)
    return generate_answers(model, tokenizer, QUESTIONS, settings, progress=False, autocast_dtype=None)


def hf_greedy(model, tokenizer, prompt_ids: list[int], penalty: float) -> list[int]:
    out = model.generate(torch.tensor([prompt_ids]), do_sample=False, repetition_penalty=penalty,
                         max_new_tokens=MAX_NEW_TOKENS, pad_token_id=tokenizer.pad_token_id)
    tokens = out[0, len(prompt_ids):].tolist()
    return tokens[: tokens.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in tokens else tokens


def test_greedy_penalty_equals_hf_generate_and_changes_the_answer(model, tokenizer):
    plain, penalized = greedy(model, tokenizer, 1.0), greedy(model, tokenizer, PENALTY)
    prompt_ids = build_prompt_ids(tokenizer, QUESTIONS, SamplingSettings())
    for prompt, result in zip(prompt_ids, penalized):
        expected = hf_greedy(model, tokenizer, prompt, PENALTY)
        assert result["greedy_tokens"] == tokenizer.batch_decode([[t] for t in expected])
    for prompt, result in zip(prompt_ids, plain):
        expected = hf_greedy(model, tokenizer, prompt, 1.0)
        assert result["greedy_tokens"] == tokenizer.batch_decode([[t] for t in expected])
    assert any(a["greedy_tokens"] != b["greedy_tokens"] for a, b in zip(plain, penalized))  # it does something
    # the samples do not depend on the greedy row's penalty
    assert [r["sampling_response"] for r in plain] == [r["sampling_response"] for r in penalized]


def test_greedy_logprobs_stay_the_models_own(model, tokenizer):
    results = greedy(model, tokenizer, PENALTY)
    for prompt, result in zip(build_prompt_ids(tokenizer, QUESTIONS, SamplingSettings()), results):
        answer = tokenizer.convert_tokens_to_ids(result["greedy_tokens"])
        with torch.no_grad():
            logprobs = model(torch.tensor([prompt + answer])).logits[0].float().log_softmax(-1)
        positions = torch.arange(len(prompt) - 1, len(prompt) + len(answer) - 1)
        expected = logprobs[positions, torch.tensor(answer)]
        torch.testing.assert_close(torch.tensor(result["greedy_logprobs"]), expected, atol=1e-4, rtol=0)


def test_completions_take_the_penalty(model, tokenizer):
    settings = SamplingSettings(prompt_template="{question}")
    prompts = QUESTIONS[:3]
    replies = complete_prompts(model, tokenizer, prompts, max_new_tokens=MAX_NEW_TOKENS, progress=False,
                               repetition_penalty=PENALTY, autocast_dtype=None)
    for prompt, reply in zip(build_prompt_ids(tokenizer, prompts, settings), replies):
        expected = hf_greedy(model, tokenizer, prompt, PENALTY)
        assert reply == tokenizer.decode(expected, skip_special_tokens=True).strip()


def test_vllm_greedy_request_carries_the_penalty():
    params = lambda **kwargs: SimpleNamespace(**kwargs)  # noqa: E731 (a stand-in for vllm.SamplingParams)
    settings = SamplingSettings(greedy_repetition_penalty=1.05)
    greedy_params, sampling = vllm_request_params(params, QUESTIONS[:2], settings)
    assert (greedy_params.temperature, greedy_params.repetition_penalty) == (0.0, 1.05)
    assert sampling[0].repetition_penalty == 1.05
    default, _ = vllm_request_params(params, QUESTIONS[:2], SamplingSettings())
    assert default.repetition_penalty == 1.0
    with pytest.raises(ValueError, match="greedy_repetition_penalty"):
        SamplingSettings(greedy_repetition_penalty=0.0)


def test_sample_command_option():
    from elical_hf.cli import sample

    parser = sample.make_parser()
    (action,) = [a for a in parser._actions if a.dest == "greedy_repetition_penalty"]
    assert action.default == 1.0 and action.type is float


def test_a_manifest_from_before_the_setting_still_resumes(tiny_llama, tmp_path):
    backend = HFBackend(tiny_llama, autocast_dtype=None)
    questions = [{"id": f"q{i}", "question": q} for i, q in enumerate(QUESTIONS)]
    settings = SamplingSettings(num_samples=1, max_new_tokens=3, batch_size=2)
    first = sample_records(questions, backend, settings, tmp_path, shard_size=2, progress=False)
    manifest_path = tmp_path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["settings"]["greedy_repetition_penalty"]  # as written before the setting existed
    manifest_path.write_text(json.dumps(manifest))
    again = sample_records(questions, backend, settings, tmp_path, shard_size=2, progress=False)
    assert [r["greedy_response"] for r in again] == [r["greedy_response"] for r in first]
    with pytest.raises(ValueError, match="greedy_repetition_penalty: 1.0 -> 1.05"):
        sample_records(questions, backend, SamplingSettings(num_samples=1, max_new_tokens=3, batch_size=2,
                                                            greedy_repetition_penalty=1.05),
                       tmp_path, shard_size=2, progress=False)
