"""Round 3 of the reliability probes (issue 38), the gate and endpoint part: which bearer token goes to an
OpenAI-compatible endpoint, a reply that is not JSON, and a LangChain gate batch that fails per item."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.signals.endpoint import ChatEndpoint
from elical_hf.signals.openai_backend import OpenAIBackend
from elical_hf.signals.openai_client import EndpointError, OpenAIClient
from elical_hf.signals.records import save_records
from tests.reliability import case
from tests.test_cli_judge import make_records
from tests.test_cli_sample import write_questions


AMBIENT, NAMED = "sk-ambient-secret", "sk-named-for-this-endpoint"
HTML = "<!DOCTYPE html><html><head><title>Sign in</title></head><body>" + "Please sign in to the proxy. " * 10


class RecordingServer:
    """An OpenAI-compatible server with canned replies (no model) that keeps every request's headers: `GET /models`
    serves `served` with `root`, chat replies say "certain", completions say "paris". `html` makes every reply a 200
    whose body is an HTML page (with `content_type`)."""

    def __init__(self, root: str = "", served: str = "rec") -> None:
        self.headers: list[dict[str, str]] = []
        self.html, self.content_type = False, "text/html"
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._reply({"object": "list", "data": [{"id": served, "object": "model", "root": root}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path.endswith("/chat/completions"):
                    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": "certain"}}
                    if body.get("logprobs"):
                        choice["logprobs"] = {"content": [{"token": "certain", "logprob": -0.1, "top_logprobs": [
                            {"token": "certain", "logprob": -0.1}]}]}
                    choices = [choice]
                else:
                    choices = [{"index": i, "finish_reason": "stop", "text": "paris", "logprobs": {
                        "tokens": ["paris"], "token_logprobs": [-0.5], "text_offset": [0], "top_logprobs": None}}
                        for i in range(int(body.get("n") or 1))]
                self._reply({"id": "r", "object": "x", "created": 0, "model": served, "choices": choices})

            def _reply(self, payload: dict[str, Any]) -> None:
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                data, kind = json.dumps(payload).encode(), "application/json"
                if server.html:
                    data, kind = HTML.encode(), server.content_type
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def tokens(self) -> set[str | None]:
        """The Authorization headers received so far."""
        return {h.get("authorization") for h in self.headers}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def recording(tiny_llama, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", AMBIENT)  # what must never leave unless named
    monkeypatch.setenv("OPENAI_ORG_ID", "org-ambient")
    monkeypatch.setenv("MY_JUDGE_KEY", NAMED)
    server = RecordingServer(root=tiny_llama)
    yield server
    server.close()


@case("security", "`elical-hf judge --judge_endpoint URL` (or `ChatEndpoint`) with `OPENAI_API_KEY` set in the "
      "environment",
      "the ambient key (and `OPENAI_ORG_ID` / `OPENAI_PROJECT_ID`) is no longer sent to the endpoint; a key goes only "
      "where it is named: `--judge_api_key_env NAME` (the variable's name, never its value on the command line); a "
      "named variable that is unset exits 2: `--judge_api_key_env MISSING_KEY names an environment variable that is "
      "not set (or is empty)`")
def test_the_ambient_openai_key_is_not_sent_to_a_judge_endpoint(recording, tmp_path, raise_user_errors):
    ChatEndpoint(recording.url, "rec").complete(["is it?"], progress=False)
    ChatEndpoint(recording.url, "rec").first_token_logprobs(["is it?"], progress=False)
    assert recording.tokens() == {"Bearer EMPTY"}  # a placeholder, never OPENAI_API_KEY's value
    assert not any("openai-organization" in h or "openai-project" in h for h in recording.headers)
    recording.headers.clear()
    ChatEndpoint(recording.url, "rec", api_key_env="MY_JUDGE_KEY").complete(["is it?"], progress=False)
    assert recording.tokens() == {f"Bearer {NAMED}"}
    records = tmp_path / "records.jsonl"
    save_records(make_records(), records)
    argv = ["judge", "--records", str(records), "--correctness", "llm", "--judge_endpoint", recording.url,
            "--judge_model", "rec", "--max_new_tokens", "4"]
    for option, expected in (([], "Bearer EMPTY"), (["--judge_api_key_env", "MY_JUDGE_KEY"], f"Bearer {NAMED}")):
        recording.headers.clear()
        assert cli_main([*argv, *option, "--output", str(tmp_path / f"out{len(option)}.jsonl")]) == 0
        assert recording.tokens() == {expected}
    with pytest.raises(ValueError, match="--judge_api_key_env MISSING_KEY names an environment variable that is not "
                                         "set"):
        cli_main([*argv, "--judge_api_key_env", "MISSING_KEY", "--output", str(tmp_path / "missing.jsonl")])
    assert not (tmp_path / "missing.jsonl").exists()
    with pytest.raises(ValueError, match="--judge_api_key_env names the --judge_endpoint's token"):
        cli_main(["judge", "--records", str(records), "--correctness", "has_answer", "--judge_api_key_env",
                  "MY_JUDGE_KEY", "--output", str(tmp_path / "lexical.jsonl")])


@case("security", "`elical-hf sample --backend openai --endpoint URL` (or `OpenAIBackend`) with `OPENAI_API_KEY` "
      "set in the environment",
      "the ambient key is no longer sent; `--api_key_env NAME` names the variable whose value is the endpoint's "
      "bearer token")
def test_the_ambient_openai_key_is_not_sent_to_a_sampling_endpoint(recording, tiny_llama, tmp_path, raise_user_errors):
    OpenAIBackend(recording.url, tiny_llama)
    assert recording.tokens() == {"Bearer EMPTY"}
    questions = write_questions(tmp_path / "nq_test.jsonl")
    argv = ["sample", "--questions", questions, "--model", tiny_llama, "--backend", "openai", "--endpoint",
            recording.url, "--num_samples", "2", "--max_new_tokens", "4", "--limit", "1"]
    for option, expected in (([], "Bearer EMPTY"), (["--api_key_env", "MY_JUDGE_KEY"], f"Bearer {NAMED}")):
        recording.headers.clear()
        assert cli_main([*argv, *option, "--output_dir", str(tmp_path / f"out{len(option)}")]) == 0
        assert recording.tokens() == {expected}
    with pytest.raises(ValueError, match="--api_key_env MISSING_KEY names an environment variable that is not set"):
        cli_main([*argv, "--api_key_env", "MISSING_KEY", "--output_dir", str(tmp_path / "missing")])
    with pytest.raises(ValueError, match="--api_key_env is for the 'openai' backend's server"):
        cli_main(["sample", "--questions", questions, "--backend", "hf", "--api_key_env", "MY_JUDGE_KEY",
                  "--output_dir", str(tmp_path / "hf")])
    assert not (tmp_path / "missing").exists() and not (tmp_path / "hf").exists()


@case("security", "a bearer token sent over plain `http://` to a host that is not this machine "
      "(`ChatEndpoint('http://judge.example:8000/v1', ..., api_key=...)`)",
      "warned once per endpoint: `The judge endpoint http://judge.example:8000/v1 gets a bearer token over plain "
      "http: anyone on the network path can read it; use https://…`; https and loopback hosts are not warned about")
def test_a_key_over_plain_http_to_another_host_is_warned_about_once(caplog):
    caplog.set_level(logging.WARNING, logger="elical_hf.signals.openai_client")
    for _ in range(2):
        ChatEndpoint("http://judge.example:8000/v1", "judge", api_key="k")
    warned = [r.getMessage() for r in caplog.records if "over plain http" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("The judge endpoint http://judge.example:8000/v1 gets a bearer")
    caplog.clear()
    for url in ("https://judge.example/v1", "http://127.0.0.1:8000/v1", "http://localhost:8000/v1",
                "http://[::1]:8000/v1", "http://other.example/v1"):
        OpenAIClient(url, api_key="k" if "other" not in url else None)  # (no token at all: nothing to warn about)
    assert not [r for r in caplog.records if "over plain http" in r.getMessage()]


@case("input", "a judge or sampling endpoint that answers 200 with an HTML page (a proxy's sign-in page, a wrong URL), "
      "as `text/html` or mislabelled `application/json`",
      "one error naming the endpoint, after the retries: `The judge endpoint http://… failed 1 times (judge prompts) "
      "with replies elical-hf cannot read: a reply that is not JSON (is the URL an OpenAI-compatible API's /v1?): "
      "'<!DOCTYPE html>…'` (was `Expecting value: line 1 column 1 (char 0)`, or a bare `AttributeError` from "
      "`sample --backend openai`'s first request)")
@pytest.mark.parametrize("content_type", ["text/html", "application/json"])
def test_an_html_reply_is_one_error_naming_the_endpoint(recording, tiny_llama, content_type):
    recording.html, recording.content_type = True, content_type
    checks = [
        lambda: ChatEndpoint(recording.url, "rec", max_retries=0).complete(["x"], progress=False),
        lambda: ChatEndpoint(recording.url, "rec", max_retries=0).first_token_logprobs(["x"], progress=False),
        lambda: OpenAIBackend(recording.url, tiny_llama, max_retries=0),  # GET /models
    ]
    for check in checks:
        with pytest.raises(EndpointError) as caught:
            check()
        message = str(caught.value)
        assert recording.url in message and "not JSON" in message and "'<!DOCTYPE html><html><head><title>" in message
        assert len(message) < 400  # the page's start, not all of it
    recording.html = False
    backend = OpenAIBackend(recording.url, tiny_llama, max_retries=0, served_model="rec")
    recording.html = True
    with pytest.raises(EndpointError, match=r"(?s)completions.*not JSON.*<!DOCTYPE html>"):
        backend.complete(["x"], progress=False)


# The LangChain gate: one bad item fails that item only.

GATE_QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
                  "when was the king born", "who was the first president", "what is the largest river in the world"]


@pytest.fixture(scope="module")
def gate_setup(tmp_path_factory):
    """A gate model on a tiny base: 2 questions answered, 2 in the retrieve band (`band`), 2 abstained."""
    pytest.importorskip("langchain_core")
    import torch

    from elical_hf import AutoModelForConfidence
    from tests.conftest import save_tiny_base
    from tests.serving import cut, gated_model

    root = tmp_path_factory.mktemp("gate")
    base = save_tiny_base(root / "base", "llama", seed=3, initializer_range=0.2)
    confidences = gated_model(base, root / "model", GATE_QUESTIONS, answered=2)
    model = AutoModelForConfidence.from_pretrained(root / "model", dtype=torch.float32)
    decisions = model.answer(GATE_QUESTIONS, retrieve_threshold=cut(confidences, 4), max_new_tokens=2)
    banded = [r["question"] for r in decisions if r["decision"] == "retrieve"]
    answered = [r["question"] for r in decisions if r["decision"] == "answer"]
    abstained = [r["question"] for r in decisions if r["decision"] == "abstain"]
    return model, cut(confidences, 4), answered, banded, abstained


@case("silent", "`ConfidenceGate.batch([question, 42, question], return_exceptions=True)`, or a batch where the "
      "retriever (or the `abstain` Runnable) fails for one question",
      "fails per item: `[AIMessage, ValueError('The gate needs a non-empty question, got 42.'), AIMessage]`; the "
      "retriever's or the abstain Runnable's error, or a question too long for the model, is that question's only "
      "(was: the same error for every item)")
def test_a_gate_batch_fails_per_item(gate_setup):
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    from elical_hf.integrations.langchain import ConfidenceGate

    model, band, answered, banded, abstained = gate_setup
    gate = ConfidenceGate(model, max_new_tokens=2)
    replies = gate.batch([answered[0], 42, answered[1]], return_exceptions=True)
    assert isinstance(replies[0], AIMessage) and isinstance(replies[2], AIMessage)
    assert isinstance(replies[1], ValueError) and "got 42" in str(replies[1])
    assert replies[0].content == gate.invoke(answered[0]).content
    with pytest.raises(ValueError, match="got 42"):  # without return_exceptions: the failing item's own error
        gate.batch([answered[0], 42])
    too_long = " ".join(["paris"] * 3000)  # fails the batched call: each question is then answered on its own
    replies = gate.batch([too_long, answered[0], 42], return_exceptions=True)
    assert isinstance(replies[0], ValueError) and "do not fit the model's context" in str(replies[0])
    assert replies[1].content == gate.invoke(answered[0]).content and "got 42" in str(replies[2])

    def flaky(question: str) -> str:
        if question == banded[0]:
            raise ConnectionError("vector store down")
        return "paris is the capital of france ."

    gate = ConfidenceGate(model, retriever=RunnableLambda(flaky), retrieve_threshold=band, max_new_tokens=2)
    replies = gate.batch(banded + answered, return_exceptions=True)
    assert isinstance(replies[0], ConnectionError)
    assert replies[1].response_metadata["elical"]["context"] == "paris is the capital of france ."
    assert all(isinstance(r, AIMessage) and r.response_metadata["elical"]["answered"] for r in replies[1:])

    def refuse(question: str) -> str:
        if question == abstained[0]:
            raise RuntimeError("the fallback model is rate-limited")
        return "a bigger model answers"

    gate = ConfidenceGate(model, abstain=RunnableLambda(refuse), max_new_tokens=2)
    replies = gate.batch(abstained + answered, return_exceptions=True)
    assert isinstance(replies[0], RuntimeError)
    assert replies[1].content == "a bigger model answers" and replies[1].response_metadata["elical"]["routed"]
    assert all(isinstance(r, AIMessage) for r in replies[1:])


@case("silent", "a LangChain gate whose retriever returns a plain string (not documents)",
      "the string is the context (was: spelled out one character a line, `'P\\n\\na\\n\\nr…'`); one document or a "
      "list of documents or strings is accepted too, anything else fails that question: `The retriever must return "
      "documents, one document or a string; for '…' it returned a value of type int`")
def test_a_retriever_may_return_a_string_a_document_or_documents(gate_setup):
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableLambda

    from elical_hf.integrations.langchain import ConfidenceGate

    model, band, answered, banded, _ = gate_setup
    note = "Paris is the capital of France."
    for output in (note, Document(note), [Document(note)], [note, "  "], (Document(note),)):
        gate = ConfidenceGate(model, retriever=RunnableLambda(lambda q, o=output: o), retrieve_threshold=band,
                              max_new_tokens=2)
        reply = gate.invoke(banded[0])
        assert reply.response_metadata["elical"]["context"] == note, output
        assert reply.response_metadata["elical"]["answered"]
    gate = ConfidenceGate(model, retriever=RunnableLambda(lambda q: 42), retrieve_threshold=band, max_new_tokens=2)
    replies = gate.batch([banded[0], answered[0]], return_exceptions=True)
    assert isinstance(replies[0], ValueError)
    assert str(replies[0]) == (f"The retriever must return documents, one document or a string; for {banded[0]!r} it "
                               "returned a value of type int.")
    assert replies[1].response_metadata["elical"]["answered"]
    gate = ConfidenceGate(model, retriever=RunnableLambda(lambda q: [Document(note), 42]), retrieve_threshold=band)
    with pytest.raises(ValueError, match="it returned a list holding int"):
        gate.invoke(banded[0])
