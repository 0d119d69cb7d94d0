"""`POST /v1/confidence` (scores only, many questions, batched with the chat requests) and per-domain thresholds in
requests (`"elical": {"domain": ...}`, `domains`), against a real server (uvicorn on a socket, in this process): the
confidences are `model.confidence`'s and the chat replies', the decisions follow each question's domain's saved
thresholds ([`~elical_hf.gate.thresholds_for`]), the model's name and revision come with them, and every bad request
is one OpenAI error while the server goes on."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request

import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.gate import decide
from tests.conftest import save_tiny_base
from tests.serving import cut, gated_model, running


pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
             "when was the king born", "who was the first president", "what is the largest river in the world"]
NAME = "tiny-gate"
DOMAINS = {"by": "dataset", "domains": {"open": {"decision_threshold": 0.0}, "closed": {"decision_threshold": 1.0},
                                        "few": {"decision_threshold": None}}}
"""The model's saved per-domain thresholds: answer every `open` question, none of `closed`; `few` has the fallback."""


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """A gate server (3 of the 6 questions answered by the saved threshold, a retrieve band below it; at most 8
    questions per request; batches collect for 200 ms) whose model has the per-domain thresholds [`DOMAINS`]. Yields
    (port, model, confidences, threshold, band)."""
    from elical_hf.serve.app import create_app
    from elical_hf.serve.engine import GateEngine

    root = tmp_path_factory.mktemp("confidence")
    base = save_tiny_base(root / "base", "llama", seed=3, initializer_range=0.2)
    confidences = gated_model(base, root / "model", QUESTIONS, answered=3)
    model = AutoModelForConfidence.from_pretrained(root / "model", dtype=torch.float32)
    band = cut(confidences, 5)
    model.confidence_config.domain_thresholds, model.confidence_config.retrieve_threshold = DOMAINS, band
    engine = GateEngine(model, NAME, max_tokens=4, max_questions=8,
                        model_info={"base_model": "tiny-base", "revision": None, "sha256": "0" * 64})
    with running(create_app(engine, batch_wait_ms=200)) as port:
        yield port, model, confidences, cut(confidences, 3), band


def post(port: int, path: str, body, prefix: str = "/v1") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{prefix}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_scores_without_answers_are_the_models_and_the_chat_replies(gate):
    port, model, _, threshold, band = gate
    status, reply = post(port, "/confidence", {"model": NAME, "questions": QUESTIONS})
    assert status == 200, reply
    assert reply["model"] == NAME and reply["elical"]["base_model"] == "tiny-base" and "sha256" in reply["elical"]
    want = model.confidence(QUESTIONS)
    assert [item["index"] for item in reply["data"]] == list(range(len(QUESTIONS)))
    assert [item["confidence"] for item in reply["data"]] == pytest.approx(want, abs=1e-5)
    assert [item["decision"] for item in reply["data"]] == [decide(c, threshold, band) for c in want]
    for item in reply["data"]:
        assert (item["threshold"], item["retrieve_threshold"], item["domain"]) == (
            pytest.approx(threshold), pytest.approx(band), None)
    status, chat = post(port, "/chat/completions", {"messages": [{"role": "user", "content": QUESTIONS[0]}]})
    assert chat["elical"]["confidence"] == pytest.approx(reply["data"][0]["confidence"], abs=1e-5)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models") as response:
        card = json.loads(response.read())["data"][0]
    assert card["elical"]["base_model"] == "tiny-base" and card["elical"]["sha256"] == "0" * 64


def test_requests_that_arrive_together_are_scored_in_one_batch(gate):
    port, model, _, _, _ = gate
    replies: dict[int, tuple] = {}
    bodies = [{"questions": QUESTIONS[:3]}, {"questions": QUESTIONS[3:]}, {"questions": [QUESTIONS[0]]}]
    threads = [threading.Thread(target=lambda i=i: replies.__setitem__(i, post(port, "/confidence", bodies[i])))
               for i in range(len(bodies))]
    chat = threading.Thread(target=lambda: replies.__setitem__(
        "chat", post(port, "/chat/completions", {"messages": [{"role": "user", "content": QUESTIONS[1]}]})))
    for thread in [*threads, chat]:
        thread.start()
    for thread in [*threads, chat]:
        thread.join(timeout=120)
    want = model.confidence(QUESTIONS)
    for i, body in enumerate(bodies):
        status, reply = replies[i]
        assert status == 200 and len(reply["data"]) == len(body["questions"])
        assert [item["confidence"] for item in reply["data"]] == pytest.approx(
            [want[QUESTIONS.index(q)] for q in body["questions"]], abs=1e-5)
    assert max(replies[i][1]["elical"]["batch_size"] for i in range(len(bodies))) >= 2
    assert replies["chat"][0] == 200 and replies["chat"][1]["elical"]["confidence"] == pytest.approx(want[1], abs=1e-5)


