from __future__ import annotations

import doctest

import pytest

from elical_hf.signals import llm_judge
from elical_hf.signals.llm_judge import (
    call_completion,
    consistency_prompt,
    correctness_prompt,
    llm_consistency,
    llm_correctness,
    parse_verdict,
    says_certain,
)


class ScriptedJudge:
    """A completion function with scripted replies: `rules` maps a substring of the prompt to the reply."""

    def __init__(self, rules: dict[str, str] | None = None, default: str = "certain"):
        self.rules, self.default, self.calls = rules or {}, default, []

    def __call__(self, prompts: list[str], max_new_tokens: int = 16, batch_size: int = 16, progress: bool = True):
        self.calls.append({"prompts": list(prompts), "batch_size": batch_size, "max_new_tokens": max_new_tokens})
        return [next((reply for key, reply in self.rules.items() if key in p), self.default) for p in prompts]


@pytest.mark.parametrize(
    "reply, paper, strict",
    [
        ("certain", True, True),
        ("Certain.", True, True),
        ("CERTAIN", True, True),
        ("uncertain", False, False),
        ('"Uncertain"', False, False),
        ("No.", False, None),
        ("no answer", False, None),
        ("Sorry, I cannot judge.", False, None),
        ("I apologize", False, None),
        ("Apologies!", False, None),
        ("False", False, None),
        ("unsure", False, None),
        ("Unknown", False, None),
        ("It does not provide enough information", False, None),
        ("no-one knows", False, None),  # punctuation separates words
        # "_" is punctuation in the reference rule (a `\b` regex would see one word and miss these three)
        ("no_answer", False, None),
        ("uncertain_", False, False),
        ("certain_no", False, False),
        # a combining tilde belongs to its word: "no" + U+0303 is not "no" (a `\b` regex would stop before the mark)
        ("no\u0303", True, None),
        ("No\u0303 sé", True, None),
        # "no" never matches inside another word, and "not" is not a negative word (paper rule)
        ("I know the answer", True, None),
        ("Nothing to add", True, None),
        ("Nobel prize", True, None),
        ("The answers are not equivalent", True, None),
        ("not certain", True, False),  # strict mode reads a negated "certain" as negative
        ("I can't be certain", True, False),
        ("I can\u2019t be certain", True, False),
        ("Never certain", True, False),
        ("It isn\u2019t quite certain", True, False),
        ("not_certain", True, False),
        ("I am certain, not unsure at all", False, False),  # "unsure" is in the list
        ("certain, no other words", False, False),  # the paper's list still applies in strict mode
        ("The two answers are semantically equivalent.", True, None),
        ("", True, None),  # no negative word -> positive under the paper's rule
        (None, False, None),  # a missing reply is negative (reference code), unparseable in strict mode
    ],
)
def test_parse_verdict_table(reply, paper, strict):
    assert parse_verdict(reply) is paper
    assert parse_verdict(reply, strict=True) is strict


def test_default_rule_is_the_reference_has_answer_on_negative_phrases():
    """The reference's `deal_judge_new(reply)` is `has_answer(NEGATIVE_PHRASES, reply)`: the same rule, two paths."""
    from elical_hf.signals.lexical_judge import has_answer
    from elical_hf.signals.llm_judge import NEGATIVE_PHRASES

    replies = ["certain", "uncertain_", "no_answer", "no\u0303", "I can't answer", "does not contain it", "NOT provided",
               "did not provide one", "unknown.", "knowing", "Certainly!", "an apology", "Apologies", "c-a-n-n-o-t"]
    for reply in replies:
        assert parse_verdict(reply) is not has_answer(reply, NEGATIVE_PHRASES), reply


def test_says_certain():
    assert says_certain("Certain") and says_certain("uncertain.") and not says_certain("Yes") and not says_certain(None)
    assert says_certain("certain_") and not says_certain("Certainly") and not says_certain("uncertainty")


def test_doctests():
    assert doctest.testmod(llm_judge, raise_on_error=True).failed == 0


def test_prompts_are_the_papers_text():
    assert correctness_prompt("who wrote hamlet", ["William Shakespeare", "Shakespeare"], "Dickens") == (
        "We are assessing the quality of answers to the following question: who wrote hamlet.\n"
        "The expected answers to this question are: ['William Shakespeare', 'Shakespeare'].\n"
        "Within the context of the question, dose the generated answer mean the same as any of the expected answers?\n"
        "The generated answer is: Dickens.\n"
        'If the answer is correct, say "certain". If not, please say "uncertain". '
        "Just give your judgement without any other words."
    )
    assert consistency_prompt("who wrote hamlet", "Shakespeare", "Dickens") == (
        "Are the following two answers to the same question semantically equivalent?\n"
        'If the two answers are semantically equivalent, answer "certain". Otherwise, answer "uncertain". '
        'Given ONLY the judgement ("certain" or "uncertain"), no other words or explanation.\n'
        "Question: who wrote hamlet\nAnswer: Shakespeare\n\nQuestion: who wrote hamlet\nAnswer: Dickens"
    )


