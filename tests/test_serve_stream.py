"""`elical-hf serve` streams (`stream: true`) and returns log-probabilities (`logprobs: true`): the decision first (the
first chunk's `elical` and the headers), an abstention as one chunk, the answer's tokens as they are decoded adding up
to the unstreamed answer, a client that leaves stops its decoding; each answer token's log-probability is the base
model's, recomputed here with plain forward passes. Driven with the real `openai` client and LangChain's
`ChatOpenAI.stream()` against a real server (uvicorn on a socket, in this process)."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest
import torch

from elical_hf import AutoModelForConfidence
from tests.conftest import save_tiny_base
from tests.serving import cut, gated_model, running


openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
             "when was the king born", "who was the first president", "what is the largest river in the world"]
MAX_TOKENS = 6
NAME = "tiny-gate"
ABSTAIN = "No answer from me."


def lookup(question: str) -> str | None:
    """The retriever: nothing about kings, and it fails on questions starting with "fail"."""
    if question.startswith("fail"):
        raise RuntimeError("the index is offline")
    return None if "king" in question else "paris is the capital of france . william shakespeare wrote hamlet ."


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """A gate server over a tiny confidence model: 2 of the 6 questions answered, 2 retrieved for, 2 abstained.
    Yields (port, model, base folder, what `model.answer` gives)."""
    from elical_hf.serve.app import create_app
    from elical_hf.serve.engine import GateEngine

    root = tmp_path_factory.mktemp("stream")
    base = save_tiny_base(root / "base", "llama", seed=3, initializer_range=0.2)
    confidences = gated_model(base, root / "model", QUESTIONS, answered=2)
    model = AutoModelForConfidence.from_pretrained(root / "model", dtype=torch.float32)
    band = cut(confidences, 4)
    engine = GateEngine(model, NAME, retrieve_threshold=band, retriever=lookup, abstain_message=ABSTAIN,
                        max_tokens=MAX_TOKENS, max_tokens_limit=64, allow_request_thresholds=True)
    expected = model.answer(QUESTIONS, retrieve_threshold=band, retrieve=lookup, max_new_tokens=MAX_TOKENS)
    assert [want["decision"] for want in expected].count("answer") == 2
    assert any(want["decision"] == "retrieve" and want["answer"] for want in expected)
    assert any(want["answer"] is None for want in expected)
    with running(create_app(engine, batch_wait_ms=50)) as port:
        yield port, model, base, expected


def client(port: int):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)


def ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def test_a_stream_sends_the_decision_first_and_adds_up_to_the_answer(gate):
    port, _, _, expected = gate
    openai_client = client(port)
    for question, want in zip(QUESTIONS, expected):
        whole = openai_client.chat.completions.create(model=NAME, messages=ask(question), max_tokens=MAX_TOKENS)
        raw = openai_client.chat.completions.with_raw_response.create(
            model=NAME, messages=ask(question), max_tokens=MAX_TOKENS, stream=True,
            stream_options={"include_usage": True})
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.headers["x-elical-decision"] == want["decision"]
        assert float(raw.headers["x-elical-confidence"]) == pytest.approx(want["confidence"], abs=1e-5)
        chunks = list(raw.parse())
        assert chunks[0].elical["decision"] == want["decision"] == whole.elical["decision"]
        assert chunks[0].elical["confidence"] == pytest.approx(want["confidence"], abs=1e-5)
        assert chunks[0].elical["context"] == want["context"]
        assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()
        choices = [chunk.choices[0] for chunk in chunks[:-1]]
        assert all(chunk.id == chunks[0].id and chunk.object == "chat.completion.chunk" for chunk in chunks)
        if want["answer"] is None:  # one chunk: the abstain message, finish_reason "abstain"
            assert len(choices) == 1 and (choices[0].delta.content, choices[0].finish_reason) == (ABSTAIN, "abstain")
            assert choices[0].delta.role == "assistant" and choices[0].logprobs is None
            continue
        assert choices[0].delta.role == "assistant" and choices[0].delta.content == ""
        assert "".join(choice.delta.content or "" for choice in choices) == want["answer"]
        assert want["answer"] == whole.choices[0].message.content
        assert len([choice for choice in choices if choice.delta.content]) > 1  # token by token, not one piece
        finish = [choice.finish_reason for choice in choices]
        assert finish == [None] * (len(choices) - 1) + [whole.choices[0].finish_reason]


def test_tokens_are_sent_as_they_are_decoded_and_a_client_that_leaves_stops_them(gate):
    """Each forward pass of the backbone takes 80 ms: the first token arrives before the backbone has run its last
    step, and after the client hangs up the backbone runs at most a few more steps (not the 40 it asked for)."""
    port, model, _, expected = gate
    question = QUESTIONS[[want["decision"] for want in expected].index("answer")]
    backbone = model.get_base_model().model if hasattr(model, "get_base_model") else model.model
    calls: list[float] = []

    def slow(module, inputs, output):
        calls.append(time.monotonic())
        time.sleep(0.08)

    handle = backbone.register_forward_hook(slow)
    try:
        stream = client(port).chat.completions.create(model=NAME, messages=ask(question), max_tokens=8, stream=True)
        steps_run = [len(calls) for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
        # the tokens came one by one: the first arrived while the backbone still had steps to run
        assert len(steps_run) >= 3 and steps_run[0] < steps_run[-1]

        body = json.dumps({"model": NAME, "messages": ask(question), "max_tokens": 40, "stream": True})
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("x-elical-decision") == "answer"
        received = b""
        while received.count(b"data: ") < 2:  # the decision chunk and the first token's
            received += response.read1()
        assert received.startswith(b"data: ") and b'"elical"' in received.split(b"\n\n")[0]
        calls.clear()
        connection.sock.shutdown(2)
        connection.close()
        time.sleep(1.5)
        assert len(calls) < 8, f"the backbone ran {len(calls)} more steps for a client that left"
    finally:
        handle.remove()
    again = client(port).chat.completions.create(model=NAME, messages=ask(question), max_tokens=MAX_TOKENS)
    assert again.choices[0].message.content == expected[QUESTIONS.index(question)]["answer"]


def test_logprobs_are_the_base_models_recomputed_with_plain_forward_passes(gate):
    """`logprobs` of each answered question against a plain greedy loop of the base model (`AutoModelForCausalLM`,
    one full forward pass per token, no cache): the same tokens, log-probabilities and top alternatives; streamed,
    the same entries."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from elical_hf.signals import SamplingSettings
    from elical_hf.signals.generation import build_prompt_ids

    port, _, base, expected = gate
    tokenizer = AutoTokenizer.from_pretrained(base)
    language_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    openai_client = client(port)
    for question, want in zip(QUESTIONS, expected):
        if want["answer"] is None:
            abstained = openai_client.chat.completions.create(model=NAME, messages=ask(question), logprobs=True)
            assert abstained.choices[0].logprobs is None
            continue
        if want["decision"] != "answer":  # answered with retrieved context: another prompt
            continue
        reply = openai_client.chat.completions.create(model=NAME, messages=ask(question), max_tokens=MAX_TOKENS,
                                                      logprobs=True, top_logprobs=3)
        content = reply.choices[0].logprobs.content
        ids = build_prompt_ids(tokenizer, [question], SamplingSettings(num_samples=1, max_new_tokens=MAX_TOKENS))[0]
        eos = {tokenizer.eos_token_id}
        with torch.no_grad():
            for step in range(MAX_TOKENS):
                log_probs = language_model(torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)
                token = int(log_probs.argmax())
                if token in eos:
                    break
                entry = content[step]
                assert entry.token == tokenizer.decode([token]) and entry.bytes == list(entry.token.encode())
                assert entry.logprob == pytest.approx(float(log_probs[token]), abs=1e-4)
                top = log_probs.topk(3)
                assert [alt.token for alt in entry.top_logprobs] == [tokenizer.decode([i]) for i in top.indices]
                assert [alt.logprob for alt in entry.top_logprobs] == pytest.approx(top.values.tolist(), abs=1e-4)
                ids.append(token)
        assert len(content) == step + (token not in eos)
        streamed = openai_client.chat.completions.create(model=NAME, messages=ask(question), max_tokens=MAX_TOKENS,
                                                         logprobs=True, top_logprobs=3, stream=True)
        entries = [entry for chunk in streamed if chunk.choices and chunk.choices[0].logprobs
                   for entry in chunk.choices[0].logprobs.content]
        assert [entry.model_dump() for entry in entries] == [entry.model_dump() for entry in content]


