"""Consis-Lex as the paper's reference code scores it (`honesty_alignment/eval.py` uses the `rouge` package),
re-implemented in `elical_hf.signals.lexical_judge.rouge_l_reference`, and the `lexical_scoring` option that selects
it."""

from __future__ import annotations

import json

import pytest

from elical_hf.signals.baselines import compute_baselines, consis_lex
from elical_hf.signals.judging import apply_judges
from elical_hf.signals.lexical_judge import LEXICAL_SCORINGS, lexical_judgement, rouge_l, rouge_l_reference


# (hypothesis, reference, F). Expected values computed by running the real package (PyPI `rouge` 1.0.1, pltrdy/rouge)
# in a throwaway venv: `Rouge().get_scores(hypothesis, reference)[0]["rouge-l"]["f"]`. The same implementation also
# matched the package on 3,000 random pairs (case, punctuation, dots, tabs, newlines, non-ASCII) to 1e-12 when written.
PACKAGE_CASES = [
    ("paris", "The capital is Paris.", 0.0),
    ("the the the cat", "the cat", 0.999999995),
    ("the cat sat", "the cat sat on", 0.8571428522448981),
    ("Paris.", "Paris", 0.999999995),
    ("Paris, France", "Paris", 0.0),
    ("Paris. ", "Paris", 0.6666666622222223),  # the piece " " is a sentence whose one word is ""
    ("The Cat", "the cat", 0.0),
    ("It is Paris. The capital of France is Paris.", "Paris is the capital.", 0.36363635900826446),
    ("3.5 million people", "about 3.5 million", 0.749999995),
    ("Paris. Paris.", "Paris", 0.999999995),
    ("Zürich", "zürich", 0.0),
    ("東京", "東京", 0.999999995),
    ("b a", "a b. b", 0.4999999950000001),  # not symmetric: the LCS picked depends on the order
    ("a b. b", "b a", 0.999999995),
    ("William Shakespeare wrote Hamlet around 1600.", "Hamlet was written by Shakespeare.", 0.18181817685950424),
    ("Cat It.3\nCat.a.", "it  million, of\nparis million cat .It\tthe..3.Paris.", 0.2857142816326531),
    ("cat Cat\tmat..Zürich capital is The..the  on 3  The", "a..Cat. cat  cat\tParis,.a The\nof 東京",
     0.3529411716262976),
    ("capital  paris.3..on\tmat It on.5. Cat..of\ton 3. ", "5. it.capital\tparis million of France million. sat  3.",
     0.5263157844875347),
    (" ", " ", 0.999999995),
    (" ", "a", 0.0),
]


@pytest.mark.parametrize("hypothesis, reference, expected", PACKAGE_CASES)
def test_rouge_l_reference_equals_the_rouge_package(hypothesis, reference, expected):
    assert rouge_l_reference(hypothesis, reference) == pytest.approx(expected, abs=1e-12)


def test_the_two_scorings_differ_where_the_issue_says():
    assert rouge_l("The capital is Paris.", "paris") == pytest.approx(0.4)
    assert rouge_l("the cat", "the the the cat") == pytest.approx(2 / 3)
    assert rouge_l_reference("paris", "The capital is Paris.") == 0.0
    assert rouge_l_reference("the the the cat", "the cat") == pytest.approx(1.0, abs=1e-8)


def test_texts_without_a_sentence_score_like_rouge_l():
    # the package raises ("Hypothesis is empty.") for these; we score them as `rouge_l` does empty texts
    assert [rouge_l_reference(h, r) for h, r in (("", "a"), ("...", "a"), ("a", ""), ("", "..."))] == [0, 0, 0, 1]


def _record(greedy: str, samples: list[str]) -> dict:
    return {"question": "q", "answer": ["Paris"], "greedy_response": [greedy], "sampling_response": samples}


def test_consis_lex_scores_each_sample_as_the_hypothesis_against_the_greedy_answer():
    records = [_record("a b. b", ["b a", "a b. b"]), _record("The capital is Paris.", ["paris", "Paris"])]
    default = consis_lex(records)
    reference = consis_lex(records, scoring="reference")
    assert reference == pytest.approx([(0.4999999950000001 + 0.999999995) / 2, (0.0 + 0.4) / 2], abs=1e-8)
    assert default != pytest.approx(reference)
    assert records[1]["consistency_lexical"] == pytest.approx([0.4, 0.4])  # the field keeps rouge_score's numbers
    scores = compute_baselines(records, which=["consis_lex"], lexical_scoring="reference")
    assert scores["consis_lex"] == pytest.approx(reference)
    with pytest.raises(ValueError, match="lexical scoring"):
        consis_lex(records, scoring="rouge")


def test_lexical_judge_verdicts_under_the_reference_scoring():
    records = [_record("The capital is Paris.", ["paris", "The capital is Paris."])]
    assert lexical_judgement(records, threshold=0.3) == {"judged": 1, "without_samples": 0}
    assert records[0]["consistency_judgement"] == [True, True]
    assert records[0]["consistency_judge"] == "lexical:rougeL@0.3"
    apply_judges(records, consistency="lexical", lexical_threshold=0.3, lexical_scoring="reference")
    assert records[0]["consistency_judgement"] == [False, True]
    assert records[0]["consistency_judge"] == "lexical:rougeL-reference@0.3"
    assert records[0]["consistency_lexical"] == pytest.approx([0.4, 1.0])


def test_judge_and_baselines_commands_take_the_lexical_scoring(tmp_path):
    from elical_hf.cli import baselines as baselines_cli, judge as judge_cli, main as cli_main

    for parser in (judge_cli.make_parser(), baselines_cli.make_parser()):
        (action,) = [a for a in parser._actions if a.dest == "lexical_scoring"]
        assert tuple(action.choices) == LEXICAL_SCORINGS and action.default == "rouge_score"
    source = tmp_path / "records.jsonl"
    source.write_text(json.dumps({**_record("The capital is Paris.", ["paris"]), "id": "1", "dataset": "nq"}) + "\n")
    out = tmp_path / "judged.jsonl"
    assert cli_main(["judge", "--records", str(source), "--output", str(out), "--consistency", "lexical",
                     "--lexical_threshold", "0.3", "--lexical_scoring", "reference"]) == 0
    judged = json.loads(out.read_text().splitlines()[0])
    assert judged["consistency_judgement"] == [False] and judged["consistency_judge"] == "lexical:rougeL-reference@0.3"
