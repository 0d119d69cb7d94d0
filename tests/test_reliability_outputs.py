"""Round 4 of the reliability probes (issue 48), what the commands write and send: no output over an input, counts
checked against lm-eval's own, one atomic update of a threshold, no temporary left by a killed write, no credentials
or local paths in what is recorded or published, no other service's secret sent (nor code named) from a config file,
its values read as the command line's, escaped card
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
from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME
from elical_hf.evaluation.drift import REFERENCE_NAME
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
    import elical_hf.models.auto

    model, records = thresholded / "model", thresholded / "records"
    questions = records / "tiny-model" / "nq_test.jsonl"
    monkeypatch.setattr(elical_hf.models.auto.AutoModelForConfidence, "from_pretrained", _no_work)
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


@case("silent", "an lm-eval samples file whose documents are repeated to the count `results_<date>.json` gives (20 "
      "documents, 4 of them twice); a results file whose count is text (`\"24\"`) or absent for the task",
      "refused in one line naming the line and the document it repeats; a count written as text or a float is read; "
      "a missing count is said in a warning (was: 24 records with 4 duplicates, rc 0; the check silently skipped)")
def test_repeated_lm_eval_documents_and_odd_counts(tmp_path, caplog):
    from elical_hf.signals.records import load_records

    folder = tmp_path / "SmolLM2-135M-Instruct"
    shutil.copytree(LM_EVAL / "generation" / "SmolLM2-135M-Instruct", folder)
    samples = next(folder.glob("samples_nq_*.jsonl"))
    lines = samples.read_text(encoding="utf-8").splitlines(keepends=True)
    samples.write_text("".join(lines[:20] + lines[:4]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 21 repeats document \S+ of line 1"):
        load_records(str(samples))
    samples.write_text("".join(lines[:20]), encoding="utf-8")
    results = next(folder.glob("results_*.json"))
    data = json.loads(results.read_text(encoding="utf-8"))
    data["n-samples"]["nq"]["effective"] = "24"
    results.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="holds 20 documents of task nq"):
        load_records(str(samples))
    del data["n-samples"]["nq"]
    results.write_text(json.dumps(data), encoding="utf-8")
    assert len(load_records(str(samples))) == 20
    assert "gives no count of task nq's documents" in caplog.text


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


@case("data", "two `threshold` runs on one model folder at once (the second starting while the first moves its "
      "reference and card into place)",
      "the second is refused in one line, `Another process is writing to …/model (it holds …/.model.lock)`, and the "
      "folder keeps the first run's threshold, reference and card together (was: interleaved, the config naming one "
      "run's threshold and the reference another's)")
def test_threshold_takes_the_model_folders_lock(tiny_llama, tmp_path):
    from elical_hf.utils.atomic import one_writer
    from elical_hf.models.saved_model import set_decision_threshold
    from tests.test_reliability_models import saved_model

    model = saved_model(tiny_llama, tmp_path / "model")
    before = (model / CONFIDENCE_CONFIG_NAME).read_text()
    confidences, correct = [i / 100 for i in range(100)], [int(i >= 50) for i in range(100)]
    with one_writer(model):
        with pytest.raises(ValueError, match=f"Another process is writing to {model}"):
            set_decision_threshold(str(model), confidences, correct, reference={"records": "B", "split": "train"})
    assert (model / CONFIDENCE_CONFIG_NAME).read_text() == before
    assert 0.4 < set_decision_threshold(str(model), confidences, correct) < 0.6


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


@case("security", "`push` of a model folder whose `training_args.json` (`output_dir`, `logging_dir`), "
      "`trainer_state.json` (`best_model_checkpoint`) or tokenizer config name absolute local paths "
      "(`/home/alice/secret-project/...`, `C:\\\\Users\\\\alice\\\\...`)",
      "every absolute local path in a published JSON file is published as its last part (`checkpoint-40`); the local "
      "files keep theirs")
def test_push_publishes_no_absolute_local_path_in_any_json_file(hub, tiny_llama, tmp_path):  # noqa: F811
    from transformers import TrainingArguments

    from elical_hf import push_folder
    from tests.test_hub import upload_base
    from tests.test_reliability_models import saved_model

    model = saved_model(tiny_llama, tmp_path / "model")
    secret = "/home/alice/secret-project/out"
    (model / "training_args.json").write_text(TrainingArguments(output_dir=f"{secret}/checkpoints",
                                                                report_to=[]).to_json_string())
    state = {"best_model_checkpoint": f"{secret}/checkpoints/checkpoint-40", "log_history": [],
             "runs": [{"dir": "C:\\Users\\alice\\run"}, "~/private/notes"]}
    (model / "trainer_state.json").write_text(json.dumps(state))
    upload_base(tmp_path)
    push_folder(model, "alice/m", base_model_name_or_path="tiny/llama")
    files = {name: data.decode(errors="replace") for name, data in hub.files("alice/m").items()}
    for name, text in files.items():
        for private in ("/home/alice", "alice\\\\", "~/private", str(tmp_path)):
            assert private not in text, (name, private)
    published = json.loads(files["trainer_state.json"])
    assert published["best_model_checkpoint"] == "checkpoint-40"
    assert published["runs"] == [{"dir": "run"}, "notes"]
    assert json.loads(files["training_args.json"])["output_dir"] == "checkpoints"
    assert json.loads((model / "trainer_state.json").read_text()) == state


@case("security", "`judge --config c.yaml` whose `judge_api_key_env` names any variable but `OPENAI_API_KEY` or an "
      "`ELICAL_HF_*` one (`HF_TOKEN`, `HUGGINGFACEHUB_API_TOKEN`, `GITHUB_PAT`, `PGPASSWORD`, ...), sending that "
      "secret to the `judge_endpoint` it names; `serve --config c.yaml` whose `retriever: os:system` runs code",
      "refused before any work, in one line naming the key (`a config file may name only OPENAI_API_KEY or an "
      "ELICAL_HF_* variable …`, `--retriever imports and runs code …`); named on the command line (an abbreviation "
      "included) it is used, and every run says which variable goes to which host")
def test_a_config_file_cannot_send_another_services_secret(tmp_path, monkeypatch, caplog, raise_user_errors):
    records = save_records(make_records(), tmp_path / "records.jsonl")
    for name in ("HF_TOKEN", "HUGGINGFACEHUB_API_TOKEN", "GITHUB_PAT", "ELICAL_HF_JUDGE_API_KEY"):
        monkeypatch.setenv(name, "secret")
    endpoint = "https://judge.example:9/v1"
    argv = ["judge", "--records", records, "--correctness", "llm", "--output", str(tmp_path / "out.jsonl"),
            "--judge_max_retries", "0", "--judge_timeout", "1"]
    for name in ("HF_TOKEN", "HUGGINGFACEHUB_API_TOKEN", "GITHUB_PAT", "PGPASSWORD", "elical_hf_lower"):
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"judge_endpoint: {endpoint}\njudge_api_key_env: {name}\n")
        with pytest.raises(ValueError, match=f"judge_api_key_env: {name} in {config}: a config file may name only "):
            cli_main([*argv, "--config", str(config)])
    config = tmp_path / "mine.yaml"
    config.write_text(f"judge_endpoint: http://127.0.0.1:9/v1\njudge_api_key_env: ELICAL_HF_JUDGE_API_KEY\n")
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.openai_client"):
        with pytest.raises(OSError, match="cannot be reached"):
            cli_main([*argv, "--config", str(config)])
        assert "judge endpoint http://127.0.0.1:9/v1 gets the bearer token in ELICAL_HF_JUDGE_API_KEY" in caplog.text
        for option in ("--judge_api_key_env", "--judge_api_key"):  # on the command line itself: sent, and said so
            with pytest.raises(OSError, match="cannot be reached"):
                cli_main([*argv, "--config", str(tmp_path / "HF_TOKEN.yaml"), option, "HF_TOKEN",
                          "--judge_endpoint", "http://127.0.0.1:9/v1"])
        assert "http://127.0.0.1:9/v1 gets the bearer token in HF_TOKEN" in caplog.text
    assert not (tmp_path / "out.jsonl").exists()
    from elical_hf.cli import serve

    config.write_text("model: m\nretriever: os:system\n")
    with pytest.raises(ValueError, match=f"retriever: os:system in {config}: --retriever imports and runs code"):
        serve.make_parser().parse_with_config(["--config", str(config)])
    (options,) = serve.make_parser().parse_with_config(["--config", str(config), "--retriever", "os:getcwd"])
    assert options.retriever == "os:getcwd"


@case("security", "`judge --judge_endpoint` (or `sample --endpoint`) `http://a:b@127.0.0.1:99x/v1`, a raw `/` or `@` "
      "in the password, a space or a non-ASCII host, or a key in the query (`http://h:p/v1?api_key=K`)",
      "one line before any work, showing nothing of the credentials: `--judge_endpoint is not a valid http(s) URL "
      "…: its port is not a number from 0 to 65535.` (was: an 89-line `httpx.InvalidURL` traceback showing the "
      "password's start; the query mangled into `/v1/?api_key=Kmodels`)")
def test_a_malformed_endpoint_url_is_one_line_without_credentials(tmp_path, capsys):
    records = save_records(make_records(), tmp_path / "records.jsonl")
    argv = ["judge", "--records", records, "--correctness", "llm", "--output", str(tmp_path / "out.jsonl"),
            "--judge_max_retries", "0", "--judge_timeout", "1", "--judge_endpoint"]
    for url, why in [("http://alice:s3cretB@127.0.0.1:99x/v1", "its port is not a number"),
                     ("http://alice:s3c/ret@127.0.0.1:9/v1", "percent-encoded"),
                     ("http://alice:s3c@ret@127.0.0.1:9/v1", "percent-encoded"),
                     ("http://alice:s3cretN@hé st:1/v1", "a space"),
                     ("http://127.0.0.1:9/v1?api_key=s3cretQ", "a query or fragment")]:
        assert cli_main([*argv, url]) == 2
        error = capsys.readouterr().err
        assert error.strip().splitlines()[-1].startswith("elical-hf judge: error: --judge_endpoint "), url
        assert why in error and "Traceback" not in error, url
        assert "s3c" not in error and "alice" not in error, url
    assert not (tmp_path / "out.jsonl").exists()


@case("security", "a `--config` value of the wrong shape or type: `serve` `allowed_hosts: '*.corp.example'` (one "
      "string for a list option, once read character by character: `'*'` let every `Host` through), `model: EliCal=a`, "
      "`which: [prob, n_prob]` for a comma-separated option, `num_samples: 2.5`, `port: 80.5`, `seed: true`, a value "
      "outside `choices`; `--conf 4096` where `--config` and `--confidence_slice_tokens` both start so",
      "read as the command line reads it: one value is a one-item list, a list for a comma-separated option is "
      "joined, and a wrong type or choice is one line naming the key (`num_samples: 2.5 in c.yaml: invalid int value: "
      "'2.5'`) before any work; the abbreviation is refused as ambiguous")
def test_config_values_are_typed_and_listed_like_command_line_values(tmp_path):
    from elical_hf.cli import baselines, evaluate, sample, serve

    config = tmp_path / "c.yaml"

    def parse(module, text, *argv):
        config.write_text(text)
        return module.make_parser().parse_with_config(["--config", str(config), *argv])[0]

    assert parse(serve, "model: m\nallowed_hosts: '*.corp.example'\n").allowed_hosts == ["*.corp.example"]
    assert parse(evaluate, "records: r\nmodel: EliCal=a\n", "--output_dir", "o").model == ["EliCal=a"]
    assert parse(baselines, "records: r\noutput: o.jsonl\nwhich: [prob, n_prob]\n").which == "prob,n_prob"
    assert parse(serve, "model: m\nport: '8000'\nthreshold: 1\n").port == 8000
    for module, text, message in [
            (sample, "questions: q\noutput_dir: o\nnum_samples: 2.5\n", "num_samples: 2.5 in .*: invalid int"),
            (serve, "model: m\nport: 80.5\n", "port: 80.5 in .*: invalid int"),
            (serve, "model: m\nthreshold: true\n", "threshold: True in .*: invalid float"),
            (baselines, "records: r\noutput: o\nseed: true\n", "seed: True in .*: invalid int"),
            (evaluate, "records: r\noutput_dir: o\nbootstrap: 2.5\n", "bootstrap: 2.5 in .*: invalid int"),
            (baselines, "records: r\noutput: o\nlexical_scoring: bogus\n", "lexical_scoring: 'bogus' in .*: invalid "
             "choice"),
            (serve, "model: m\nport: [1, 2]\n", r"port: \[1, 2\] in .*: expected one value, got a list")]:
        with pytest.raises(ValueError, match=message):
            parse(module, text)
    with pytest.raises(SystemExit):
        serve.make_parser().parse_with_config(["m", "--conf", "4096"])


@case("security", "a domain name holding a newline, a table pipe and an HTML `<script>` tag (or such a `--by` column, "
      "records path or dataset name) in a model card",
      "escaped to one inert line: one table row per domain, `&lt;script&gt;`, the pipe backslash-escaped, a path in "
      "a code span; nothing of it is markup")
def test_card_text_from_data_is_escaped(judged):  # noqa: F811
    from elical_hf.models.saved_model import set_decision_threshold

    model = judged / "model"
    bad = "a|b\n<script>alert(1)</script>"
    domains = [bad if i % 2 else "nq" for i in range(40)]
    confidences = [i / 40 for i in range(40)]
    correct = [int(i >= 10) for i in range(40)]
    set_decision_threshold(str(model), confidences, correct, domains=domains, min_domain_rows=5,
                           source={"records": "x`y\n<b>z</b>", "split": "train"}, alpha=0.5)
    card = (model / "README.md").read_text()
    assert "<script>" not in card and "``x`y <b>z</b>``" in card  # the records path: a code span, inert
    from markdown_it import MarkdownIt

    assert "<b>" not in MarkdownIt("commonmark").enable("table").render(card)
    assert "a\\|b &lt;script&gt;alert(1)&lt;/script&gt;" in card
    table = [line for line in card.splitlines() if line.startswith("| ")]
    assert sum(line.startswith("| a\\|b") for line in table) == 1
    assert sum(line.startswith("| nq |") for line in table) == 1


@case("security", "card text from data in places the escaping missed: a `model_id` (read back from an existing card's "
      "YAML) holding `\")` and a code fence, a metric name holding `<script>` and `|`, a local base path, records path "
      "or `--by` column inside backticks (`/data/run[1]/base_|x`), `*`, `_` and `~` in data names",
      "the usage snippets name the id as a Python string literal inside fences it cannot close, metric headers are "
      "escaped, paths and columns are code spans (no backslashes shown, `|` escaped in tables), emphasis characters "
      "escaped (was: raw, or backslashes shown inside code spans)")
def test_card_escaping_covers_ids_metric_names_and_code_spans():
    from markdown_it import MarkdownIt

    from elical_hf.settings.configuration import ConfidenceConfig
    from elical_hf.models.model_card import ConfidenceModelCardData, markdown_text, render_model_card

    config = ConfidenceConfig(
        base_model_name_or_path="/data/run[1]/base_|x", decision_threshold=0.5,
        risk_control={"alpha": 0.1, "delta": 0.1, "n": 40, "coverage": 0.5, "risk": 0.05, "risk_upper_bound": 0.09,
                      "method": "ltt", "records": "/data/[v2]/recs", "split": "train"},
        training_history=[{"stage": "elicitation", "label_column": "my|col[1]", "num_examples": 10}])
    model_id = 'org/x")\n```\n<img src=x onerror=alert(1)>\n```python\n("'
    card = ConfidenceModelCardData(model_id=model_id)
    card.add_evaluation("nq", {"auroc": 0.8, "<script>alert(2)</script>|evil": 0.3}, split="test")
    body = str(render_model_card(config, card, None)).split("---", 2)[2]
    html = MarkdownIt("commonmark").enable("table").render(body)
    assert "<img" not in html and "<script" not in html
    assert f"from_pretrained({json.dumps(model_id)})" in body
    assert "<code>/data/run[1]/base_|x</code>" in html and "<code>/data/[v2]/recs</code>" in html
    assert "<code>my|col[1]</code>" in html
    assert markdown_text("_a_ *b* ~~c~~ in_word") == "\\_a\\_ \\*b\\* \\~\\~c\\~\\~ in_word"


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
