"""`diagnose` / `elical-hf diagnose`: the teacher's AUROC per dataset with an interval and a verdict."""

from __future__ import annotations

import json
import random

import pytest

from elical_hf import diagnose
from elical_hf.cli import main as cli_main
from elical_hf.evaluation.diagnosis import teacher_verdict
from elical_hf.metrics.functional import auroc


def record(i: int, dataset: str, consistency: list[float], correct: bool) -> dict:
    return {"id": f"{dataset}-{i}", "question": f"question {i} of {dataset}?", "answer": ["x"], "dataset": dataset,
            "greedy_response": "x", "sampling_response": ["x"] * len(consistency), "greedy_correctness": correct,
            "sampling_correctness": [correct] * len(consistency), "consistency_judgement": consistency,
            "split": "train"}


def make_records(n: int = 60, seed: int = 0) -> list[dict]:
    """`good`: consistency tracks correctness; `inverted`: it anti-tracks it; `noise`: unrelated."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        correct = i % 3 == 0
        high = [float(rng.random() < 0.8) for _ in range(5)]
        low = [float(rng.random() < 0.2) for _ in range(5)]
        rows.append(record(i, "good", high if correct else low, correct))
        rows.append(record(i, "inverted", low if correct else high, correct))
        rows.append(record(i, "noise", [float(rng.random() < 0.5) for _ in range(5)], correct))
    return rows


def test_per_dataset_auroc_interval_and_verdicts():
    rows = make_records()
    report = diagnose(rows, bootstrap=200)
    cells = report["datasets"]
    assert cells["good"]["verdict_key"] == "informative" and cells["inverted"]["verdict_key"] == "inverted"
    assert cells["noise"]["verdict_key"] in ("weak", "informative", "inverted")
    good = [r for r in rows if r["dataset"] == "good"]
    expected = 100 * auroc([sum(r["consistency_judgement"]) / 5 for r in good], [r["greedy_correctness"] for r in good])
    assert cells["good"]["auroc"] == pytest.approx(expected)
    low, high = cells["good"]["auroc_ci"]
    assert low <= cells["good"]["auroc"] <= high
    assert cells["good"]["questions"] == 60 and cells["good"]["positives"] == 20
    assert report["overall"]["questions"] == 180 and report["skipped"] == 0
    assert "stage 1 would teach the opposite of correctness there" in cells["inverted"]["verdict"]


def test_too_few_labels_and_rows_without_judgements():
    rows = [record(i, "tiny", [1.0, 0.0], i == 0) for i in range(4)] + [
        {**record(9, "tiny", [1.0], True), "consistency_judgement": None, "consistency_lexical": None}]
    report = diagnose(rows, bootstrap=10)
    assert report["datasets"]["tiny"]["verdict_key"] == "too_few" and report["skipped"] == 1
    with pytest.raises(ValueError, match="elical-hf judge"):
        diagnose([{**r, "consistency_judgement": None, "greedy_correctness": None} for r in rows])


@pytest.mark.parametrize("auroc_value, low, high, key", [(70, 62, 78, "informative"), (40, 35, 45, "inverted"),
                                                         (55, 48, 62, "weak"), (58, 51, 65, "weak")])
def test_verdict_thresholds(auroc_value, low, high, key):
    assert teacher_verdict(auroc_value, low, high, 50, 50)[0] == key


def test_cli_prints_a_table_and_a_verdict_per_dataset(tmp_path, capsys):
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_records()))
    out = tmp_path / "diagnosis.json"
    assert cli_main(["diagnose", "--records", str(path), "--bootstrap", "100", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| good | 60 | 20 |" in text and "inverted: consistency separates" in text and "overall:" in text
    assert json.loads(out.read_text())["datasets"]["good"]["verdict_key"] == "informative"
    assert cli_main(["diagnose", "--records", str(path), "--bootstrap", "0"]) == 2


def test_split_is_a_paper_split_as_every_split_option_reads_it():
    """`split` keeps the records of one paper split (NQ's own `test` file is `in_domain_test`, SQuAD's is `ood_test`),
    as threshold and probe-layers read `--split`; a split word that is not a paper split is refused in one line."""
    rows = [{**r, "dataset": "nq", "split": "test", "id": f"nq-test-{i}"} for i, r in enumerate(make_records(20))]
    rows += [{**r, "dataset": "squad", "split": "test", "id": f"squad-{i}"} for i, r in enumerate(make_records(20, 1))]
    report = diagnose(rows, bootstrap=50, split="in_domain_test")
    assert set(report["datasets"]) == {"nq"} and report["overall"]["questions"] == 60
    assert set(diagnose(rows, bootstrap=50, split="ood_test")["datasets"]) == {"squad"}
    with pytest.raises(ValueError) as error:
        diagnose(rows, bootstrap=50, split="test")
    assert "\n" not in str(error.value) and "test" in str(error.value)
    with pytest.raises(ValueError, match="No records left .*split=\\['train'\\].*splits: in_domain_test, ood_test"):
        diagnose(rows, bootstrap=50, split="train")
