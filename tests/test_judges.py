import doctest
import logging

import pytest

from elical_hf.signals import lexical_judge
from elical_hf.signals.lexical_judge import (
    CORRECTNESS_JUDGES,
    exact_match,
    has_answer,
    has_answer_squad,
    judge_correctness,
    lexical_consistency,
    normalize_answer,
    reference_tokens,
    rouge_l,
    token_f1,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   Apple a day! ", "apple day"),
        ("Denver Broncos.", "denver broncos"),
        ("Theory of the U.S.", "theory of us"),  # articles only as whole words; dots removed
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("rule", [has_answer, has_answer_squad])
def test_both_has_answer_rules_match_whole_tokens(rule):
    assert rule("It was written by William Shakespeare.", ["Shakespeare", "W. Shakespeare"])
    assert rule("The capital is PARIS, of course", ["paris"])
    assert rule("Santa Clara, California", ["Santa Clara"])
    assert not rule("Parisian cafes", ["Paris"])  # substring inside a word does not count
    assert not rule("Clara Santa", ["Santa Clara"])  # the alias's tokens in order
    assert not rule("London", ["Paris", "", "  "])
    assert not rule("anything", ["", "the", "A", "..."])  # aliases that normalize to nothing are ignored
    assert not rule("anything", [])
    assert rule("the answer is 1945", "1945")  # a single alias string


@pytest.mark.parametrize(
    "prediction, alias, reference, squad",
    [
        # punctuation becomes a space in the reference rule, and is deleted in the SQuAD one
        ("Paris-based artist", "Paris", True, False),
        ("a co-founder of X", "founder", True, False),
        ("U.S.A.", "USA", False, True),
        ("1,000 people", "1000", False, True),
        ("She was born in 1,000 BC", "1,000", True, True),
        # the reference tokenizer also splits at non-ASCII symbols (an en dash), which SQuAD keeps inside the word
        ("Paris\u2013based", "Paris", True, False),
        # NFD first: a composed and a decomposed "é" are the same token there, not under SQuAD normalization
        ("caf\u00e9 society", "cafe\u0301", True, False),
        ("cafe society", "caf\u00e9", False, False),  # the accent stays part of the token
        # articles are removed from both sides in both rules
        ("The Beatles", "Beatles", True, True),
        ("Beatles", "The Beatles", True, True),
    ],
)
def test_reference_and_squad_rules_differ_on_punctuation(prediction, alias, reference, squad):
    assert has_answer(prediction, [alias]) is reference
    assert has_answer_squad(prediction, [alias]) is squad


def test_reference_tokens():
    assert reference_tokens("The Paris-based co-founder, U.S.A.") == ["paris", "based", "co", "founder", "u", "s"]
    assert reference_tokens("no_answer!") == ["no", "answer"]  # "_" is punctuation too
    assert reference_tokens("Paris\u2013based") == ["paris", "\u2013", "based"]
    assert reference_tokens("a\u200bb") == ["b"]  # a zero-width space (format char) separates tokens; "a" removed
    assert reference_tokens("The a an") == [] and reference_tokens("") == []


def test_judge_correctness_skips_article_aliases_with_one_counted_warning(caplog):
    data = [
        {"answer": ["The", "Paris"], "greedy_response": "London", "sampling_response": ["Paris", "Lyon"]},
        {"answer": ["a", "An", "..."], "greedy_response": "London", "sampling_response": ["x"]},
        {"answer": ["Rome"], "greedy_response": "Rome", "sampling_response": []},
    ]
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.lexical_judge"):
        summary = judge_correctness(data)
    assert summary == {"judged": 2, "without_answer": 1, "skipped_aliases": 4}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "skipped 4 gold alias(es)" in warnings[0].getMessage()
    assert "'The'" in warnings[0].getMessage()
    # "The" would match everything in the reference code; skipped, "London" is wrong and "Lyon" too
    assert data[0]["greedy_correctness"] is False and data[0]["sampling_correctness"] == [True, False]
    assert data[1]["greedy_correctness"] is None and data[2]["greedy_correctness"] is True
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.lexical_judge"):
        assert judge_correctness(data[2:])["skipped_aliases"] == 0
    assert not caplog.records


def test_exact_match_squad_examples():
    # SQuAD v1.1 dev: "Which NFL team represented the AFC at Super Bowl 50?"
    gold = ["Denver Broncos", "Denver Broncos", "Denver Broncos"]
    assert exact_match("the Denver Broncos", gold)
    assert exact_match("Denver Broncos!", gold)
    assert not exact_match("Denver Broncos football team", gold)
    assert not exact_match("", ["", "the"])


def test_token_f1_squad_examples():
    assert token_f1("Denver Broncos", ["Denver Broncos"]) == 1.0
    # precision 2/4, recall 2/2 -> F1 2/3
    assert token_f1("the Denver Broncos football team", ["Denver Broncos"]) == pytest.approx(2 / 3)
    # max over aliases
    assert token_f1("Santa Clara", ["Levi's Stadium", "Santa Clara, California"]) == pytest.approx(0.8)
    assert token_f1("Carolina Panthers", ["Denver Broncos"]) == 0.0
    assert token_f1("Denver", []) == 0.0
    assert token_f1("Denver Denver", ["Denver"]) == pytest.approx(2 / 3)  # counts, not sets


def test_rouge_l():
    assert rouge_l("the cat sat", "the cat sat on") == pytest.approx(6 / 7)  # LCS 3, P 3/4, R 1
    assert rouge_l("Paris", "paris!") == 1.0
    assert rouge_l("a b c", "c b a") == pytest.approx(1 / 3)
    assert rouge_l("x y", "z") == 0.0
    assert rouge_l("", "") == 1.0
    assert rouge_l("  ", "") == 1.0
    assert rouge_l("", "Paris") == 0.0 and rouge_l("Paris", "") == 0.0
    assert rouge_l("北京", "北京") == 1.0 and rouge_l("北京", "上海") == 0.0
    assert rouge_l("a b", "b a c") == rouge_l("b a c", "a b")


def records():
    return [
        {
            "question": "who wrote hamlet",
            "answer": ["William Shakespeare", "Shakespeare"],
            "greedy_response": "Hamlet was written by Shakespeare.",
            "sampling_response": ["Shakespeare", "Christopher Marlowe", "william shakespeare"],
        },
        {
            "question": "capital of france",
            "answer": ["Paris"],
            "greedy_response": ["Paris"],  # HonestyBench stores the greedy response as a one-element list
            "sampling_response": ["paris", "The capital of France is Paris", "Lyon"],
        },
        {"question": "no gold", "answer": [], "greedy_response": "x", "sampling_response": ["y"]},
        {"question": "empty aliases", "answer": [""], "greedy_response": "x", "sampling_response": ["y"]},
    ]


@pytest.mark.parametrize(
    "method, greedy, samples",
    [
        ("has_answer", [True, True], [[True, False, True], [True, True, False]]),
        ("has_answer_squad", [True, True], [[True, False, True], [True, True, False]]),
        ("exact_match", [False, True], [[True, False, True], [True, False, False]]),
        ("f1", [False, True], [[True, False, True], [True, False, False]]),
    ],
)
def test_judge_correctness(method, greedy, samples):
    data = records()
    summary = judge_correctness(data, method=method)
    assert summary == {"judged": 2, "without_answer": 2, "skipped_aliases": 1}  # the blank alias ""
    assert data[0]["correctness_judge"] == ("f1@0.5" if method == "f1" else method)
    assert [r["greedy_correctness"] for r in data[:2]] == greedy
    assert [r["sampling_correctness"] for r in data[:2]] == samples
    assert all(type(v) is bool for r in data[:2] for v in [r["greedy_correctness"], *r["sampling_correctness"]])
    assert data[2]["greedy_correctness"] is None and data[2]["sampling_correctness"] is None


def test_judge_correctness_f1_threshold_and_errors():
    data = records()
    judge_correctness(data, method="f1", f1_threshold=0.3)
    # "Hamlet was written by Shakespeare" vs "Shakespeare": P 1/5, R 1 -> F1 1/3 >= 0.3
    assert data[0]["greedy_correctness"] is True
    with pytest.raises(ValueError, match="exact_match.*f1.*has_answer.*has_answer_squad"):
        judge_correctness(records(), method="llm")
    assert set(CORRECTNESS_JUDGES) == {"has_answer", "has_answer_squad", "exact_match", "f1"}


def test_judge_correctness_keeps_existing_labels_without_answers():
    data = [{"answer": None, "greedy_response": "x", "greedy_correctness": 1, "sampling_correctness": [0]}]
    assert judge_correctness(data) == {"judged": 0, "without_answer": 1, "skipped_aliases": 0}
    assert data[0]["greedy_correctness"] == 1 and data[0]["sampling_correctness"] == [0]


def test_lexical_consistency():
    data = records()
    assert lexical_consistency(data) is data
    assert data[1]["consistency_lexical"] == pytest.approx([1.0, 2 / 7, 0.0])  # "Paris" vs 6 tokens: P 1, R 1/6
    assert data[0]["consistency_lexical"][0] == pytest.approx(2 * (1 / 5) / (1 + 1 / 5))
    assert len(data[2]["consistency_lexical"]) == 1


def test_docstring_examples():
    result = doctest.testmod(lexical_judge, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
