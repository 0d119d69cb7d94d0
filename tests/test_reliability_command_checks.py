"""Round 3 of the reliability probes (issue 38), the commands: the right records at train time too, no output over an
input, only a model's own files published, strict JSON, checks before any work, no lock files left behind, local
paths never looked up on the Hub."""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import pytest

from elical_hf.training import recipe
from elical_hf.utils.atomic import cache_lock, one_writer
from elical_hf.cli import main as cli_main
from elical_hf.signals.records import save_records
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.reliability import case
from tests.test_reliability_records_and_settings import records_of


def _no_work(*args, **kwargs):
    raise AssertionError("the command started its work before checking its options")


@pytest.fixture
def no_training(monkeypatch) -> list:
    """`recipe.train_elical` replaced by a stand-in that records its calls (the refusals under test come before)."""
    calls: list = []
    monkeypatch.setattr(recipe, "train_elical", lambda *args, **kwargs: calls.append(args) or {})
    return calls


def strict_json(text: str):
    """`json.loads` that refuses `NaN` / `Infinity`, as strict parsers do."""
    def refuse(word):
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


@case("silent", "`elical-hf train --model_name_or_path M` on records of another model (or pooling several models)",
      "refused before training: `--elicitation_data (…) holds the answers of HuggingFaceTB/SmolLM2-135M-Instruct, "
      "but the base model you train on is …`; `--allow_other_model` trains on them anyway")
def test_train_refuses_another_models_records(tiny_llama, tmp_path, no_training, raise_user_errors):
    path = save_records(records_of("HuggingFaceTB/SmolLM2-135M-Instruct"), tmp_path / "smol.jsonl")
    argv = ["train", "--model_name_or_path", tiny_llama, "--elicitation_data", path, "--calibration_data", path,
            "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"--elicitation_data \(.*\) holds the answers of "
                                         "HuggingFaceTB/SmolLM2-135M-Instruct, but the base model you train on is"):
        cli_main(argv)
    assert no_training == [] and not (tmp_path / "out").exists()
    assert cli_main([*argv, "--allow_other_model", "true"]) == 0 and len(no_training) == 1


@case("silent", "`elical-hf train` on records whose `source_split` is `test` (the README chain's bundled questions)",
      "trains, with a warning: `30 of 30 --calibration_data (…) records come from a test split …`")
def test_train_warns_about_test_split_records(tiny_llama, tmp_path, no_training, caplog):
    test = save_records(records_of(tiny_llama, split="test"), tmp_path / "test.jsonl")
    train = save_records(records_of(tiny_llama, split="train"), tmp_path / "train.jsonl")
    argv = ["train", "--model_name_or_path", tiny_llama, "--elicitation_data", train, "--output_dir",
            str(tmp_path / "out")]
    with caplog.at_level(logging.WARNING, logger="elical_hf.steps.train"):
        assert cli_main([*argv, "--calibration_data", train]) == 0
        assert "test split" not in caplog.text
        assert cli_main([*argv, "--calibration_data", test, "--overwrite_output_dir", "true"]) == 0
    assert f"30 of 30 --calibration_data ({test}) records come from a test split" in caplog.text


@case("data", "an output that is one of the command's inputs, inside an input folder, or holding an input: "
      "`diagnose --records r.parquet --output r.parquet`, `judge` / `baselines` / `select-labels` in place, "
      "`train` / `evaluate` / `sample` / `merge` / `convert-official` / `demo` outputs in or around their inputs",
      "refused before any work, nothing written: `--output r.parquet is the --records input itself: writing there "
      "would destroy it …` / `… is inside the --records folder …` / `--questions … is inside the --output_dir "
      "folder …`")
@pytest.mark.parametrize("command", ["diagnose", "judge", "baselines", "select-labels", "train", "evaluate",
                                     "sample", "merge", "convert-official", "demo"])
