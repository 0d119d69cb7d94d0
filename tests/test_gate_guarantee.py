"""The gate's guarantee as users meet it: the simulation of `benchmarks/gate_guarantee.py` (validity of the old and new
Learn-Then-Test procedures in every setting, and the new one's power), its table in docs/gate.md, and what
`elical-hf threshold` checks and says (held-out rows, the guarantee at the calibration size, the pooled fallback)."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from elical_hf.metrics.risk_control import (
    DEFAULT_GRID, binomial_cdf, certify, grid_counts, min_answered, risk_controlling_threshold,
)
from tests.test_threshold import write_judged
from tests.tiny import mark_trained


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("gate_guarantee", os.path.join(REPO, "benchmarks", "gate_guarantee.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

DRAWS = 400
"""Calibration sets per setting, n and alpha here (54 cells, 21,600 sets, both procedures on each: a few seconds);
the benchmark runs 5,000."""


def _old_fixed_sequence(conf: np.ndarray, correct: np.ndarray, alpha: float, delta: float) -> float | None:
    """The procedure of earlier versions, written out row by row: from 0.99 down, thresholds answering fewer than
    `min_answered(alpha, delta)` rows passed over, the others tested at delta until the first non-rejection."""
    chosen = None
    for t in DEFAULT_GRID:
        answered = conf >= t
        n_t, k_t = int(answered.sum()), int((1 - correct[answered]).sum())
        if n_t < min_answered(alpha, delta):
            continue
        if binomial_cdf(k_t, n_t, alpha) > delta:
            break
        chosen = float(t)
    return chosen


def test_certify_on_counts_chooses_what_the_rows_give():
    """The benchmark tests counts; users pass rows. On drawn rows both paths agree, and the benchmark's "old"
    procedure (one sequence at delta from `min_answered` rows) is the earlier versions' row-by-row loop."""
    rng = np.random.default_rng(11)
    for draw in range(60):
        n = int(rng.choice([100, 300, 1000]))
        alpha = float(rng.choice([0.05, 0.1, 0.2]))
        conf = np.round(rng.uniform(size=n) ** rng.uniform(0.3, 2), 3)
        correct = (rng.uniform(size=n) < conf ** rng.uniform(0.5, 3)).astype(np.int64)
        grid, answered, errors = grid_counts(conf, correct)
        new = certify(answered, errors, n, alpha, 0.1)["chosen"][0]
        ours = risk_controlling_threshold(conf, correct, alpha, 0.1)["threshold"]
        assert (None if new < 0 else float(grid[new])) == ours
        old = certify(answered, errors, n, alpha, 0.1, sequences=[(min_answered(alpha, 0.1), 0.1)])["chosen"][0]
        assert (None if old < 0 else float(grid[old])) == _old_fixed_sequence(conf, correct, alpha, 0.1), draw


def test_true_risk_is_the_closed_form_where_there_is_one():
    cells = bench.cell_probabilities(bench._uniform, lambda c: 1.0 - c)  # calibrated: R(t) = (1 - t) / 2
    np.testing.assert_allclose(bench.true_risk(cells), (1 - DEFAULT_GRID) / 2, atol=1e-9)
    alpha = 0.1
    boundary = bench.SETTINGS["boundary"]
    cells = bench.cell_probabilities(boundary["density"], lambda c: boundary["wrong"](c, alpha))
    risk = bench.true_risk(cells)
    assert risk[DEFAULT_GRID == 0.5][0] == pytest.approx(alpha, abs=1e-9)
    assert (risk[DEFAULT_GRID < 0.5] > alpha).all() and (risk[DEFAULT_GRID > 0.5] < alpha).all()


@pytest.fixture(scope="module")
def simulated():
    return bench.simulate(DRAWS, seed=1)


