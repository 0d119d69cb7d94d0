"""The gate on engines (`serve EXPORT --confidence_endpoint URL --generation_endpoint URL`), against stand-in engines
on sockets: a pooling engine that scores the export with transformers (vLLM's `/classify` shape) and a chat engine
that streams a fixed answer. The decisions and confidences are the in-process gate's; answers come from the chat
engine, streamed through after the decision; a failing upstream is one OpenAI error naming it. The real-vLLM run is
in tests/test_vllm_engines.py."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from safetensors.torch import load_file

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.publishing.export import export_confidence_model
from tests.conftest import save_tiny_base
from tests.serving import cut, gated_model, running


pytest.importorskip("fastapi")
pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
             "when was the king born"]
ANSWER = ["Paris", " is", " the", " capital", "."]
SERVED = 1e-4
"""How far a confidence served from the export may lie from the model's own, in float32 (as in
tests/test_vllm_engines.py): the export's LoRA is merged into the weights, and the server batches a request with
whatever else arrived, so rounding differs (2e-5 seen on this file's tiny model with large weights)."""


class Engines:
    """A pooling engine (`/classify` on the export, scored by transformers) and a chat engine streaming [`ANSWER`],
    on two free ports; `chat_requests` records what the chat engine was asked."""

    def __init__(self, export: str) -> None:
        from transformers import AutoModelForSequenceClassification

        classifier = AutoModelForSequenceClassification.from_pretrained(export, dtype=torch.float32).eval()
        bias = load_file(f"{export}/model.safetensors")["score.bias"]
        self.chat_requests, self.garbage, self.other_model = [], False, False
        engines = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, body, content_type="application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.send({"object": "list", "data": [{"id": self.server.served, "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/classify":
                    with torch.no_grad():
                        probs = [torch.sigmoid(classifier(torch.tensor([ids])).logits[0, 0] + bias[0]).item()
                                 for ids in body["input"]]
                    data = [{"index": i, "probs": [p if not engines.garbage else 7.0]} for i, p in enumerate(probs)]
                    return self.send({"object": "list", "data": data})
                engines.chat_requests.append(body)
                model = "someone-else" if engines.other_model else body["model"]
                events = [{"id": "x", "object": "chat.completion.chunk", "model": model,
                           "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                          for piece in ANSWER]
                events[-1]["choices"][0]["finish_reason"] = "stop"
                events.append({"id": "x", "object": "chat.completion.chunk", "model": model, "choices": [],
                               "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}})
                self.send("".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n",
                          "text/event-stream")

        self.servers = []
        for served in ("conf", "gen"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            server.served = served
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        self.confidence_url, self.generation_url = (f"http://127.0.0.1:{s.server_port}/v1" for s in self.servers)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """(port of the gate on the stand-in engines, engines, the model's confidences, its threshold)."""
    from elical_hf.serve.app import create_app
    from elical_hf.serve.upstream import UpstreamGateEngine

    root = tmp_path_factory.mktemp("upstream")
    base = save_tiny_base(root / "base", "llama", seed=3, initializer_range=0.2)
    confidences = gated_model(base, root / "model", QUESTIONS, answered=2)
    export = export_confidence_model(str(root / "model"), root / "export")
    engines = Engines(export)
    engine = UpstreamGateEngine(export, "gate", confidence_endpoint=engines.confidence_url,
                                generation_endpoint=engines.generation_url, max_tokens=8, max_retries=0)
    try:
        with running(create_app(engine, batch_wait_ms=50)) as port:
            yield port, engines, confidences, cut(confidences, 2)
    finally:
        engines.close()


def post(port: int, path: str, body: dict, raw: bool = False):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read()
            return response.status, (data.decode() if raw else json.loads(data)), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), {}


def test_decisions_are_the_gates_and_answers_come_from_the_chat_engine(upstream):
    port, engines, confidences, threshold = upstream
    engines.chat_requests.clear()
    for question, confidence in zip(QUESTIONS, confidences):
        status, reply, headers = post(port, "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": question}]})
        assert status == 200, reply
        gate = reply["elical"]
        assert gate["confidence"] == pytest.approx(confidence, abs=SERVED) and gate["threshold"] == pytest.approx(
            threshold)
        assert headers["x-elical-decision"] == gate["decision"] == ("answer" if confidence >= threshold else "abstain")
        choice = reply["choices"][0]
        if gate["decision"] == "answer":
            assert choice["message"]["content"] == "Paris is the capital." and choice["finish_reason"] == "stop"
            assert reply["usage"]["completion_tokens"] == 5
        else:
            assert choice["finish_reason"] == "abstain"
    assert len(engines.chat_requests) == 2  # only the answered questions reached the chat engine
    asked = engines.chat_requests[0]
    assert asked["model"] == "gen" and asked["temperature"] == 0 and asked["max_tokens"] == 8
    from elical_hf.settings.prompts import QA_PROMPT

    first = next(q for q, c in zip(QUESTIONS, confidences) if c >= threshold)
    assert asked["messages"] == [{"role": "user", "content": QA_PROMPT.format(question=first)}]  # as the head read it
    assert asked["stream"] is True


def test_a_streamed_answer_comes_after_its_decision(upstream):
    port, _, confidences, threshold = upstream
    question = QUESTIONS[max(range(len(QUESTIONS)), key=confidences.__getitem__)]
    status, text, headers = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": question}],
                                                                "stream": True}, raw=True)
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert status == 200 and headers["x-elical-decision"] == "answer" and text.rstrip().endswith("data: [DONE]")
    assert events[0]["elical"]["decision"] == "answer"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]) == \
        "Paris is the capital."
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "stop"


