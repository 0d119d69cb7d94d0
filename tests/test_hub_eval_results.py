"""`push` publishes a model's evaluation results as the Hub's `.eval_results/*.yaml` (and keeps them in the card's
`model-index`), through the loopback Hub stand-in and the real `huggingface_hub` client and parser."""

from __future__ import annotations

import json
import logging
from datetime import datetime

import pytest
import yaml
from huggingface_hub import ModelCard, parse_eval_result_entries

from elical_hf import EvalResultsSource, push_folder
from elical_hf.cli import main as cli_main
from elical_hf.evaluation.tables import evaluate_table, write_report
from elical_hf.models.model_card import record_folder_evaluations
from elical_hf.publishing.eval_results import EVAL_RESULTS_FILE
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.test_evaluation import synthetic
from tests.test_hub import random_model, upload_base


@pytest.fixture
def model_folder(hub, tmp_path):
    """A saved confidence model of the Hub base `tiny/llama`, with a generated card and no evaluation yet."""
    upload_base(tmp_path)
    folder = tmp_path / "model"
    random_model("tiny/llama").save_pretrained(folder)
    return folder


def published_entries(hub, repo_id: str) -> dict[tuple[str, str], object]:
    """(dataset id, task id) -> entry of the repo's `.eval_results` file, read back with huggingface_hub's parser."""
    data = yaml.safe_load(hub.files(repo_id)[EVAL_RESULTS_FILE])
    return {(entry.dataset_id, entry.task_id): entry for entry in parse_eval_result_entries(data)}


def card_results(hub, repo_id: str) -> dict[tuple[str, str], float]:
    card = ModelCard(hub.files(repo_id)["README.md"].decode())
    return {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results or []}


def test_the_cards_evaluations_become_eval_results(hub, model_folder, caplog):
    record_folder_evaluations(model_folder, {"nq": {"auroc": 81.5, "ece": 4.0, "alignment": 70.25},
                                             "in-domain avg": {"auroc": 79.0, "ece": None, "alignment": 68.0}},
                              dataset_id="alice/honestybench")
    record_folder_evaluations(model_folder, {"squad": {"auroc": 60.0, "ece": 9.0, "alignment": 55.0}})  # local
    with caplog.at_level(logging.INFO, logger="elical_hf.publishing.eval_results"):
        push_folder(model_folder, "alice/evaluated")
    entries = published_entries(hub, "alice/evaluated")
    assert {key: entry.value for key, entry in entries.items()} == {
        ("alice/honestybench", "nq_auroc"): pytest.approx(0.815), ("alice/honestybench", "nq_ece"): pytest.approx(0.04),
        ("alice/honestybench", "nq_alignment"): 70.25, ("alice/honestybench", "in_domain_avg_auroc"): 0.79,
        ("alice/honestybench", "in_domain_avg_alignment"): 68.0,  # ECE undefined (null): no entry
    }
    nq = entries[("alice/honestybench", "nq_auroc")]
    assert nq.source_url == f"{hub.url}/alice/evaluated" and nq.source_name == "elical-hf evaluate"
    assert "AUROC" in nq.notes and nq.date is None  # no date known: the Hub takes the commit's time
    assert "squad" in caplog.text and "--eval_dataset_id" in caplog.text  # local records: said, left out
    # The model-index stays in the card, with every evaluation (the local one too).
    assert card_results(hub, "alice/evaluated") == {
        ("nq", "auroc"): pytest.approx(0.815), ("nq", "ece"): pytest.approx(0.04), ("nq", "alignment"): 70.25,
        ("in-domain avg", "auroc"): 0.79, ("in-domain avg", "alignment"): 68.0, ("squad", "auroc"): 0.6,
        ("squad", "ece"): pytest.approx(0.09), ("squad", "alignment"): 55.0}

    push_folder(model_folder, "alice/evaluated", eval_results=EvalResultsSource(dataset_id="alice/local-records"))
    entries = published_entries(hub, "alice/evaluated")  # the file is replaced whole
    assert entries[("alice/local-records", "squad_auroc")].value == 0.6
    assert entries[("alice/honestybench", "nq_auroc")].value == pytest.approx(0.815)  # its own dataset id wins
    assert len(entries) == 8


