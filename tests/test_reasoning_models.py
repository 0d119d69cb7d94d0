"""Reasoning models (Qwen3): a tiny random Qwen3 with Qwen3's chat-template logic. Prompts are rendered with
`enable_thinking=False` by default and with the saved `chat_template_kwargs` in scoring, sampling, the gate and the
server; `<think>...</think>` is taken out of answers and judge replies before judging."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME
from elical_hf.settings.prompts import QA_PROMPT, chat_template_kwargs_for, render_prompt
from elical_hf.signals import SamplingSettings, apply_judges, build_prompt_ids, judge_with_llm
from elical_hf.signals.reasoning import strip_thinking, unfinished_thinking
from tests.conftest import save_tiny_base
from tests.serving import QuietServer


pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "when was the king born"]
THINKING_OFF = {"enable_thinking": False}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> str:
    return save_tiny_base(tmp_path_factory.mktemp("qwen3"), "qwen3", seed=3, initializer_range=0.2)


def rendered_ids(base: str, question: str, **kwargs) -> list[int]:
    """The QA prompt in `base`'s chat template, as transformers renders it with `kwargs`."""
    tokenizer = AutoTokenizer.from_pretrained(base)
    text = tokenizer.apply_chat_template([{"role": "user", "content": QA_PROMPT.format(question=question)}],
                                         tokenize=False, add_generation_prompt=True, **kwargs)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_thinking_is_off_by_default_only_for_templates_that_read_it(qwen3, tiny_llama):
    qwen3_tokenizer, llama_tokenizer = AutoTokenizer.from_pretrained(qwen3), AutoTokenizer.from_pretrained(tiny_llama)
    assert chat_template_kwargs_for(qwen3_tokenizer) == THINKING_OFF
    assert chat_template_kwargs_for(llama_tokenizer) == {}
    assert chat_template_kwargs_for(qwen3_tokenizer, {"enable_thinking": True}) == {"enable_thinking": True}
    assert render_prompt(qwen3_tokenizer, "x").endswith("<think>\n\n</think>\n\n")
    assert "<think>" not in render_prompt(qwen3_tokenizer, "x", chat_template_kwargs={"enable_thinking": True})


def test_a_new_qwen3_model_saves_its_chat_template_kwargs_and_scores_with_them(qwen3, tiny_llama, tmp_path):
    model = AutoModelForConfidence.from_pretrained(qwen3, dtype=torch.float32)
    config = model.confidence_config
    assert config.chat_template_kwargs == THINKING_OFF
    assert AutoModelForConfidence.from_pretrained(tiny_llama).confidence_config.chat_template_kwargs is None
    model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / CONFIDENCE_CONFIG_NAME).read_text())
    assert saved["chat_template_kwargs"] == {"enable_thinking": False}
    reloaded = AutoModelForConfidence.from_pretrained(tmp_path / "m", dtype=torch.float32)
    assert reloaded.confidence_config.chat_template_kwargs == THINKING_OFF
    from elical_hf.data.encoding import encode_prompts

    encoded = encode_prompts(QUESTIONS[:1], reloaded.tokenizer, reloaded.confidence_config)[0]
    assert encoded == rendered_ids(qwen3, QUESTIONS[0], enable_thinking=False)
    off = reloaded.confidence(QUESTIONS)
    reloaded.confidence_config.chat_template_kwargs = {"enable_thinking": True}  # the saved value is what is used
    assert reloaded.confidence(QUESTIONS) != pytest.approx(off, abs=1e-6)


def test_sampling_renders_with_the_settings_kwargs(qwen3, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(qwen3)
    assert build_prompt_ids(tokenizer, QUESTIONS[:1], SamplingSettings())[0] == rendered_ids(
        qwen3, QUESTIONS[0], enable_thinking=False)
    thinking = SamplingSettings(chat_template_kwargs='{"enable_thinking": true}')  # the command line's JSON
    assert thinking.chat_template_kwargs == {"enable_thinking": True}
    assert build_prompt_ids(tokenizer, QUESTIONS[:1], thinking)[0] == rendered_ids(qwen3, QUESTIONS[0],
                                                                                    enable_thinking=True)
    with pytest.raises(ValueError, match="--chat_template_kwargs.*JSON object"):
        SamplingSettings(chat_template_kwargs="enable_thinking")
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": str(i), "question": q}) + "\n" for i, q in enumerate(QUESTIONS)))
    for flag, expected in (([], THINKING_OFF), (["--chat_template_kwargs", '{"enable_thinking": true}'],
                                                {"enable_thinking": True})):
        out = tmp_path / f"run{len(flag)}"
        assert cli_main(["sample", "--questions", str(questions), "--output_dir", str(out), "--model", qwen3,
                         "--num_samples", "1", "--max_new_tokens", "2", *flag]) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["settings"]["chat_template_kwargs"] == expected  # what the prompts were rendered with


def test_the_gate_answers_with_the_prompt_it_scored(qwen3, monkeypatch):
    model = AutoModelForConfidence.from_pretrained(qwen3, use_lora=False, dtype=torch.float32)
    inner = model.get_base_model()
    expected = model.confidence(QUESTIONS)

    def no_second_pass(*args, **kwargs):
        raise AssertionError("the confidence prompt and the answer prompt differ")

    monkeypatch.setattr(inner, "confidence", no_second_pass)  # zero overhead: one prefill serves both
    results = model.answer(QUESTIONS, threshold=0.0, max_new_tokens=4)
    assert [r["confidence"] for r in results] == pytest.approx(expected, abs=1e-5)
    monkeypatch.undo()
    inner.confidence_config.chat_template_kwargs = {"enable_thinking": True}  # a model trained with thinking on
    thinking = model.confidence(QUESTIONS)
    monkeypatch.setattr(inner, "confidence", no_second_pass)
    assert [r["confidence"] for r in model.answer(QUESTIONS, threshold=0.0, max_new_tokens=4)] == pytest.approx(
        thinking, abs=1e-5)  # the answer prompt follows the model's kwargs, so they still share their prefill
    inner.confidence_config.chat_template_kwargs = THINKING_OFF
    lm = AutoModelForCausalLM.from_pretrained(qwen3)
    ids = rendered_ids(qwen3, QUESTIONS[0], enable_thinking=False)
    generated = lm.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=4)[0, len(ids):].tolist()
    assert results[0]["answer_tokens"] == AutoTokenizer.from_pretrained(qwen3).batch_decode([[t] for t in generated])


