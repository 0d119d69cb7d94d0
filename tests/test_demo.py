"""`elical-hf demo` end to end on a tiny random model (the real SmolLM2 run is what `make demo` does)."""

from __future__ import annotations

import json

import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.demo import DemoSettings
from elical_hf.signals.records import read_records


def test_demo_writes_a_complete_report(tiny_llama, tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--model_name_or_path", tiny_llama, "--output_dir", str(out), "--in_domain_per_dataset", "6",
            "--ood_per_dataset", "3", "--num_labels", "6", "--num_samples", "2", "--max_new_tokens", "3",
            "--num_train_epochs", "1", "--bootstrap", "20"]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"Report: {out}/report.md" in printed and "in-domain AUROC" in printed
    run = json.loads((out / "run.json").read_text())
    assert run["consistency_judge"] == "embedding"
    assert run["sizes"] == {"train": 17, "in-domain test": 7, "ood test": 9}
    table = json.loads((out / "results.json").read_text())
    assert list(table) == ["Prob", "N-Prob", "Consis-Lex", "Consis-Sem", "Verbal-0", "Verbal-10", "Eli-Only", "EliCal",
                           "Cal-Only"]
    assert table["EliCal"]["OOD avg"]["n"] == 9 and "ece_ci" in table["EliCal"]["nq"]
    report = (out / "report.md").read_text()
    assert "## In-domain and OOD averages" in report and "reliability.png" in report
    assert (out / "reliability.png").read_bytes()[:4] == b"\x89PNG"
    records = read_records(str(out / "records.parquet"))
    assert len(records) == 33 and all(len(r["consistency_judgement"]) == 2 for r in records)
    train_questions = {r["question"] for r in records if r["split"] == "train"}
    assert not train_questions & {r["question"] for r in records if r["split"] == "test"}
    for path in run["models"].values():
        assert len(AutoModelForConfidence.from_pretrained(path).confidence(["who wrote hamlet"])) == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"consistency_judge": "llm"}, "consistency_judge"), ({"baselines": ["verbal5"]}, "verbal5"),
     ({"test_fraction": 1.0}, "test_fraction"), ({"num_labels": 1}, "at least")],
)
def test_demo_settings_are_checked(overrides, message):
    with pytest.raises(ValueError, match=message):
        DemoSettings(**overrides)
