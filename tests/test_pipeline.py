"""The "confidence-estimation" transformers pipeline task."""

from __future__ import annotations

import pytest
import torch
from transformers import pipeline

from elical_hf import AutoModelForConfidence, ConfidenceEstimationPipeline, register_pipeline
from elical_hf.pipeline import TASK, ConfidencePipelineLoadError
from tests.hub_server import go_offline, hub  # noqa: F401 - the fixture
from tests.test_hub import embedded_tiny  # noqa: F401 - the fixture
from tests.tiny import perturbed_confidence_model


QUESTIONS = ["Who wrote Hamlet?", "What is the capital of France and of Germany?", "When was the king born?"]


@pytest.fixture(scope="module", autouse=True)
def registered():
    """`pipeline("confidence-estimation", ...)` needs the explicit registration (importing elical_hf does none)."""
    from transformers.pipelines import PIPELINE_REGISTRY

    register_pipeline()
    register_pipeline()  # idempotent
    assert PIPELINE_REGISTRY.supported_tasks[TASK]["impl"] is ConfidenceEstimationPipeline


@pytest.fixture(scope="module")
def saved_model(tiny_llama, tmp_path_factory):
    model = perturbed_confidence_model(tiny_llama)
    scores = model.confidence(QUESTIONS)
    model.confidence_config.decision_threshold = sorted(scores)[1]  # one question below, two at or above
    folder = tmp_path_factory.mktemp("pipeline-model")
    model.save_pretrained(folder)
    return str(folder), scores


def test_folder_single_and_list(saved_model):
    folder, scores = saved_model
    scorer = pipeline("confidence-estimation", model=folder, device="cpu")
    assert isinstance(scorer, ConfidenceEstimationPipeline)
    single = scorer(QUESTIONS[0])
    assert set(single) == {"confidence", "decision"} and abs(single["confidence"] - scores[0]) < 1e-6
    threshold = sorted(scores)[1]
    outputs = scorer(QUESTIONS)
    assert [o["decision"] for o in outputs] == ["answer" if s >= threshold else "abstain" for s in scores]
    batched = scorer(QUESTIONS, batch_size=3)  # padded together: same scores
    assert max(abs(o["confidence"] - s) for o, s in zip(batched, scores)) < 1e-5


def test_model_object_and_threshold(saved_model):
    folder, scores = saved_model
    model = AutoModelForConfidence.from_pretrained(folder)
    model.confidence_config.decision_threshold = None
    scorer = pipeline("confidence-estimation", model=model, device="cpu")
    assert set(scorer(QUESTIONS[0])) == {"confidence"}
    assert scorer(QUESTIONS[0], threshold=0.0)["decision"] == "answer"
    assert scorer(QUESTIONS[0], threshold=1.0)["decision"] == "abstain"
    with pytest.raises(ValueError, match="threshold"):
        scorer(QUESTIONS[0], threshold=2.0)


def test_refuses_what_is_not_a_saved_confidence_model(tiny_llama):
    with pytest.raises(ConfidencePipelineLoadError, match="not a saved confidence model"):
        pipeline("confidence-estimation", model=tiny_llama, device="cpu")
    with pytest.raises(TypeError, match="AutoModelForConfidence"):
        ConfidenceEstimationPipeline(model=torch.nn.Linear(2, 1))


def test_hub_repo(hub, tmp_path):
    from tests.test_hub import QUESTIONS as HUB_QUESTIONS, random_model, upload_base

    upload_base(tmp_path)
    model = random_model("tiny/llama", threshold=0.5)
    model.push_to_hub("alice/pipeline-model")
    scorer = pipeline("confidence-estimation", model="alice/pipeline-model", device="cpu")
    outputs = scorer(HUB_QUESTIONS)
    assert max(abs(o["confidence"] - s) for o, s in zip(outputs, model.confidence(HUB_QUESTIONS))) < 1e-6


def test_from_pretrained_without_pipeline(saved_model):
    folder, scores = saved_model
    scorer = ConfidenceEstimationPipeline.from_pretrained(folder, device="cpu", threshold=1.0)
    assert scorer.task == TASK
    outputs = scorer(QUESTIONS)
    assert max(abs(o["confidence"] - s) for o, s in zip(outputs, scores)) < 1e-6
    assert {o["decision"] for o in outputs} == {"abstain"}  # threshold= given at construction applies to every call


def test_from_pretrained_refuses_a_base_model(tiny_llama):
    with pytest.raises(ConfidencePipelineLoadError, match="not a saved confidence model"):
        ConfidenceEstimationPipeline.from_pretrained(tiny_llama, device="cpu")


def test_base_model_only_available_as_the_embedded_copy(hub, tmp_path, embedded_tiny, monkeypatch):
    """The base is an embedded default on neither the Hub nor its cache. `pipeline()` reads the base's config.json
    by name with transformers' own AutoConfig before any code of ours runs, so it cannot; our pipeline class loads
    the model first (from the offline copy), and so does `pipeline()` given a loaded model."""
    from tests.test_hub import QUESTIONS as HUB_QUESTIONS, random_model

    model = random_model("tiny/embedded", threshold=0.5)  # on neither the Hub nor its cache: the offline copy
    expected = model.confidence(HUB_QUESTIONS)
    decisions = ["answer" if s >= 0.5 else "abstain" for s in expected]
    model.save_pretrained(tmp_path / "model")
    model.push_to_hub("alice/embedded")
    for online in (True, False):
        if not online:
            go_offline(monkeypatch)  # the adapter repo from the Hub cache, the base from the offline copy
        for name in (str(tmp_path / "model"), "alice/embedded"):
            for scorer in (
                ConfidenceEstimationPipeline.from_pretrained(name, device="cpu"),
                pipeline(TASK, model=AutoModelForConfidence.from_pretrained(name), device="cpu"),
            ):
                outputs = scorer(HUB_QUESTIONS)
                assert max(abs(o["confidence"] - s) for o, s in zip(outputs, expected)) < 1e-6
                assert [o["decision"] for o in outputs] == decisions
            with pytest.raises(OSError):  # transformers cannot find the base config: not ours to change
                pipeline(TASK, model=name, device="cpu")


def test_domain_picks_the_saved_thresholds_of_that_domain(saved_model):
    folder, scores = saved_model
    model = AutoModelForConfidence.from_pretrained(folder)
    pooled = model.confidence_config.decision_threshold
    model.confidence_config.domain_thresholds = {"by": "dataset", "domains": {
        "strict": {"decision_threshold": 1.0}, "lenient": {"decision_threshold": 0.0},
        "small": {"decision_threshold": None, "fallback": "4 rows, fewer than 30"}}}
    scorer = pipeline("confidence-estimation", model=model, device="cpu")
    expected = ["answer" if s >= pooled else "abstain" for s in scores]
    assert [o["decision"] for o in scorer(QUESTIONS)] == expected
    assert [o["decision"] for o in scorer(QUESTIONS, domain="small")] == expected
    assert {o["decision"] for o in scorer(QUESTIONS, domain="strict")} == {"abstain"}
    assert {o["decision"] for o in scorer(QUESTIONS, domain="lenient")} == {"answer"}
    gated = scorer(QUESTIONS[0], domain="strict", generate=True, max_new_tokens=2)
    assert gated["decision"] == "abstain" and gated["answer"] is None
    assert scorer(QUESTIONS[0], domain="lenient", generate=True, max_new_tokens=2)["decision"] == "answer"
    with pytest.raises(ValueError, match="Unknown domain 'law'"):
        scorer(QUESTIONS, domain="law")
