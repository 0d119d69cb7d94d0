"""`elical-hf threshold` (the alignment rule, and `--alpha/--delta` with a guarantee), what it saves with the model
(config and card), and `elical-hf evaluate`'s report of the saved rule's error rate and coverage."""

from __future__ import annotations

import json

import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from tests.tiny import mark_trained


def write_judged(folder, split: str, n: int, wrong_every: int, dataset: str = "nq") -> None:
    """`n` judged records of `dataset` in `split`; every `wrong_every`-th greedy answer is wrong."""
    from elical_hf.signals.records import save_records

    rows = []
    for i in range(n):
        correct = i % wrong_every != 0
        rows.append({
            "question": f"who wrote play number {i} of {dataset} {split}", "answer": ["shakespeare"], "dataset": dataset,
            "greedy_response": "shakespeare" if correct else "dickens", "greedy_correctness": correct,
            "greedy_tokens": ["a"], "greedy_logprobs": [-0.1], "greedy_cumulative_logprobs": -0.1,
            "sampling_response": ["shakespeare"], "sampling_correctness": [correct],
        })
    save_records(rows, folder / f"{dataset}_{split}.jsonl")


@pytest.fixture
def judged(tmp_path, tiny_llama):
    records = tmp_path / "records" / "tiny-model"
    records.mkdir(parents=True)
    write_judged(records, "train", 60, wrong_every=10)  # 10% wrong
    write_judged(records, "test", 40, wrong_every=10)
    torch.manual_seed(0)  # the random head's confidences decide which thresholds certify: the same head every run
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "model")
    mark_trained(tmp_path / "model")  # evaluate refuses untrained heads
    return tmp_path


def saved_config(folder) -> ConfidenceConfig:
    return ConfidenceConfig.from_json_file(folder / CONFIDENCE_CONFIG_NAME)


def test_threshold_with_a_guarantee_is_saved_with_the_model_and_reported_by_evaluate(judged, capsys):
    model = judged / "model"
    code = cli_main(["threshold", str(model), "--records", str(judged / "records"), "--alpha", "0.3", "--delta", "0.1",
                     "--split", "train", "--allow_other_model", "true"])
    assert code == 0
    config = saved_config(model)
    record = config.risk_control
    assert record["alpha"] == 0.3 and record["delta"] == 0.1 and record["n"] == 60 and record["split"] == "train"
    assert record["risk_upper_bound"] <= 0.3 and 0 < record["coverage"] <= 1
    assert config.decision_threshold is not None
    confidences = AutoModelForConfidence.from_pretrained(model).confidence(
        [f"who wrote play number {i} of nq train" for i in range(60)])
    assert record["coverage"] == pytest.approx(sum(c >= config.decision_threshold for c in confidences) / 60)
    card = (model / "README.md").read_text()
    card = " ".join(card.split())
    assert "error rate among answered questions exceeds **0.3** in at most **0.1** of calibration draws" in card
    assert "on 60 labelled" in card and "writing none counting as success" in card and "two fixed sequences" in card
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


def test_two_risks_are_saved_with_the_model_and_the_card(judged, capsys):
    model = judged / "model"
    assert cli_main(["threshold", str(model), "--records", str(judged / "records"), "--alpha", "0.3",
                     "--max_abstention", "0.5", "--allow_other_model", "true"]) == 0
    config = saved_config(model)
    record = config.risk_control
    assert record["max_abstention"] == 0.5 and record["alpha"] == 0.3 and record["delta"] == 0.1
    assert record["abstention_upper_bound"] <= 0.5 and record["risk_upper_bound"] <= 0.3
    assert record["abstention"] == pytest.approx(1 - record["coverage"])
    assert record["error_certified"] == config.decision_threshold <= record["abstention_certified"]
    assert "delta / 2" in record["method"]
    out = capsys.readouterr().out
    assert "error rate among answered <= 0.3 and abstention rate <= 0.5, together with probability >= 0.90" in out
    card = (model / "README.md").read_text()
    assert "abstention rate of at most\n**0.5**" in card and "both bounds hold together" in card