def test_no_output_over_an_input(command, tiny_llama, tmp_path, monkeypatch, no_training, raise_user_errors):
    import elical_hf.demo
    import elical_hf.signals.backends

    monkeypatch.setattr(elical_hf.signals.backends, "make_backend", _no_work)
    monkeypatch.setattr(elical_hf.demo, "run_demo", _no_work)
    folder = tmp_path / "records"
    folder.mkdir()
    records = save_records(records_of(tiny_llama, split="in_domain_test"), folder / "r.parquet")
    before = (folder / "r.parquet").read_bytes()
    argv, expected = {
        "diagnose": (["--records", records, "--output", records], "is the --records input itself"),
        "judge": (["--records", records, "--consistency", "lexical", "--output", records],
                  "is the --records input itself"),
        "baselines": (["--records", records, "--which", "consis_sem", "--output", records],
                      "is the --records input itself"),
        "select-labels": ([tiny_llama, "--records", records, "--output", records, "--num_labels", "3"],
                          "is the --records input itself"),
        "train": (["--model_name_or_path", tiny_llama, "--elicitation_data", str(folder), "--calibration_data", records,
                   "--output_dir", str(folder / "out")], "is inside the --elicitation_data folder"),
        "evaluate": (["--records", str(folder), "--baselines", "consis_sem", "--output_dir", str(folder / "report")],
                     "is inside the --records folder"),
        "sample": (["--questions", records, "--model", tiny_llama, "--output_dir", str(folder)],
                   "--questions .* is inside the --output_dir folder"),
        "merge": (["--inputs", str(folder), str(tmp_path), "--output_dir", str(folder / "merged")],
                  "is inside the --inputs folder"),
        "convert-official": ([str(folder), str(folder / "converted"), "--base_model", tiny_llama],
                             "is inside the SRC folder"),
        "demo": (["--records", str(folder), "--output_dir", str(folder / "demo")], "is inside the --records folder"),
    }[command]
    with pytest.raises(ValueError, match=expected):
        cli_main([command, *argv])
    assert os.listdir(folder) == ["r.parquet"] and (folder / "r.parquet").read_bytes() == before
    assert no_training == []


@case("input", "`diagnose --output d.txt`, `select-labels --output x.txt` (a wrong extension); `threshold` on a base "
      "model", "refused before any record is read (the output) or scored (the model): `--output d.txt must be a "
      ".json file …` / `--output x.txt must be a .jsonl or .parquet file …` / `… not a trained confidence model "
      "…`")
def test_outputs_and_models_are_checked_before_any_work(tiny_llama, tmp_path, raise_user_errors):
    missing = str(tmp_path / "no-such-records.jsonl")  # would be a FileNotFoundError, were it read first
    with pytest.raises(ValueError, match="--output .*d.txt must be a .json file"):
        cli_main(["diagnose", "--records", missing, "--output", str(tmp_path / "d.txt")])
    with pytest.raises(ValueError, match="--output .*x.txt must be a .jsonl or .parquet file"):
        cli_main(["select-labels", tiny_llama, "--records", missing, "--output", str(tmp_path / "x.txt")])
    assert os.listdir(tmp_path) == []
    records = save_records(records_of(tiny_llama), tmp_path / "train.jsonl")
    with pytest.raises(ValueError, match="not a trained confidence model"):  # not after scoring the records
        cli_main(["threshold", tiny_llama, "--records", records, "--split", "train"])


@case("security", "`elical-hf push FOLDER` with `secret_key.pem` (or any file a model does not need) beside the "
      "adapter; a metric folder with `credentials.json`",
      "refused, nothing published: `… holds files a confidence model does not need: secret_key.pem …`; "
      "`--include NAME` publishes a file on purpose")
