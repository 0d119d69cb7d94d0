"""Option-Prob (`elical_hf.signals.option_probability`): the probability the answering model puts on the option letters
of a multiple-choice question, from its pure maths to a tiny model's forward pass, and the records it refuses."""

from __future__ import annotations

import doctest
import json
import math

import pytest
import torch
from tokenizers import AddedToken

from elical_hf import steps
from elical_hf.cli import main as cli_main
from elical_hf.settings.multiple_choice import format_question
from elical_hf.settings.prompts import MULTIPLE_CHOICE_PROMPT, render_prompt
from elical_hf.signals import HFBackend
from elical_hf.signals.baselines import BASELINES, compute_baselines
from elical_hf.signals import option_probability
from elical_hf.signals.option_probability import (
    letter_token_ids, option_confidence, option_distribution, option_prob, records_needing_model,
)
from elical_hf.signals.records import load_records, save_records
from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer


log = math.log


def mc(stem: str, choices: list[str], gold: str = "A", **fields) -> dict:
    """A multiple-choice record as `elical_hf.settings.multiple_choice` writes it."""
    return {"question": format_question(stem, choices), "choices": list(choices), "answer": [gold], **fields}


CAPITAL = mc("What is the capital of France?", ["Paris", "London", "Rome", "Berlin"])
HAMLET = mc("Who wrote Hamlet?", ["Shakespeare", "Dickens"])
RIVER = mc("Which city is in Japan?", ["Paris", "Tokyo", "Rome", "Madrid", "London"], "B")


def test_option_distribution_normalises_over_the_options_and_sums_spellings():
    assert option_distribution([log(0.2), log(0.1), log(0.05), log(0.05)]) == pytest.approx([0.5, 0.25, 0.125, 0.125])
    # "A" and " A": their probabilities add up before the options are normalised
    assert option_distribution([[log(0.3), log(0.1)], [log(0.2)], log(0.2)]) == pytest.approx([0.5, 0.25, 0.25])
    assert option_distribution([log(0.6), log(0.2)]) == pytest.approx([0.75, 0.25])  # two options
    assert option_distribution([-1.0] * 5) == pytest.approx([0.2] * 5)  # five options
    assert option_distribution([-1000.0, -1001.0]) == pytest.approx([1 / (1 + math.exp(-1)), 1 / (1 + math.e)])
    assert option_distribution([log(0.5), -math.inf]) == [1.0, 0.0]  # a spelling the model never writes


def test_option_confidence_is_the_largest_normalised_probability():
    assert option_confidence([0.5, 0.25, 0.125, 0.125]) == 0.5
    assert option_confidence([0.1, 0.7, 0.2]) == pytest.approx(0.7)  # the favoured option need not be A
    assert option_confidence([2.0, 1.0, 1.0]) == 0.5  # normalised over the options
    assert option_confidence(option_distribution([log(0.6), log(0.2)])) == pytest.approx(0.75)
    assert option_confidence([0.2] * 5) == pytest.approx(0.2)
    for bad in ([], [0.5, -0.1], [math.nan, 1.0], [0.0, 0.0], None):
        with pytest.raises(ValueError, match="finite, non-negative and not all 0"):
            option_confidence(bad)
    for bad in ([0.5, -1.0], [math.nan, -1.0], [[], -1.0], []):
        with pytest.raises(ValueError, match="letter_logprobs"):
            option_distribution(bad)
    with pytest.raises(ValueError, match="no probability on any option letter"):
        option_distribution([-math.inf, [-math.inf, -math.inf]])


def test_the_docstring_examples_run():
    assert doctest.testmod(option_probability).failed == 0


class NoModel:
    """Stands for `HFBackend`: a test fails if a model is loaded."""

    def __init__(self, *args, **kwargs):
        raise AssertionError("no model should be loaded")