def test_two_risks_that_cannot_both_hold_write_nothing_and_say_why(judged, capsys):
    """An abstention bound of 1% cannot be certified on 60 rows at delta / 2 (even abstaining on none, 0.99^60 >
    0.05): one line, exit 2, the config untouched."""
    model = judged / "model"
    before = (model / CONFIDENCE_CONFIG_NAME).read_text()
    code = cli_main(["threshold", str(model), "--records", str(judged / "records"), "--alpha", "0.3",
                     "--max_abstention", "0.01", "--allow_other_model", "true"])
    assert code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]  # besides progress bars
    assert len(errors) == 1
    err = errors[0]
    assert ("No threshold keeps both the error rate among answered questions <= 0.3 and the abstention rate <= 0.01"
            in err)
    assert "the abstention rate is certified at no threshold" in err and "the lowest threshold certified" in err
    assert err.endswith("Nothing was written.")
    assert (model / CONFIDENCE_CONFIG_NAME).read_text() == before
    assert cli_main(["threshold", str(model), "--records", str(judged / "records"), "--max_abstention", "0.4"]) == 2
    assert "--max_abstention needs --alpha" in capsys.readouterr().err


@pytest.fixture
def two_domains(judged):
    """The judged fixture plus 12 train records of a second dataset (too few for a threshold of its own)."""
    from elical_hf.signals.records import save_records

    rows = [{"question": f"where is city number {i}", "answer": ["paris"], "dataset": "triviaqa",
             "greedy_response": "paris", "greedy_correctness": i % 3 != 0, "greedy_tokens": ["a"],
             "greedy_logprobs": [-0.1], "greedy_cumulative_logprobs": -0.1, "sampling_response": ["paris"],
             "sampling_correctness": [True]} for i in range(12)]
    save_records(rows, judged / "records" / "tiny-model" / "triviaqa_train.jsonl")
    return judged


def test_thresholds_per_domain_with_a_fallback(two_domains, capsys):
    from elical_hf.gate import thresholds_for
    from elical_hf.metrics import select_threshold

    model = two_domains / "model"
    assert cli_main(["threshold", str(model), "--records", str(two_domains / "records"), "--by", "dataset",
                     "--split", "train", "--allow_other_model", "true"]) == 0
    config = saved_config(model)
    table = config.domain_thresholds
    assert table["by"] == "dataset" and table["min_rows"] == 30 and set(table["domains"]) == {"nq", "triviaqa"}
    nq, trivia = table["domains"]["nq"], table["domains"]["triviaqa"]
    scorer = AutoModelForConfidence.from_pretrained(model)
    nq_conf = scorer.confidence([f"who wrote play number {i} of nq train" for i in range(60)])
    nq_correct = [int(i % 10 != 0) for i in range(60)]
    assert nq["decision_threshold"] == select_threshold(nq_conf, nq_correct) and nq["rows"] == 60
    assert nq["answered"] == sum(c >= nq["decision_threshold"] for c in nq_conf) and nq["fallback"] is None
    assert trivia["decision_threshold"] is None and trivia["rows"] == 12
    assert trivia["fallback"] == "12 rows, fewer than 30"
    trivia_conf = scorer.confidence([f"where is city number {i}" for i in range(12)])
    assert config.decision_threshold == select_threshold(
        nq_conf + trivia_conf, nq_correct + [int(i % 3 != 0) for i in range(12)])  # the pooled rule, all 72 rows
    assert thresholds_for(config, "nq") == (nq["decision_threshold"], None)
    assert thresholds_for(config, "triviaqa") == thresholds_for(config, None) == (config.decision_threshold, None)
    out = capsys.readouterr().out
    assert "dataset triviaqa: the pooled threshold (12 rows, fewer than 30)." in out and "dataset nq: " in out
    card = (model / "README.md").read_text()
    assert "Thresholds per `dataset`" in card and f"| triviaqa | {config.decision_threshold} (fallback) | 12 |" in card
    # ConfidenceConfig reads the map back strictly; a threshold without --by drops it
    assert ConfidenceConfig.from_json_file(model / CONFIDENCE_CONFIG_NAME).domain_thresholds == table
    assert cli_main(["threshold", str(model), "--records", str(two_domains / "records"),
                     "--allow_other_model", "true"]) == 0
    assert saved_config(model).domain_thresholds is None