def test_langchain_chat_openai_streams(gate):
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    port, _, _, expected = gate
    chat = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", model=NAME, max_tokens=MAX_TOKENS,
                      max_retries=0, include_response_headers=True)
    for question, want in zip(QUESTIONS, expected):
        chunks = list(chat.stream(question))
        assert chunks[0].response_metadata["headers"]["x-elical-decision"] == want["decision"]
        assert "".join(chunk.content for chunk in chunks) == (want["answer"] if want["answer"] is not None else ABSTAIN)
        finish = [chunk.response_metadata.get("finish_reason") for chunk in chunks]
        assert ("abstain" in finish) == (want["answer"] is None)


@pytest.mark.parametrize("fields, param, code", [
    ({"stream": True, "n": 2}, "n", "unsupported_parameter"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "less_than_equal"),
    ({"top_logprobs": 2}, "top_logprobs", None),
    ({"stream_options": {"include_usage": True}}, "stream_options", None),
    ({"stream": "yes"}, "stream", "bool_type"),
])
def test_bad_stream_and_logprobs_options_are_refused(gate, fields, param, code):
    port = gate[0]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("POST", "/v1/chat/completions", json.dumps({"messages": ask(QUESTIONS[0]), **fields}),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    error = json.loads(response.read())["error"]
    assert response.status == 400 and (error["param"], error["code"]) == (param, code), error


def test_streams_batched_together_and_requests_refused_before_their_decision(gate):
    port, _, _, expected = gate
    with pytest.raises(openai.BadRequestError) as refused:
        client(port).chat.completions.create(model=NAME, messages=ask(" ".join(["who wrote hamlet"] * 200)),
                                             stream=True)
    assert refused.value.body["code"] == "context_length_exceeded"
    replies: dict[int, str] = {}
    threads = [threading.Thread(target=lambda i=i: replies.__setitem__(i, "".join(
        c.choices[0].delta.content or "" for c in client(port).chat.completions.create(
            model=NAME, messages=ask(QUESTIONS[i]), max_tokens=MAX_TOKENS, stream=True) if c.choices)))
               for i in range(len(QUESTIONS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert replies == {i: want["answer"] or ABSTAIN for i, want in enumerate(expected)}  # streamed in one batch
    with pytest.raises(openai.InternalServerError) as failed:  # the retriever fails: its error, before any chunk
        client(port).chat.completions.create(model=NAME, messages=ask("fail who wrote hamlet"), stream=True,
                                             extra_body={"elical": {"threshold": 1.0, "retrieve_threshold": 0.0}})
    assert failed.value.status_code == 502 and "index is offline" in failed.value.body["message"]


def test_the_completion_mode_refuses_streams_and_logprobs():
    from elical_hf.serve.completion import CompletionEngine
    from elical_hf.serve.schema import RequestError, parse_request
    from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    engine = CompletionEngine(make_tiny_causal_lm(tokenizer), tokenizer, "chat")
    for field in ("stream", "logprobs"):
        with pytest.raises(RequestError, match="for the gate") as refused:
            engine.prepare(parse_request(json.dumps({"messages": ask("hi"), field: True}).encode()))
        assert (refused.value.param, refused.value.code) == (field, "unsupported_parameter")


def test_the_streamed_text_is_always_the_beginning_of_the_answer():
    """A byte-level tokenizer (one token per byte: "é" is two): token by token, the text a stream may send never
    holds half a character, the beginning of a stop string or whitespace the answer strips, and it ends as the
    answer (cut at the stop string, stripped)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from elical_hf.serve.stream import TokenStream
    from elical_hf.signals.decoding import cut_at_stop

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    for text, stop in [(" Café au lait, naïve ÷ STOP and more", ["STOP"]), ("über  \n\n", ["\n\n"]),
                       ("déjà vu", [])]:
        ids = tokenizer(text)["input_ids"]
        assert any(tokenizer.decode(ids[:k]).endswith("\ufffd") for k in range(len(ids)))  # a character split
        events: list[tuple] = []
        stream = TokenStream(tokenizer, stop, set(), None, events.append)
        for token in ids:
            stream.push(token, 0.0, None)
        answer = cut_at_stop(tokenizer.decode(ids), stop).strip()
        sent = [event[2] for event in events]
        assert all(answer.startswith(part) and "\ufffd" not in part for part in sent)
        assert all(b.startswith(a) for a, b in zip(sent, sent[1:])) and sent[-1] == answer
        assert not any(part.endswith((" ", "S", "ST", "STO", "\n")) for part in sent)


def test_a_failure_after_the_decision_is_an_error_event_and_the_server_goes_on(gate):
    """The backbone fails on the third decoding step of an answered, streamed request: the client has its decision
    and first tokens, then the openai client raises the error event (not a cut connection); the next request is
    answered."""
    port, model, _, expected = gate
    question = QUESTIONS[[want["decision"] for want in expected].index("answer")]
    backbone = model.get_base_model().model if hasattr(model, "get_base_model") else model.model
    calls = []

    def fail(module, inputs, output):
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("the accelerator fell over")

    handle = backbone.register_forward_hook(fail)
    received = []
    try:
        with pytest.raises(openai.APIError, match="fell over"):
            for chunk in client(port).chat.completions.create(model=NAME, messages=ask(question), max_tokens=8,
                                                              stream=True):
                received.append(chunk)
    finally:
        handle.remove()
    assert received and received[0].elical["decision"] == "answer"
    assert expected[QUESTIONS.index(question)]["answer"].startswith(
        "".join(chunk.choices[0].delta.content or "" for chunk in received))
    again = client(port).chat.completions.create(model=NAME, messages=ask(question), max_tokens=MAX_TOKENS)
    assert again.choices[0].message.content == expected[QUESTIONS.index(question)]["answer"]
