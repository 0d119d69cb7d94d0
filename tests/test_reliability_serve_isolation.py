"""Round 3 of the reliability probes (issue 38), the server (`elical-hf serve`): one request never fails the others of
its batch, one client cannot hold the others up for long, the server answers only the hosts it serves and only the
thresholds its operator allows, and each refusal is one OpenAI error that says what to change.

The servers run in this process (uvicorn on a thread, on a real socket), and each culprit is sent together with
innocent requests that land in its batch: the innocents must be answered as `model.answer` answers them, on
connections that stay open for the next request."""

from __future__ import annotations

import asyncio
import functools
import http.client
import json
import socket
import threading
import time

import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from tests.reliability import case
from tests.serving import running
from tests.tiny import CHAT_TEMPLATE, make_tiny_causal_lm, make_tiny_tokenizer


uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet", "what is the capital of france"]
"""The innocent questions sent beside each culprit."""
MAX_TOKENS = 4
CONTEXT = "william shakespeare wrote hamlet . paris is the capital of france ."


def retrieve(question: str) -> str | None:
    """The gate's retriever: a context holding a lone surrogate for questions about a king, the knowledge base
    otherwise."""
    return "the king \udcff was born" if "king" in question else CONTEXT


def post(connection: http.client.HTTPConnection, body: bytes | dict, headers: dict | None = None,
         chunked: bool = False) -> tuple[int, dict]:
    """`POST /v1/chat/completions` on `connection`: the status and the JSON reply."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    if chunked:
        connection.request("POST", "/v1/chat/completions", iter([data]), headers, encode_chunked=True)
    else:
        connection.request("POST", "/v1/chat/completions", data, headers)
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def ask(question: str, model: str = "tiny-gate", **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": question}], **fields}


def beside_innocents(port: int, culprit: bytes | dict, innocent: dict | list[dict], headers: dict | None = None,
                     keep_alive: bool = True, chunked: bool = False) -> dict:
    """Send `culprit` (with `headers`) and the `innocent` requests at once, each on its own connection (so that they
    share a batch), then `innocent[0]` once more on each connection (the culprit's too, with `keep_alive`): a reset
    connection fails the test. Returns the replies (`"culprit"`, `0`, `1`, ..., and `"<name> again"`)."""
    innocents = innocent if isinstance(innocent, list) else [innocent]
    replies: dict = {}

    def send(name, body, extra, chunk) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            replies[name] = post(connection, body, extra, chunk)
            if name != "culprit" or keep_alive:
                replies[f"{name} again"] = post(connection, innocents[0])
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=("culprit", culprit, headers, chunked))]
    threads += [threading.Thread(target=send, args=(i, body, None, False)) for i, body in enumerate(innocents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return replies


def check_gate_innocents(replies: dict, expected: list[dict]) -> None:
    """The innocents of [`beside_innocents`] (asking QUESTIONS) answered as `model.answer` answers them."""
    for name, want in [*enumerate(expected), *((f"{i} again", expected[0]) for i in range(len(expected)))]:
        status, body = replies[name]
        assert status == 200, (name, body)
        assert body["choices"][0]["message"]["content"] == want["answer"]
        assert body["elical"]["decision"] == want["decision"]
        assert body["elical"]["confidence"] == pytest.approx(want["confidence"], abs=1e-5)


def check_error(reply: tuple[int, dict], status: int, param: str | None, code: str | None, message: str) -> None:
    got, body = reply
    assert got == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert (body["error"]["param"], body["error"]["code"]) == (param, code), body
    assert message in body["error"]["message"], body


@pytest.fixture(scope="module")
def gate_model(tiny_llama):
    return AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.float32)


@pytest.fixture(scope="module")
def gate(gate_model):
    """A gate server that retrieves for every question (threshold 1, retrieve threshold 0; [`retrieve`]), batches
    collecting for 150 ms. Yields its port and what `model.answer` gives for QUESTIONS."""
    from elical_hf.serve.app import create_app
    from elical_hf.serve.engine import GateEngine

    engine = GateEngine(gate_model, "tiny-gate", threshold=1.0, retrieve_threshold=0.0, retriever=retrieve,
                        max_tokens=MAX_TOKENS)
    expected = gate_model.answer(QUESTIONS, threshold=1.0, retrieve_threshold=0.0, retrieve=retrieve,
                                 max_new_tokens=MAX_TOKENS)
    assert all(want["decision"] == "retrieve" and want["answer"] for want in expected)
    with running(create_app(engine, batch_wait_ms=150)) as port:
        yield port, expected


@pytest.fixture(scope="module")
def chat():
    """A completion server over a tiny LM that never emits EOS (each answer is `max_tokens` long), whose chat template
    raises when rendered with `refuse=true`; each forward pass sleeps 5 ms and appends its number of rows to `rows`.
    Yields its port, `rows` and the engine."""
    from elical_hf.serve.app import create_app
    from elical_hf.serve.completion import CompletionEngine

    tokenizer = make_tiny_tokenizer()
    tokenizer.chat_template = "{% if refuse %}{{ raise_exception('this template refuses') }}{% endif %}" + CHAT_TEMPLATE
    model = make_tiny_causal_lm(tokenizer, seed=1)
    rows: list[int] = []

    def step(module, inputs, output):
        output[..., tokenizer.eos_token_id] = -1e9
        rows.append(output.shape[0])
        time.sleep(0.005)
        return output

    model.lm_head.register_forward_hook(step)
    engine = CompletionEngine(model, tokenizer, "tiny-chat", max_tokens=MAX_TOKENS)
    with running(create_app(engine, batch_wait_ms=150)) as port:
        yield port, rows, engine


def chat_innocents() -> list[dict]:
    return [ask(question, "tiny-chat") for question in QUESTIONS]


def check_chat_innocents(replies: dict) -> None:
    for name in (0, 1, "0 again", "1 again"):
        status, body = replies[name]
        assert status == 200, (name, body)
        assert body["usage"]["completion_tokens"] == MAX_TOKENS and body["choices"][0]["finish_reason"] == "length"


def health(port: int) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/health")
        return json.loads(connection.getresponse().read())["batching"]
    finally:
        connection.close()


# 1. One request never fails its batch


@case("silent", "three concurrent chat requests, one with a lone surrogate in its question (`\"who \\udcff "
      "wrote?\"` as raw JSON) or in its `stop`",
      "that one alone gets a 400 `invalid_text`: ``The text of `messages.0.content` is not valid Unicode: it holds an "
      "unpaired surrogate '\\udcff' at character 4 …``; the others are answered, on connections that stay open")
def test_a_lone_surrogate_fails_only_its_own_request(gate):
    port, expected = gate
    raw = b'{"model": "tiny-gate", "messages": [{"role": "user", "content": "who \\udcff wrote?"}]}'
    replies = beside_innocents(port, raw, [ask(q) for q in QUESTIONS])
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 400, "messages.0.content", "invalid_text",
                "The text of `messages.0.content` is not valid Unicode: it holds an unpaired surrogate '\\udcff' at "
                "character 4")
    assert replies["culprit again"][0] == 200
    replies = beside_innocents(port, ask(QUESTIONS[0], stop=["ok", "\udcff"]), [ask(q) for q in QUESTIONS])
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 400, "stop.1", "invalid_text", "The text of `stop.1` is not valid Unicode")


@case("silent", "a retriever that returns a context with a lone surrogate, beside other requests of the batch",
      "that request alone gets a 502 `retriever_failed`: `The retriever failed: The text of the retrieved context is "
      "not valid Unicode …`; the others are answered")
def test_a_retrieved_context_that_is_not_text_fails_only_its_request(gate):
    port, expected = gate
    replies = beside_innocents(port, ask("when was the king born"), [ask(q) for q in QUESTIONS])
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 502, None, "retriever_failed",
                "The retriever failed: The text of the retrieved context is not valid Unicode: it holds an unpaired "
                "surrogate '\\udcff'")


@case("input", "completion mode: `chat_template_kwargs` naming one of `apply_chat_template`'s own arguments "
      "(`{\"add_generation_prompt\": false}`), or a chat template that raises on a request, beside other requests",
      "that request alone gets a 400: `` `chat_template_kwargs` may not set add_generation_prompt: … ``, or "
      "`The chat template failed on this conversation: …`; the same names are refused in `--chat_template_kwargs` "
      "and a saved config")
def test_chat_template_failures_fail_only_their_request(chat):
    from elical_hf.signals import SamplingSettings

    port, _, _ = chat
    replies = beside_innocents(port, ask("who wrote hamlet", "tiny-chat",
                                         chat_template_kwargs={"add_generation_prompt": False}), chat_innocents())
    check_chat_innocents(replies)
    check_error(replies["culprit"], 400, "chat_template_kwargs", "invalid_chat_template_kwargs",
                "`chat_template_kwargs` may not set add_generation_prompt")
    replies = beside_innocents(port, ask("who wrote hamlet", "tiny-chat", chat_template_kwargs={"refuse": True}),
                               chat_innocents())
    check_chat_innocents(replies)
    check_error(replies["culprit"], 400, "messages", "chat_template_error",
                "The chat template failed on this conversation: this template refuses")
    with pytest.raises(ValueError, match="may not set messages, tokenize"):
        SamplingSettings(chat_template_kwargs={"tokenize": True, "messages": []})


@case("silent", "a failure inside a server batch that no check foresaw (one request's reply raises)",
      "the batch is run again without it: that request alone gets a 500 `internal_error`, the others their answers, "
      "and every connection stays open")
def test_an_unforeseen_failure_fails_only_its_request(chat, monkeypatch):
    port, _, engine = chat
    reply = engine.reply

    def failing_reply(job, content, *args, **kwargs):
        if job.messages[0]["content"] == "boom":
            raise RuntimeError("a reply that cannot be built")
        return reply(job, content, *args, **kwargs)

    monkeypatch.setattr(engine, "reply", failing_reply)
    replies = beside_innocents(port, ask("boom", "tiny-chat"), chat_innocents())
    check_chat_innocents(replies)
    check_error(replies["culprit"], 500, None, "internal_error", "a reply that cannot be built")
    assert replies["culprit again"][0] == 200


@case("silent", "the micro-batcher: one job of a batch makes the batch function raise",
      "each job of that batch is run again alone: only the culprit gets the exception")
def test_the_batcher_runs_a_failed_batch_again_job_by_job():
    from elical_hf.serve.batching import MicroBatcher

    seen: list[list[int]] = []

    def run(jobs: list[int]) -> list[int]:
        seen.append(list(jobs))
        if -1 in jobs:
            raise RuntimeError("job -1 is broken")
        return [job * 10 for job in jobs]

    async def main() -> list:
        batcher = MicroBatcher(run, max_batch_size=8, max_wait=0.05)
        try:
            return await asyncio.gather(*(batcher.submit(job) for job in (1, -1, 2)), return_exceptions=True)
        finally:
            await batcher.close()

    one, failed, two = asyncio.run(main())
    assert (one, two) == (10, 20) and isinstance(failed, RuntimeError) and "job -1" in str(failed)
    assert seen[0] == [1, -1, 2] and sorted(seen[1:]) == [[-1], [1], [2]]


# 2. One client cannot stall the others


@case("input", "a request asking for more tokens than the server's `--max_tokens_limit` (256 by default)",
      "400: `max_tokens=300 is more than this server's limit of 256 (--max_tokens_limit) …`")
def test_max_tokens_above_the_servers_limit_is_refused(gate):
    port, expected = gate
    replies = beside_innocents(port, ask(QUESTIONS[0], max_tokens=300), [ask(q) for q in QUESTIONS])
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 400, "max_tokens", "max_tokens_limit_exceeded",
                "max_tokens=300 is more than this server's limit of 256 (--max_tokens_limit)")


def leave_after(port: int, body: dict, rows: list[int], steps: int) -> None:
    """Send `body` on a raw socket and close it once the model has run `steps` more forward passes."""
    payload = json.dumps(body).encode()
    start = len(rows)
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        deadline = time.monotonic() + 60
        while len(rows) - start < steps and time.monotonic() < deadline:
            time.sleep(0.005)


def wait_discarded(port: int, before: dict, count: int) -> None:
    """Wait until `count` more results were discarded (their batch ended after their client left)."""
    deadline = time.monotonic() + 60
    while health(port)["discarded"] - before["discarded"] < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert health(port)["discarded"] - before["discarded"] == count


@case("silent", "a client that disconnects while its request is decoded (alone, or beside a client that stays)",
      "its rows stop within a few decoding steps (a batch whose clients all left stops); the other client's answer "
      "is whole")
def test_a_client_that_leaves_stops_its_generation(chat):
    port, rows, _ = chat
    long = ask("who wrote hamlet", "tiny-chat", max_tokens=150)
    before, start = health(port), len(rows)
    leave_after(port, long, rows, steps=10)
    wait_discarded(port, before, 1)
    assert sum(rows[start:]) < 60  # 150 decoding steps if it went on
    before, start, replies = health(port), len(rows), {}
    stays = threading.Thread(target=lambda: replies.update(
        stays=post(http.client.HTTPConnection("127.0.0.1", port, timeout=60), long)))
    stays.start()
    leave_after(port, long, rows, steps=10)
    stays.join(timeout=120)
    wait_discarded(port, before, 1)
    status, body = replies["stays"]
    assert status == 200 and body["usage"]["completion_tokens"] == 150
    assert body["choices"][0]["finish_reason"] == "length"
    assert sum(rows[start:]) < 150 + 60  # 2 x 150 row-steps if the gone client's row went on


@case("silent", "a gate request decoded after its client left (`model.answer(..., cancelled=)`)",
      "its answer stops at the first token instead of decoding `max_tokens`")
def test_the_gate_stops_decoding_for_a_gone_client(gate_model, monkeypatch):
    from elical_hf.gate import BaseLanguageModel
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import ChatCompletionRequest

    engine = GateEngine(gate_model, "tiny-gate", threshold=0.0, max_tokens=MAX_TOKENS)
    eos, forward = gate_model.get_base_model().tokenizer.eos_token_id, BaseLanguageModel.forward

    @functools.wraps(forward)  # its signature: the decoder reads its cache argument's name from it
    def never_eos(self, *args, **kwargs):  # every answer decodes max_tokens unless stopped
        output = forward(self, *args, **kwargs)
        output.logits[..., eos] = -1e9
        return output

    monkeypatch.setattr(BaseLanguageModel, "forward", never_eos)
    jobs = [engine.prepare(ChatCompletionRequest(messages=[{"role": "user", "content": q}], max_tokens=40))
            for q in QUESTIONS]
    jobs[1].cancelled.set()
    stays, gone = engine.run(jobs)
    assert stays.body["usage"]["completion_tokens"] == 40 and gone.body["usage"]["completion_tokens"] <= 1


@case("silent", "a retriever that does not return (sleeps) for one request, beside other requests of its batch",
      "after `--retriever_timeout` seconds (10 by default) that request gets a 504 `retriever_timeout`: `The "
      "retriever did not answer within 0.5 s.`; the others are answered")
def test_a_slow_retriever_times_out_for_its_request_alone(gate_model):
    from elical_hf.serve.app import create_app
    from elical_hf.serve.engine import GateEngine

    release, returned = threading.Event(), threading.Event()

    def slow(question: str) -> str | None:
        if "king" in question:
            release.wait(30)
            returned.set()
        return CONTEXT

    engine = GateEngine(gate_model, "tiny-gate", threshold=1.0, retrieve_threshold=0.0, retriever=slow,
                        max_tokens=MAX_TOKENS, retriever_timeout=0.5)
    expected = gate_model.answer(QUESTIONS, threshold=1.0, retrieve_threshold=0.0, retrieve=slow,
                                 max_new_tokens=MAX_TOKENS)
    try:
        with running(create_app(engine, batch_wait_ms=150)) as port:
            replies = beside_innocents(port, ask("when was the king born"), [ask(q) for q in QUESTIONS])
            assert not returned.is_set()  # every reply came while the slow retriever call still hung
    finally:
        release.set()
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 504, None, "retriever_timeout", "The retriever did not answer within 0.5 s.")


@case("input", "a request body larger than `--max_request_bytes` (1 MiB by default), with a Content-Length or "
      "chunked", "413 before the body is parsed or tokenized: `The request body is larger than this server's limit "
      "of 1048576 bytes (--max_request_bytes).`")
def test_a_body_over_the_size_limit_is_refused_before_it_is_read(gate):
    port, expected = gate
    huge = ask(" ".join(["who wrote hamlet"] * 80_000))  # 1.3 MB
    for chunked in (False, True):
        replies = beside_innocents(port, huge, [ask(q) for q in QUESTIONS], keep_alive=False, chunked=chunked)
        check_gate_innocents(replies, expected)
        check_error(replies["culprit"], 413, None, "request_too_large",
                    "The request body is larger than this server's limit of 1048576 bytes (--max_request_bytes).")


# 6. Hosts, thresholds and names


@case("security", "a request with a `Host:` header the server is not bound to (DNS rebinding from a web page)",
      "400 `invalid_host`: `The Host header 'rebind.example' is not one this server answers to …`; the bound host, "
      "localhost, 127.0.0.1 and [::1] are answered, and `--allowed_hosts` names more")
def test_only_the_served_hosts_are_answered(gate):
    port, expected = gate
    replies = beside_innocents(port, ask(QUESTIONS[0]), [ask(q) for q in QUESTIONS],
                               headers={"Host": f"rebind.example:{port}"})
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 400, None, "invalid_host",
                "The Host header 'rebind.example' is not one this server answers to")
    for host in (f"localhost:{port}", "127.0.0.1", f"[::1]:{port}"):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        assert post(connection, ask(QUESTIONS[0]), {"Host": host})[0] == 200


@case("security", "a request that lowers the server's threshold (`\"elical\": {\"threshold\": 0}`)",
      "400: `This server answers at or above confidence 1; a request may only raise the threshold (got 0) …`; "
      "`--allow_request_thresholds` lets requests set any")
def test_a_request_may_only_make_the_gate_stricter(gate, gate_model):
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import ChatCompletionRequest, RequestError

    port, expected = gate
    replies = beside_innocents(port, ask(QUESTIONS[0], elical={"threshold": 0.0}), [ask(q) for q in QUESTIONS])
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 400, "elical.threshold", "threshold_not_allowed",
                "This server answers at or above confidence 1; a request may only raise the threshold (got 0)")

    def request(**elical):
        return ChatCompletionRequest(messages=[{"role": "user", "content": QUESTIONS[0]}], elical=elical)

    strict = GateEngine(gate_model, "g", threshold=0.5, retrieve_threshold=0.3)
    assert (strict.prepare(request(threshold=0.9)).threshold, strict.prepare(request(threshold=0.9)).retrieve_threshold
            ) == (0.9, 0.3)
    for elical, param in (({"threshold": 0.2}, "elical.threshold"),
                          ({"retrieve_threshold": 0.1}, "elical.retrieve_threshold")):
        with pytest.raises(RequestError, match="a request may only raise") as refused:
            strict.prepare(request(**elical))
        assert refused.value.param == param
    with pytest.raises(RequestError, match="a request may only raise"):
        GateEngine(gate_model, "g", threshold=0.5).prepare(request(retrieve_threshold=0.4))  # a band where none is
    open_ = GateEngine(gate_model, "g", threshold=0.5, retrieve_threshold=0.3, allow_request_thresholds=True)
    job = open_.prepare(request(threshold=0.2, retrieve_threshold=0.1))
    assert (job.threshold, job.retrieve_threshold) == (0.2, 0.1)


def saved_gate(tiny_llama, folder) -> str:
    model = AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.float32)
    model.confidence_config.decision_threshold = 0.5
    model.save_pretrained(folder)
    return str(folder)


def served_app(monkeypatch, argv: list[str]):
    """Run `elical-hf serve *argv` up to where uvicorn would start serving; return its app."""
    captured = {}
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *args, **kwargs: captured.update(app=self.config.app))
    assert cli_main(["serve", *argv]) == 0
    return captured["app"]


@case("security", "`elical-hf serve out/runs/my-gate` without `--served_model_name`",
      "the served name is the folder's name (`my-gate`), or the Hub id of a Hub cache snapshot, never the local "
      "path; `--allowed_hosts` adds the hosts of a deployment")
def test_the_default_served_name_is_not_the_local_path(tiny_llama, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    folder = saved_gate(tiny_llama, tmp_path / "runs" / "my-gate")
    app = served_app(monkeypatch, [folder, "--port", "0", "--allowed_hosts", "gate.internal"])
    with TestClient(app, base_url="http://gate.internal") as client:
        listing = client.get("/v1/models")
        assert listing.status_code == 200 and [m["id"] for m in listing.json()["data"]] == ["my-gate"]
        assert str(tmp_path) not in listing.text
    with TestClient(app, base_url="http://elsewhere.example") as client:
        assert client.get("/health").json()["error"]["code"] == "invalid_host"
    from elical_hf.cli.serve import default_served_name

    snapshot = tmp_path / "hub" / "models--org--gate" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    assert default_served_name(str(snapshot)) == "org/gate" and default_served_name("org/gate") == "org/gate"


# 9. One clear error


@case("input", "`elical-hf serve MODEL --port P` with P already in use",
      "exits 2 before the model loads: `elical-hf serve: error: Cannot listen on 127.0.0.1:P: [Errno 98] Address "
      "already in use …`")
def test_a_busy_port_is_one_error_line_before_the_model_loads(tiny_llama, tmp_path, monkeypatch, capsys):
    import elical_hf.cli.serve as serve_cli

    folder = saved_gate(tiny_llama, tmp_path / "gate")

    def build_engine(options):
        raise AssertionError("the model was loaded before the port was checked")

    monkeypatch.setattr(serve_cli, "build_engine", build_engine)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        capsys.readouterr()
        assert cli_main(["serve", folder, "--port", str(port)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"elical-hf serve: error: Cannot listen on 127.0.0.1:{port}: ")


@case("input", "`elical-hf serve MODEL --abstain_message $'no \\xff'` (bytes that are not UTF-8 on the command line), or "
      "such a `--served_model_name`", "exits 2 before the model loads: `The text of --abstain_message is not valid "
      "Unicode …` (every abstention would have failed to encode)")
def test_a_name_or_message_that_is_not_text_is_refused_at_start_up(tiny_llama, tmp_path, monkeypatch,
                                                                   raise_user_errors):
    folder = saved_gate(tiny_llama, tmp_path / "gate")
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *args, **kwargs: pytest.fail("the server started"))
    with pytest.raises(ValueError, match="The text of --abstain_message is not valid Unicode"):
        cli_main(["serve", folder, "--port", "0", "--abstain_message", "no \udcff"])
    with pytest.raises(ValueError, match="The text of the served model name is not valid Unicode"):
        cli_main(["serve", folder, "--port", "0", "--served_model_name", "gate-\udcff"])


@case("input", "a chat request sent with `Content-Type: text/plain` (or form-encoded, curl's default)",
      "415: `The request body must be JSON, sent with Content-Type: application/json (got text/plain).`")
def test_a_body_that_is_not_declared_json_gets_an_openai_error(gate):
    port, expected = gate
    replies = beside_innocents(port, ask(QUESTIONS[0]), [ask(q) for q in QUESTIONS],
                               headers={"Content-Type": "text/plain"})
    check_gate_innocents(replies, expected)
    check_error(replies["culprit"], 415, None, "unsupported_media_type",
                "The request body must be JSON, sent with Content-Type: application/json (got text/plain).")


@case("input", "`\"max_tokens\": true` (or a boolean, or a number in a string, for any number or flag of the "
      "request)", "400 naming the field (`int_type`: `` `max_tokens`: Input should be a valid integer. ``) instead of "
      "reading `true` as 1")
def test_booleans_are_not_numbers(gate):
    port, expected = gate
    for fields, param, code in (({"max_tokens": True}, "max_tokens", "int_type"),
                                ({"max_completion_tokens": "3"}, "max_completion_tokens", "int_type"),
                                ({"n": True}, "n", "int_type"),
                                ({"temperature": False}, "temperature", "float_type"),
                                ({"stream": 0}, "stream", "bool_type"),
                                ({"elical": {"threshold": True}}, "elical.threshold", "float_type")):
        replies = beside_innocents(port, ask(QUESTIONS[0], **fields), [ask(q) for q in QUESTIONS])
        check_gate_innocents(replies, expected)
        check_error(replies["culprit"], 400, param, code, f"`{param}`: Input should be a valid")