def test_push_publishes_only_what_a_model_needs(hub, tmp_path, tiny_llama, raise_user_errors):  # noqa: F811
    from elical_hf import AutoModelForConfidence, push_metric_space
    from tests.test_hub import upload_base
    from tests.test_hub_spaces import fake_metric

    upload_base(tmp_path)
    folder = tmp_path / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    (folder / "secret_key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (folder / "notes.txt").write_text("how I trained it\n")
    (folder / "training_args.json").write_text("{}\n")  # what the trainer writes is published
    argv = ["push", str(folder), "alice/model", "--base_model", "tiny/llama"]
    with pytest.raises(ValueError, match="holds files a confidence model does not need: notes.txt, secret_key.pem"):
        cli_main(argv)
    assert hub.repo("alice/model") is None
    (folder / "secret_key.pem").unlink()
    assert cli_main([*argv, "--include", "notes.txt"]) == 0
    assert {"notes.txt", "training_args.json", "adapter_model.safetensors"} <= set(hub.files("alice/model"))

    metric = fake_metric(tmp_path / "fake_metric", "fake_metric")
    (metric / "credentials.json").write_text("{}\n")
    with pytest.raises(ValueError, match="holds files a metric Space does not need: credentials.json"):
        push_metric_space("fake_metric", "alice/fake_metric", folder=metric)
    assert hub.repo("alice/fake_metric", "space") is None


@case("silent", "`elical-hf evaluate --model T=a T=b` (one name twice), or `--field_sources Consis-Sem=col` beside the "
      "Consis-Sem baseline", "refused before scoring: `--model names T twice …` / `Two confidence sources are named "
      "'Consis-Sem' …` (one used to replace the other silently)")
def test_evaluate_refuses_one_name_for_two_sources(tiny_llama, tmp_path, raise_user_errors):
    records = save_records(records_of(tiny_llama, split="in_domain_test"), tmp_path / "r.jsonl")
    argv = ["evaluate", "--records", records, "--output_dir", str(tmp_path / "o")]
    with pytest.raises(ValueError, match="--model names T twice"):
        cli_main([*argv, "--model", f"T={tiny_llama}", f"T={tmp_path}"])
    with pytest.raises(ValueError, match="Two confidence sources are named 'Consis-Sem'"):
        cli_main([*argv, "--baselines", "consis_sem", "--field_sources", "Consis-Sem=greedy_correctness"])
    assert not (tmp_path / "o").exists()


@case("silent", "`results.json` (and every JSON file or report elical-hf writes) when a metric is undefined (one "
      "class in a dataset)", "strict JSON: `null`, never the bare `NaN` that strict parsers (`JSON.parse`, jq) refuse")
def test_json_outputs_are_strict(tiny_llama, tmp_path):
    rows = records_of(tiny_llama, split="in_domain_test")
    for row in rows:  # one class in nq: its AUROC is undefined
        row["greedy_correctness"] = True if row["dataset"] == "nq" else row["greedy_correctness"]
    records = save_records(rows, tmp_path / "r.jsonl")
    assert cli_main(["evaluate", "--records", records, "--baselines", "consis_sem", "--output_dir",
                     str(tmp_path / "o")]) == 0
    results = strict_json((tmp_path / "o" / "results.json").read_text())
    assert results["Consis-Sem"]["nq"]["auroc"] is None
    assert cli_main(["diagnose", "--records", records, "--bootstrap", "5", "--output", str(tmp_path / "d.json")]) == 0
    assert strict_json((tmp_path / "d.json").read_text())["datasets"]["nq"]["auroc"] is None

    import numpy as np

    from elical_hf.utils.atomic import json_text  # the one writer of them all

    assert json_text({"a": float("nan"), "b": np.float32(0.5), "c": [np.inf, np.int64(2)]}, indent=None) == (
        '{"a": null, "b": 0.5, "c": [null, 2]}')


@case("data", "`.<name>.lock` files beside output folders (`sample`, `judge`, `train`, `evaluate`, converted-model "
      "caches)", "removed when the writer is done; a second writer is still refused (or waits) while one holds it, "
      "and waiters never hold a removed lock file together")
def test_lock_files_are_removed_and_still_exclude(tmp_path, raise_user_errors):
    out = tmp_path / "out"
    with one_writer(out):
        assert (tmp_path / ".out.lock").exists()
        with pytest.raises(ValueError, match="Another process is writing to"):
            with one_writer(out):
                pass
    assert os.listdir(tmp_path) == []
    inside, most, errors = [0], [0], []

    def work() -> None:
        try:
            for _ in range(25):
                with cache_lock(tmp_path / "cache", timeout=60):
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                    time.sleep(0.001)
                    inside[0] -= 1
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and most[0] == 1 and os.listdir(tmp_path) == []
    records = save_records(records_of("m", split="in_domain_test"), tmp_path / "r.jsonl")
    assert cli_main(["evaluate", "--records", records, "--baselines", "consis_sem", "--output_dir",
                     str(tmp_path / "report")]) == 0
    assert sorted(os.listdir(tmp_path)) == ["r.jsonl", "report"]


@case("silent", "`load_honestybench` on records holding one record twice",
      "refused, as `evaluate` refuses them: `… holds record 'nq-0' (nq) twice (rows 0 and 30) …`")
def test_load_honestybench_refuses_a_duplicated_record(tmp_path):
    from elical_hf.signals.honestybench import load_honestybench

    rows = records_of("m", split="in_domain_test")
    path = save_records(rows + rows[:1], tmp_path / "dup.jsonl")
    with pytest.raises(ValueError, match=r"holds record 'nq-0' \(nq\) twice \(rows 0 and 30\)"):
        load_honestybench(path, progress=False)
    assert len(load_honestybench(save_records(rows, tmp_path / "ok.jsonl"), progress=False)["in_domain_test"]) == 30


@case("input", "`--records data/nope_records` when `data/` is a local folder (a bare relative path)",
      "`No such file or folder: data/nope_records`, never a Hub lookup")
def test_a_path_under_a_local_folder_is_local(tmp_path, monkeypatch, raise_user_errors):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(FileNotFoundError, match="No such file or folder"):
        cli_main(["diagnose", "--records", "data/nope_records"])
