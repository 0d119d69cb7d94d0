"""`elical-hf serve`: a real server process on a free local port, driven over HTTP, with the real `openai` client and
LangChain's `ChatOpenAI`: answers equal `model.answer`'s, abstentions say so, concurrent requests are batched, bad
requests get OpenAI-style 4xx errors and the server survives them and clients that go away."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from tests.conftest import save_tiny_base
from tests.serving import QuietServer, cut, gated_model


pytestmark = pytest.mark.float32  # the server process runs in float32 too (ELICAL_HF_CPU_BF16=0)

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
             "when was the king born", "who was the first president", "what is the largest river in the world"]
MAX_TOKENS = 6
NAME = "tiny-gate"
ABSTAIN = "No answer from me."
KB_SOURCE = '''
def lookup(question):
    """The test's retriever: fails on questions starting with "fail", finds nothing about kings."""
    if question.startswith("fail"):
        raise RuntimeError("the index is offline")
    if "king" in question:
        return None
    return "paris is the capital of france . william shakespeare wrote hamlet ."
'''


def lookup(question: str) -> str | None:
    namespace: dict = {}
    exec(KB_SOURCE, namespace)
    return namespace["lookup"](question)


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """A gate server: 2 of the 6 questions answered, 2 in the retrieve band (`--retrieve_threshold`, `kb:lookup`),
    2 abstained; batches collect for 150 ms; requests may set any thresholds. Yields (server, folder, confidences,
    retrieve threshold)."""
    root = tmp_path_factory.mktemp("serve")
    base = save_tiny_base(root / "base", "llama", seed=3, initializer_range=0.2)
    confidences = gated_model(base, root / "model", QUESTIONS, answered=2)
    retrieve_threshold = cut(confidences, 4)
    (root / "kb.py").write_text(KB_SOURCE)
    server = QuietServer(str(root / "model"), "--served_model_name", NAME, "--max_tokens", str(MAX_TOKENS),
                           "--retrieve_threshold", repr(retrieve_threshold), "--retriever", "kb:lookup",
                           "--abstain_message", ABSTAIN, "--batch_wait_ms", "150", "--allow_request_thresholds", "true",
                           cwd=str(root))
    yield server, str(root / "model"), confidences, retrieve_threshold
    server.stop()


@pytest.fixture(scope="module")
def expected(gate):
    """What `model.answer` gives in-process for the 6 questions, with the same thresholds and retriever."""
    _, folder, _, retrieve_threshold = gate
    model = AutoModelForConfidence.from_pretrained(folder, dtype=torch.float32)
    return model.answer(QUESTIONS, retrieve_threshold=retrieve_threshold, retrieve=lookup, max_new_tokens=MAX_TOKENS)


def bugs(server: QuietServer) -> list[str]:
    """What the server logged as its own failures (a route's exception, a failed batch), not a retriever's."""
    return [line for line in server.output().splitlines() if "Unexpected error" in line or "requests failed" in line]


def ask(question: str, **fields) -> dict:
    return {"model": NAME, "messages": [{"role": "user", "content": question}], **fields}


def check_reply(status: int, body: dict, headers: dict, want: dict) -> None:
    """A server reply against one of `model.answer`'s results."""
    assert status == 200, body
    choice, gate = body["choices"][0], body["elical"]
    assert gate["decision"] == want["decision"] and gate["confidence"] == pytest.approx(want["confidence"], abs=1e-5)
    assert headers["x-elical-decision"] == want["decision"]
    assert float(headers["x-elical-confidence"]) == pytest.approx(want["confidence"], abs=1e-5)
    assert gate["context"] == want["context"]
    if want["answer"] is None:
        assert (choice["message"]["content"], choice["finish_reason"]) == (ABSTAIN, "abstain")
        assert body["usage"]["completion_tokens"] == 0 and gate["answered"] is False
    else:
        assert choice["message"]["content"] == want["answer"]
        assert choice["finish_reason"] == ("length" if len(want["answer_tokens"]) == MAX_TOKENS else "stop")
        assert body["usage"]["completion_tokens"] == len(want["answer_tokens"])


def test_each_request_is_gated_as_model_answer_gates_it(gate, expected):
    server, _, confidences, retrieve_threshold = gate
    assert [r["decision"] for r in expected].count("answer") == 2
    assert [r["decision"] for r in expected].count("retrieve") == 2
    assert any(r["decision"] == "retrieve" and r["answer"] is not None for r in expected)  # answered with context
    for question, want in zip(QUESTIONS, expected):
        status, body, headers = server.post("/chat/completions", ask(question))
        check_reply(status, body, headers, want)
        assert body["model"] == NAME and body["object"] == "chat.completion"
        assert float(headers["x-elical-threshold"]) == pytest.approx(cut(confidences, 2), rel=1e-5)
        assert body["elical"]["retrieve_threshold"] == pytest.approx(retrieve_threshold)
    status, listing, _ = server.get("/models")
    assert status == 200 and [m["id"] for m in listing["data"]] == [NAME]


def test_a_system_prompt_and_earlier_turns_are_left_out_and_counted(gate, expected):
    """The model's `chat_context` ("question", the default): the last user message is the question, scored and
    answered as in training; the request's system prompt and history are left out of both and counted."""
    server = gate[0]
    for i in (0, 1):
        history = [{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi! Ask away."}]
        body = {"model": NAME, "messages": [*history, {"role": "user", "content": QUESTIONS[i]}]}
        status, reply, headers = server.post("/chat/completions", body)
        check_reply(status, reply, headers, expected[i])
        assert reply["elical"]["messages_left_out"] == 3
    status, reply, _ = server.post("/chat/completions", ask(QUESTIONS[0]))
    assert reply["elical"]["messages_left_out"] == 0


def test_a_request_sets_its_own_thresholds(gate):
    server, _, confidences, _ = gate
    lowest = QUESTIONS[confidences.index(min(confidences))]
    status, body, _ = server.post("/chat/completions", ask(lowest, elical={"threshold": 0.0}))
    assert status == 200 and body["elical"]["decision"] == "answer" and body["choices"][0]["finish_reason"] != "abstain"
    status, body, _ = server.post("/chat/completions", ask("when was the king born",
                                                           elical={"threshold": 1.0, "retrieve_threshold": 0.0}))
    assert status == 200 and body["elical"]["decision"] == "retrieve" and body["elical"]["context"] is None
    assert body["choices"][0]["finish_reason"] == "abstain"  # nothing retrieved: no answer


def test_concurrent_requests_are_batched_and_one_failure_stays_its_own(gate, expected):
    server = gate[0]
    questions = [*QUESTIONS, "fail who wrote hamlet"]
    replies: dict[int, tuple] = {}

    def send(i: int) -> None:
        elical = {"threshold": 1.0, "retrieve_threshold": 0.0} if questions[i].startswith("fail") else None
        replies[i] = server.post("/chat/completions", ask(questions[i], **({"elical": elical} if elical else {})))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(questions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for i, want in enumerate(expected):
        check_reply(*replies[i], want)  # the same answers as one at a time
    assert max(replies[i][1]["elical"]["batch_size"] for i in range(len(QUESTIONS))) >= 3
    status, body, _ = replies[len(QUESTIONS)]
    assert status == 502 and body["error"]["code"] == "retriever_failed" and "index is offline" in body["error"]["message"]


LONG_QUESTION = " ".join(["who wrote hamlet"] * 200)  # 600 tokens: more than the tiny model's 512 positions


@pytest.mark.parametrize("body, status, param, code", [
    (b"{not json", 400, None, "invalid_json"),
    ({"model": NAME}, 400, "messages", "missing"),
    ({"messages": "who wrote hamlet"}, 400, "messages", "list_type"),
    ({"messages": []}, 400, "messages", "too_short"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role", "literal_error"),
    (ask("   "), 400, "messages.0.content", None),
    ({"messages": [{"role": "user", "content": "who wrote hamlet"}, {"role": "assistant", "content": "Shakespeare"}]},
     400, "messages", "unsupported_messages"),
    ({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": " "}]},
     400, "messages.1.content", None),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400, "messages.0.content", "unsupported_content"),
    (ask("who wrote hamlet", n=2), 400, "n", "unsupported_parameter"),
    (ask("who wrote hamlet", tools=[{"type": "function", "function": {"name": "f"}}]), 400, "tools",
     "unsupported_parameter"),
    (ask("who wrote hamlet", repetition_penalty=1.05), 400, "repetition_penalty", "unsupported_parameter"),
    (ask("who wrote hamlet", max_tokens=0), 400, "max_tokens", "greater_than_equal"),
    (ask("who wrote hamlet", max_tokens=600), 400, "max_tokens", "max_tokens_limit_exceeded"),
    (ask(LONG_QUESTION), 400, "messages", "context_length_exceeded"),
    (ask("who wrote hamlet", elical={"threshold": 2}), 400, "elical", None),
    (ask("who wrote hamlet", elical={"treshold": 0.5}), 400, "elical.treshold", "extra_forbidden"),
    ({**ask("who wrote hamlet"), "model": "gpt-4o"}, 404, "model", "model_not_found"),
])
def test_bad_requests_get_openai_errors(gate, body, status, param, code):
    server = gate[0]
    got, error, _ = server.post("/chat/completions", body)
    assert got == status, error
    assert set(error) == {"error"} and set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["type"] == "invalid_request_error" and error["error"]["message"]
    assert error["error"]["param"] == param
    if code is not None:
        assert error["error"]["code"] == code


def test_unknown_routes_and_methods_are_openai_errors_and_the_server_lives_on(gate, expected):
    server = gate[0]
    status, error, _ = server.get("/nothing")
    assert status == 404 and error["error"]["code"] == "not_found"
    status, error, _ = server.get("/chat/completions")
    assert status == 405 and error["error"]["code"] == "method_not_allowed"
    status, error, _ = server.get("/models/other")
    assert status == 404 and error["error"]["code"] == "model_not_found"
    check_reply(*server.post("/chat/completions", ask(QUESTIONS[0])), expected[0])
    assert server.alive and not bugs(server)


def test_clients_that_go_away_mid_request_do_not_hurt_the_server(gate, expected):
    server = gate[0]
    payload = json.dumps(ask(QUESTIONS[1])).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode()
    before = health(server)
    for body in (payload, payload[: len(payload) // 2]):  # the request in full (then gone), or cut mid-body
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port)) as connection:
                connection.sendall(head + body)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the three whole requests: dropped before their batch, or their result
        counts = health(server)  # discarded; never answered to nobody
        if counts["dropped"] + counts["discarded"] - before["dropped"] - before["discarded"] >= 3:
            break
        time.sleep(0.2)
    assert counts["dropped"] + counts["discarded"] - before["dropped"] - before["discarded"] == 3
    check_reply(*server.post("/chat/completions", ask(QUESTIONS[1])), expected[1])
    assert server.alive and not bugs(server)


def health(server: QuietServer) -> dict:
    with urllib.request.urlopen(server.url.removesuffix("/v1") + "/health", timeout=30) as response:
        return json.loads(response.read())["batching"]


def test_the_openai_client(gate, expected):
    openai = pytest.importorskip("openai")
    server = gate[0]
    client = openai.OpenAI(base_url=server.url, api_key="not-needed", max_retries=0)
    assert [model.id for model in client.models.list()] == [NAME]
    for question, want in zip(QUESTIONS, expected):
        raw = client.chat.completions.with_raw_response.create(
            model=NAME, messages=[{"role": "user", "content": question}], max_tokens=MAX_TOKENS)
        completion = raw.parse()
        choice = completion.choices[0]
        assert raw.headers["x-elical-decision"] == want["decision"] == completion.elical["decision"]
        if want["answer"] is None:
            assert (choice.message.content, choice.finish_reason) == (ABSTAIN, "abstain")
        else:
            assert choice.message.content == want["answer"] and choice.finish_reason in ("stop", "length")
    completion = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": QUESTIONS[3]}],
                                                extra_body={"elical": {"threshold": 0.0}})
    assert completion.elical["decision"] == "answer" and completion.elical["threshold"] == 0.0
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": QUESTIONS[0]}], n=2)
    assert refused.value.body["code"] == "unsupported_parameter" and refused.value.body["param"] == "n"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTIONS[0]}])


def test_langchain_chat_openai(gate, expected):
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    server = gate[0]
    chat = ChatOpenAI(base_url=server.url, api_key="not-needed", model=NAME, max_tokens=MAX_TOKENS, max_retries=0,
                      include_response_headers=True)
    for question, want in zip(QUESTIONS, expected):
        message = chat.invoke(question)
        metadata = message.response_metadata
        assert metadata["headers"]["x-elical-decision"] == want["decision"]
        assert float(metadata["headers"]["x-elical-confidence"]) == pytest.approx(want["confidence"], abs=1e-5)
        if want["answer"] is None:
            assert (message.content, metadata["finish_reason"]) == (ABSTAIN, "abstain")
        else:
            assert message.content == want["answer"]
    replies = chat.batch(QUESTIONS[:3])  # LangChain's own concurrency: answered the same
    assert [r.content for r in replies] == [w["answer"] or ABSTAIN for w in expected[:3]]


def test_the_command_refuses_what_it_cannot_serve(tmp_path, tiny_llama, raise_user_errors):
    untuned = tmp_path / "untuned"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(untuned)
    with pytest.raises(ValueError, match="no decision threshold"):
        cli_main(["serve", str(untuned)])
    with pytest.raises(ValueError, match="not a saved confidence model.*--mode completion"):
        cli_main(["serve", tiny_llama])
    with pytest.raises(ValueError, match="--threshold is a gate option"):
        cli_main(["serve", tiny_llama, "--mode", "completion", "--threshold", "0.5"])
    with pytest.raises(ValueError, match="--retriever no_such_module:f: cannot import"):
        cli_main(["serve", str(untuned), "--threshold", "0.5", "--retriever", "no_such_module:f"])
    with pytest.raises(ValueError, match="must be `module:function`"):
        cli_main(["serve", str(untuned), "--threshold", "0.5", "--retriever", "kb"])
    with pytest.raises(ValueError, match="--mode must be one of"):
        cli_main(["serve", str(untuned), "--mode", "chat"])


def test_a_model_whose_chat_context_is_refuse_takes_a_single_user_message():
    from elical_hf.settings.configuration import ConfidenceConfig
    from elical_hf.serve.engine import question_of
    from elical_hf.serve.schema import RequestError

    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "who wrote hamlet"}]
    assert question_of(history, "question") == (history[-1:], 1)
    with pytest.raises(RequestError, match=r"send a single user message, got \['system', 'user'\]") as error:
        question_of(history, "refuse")
    assert error.value.code == "unsupported_messages" and question_of(history[1:], "refuse") == (history[1:], 0)
    with pytest.raises(ValueError, match="`chat_context` must be one of"):
        ConfidenceConfig(chat_context="history")


def test_the_system_prompt_figures_in_the_docs_are_the_measured_ones():
    """docs/serve.md and docs/gate.md quote docs/results/system_prompt.json (experiments/system_prompt_effect.py),
    whose AUROCs recompute from its per-question confidences."""
    import json
    from pathlib import Path

    from elical_hf.demo import DEMO_RECORDS
    from elical_hf.metrics import auroc
    from elical_hf.signals.records import load_records

    root = Path(__file__).resolve().parent.parent
    measured = json.loads((root / "docs" / "results" / "system_prompt.json").read_text())
    rows = load_records(DEMO_RECORDS, split="in_domain_test").to_list()
    by_dataset = {}
    for i, row in enumerate(rows):
        by_dataset.setdefault(row["dataset"], []).append(i)
    for name, confidences in measured["confidences"].items():  # per-dataset AUROC weighted by size, recomputed
        mean = sum(100 * len(rows_of) * auroc([confidences[i] for i in rows_of],
                                              [int(rows[i]["greedy_correctness"]) for i in rows_of])
                   for rows_of in by_dataset.values()) / len(rows)
        assert mean == pytest.approx(measured["auroc"][name], abs=0.05), name
    texts = [" ".join((root / "docs" / doc).read_text().split()) for doc in ("serve.md", "gate.md")]
    for pair in ("helpful − as trained", "concise − as trained"):
        cell = measured["differences"][pair]
        quoted = f"{cell['auroc']:+.1f} [{cell['auroc_ci'][0]:+.1f}, {cell['auroc_ci'][1]:+.1f}]".replace("-", "−")
        assert all(quoted in text for text in texts), (pair, quoted)