def test_records_with_option_probabilities_need_no_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("elical_hf.signals.backends.HFBackend", NoModel)
    records = [dict(CAPITAL, option_probabilities=[0.1, 0.7, 0.1, 0.1], greedy_correctness=True),
               dict(HAMLET, option_probabilities=[0.5, 0.5], greedy_correctness=False)]
    assert records_needing_model(records) == [] and not BASELINES["option_prob"].needs_model_for(records)
    assert BASELINES["option_prob"].paper_name == "Option-Prob"
    rows = [dict(r) for r in records]
    assert compute_baselines(rows, which=["option_prob"]) == {"option_prob": pytest.approx([0.7, 0.5])}
    assert [r["confidence_option_prob"] for r in rows] == pytest.approx([0.7, 0.5])
    scored = steps.score_baselines(steps.BaselinesArguments(records=[dict(r) for r in records], which="option_prob"))
    # (it would load `--model` otherwise)
    assert scored.scores["option_prob"] == pytest.approx([0.7, 0.5]) and scored.report["auroc"]["option_prob"] == 100
    save_records(records, tmp_path / "mc.jsonl")
    assert cli_main(["baselines", "--records", str(tmp_path / "mc.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                     "--which", "option_prob"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"]["option_prob"] == pytest.approx(0.6)


def test_evaluate_reads_option_prob_from_the_records_and_skips_it_without_them(tmp_path):
    folder = tmp_path / "records" / "tiny-model"
    folder.mkdir(parents=True)
    rows = [mc(f"What is the capital of France ({i})?", CAPITAL["choices"], greedy_correctness=i % 2 == 0,
               option_probabilities=[0.9, 0.1, 0.0, 0.0] if i % 2 == 0 else [0.4, 0.3, 0.2, 0.1]) for i in range(30)]
    save_records(rows, folder / "nq_test.jsonl")
    evaluation = steps.evaluate(steps.EvaluateArguments(records=str(tmp_path / "records"), baselines="option_prob"))
    assert list(evaluation.table) == ["Option-Prob"] and evaluation.table["Option-Prob"]["nq"]["auroc"] == 100
    assert evaluation.confidences["Option-Prob"] == pytest.approx([0.9, 0.4] * 15)
    said = []
    bare = [{k: v for k, v in r.items() if k != "option_probabilities"}
            for r in load_records(str(tmp_path / "records"), splits=True).to_list()]
    steps.evaluate(steps.EvaluateArguments(records=bare, baselines="option_prob"),
                   confidences={"given": evaluation.confidences["Option-Prob"]}, say=said.append)
    assert any(line.startswith("skipping baseline option_prob: option_prob needs the answering model") for line in said)


class Spellings:
    """A tokenizer with two single-token spellings of each letter, `"A"` (id 2i) and `" A"` (id 2i+1)."""

    def __init__(self, letters: str = "ABCDE"):
        self.ids = {text: i for i, text in enumerate(t for letter in letters for t in (letter, " " + letter))}

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.ids[text]] if text in self.ids else [90, 91]}

    def decode(self, ids):
        return "".join({i: text for text, i in self.ids.items()}[i] for i in ids)


class TableBackend:
    """A backend whose next-token log-probabilities are one table (token id -> log-probability) for every prompt."""

    def __init__(self, table: dict[int, float]):
        self.tokenizer, self.table, self.calls = Spellings(), table, []

    def next_token_logprobs(self, questions, token_ids, settings, batch_size=16, progress=True):
        self.calls.append((list(questions), list(token_ids), settings.prompt_template))
        return [[self.table[t] for t in token_ids] for _ in questions]


