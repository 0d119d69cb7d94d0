"""Round 4 of the reliability probes (issue 48), the server and the gate around it: the operator's thresholds hold
whatever domain a request names, one request cannot hold the worker for long (a large `/v1/confidence` request is
scored in slices between the others, its identical questions once, its tokens capped; stop strings are bounded and
checked in linear time), retrievals run side by side on a bounded set of threads that hung calls cannot grow, and the
LangChain gate and `monitor` say what they did.

The servers run in this process (uvicorn on a thread, on a real socket) or as their engines, on tiny random models."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time

import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.utils.loading import unwrap_peft
from tests.reliability import case
from tests.serving import running
from tests.test_reliability_endpoints import gate_setup  # noqa: F401 - the fixture
from tests.test_reliability_serve_isolation import served_app
from tests.test_serve_confidence import QUESTIONS


pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

pytestmark = pytest.mark.float32

CONTEXT = "william shakespeare wrote hamlet . paris is the capital of france ."
DOMAINS = {"by": "dataset", "domains": {"pararel": {"decision_threshold": 0.29}, "strict": {"decision_threshold": 0.95},
                                        "few": {"decision_threshold": None}}}
"""Saved per-domain thresholds: `pararel` below the operator's `--threshold 0.9`, `strict` above it, `few` on the
fallback."""


@pytest.fixture(scope="module")
def gate_model(tiny_llama):
    return AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.float32)


def chat(question: str, **elical) -> dict:
    return {"messages": [{"role": "user", "content": question}], **({"elical": elical} if elical else {})}


def request(question: str, **fields):
    from elical_hf.serve.schema import ChatCompletionRequest

    return ChatCompletionRequest(messages=[{"role": "user", "content": question}], **fields)


def post(port: int, path: str, body: dict) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", f"/v1{path}", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


class RowCounter:
    """A forward hook on a confidence model's backbone: appends each pass's number of rows to `rows` and sleeps
    `seconds_per_row` per row (a slow model). Removed on leaving the `with` block."""

    def __init__(self, model, seconds_per_row: float = 0.0) -> None:
        inner = unwrap_peft(model)
        self.backbone, self.seconds_per_row, self.rows = getattr(inner, inner.base_model_prefix), seconds_per_row, []

    def __enter__(self) -> RowCounter:
        def hook(module, inputs, output):
            rows = output[0].shape[0]
            self.rows.append(rows)
            time.sleep(self.seconds_per_row * rows)

        self.handle = self.backbone.register_forward_hook(hook)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


# 12. The operator's threshold holds for every domain


@case("silent", "`elical-hf serve MODEL --threshold 0.9` and a request naming a domain the model saved a lower "
      "threshold for (`\"elical\": {\"domain\": \"pararel\"}`, saved at 0.29), in a chat or a `/v1/confidence` request",
      "gated at 0.9: `--threshold` (and `--retrieve_threshold`) is a floor for every domain, a domain's higher saved "
      "threshold still applies (was: answered at 0.29); `--allow_lower_domain_thresholds` lets the saved ones lie "
      "below")
def test_a_domain_cannot_lower_the_operators_threshold(gate_model, tiny_llama, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from elical_hf.serve.engine import GateEngine

    config = gate_model.confidence_config
    monkeypatch.setattr(config, "domain_thresholds", DOMAINS)
    monkeypatch.setattr(config, "retrieve_threshold", 0.2)
    engine = GateEngine(gate_model, "g", threshold=0.9, retrieve_threshold=0.5)
    for domain, want in (("pararel", (0.9, 0.5)), ("strict", (0.95, 0.5)), ("few", (0.9, 0.5)), (None, (0.9, 0.5))):
        job = engine.prepare(request(QUESTIONS[0], elical={"domain": domain}))
        assert (job.threshold, job.retrieve_threshold) == want, domain
    assert GateEngine(gate_model, "g", threshold=0.9).prepare(
        request(QUESTIONS[0], elical={"domain": "pararel"})).threshold == 0.9
    lower = GateEngine(gate_model, "g", threshold=0.9, retrieve_threshold=0.5, allow_lower_domain_thresholds=True)
    job = lower.prepare(request(QUESTIONS[0], elical={"domain": "pararel"}))
    assert (job.threshold, job.retrieve_threshold) == (0.29, 0.2)  # the saved ones, as the operator allowed
    monkeypatch.setattr(config, "decision_threshold", 0.6)
    saved = GateEngine(gate_model, "g")  # no --threshold: the saved thresholds, the domain's own included
    assert saved.prepare(request(QUESTIONS[0], elical={"domain": "pararel"})).threshold == 0.29

    model = AutoModelForConfidence.from_pretrained(tiny_llama, dtype=torch.float32)
    model.confidence_config.decision_threshold, model.confidence_config.domain_thresholds = 0.6, DOMAINS
    model.save_pretrained(tmp_path / "gate")
    for flags, want in (([], 0.9), (["--allow_lower_domain_thresholds", "true"], 0.29)):
        app = served_app(monkeypatch, [str(tmp_path / "gate"), "--port", "0", "--threshold", "0.9", *flags])
        with TestClient(app, base_url="http://localhost") as client:
            reply = client.post("/v1/confidence", json={"questions": QUESTIONS[:2], "domains": ["pararel", None]})
            assert reply.status_code == 200, reply.text
            assert [item["threshold"] for item in reply.json()["data"]] == [want, 0.9]


@case("input", "a request naming a domain the model has no thresholds for (`\"elical\": {\"domain\": \"wiki\"}`), or "
      "any domain for a model without per-domain thresholds",
      "the operator's choice: 400 `unknown_domain` naming the known ones (`--unknown_domain refuse`, the default), or "
      "gated with the server's thresholds (`--unknown_domain fallback`; the reply names the domain and them)")
def test_an_unknown_domain_is_the_operators_choice(gate_model, monkeypatch):
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import RequestError

    config = gate_model.confidence_config
    monkeypatch.setattr(config, "domain_thresholds", DOMAINS)
    with pytest.raises(RequestError, match="Unknown domain 'wiki'") as refused:
        GateEngine(gate_model, "g", threshold=0.9).prepare(request(QUESTIONS[0], elical={"domain": "wiki"}))
    assert (refused.value.param, refused.value.code) == ("elical.domain", "unknown_domain")
    fallback = GateEngine(gate_model, "g", threshold=0.9, retrieve_threshold=0.5, unknown_domain="fallback")
    job = fallback.prepare(request(QUESTIONS[0], elical={"domain": "wiki"}))
    assert (job.domain, job.threshold, job.retrieve_threshold) == ("wiki", 0.9, 0.5)
    monkeypatch.setattr(config, "domain_thresholds", None)  # a model with one threshold for every question
    assert fallback.prepare(request(QUESTIONS[0], elical={"domain": "nq"})).threshold == 0.9
    with pytest.raises(ValueError, match="--unknown_domain must be one of"):
        GateEngine(gate_model, "g", threshold=0.9, unknown_domain="ignore")


# 14. One request cannot hold the worker


@case("silent", "a `POST /v1/confidence` request of many questions (the limits allow 256 of 1 MiB in all) and a "
      "4-token chat request sent while it is scored",
      "the questions are scored in slices of at most `--confidence_slice_tokens` prompt tokens (4096) and the chat "
      "request is answered between two slices, before the large request ends (was: it waited for all of it: 213 s)")
def test_a_large_confidence_request_is_scored_in_slices_between_other_requests(gate_model):
    from elical_hf.serve.app import create_app
    from elical_hf.serve.engine import GateEngine

    engine = GateEngine(gate_model, "tiny-gate", threshold=0.0, max_tokens=2, confidence_slice_tokens=1)
    questions = [f"{QUESTIONS[i % len(QUESTIONS)]} number {i}" for i in range(40)]
    done: dict[str, tuple[int, int, dict]] = {}  # name -> (place in the order the replies came back, status, reply)
    order = itertools.count()  # `next` of a count is atomic: two replies never share a place

    def send(name: str, path: str, body: dict) -> None:
        status, reply = post(port, path, body)
        done[name] = (next(order), status, reply)

    with RowCounter(gate_model, seconds_per_row=0.05), running(create_app(engine, batch_wait_ms=20)) as port:
        large = threading.Thread(target=send, args=("large", "/confidence", {"questions": questions}))
        large.start()
        time.sleep(0.3)  # the large request is being scored
        send("chat", "/chat/completions", chat(QUESTIONS[0]))
        large.join(timeout=120)
    assert done["chat"][1] == 200 and done["large"][1] == 200, done
    assert done["chat"][0] < done["large"][0], "the chat request waited for the whole /v1/confidence request"
    want = gate_model.confidence(questions)
    assert [item["confidence"] for item in done["large"][2]["data"]] == pytest.approx(want, abs=1e-5)


@case("silent", "a `POST /v1/confidence` request that repeats a question (`[q] * 50 + [q2]`)",
      "each distinct question is scored once (2 rows, was 51) and every copy gets its score")
def test_identical_questions_are_scored_once(gate_model):
    from elical_hf.serve.confidence import prepare_confidence
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import ConfidenceRequest

    engine = GateEngine(gate_model, "g", threshold=0.5)
    jobs = [prepare_confidence(engine, ConfidenceRequest(questions=[QUESTIONS[0]] * 50 + [QUESTIONS[1]])),
            prepare_confidence(engine, ConfidenceRequest(questions=[QUESTIONS[1], QUESTIONS[0]]))]
    with RowCounter(gate_model) as counter:
        first, second = engine.run(jobs)
    assert sum(counter.rows) == 2
    want = gate_model.confidence(QUESTIONS[:2])
    assert [item["confidence"] for item in first.body["data"]] == pytest.approx([want[0]] * 50 + [want[1]], abs=1e-5)
    assert [item["index"] for item in first.body["data"]] == list(range(51))
    assert [item["confidence"] for item in second.body["data"]] == pytest.approx(want[::-1], abs=1e-5)


@case("input", "a `POST /v1/confidence` request whose distinct questions hold more prompt tokens than "
      "`--max_confidence_tokens` (32768 by default)",
      "400 `too_many_tokens`: `This request's questions hold N prompt tokens in all (chat template included), more "
      "than this server's limit of 100 per request (--max_confidence_tokens) …`; nothing of it is scored")
def test_the_tokens_of_a_confidence_request_are_capped(gate_model):
    from elical_hf.serve.confidence import prepare_confidence
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import ConfidenceRequest, RequestError

    engine = GateEngine(gate_model, "g", threshold=0.5, max_confidence_tokens=100)
    job = prepare_confidence(engine, ConfidenceRequest(questions=QUESTIONS))
    with RowCounter(gate_model) as counter:
        (error,) = engine.run([job])
    assert isinstance(error, RequestError) and counter.rows == []
    assert (error.param, error.code, error.status) == ("questions", "too_many_tokens", 400)
    assert "more than this server's limit of 100 per request (--max_confidence_tokens)" in error.message
    (reply,) = engine.run([prepare_confidence(engine, ConfidenceRequest(questions=QUESTIONS[:1] * 9))])
    assert len(reply.body["data"]) == 9  # the copies of one question count once
    with pytest.raises(ValueError, match="--max_confidence_tokens must be >= 1"):
        GateEngine(gate_model, "g", threshold=0.5, max_confidence_tokens=0)


# 15. Stop strings


@case("input", "a chat request with a `stop` string of 100,000 characters",
      "400 naming it: `` `stop` strings may be at most 1000 characters long; the stop string has 100000. `` (or "
      "`stop[1] has …` in a list; the count was already at most 4, as OpenAI's)")
def test_stop_strings_are_bounded(gate_model):
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import MAX_STOP_LENGTH, RequestError

    engine = GateEngine(gate_model, "g", threshold=0.5)
    for stop, param in (("x" * 100_000, "stop"), (["ok", "x" * (MAX_STOP_LENGTH + 1)], "stop.1")):
        with pytest.raises(RequestError, match=f"at most {MAX_STOP_LENGTH} characters long") as refused:
            engine.prepare(request(QUESTIONS[0], stop=stop))
        assert refused.value.param == param
    assert engine.prepare(request(QUESTIONS[0], stop=["y" * MAX_STOP_LENGTH] * 4)).stop == ("y" * MAX_STOP_LENGTH,) * 4
    with pytest.raises(RequestError, match="At most 4 `stop` strings"):
        engine.prepare(request(QUESTIONS[0], stop=["a", "b", "c", "d", "e"]))


@case("silent", "a chat request with a field that would change the answer but that the server does not apply "
      "(`frequency_penalty: 2`, `logit_bias`, `stop_token_ids`, `stop_sequences`, `min_tokens`, `ignore_eos`, "
      "`max_new_tokens`, ...), or a gate setting misplaced: `\"extra_body\": {\"elical\": {\"threshold\": 0.99}}` "
      "sent raw, `\"Elical\"`",
      "400 in OpenAI's shape naming the field (`param`): `` `logit_bias` is not applied by this server, and it would "
      "change the answer: leave it out. ``, `` `Elical` is not a request field; did you mean `elical`? `` (was: "
      "answered as if the field were not there, the stricter threshold dropped); neutral values (`0`, `{}`, `false`) "
      "are accepted")
def test_fields_the_server_does_not_apply_are_refused(gate_model):
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import RequestError

    engine = GateEngine(gate_model, "g", threshold=0.5)
    for name, value in [("frequency_penalty", 2.0), ("presence_penalty", 1), ("logit_bias", {"5": -100}),
                        ("stop_token_ids", [5]), ("stop_sequences", ["a"]), ("min_tokens", 4), ("ignore_eos", True),
                        ("max_new_tokens", 1), ("extra_body", {"elical": {"threshold": 0.99}}),
                        ("Elical", {"threshold": 0.99}), ("Max_Tokens", 2)]:
        with pytest.raises(RequestError) as refused:
            engine.prepare(request(QUESTIONS[0], **{name: value}))
        assert refused.value.param == name and f"`{name}`" in str(refused.value)
    for name, value in [("frequency_penalty", 0.0), ("logit_bias", {}), ("ignore_eos", False), ("min_tokens", 0),
                        ("user", "u"), ("seed", 3)]:
        engine.prepare(request(QUESTIONS[0], **{name: value}))


@case("silent", "a streamed answer with 4 stop strings of 100,000 characters (beyond the request limit: the "
      "stream's own check)", "the text held back for a stop string's beginning is found in time linear in the text (a "
      "stop string's matching table built only as far as the text matched it, a few characters of its 100,000; was: "
      "every prefix of every stop string at every token, 72.8 s for 64 tokens "
      "of 4 stops of 100,000)")
def test_the_stop_string_check_is_linear():
    from elical_hf.serve.stream import TokenStream
    from elical_hf.signals.decoding import cut_at_stop
    from tests.tiny import make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    words = tokenizer("who wrote hamlet and what is the capital of france", add_special_tokens=False)["input_ids"]

    def brute_force(stops: list[str]) -> list[str]:  # the definition: every prefix of every stop string
        texts = []
        for end in range(1, len(words) + 1):
            text = tokenizer.decode(words[:end], skip_special_tokens=True)
            cut = cut_at_stop(text, stops)
            if cut == text:
                held = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
                cut = text[: len(text) - held].rstrip("\ufffd")
            texts.append(cut.strip())
        return texts

    streams: list = []

    def streamed(stops: list[str]) -> list[str]:
        sent: list[str] = []
        stream = TokenStream(tokenizer, stops, set(), None, lambda event: sent.append(event[2]))
        streams.append(stream)
        for token in words:
            stream.push(token, 0.0, None)
        return sent

    for stops in (["hamlet and wh", "e capital"], ["t is t", "is the is the capital", "what is what"],
                  ["wrote hamlet!", "of france?", "ho w", "o"], ["capital of france and more"]):
        assert streamed(stops) == brute_force(stops), stops
    long = ["hamlet" + "x" * 100_000, "wrote " + "y" * 100_000, "z" * 100_000, "capital of " + "w" * 100_000]
    sent = streamed(long)
    # the work is counted, not timed: each stop string's failure table is built only as far as the text has matched
    # it (a few characters), never across its 100,000 characters
    text_length = len(tokenizer.decode(words, skip_special_tokens=True))
    assert all(len(prefix.fail) <= text_length + 1 for prefix in streams[-1].prefixes)
    assert sent[1] == "who" and sent[-2] == "who wrote hamlet and what is the"  # held: "wrote", "capital of"
    assert sent[-1] == "who wrote hamlet and what is the capital of france"


# 16. Retrievals


def banded_jobs(engine, questions: list[str]) -> list:
    return [engine.prepare(request(question)) for question in questions]


@case("silent", "a batch with several questions in the retrieve band and a retriever that takes 0.3 s a call",
      "the calls run side by side, at most `--max_concurrent_retrievals` (4) at once (was: one after another, the "
      "model waiting for their sum)")
def test_retrievals_of_a_batch_run_concurrently_with_a_bound(gate_model):
    from elical_hf.serve.engine import GateEngine

    active, most, lock = [0], [0], threading.Lock()

    def slow(question: str) -> str:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.3)
        with lock:
            active[0] -= 1
        return CONTEXT

    for bound, want in ((None, 4), (2, 2)):
        most[0] = 0
        extra = {} if bound is None else {"max_concurrent_retrievals": bound}
        engine = GateEngine(gate_model, "g", threshold=1.0, retrieve_threshold=0.0, retriever=slow, max_tokens=2,
                            **extra)
        replies = engine.run(banded_jobs(engine, QUESTIONS))
        assert all(reply.body["elical"]["context"] == CONTEXT for reply in replies)
        assert most[0] == want, (bound, most[0])
    with pytest.raises(ValueError, match="--max_concurrent_retrievals must be >= 1"):
        GateEngine(gate_model, "g", threshold=1.0, retriever=slow, max_concurrent_retrievals=0)


@case("silent", "a retriever that hangs on every call, under a stream of requests in the retrieve band",
      "each request gets its 504 after `--retriever_timeout`; the calls still running stay at most "
      "`--max_concurrent_retrievals` threads (was: one more daemon thread per timed-out call), and a request finding "
      "them all busy is told so: `… all 4 retriever threads are still busy with calls that did not return`")
def test_hung_retriever_calls_do_not_accumulate(gate_model):
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.schema import RequestError

    release, hung, lock = threading.Event(), [0], threading.Lock()

    def hangs(question: str) -> str:
        with lock:
            hung[0] += 1
        release.wait(60)
        with lock:
            hung[0] -= 1
        return CONTEXT

    engine = GateEngine(gate_model, "g", threshold=1.0, retrieve_threshold=0.0, retriever=hangs, max_tokens=2,
                        retriever_timeout=0.3)  # at most 4 retriever threads by default
    try:
        errors = [engine.run(banded_jobs(engine, [question]))[0] for question in QUESTIONS]
        assert all(isinstance(error, RequestError) and error.code == "retriever_timeout" for error in errors)
        assert hung[0] == 4, hung[0]  # was 6: a thread per timed-out call
        assert "all 4 retriever threads are still busy with calls that did not return" in errors[-1].message
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while hung[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    (reply,) = engine.run(banded_jobs(engine, QUESTIONS[:1]))
    assert reply.body["elical"]["context"] == CONTEXT  # the threads are free again


# 19. What the LangChain gate and `monitor` say


@case("silent", "a LangChain `ConfidenceGate` whose `abstain` Runnable is a chat model that reports no "
      "`finish_reason` (langchain-core's fake chat model; Anthropic's `stop_reason`)",
      "the routed reply has one: the model's own, its `stop_reason` / `done_reason` read as OpenAI's, else `\"stop\"` "
      "(was: none)")
def test_a_routed_langchain_reply_has_a_finish_reason(gate_setup):  # noqa: F811 - the fixture
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    from elical_hf.integrations.langchain import ConfidenceGate

    model, _, answered, _, abstained = gate_setup
    gate = ConfidenceGate(model, abstain=FakeListChatModel(responses=["a bigger model answers"] * 4),
                          max_new_tokens=2)
    routed, direct = gate.batch([abstained[0], answered[0]])
    assert routed.content == "a bigger model answers" and routed.response_metadata["elical"]["routed"]
    assert routed.response_metadata["finish_reason"] == "stop"
    assert direct.response_metadata["finish_reason"] in ("stop", "length")
    for metadata, want in (({"stop_reason": "max_tokens"}, "length"), ({"done_reason": "stop"}, "stop"),
                           ({"finish_reason": "content_filter"}, "content_filter")):
        routed = RunnableLambda(lambda q, m=metadata: AIMessage("big", response_metadata=m))
        gate = ConfidenceGate(model, abstain=routed, max_new_tokens=2)
        assert gate.invoke(abstained[0]).response_metadata["finish_reason"] == want, metadata


@case("input", "`ConfidenceGate(model, threshold=2.0)` (or a `retrieve_threshold` of -1, or one above the threshold)",
      "`ValueError` when the gate is built: `` `threshold` must lie in [0, 1], got 2.0. `` (was: accepted, and every "
      "question abstained)")
def test_a_langchain_gate_refuses_thresholds_outside_0_1(gate_setup):  # noqa: F811 - the fixture
    from elical_hf.integrations.langchain import ConfidenceGate

    model = gate_setup[0]
    for kwargs, message in (({"threshold": 2.0}, r"`threshold` must lie in \[0, 1\], got 2.0\."),
                            ({"retrieve_threshold": -1.0}, r"`retrieve_threshold` must lie in \[0, 1\], got -1.0\."),
                            ({"threshold": 0.3, "retrieve_threshold": 0.5}, "must not exceed `threshold`"),
                            ({"threshold": "0.5"}, "must be a number")):
        with pytest.raises(ValueError, match=message) as refused:
            ConfidenceGate(model, **kwargs)
        assert "\n" not in str(refused.value)


@case("silent", "`elical-hf monitor` on one new question (or a few)",
      "the verdict names the sample sizes and what the test could see: `no evidence of drift (KS p = 0.91 >= 0.01), "
      "but 1 new question against 1000 calibration rows is too few to tell: the test flags only a KS distance of at "
      "least 0.99 between the two confidence distributions, so it has almost no power here; about 356 new questions "
      "detect a distance of 0.1` (was: `no evidence of drift …: the confidences look like the calibration set's`)")
def test_drift_on_few_questions_says_how_little_it_can_tell():
    import numpy as np

    from elical_hf.evaluation.drift import confidence_drift

    reference = list(np.random.default_rng(0).beta(2, 2, 1000))
    one = confidence_drift(reference, [0.5])
    assert not one["drift"] and one["n_new"] == 1 and one["min_detectable_distance"] >= 0.99
    assert "1 new question against 1000 calibration rows is too few to tell" in one["verdict"]
    assert "almost no power" in one["verdict"] and "look like the calibration set's" not in one["verdict"]
    assert "about 356 new questions detect a distance of 0.1" in one["verdict"]
    few = confidence_drift(reference[:200], [0.5, 0.4])
    assert "no number of new questions detects a distance of 0.1 against 200 calibration rows" in few["verdict"]
    many = confidence_drift(reference[:200], list(np.random.default_rng(1).beta(2, 2, 400)))
    assert "almost no power" not in many["verdict"]
    assert "400 new questions against 200 calibration rows" in many["verdict"]
    # the distance the test needs at this level: Smirnov's c(0.01) * sqrt((n + m) / (n m)) for large samples
    assert many["min_detectable_distance"] == pytest.approx(1.628 * ((400 + 200) / (400 * 200)) ** 0.5, rel=0.05)
