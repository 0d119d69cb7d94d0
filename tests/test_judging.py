"""`apply_judges`: the one dispatch of the judges by name (CLI `judge`, the demo, reproduce_paper)."""

from __future__ import annotations

import copy

import pytest

from elical_hf.signals import judge_correctness, lexical_consistency, lexical_judgement
from elical_hf.signals.judging import apply_judges, resolve_consistency_judge
from elical_hf.signals.llm_judge import judge_with_llm


RECORDS = [
    {"question": "who wrote hamlet", "answer": ["William Shakespeare", "Shakespeare"],
     "greedy_response": "It was Shakespeare.", "sampling_response": ["Shakespeare", "Charles Dickens"]},
    {"question": "capital of france", "answer": ["Paris"], "greedy_response": "Lyon",
     "sampling_response": ["Paris", "Lyon"]},
    {"question": "unanswerable", "answer": [], "greedy_response": "x", "sampling_response": []},
]


def test_apply_judges_is_the_judges_themselves():
    by_name, by_hand = copy.deepcopy(RECORDS), copy.deepcopy(RECORDS)
    summaries = apply_judges(by_name, correctness="f1", consistency="lexical", f1_threshold=0.4, lexical_threshold=0.3)
    expected = {"correctness": judge_correctness(by_hand, "f1", 0.4), "consistency": lexical_judgement(by_hand, 0.3)}
    assert summaries == expected
    assert by_name == by_hand
    assert by_name[0]["consistency_judge"] == "lexical:rougeL@0.3" and by_name[0]["correctness_judge"] == "f1@0.4"


def test_llm_consistency_with_lexical_scores_and_a_scripted_judge():
    records = copy.deepcopy(RECORDS)
    calls = []

    def complete(prompts):
        calls.append(len(prompts))
        return ["uncertain" if "Charles Dickens" in p else "certain" for p in prompts]

    summaries = apply_judges(records, consistency="llm", complete=complete, judge_model="judge-x", lexical_scores=True)
    assert calls == [4] and summaries["consistency"]["judged"] == 2
    assert summaries["consistency"]["without_samples"] == 1
    assert records[0]["consistency_judgement"] == [True, False]
    assert records[0]["consistency_judge"] == "judge-x"
    assert records[0]["consistency_lexical"] == lexical_consistency(copy.deepcopy(RECORDS))[0]["consistency_lexical"]
    assert "correctness_judge" not in records[0]


def test_auto_falls_back_to_the_lexical_judge_without_the_embedding_model(monkeypatch, caplog):
    from elical_hf.signals import embedding_judge
    from elical_hf.steps import JudgeArguments, judge

    def missing():
        raise OSError("The bundled all-MiniLM-L6-v2 model is missing.")

    monkeypatch.setattr(embedding_judge, "default_model_path", missing)
    assert resolve_consistency_judge("auto") == "lexical" and "Falling back" in caplog.text
    assert resolve_consistency_judge("embedding") == "embedding"
    records = judge(JudgeArguments(records=copy.deepcopy(RECORDS), consistency="auto", lexical_scores=True)).records
    assert records[1]["consistency_judge"] == "lexical:rougeL@0.5"
    assert records[1]["consistency_judgement"] == [0.0, 1.0] and len(records[1]["consistency_lexical"]) == 2


def test_unknown_judges_are_refused():
    with pytest.raises(ValueError, match="Unknown correctness judge 'gpt'"):
        apply_judges(copy.deepcopy(RECORDS), correctness="gpt")
    with pytest.raises(ValueError, match="Unknown consistency judge 'rouge'"):
        apply_judges(copy.deepcopy(RECORDS), consistency="rouge")
    with pytest.raises(ValueError, match="Unknown LLM judge 'style'"):
        judge_with_llm(copy.deepcopy(RECORDS), lambda prompts: ["certain"] * len(prompts), "style")
