"""Data safety of `elical-hf train`: kill and resume, half-written checkpoints, reruns into used folders."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from elical_hf.cli import main as cli_main
from elical_hf.training.recipe import RUN_MANIFEST_NAME, last_complete_checkpoint, remove_checkpoints, train_elical
from tests.reliability import case
from tests.test_trainer import make_rows


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 1e-6
"""Largest absolute difference allowed between a resumed run's weights and an uninterrupted run's (float32, CPU)."""


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def train_command(tiny_llama, tmp_path, output_dir) -> list[str]:
    """`elical-hf train` on the tiny model: 36 stage-1 and 25 stage-2 steps, a checkpoint every 2 (dev-split
    evaluations, early stopping armed), no Cal-Only."""
    eli = write_rows(tmp_path / "eli.jsonl", make_rows(24, seed=0))
    cal = write_rows(tmp_path / "cal.jsonl", make_rows(12, seed=1))
    return [
        sys.executable, "-m", "elical_hf.cli", "train", "--elicitation_data", eli, "--calibration_data", cal,
        "--model_name_or_path", tiny_llama, "--output_dir", str(output_dir), "--no_cal_only", "--dtype", "float32",
        "--dev_fraction", "0.25", "--eval_strategy", "steps", "--eval_steps", "2", "--num_train_epochs", "4",
        "--per_device_train_batch_size", "2", "--learning_rate", "1e-2", "--seed", "0", "--use_cpu", "true",
        "--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "1", "--dataloader_num_workers", "0",
    ]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1"}


def run_to_end(command: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def kill_at_checkpoint(command: list[str], checkpoints: str, log, min_step: int = 2) -> int:
    """Start `command` (stderr to the file `log`), SIGKILL it as soon as `checkpoints` holds a complete checkpoint of
    step >= `min_step`; return that step."""
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, env=environment(), stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            found = last_complete_checkpoint(checkpoints) if os.path.isdir(checkpoints) else None
            if found is not None and int(found.rsplit("-", 1)[1]) >= min_step:
                process.send_signal(signal.SIGKILL)
                process.wait()
                return int(found.rsplit("-", 1)[1])
            assert process.poll() is None, "training ended before a checkpoint appeared"
            time.sleep(0.02)
        raise AssertionError("no checkpoint within the time limit")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(folder, "adapter_model.safetensors"))


def max_difference(a, b) -> float:
    first, second = weights(a), weights(b)
    assert first.keys() == second.keys()
    return max(float((first[k].float() - second[k].float()).abs().max()) for k in first)


@case("data", "a file of the user's in `<stage>/checkpoints` when a stage finishes",
      "kept: only the `checkpoint-<step>` folders the Trainer wrote are deleted")
@case("data", "a checkpoint cut off mid-save (`checkpoint-N` without `trainer_state.json`) when `train` is rerun",
      "skipped with a warning (`Skipping …: no trainer_state.json`); training resumes from the last complete one")
@case("data", "`elical-hf train` killed (SIGKILL) after a stage-1 checkpoint, rerun; killed again in stage 2, rerun",
      "each rerun resumes the interrupted stage from its last complete checkpoint (log: `resuming from …/checkpoint-N "
      "(step N)`; a finished stage is skipped); the final models equal an uninterrupted run's (max abs weight "
      f"difference <= {TOLERANCE:g})")
def test_train_killed_twice_resumes_to_the_uninterrupted_models(tiny_llama, tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    run_to_end(train_command(tiny_llama, tmp_path, reference))
    command = train_command(tiny_llama, tmp_path, resumed)

    step = kill_at_checkpoint(command, str(resumed / "elicitation" / "checkpoints"), tmp_path / "first.log")
    assert not os.path.exists(resumed / "elicitation" / "confidence_config.json")
    cut = resumed / "elicitation" / "checkpoints" / "checkpoint-999"  # a later checkpoint cut off mid-save
    cut.mkdir()
    (cut / "adapter_model.safetensors").write_bytes(b"\0" * 10)
    notes = resumed / "elicitation" / "checkpoints" / "notes.txt"
    notes.write_text("mine")

    step2 = kill_at_checkpoint(command, str(resumed / "elical" / "checkpoints"), tmp_path / "second.log")
    # the second run skipped the cut-off checkpoint, resumed stage 1 where the first run was killed and finished it
    second = (tmp_path / "second.log").read_text()
    assert re.search(r"Skipping \S+checkpoint-999: no trainer_state.json", second)
    resumed_at = re.search(r"elicitation: resuming from \S+checkpoint-(\d+) \(step (\d+)\), not from scratch", second)
    assert resumed_at and int(resumed_at.group(1)) == step >= 2
    assert os.path.isfile(resumed / "elicitation" / "confidence_config.json")
    assert notes.read_text() == "mine" and not cut.exists()
    final = run_to_end(command)
    assert "elicitation: already trained" in final.stderr
    resumed_at = re.search(r"calibration: resuming from \S+checkpoint-(\d+) \(step (\d+)\), not from scratch", final.stderr)
    assert resumed_at and int(resumed_at.group(2)) == step2 >= 2

    with open(resumed / RUN_MANIFEST_NAME) as handle:
        assert json.load(handle)["done"] == ["elicitation", "elical"]
    assert not os.path.exists(resumed / "elical" / "checkpoints")  # ours only: removed with the last checkpoint
    for stage in ("elicitation", "elical"):
        assert max_difference(reference / stage, resumed / stage) <= TOLERANCE
        history = json.loads((resumed / stage / "confidence_config.json").read_text())["training_history"]
        expected = json.loads((reference / stage / "confidence_config.json").read_text())["training_history"]
        assert [h["global_steps"] for h in history] == [h["global_steps"] for h in expected]


def small_run(tmp_path, tiny_llama, output_dir, seed=0, **overrides):
    from elical_hf import ConfidenceTrainingArguments

    rows = make_rows(8, seed=0)
    args = ConfidenceTrainingArguments(output_dir=str(output_dir), seed=seed, num_train_epochs=1,
                                       per_device_train_batch_size=4, report_to="none", use_cpu=True,
                                       disable_tqdm=True, save_strategy="no")
    args.model_init_kwargs = {"dtype": torch.float32}
    settings = dict(num_labels=None, cal_only=False, dev_fraction=0.0, training_args=args)
    settings.update(overrides)
    return train_elical(tiny_llama, rows, rows, str(output_dir), **settings)


@case("data", "`elical-hf train --output_dir` a non-empty folder that holds no training run",
      "refused before training: `… is not empty and holds no elical-hf train run … pass --overwrite_output_dir`; "
      "nothing in it is touched")
def test_train_refuses_a_foreign_non_empty_folder(tiny_llama, tmp_path, raise_user_errors):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    data = write_rows(tmp_path / "rows.jsonl", make_rows(8))
    argv = ["train", "--elicitation_data", data, "--calibration_data", data, "--output_dir", str(out),
            "--model_name_or_path", tiny_llama]
    with pytest.raises(ValueError, match="is not empty and holds no `elical-hf train` run"):
        cli_main(argv)
    assert os.listdir(out) == ["results.json"]


@case("data", "`train` rerun into a finished run's folder with other options (e.g. another `--seed`)",
      "refused: `… holds an elical-hf train run with other settings or data … seed: 0 -> 1`; the earlier models stay; "
      "the same options again skip every finished stage; `--overwrite_output_dir` trains anew")
def test_rerun_with_other_settings_is_refused_and_same_settings_skip(tiny_llama, tmp_path, caplog):
    out = tmp_path / "out"
    small_run(tmp_path, tiny_llama, out)
    first = tmp_path / "first"
    os.makedirs(first)
    for name in ("adapter_model.safetensors",):
        (first / name).write_bytes((out / "elical" / name).read_bytes())
    with pytest.raises(ValueError, match=r"other settings or data.*seed: 0 -> 1"):
        small_run(tmp_path, tiny_llama, out, seed=1)
    assert max_difference(out / "elical", first) == 0
    stamp = os.path.getmtime(out / "elical" / "adapter_model.safetensors")
    with caplog.at_level("WARNING", logger="elical_hf.training.recipe"):
        small_run(tmp_path, tiny_llama, out)
    assert "elicitation: already trained" in caplog.text and "elical: already trained" in caplog.text
    assert os.path.getmtime(out / "elical" / "adapter_model.safetensors") == stamp
    small_run(tmp_path, tiny_llama, out, seed=1, overwrite_output_dir=True)
    assert max_difference(out / "elical", first) > 0
    with open(out / RUN_MANIFEST_NAME) as handle:
        assert json.load(handle)["run"]["seed"] == 1


def test_remove_checkpoints_keeps_other_files(tmp_path):
    folder = tmp_path / "checkpoints"
    for step in (2, 4):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
    (folder / "checkpoint-4" / "trainer_state.json").write_text("{}")
    (folder / "checkpoint-6").mkdir()  # cut off
    assert last_complete_checkpoint(str(folder)).endswith("checkpoint-4")
    (folder / "mine.txt").write_text("x")
    remove_checkpoints(str(folder))
    assert sorted(os.listdir(folder)) == ["mine.txt"]
    os.remove(folder / "mine.txt")
    remove_checkpoints(str(folder))
    assert not folder.exists()
    assert glob.glob(str(tmp_path / "*")) == []


@case("data", "`elical-hf evaluate --output_dir` a folder that already holds `results.json` (an earlier run)",
      "refused: `--output_dir … already holds the results of an earlier run; use a new folder or pass "
      "--overwrite_output_dir`; the earlier results stay")
def test_evaluate_does_not_overwrite_earlier_results(tmp_path, raise_user_errors):
    from tests.test_reliability_silent import judged_records

    records, out = judged_records(tmp_path), tmp_path / "report"
    argv = ["evaluate", "--records", records, "--output_dir", str(out), "--baselines", "prob"]
    assert cli_main(argv) == 0
    (out / "results.json").write_text('{"earlier": 1}')
    with pytest.raises(ValueError, match="already holds the results of an earlier run.*--overwrite_output_dir"):
        cli_main(argv)
    assert json.loads((out / "results.json").read_text()) == {"earlier": 1}
    assert cli_main([*argv, "--overwrite_output_dir"]) == 0
    assert "Prob" in json.loads((out / "results.json").read_text())


@case("data", "loading the stage folder a killed `train` leaves (only `checkpoints/`, no model yet)",
      "one clear error instead of transformers' `Unrecognized model … model_type`: `… is neither a confidence model "
      "nor a base model …: it holds only the checkpoints of an interrupted elical-hf train stage; rerun the same "
      "command to resume it`")
def test_a_half_trained_stage_folder_is_explained(tmp_path):
    from elical_hf import AutoModelForConfidence

    (tmp_path / "elical" / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    with pytest.raises(ValueError, match="only the checkpoints of an interrupted `elical-hf train` stage"):
        AutoModelForConfidence.from_pretrained(str(tmp_path / "elical"))
