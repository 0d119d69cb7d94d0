"""The option judge on hand-written answers, and its place among the judges (one format per run, the refusals)."""

from __future__ import annotations

import pytest

from elical_hf.settings.multiple_choice import format_question
from elical_hf.signals.judging import apply_judges, check_judgeable
from elical_hf.signals.option_judge import answer_choice, option_mentions


CHOICES = ["Paris", "London", "Paris, Texas", "Berlin"]


@pytest.mark.parametrize(
    "answer, expected",
    [
        # a letter alone, however dressed
        ("B", "B"), ("B.", "B"), ("(B)", "B"), ("**C**", "C"), (" d ", None), ("E", None),
        # a letter named as the answer
        ("The answer is B.", "B"), ("Answer: (D)", "D"), ("the correct answer is C.Paris, Texas", "C"),
        ("Option D", "D"), ("The best choice is C", "C"), ("answer is B\nExplanation: C is wrong", "B"),
        ("The answer is E", None), ("the answer is a", None),
        # a letter in parentheses or opening a line, as the options are written
        ("B) London", "B"), ("B.London", "B"), ("I pick (A) here", "A"), ("- D: Berlin", "D"),
        # the option's text
        ("Paris", "A"), ("I think it is Paris, Texas", "C"), ("berlin!", "D"),
        # several options, or none: no choice
        ("Paris and Berlin", None), ("A. Paris\nB. London", None), ("(A) or (B)", None), ("I do not know", None),
        ("", None),
        # the article is not option A, nor an abbreviation a letter
        ("A cat sat on the mat", None), ("U.S. cities", None),
    ],
)
def test_which_option_an_answer_commits_to(answer, expected):
    assert answer_choice(answer, CHOICES) == expected


def test_a_letter_names_the_option_whose_text_follows_it_too_and_letters_count_only_among_the_options():
    # real SmolLM2 answers to MMLU: one option's letter before another's text names two options
    gauges = ["18 gauge.", "20 gauge.", "22 gauge.", "24 gauge."]
    assert option_mentions("B.24 gauge.", gauges) == {"B", "D"} and answer_choice("B.24 gauge.", gauges) is None
    assert answer_choice("D.24 gauge.", gauges) == "D"
    assert option_mentions("C.Paris", CHOICES) == {"A", "C"}
    assert answer_choice("C.Paris, Texas is my answer", CHOICES) == "C"  # the longest option the line starts with
    assert answer_choice("The answer is C. Paris, Texas", CHOICES) == "C"
    stop = ["telomeric sequences are removed", "a base pair is inserted",
            "a codon's nucleotide sequence is changed so that it terminates translation", "none of these"]
    assert option_mentions("B.a codon's nucleotide sequence is changed so", stop) == {"B", "C"}  # cut short
    assert answer_choice("C.a codon's", stop) == "C"  # too short a start to name an option
    assert answer_choice("A.A dye laser\n\nThe answer is: A.A dye laser", ["a dye laser", "a ruby laser"]) == "A"
    assert answer_choice("B.Wrong, Not wrong", ["Wrong, Wrong", "Wrong, Not wrong", "Not wrong, Wrong"]) == "B"
    assert answer_choice("(E)", CHOICES + ["Rome"]) == "E"
    assert answer_choice("(E)", CHOICES) is None
    assert answer_choice(None, CHOICES) is None


def mc_record(gold: str, greedy: str, samples: list[str], **extra) -> dict:
    question = format_question("Which city is the capital of France?", CHOICES)
    return {"question": question, "choices": CHOICES, "answer": [gold], "greedy_response": greedy,
            "sampling_response": samples, **extra}


