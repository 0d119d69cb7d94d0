"""The one reader of records (`signals.records.load_records`): every kind of records input gives the same rows, with
the training columns where the judgements allow; one name for greedy correctness."""

from __future__ import annotations

import pytest
from datasets import Dataset

from elical_hf.settings.columns import EVAL_LABEL_COLUMN
from elical_hf.signals.records import load_records, require_judgement, save_records, training_columns
from tests.test_diagnosis import make_records


def judged(n: int = 12) -> list[dict]:
    rows = make_records(n // 3 + 1)[:n]
    for row in rows:
        row["split"], row["model"] = "test", "tiny"  # datasets good / inverted / noise: unknown ones, paper split other
    return rows


def columns_of(table: Dataset) -> list[tuple]:
    return list(zip(table["question"], table["consistency"], table["correctness"], table[EVAL_LABEL_COLUMN]))


def test_every_records_input_gives_the_same_rows_and_training_columns(tmp_path):
    rows = judged()
    expected = [(r["question"], training_columns(r)["consistency"], training_columns(r)["correctness"],
                 r["greedy_correctness"]) for r in rows]
    parquet = save_records(rows, tmp_path / "judged.parquet")
    jsonl = save_records(rows, tmp_path / "judged.jsonl")
    folder = tmp_path / "folder"
    save_records(rows[:5], folder / "shards" / "a.parquet")
    save_records(rows[5:], folder / "shards" / "b.jsonl")
    csv = tmp_path / "table.csv"  # a table of training rows: taken as it is
    Dataset.from_list([{"question": q, "consistency": c, "correctness": k} for q, c, k, _ in expected]).to_csv(csv)
    for source in (parquet, jsonl, str(folder), rows, Dataset.from_list(rows)):
        table = load_records(source)
        assert isinstance(table, Dataset) and columns_of(table) == expected, source
        assert table["consistency_source"] == ["consistency_judgement"] * len(rows)
    table = load_records(str(csv))
    assert table["consistency"] == [c for _, c, _, _ in expected] and "consistency_source" not in table.column_names
    assert table.cache_files == [] and load_records(parquet).cache_files  # files are memory-mapped from Arrow


def test_as_stored_the_paper_splits_and_the_judgement_a_target_needs(tmp_path):
    rows = judged()
    path = save_records(rows, tmp_path / "judged.parquet")
    stored = load_records(path, derive=False)
    assert "consistency" not in stored.column_names and stored.to_list()[0]["question"] == rows[0]["question"]
    split = load_records(path, splits=True)
    assert set(split["paper_split"]) == {"other"} and set(split["source_split"]) == {"test"}
    unjudged = [{**r, "sampling_correctness": None} for r in rows]
    table = load_records(unjudged)
    require_judgement(table, "consistency", "--elicitation_data")  # that one is there
    with pytest.raises(ValueError, match=r"'correctness' target .*run `elical-hf judge --correctness has_answer"):
        require_judgement(table, "correctness", "--calibration_data")
    require_judgement(Dataset.from_list([{"question": "q", "consistency": 0.5}]), "correctness", "t")  # a table: later