def test_both_procedures_keep_the_guarantee_in_every_setting(simulated):
    """P(R(t_hat) > alpha) <= delta (no threshold counting as success) in each of the 54 settings x n x alpha cells,
    within three Monte-Carlo standard deviations. A rule without the bound (the lowest threshold whose calibration
    error rate is <= alpha) breaks it, so the check can fail."""
    slack = simulated["slack"]
    for row in simulated["rows"]:
        for method in ("old", "new"):
            assert row[method]["violation"] <= simulated["delta"] + slack, (row, method)
    cells = bench.cell_probabilities(bench._uniform, lambda c: 1.0 - c * c)  # overconfident
    answered, errors = bench.draw_counts(cells, 300, DRAWS, np.random.default_rng(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = errors / answered <= 0.1
    naive = np.where(ok.any(axis=1), DEFAULT_GRID.size - 1 - ok[:, ::-1].argmax(axis=1), -1)
    naive_violation = bench.measure(naive, bench.true_risk(cells), np.cumsum(cells.sum(axis=1)), 0.1)["violation"]
    assert naive_violation > simulated["delta"] + 3 * slack  # 0.47 here


def test_the_new_procedure_is_at_least_as_powerful_on_average(simulated):
    summary = bench.summary(simulated)
    assert summary["new_mean_written"] >= summary["old_mean_written"], summary
    assert summary["new_mean_coverage"] >= summary["old_mean_coverage"], summary
    calibrated = [r for r in simulated["rows"] if r["setting"] == "calibrated" and r["n"] == 1000 and r["alpha"] == 0.1]
    assert calibrated[0]["new"]["written"] > calibrated[0]["old"]["written"]  # where one early error ended it


def test_the_doc_table_is_the_committed_benchmark():
    results = json.load(open(os.path.join(REPO, "docs", "results", "gate_guarantee.json"), encoding="utf-8"))
    doc = open(os.path.join(REPO, "docs", "gate.md"), encoding="utf-8").read()
    start, end = doc.index(bench.MARKERS[0]) + len(bench.MARKERS[0]), doc.index(bench.MARKERS[1])
    assert doc[start:end].strip() == bench.markdown_table(results)
    for row in results["rows"]:  # the committed run keeps the guarantee too
        assert max(row["old"]["violation"], row["new"]["violation"]) <= results["delta"] + results["slack"], row
    assert results["summary"] == bench.summary(results)
    for key, value in bench.summary(results).items():  # the figures the text quotes
        assert f"{value:.3f}" in doc, key


# --- what `elical-hf threshold` checks and says ---


@pytest.fixture
def judged(tmp_path, tiny_llama):
    """60 train and 40 in_domain_test records of nq (10% wrong), and a saved model recording no training questions."""
    records = tmp_path / "records" / "tiny-model"
    records.mkdir(parents=True)
    write_judged(records, "train", 60, wrong_every=10)
    write_judged(records, "test", 40, wrong_every=10)
    torch.manual_seed(0)
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "model")
    mark_trained(tmp_path / "model")
    return tmp_path


def _record_training(model, questions) -> None:
    from elical_hf.models.saved_model import QUESTIONS_KEY, question_digests

    path = model / CONFIDENCE_CONFIG_NAME
    config = ConfidenceConfig.from_json_file(path)
    config.training_history = [{"stage": "elicitation", "num_examples": len(questions),
                                QUESTIONS_KEY: question_digests(questions)}]
    config.save_pretrained(model)


def test_the_default_split_is_held_out_and_training_rows_are_refused(judged, capsys):
    model, records = judged / "model", str(judged / "records")
    assert cli_main(["threshold", str(model), "--records", records, "--allow_other_model", "true"]) == 0
    out = capsys.readouterr().out
    assert saved(model).risk_control is None and "(on 40 in_domain_test records" in out
    assert "records no training questions for its calibration run(s)" in out  # an older save: said, not checked
    # stage 1 fitted on the train questions (in another case and spacing): --split train is refused in one line
    _record_training(model, [f"Who  wrote play number {i} of NQ  TRAIN" for i in range(60)])
    before = (model / CONFIDENCE_CONFIG_NAME).read_text()
    assert cli_main(["threshold", str(model), "--records", records, "--split", "train",
                     "--allow_other_model", "true"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "60 of the 60 'train' calibration rows are questions" in errors[0]
    assert "--allow_training_rows" in errors[0] and (model / CONFIDENCE_CONFIG_NAME).read_text() == before
    assert cli_main(["threshold", str(model), "--records", records, "--split", "train", "--allow_training_rows",
                     "true", "--allow_other_model", "true"]) == 0
    assert "60 of the 60 'train' rows were trained on" in capsys.readouterr().out
    assert cli_main(["threshold", str(model), "--records", records, "--alpha", "0.3", "--allow_other_model",
                     "true"]) == 0  # the held-out rows pass the check
    assert saved(model).risk_control["split"] == "in_domain_test" and "training_rows" not in saved(model).risk_control


def saved(model) -> ConfidenceConfig:
    return ConfidenceConfig.from_json_file(model / CONFIDENCE_CONFIG_NAME)


def test_the_trainer_records_its_questions(tiny_llama, tmp_path):
    from elical_hf import ConfidenceTrainer, ConfidenceTrainingArguments
    from elical_hf.models.saved_model import QUESTIONS_KEY, question_digests, trained_question_overlap

    questions = ["who wrote hamlet", "capital of france", "largest river", "first king"]
    args = ConfidenceTrainingArguments(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2,
                                       report_to="none", save_strategy="no")
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    ConfidenceTrainer(model, args=args, train_dataset={"question": questions, "consistency": [0.9, 0.8, 0.1, 0.2]}
                      ).train()
    entry = model.confidence_config.training_history[-1]
    assert entry[QUESTIONS_KEY] == question_digests(reversed(questions)) and len(entry[QUESTIONS_KEY]) == 32
    assert trained_question_overlap(model.confidence_config, ["Who wrote Hamlet", "who wrote macbeth"]) == (1, [])


def test_the_guarantee_is_stated_at_the_calibration_size_with_its_power(judged, capsys):
    model, records = judged / "model", str(judged / "records")
    assert cli_main(["threshold", str(model), "--records", records, "--split", "train", "--alpha", "0.3",
                     "--allow_other_model", "true"]) == 0
    out = capsys.readouterr().out
    assert ("Guarantee: error rate among answered <= 0.3 with probability >= 0.90 over the draw of calibration sets "
            "of n = 60 rows like these, writing no threshold counting as meeting it") in out
    assert "at n = 60 a threshold is certifiable only if it answers at least 8 rows (2 fixed sequence(s))" in out
    assert "Power: " in out and "warning: low power" not in out
    # at alpha 0.12 these 60 rows (10% wrong) certify something only by luck: the warning says how many rows would do
    assert cli_main(["threshold", str(model), "--records", records, "--split", "train", "--alpha", "0.12",
                     "--allow_other_model", "true"]) == 2
    error = capsys.readouterr().err
    assert "rows like these would certify one in 80% of draws" in error or "may not allow it" in error


def test_power_is_low_where_the_calibration_set_is_small():
    from elical_hf.metrics.risk_control import certification_power, rows_for_power

    rng = np.random.default_rng(4)
    conf = rng.uniform(size=200)
    correct = (rng.uniform(size=200) < conf).astype(int)  # calibrated: R(t) = (1 - t) / 2
    assert certification_power(conf, correct, 0.05, 0.1) < 0.5 < certification_power(conf, correct, 0.2, 0.1)
    needed = rows_for_power(conf, correct, 0.05, 0.1)
    assert needed is not None and needed > 200
    assert certification_power(conf, correct, 0.05, 0.1, rows=needed) >= 0.8
    assert rows_for_power(conf, 1 - correct, 0.05, 0.1) is None  # anti-calibrated: no size helps


def test_a_small_domain_on_the_pooled_fallback_needs_an_opt_in_under_alpha(judged, capsys):
    from elical_hf.signals.records import save_records

    rows = [{"question": f"where is city number {i}", "answer": ["paris"], "dataset": "triviaqa",
             "greedy_response": "paris", "greedy_correctness": i % 3 != 0, "greedy_tokens": ["a"],
             "greedy_logprobs": [-0.1], "greedy_cumulative_logprobs": -0.1, "sampling_response": ["paris"],
             "sampling_correctness": [True]} for i in range(12)]
    save_records(rows, judged / "records" / "tiny-model" / "triviaqa_train.jsonl")
    model, records = judged / "model", str(judged / "records")
    argv = ["threshold", str(model), "--records", records, "--split", "train", "--by", "dataset", "--alpha", "0.3",
            "--min_domain_rows", "20", "--allow_other_model", "true"]
    before = (model / CONFIDENCE_CONFIG_NAME).read_text()
    assert cli_main(argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "dataset triviaqa (12 rows): fewer than --min_domain_rows 20 rows" in errors[0]
    assert "--allow_pooled_fallback" in errors[0] and (model / CONFIDENCE_CONFIG_NAME).read_text() == before
    assert cli_main([*argv, "--allow_pooled_fallback", "true"]) == 0
    fallback = saved(model).domain_thresholds["domains"]["triviaqa"]["fallback"]
    assert fallback.startswith("12 rows, fewer than 20: the pooled guarantee bounds the error rate over the mix")
    assert f"dataset triviaqa: the pooled threshold ({fallback})." in capsys.readouterr().out
