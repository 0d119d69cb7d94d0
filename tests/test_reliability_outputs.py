"""Round 4 of the reliability probes (issue 48), what the commands write and send: no output over an input, counts
checked against lm-eval's own, one atomic update of a threshold, no temporary left by a killed write, no credentials
or local paths in what is recorded or published, no other service's secret sent from a config file, escaped card
text, one line for a broken tokenizer file, and a judge endpoint that cannot hold a run for half an hour."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.configuration import CONFIDENCE_CONFIG_NAME
from elical_hf.drift import REFERENCE_NAME
from elical_hf.signals.records import read_records, save_records
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.reliability import case
from tests.test_cli_judge import make_records
from tests.test_threshold import judged  # noqa: F401 - the fixture


LM_EVAL = Path(__file__).parent / "data" / "lm_eval"


def _no_work(*args, **kwargs):
    raise AssertionError("the command started its work before checking its options")


@pytest.fixture
def thresholded(judged, monkeypatch):  # noqa: F811 - the fixture
    """The `judged` model with a threshold (alpha 0.3) and its monitor reference, chosen on records given by their
    absolute path."""
    monkeypatch.chdir(judged)
    assert cli_main(["threshold", str(judged / "model"), "--records", str(judged / "records"), "--alpha", "0.3",
                     "--allow_other_model", "true"]) == 0
    return judged


@pytest.fixture(scope="module")
def stub_server(tmp_path_factory):
    from tests.conftest import save_tiny_base
    from tests.openai_stub import StubServer

    base = save_tiny_base(tmp_path_factory.mktemp("stub-judge"), "llama")
    servers: list = []

    def start():
        server = StubServer(base, "judge", slow_seconds=3.0).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@case("data", "`monitor --output` or `--plot` pointed at the model's `confidence_config.json`, at `--questions` or "
      "at the `--reference` records; `--output d.txt`",
      "refused before anything is scored, nothing written: `--output … is inside the MODEL folder …` / `… is the "
      "--questions input itself …` / `--output d.txt must be a .json file`; the plot is written atomically")
def test_monitor_refuses_outputs_over_its_inputs(thresholded, monkeypatch, raise_user_errors):
    import elical_hf.auto

    model, records = thresholded / "model", thresholded / "records"
    questions = records / "tiny-model" / "nq_test.jsonl"
    monkeypatch.setattr(elical_hf.auto.AutoModelForConfidence, "from_pretrained", _no_work)
    config = (model / CONFIDENCE_CONFIG_NAME).read_bytes()
    argv = ["monitor", str(model), "--questions", str(questions)]
    with pytest.raises(ValueError, match="--output .* is inside the MODEL folder"):
        cli_main([*argv, "--output", str(model / CONFIDENCE_CONFIG_NAME)])
    with pytest.raises(ValueError, match="--output .* is the --questions input itself"):
        cli_main([*argv, "--output", str(questions)])
    with pytest.raises(ValueError, match="--plot .* is inside the MODEL folder"):
        cli_main([*argv, "--plot", str(model / "reliability.png")])
    with pytest.raises(ValueError, match="--output .* is inside the --reference folder"):
        cli_main([*argv, "--reference", str(records), "--output", str(records / "drift.json")])
    with pytest.raises(ValueError, match="--output .*d.txt must be a .json file"):
        cli_main([*argv, "--output", str(thresholded / "d.txt")])
    assert (model / CONFIDENCE_CONFIG_NAME).read_bytes() == config
    assert not (thresholded / "d.txt").exists()
    assert sorted(os.listdir(records / "tiny-model")) == ["nq_test.jsonl", "nq_train.jsonl"]


@case("data", "`threshold` whose records are one of the files it writes into the model folder "
      "(`--records MODEL/README.md`, or the model folder itself)",
      "refused before anything is scored: `… is the --records input itself …` / `… is inside the --records "
      "folder …`")
def test_threshold_refuses_to_write_over_its_records(judged, monkeypatch, raise_user_errors):  # noqa: F811
    import elical_hf.signals.records

    model = judged / "model"
    monkeypatch.setattr(elical_hf.signals.records, "load_records", _no_work)
    with pytest.raises(ValueError, match="is the --records input itself"):
        cli_main(["threshold", str(model), "--records", str(model / "README.md")])
    with pytest.raises(ValueError, match="is inside the --records folder"):
        cli_main(["threshold", str(model), "--records", str(model)])


@case("silent", "an lm-eval samples file cut short (20 of the 24 documents `results_<date>.json` counts for the task)",
      "refused in one line: `…/samples_nq_….jsonl holds 20 documents of task nq, but …/results_….json counts "
      "24 (n-samples) …`")
def test_a_truncated_lm_eval_samples_file_is_refused(tmp_path):
    from elical_hf.signals.records import load_records

    folder = tmp_path / "SmolLM2-135M-Instruct"
    shutil.copytree(LM_EVAL / "generation" / "SmolLM2-135M-Instruct", folder)
    samples = next(folder.glob("samples_nq_*.jsonl"))
    assert len(load_records(str(folder))) == 48  # complete: both tasks' 24 documents
    lines = samples.read_text(encoding="utf-8").splitlines(keepends=True)
    samples.write_text("".join(lines[:20]), encoding="utf-8")
    results = next(folder.glob("results_*.json"))
    with pytest.raises(ValueError, match=rf"{samples} holds 20 documents of task nq, but {results} counts 24"):
        load_records(str(folder))
    with pytest.raises(ValueError, match="holds 20 documents of task nq"):
        load_records(str(samples))
    os.remove(results)  # without the results file there is nothing to check against: read as it is
    assert len(load_records(str(samples))) == 20


@case("data", "`threshold` failing (or killed) after it has chosen the threshold, while it writes the model folder "
      "(here: the monitor reference cannot be written)",
      "exit 2 and the model keeps its earlier threshold and card: reference, card and `confidence_config.json` are "
      "one update, the config moved last (a reference moved before a kill names its threshold: `monitor` refuses "
      "it)")
def test_threshold_writes_the_threshold_and_its_reference_as_one_update(judged, capsys):  # noqa: F811
    model, records = judged / "model", judged / "records"
    argv = ["threshold", str(model), "--records", str(records), "--allow_other_model", "true"]
    assert cli_main(argv) == 0
    before = {name: (model / name).read_bytes() for name in (CONFIDENCE_CONFIG_NAME, REFERENCE_NAME, "README.md")}
    os.remove(model / REFERENCE_NAME)
    (model / REFERENCE_NAME).mkdir()  # the reference cannot be replaced now
    assert cli_main([*argv, "--alpha", "0.3"]) == 2
    assert (model / CONFIDENCE_CONFIG_NAME).read_bytes() == before[CONFIDENCE_CONFIG_NAME]
    assert (model / "README.md").read_bytes() == before["README.md"]
    assert not [name for name in os.listdir(model) if name.startswith(".tmp-")]
    os.rmdir(model / REFERENCE_NAME)
    capsys.readouterr()
    assert cli_main([*argv, "--alpha", "0.3"]) == 0
    saved = json.loads((model / REFERENCE_NAME).read_text())
    config = json.loads((model / CONFIDENCE_CONFIG_NAME).read_text())
    assert saved["saved_for"]["decision_threshold"] == config["decision_threshold"]


@case("data", "`judge --output judged.jsonl` killed while it writes its final file, then run again",
      "the rerun removes the `.tmp-XXXXXXXXjudged.jsonl` the kill left beside the output (only its own "
      "output's temporaries, by name)")
def test_a_rerun_of_judge_removes_its_own_stale_temporaries(tmp_path):
    records = save_records(make_records(), tmp_path / "records.jsonl")
    output = tmp_path / "judged.jsonl"

    def left_by_a_kill(target: Path) -> str:  # the name `atomic_file` gives the temporary of `target`
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.name)
        os.write(fd, b'{"question": "half a line')
        os.close(fd)
        return os.path.basename(name)

    stale = left_by_a_kill(output)
    others = [left_by_a_kill(tmp_path / "other.jsonl"), left_by_a_kill(tmp_path / "xjudged.jsonl")]
    argv = ["judge", "--records", records, "--consistency", "lexical", "--output", str(output)]
    assert cli_main(argv) == 0
    assert len(read_records(output)) == 3
    assert not (tmp_path / stale).exists()
    assert all((tmp_path / name).exists() for name in others)  # not this output's: left alone


@case("security", "`judge --judge_endpoint http://user:password@host:port/v1` (or a server restarted on another "
      "port before a resumed run)",
      "the records, the manifest, the progress bar and errors never hold the password; the judge is recorded by its "
      "model (`correctness_judge: judge`) and the endpoint redacted in the manifest, so the resumed run against the "
      "new port goes on with the same judge name")
def test_judge_endpoint_credentials_are_never_recorded(stub_server, tmp_path, capsys):
    first, second = stub_server(), stub_server()
    records = save_records(make_records() * 2, tmp_path / "records.jsonl")
    output = tmp_path / "judged"

    def with_password(server) -> str:
        return server.url.replace("http://", "http://alice:s3cret@")

    argv = ["judge", "--records", records, "--correctness", "llm", "--judge_model", "judge", "--output", str(output),
            "--shard_size", "2", "--max_new_tokens", "4", "--judge_max_retries", "0"]
    first.faults = [None, None, 503]  # the first shard is judged, then the server fails
    assert cli_main([*argv, "--judge_endpoint", with_password(first)]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and "alice" not in err and first.url.split("://")[1] in err
    assert cli_main([*argv, "--judge_endpoint", with_password(second)]) == 0  # another port: the same judge
    judged = read_records(output / "shards" / "shard-00000.parquet") + read_records(output / "shards" /
                                                                                   "shard-00002.parquet")
    assert {r["correctness_judge"] for r in judged if r["answer"]} == {"judge"}  # (no gold answer: not judged)
    written = "".join(path.read_text(errors="replace") for path in output.rglob("*") if path.is_file())
    assert "s3cret" not in written and "alice" not in written
    assert "s3cret" not in capsys.readouterr().err


@case("security", "`push` of a model whose threshold was chosen on `/home/alice/runs/records`",
      "published with the records' base name only (`records`) in `confidence_config.json`'s `risk_control`, "
      "`calibration_confidences.json` and the card; the local folder keeps its own")
def test_push_publishes_no_local_paths(hub, thresholded, tiny_llama):  # noqa: F811
    from elical_hf import push_folder
    from tests.test_hub import upload_base

    model = thresholded / "model"
    local = json.loads((model / CONFIDENCE_CONFIG_NAME).read_text())
    assert local["risk_control"]["records"] == str(thresholded / "records")
    upload_base(thresholded)
    push_folder(model, "alice/thresholded", base_model_name_or_path="tiny/llama")
    files = hub.files("alice/thresholded")
    published = {name: files[name].decode() for name in (CONFIDENCE_CONFIG_NAME, REFERENCE_NAME, "README.md")}
    for name, text in published.items():
        assert str(thresholded) not in text, name
    assert json.loads(published[CONFIDENCE_CONFIG_NAME])["risk_control"]["records"] == "records"
    assert json.loads(published[REFERENCE_NAME])["records"] == "records"
    assert json.loads((model / CONFIDENCE_CONFIG_NAME).read_text()) == local


@case("security", "`judge --config c.yaml` whose `judge_api_key_env: HF_TOKEN` (or AWS_*, GITHUB_TOKEN, ...) sends "
      "that secret to the `judge_endpoint` it names",
      "refused before any work: `… names HF_TOKEN, a secret of another service …`; named on the command line it is "
      "sent, and every run says which variable goes to which host")
def test_a_config_file_cannot_send_another_services_secret(tmp_path, monkeypatch, caplog, raise_user_errors):
    records = save_records(make_records(), tmp_path / "records.jsonl")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_secret")
    monkeypatch.setenv("MY_JUDGE_KEY", "judge_secret")
    endpoint = "https://judge.example:9/v1"
    argv = ["judge", "--records", records, "--correctness", "llm", "--output", str(tmp_path / "out.jsonl"),
            "--judge_max_retries", "0", "--judge_timeout", "1"]
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"judge_endpoint: {endpoint}\njudge_api_key_env: {name}\n")
        with pytest.raises(ValueError, match=f"judge_api_key_env: {name} in {config} names .* another service"):
            cli_main([*argv, "--config", str(config)])
    config = tmp_path / "mine.yaml"
    config.write_text(f"judge_endpoint: http://127.0.0.1:9/v1\njudge_api_key_env: MY_JUDGE_KEY\n")
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.openai_client"):
        with pytest.raises(OSError, match="cannot be reached"):
            cli_main([*argv, "--config", str(config)])
        assert "judge endpoint http://127.0.0.1:9/v1 gets the bearer token in MY_JUDGE_KEY" in caplog.text
        with pytest.raises(OSError, match="cannot be reached"):  # on the command line itself: sent, and said so
            cli_main([*argv, "--config", str(tmp_path / "HF_TOKEN.yaml"), "--judge_api_key_env", "HF_TOKEN",
                      "--judge_endpoint", "http://127.0.0.1:9/v1"])
        assert "http://127.0.0.1:9/v1 gets the bearer token in HF_TOKEN" in caplog.text
    assert not (tmp_path / "out.jsonl").exists()


@case("security", "a domain name holding a newline, a table pipe and an HTML `<script>` tag (or such a `--by` column, "
      "records path or dataset name) in a model card",
      "escaped to one inert line: one table row per domain, `&lt;script&gt;`, the pipe backslash-escaped; nothing of "
      "it is markup")
def test_card_text_from_data_is_escaped(judged):  # noqa: F811
    from elical_hf.saved_model import set_decision_threshold

    model = judged / "model"
    bad = "a|b\n<script>alert(1)</script>"
    domains = [bad if i % 2 else "nq" for i in range(40)]
    confidences = [i / 40 for i in range(40)]
    correct = [int(i >= 10) for i in range(40)]
    set_decision_threshold(str(model), confidences, correct, domains=domains, min_domain_rows=5,
                           source={"records": "x`y\n<b>z</b>", "split": "train"}, alpha=0.5)
    card = (model / "README.md").read_text()
    assert "<script>" not in card and "<b>" not in card
    assert "a\\|b &lt;script&gt;alert(1)&lt;/script&gt;" in card
    table = [line for line in card.splitlines() if line.startswith("| ")]
    assert sum(line.startswith("| a\\|b") for line in table) == 1
    assert sum(line.startswith("| nq |") for line in table) == 1


@case("input", "a saved model or base model folder whose `tokenizer.json` (or another tokenizer JSON file) is not "
      "JSON", "one line naming the file: `…/tokenizer.json is not valid JSON: Expecting value (line 1, column 1)`")
def test_a_broken_tokenizer_file_is_one_line(judged, capsys):  # noqa: F811
    model = judged / "model"
    (model / "tokenizer.json").write_text("<html>not a tokenizer</html>")
    assert cli_main(["threshold", str(model), "--records", str(judged / "records"), "--allow_other_model",
                     "true"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"elical-hf threshold: error: {model / 'tokenizer.json'} is not valid JSON: Expecting value "
                     "(line 1, column 1).")


@case("input", "`judge --judge_endpoint URL` at a server that never answers",
      "`--judge_timeout S --judge_max_retries N` bound the wait (default 300 s and 4 retries): `The judge endpoint "
      "… timed out (1 s a request): failed 1 times …`, exit 2")
def test_judge_timeout_and_retries_are_options(stub_server, tmp_path, capsys):
    server = stub_server()
    records = save_records(make_records(), tmp_path / "records.jsonl")
    argv = ["judge", "--records", records, "--correctness", "llm", "--judge_model", "judge", "--output",
            str(tmp_path / "out.jsonl"), "--judge_endpoint", server.url]
    server.faults = ["slow"] * 3
    assert cli_main([*argv, "--judge_timeout", "1", "--judge_max_retries", "0"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "timed out (1 s a request): failed 1 times" in error
    assert cli_main([*argv, "--judge_timeout", "0"]) == 2
    assert "--judge_timeout must be > 0" in capsys.readouterr().err
    assert cli_main(["judge", "--records", records, "--correctness", "has_answer", "--output",
                     str(tmp_path / "o.jsonl"), "--judge_max_retries", "1"]) == 2
    assert "--judge_max_retries is about the --judge_endpoint" in capsys.readouterr().err
