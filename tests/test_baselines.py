from __future__ import annotations

import doctest
import math

import pytest

from elical_hf.signals import baselines
from elical_hf.signals.baselines import (
    BASELINES,
    compute_baselines,
    consis_lex,
    consis_sem,
    n_prob,
    parse_score,
    parse_score_robust,
    prob,
    select_demonstrations,
    verbal,
    verbal_prompt,
)


class ScriptedModel:
    """A completion function that replies from a script: the i-th distinct prompt gets `replies[i % len]`."""

    def __init__(self, replies: list[str]):
        self.replies, self.prompts = replies, []

    def __call__(self, prompts: list[str], max_new_tokens: int = 16, batch_size: int = 16, progress: bool = True):
        self.prompts += list(prompts)
        return [self.replies[i % len(self.replies)] for i in range(len(prompts))]


def record(question="q", greedy="Paris", logprobs=(-0.1, -0.2, -0.3), samples=("Paris", "Lyon"), **extra):
    return {"question": question, "greedy_response": greedy, "greedy_logprobs": list(logprobs),
            "greedy_cumulative_logprobs": sum(logprobs), "sampling_response": list(samples), **extra}


def test_doctests():
    assert doctest.testmod(baselines, raise_on_error=True).failed == 0


def test_prob_and_n_prob_exact_values():
    records = [record(logprobs=[-0.1, -0.2, -0.3]), record(logprobs=[0.0]), record(logprobs=[-math.log(2)] * 4)]
    assert prob(records) == pytest.approx([math.exp(-0.6), 1.0, 1 / 16])
    assert n_prob(records) == pytest.approx([math.exp(-0.2), 1.0, 0.5])
    # only the cumulative logprob: Prob is exact, N-Prob falls back to it
    only_sum = [{"greedy_response": "x", "greedy_cumulative_logprobs": -1.0}]
    assert prob(only_sum) == pytest.approx([math.exp(-1.0)])


def test_empty_greedy_scores_zero_and_is_counted(caplog):
    records = [record(greedy="", logprobs=[-0.01]), record(greedy="x", logprobs=[]), record(logprobs=[-0.5])]
    with caplog.at_level("WARNING"):
        assert prob(records) == pytest.approx([0.0, 0.0, math.exp(-0.5)])
        assert n_prob(records)[:2] == [0.0, 0.0]
    assert "2 of 3 records have an empty greedy answer; they score 0.0" in caplog.text


def test_prob_bad_inputs():
    with pytest.raises(ValueError, match="neither `greedy_logprobs` nor"):
        prob([{"greedy_response": "x"}])
    with pytest.raises(ValueError, match="NaN"):
        n_prob([record(logprobs=[float("nan")])])
    with pytest.raises(ValueError, match="list of records"):
        prob({"greedy_response": "x"})


def test_consis_lex_uses_and_fills_rouge():
    fresh = record(greedy="the cat sat", samples=["the cat sat", "a dog ran", "the cat sat on"])
    assert consis_lex([fresh]) == pytest.approx([(1.0 + 0.0 + 0.8571428) / 3], abs=1e-6)
    assert len(fresh["consistency_lexical"]) == 3
    stored = record(samples=["a", "b"], consistency_lexical=[0.5, 0.25])
    assert consis_lex([stored]) == [0.375]
    with pytest.raises(ValueError, match="no `sampling_response`"):
        consis_lex([record(samples=[])])


def test_consis_sem_requires_judgements_with_a_clear_error():
    assert consis_sem([record(consistency_judgement=[True, False, True, True])]) == [0.75]
    assert consis_sem([record(consistency_judgement=[1.0, 0.0])]) == [0.5]  # the normalized (float) form
    assert consis_sem([record(consistency_judgement=[None, True, False])]) == [0.5]  # unparseable verdicts left out
    assert consis_sem([record(consistency_judgement=[None, None])]) == [0.0]
    for missing in (record(), record(consistency_judgement=None), record(consistency_judgement=[])):
        with pytest.raises(ValueError, match=r"no `consistency_judgement`.*elical-hf judge"):
            consis_sem([record(consistency_judgement=[True]), missing])


@pytest.mark.parametrize(
    "reply, paper, robust",
    [
        ("0.8", 0.8, 0.8),
        ("0.8.", 0.8, 0.8),
        ("Confidence: 0.7", 0.7, 0.7),
        ("1", 1.0, 1.0),
        ("1.0", 1.0, 1.0),
        ("0", 0.0, 0.0),
        ("80%", None, 0.8),
        ("8/10", None, 0.8),
        ("4 out of 5", None, 0.8),
        ("Score: .5", None, 0.5),
        ("0.85/1", 1.0, 0.85),  # the paper's regex takes the last match: the denominator
        ("7", None, None),
        ("120%", None, None),
        ("I am not sure.", None, None),
        ("", None, None),
    ],
)
def test_score_parsers(reply, paper, robust):
    assert parse_score(reply) == paper
    assert parse_score_robust(reply) == robust


