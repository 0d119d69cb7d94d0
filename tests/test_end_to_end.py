"""End to end on the real SmolLM2-135M-Instruct (embedded GGUF, offline) and real bundled questions."""

from __future__ import annotations

import json
import os

import pytest

from elical_hf import DEFAULT_MODEL, AutoModelForConfidence
from elical_hf.data.questions import load_bundled_questions
from elical_hf.cli import main as cli_main


pytestmark = pytest.mark.slow


def write_jsonl(path, rows) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return str(path)


def test_cli_train_learns_a_real_signal(tmp_path):
    # A learnable target on real questions: ParaRel questions are "easy" (0.9), HotpotQA ones "hard" (0.1).
    easy = load_bundled_questions("pararel", limit=20)
    hard = load_bundled_questions("hotpotqa", limit=20)
    rows = [{"question": r["question"], "consistency": 0.9, "correctness": 1.0, "greedy_correctness": 1} for r in easy]
    rows += [{"question": r["question"], "consistency": 0.1, "correctness": 0.0, "greedy_correctness": 0} for r in hard]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out"
    code = cli_main([
        "train", "--elicitation_data", data, "--calibration_data", data, "--output_dir", str(out),
        "--num_labels", "20", "--num_train_epochs", "4", "--learning_rate", "3e-3",
        "--per_device_train_batch_size", "8", "--dev_fraction", "0.2",
    ])
    assert code == 0
    for folder in ("elicitation", "elical", "cal-only"):
        assert os.path.isfile(out / folder / "confidence_config.json")
        adapter = json.loads((out / folder / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == DEFAULT_MODEL
        assert f"base_model: {DEFAULT_MODEL}" in (out / folder / "README.md").read_text()  # never a cache path
        leftovers = [p.name for p in (out / folder).iterdir() if p.suffix in (".bin", ".pt", ".pth") or p.is_dir()]
        assert not leftovers, f"a final model folder holds only the adapter, tokenizer and settings: {leftovers}"

    model = AutoModelForConfidence.from_pretrained(out / "elical")
    assert model.confidence_config.trained_stages == ["elicitation", "calibration"]
    assert model.confidence_config.training_history[1]["num_examples"] <= 20
    easy_test = [r["question"] for r in load_bundled_questions("pararel")[100:116]]
    hard_test = [r["question"] for r in load_bundled_questions("hotpotqa")[100:116]]
    scores = model.confidence(easy_test + hard_test, batch_size=8)
    assert all(0.0 <= s <= 1.0 for s in scores)
    easy_mean, hard_mean = sum(scores[:16]) / 16, sum(scores[16:]) / 16
    assert easy_mean > hard_mean + 0.2, f"held-out easy questions should score higher: {easy_mean} vs {hard_mean}"