def test_each_question_is_decided_with_its_domains_thresholds(gate):
    port, model, confidences, threshold, band = gate
    status, reply = post(port, "/confidence", {"questions": QUESTIONS[:4], "domains": ["open", "closed", None, "few"],
                                               "elical": {"domain": "closed"}})
    assert status == 200, reply
    got = [(item["domain"], item["threshold"], item["decision"]) for item in reply["data"]]
    assert got[0] == ("open", 0.0, "answer") and got[1] == ("closed", 1.0, "retrieve" if confidences[1] >= band
                                                                                 else "abstain")
    assert got[2][:2] == ("closed", 1.0)  # null: the request's domain
    assert got[3] == ("few", pytest.approx(threshold), decide(confidences[3], threshold, band))  # the fallback
    assert reply["data"][0]["retrieve_threshold"] == 0.0  # the band never above the domain's threshold
    lowest = QUESTIONS[confidences.index(min(confidences))]
    status, chat = post(port, "/chat/completions", {"messages": [{"role": "user", "content": lowest}],
                                                    "elical": {"domain": "open"}, "max_tokens": 2})
    assert status == 200 and chat["elical"]["decision"] == "answer" and chat["elical"]["threshold"] == 0.0
    assert chat["elical"]["domain"] == "open"  # the reply names the domain it was gated for
    status, chat = post(port, "/chat/completions", {"messages": [{"role": "user", "content": lowest}]})
    assert chat["elical"]["decision"] != "answer" and chat["elical"]["domain"] is None
    # a request may only make its domain's gate stricter
    status, error = post(port, "/chat/completions", {"messages": [{"role": "user", "content": lowest}],
                                                     "elical": {"domain": "closed", "threshold": 0.5}})
    assert status == 400 and error["error"]["code"] == "threshold_not_allowed"
    assert "domain 'closed'" in error["error"]["message"]
    status, stricter = post(port, "/confidence", {"questions": [lowest],
                                                  "elical": {"domain": "open", "threshold": 0.9}})
    assert status == 200 and stricter["data"][0]["threshold"] == 0.9


@pytest.mark.parametrize("path, body, status, param, code", [
    ("/confidence", {"questions": QUESTIONS + QUESTIONS[:3]}, 400, "questions", "too_many_questions"),
    ("/confidence", {"questions": []}, 400, "questions", "too_short"),
    ("/confidence", {"questions": "who wrote hamlet"}, 400, "questions", "list_type"),
    ("/confidence", {"questions": ["who wrote hamlet", "  "]}, 400, "questions.1", None),
    ("/confidence", {"questions": ["who wrote hamlet", 3]}, 400, "questions.1", "string_type"),
    ("/confidence", {"input": ["who wrote hamlet"]}, 400, "questions", "missing"),
    ("/confidence", {"questions": ["a"], "question": ["b"]}, 400, "question", "extra_forbidden"),
    ("/confidence", {"questions": ["a", "b"], "domains": ["open"]}, 400, "domains", None),
    ("/confidence", {"questions": ["a"], "domains": [""]}, 400, "domains.0", None),
    ("/confidence", {"questions": ["a", "b"], "domains": [None, "wiki"]}, 400, "domains.1", "unknown_domain"),
    ("/confidence", {"questions": ["a"], "elical": {"domain": "wiki"}}, 400, "elical.domain", "unknown_domain"),
    ("/confidence", {"questions": ["a"], "elical": {"threshold": 0.0}}, 400, "elical.threshold",
     "threshold_not_allowed"),
    ("/confidence", {"questions": [" ".join(["who wrote hamlet"] * 200)]}, 400, "questions.0",
     "context_length_exceeded"),
    ("/confidence", {"model": "gpt-4o", "questions": ["a"]}, 404, "model", "model_not_found"),
    ("/confidence", b"{not json", 400, None, "invalid_json"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "a"}], "elical": {"domain": "wiki"}}, 400,
     "elical.domain", "unknown_domain"),
])
def test_bad_requests_get_openai_errors_and_the_server_goes_on(gate, path, body, status, param, code):
    port = gate[0]
    got, error = post(port, path, body)
    assert got == status, error
    assert set(error) == {"error"} and (error["error"]["param"], error["error"]["code"]) == (param, code), error
    assert error["error"]["message"]
    if code == "unknown_domain":
        assert "'wiki'" in error["error"]["message"] and "'open'" in error["error"]["message"]
    assert post(port, "/confidence", {"questions": ["who wrote hamlet"]})[0] == 200


