"""Records are the currency: `elical-hf train` takes judged records (a `judge` output, a `sample` folder once judged)
and derives the training columns; records without the judgement a target needs are refused with the `judge` option."""

from __future__ import annotations

import json

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.signals.records import load_records, require_judgement, save_records, training_columns
from tests.test_diagnosis import make_records


def judged(n: int = 24) -> list[dict]:
    rows = make_records(n // 3 + 1)[:n]
    for row in rows:
        row.pop("split")
        row["model"] = "tiny"
    return rows


def test_judged_parquet_gets_the_training_columns(tmp_path):
    rows = judged()
    path = save_records(rows, tmp_path / "judged.parquet")
    table = load_records(path)
    assert {"consistency", "correctness", "greedy_correctness"} <= set(table.column_names)
    assert table["consistency"] == [training_columns(r)["consistency"] for r in rows]
    assert table["correctness"] == [training_columns(r)["correctness"] for r in rows]
    assert table["greedy_correctness"] == [r["greedy_correctness"] for r in rows]


def test_a_folder_of_record_files_is_a_training_table(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    rows = judged()
    save_records(rows[:10], folder / "a.jsonl")
    save_records(rows[10:], folder / "b.parquet")
    table = load_records(str(folder))
    assert len(table) == len(rows) and table["consistency"] == [training_columns(r)["consistency"] for r in rows]


def test_unjudged_records_are_refused_with_the_judge_option(tmp_path):
    rows = [{**r, "consistency_judgement": None, "consistency_lexical": None} for r in judged()]
    path = save_records(rows, tmp_path / "sampled.parquet")
    with pytest.raises(ValueError, match=r"elical-hf judge --consistency embedding"):
        require_judgement(load_records(path), "consistency", "--elicitation_data")


def test_train_runs_on_the_judge_commands_output(tiny_llama, tmp_path, capsys):
    """The README's chain: `judge --output judged.parquet`, then `train` on that same file for both stages."""
    path = save_records(judged(90), tmp_path / "judged.parquet")
    out = tmp_path / "out"
    assert cli_main(["train", "--model_name_or_path", tiny_llama, "--elicitation_data", path, "--calibration_data",
                     path, "--output_dir", str(out), "--num_labels", "60", "--num_train_epochs", "1",
                     "--per_device_train_batch_size", "8", "--use_cpu", "true", "--report_to", "none",
                     "--allow_other_model", "true"]) == 0  # the records name a stand-in model, "tiny"
    printed = capsys.readouterr().out
    assert all((out / name / "confidence_config.json").is_file() for name in ("elicitation", "elical", "cal-only"))
    assert "diagnosis, good: consistency separates" in printed and "stage 1 teaches a useful signal" in printed
    history = json.loads((out / "elical" / "confidence_config.json").read_text())["training_history"]
    assert [entry["stage"] for entry in history] == ["elicitation", "calibration"]