def make_records():
    return [
        {
            "question": "who wrote hamlet",
            "answer": ["William Shakespeare", "Shakespeare"],
            "greedy_response": "Shakespeare",
            "sampling_response": ["Shakespeare", "Dickens", "Marlowe"],
        },
        {"question": "capital of france", "answer": ["Paris"], "greedy_response": ["Paris"],  # list form
         "sampling_response": ["Paris", "Lyon"]},
        {"question": "no gold", "answer": [], "greedy_response": "x", "sampling_response": ["y"]},
        {"question": "blank gold", "answer": ["", " "], "greedy_response": "x", "sampling_response": ["y"]},
        {"question": "missing gold", "greedy_response": "x", "sampling_response": ["y"]},
    ]


def test_llm_correctness_fills_fields_batches_once_and_skips_records_without_answers():
    judge = ScriptedJudge(
        {"generated answer is: Dickens.": "uncertain", "generated answer is: Marlowe.": "Sorry, no.",
         "generated answer is: Lyon.": "Uncertain"},
        default="Certain",
    )
    records = make_records()
    summary = llm_correctness(records, judge, batch_size=7, progress=False, judge_model="judge-x")
    assert summary == {"judged": 2, "calls": 5, "unparseable": 0, "never_certain": 1, "without_answer": 3}
    assert len(judge.calls) == 1  # every prompt of every record in one call ...
    assert len(judge.calls[0]["prompts"]) == 5  # ... identical prompts once (Shakespeare twice, Paris twice)
    assert judge.calls[0]["batch_size"] == 7
    assert records[0]["greedy_correctness"] is True
    assert records[0]["sampling_correctness"] == [True, False, False]
    assert records[1]["greedy_correctness"] is True and records[1]["sampling_correctness"] == [True, False]
    assert records[0]["correctness_judge"] == "judge-x"
    for record in records[2:]:
        assert record["greedy_correctness"] is None and record["sampling_correctness"] is None
        assert "correctness_judge" not in record
    assert any("['William Shakespeare', 'Shakespeare']" in p for p in judge.calls[0]["prompts"])


def test_judge_that_never_says_certain_is_counted_not_fatal():
    judge = ScriptedJudge(default="The two answers look the same to me.")
    records = make_records()[:2]
    summary = llm_consistency(records, judge, progress=False)
    assert summary == {"judged": 2, "calls": 5, "unparseable": 0, "never_certain": 5, "without_samples": 0}
    assert records[0]["consistency_judgement"] == [True, True, True]  # paper rule: no negative word -> positive
    strict = llm_consistency(records, judge, progress=False, strict=True)
    assert strict["unparseable"] == strict["never_certain"] == 5
    assert records[0]["consistency_judgement"] == [None, None, None]


def test_llm_consistency_prompts_verdicts_and_judge_name():
    judge = ScriptedJudge({"Answer: Dickens": "uncertain", "Answer: Lyon": "uncertain"})
    records = make_records()[:2] + [{"question": "q", "greedy_response": "a", "sampling_response": []}, {"question": "r"}]
    summary = llm_consistency(records, judge, progress=False, judge_model="HuggingFaceTB/SmolLM2-135M-Instruct")
    assert summary["judged"] == 2 and summary["without_samples"] == 2
    assert records[0]["consistency_judgement"] == [True, False, True]
    assert records[1]["consistency_judgement"] == [True, False]
    assert records[0]["consistency_judge"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert records[2]["consistency_judgement"] is None and records[3]["consistency_judgement"] is None
    assert consistency_prompt("capital of france", "Paris", "Lyon") in judge.calls[0]["prompts"]


def test_call_completion_passes_only_accepted_options_and_checks_lengths():
    seen = {}

    def plain(prompts):
        return [p.upper() for p in prompts]

    def flexible(prompts, **kwargs):
        seen.update(kwargs)
        return list(prompts)

    assert call_completion(plain, ["a", "b", "a"], batch_size=3, progress=False) == ["A", "B", "A"]
    assert call_completion(flexible, ["x"], batch_size=3) == ["x"] and seen == {"batch_size": 3}
    assert call_completion(plain, []) == []
    with pytest.raises(ValueError, match="returned 1 replies for 2 prompts"):
        call_completion(lambda prompts: ["only one"], ["a", "b"])
