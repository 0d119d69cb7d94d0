"""Against real vLLM servers (vLLM's CPU build, float32): the shipped two-stage demo model exported by `elical-hf
export` and served by vLLM's pooling runner (`--runner pooling`, `POST /classify`) gives `AutoModelForConfidence`'s
confidences on 64 bundled questions and the same decisions at the saved threshold; one engine serves the base model
and several confidence adapters (`--form base` / `--form lora`); and the gate on engines (`serve EXPORT
--confidence_endpoint --generation_endpoint`, vLLM's generate runner on the base model for the answers: the server
tests/test_vllm_server.py goes on with) decides and answers as the in-process gate. Skipped, saying why, where vLLM cannot run."""

from __future__ import annotations

import json
import urllib.request

import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.data.questions import load_bundled_questions
from elical_hf.demo import DEMO_CALIBRATED
from elical_hf.publishing.export import EXPORT_CONFIG_NAME, export_prompt_ids
from tests.serving import cut, running
from tests.vllm_server import classify, exported_demo_model, vllm_server, why_not_here


# one xdist group with tests/test_vllm_server.py (one worker): the gate's generation server serves those tests too
pytestmark = [pytest.mark.slow, pytest.mark.float32, pytest.mark.xdist_group("vllm")]

TOLERANCE = 1e-4
"""Largest absolute difference allowed between vLLM's float32 confidence and ours (benchmarks/vllm_export_agreement.py
measures it)."""


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    reason = why_not_here()
    if reason:
        pytest.skip(reason)
    return exported_demo_model(str(tmp_path_factory.mktemp("export") / "merged"))


@pytest.fixture(scope="module")
def pooling(export):
    """vLLM's pooling runner on the demo model's export, shared by the tests of this module."""
    server = vllm_server(export, "confidence", "--runner", "pooling", eager=True)
    yield server
    server.stop()


def test_vllm_serves_the_export_with_the_confidence_models_numbers(export, pooling):
    questions = [row["question"] for name in ("nq", "pararel") for row in load_bundled_questions(name, limit=32)]
    ours = AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32").confidence(questions)
    with open(f"{export}/{EXPORT_CONFIG_NAME}", encoding="utf-8") as handle:
        threshold = json.load(handle)["confidence_config"]["decision_threshold"]
    assert threshold is not None
    served = classify(pooling.url, "confidence", export_prompt_ids(questions, export))
    difference = max(abs(a - b) for a, b in zip(served, ours))
    print(f"64 questions: largest |vLLM - AutoModelForConfidence| = {difference:.2e}")
    assert len(served) == 64 and difference <= TOLERANCE
    assert [c >= threshold for c in served] == [c >= threshold for c in ours]


def test_one_vllm_serves_the_base_and_several_confidence_adapters(export, tmp_path):
    """`--form base` served once with two `--form lora` adapters (vLLM's per-request classification LoRA): each
    adapter gives its confidence model's numbers, the base alone 0.5 (its `score` is zero)."""
    from elical_hf.publishing.export import export_confidence_model
    from tests.vllm_server import random_lora_model

    questions = [row["question"] for row in load_bundled_questions("nq", limit=16)]
    lora = random_lora_model()
    models = {"demo": AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32"), "random": lora}
    base = export_confidence_model(lora, tmp_path / "base", form="base")
    adapters = {"demo": exported_demo_model(str(tmp_path / "demo"), form="lora"),
                "random": export_confidence_model(lora, tmp_path / "random", form="lora")}
    server = vllm_server(base, "base", "--runner", "pooling", "--enable-lora", "--max-lora-rank", "8",
                         "--lora-modules", *(f"{name}={folder}" for name, folder in adapters.items()), eager=True)
    try:
        for name, folder in adapters.items():
            served = classify(server.url, name, export_prompt_ids(questions, folder))
            assert served == pytest.approx(models[name].confidence(questions), abs=TOLERANCE), name
        assert set(classify(server.url, "base", export_prompt_ids(questions[:2], base))) == {0.5}
    finally:
        server.stop()


def chat(port: int, question: str, stream: bool = False):
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": 24, "stream": stream}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return response.read().decode()


def test_the_gate_on_vllm_decides_and_answers_as_the_in_process_gate(export, pooling, vllm_generation):
    from elical_hf.serve.app import create_app
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.upstream import UpstreamGateEngine

    questions = [row["question"] for row in load_bundled_questions("pararel", limit=8)]
    model = AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32")
    threshold = cut(model.confidence(questions), 4)  # half answered, half abstained
    local = GateEngine(model, "gate", threshold=threshold, max_tokens=24)
    remote = UpstreamGateEngine(export, "gate", confidence_endpoint=pooling.url,
                                generation_endpoint=vllm_generation.url, threshold=threshold, max_tokens=24)
    replies = {}
    for name, engine in (("local", local), ("remote", remote)):
        with running(create_app(engine)) as port:
            replies[name] = [json.loads(chat(port, q)) for q in questions]
            if name == "remote":
                answered = next(q for q, r in zip(questions, replies[name]) if r["elical"]["decision"] == "answer")
                streamed = chat(port, answered, stream=True)
    decisions = {name: [r["elical"]["decision"] for r in rows] for name, rows in replies.items()}
    assert decisions["local"] == decisions["remote"] and set(decisions["local"]) == {"answer", "abstain"}
    for a, b in zip(replies["local"], replies["remote"]):
        assert a["elical"]["confidence"] == pytest.approx(b["elical"]["confidence"], abs=1e-4)
    texts = [(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"])
             for a, b in zip(replies["local"], replies["remote"]) if a["elical"]["decision"] == "answer"]
    print("in-process vs vLLM answers:", texts)
    assert sum(a == b for a, b in texts) >= len(texts) - 1  # greedy in float32 both; a near-tie may flip one
    events = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert events[0]["elical"]["decision"] == "answer"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]).strip()
