"""`elical-hf threshold` (the alignment rule, and `--alpha/--delta` with a guarantee), what it saves with the model
(config and card), and `elical-hf evaluate`'s report of the saved rule's error rate and coverage."""

from __future__ import annotations

import json

import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from tests.tiny import mark_trained


def write_judged(folder, split: str, n: int, wrong_every: int) -> None:
    """`n` judged records of one dataset in `split`; every `wrong_every`-th greedy answer is wrong."""
    from elical_hf.signals.records import save_records

    rows = []
    for i in range(n):
        correct = i % wrong_every != 0
        rows.append({
            "question": f"who wrote play number {i} of {split}", "answer": ["shakespeare"], "dataset": "nq",
            "greedy_response": "shakespeare" if correct else "dickens", "greedy_correctness": correct,
            "greedy_tokens": ["a"], "greedy_logprobs": [-0.1], "greedy_cumulative_logprobs": -0.1,
            "sampling_response": ["shakespeare"], "sampling_correctness": [correct],
        })
    save_records(rows, folder / f"nq_{split}.jsonl")


@pytest.fixture
def judged(tmp_path, tiny_llama):
    records = tmp_path / "records" / "tiny-model"
    records.mkdir(parents=True)
    write_judged(records, "train", 60, wrong_every=10)  # 10% wrong
    write_judged(records, "test", 40, wrong_every=10)
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "model")
    mark_trained(tmp_path / "model")  # evaluate refuses untrained heads
    return tmp_path


def saved_config(folder) -> ConfidenceConfig:
    return ConfidenceConfig.from_json_file(folder / CONFIDENCE_CONFIG_NAME)


def test_threshold_with_a_guarantee_is_saved_with_the_model_and_reported_by_evaluate(judged, capsys):
    model = judged / "model"
    code = cli_main(["threshold", str(model), "--records", str(judged / "records"), "--alpha", "0.3", "--delta", "0.1",
                     "--allow_other_model", "true"])
    assert code == 0
    config = saved_config(model)
    record = config.risk_control
    assert record["alpha"] == 0.3 and record["delta"] == 0.1 and record["n"] == 60 and record["split"] == "train"
    assert record["risk_upper_bound"] <= 0.3 and 0 < record["coverage"] <= 1
    assert config.decision_threshold is not None
    confidences = AutoModelForConfidence.from_pretrained(model).confidence(
        [f"who wrote play number {i} of train" for i in range(60)])
    assert record["coverage"] == pytest.approx(sum(c >= config.decision_threshold for c in confidences) / 60)
    card = (model / "README.md").read_text()
    assert "error rate among answered questions of at most **0.3**" in card and "on 60 labelled" in card
    assert "Guarantee: error rate among answered <= 0.3" in capsys.readouterr().out

    out = judged / "report"
    assert cli_main(["evaluate", "--records", str(judged / "records"), "--output_dir", str(out), "--allow_other_model", "true",
                     "--model", f"Tiny={model}", "--baselines", "prob"]) == 0
    decisions = json.loads((out / "decisions.json").read_text())["Tiny"]
    assert decisions["alpha"] == 0.3 and decisions["threshold"] == config.decision_threshold
    cell = decisions["columns"]["all"]
    assert cell["n"] == 40 and cell["answered"] == round(cell["coverage"] * 40)
    assert "Decisions at the saved thresholds" in (out / "report.md").read_text()

    # the alignment rule replaces the threshold and drops the guarantee (the old spelling --model still works)
    assert cli_main(["threshold", "--model", str(model), "--records", str(judged / "records"),
                     "--allow_other_model", "true"]) == 0
    assert saved_config(model).risk_control is None


def test_an_alpha_that_cannot_be_certified_writes_nothing(judged, raise_user_errors):
    model = judged / "model"
    before = (model / CONFIDENCE_CONFIG_NAME).read_text()
    with pytest.raises(ValueError, match="Nothing was written"):
        cli_main(["threshold", str(model), "--records", str(judged / "records"), "--alpha", "0.01",
                  "--allow_other_model", "true"])
    assert (model / CONFIDENCE_CONFIG_NAME).read_text() == before


def test_retrieve_threshold_must_not_exceed_the_decision_threshold():
    with pytest.raises(ValueError, match="must not exceed"):
        ConfidenceConfig(decision_threshold=0.5, retrieve_threshold=0.6)