def test_option_correctness_and_consistency_fill_the_records():
    records = [mc_record("A", "The answer is A.", ["A", "(B)", "Paris", "no idea"]),
               mc_record("D", "A or B", ["D", "A"])]
    summaries = apply_judges(records, "option", "option")
    first, second = records
    assert first["greedy_choice"] == "A" and first["sampling_choice"] == ["A", "B", "A", None]
    assert first["greedy_correctness"] is True
    assert first["sampling_correctness"] == [True, False, True, False]
    assert first["consistency_judgement"] == [1.0, 0.0, 1.0, 0.0]
    # no choice: wrong, and agrees with nothing (not even another answer without a choice)
    assert second["greedy_choice"] is None and second["greedy_correctness"] is False
    assert second["consistency_judgement"] == [0.0, 0.0]
    assert second["sampling_correctness"] == [True, False]
    assert first["correctness_judge"] == first["consistency_judge"] == "option"
    assert summaries["correctness"] == {"judged": 2, "correct": 1, "no_choice": 1, "samples_no_choice": 1}
    assert summaries["consistency"]["consistent"] == 2


def test_auto_consistency_is_the_option_judge_for_multiple_choice():
    records = [mc_record("A", "A", ["A", "B"])]
    apply_judges(records, None, "auto")
    assert records[0]["consistency_judge"] == "option"


def free_form() -> dict:
    return {"question": "Capital of France?", "answer": ["Paris"], "greedy_response": "Paris",
            "sampling_response": ["Paris"]}


@pytest.mark.parametrize(
    "records, correctness, consistency, message",
    [
        ([free_form()], "option", None, "option judge reads multiple-choice records"),
        ([free_form()], None, "option", "option judge reads multiple-choice records"),
        ([mc_record("A", "A", ["A"])], "has_answer", None, "these records are multiple choice"),
        ([mc_record("A", "A", ["A"]), free_form()], "option", None, "mix 1 multiple-choice and 1 free-form"),
        ([free_form(), mc_record("A", "A", ["A"])], "llm", None, "mix 1 multiple-choice and 1 free-form"),
    ],
)
def test_a_judge_that_does_not_fit_the_records_is_refused_in_one_line(records, correctness, consistency, message):
    before = [dict(r) for r in records]
    with pytest.raises(ValueError, match=message) as error:
        check_judgeable(records, correctness, consistency)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=message):
        apply_judges(records, correctness, consistency)
    assert records == before  # nothing judged


def test_the_llm_correctness_judge_is_told_the_gold_option_by_its_text():
    seen = []

    def complete(prompts, **_):
        seen.extend(prompts)
        return ["certain"] * len(prompts)

    records = [mc_record("C", "C", ["A"])]
    apply_judges(records, "llm", None, complete=complete, judge_model="judge")
    assert "The expected answers to this question are: ['C. Paris, Texas']." in seen[0]
    assert records[0]["answer"] == ["C"]  # the record keeps its gold letter
    assert records[0]["greedy_correctness"] is True


def test_training_refuses_multiple_choice_records(tmp_path):
    from elical_hf.signals.records import save_records
    from elical_hf.steps.train import training_table

    record = mc_record("A", "A", ["A", "B"])
    apply_judges([record], "option", "option")
    path = save_records([record], tmp_path / "mmlu.jsonl")
    with pytest.raises(ValueError, match="1 records are multiple-choice questions; a confidence model trains on free"):
        training_table(path, "consistency", "--elicitation_data")


def test_a_model_reads_multiple_choice_records_with_the_multiple_choice_prompt(tiny_llama):
    from elical_hf import AutoModelForConfidence
    from elical_hf.settings.prompts import MULTIPLE_CHOICE_PROMPT
    from elical_hf.steps.evaluate import model_confidences

    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    rows = [free_form(), mc_record("A", "A", ["A"]), {**free_form(), "question": "Capital of Peru?"}]
    values = model_confidences(model, rows, batch_size=2, progress=False)
    assert values[0::2] == pytest.approx(model.confidence([rows[0]["question"], rows[2]["question"]]), abs=1e-5)
    mc = model.confidence([rows[1]["question"]], prompt_template=MULTIPLE_CHOICE_PROMPT)
    assert values[1] == pytest.approx(mc[0], abs=1e-5)
    assert values[1] != pytest.approx(model.confidence([rows[1]["question"]])[0], abs=1e-5)  # not the QA prompt
