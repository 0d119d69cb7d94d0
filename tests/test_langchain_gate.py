"""`elical_hf.integrations.langchain.ConfidenceGate` with the real langchain-core: it answers, retrieves (through a
real LangChain retriever) and abstains as `model.answer` does, batches in one call, routes abstentions, and composes
in chains."""

from __future__ import annotations

import pytest
import torch

from elical_hf import AutoModelForConfidence
from tests.conftest import save_tiny_base
from tests.serving import cut, gated_model


pytest.importorskip("langchain_core")

from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from langchain_core.language_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from elical_hf.integrations.langchain import ConfidenceGate, question_of  # noqa: E402


pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
             "when was the king born", "who was the first president", "what is the largest river in the world"]
NOTES = ["william shakespeare wrote hamlet .", "paris is the capital of france .", "the nile is a river ."]
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A gate model (2 answered, 2 in the retrieve band, 2 abstained), a real in-memory vector-store retriever over
    three notes, and what `model.answer` gives with that retriever."""
    root = tmp_path_factory.mktemp("lc")
    base = save_tiny_base(root / "base", "llama", seed=3, initializer_range=0.2)
    confidences = gated_model(base, root / "model", QUESTIONS, answered=2)
    model = AutoModelForConfidence.from_pretrained(root / "model", dtype=torch.float32)
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_texts(NOTES)
    retriever = store.as_retriever(search_kwargs={"k": 1})
    band = cut(confidences, 4)

    def retrieve(question: str) -> str:
        return retriever.invoke(question)[0].page_content

    expected = model.answer(QUESTIONS, retrieve_threshold=band, retrieve=retrieve, max_new_tokens=MAX_TOKENS)
    return model, retriever, band, expected


def test_it_answers_retrieves_and_abstains_as_model_answer(setup):
    model, retriever, band, expected = setup
    gate = ConfidenceGate(model, retriever=retriever, retrieve_threshold=band, max_new_tokens=MAX_TOKENS)
    assert [r["decision"] for r in expected].count("retrieve") == 2
    for question, want in zip(QUESTIONS, expected):
        message = gate.invoke(question)
        assert isinstance(message, AIMessage)
        meta = message.response_metadata
        assert meta["elical"]["decision"] == want["decision"]
        assert meta["elical"]["confidence"] == pytest.approx(want["confidence"], abs=1e-6)
        assert meta["elical"]["context"] == want["context"]
        if want["decision"] == "retrieve":
            assert want["context"] in NOTES  # the vector store's document
        if want["answer"] is None:
            assert (message.content, meta["finish_reason"]) == (gate.abstain_message, "abstain")
        else:
            assert message.content == want["answer"] and meta["finish_reason"] in ("stop", "length")


def test_batch_is_one_model_answer_call(setup, monkeypatch):
    model, retriever, band, expected = setup
    calls = []
    answer = model.answer
    monkeypatch.setattr(model, "answer", lambda questions, **kw: calls.append(len(questions)) or answer(questions, **kw))
    gate = ConfidenceGate(model, retriever=retriever, retrieve_threshold=band, max_new_tokens=MAX_TOKENS)
    replies = gate.batch(QUESTIONS)
    assert calls == [len(QUESTIONS)]
    assert [r.content for r in replies] == [w["answer"] or gate.abstain_message for w in expected]


def test_abstentions_go_to_the_abstain_runnable(setup):
    model, _, _, expected = setup
    fallback = FakeListChatModel(responses=["a bigger model answers"] * 8)
    gate = ConfidenceGate(model, abstain=fallback, max_new_tokens=MAX_TOKENS)
    for question, want in zip(QUESTIONS, expected):
        message = gate.invoke(question)
        if want["decision"] == "answer":
            assert message.content == want["answer"] and not message.response_metadata["elical"]["routed"]
        else:  # without a retriever the retrieve band has no answer either: routed too
            assert message.content == "a bigger model answers"
            assert message.response_metadata["elical"]["routed"] and not message.response_metadata["elical"]["answered"]


def test_it_composes_in_chains_and_reads_the_usual_inputs(setup):
    model, _, _, expected = setup
    gate = ConfidenceGate(model, threshold=0.0, max_new_tokens=MAX_TOKENS)  # answers everything
    chain = RunnableLambda(lambda row: {"question": row["q"]}) | gate | StrOutputParser()
    assert chain.invoke({"q": QUESTIONS[0]}) == model.answer([QUESTIONS[0]], threshold=0.0,
                                                             max_new_tokens=MAX_TOKENS)[0]["answer"]
    prompt = ChatPromptTemplate.from_messages([("human", "{question}")])
    assert (prompt | gate).invoke({"question": QUESTIONS[1]}).content == gate.invoke(QUESTIONS[1]).content
    assert question_of(HumanMessage(QUESTIONS[2])) == question_of({"input": QUESTIONS[2]}) == QUESTIONS[2]
    # a system prompt and earlier turns are left out (chat_context "question"), as `elical-hf serve` does
    asked = gate.invoke([SystemMessage("be brief"), HumanMessage("hi"), AIMessage("Hello!"), HumanMessage(QUESTIONS[1])])
    assert asked.content == gate.invoke(QUESTIONS[1]).content
    with pytest.raises(ValueError, match="last message asks: it must be a human message"):
        gate.invoke([HumanMessage(QUESTIONS[0]), AIMessage("Shakespeare")])
    assert question_of([SystemMessage("be brief"), HumanMessage(QUESTIONS[0])]) == QUESTIONS[0]
    with pytest.raises(ValueError, match="single human message, got \\['SystemMessage', 'HumanMessage'\\]"):
        question_of([SystemMessage("be brief"), HumanMessage(QUESTIONS[0])], chat_context="refuse")
    with pytest.raises(ValueError, match="non-empty question"):
        gate.invoke("   ")
    with pytest.raises(ValueError, match="'question'"):
        gate.invoke({"query": QUESTIONS[0]})
    with pytest.raises(ValueError, match="must be a LangChain Runnable"):
        ConfidenceGate(model, retriever=lambda q: q)


def test_domain_gates_with_that_domains_saved_thresholds(setup):
    """`domain=` (and a dict input's `domain` key) gate with the thresholds the model saved for that domain, as
    `model.answer(domain=)` does; an unknown domain is refused at construction, or as that input's error."""
    model, _, _, expected = setup
    config = model.confidence_config
    saved = config.decision_threshold, config.retrieve_threshold, config.domain_thresholds
    config.retrieve_threshold = None
    config.domain_thresholds = {"by": "dataset", "min_rows": 30, "domains": {
        "strict": {"decision_threshold": 1.0}, "lenient": {"decision_threshold": 0.0},
        "small": {"decision_threshold": None, "fallback": "5 rows, fewer than 30"}}}
    try:
        strict = ConfidenceGate(model, domain="strict", max_new_tokens=MAX_TOKENS)
        replies = strict.batch([QUESTIONS[0], {"question": QUESTIONS[1], "domain": "lenient"},
                                {"question": QUESTIONS[2], "domain": None}, {"question": QUESTIONS[3],
                                                                             "domain": "small"},
                                {"question": QUESTIONS[4], "domain": "law"}], return_exceptions=True)
        meta = [reply.response_metadata["elical"] for reply in replies[:4]]
        assert [(m["domain"], m["threshold"]) for m in meta] == [
            ("strict", 1.0), ("lenient", 0.0), (None, saved[0]), ("small", saved[0])]
        assert meta[0]["decision"] == "abstain" and replies[0].content == strict.abstain_message
        assert meta[1]["decision"] == "answer"
        assert replies[1].content == model.answer(QUESTIONS[1], domain="lenient", max_new_tokens=MAX_TOKENS)[0][
            "answer"]
        for i in (2, 3):  # the pooled threshold: the decisions of the plain gate
            assert meta[i]["decision"] == ("answer" if expected[i]["confidence"] >= saved[0] else "abstain")
        assert isinstance(replies[4], ValueError) and "Unknown domain 'law'" in str(replies[4])
        with pytest.raises(ValueError, match="Unknown domain 'law'"):
            ConfidenceGate(model, domain="law")
    finally:
        config.decision_threshold, config.retrieve_threshold, config.domain_thresholds = saved
