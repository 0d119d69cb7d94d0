"""`elical-hf evaluate --report_to`: the results table and the plots go to the real trackio (its local store), read
back from that store."""

from __future__ import annotations

import json
import math
import sys

import pytest
from PIL import Image

from elical_hf.cli import main as cli_main
from elical_hf.steps.reporting import reporting_integrations, results_table
from tests.test_evaluation import records_and_model


@pytest.fixture
def trackio_store(tmp_path, monkeypatch):
    """trackio's local store (SQLite + media) in `tmp_path`: trackio reads `TRACKIO_DIR` once, when imported, into
    module constants; they are pointed there too, in case another test imported it first."""
    store = tmp_path / "trackio"
    monkeypatch.setenv("TRACKIO_DIR", str(store))
    import trackio  # noqa: F401

    paths = {"TRACKIO_DIR": store, "MEDIA_DIR": store / "media", "ARTIFACTS_DIR": store / "artifacts"}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "trackio":
            for attribute, path in paths.items():
                if hasattr(module, attribute):
                    monkeypatch.setattr(module, attribute, path)
    return store


def logged(project: str, run: str) -> dict:
    """Everything trackio stored for one run, later steps over earlier ones."""
    from trackio.sqlite_storage import SQLiteStorage

    assert SQLiteStorage.get_runs(project) == [run]
    values: dict = {}
    for entry in SQLiteStorage.get_logs(project, run):
        values.update(entry)
    return values


def test_evaluate_logs_the_table_and_plots_to_trackio(tiny_llama, tmp_path, trackio_store, capsys):
    records_and_model(tmp_path, tiny_llama)
    out = tmp_path / "report"
    assert cli_main(["evaluate", "--records", str(tmp_path / "records"), "--allow_other_model", "true",
                     "--output_dir", str(out), "--model", f"Tiny={tmp_path / 'model'}", "--baselines", "prob",
                     "--bootstrap", "20", "--report_to", "trackio", "--project", "elical-test",
                     "--run_name", "tiny-eval"]) == 0
    assert "trackio: logged" in capsys.readouterr().out
    table = json.loads((out / "results.json").read_text())
    values = logged("elical-test", "tiny-eval")
    checked = 0
    for method, row in table.items():  # every defined metric of results.json, as the Trainer names a test metric
        for column, cell in row.items():
            for metric in ("accuracy", "auroc", "ece", "alignment"):
                if cell[metric] is not None:
                    assert values[f"test/{method}/{column}/{metric}"] == pytest.approx(cell[metric])
                    checked += 1
    assert checked >= 2 * 4 * 3  # Prob and Tiny, nq / squad / two averages

    logged_rows = {(r["method"], r["dataset"]): r for r in values["test/results"]["_value"]}
    assert set(logged_rows) == {(method, column) for method, row in table.items() for column in row}
    nq = table["Tiny"]["nq"]
    assert logged_rows[("Tiny", "nq")]["n"] == nq["n"] == 30
    assert logged_rows[("Tiny", "nq")]["auroc"] == pytest.approx(nq["auroc"])
    assert (logged_rows[("Tiny", "nq")]["ece_low"], logged_rows[("Tiny", "nq")]["ece_high"]) == pytest.approx(
        tuple(nq["ece_ci"]))
    for plot, written in (("reliability", "reliability.png"), ("risk_coverage", "risk_coverage.png")):
        image = trackio_store / "media" / values[f"test/{plot}"]["file_path"]
        assert Image.open(image).size == Image.open(out / written).size


def test_an_unavailable_tracker_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import transformers.integrations

    out = tmp_path / "report"
    common = ["evaluate", "--records", str(tmp_path / "no-records"), "--output_dir", str(out)]
    assert cli_main([*common, "--report_to", "nope"]) == 2
    assert "--report_to nope: not an integration of transformers' report_to" in capsys.readouterr().err
    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: [])
    assert cli_main([*common, "--report_to", "trackio"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--report_to trackio: its package is not installed (`pip install trackio`)" in err
    assert not out.exists()  # refused before the records were even read
    assert reporting_integrations("all") == [] and reporting_integrations(["none"]) == []


def test_results_table_rows():
    table = {"A": {"nq": {"n": 4, "accuracy": 50.0, "auroc": math.nan, "ece": 10.0, "alignment": 75.0,
                          "ece_ci": [5.0, 15.0]}}}
    columns, rows = results_table(table)
    row = dict(zip(columns, rows[0], strict=True))
    assert row == {"method": "A", "dataset": "nq", "n": 4, "accuracy": 50.0, "auroc": None, "auroc_low": None,
                   "auroc_high": None, "ece": 10.0, "ece_low": 5.0, "ece_high": 15.0, "alignment": 75.0,
                   "alignment_low": None, "alignment_high": None}