def test_every_spelling_of_a_letter_counts_and_only_the_missing_records_are_read():
    probabilities = [0.2, 0.1, 0.1, 0.05, 0.1, 0.0, 0.05, 0.0, 0.01, 0.01]  # A, " A", B, " B", ...
    backend = TableBackend({i: log(p) if p else -math.inf for i, p in enumerate(probabilities)})
    records = [dict(CAPITAL), dict(HAMLET), dict(RIVER, option_probabilities=[0.1, 0.6, 0.1, 0.1, 0.1])]
    scores = compute_baselines(records, which=["option_prob"], backend=backend, progress=False)["option_prob"]
    assert records[0]["option_probabilities"] == pytest.approx([0.5, 0.25, 1 / 6, 1 / 12])  # (.3, .15, .1, .05)/.6
    assert records[1]["option_probabilities"] == pytest.approx([2 / 3, 1 / 3])
    assert scores == pytest.approx([0.5, 2 / 3, 0.6])
    [(questions, token_ids, template)] = backend.calls  # one pass, the two records without probabilities
    assert questions == [CAPITAL["question"], HAMLET["question"]] and template == MULTIPLE_CHOICE_PROMPT
    assert token_ids == list(range(8))  # both spellings of A..D (the largest question has four options)
    assert letter_token_ids(Spellings(), "AB") == {"A": [0, 1], "B": [2, 3]}


def letter_tokenizer():
    """The tiny word-level tokenizer with the option letters B..E (its vocabulary has `A` already)."""
    tokenizer = make_tiny_tokenizer()
    tokenizer.add_tokens([AddedToken(letter, single_word=True) for letter in "BCDE"])
    return tokenizer


@pytest.mark.float32
def test_the_forward_pass_agrees_with_a_direct_forward():
    tokenizer = letter_tokenizer()
    model = make_tiny_causal_lm(tokenizer, initializer_range=0.2)
    records = [dict(HAMLET), dict(CAPITAL), dict(RIVER)]
    scores = option_prob(records, HFBackend(model, tokenizer), batch_size=2, progress=False)  # a padded batch
    letters = letter_token_ids(tokenizer, "ABCDE")
    for record, score in zip(records, scores):
        prompt = render_prompt(tokenizer, MULTIPLE_CHOICE_PROMPT.format(question=record["question"]))
        assert prompt.endswith("<|im_start|>assistant\n")  # the chat template's generation prompt
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            probabilities = model(input_ids=ids).logits[0, -1].float().softmax(-1)
        mass = [probabilities[letters[letter]].sum().item() for letter in "ABCDE"[: len(record["choices"])]]
        assert record["option_probabilities"] == pytest.approx([m / sum(mass) for m in mass], rel=1e-4)
        assert score == pytest.approx(max(mass) / sum(mass), rel=1e-4)


def test_refusals(monkeypatch):
    free_form = {"question": "who wrote hamlet", "greedy_response": "shakespeare", "greedy_logprobs": [-0.1]}
    with pytest.raises(ValueError, match="free-form \\(no `choices`\\): use Prob, N-Prob"):
        compute_baselines([dict(free_form)], which=["option_prob"])
    monkeypatch.setattr("elical_hf.signals.backends.HFBackend", NoModel)  # refused before any model is loaded
    with pytest.raises(ValueError, match="free-form"):
        steps.score_baselines(steps.BaselinesArguments(records=[dict(free_form)], which="option_prob"))
    with pytest.raises(ValueError, match="mix 1 multiple-choice and 1 free-form"):
        compute_baselines([dict(CAPITAL), dict(free_form)], which=["option_prob"])
    with pytest.raises(ValueError, match="needs the answering model for the 1 records without `option_probabilities`"):
        compute_baselines([dict(CAPITAL)], which=["option_prob"])
    with pytest.raises(ValueError, match=r"record 0 \(id 'q'\) has 3 values for its 2 options"):
        option_prob([dict(HAMLET, id="q", option_probabilities=[0.5, 0.3, 0.2])])
    with pytest.raises(ValueError, match="record 0.*must be finite"):
        option_prob([dict(HAMLET, option_probabilities=[0.0, 0.0])])
    with pytest.raises(ValueError, match="pass an HFBackend"):
        option_prob([dict(HAMLET)], backend=object())
    tokenizer = make_tiny_tokenizer()  # has "A" ("a", capitalised) but no "B"
    backend = HFBackend(make_tiny_causal_lm(tokenizer), tokenizer)
    with pytest.raises(ValueError, match="no single-token spelling of the option letter 'B' \\('B' or ' B'\\)"):
        option_prob([dict(HAMLET)], backend, progress=False)
