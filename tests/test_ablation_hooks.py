"""The hooks of the paper's two scaling ablations: targets from the first k' of k samples (`num_samples`,
`elical-hf train --num_samples_used`) and a stage-1 budget (`train_elical(num_elicitation=N)`,
`elical-hf train --num_elicitation`). The ablations themselves are measurements, not tests."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from elical_hf.training.recipe import take_elicitation, train_elical
from elical_hf.signals import load_honestybench
from elical_hf.signals.records import first_samples, load_records, save_records, training_columns


def _record(i: int) -> dict:
    # 4 samples: the first two judged consistent and correct, the last two not (so k' = 2 and k = 4 differ)
    return {"id": f"q{i}", "question": f"who wrote book number {i}", "answer": ["someone"], "dataset": "nq",
            "split": "train", "greedy_response": "someone", "greedy_correctness": i % 2 == 0,
            "sampling_response": ["someone", "someone", "nobody", "anyone"],
            "sampling_correctness": [True, True, False, False], "consistency_judgement": [1.0, 1.0, 0.0, 0.0]}


def test_training_columns_from_the_first_samples():
    record = _record(0)
    assert training_columns(record)["consistency"] == 0.5 and training_columns(record)["correctness"] == 0.5
    first = training_columns(record, num_samples=2)
    assert (first["consistency"], first["correctness"], first["greedy_correctness"]) == (1.0, 1.0, 1)
    assert training_columns(record, num_samples=3)["consistency"] == pytest.approx(2 / 3)
    assert first_samples(record, 1)["sampling_response"] == ["someone"] and record["sampling_response"][3] == "anyone"
    with pytest.raises(ValueError, match=r"'q0' has 4 entries in `sampling_response`, fewer than the 5"):
        training_columns(record, num_samples=5)
    with pytest.raises(ValueError, match="integer >= 1"):
        first_samples(record, 0)


def test_load_honestybench_keeps_the_first_samples(tmp_path):
    save_records([_record(i) for i in range(4)], tmp_path / "records" / "nq_train.jsonl")
    full = load_honestybench(str(tmp_path / "records"), progress=False, cache_dir=tmp_path / "cache")["train"]
    cut = load_honestybench(str(tmp_path / "records"), progress=False, cache_dir=tmp_path / "cache",
                            num_samples=2)["train"]
    assert full["consistency"] == [0.5] * 4 and full["correctness"] == [0.5] * 4
    assert cut["consistency"] == [1.0] * 4 and cut["correctness"] == [1.0] * 4
    assert [len(s) for s in cut["sampling_response"]] == [2] * 4
    assert [len(s) for s in cut["consistency_judgement"]] == [2] * 4
    again = load_honestybench(str(tmp_path / "records"), progress=False, cache_dir=tmp_path / "cache")["train"]
    assert again["consistency"] == [0.5] * 4  # each k' has its own cache
    with pytest.raises(ValueError, match="fewer than the 5"):
        load_honestybench(str(tmp_path / "records"), progress=False, cache_dir=tmp_path / "cache", num_samples=5)


def test_load_records_rederives_the_targets(tmp_path):
    path = tmp_path / "judged.jsonl"
    save_records([{**_record(i), "consistency": 0.5, "correctness": 0.5} for i in range(3)], path)
    assert load_records(str(path))["consistency"] == [0.5] * 3
    cut = load_records(str(path), num_samples=2)
    assert cut["consistency"] == [1.0] * 3 and cut["correctness"] == [1.0] * 3
    plain = tmp_path / "table.jsonl"
    plain.write_text("".join(json.dumps({"question": f"q{i}", "consistency": 0.5}) + "\n" for i in range(3)))
    with pytest.raises(ValueError, match="no per-sample judgements"):
        load_records(str(plain), num_samples=2)


def test_take_elicitation_is_a_seeded_subset_independent_of_the_labels():
    rows = Dataset.from_list([{"question": f"q{i}", "consistency": 0.5} for i in range(50)])
    first, again = take_elicitation(rows, 20, seed=3), take_elicitation(rows, 20, seed=3)
    assert len(first) == 20 and first["question"] == again["question"]
    assert first["question"] != take_elicitation(rows, 20, seed=4)["question"]
    assert take_elicitation(rows, None, seed=3) is rows and len(take_elicitation(rows, 80, seed=3)) == 50
    with pytest.raises(ValueError, match=">= 2"):
        take_elicitation(rows, 1, seed=3)


def test_train_elical_stage1_budget(tiny_llama, tmp_path, monkeypatch):
    import elical_hf.training.recipe as recipe

    seen = {}

    def fake_train_stage(model, data, output_dir, stage, **kwargs):  # records the rows, saves the untrained model
        seen.setdefault(stage, []).append(len(data))
        model.save_pretrained(output_dir)

    monkeypatch.setattr(recipe, "train_stage", fake_train_stage)
    rows = [{"question": f"who wrote book number {i}", "consistency": (i % 4) / 3, "correctness": float(i % 2)}
            for i in range(30)]
    train_elical(tiny_llama, rows, rows, str(tmp_path / "run"), num_labels=10, num_elicitation=12, cal_only=False)
    assert seen == {"elicitation": [12], "calibration": [10]}
    manifest = json.loads((tmp_path / "run" / "elical_run.json").read_text())["run"]
    assert (manifest["num_elicitation"], manifest["num_elicitation_used"]) == (12, 12)
    with pytest.raises(ValueError, match="num_elicitation: 12 -> 20"):
        train_elical(tiny_llama, rows, rows, str(tmp_path / "run"), num_labels=10, num_elicitation=20, cal_only=False)


def test_train_command_passes_both_options(tmp_path, monkeypatch):
    import elical_hf.training.recipe
    from elical_hf.cli import main as cli_main

    calls = []
    monkeypatch.setattr(elical_hf.training.recipe, "train_elical", lambda *args, **kwargs: calls.append((args, kwargs)) or {})
    path = tmp_path / "judged.jsonl"
    save_records([_record(i) for i in range(3)], path)
    assert cli_main(["train", "--elicitation_data", str(path), "--calibration_data", str(path), "--output_dir",
                     str(tmp_path / "o"), "--num_elicitation", "2", "--num_samples_used", "2"]) == 0
    ((args, kwargs),) = calls
    assert kwargs["num_elicitation"] == 2
    assert args[1]["consistency"] == [1.0] * 3 and args[2]["correctness"] == [1.0] * 3  # from the first 2 samples


def test_train_elical_takes_stage_2_settings_as_training_arguments(tiny_llama, tmp_path, monkeypatch):
    """Stage 2 and Cal-Only get `calibration_training_args` (stage 1 `training_args`); a dict of changes is refused
    before anything is written."""
    import dataclasses

    import elical_hf.training.recipe as recipe
    from elical_hf import ConfidenceTrainingArguments

    rates = {}

    def fake_train_stage(model, data, output_dir, stage, training_args, **kwargs):
        rates.setdefault(stage, []).append(training_args.learning_rate)
        model.save_pretrained(output_dir)

    monkeypatch.setattr(recipe, "train_stage", fake_train_stage)
    rows = [{"question": f"who wrote book number {i}", "consistency": (i % 4) / 3, "correctness": float(i % 2)}
            for i in range(30)]
    args = ConfidenceTrainingArguments(output_dir=str(tmp_path / "run"), learning_rate=1e-4, num_train_epochs=None)
    with pytest.raises(TypeError, match="calibration_training_args` must be ConfidenceTrainingArguments, not dict"):
        train_elical(tiny_llama, rows, rows, str(tmp_path / "run"), training_args=args,
                     calibration_training_args={"learning_rate": 1e-5})
    assert not (tmp_path / "run").exists()
    train_elical(tiny_llama, rows, rows, str(tmp_path / "run"), num_labels=10, training_args=args,
                 calibration_training_args=dataclasses.replace(args, learning_rate=1e-5))
    assert rates == {"elicitation": [1e-4], "calibration": [1e-5, 1e-5]}  # EliCal's stage 2 and Cal-Only