def test_verbal0_scores_and_parse_failure_rate():
    model = ScriptedModel(["0.9", "80%", "I cannot say.", "Confidence: 0.2"])
    questions = ["who wrote hamlet", "capital of france", "tallest mountain", "largest ocean"]
    scores, summary = verbal(questions, model, progress=False)
    assert scores == [0.9, 0.0, 0.0, 0.2]
    assert summary["parse_failures"] == 2 and summary["parse_failure_rate"] == 0.5
    assert summary["paper_parse_failure_rate"] == 0.5 and summary["robust_parse_failure_rate"] == 0.25
    assert summary["demonstrations"] == 0 and summary["n"] == 4
    assert model.prompts[0] == (
        "Judge whether you can provide a correct answer for the given question. Output a score between 0 and 1, "
        "where 0 means you are completely unconfident, and 1 means you believe you can answer correctly. "
        "Just give your score without any other words.\nQuestion: who wrote hamlet\nAnswer: "
    )
    robust, info = verbal(questions, ScriptedModel(["0.9", "80%", "I cannot say.", "Confidence: 0.2"]),
                          parser="robust", progress=False)
    assert robust == [0.9, 0.8, 0.0, 0.2] and info["parse_failure_rate"] == 0.25
    with pytest.raises(ValueError, match="Unknown score parser"):
        verbal(questions, model, parser="lenient")


def train_records(n=12):
    return [record(question=f"train question {i}", sampling_correctness=[i % 2 == 0, True, False, i % 3 == 0])
            for i in range(n)] + [record(question="unjudged", sampling_correctness=None)]


def test_select_demonstrations_from_train_only():
    demos = select_demonstrations(train_records(), n=10, seed=0)
    assert len(demos) == 10 and len({d["question"] for d in demos}) == 10
    assert all(d["question"].startswith("train question") for d in demos)
    assert all(d["confidence"] in (0.25, 0.5, 0.75) for d in demos)
    assert demos == select_demonstrations(train_records(), n=10, seed=0)  # seeded
    with pytest.raises(ValueError, match="Only 12 train records"):
        select_demonstrations(train_records(), n=13)


def test_verbal10_prompt_and_demonstrations_never_from_the_scored_set():
    demos = [{"question": "train q", "confidence": 0.25}, ("other train q", 1.0)]
    prompt = verbal_prompt("test q", demos)
    instruction = prompt.split("\nQuestion:")[0]
    assert prompt == (
        f"{instruction}\nQuestion: train q\n0.25\n{instruction}\nQuestion: other train q\n1.0\n"
        f"{instruction}\nQuestion: test q\nAnswer: "
    )
    model = ScriptedModel(["0.5"])
    scores, summary = verbal(["test q"], model, demos, progress=False)
    assert scores == [0.5] and summary["demonstrations"] == 2
    with pytest.raises(ValueError, match="also being scored"):
        verbal(["test q", "Train  Q"], model, demos, progress=False)  # same question after normalization
    with pytest.raises(ValueError, match="confidence in \\[0, 1\\]"):
        verbal(["test q"], model, [("train q", 1.5)], progress=False)


def test_compute_baselines_fills_confidence_fields():
    records = [record(question=f"test {i}", consistency_judgement=[True, i % 2 == 0]) for i in range(3)]
    model = ScriptedModel(["0.6"])
    summary = {}
    free_form = [name for name in BASELINES if name != "option_prob"]  # Option-Prob: tests/test_option_probability.py
    results = compute_baselines(
        records, complete=model, train_records=train_records(), which=free_form, summary=summary, progress=False
    )
    assert set(results) == set(free_form) == {"prob", "n_prob", "consis_lex", "consis_sem", "verbal0", "verbal10"}
    for name, scores in results.items():
        assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
        assert [r[f"confidence_{name}"] for r in records] == scores
    assert results["verbal0"] == [0.6] * 3 and set(summary) == {"verbal0", "verbal10"}
    assert summary["verbal10"]["demonstrations"] == 10
    assert results["consis_sem"] == [1.0, 0.5, 1.0]


def test_compute_baselines_refuses_missing_inputs():
    records = [record()]
    with pytest.raises(ValueError, match="Unknown baseline"):
        compute_baselines(records, which=["prob", "oracle"])
    with pytest.raises(ValueError, match="verbal0 needs the answering model"):
        compute_baselines(records, which=["verbal0"])
    with pytest.raises(ValueError, match="train_records"):
        compute_baselines(records, complete=ScriptedModel(["1"]), which=["verbal10"])
    with pytest.raises(ValueError, match="also being scored"):  # train records that are the test records
        compute_baselines(train_records(), complete=ScriptedModel(["1"]), train_records=train_records(),
                          which=["verbal10"], progress=False)


def test_prob_reads_the_official_nested_form():
    official = {"greedy_response": ["Paris"], "greedy_logprobs": [[-0.5, -0.5]], "greedy_cumulative_logprobs": [-1.0]}
    assert prob([official]) == pytest.approx([math.exp(-1.0)])
    assert n_prob([official]) == pytest.approx([math.exp(-0.5)])
