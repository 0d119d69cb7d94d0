"""Drift of served confidences from the calibration set's: the two-sample test (`elical_hf.evaluation.drift`) and
`elical-hf monitor` on the reference `elical-hf threshold` saves with the model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from elical_hf.cli import main as cli_main
from elical_hf.evaluation.drift import REFERENCE_NAME, confidence_drift, load_reference, save_reference
from tests.hub_server import go_offline, hub  # noqa: F401 - the fixture
from tests.test_threshold import judged  # noqa: F401 - the fixture


def test_the_test_tells_a_shift_from_noise():
    """Same distribution: p-values spread over [0, 1], so drift is reported in about `significance` of the draws;
    a shifted distribution (Beta(2, 2) moved to Beta(3, 2), mean 0.5 -> 0.6) is caught almost always."""
    rng = np.random.default_rng(0)
    same = [confidence_drift(rng.beta(2, 2, 500), rng.beta(2, 2, 300), 0.05, shift=None)["drift"] for _ in range(200)]
    shifted = [confidence_drift(rng.beta(2, 2, 500), rng.beta(3, 2, 300), 0.05, shift=None)["drift"]
               for _ in range(50)]
    assert np.mean(same) <= 0.05 + 0.05 and np.mean(shifted) >= 0.9
    result = confidence_drift([0.1, 0.2, 0.3], [0.7, 0.8, 0.9, 0.95])
    assert result["statistic"] == 1.0 and result["n_reference"] == 3 and result["n_new"] == 4
    assert result["mean_new"] == pytest.approx(0.8375)
    assert confidence_drift([0.5] * 50, [0.5] * 40)["verdict"].startswith("no evidence of drift")
    with pytest.raises(ValueError, match="empty"):
        confidence_drift([], [0.5])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        confidence_drift([0.5], [1.5])


def test_the_reference_is_read_strictly(tmp_path):
    with pytest.raises(ValueError, match=f"has no {REFERENCE_NAME}"):
        load_reference(tmp_path)
    (tmp_path / REFERENCE_NAME).write_text('{"confidences": [0.5, "x"]}')
    with pytest.raises(ValueError, match="non-empty list `confidences`"):
        load_reference(tmp_path)
    save_reference(tmp_path, [0.25, 0.75], {"records": "r", "split": "train"})
    assert load_reference(tmp_path) == {"records": "r", "split": "train", "saved_for": None,
                                        "confidences": [0.25, 0.75]}  # no confidence_config.json to belong to


def test_a_reference_of_another_state_of_the_model_is_refused(tmp_path):
    """The reference belongs to the trained model and threshold it was saved with: training again in the same
    folder, or setting the threshold another way, leaves a file of other confidences, refused in one line."""
    config = tmp_path / "confidence_config.json"
    config.write_text(json.dumps({"decision_threshold": 0.4, "training_history": [{"epochs": 1}]}))
    save_reference(tmp_path, [0.25, 0.75], {"records": "r", "split": "train"})
    assert load_reference(tmp_path)["confidences"] == [0.25, 0.75]
    config.write_text(json.dumps({"decision_threshold": 0.45, "training_history": [{"epochs": 1}]}))
    with pytest.raises(ValueError, match=r"decision threshold 0.4 and the model has 0.45 now\. Run `elical-hf "
                                         "threshold` again"):
        load_reference(tmp_path)
    config.write_text(json.dumps({"decision_threshold": None, "training_history": [{"epochs": 2}]}))
    with pytest.raises(ValueError, match="has None now, after training again"):
        load_reference(tmp_path)


def test_monitor_compares_new_questions_with_the_saved_calibration_confidences(judged, tmp_path, capsys):
    model, records = judged / "model", judged / "records"
    calibration = str(records / "tiny-model" / "nq_test.jsonl")  # the held-out split `threshold` calibrates on
    assert cli_main(["monitor", str(model), "--questions", calibration]) == 2
    assert f"has no {REFERENCE_NAME}" in capsys.readouterr().err  # before `threshold` saved one
    assert cli_main(["threshold", str(model), "--records", str(records), "--allow_other_model", "true"]) == 0
    saved = json.loads((model / REFERENCE_NAME).read_text())
    assert len(saved["confidences"]) == 40 and saved["split"] == "in_domain_test" and saved["records"] == str(records)
    capsys.readouterr()

    # the calibration questions themselves: the same confidences, no drift (exit 0), a plot and a JSON file
    out, plot = tmp_path / "drift.json", tmp_path / "drift.png"
    assert cli_main(["monitor", str(model), "--questions", calibration, "--output", str(out), "--plot", str(plot)]) == 0
    result = json.loads(out.read_text())
    assert result["statistic"] == pytest.approx(0.0, abs=1e-9) and result["p_value"] == pytest.approx(1.0)
    assert result["drift"] is False and result["n_new"] == 40 and result["answered_new"] == result["answered_reference"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "KS statistic 0.000" in printed and "No evidence of drift" in printed

    # the same questions against a reference whose confidences all sit above theirs: drift, exit 1
    save_reference(model, [min(1.0, c + 0.3) for c in saved["confidences"]], {"records": "shifted", "split": "train"})
    assert cli_main(["monitor", str(model), "--questions", calibration]) == 1
    assert "Drift: the new questions' confidences differ from the calibration set's" in capsys.readouterr().out

    # --reference records are scored again instead of the saved file (by default the split `threshold` uses)
    code = cli_main(["monitor", str(model), "--questions", str(records / "tiny-model" / "nq_train.jsonl"),
                     "--reference", str(records), "--output", str(out)])
    result = json.loads(out.read_text())
    assert result["n_reference"] == 40 and result["n_new"] == 60 and code == int(result["drift"])
    assert cli_main(["monitor", str(model), "--questions", str(records), "--plot", "x.pdf"]) == 2
    assert "--plot must name a .png file" in capsys.readouterr().err


def test_monitor_scores_each_distinct_question_once(judged, tmp_path, capsys):
    """A served log asks questions again (here each 1-5 times, some with stray spaces): each distinct question is
    scored and tested once, on both sides, and the output says so, with the test's power and, for scheduled checks,
    what they risk together."""
    model, records = judged / "model", judged / "records"
    assert cli_main(["threshold", str(model), "--records", str(records), "--allow_other_model", "true"]) == 0
    saved = json.loads((model / REFERENCE_NAME).read_text())
    assert saved["question_ids"] == list(range(40))  # which calibration rows ask the same question: none here
    rows = [json.loads(line) for line in (records / "tiny-model" / "nq_test.jsonl").read_text().splitlines()]
    served = tmp_path / "served.jsonl"
    served.write_text("".join(json.dumps({"question": " " * (k % 2) + row["question"]}) + "\n"
                              for i, row in enumerate(rows) for k in range(1 + i % 5)))
    out = tmp_path / "drift.json"
    capsys.readouterr()
    assert cli_main(["monitor", str(model), "--questions", str(served), "--checks_per_period", "30",
                     "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["rows_new"], result["n_new"], result["rows_reference"], result["n_reference"]) == (120, 40, 40, 40)
    assert result["statistic"] == pytest.approx(0.0, abs=1e-9) and 0.0 <= result["power"] <= 1.0
    assert result["schedule"]["false_alarm"] == pytest.approx(1 - 0.99 ** 30)
    printed = capsys.readouterr().out
    assert "(new: 120 rows, 40 distinct questions scored; calibration: 40 rows, 40 distinct questions;" in printed
    assert f"Power: at these sizes the test detects a shift of 0.04 in every confidence with probability " \
           f"{result['power']:.2f} (400 seeded simulations" in printed
    assert "Schedule: 30 checks per period at 0.01 raise a false alarm in up to 26% of periods" in printed
    assert "run each at --significance 0.00033 (Bonferroni)" in printed

    # calibration rows that repeat a question count once too; a reference saved without ids counts every row
    save_reference(model, saved["confidences"] + saved["confidences"][:10],
                   {"records": "r", "split": "train", "question_ids": list(range(40)) + list(range(10))})
    assert cli_main(["monitor", str(model), "--questions", str(served), "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["rows_reference"], result["n_reference"], result["schedule"]) == (50, 40, None)
    save_reference(model, saved["confidences"] + saved["confidences"][:10], {"records": "r", "split": "train"})
    assert cli_main(["monitor", str(model), "--questions", str(served), "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["n_reference"] == 50 and "without question ids, so every row counts" in result["reference"]
    assert cli_main(["monitor", str(model), "--questions", str(served), "--checks_per_period", "0"]) == 2
    assert "--checks_per_period must be at least 1" in capsys.readouterr().err


def test_the_saved_reference_is_published_with_the_model(hub, tmp_path, judged):  # noqa: F811 - the fixture
    """`push` publishes only the files a model folder is known to hold: the reference is one of them."""
    from elical_hf import push_folder
    from tests.test_hub import upload_base

    model, records = judged / "model", judged / "records"
    assert cli_main(["threshold", str(model), "--records", str(records), "--allow_other_model", "true"]) == 0
    upload_base(tmp_path)
    push_folder(model, "alice/monitored", base_model_name_or_path="tiny/llama")
    saved = json.loads((model / REFERENCE_NAME).read_text())
    assert json.loads(hub.files("alice/monitored")[REFERENCE_NAME]) == {**saved, "records": "records"}  # no local path
    # a served Hub model is monitored from its repository's reference, as a folder is from its own
    questions = str(records / "tiny-model" / "nq_test.jsonl")
    assert cli_main(["monitor", "alice/monitored", "--questions", questions, "--output", str(tmp_path / "d.json")]) == 0
    result = json.loads((tmp_path / "d.json").read_text())
    assert result["n_reference"] == 40 and result["p_value"] == pytest.approx(1.0)
