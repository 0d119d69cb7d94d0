"""`elical-hf demo` end to end on a tiny random model (the real SmolLM2 run is what `make demo` does)."""

from __future__ import annotations

import json

import pytest

from elical_hf import AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
from elical_hf.cli import main as cli_main
from elical_hf.demo import DEMO_RECORDS, DemoSettings, demo_partitions
from elical_hf.signals.records import read_records


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    """The tiny Llama with a 2,048-token context: the live Verbal-10 prompts are ~720 tokens, and the sampler refuses
    a prompt that does not fit (the session-wide tiny model has 512)."""
    from tests.conftest import save_tiny_base

    return save_tiny_base(tmp_path_factory.mktemp("tiny-llama-2k"), "llama", max_position_embeddings=2048)


@pytest.fixture(scope="module")
def tiny_stage1(tiny_llama, tmp_path_factory):
    """A tiny model through a short stage 1, saved like the shipped stage-1 adapter."""
    folder = tmp_path_factory.mktemp("stage1")
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    rows = {"question": ["who wrote hamlet", "capital of france", "largest river", "first king"],
            "consistency": [0.9, 0.8, 0.1, 0.2]}
    args = ConfidenceTrainingArguments(output_dir=str(folder / "run"), max_steps=2, per_device_train_batch_size=2,
                                       learning_rate=1e-2, report_to="none", save_strategy="no")
    ConfidenceTrainer(model, args=args, train_dataset=rows).train()
    model.save_pretrained(folder / "model")
    return str(folder / "model")


def test_demo_runs_every_step_and_reports_the_paired_difference(tiny_llama, tiny_stage1, tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--model_name_or_path", tiny_llama, "--stage1_model", tiny_stage1, "--output_dir", str(out),
            "--test_questions", "40", "--label_pool", "30", "--num_labels", "10", "--label_budgets", "6", "10",
            "--num_draws", "2", "--live_questions", "4", "--stage1_live_questions", "8", "--num_samples", "2",
            "--max_new_tokens", "3", "--head_epochs", "3", "--bootstrap", "20"]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    run = json.loads((out / "run.json").read_text())
    assert run["headline"] in printed and run["headline"].startswith("With 10 labels (2 label draws), EliCal ")
    assert f"Report: {out}/report.md" in printed
    assert run["sizes"] == {"test (in-domain)": 40, "label pool": 30, "live": 4, "stage-1 live": 8}
    assert set(run["timings"]) == {"live sampling, judging and baselines", "live stage 1", "stage 2 and Cal-Only",
                                   "evaluation"}

    # The headline is the mean over draws of the per-draw paired differences of the table's own rows.
    table = json.loads((out / "results.json").read_text())
    assert list(table) == ["Prob", "N-Prob", "Consis-Lex", "Consis-Sem", "Eli-Only", "EliCal@10 #1", "EliCal@10 #2",
                           "Cal-Only@10 #1", "Cal-Only@10 #2"]
    diff = run["difference"]["in-domain avg"]
    expected = [table[f"EliCal@10 #{d}"]["in-domain avg"]["auroc"] - table[f"Cal-Only@10 #{d}"]["in-domain avg"]["auroc"]
                for d in (1, 2)]
    assert diff["auroc_per_draw"] == pytest.approx(expected)
    assert diff["auroc"] == pytest.approx(sum(expected) / 2)
    assert diff["auroc_ci"][0] <= diff["auroc"] <= diff["auroc_ci"][1]

    report = (out / "report.md").read_text()
    assert run["headline"] in report and "What ran live" in report and "auroc_vs_labels.png" in report
    assert (out / "auroc_vs_labels.png").is_file() and (out / "reliability.png").is_file()
    live = read_records(str(out / "live_records.parquet"))
    assert len(live) == 4 and all(len(r["consistency_judgement"]) == 2 for r in live)
    assert run["live"]["baselines"].keys() == {"Prob", "N-Prob", "Consis-Lex", "Consis-Sem", "Verbal-0", "Verbal-10"}

    elical = AutoModelForConfidence.from_pretrained(out / "models" / "elical")
    cal_only = AutoModelForConfidence.from_pretrained(out / "models" / "cal-only")
    assert elical.confidence_config.trained_stages == ["elicitation", "calibration"]
    assert cal_only.confidence_config.trained_stages == ["calibration"]
    assert elical.confidence_config.training_history[-1]["num_examples"] == 10
    stage1_live = AutoModelForConfidence.from_pretrained(run["models"]["stage-1 (live)"])
    assert stage1_live.confidence_config.trained_stages == ["elicitation"]


def test_demo_partitions_are_disjoint_and_sized():
    settings = DemoSettings(test_questions=100, label_pool=50, stage1_live_questions=20, num_labels=20, label_budgets=[10])
    parts = demo_partitions(read_records(DEMO_RECORDS), settings)
    assert len(parts["test"]) == 100 and len(parts["pool"]) == 50 and len(parts["stage1"]) == 20
    questions = [{r["question"] for r in part} for part in parts.values()]
    assert not (questions[0] & questions[1]) and not (questions[1] & questions[2]) and not (questions[0] & questions[2])
    assert {r["dataset"] for r in parts["test"]} == {"nq", "hotpotqa", "2wikimultihopqa", "pararel"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"consistency_judge": "llm"}, "consistency_judge"), ({"baselines": ["verbal5"]}, "verbal5"),
     ({"num_labels": 1}, "at least 2"), ({"label_budgets": [500]}, "label pool"), ({"num_draws": 0}, "num_draws"),
     ({"test_questions": -1}, "test_questions")],
)
def test_demo_settings_are_checked(overrides, message):
    with pytest.raises(ValueError, match=message):
        DemoSettings(**overrides)


def test_a_busy_machine_is_named_before_the_demo_runs(monkeypatch, caplog):
    import logging

    from elical_hf import demo

    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (3.5, 1.0, 1.0))
    with caplog.at_level(logging.WARNING, logger="elical_hf.demo"):
        assert demo.warn_if_busy() == 3.5
    assert "busy (load average 3.5 on 2 cores)" in caplog.text
    caplog.clear()
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (0.5, 1.0, 1.0))
    with caplog.at_level(logging.WARNING, logger="elical_hf.demo"):
        demo.warn_if_busy()
    assert not caplog.text