def test_an_evaluate_report_is_published_with_its_date(hub, model_folder, tmp_path):
    correct, datasets, splits, sources = synthetic()
    table = evaluate_table(correct, datasets, splits, sources)
    write_report(table, str(tmp_path / "report"))  # results.json as `elical-hf evaluate` writes it
    report = EvalResultsSource(tmp_path / "report", method="good", dataset_id="alice/bench")
    push_folder(model_folder, "alice/reported", eval_results=report)
    entries = published_entries(hub, "alice/reported")
    assert len(entries) == 5 * 3  # nq, hotpotqa, squad, in-domain avg, OOD avg x AUROC, ECE, alignment
    for column in ("nq", "squad", "OOD avg"):
        task = column.lower().replace(" ", "_")
        assert entries[("alice/bench", f"{task}_auroc")].value == pytest.approx(table["good"][column]["auroc"] / 100)
        assert entries[("alice/bench", f"{task}_alignment")].value == pytest.approx(table["good"][column]["alignment"])
    written = datetime.fromisoformat(entries[("alice/bench", "nq_ece")].date)
    assert abs(written.timestamp() - (tmp_path / "report" / "results.json").stat().st_mtime) < 1
    results = card_results(hub, "alice/reported")  # and in the card's model-index
    assert results[("hotpotqa", "ece")] == pytest.approx(table["good"]["hotpotqa"]["ece"] / 100)

    push_folder(model_folder, "alice/reported", eval_results=report)  # pushed again: the file is kept
    assert len(published_entries(hub, "alice/reported")) == 15
    push_folder(model_folder, "alice/reported")  # the folder's card holds no result: none is left behind
    assert EVAL_RESULTS_FILE not in hub.files("alice/reported") and card_results(hub, "alice/reported") == {}


def test_no_results_no_file_and_bad_reports_publish_nothing(hub, model_folder, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="elical_hf.publishing.eval_results"):
        push_folder(model_folder, "alice/unevaluated")
    assert EVAL_RESULTS_FILE not in hub.files("alice/unevaluated") and "no .eval_results" in caplog.text

    correct, datasets, splits, sources = synthetic()
    write_report(evaluate_table(correct, datasets, splits, sources), str(tmp_path / "report"))
    (tmp_path / "not-json").write_text("{")
    for source, message in [(EvalResultsSource(tmp_path / "report"), "2 methods \\(good, noise\\).*--eval_method"),
                            (EvalResultsSource(tmp_path / "report", "bad"), "'bad' is not a row"),
                            (EvalResultsSource(tmp_path / "not-json"), "not the results.json"),
                            (EvalResultsSource(tmp_path / "missing.json"), "not the results.json"),
                            (EvalResultsSource(method="good"), "pass the report too"),
                            (EvalResultsSource(dataset_id="no namespace"), "Invalid Hub repo id")]:
        with pytest.raises(ValueError, match=message):
            push_folder(model_folder, "alice/refused", eval_results=source)
    assert hub.repo("alice/refused") is None


def test_a_card_of_ones_own_keeps_its_model_index(hub, model_folder, tmp_path):
    readme = model_folder / "README.md"
    readme.write_text("---\nlicense: mit\n---\n\nMy own card.\n")
    correct, datasets, splits, sources = synthetic()
    write_report(evaluate_table(correct, datasets, splits, {"good": sources["good"]}), str(tmp_path / "report"))
    push_folder(model_folder, "alice/own", eval_results=EvalResultsSource(tmp_path / "report", dataset_id="a/b"))
    card = ModelCard(hub.files("alice/own")["README.md"].decode())
    assert "My own card." in card.text and card.data.eval_results is None and card.data.base_model == "tiny/llama"
    assert len(published_entries(hub, "alice/own")) == 15


def test_cli_push_eval_results(hub, model_folder, tmp_path, capsys):
    correct, datasets, splits, sources = synthetic()
    table = evaluate_table(correct, datasets, splits, sources)
    write_report(table, str(tmp_path / "report"))
    assert cli_main(["push", str(model_folder), "alice/cli-evals", "--eval_results",
                     str(tmp_path / "report" / "results.json"), "--eval_method", "noise",
                     "--eval_dataset_id", "alice/bench"]) == 0
    assert json.loads(capsys.readouterr().out)["repo_id"] == "alice/cli-evals"
    entries = published_entries(hub, "alice/cli-evals")
    assert entries[("alice/bench", "squad_auroc")].value == pytest.approx(table["noise"]["squad"]["auroc"] / 100)
    assert cli_main(["push", str(tmp_path / "report"), "alice/data", "--kind", "honestybench", "--eval_method",
                     "noise"]) == 2
    assert "--eval_method is about a model's evaluation results" in capsys.readouterr().err


def test_a_set_on_two_splits_gets_a_task_per_split():
    from elical_hf.models.model_card import ConfidenceModelCardData
    from elical_hf.publishing.eval_results import eval_result_entries

    data = ConfidenceModelCardData()
    data.add_evaluation("nq", {"auroc": 0.8}, "in_domain_test", dataset_id="a/bench")
    data.add_evaluation("nq", {"auroc": 0.7}, "test", dataset_id="a/bench")
    data.add_evaluation("squad", {"ece": 0.1}, "test", dataset_id="a/bench")
    entries = eval_result_entries(data.evaluations, date="2026-01-02", dated=data.evaluations[2:])
    assert [(e.task_id, e.value, e.date) for e in entries] == [
        ("nq_auroc_in_domain_test", 0.8, None), ("nq_auroc_test", 0.7, None), ("squad_ece", 0.1, "2026-01-02")]