def test_a_completion_server_has_no_confidence_endpoint():
    from elical_hf.serve.app import create_app
    from elical_hf.serve.completion import CompletionEngine
    from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    with running(create_app(CompletionEngine(make_tiny_causal_lm(tokenizer), tokenizer, "chat"))) as port:
        status, error = post(port, "/confidence", {"questions": ["who wrote hamlet"]})
        assert status == 404 and error["error"]["code"] == "unsupported_endpoint"
        status, error = post(port, "/classify", {"inputs": "who wrote hamlet"}, prefix="")
    assert status == 404 and error["error"]["code"] == "unsupported_endpoint"


def test_classify_answers_semantic_routers_score_v1_contract(gate):
    """vLLM Semantic Router's `http_classify` backend with `contract: score.v1` (semantic-router PR #3542) POSTs
    `{"inputs": TEXT}` to `/classify` and reads a bare `{"score": <finite number>}` (a `label` is optional)."""
    port, model, *_ = gate
    want = model.confidence(QUESTIONS[:2])
    for question, confidence in zip(QUESTIONS[:2], want):
        status, reply = post(port, "/classify", {"inputs": question}, prefix="")
        assert status == 200 and reply == {"label": "confidence", "score": pytest.approx(confidence, abs=1e-5)}
    for body, param in (({"inputs": "   "}, "questions.0"), ({"input": "who"}, "inputs"), ({"inputs": ["a"]}, "inputs")):
        status, error = post(port, "/classify", body, prefix="")
        assert status == 400 and error["error"]["param"] == param, error


def save_gate(base: str, folder, threshold: float | None) -> str:
    model = AutoModelForConfidence.from_pretrained(base)
    model.confidence_config.decision_threshold = threshold
    model.save_pretrained(folder)
    return str(folder)


def test_the_served_revision_names_a_hub_commit_and_changes_with_the_saved_files(tmp_path, tiny_llama):
    from elical_hf.cli.serve import ServeArguments, build_engine
    from elical_hf.serve.confidence import saved_model_revision

    folder = save_gate(tiny_llama, tmp_path / "models--someone--gate" / "snapshots" / "0123abcd", None)
    first = saved_model_revision(folder)
    assert first["revision"] == "0123abcd" and len(first["sha256"]) == 64
    assert saved_model_revision(folder) == first
    save_gate(tiny_llama, folder, 0.5)  # the same adapter and head, another threshold
    assert saved_model_revision(folder)["sha256"] != first["sha256"]
    local = save_gate(tiny_llama, tmp_path / "local", 0.5)
    engine = build_engine(ServeArguments(model=local))
    assert engine.model_info == {"base_model": os.path.basename(tiny_llama), **saved_model_revision(local)}
    assert engine.model_info["revision"] is None


def test_server_thresholds_replace_the_fallback_only(gate):
    """`--threshold` / `--retrieve_threshold` replace the saved fallback: a domain on the fallback gets them, a domain
    with a threshold of its own keeps it (with `--allow_lower_domain_thresholds` where it lies below them; without,
    they are its floor: `tests/test_reliability_server.py`), also when that threshold equals the saved fallback's."""
    from elical_hf.serve.engine import GateEngine

    model = gate[1]
    config = model.confidence_config
    saved = config.domain_thresholds
    config.domain_thresholds = {"by": "dataset", "domains": {
        "same": {"decision_threshold": config.decision_threshold}, "own": {"decision_threshold": 0.25},
        "few": {"decision_threshold": None}}}
    try:
        engine = GateEngine(model, NAME, threshold=0.95, retrieve_threshold=0.9, allow_lower_domain_thresholds=True)
        assert engine.domain_thresholds(None) == engine.domain_thresholds("few") == (0.95, 0.9)
        assert engine.domain_thresholds("own") == (0.25, min(config.retrieve_threshold, 0.25))
        assert engine.domain_thresholds("same")[0] == config.decision_threshold
        from elical_hf.serve.schema import GateOptions, RequestError

        plain = GateEngine(model, NAME)
        own_band = min(config.retrieve_threshold, 0.25)
        for domain, phrase in (("own", f"retrieves for questions of the domain 'own' at or above confidence "
                                       f"{own_band:g};"),
                               (None, "retrieves at or above confidence")):
            with pytest.raises(RequestError) as refused:
                plain.request_thresholds(GateOptions(retrieve_threshold=0.0), domain)
            assert f"This server {phrase}" in refused.value.message
        config.retrieve_threshold, band = None, config.retrieve_threshold
        try:
            for domain, phrase in (("own", "for no questions of the domain 'own';"), (None, "for no question;")):
                with pytest.raises(RequestError) as refused:
                    GateEngine(model, NAME).request_thresholds(GateOptions(retrieve_threshold=0.1), domain)
                assert f"This server retrieves {phrase}" in refused.value.message
        finally:
            config.retrieve_threshold = band
    finally:
        config.domain_thresholds = saved
