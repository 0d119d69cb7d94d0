"""`elical-hf demo` end to end on a tiny random model (the real SmolLM2 run is what `make demo` does)."""

from __future__ import annotations

import configparser
import fnmatch
import io
import json
import os
import subprocess
import sys

import jinja2
import pytest

from elical_hf import AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
from elical_hf.cli import main as cli_main
from elical_hf.demo import DEMO_ASSETS, DEMO_RECORDS, REPORT_TEMPLATE, DemoSettings, demo_notes, demo_partitions
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
    parts = demo_partitions(DEMO_RECORDS, settings)
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


def test_in_child_runs_in_another_process_and_raises_its_error_here():
    from elical_hf.demo import in_child

    assert in_child(os.getpid) != os.getpid()
    assert in_child(sorted, [3, 1, 2]) == [1, 2, 3]
    with pytest.raises(ValueError, match="invalid literal"):
        in_child(int, "not a number")


@pytest.mark.parametrize("forced, child", [("1", True), ("0", False)])
def test_the_live_step_runs_in_a_child_where_the_policy_picks_bf16(monkeypatch, forced, child):
    from elical_hf import demo
    from elical_hf.utils import cpu

    monkeypatch.setenv("ELICAL_HF_CPU_BF16", forced)
    assert demo.live_in_child() is child
    monkeypatch.delenv("ELICAL_HF_CPU_BF16")
    flags = {"flags": "fpu avx2 avx512f" + (" amx_bf16" if child else "")}
    monkeypatch.setattr(cpu, "open", lambda *a, **k: io.StringIO("".join(f"{k}\t: {v}\n" for k, v in flags.items())),
                        raising=False)
    assert demo.live_in_child() is child


def test_the_demo_reads_its_committed_records_without_importing_torch():
    """The live step runs in a spawned child before the demo's own process imports torch: the process tree then holds
    one torch, not two (docs/benchmarks.md section 5)."""
    script = ("import sys; from elical_hf.demo import DemoSettings, demo_partitions; s = DemoSettings(); "
              "parts = demo_partitions(s.records, s); assert parts['test'] and parts['pool']; "
              "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.stdout.strip() == "[]"


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


def test_the_report_text_is_the_packaged_template_rendered():
    """`demo_notes` renders the Jinja template shipped in the package (setup.cfg's package data covers it) with the
    run's numbers, formatted as the report shows them; a name the template uses and the run lacks is an error."""
    settings = DemoSettings(label_budgets=[25, 100], num_draws=2)
    cell = {"auroc": -1.25, "auroc_ci": [-3.0, 0.5], "auroc_per_draw": [-2.0, -0.5]}
    live = {"precision": {"dtype": "float32"}, "consistency_judge": "lexical", "questions": 4, "tokens_per_second": 9.6,
            "accuracy": 25.0, "greedy_same_as_committed": 3, "baselines": {"Prob": [0.25, 0.75], "Verbal-0": [1.0]}}
    teacher = {"datasets": {"nq": {"verdict": "informative", "questions": 40, "positives": 9}, "other": {}}}
    text = demo_notes(settings, {"label pool": 250, "test (in-domain)": 400}, "EliCal ties.",
                      {"in-domain avg": cell, "nq": cell}, live,
                      {"questions": 64, "first_loss": 0.25, "last_loss": 0.125}, {"Prob": {"in-domain avg":
                      {"accuracy": 31.04}}}, 1600, {"EliCal": {25: 0.61, 100: 0.655}, "Cal-Only": {25: 0.6, 100: 0.66}},
                      {100: cell, 25: {"auroc": 1.0, "auroc_ci": [-2.0, 4.0]}}, teacher)
    assert text.startswith("**EliCal ties.** Per draw: -2.0, -0.5.\n")
    assert ("- nq: informative (teacher AUROC on 40 label-pool questions, 9 correct); EliCal - Cal-Only on its test "
            "questions -1.2 [-3.0, +0.5].\n\nBoth calibrate") in text  # `other` has no difference: no line
    rows = "| 25 | 61.0 | 60.0 | +1.0 [-2.0, 4.0] |\n| 100 | 65.5 | 66.0 | -1.2 [-3.0, 0.5] |\n\n"
    assert "|---:|---:|---:|---:|\n" + rows in text  # by budget, in order
    assert "(mean confidence: Prob 0.50, Verbal-0 1.00)" in text and "MSE 0.250 (first step) -> 0.125 (last)" in text
    assert "greedy accuracy 31.0% |" in text and text.endswith("Reproduce with `elical-hf demo`.\n")
    with pytest.raises(jinja2.UndefinedError, match="first_loss"):  # never a blank in the report
        demo_notes(settings, {}, "", {"in-domain avg": cell}, live, {}, {"P": {"in-domain avg": {"accuracy": 1}}},
                   0, {}, {}, {"datasets": {}})

    parser = configparser.ConfigParser()
    parser.read(os.path.join(os.path.dirname(__file__), "..", "setup.cfg"))
    patterns = [p.strip() for p in parser["options.package_data"]["*"].split(",")]
    package = os.path.dirname(os.path.dirname(DEMO_ASSETS))  # elical_hf/ (DEMO_ASSETS is resources/demo in it)
    shipped = os.path.relpath(os.path.join(DEMO_ASSETS, REPORT_TEMPLATE), package)
    parts = shipped.split(os.sep)
    assert any(len(p.split("/")) == len(parts) and all(map(fnmatch.fnmatch, parts, p.split("/"))) for p in patterns), \
        f"{shipped} is not in setup.cfg's package_data"


def test_the_shipped_calibrated_model_is_small_calibrated_and_carries_its_threshold():
    """The README's quickstart model (`DEMO_CALIBRATED`): EliCal without LoRA on the embedded default, both stages
    trained, its decision threshold saved; no weights over a few hundred KB and no tokenizer copy (the base's is
    used)."""
    from elical_hf.settings.configuration import ConfidenceConfig
    from elical_hf.models.default_model import DEFAULT_MODEL
    from elical_hf.demo import DEMO_CALIBRATED

    config = ConfidenceConfig.from_json_file(os.path.join(DEMO_CALIBRATED, "confidence_config.json"))
    assert config.base_model_name_or_path == DEFAULT_MODEL and config.use_lora is False
    assert config.trained_stages == ["elicitation", "calibration"]
    assert 0.0 < config.decision_threshold < 1.0
    assert config.training_history[-1]["num_examples"] >= 900  # stage 2 on 1,000 labels, less its 10% dev split
    files = set(os.listdir(DEMO_CALIBRATED))
    assert files == {"adapter_config.json", "adapter_model.safetensors", "chat_template.jinja",
                     "confidence_config.json", "README.md"}
    assert os.path.getsize(os.path.join(DEMO_CALIBRATED, "adapter_model.safetensors")) < 512 * 1024
    card = open(os.path.join(DEMO_CALIBRATED, "README.md"), encoding="utf-8").read()
    assert "## Provenance" in card and "experiments/build_demo_assets.py --only calibrated" in card