def test_scores_only_routes_read_the_confidence_engine(upstream):
    port, _, confidences, threshold = upstream
    status, reply, _ = post(port, "/v1/confidence", {"questions": QUESTIONS})
    assert status == 200 and [d["confidence"] for d in reply["data"]] == pytest.approx(confidences, abs=SERVED)
    status, reply, _ = post(port, "/classify", {"inputs": QUESTIONS[0]})
    assert status == 200 and reply["score"] == pytest.approx(confidences[0], abs=SERVED)


def test_a_failing_upstream_is_one_openai_error_naming_it(upstream):
    port, engines, confidences, _ = upstream
    answered = QUESTIONS[max(range(len(QUESTIONS)), key=confidences.__getitem__)]
    try:
        engines.garbage = True
        status, reply, _ = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": answered}]})
        assert status == 502 and reply["error"]["code"] == "upstream_error"
        assert reply["error"]["message"].startswith(f"The confidence endpoint {engines.confidence_url[:-3]}/classify")
        engines.garbage, engines.other_model = False, True
        status, reply, _ = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": answered}]})
        assert status == 502 and "The generation endpoint" in reply["error"]["message"]
        assert "answered for 'someone-else', not 'gen'" in reply["error"]["message"]
    finally:
        engines.garbage = engines.other_model = False
    status, reply, _ = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": answered}],
                                                          "logprobs": True})
    assert status == 400 and reply["error"]["param"] == "logprobs"
    engines.servers[1].shutdown()  # the chat engine goes down (last: the tests after this one need no engine)
    engines.servers[1].server_close()
    status, reply, _ = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": answered}]})
    assert status == 502 and reply["error"]["type"] == "upstream_error"
    assert reply["error"]["message"].startswith(f"The generation endpoint {engines.generation_url}/chat/completions "
                                                "failed: Connection error")
    status, reply, _ = post(port, "/v1/confidence", {"questions": [answered]})  # scoring needs only its engine
    assert status == 200 and reply["data"][0]["confidence"] == pytest.approx(max(confidences), abs=SERVED)


def test_the_command_line_takes_both_endpoints_or_neither(tmp_path, raise_user_errors):
    with pytest.raises(ValueError, match="--confidence_endpoint needs --generation_endpoint"):
        cli_main(["serve", str(tmp_path), "--confidence_endpoint", "http://127.0.0.1:9/v1"])
    with pytest.raises(ValueError, match="holds no elical_confidence.json"):
        cli_main(["serve", str(tmp_path), "--confidence_endpoint", "http://127.0.0.1:9/v1",
                  "--generation_endpoint", "http://127.0.0.1:9/v1", "--port", "0"])