def test_the_server_renders_prompts_with_the_kwargs(qwen3, tmp_path):
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import ChatCompletionRequest, RequestError

    model = AutoModelForConfidence.from_pretrained(qwen3, dtype=torch.float32)
    engine = GateEngine(model, "q3", threshold=0.0, max_tokens=3)
    request = ChatCompletionRequest(messages=[{"role": "user", "content": QUESTIONS[0]}])
    (reply,) = engine.run([engine.prepare(request)])
    assert reply.body["usage"]["prompt_tokens"] == len(rendered_ids(qwen3, QUESTIONS[0], enable_thinking=False))
    assert reply.body["choices"][0]["message"]["content"] == model.answer(QUESTIONS[:1], threshold=0.0,
                                                                          max_new_tokens=3)[0]["answer"]
    with pytest.raises(RequestError, match="chat_template_kwargs"):
        engine.prepare(ChatCompletionRequest(messages=request.messages, chat_template_kwargs={"enable_thinking": 1}))
    model.confidence_config.chat_template_kwargs = {"enable_thinking": True}  # the model's own kwargs are used
    (reply,) = engine.run([engine.prepare(request)])
    assert reply.body["usage"]["prompt_tokens"] == len(rendered_ids(qwen3, QUESTIONS[0], enable_thinking=True))
    with QuietServer(qwen3, "--mode", "completion", "--served_model_name", "q3") as server:
        counts = {}
        for kwargs in (None, {"enable_thinking": True}, {"enable_thinking": False}):
            body = {"messages": [{"role": "user", "content": "who wrote hamlet"}], "max_tokens": 2,
                    **({"chat_template_kwargs": kwargs} if kwargs is not None else {})}
            status, reply, _ = server.post("/chat/completions", body)
            assert status == 200, reply
            counts[json.dumps(kwargs)] = reply["usage"]["prompt_tokens"]
    assert counts["null"] == counts['{"enable_thinking": false}'] == counts['{"enable_thinking": true}'] + 2


@pytest.mark.parametrize("text, stripped, unfinished", [
    ("<think>\nmaybe Paris? no.\n</think>\n\nLyon.", "Lyon.", False),
    ("the template opened it</think> Lyon", "Lyon", False),
    ("<think>a</think>x<think>b</think>y", "xy", False),
    ("<think>reasoning cut off before any answer", "", True),
    ("Lyon", "Lyon", False),
    (None, None, False),
])
def test_strip_thinking(text, stripped, unfinished):
    assert strip_thinking(text) == stripped and unfinished_thinking(text) is unfinished


def test_answers_are_judged_without_their_reasoning(tmp_path):
    records = [{"question": "capital of france", "answer": ["Paris"],
                "greedy_response": "<think>\nis it Paris? no.\n</think>\n\nLyon",
                "sampling_response": ["<think>hmm</think> Paris", "<think>Paris or Lyon</think> Lyon"]}]
    judged = copy.deepcopy(records)
    summary = apply_judges(judged, "has_answer", "lexical")
    assert judged[0]["greedy_correctness"] is False and judged[0]["sampling_correctness"] == [True, False]
    assert judged[0]["consistency_judgement"] == [False, True]
    assert judged[0]["greedy_response"] == records[0]["greedy_response"]  # the records keep what was sampled
    assert summary["correctness"]["answers_with_thinking"] == 3
    kept = copy.deepcopy(records)
    apply_judges(kept, "has_answer", strip_thinking=False)
    assert kept[0]["greedy_correctness"] is True  # "Paris" inside the reasoning would count
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(records[0]) + "\n")
    for flag, expected in (([], False), (["--no_strip_thinking"], True)):
        out = tmp_path / f"out{len(flag)}.jsonl"
        assert cli_main(["judge", "--records", str(path), "--output", str(out), "--correctness", "has_answer",
                         *flag]) == 0
        assert json.loads(out.read_text().splitlines()[0])["greedy_correctness"] is expected


def test_an_llm_judge_is_read_without_its_reasoning():
    records = [{"question": "capital of france", "answer": ["Paris"], "greedy_response": "Paris",
                "sampling_response": ["Paris"]}]
    replies = {"Paris": "<think>the answer could be uncertain, but it names Paris</think> certain"}

    def reasoning_judge(prompts, max_new_tokens=64):
        return [replies["Paris"] for _ in prompts]

    judged = copy.deepcopy(records)
    judge_with_llm(judged, reasoning_judge, "correctness", progress=False)
    assert judged[0]["greedy_correctness"] is True
    raw = copy.deepcopy(records)
    judge_with_llm(raw, reasoning_judge, "correctness", progress=False, strip_thinking=False)
    assert raw[0]["greedy_correctness"] is False  # "uncertain" in the deliberation is read as the verdict
    summary = judge_with_llm(copy.deepcopy(records), lambda prompts: ["<think>still thinking"] * len(prompts),
                             "correctness", progress=False)
    assert summary["unfinished_thinking"] == 2