def test_per_domain_guarantees_and_bad_columns(two_domains, capsys):
    model = two_domains / "model"
    assert cli_main(["threshold", str(model), "--records", str(two_domains / "records"), "--by", "dataset",
                     "--alpha", "0.3", "--min_domain_rows", "20", "--split", "train", "--allow_pooled_fallback", "true",
                     "--allow_other_model", "true"]) == 0, capsys.readouterr().err
    domains = saved_config(model).domain_thresholds["domains"]
    assert domains["nq"]["risk_control"]["risk_upper_bound"] <= 0.3 and domains["nq"]["risk_control"]["n"] == 60
    # 12 rows, fewer than --min_domain_rows 20: the pooled threshold, with the reason
    assert domains["triviaqa"]["decision_threshold"] is None
    assert domains["triviaqa"]["fallback"].startswith("12 rows, fewer than 20: the pooled guarantee")
    # with --min_domain_rows 10, triviaqa's own 12 rows (a third wrong) certify nothing at alpha 0.3: refused, since
    # the pooled threshold would be no guarantee for it; nothing written
    before = (model / CONFIDENCE_CONFIG_NAME).read_text()
    capsys.readouterr()
    assert cli_main(["threshold", str(model), "--records", str(two_domains / "records"), "--by", "dataset",
                     "--alpha", "0.3", "--min_domain_rows", "10", "--split", "train",
                     "--allow_other_model", "true"]) == 2
    error = capsys.readouterr().err
    assert "No threshold is certified for dataset triviaqa (no threshold keeps the error rate" in error
    assert "Nothing was written" in error and len([l for l in error.splitlines() if "error:" in l]) == 1
    assert (model / CONFIDENCE_CONFIG_NAME).read_text() == before
    assert cli_main(["threshold", str(model), "--records", str(two_domains / "records"), "--by", "category",
                     "--allow_other_model", "true"]) == 2
    assert "--by category: the records have no such column" in capsys.readouterr().err


def test_a_hand_edited_domain_map_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"domain_thresholds.domains\['nq'\]"):
        ConfidenceConfig(decision_threshold=0.5, domain_thresholds={"by": "dataset", "domains": {
            "nq": {"decision_threshold": 1.5}}})
    with pytest.raises(ValueError, match="needs a `decision_threshold`"):
        ConfidenceConfig(domain_thresholds={"by": "dataset", "domains": {"nq": {"decision_threshold": 0.5}}})


def test_evaluate_leaves_the_rows_a_threshold_was_chosen_on_out_of_its_decision_table(judged, capsys):
    """A threshold chosen on the held-out split (the default) and then evaluated on records holding those rows: its
    decision table scores only the others, and says how many it left out; set again elsewhere, nothing is left out."""
    model, records = judged / "model", judged / "records"
    write_judged(records / "tiny-model", "test", 30, wrong_every=10, dataset="squad")  # ood_test
    assert cli_main(["threshold", str(model), "--records", str(records), "--allow_other_model", "true"]) == 0
    out = judged / "report"
    assert cli_main(["evaluate", "--records", str(records), "--output_dir", str(out), "--allow_other_model", "true",
                     "--model", f"Tiny={model}"]) == 0
    decisions = json.loads((out / "decisions.json").read_text())["Tiny"]
    assert decisions["left_out"] > 0
    kept = decisions["columns"]["all"]["n"]
    assert kept == sum(cell["n"] for column, cell in decisions["columns"].items() if column != "all")
    assert "left out" in capsys.readouterr().err + (out / "report.md").read_text()
    # chosen on train rows instead: the test rows are all scored again
    assert cli_main(["threshold", str(model), "--records", str(records), "--split", "train",
                     "--allow_other_model", "true", "--allow_training_rows", "true"]) == 0
    assert cli_main(["evaluate", "--records", str(records), "--output_dir", str(judged / "report2"),
                     "--allow_other_model", "true", "--model", f"Tiny={model}"]) == 0
    again = json.loads((judged / "report2" / "decisions.json").read_text())["Tiny"]
    assert again["left_out"] == 0 and again["columns"]["all"]["n"] == kept + decisions["left_out"]
