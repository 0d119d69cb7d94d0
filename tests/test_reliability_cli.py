"""Errors a user can read, and schema errors that are errors: every case runs the `elical-hf` command line as a user
would (`elical_hf.cli.main`), and checks the one line on stderr, the exit status 2, and what was (not) written."""

from __future__ import annotations

import json
import logging
import os

import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.signals.records import read_records, save_records
from elical_hf.signals.runner import sample_records
from tests.reliability import case
from tests.tiny import mark_trained


def run(argv: list[str], capsys) -> tuple[int, str]:
    """Exit status and the error line of `elical-hf <argv>`."""
    status = cli_main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith(f"elical-hf {argv[0]}: error: ")]
    return status, errors[-1] if errors else err


def judge(records, tmp_path, capsys) -> tuple[int, str]:
    """`elical-hf judge --correctness has_answer` of `records`: its exit status and error line."""
    return run(["judge", "--records", str(records), "--output", str(tmp_path / "j.jsonl"), "--correctness",
                "has_answer"], capsys)


def jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def table_rows(count: int = 12, **fields) -> list[dict]:
    return [{"id": f"q{i}", "question": f"question {i}?", "answer": ["a"], "consistency": 0.5, "correctness": 0.5,
             **fields} for i in range(count)]


def record(i: int, **fields) -> dict:
    return {"id": str(i), "question": f"question {i}?", "answer": ["paris"], "dataset": "nq", "split": "test",
            "greedy_response": "paris" if i % 2 else "rome", "sampling_response": ["paris", "rome"], **fields}


def train_argv(tmp_path, elicitation: str, calibration: str, *extra: str) -> list[str]:
    return ["train", "--elicitation_data", elicitation, "--calibration_data", calibration,
            "--output_dir", str(tmp_path / "out"), "--model_name_or_path", str(tmp_path / "never-loaded"), *extra]


# -- the handler --------------------------------------------------------------------------------------------------


@case("input", "any user error (`ValueError`, `OSError`) in any command",
      "one line on stderr, `elical-hf <command>: error: <message>`, exit status 2; `ELICAL_HF_TRACEBACK=1` shows the "
      "traceback too")
def test_a_user_error_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    argv = ["evaluate", "--records", str(tmp_path / "nothing"), "--output_dir", str(tmp_path / "o")]
    status, line = run(argv, capsys)
    assert status == 2 and line.startswith("elical-hf evaluate: error: ") and "Traceback" not in line
    monkeypatch.setenv("ELICAL_HF_TRACEBACK", "1")
    with pytest.raises(FileNotFoundError):
        cli_main(argv)


@case("input", "a bug (any other exception, e.g. a `KeyError` inside a command)", "the traceback, as before")
def test_a_bug_keeps_its_traceback(monkeypatch):
    import elical_hf.cli.threshold as threshold

    def broken(argv):
        raise KeyError("internal")

    monkeypatch.setattr(threshold, "main", broken)
    with pytest.raises(KeyError, match="internal"):
        cli_main(["threshold", "--model", "m", "--records", "r"])


@case("input", "`--config broken.yaml` (not YAML)", "exits 2: `broken.yaml is not a valid YAML file: ...`")
def test_broken_yaml_config(tmp_path, capsys):
    config = tmp_path / "broken.yaml"
    config.write_text("records: [unclosed\n", encoding="utf-8")
    status, line = run(["judge", "--config", str(config)], capsys)
    assert status == 2 and f"{config} is not a valid YAML file" in line


# -- messages that say what and where -----------------------------------------------------------------------------


@case("input", "a table without a `question` column (`train`, `sample`)",
      "exits 2: `The --elicitation_data (<file>) dataset lacks column(s) ['question', ...]; it has [...]` / "
      "``<file> has no `question` column; it has [...]``")
def test_missing_question_column(tmp_path, capsys):
    table = jsonl(tmp_path / "t.jsonl", [{"text": "x", "consistency": 0.5}] * 12)
    good = jsonl(tmp_path / "good.jsonl", table_rows())
    status, line = run(train_argv(tmp_path, table, good), capsys)
    assert status == 2 and f"The --elicitation_data ({table}) dataset lacks column(s) ['question']" in line
    status, line = run(["sample", "--questions", table, "--output_dir", str(tmp_path / "s")], capsys)
    assert status == 2 and f"{table} has no `question` column; it has ['text', 'consistency']" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "s").exists()


@case("input", "an empty table file", "exits 2: `<file> is empty: a records file or table needs rows.` (`train`), "
      "`<file> is empty: a question table needs a header or rows.` (`sample`)")
def test_empty_file(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    status, line = run(train_argv(tmp_path, str(empty), str(empty)), capsys)
    assert status == 2 and line.endswith(f"{empty} is empty: a records file or table needs rows.")
    status, line = run(["sample", "--questions", str(empty), "--output_dir", str(tmp_path / "s")], capsys)
    assert status == 2 and f"{empty} is empty" in line


@case("input", "a broken JSON line in a question table or a records file; a truncated records `.parquet` file",
      "exits 2: `<file> line 13 is not valid JSON: ...` (the file and its line number); `<file> is not a readable "
      "parquet file: ...`")
def test_broken_json_line(tmp_path, capsys):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in table_rows()) + "{oops\n", encoding="utf-8")
    status, line = run(["sample", "--questions", str(path), "--output_dir", str(tmp_path / "s")], capsys)
    assert status == 2 and f"{path} line 13 is not valid JSON" in line
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(record(0)) + "\n" + '{"question": \n')
    status, line = judge(str(records), tmp_path, capsys)
    assert status == 2 and f"{records} line 2 is not valid JSON" in line
    truncated = tmp_path / "records.parquet"
    save_records([record(i) for i in range(4)], truncated)
    truncated.write_bytes(truncated.read_bytes()[:-20])
    status, line = judge(str(truncated), tmp_path, capsys)
    assert status == 2 and f"{truncated} is not a readable parquet file" in line


@case("input", "a table or records file that is not UTF-8 (Latin-1)",
      "exits 2: `<file> line 2 is not UTF-8 text (byte 0xe9 at column 18); save the file as UTF-8.`")
def test_non_utf8_file(tmp_path, capsys):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"question": "fine?"}\n{"question": "caf\xe9 au lait?"}\n')
    status, line = run(["sample", "--questions", str(path), "--output_dir", str(tmp_path / "s")], capsys)
    assert status == 2 and line.endswith(f"{path} line 2 is not UTF-8 text (byte 0xe9 at column 18); save the file "
                                         "as UTF-8.")
    status, line = judge(str(path), tmp_path, capsys)
    assert status == 2 and f"{path} line 2 is not UTF-8 text" in line


@case("input", "an empty question in row 9 of a training table (`train`)",
      "exits 2 before training: `The --calibration_data (<file>) dataset has an empty or non-string question at row 9 "
      "(counting from 0; id 'q9')` (the row of the file, not of a split)")
def test_empty_question_reports_its_row(tmp_path, capsys):
    rows = table_rows()
    rows[9]["question"] = "   "
    calibration = jsonl(tmp_path / "cal.jsonl", rows)
    status, line = run(train_argv(tmp_path, jsonl(tmp_path / "el.jsonl", table_rows()), calibration), capsys)
    assert status == 2
    assert f"The --calibration_data ({calibration}) dataset has an empty or non-string question at row 9 (counting " \
           "from 0; id 'q9')" in line
    assert not (tmp_path / "out").exists()


@case("input", "calibration targets out of [0, 1] (`train`)",
      "exits 2 before stage 1 trains, nothing written: `The --calibration_data (<file>) column 'correctness' must hold "
      "numbers in [0, 1]; row 3 holds 1.5.`")
def test_calibration_targets_out_of_range_fail_before_stage_1(tmp_path, capsys):
    rows = table_rows()
    rows[3]["correctness"] = 1.5
    calibration = jsonl(tmp_path / "cal.jsonl", rows)
    status, line = run(train_argv(tmp_path, jsonl(tmp_path / "el.jsonl", table_rows()), calibration), capsys)
    assert status == 2 and f"--calibration_data ({calibration}) column 'correctness' must hold numbers in [0, 1]; " \
                           "row 3 holds 1.5." in line
    assert not (tmp_path / "out").exists()  # the model was never even loaded: its path does not exist


@case("input", "`--dtype float17` (`train`, `sample`)",
      "exits 2 while parsing the options: `--dtype: Unknown dtype 'float17'; use 'auto', 'float32', 'bfloat16' or "
      "'float16'.`")
def test_unknown_dtype(tmp_path, capsys):
    good = jsonl(tmp_path / "good.jsonl", table_rows())
    for argv in (train_argv(tmp_path, good, good, "--dtype", "float17"),
                 ["sample", "--questions", good, "--output_dir", str(tmp_path / "s"), "--dtype", "float17"]):
        status, line = run(argv, capsys)
        assert status == 2 and line.endswith("--dtype: Unknown dtype 'float17'; use 'auto', 'float32', 'bfloat16' or "
                                             "'float16'.")
    assert not (tmp_path / "out").exists() and not (tmp_path / "s").exists()


@case("input", "`elical-hf train --per_device_train_batch_size -2`",
      "exits 2 while parsing the options, no folder created: ``per_device_train_batch_size` must be an integer >= 1, "
      "got -2.``")
def test_negative_batch_size_fails_before_any_folder(tmp_path, capsys):
    good = jsonl(tmp_path / "good.jsonl", table_rows())
    status, line = run(train_argv(tmp_path, good, good, "--per_device_train_batch_size", "-2"), capsys)
    assert status == 2 and line.endswith("`per_device_train_batch_size` must be an integer >= 1, got -2.")
    assert sorted(os.listdir(tmp_path)) == ["good.jsonl"]  # no out/, no out/elicitation/checkpoints/


def evaluate_records(tmp_path, count: int = 10) -> str:
    folder = tmp_path / "records"
    folder.mkdir()
    save_records([record(i, greedy_correctness=i % 2, my_score=i / count) for i in range(count)],
                 folder / "nq_test.jsonl")
    return str(folder)


@case("input", "`elical-hf evaluate --bootstrap -5`", "exits 2: `--bootstrap must be >= 0 (0: no intervals), got -5.`")
def test_negative_bootstrap(tmp_path, capsys):
    status, line = run(["evaluate", "--records", evaluate_records(tmp_path), "--output_dir", str(tmp_path / "o"),
                        "--bootstrap", "-5"], capsys)
    assert status == 2 and line.endswith("--bootstrap must be >= 0 (0: no intervals), got -5.")


@case("input", "`elical-hf evaluate --field_sources X=nope` (no such column)",
      "exits 2: `--field_sources X=nope: 10 of 10 test records in <records> have no 'nope' field; they have [...]`")
def test_field_source_without_its_column(tmp_path, capsys):
    records = evaluate_records(tmp_path)
    argv = ["evaluate", "--records", records, "--output_dir", str(tmp_path / "o"), "--baselines", "prob"]
    status, line = run([*argv, "--field_sources", "X=nope"], capsys)
    assert status == 2 and f"--field_sources X=nope: 10 of 10 test records in {records} have no 'nope' field" in line
    assert "'my_score'" in line
    assert cli_main([*argv, "--field_sources", "Mine=my_score"]) == 0  # the column that is there works
    assert json.loads((tmp_path / "o" / "results.json").read_text())["Mine"]["nq"]["n"] == 10


@case("input", "a mistyped local questions path (`sample --questions data/nq_tset.jsonl`)",
      "exits 2: `No such file or folder: data/nq_tset.jsonl` (no Hub lookup); a name that could be a Hub id and is "
      "not found offline: `<name> is not a file or folder here, and not a dataset the Hub gave (...)`")
def test_mistyped_local_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, line = run(["sample", "--questions", "data/nq_tset.jsonl", "--output_dir", "s"], capsys)
    assert status == 2 and line.endswith("No such file or folder: data/nq_tset.jsonl")
    status, line = run(["sample", "--questions", "./questions", "--output_dir", "s"], capsys)
    assert status == 2 and line.endswith("No such file or folder: ./questions")
    status, line = run(["sample", "--questions", "nq_questions", "--output_dir", "s"], capsys)
    assert status == 2 and "nq_questions is not a file or folder here, and not a dataset the Hub gave" in line
    assert not os.path.exists("s")


@case("input", "a truncated `adapter_model.safetensors` (`evaluate --model`, `from_pretrained`)",
      "exits 2: `<folder>/adapter_model.safetensors is corrupt or truncated (...); save the model again, or download "
      "it again.`")
def test_truncated_adapter_names_the_file(tiny_llama, tmp_path, capsys):
    folder = tmp_path / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    mark_trained(folder)  # evaluate refuses untrained heads before it loads any weights
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"{weights} is corrupt or truncated"):
        AutoModelForConfidence.from_pretrained(folder)
    status, line = run(["evaluate", "--records", evaluate_records(tmp_path), "--output_dir", str(tmp_path / "o"),
                        "--baselines", "prob", "--model", f"M={folder}"], capsys)
    assert status == 2 and f"{weights} is corrupt or truncated" in line


class CountingBackend:
    """A backend that answers every question with its own text, and remembers what it was asked."""

    name, kind = "counting", "test"

    def __init__(self):
        self.asked: list[str] = []

    def generate(self, questions, settings, progress=False):
        self.asked += questions
        return [{"greedy_response": q, "sampling_response": [q] * settings.num_samples} for q in questions]


@case("input", "repeated questions in `sample` (`sample_records`; 7 rows, 2 distinct questions)",
      "a warning, `5 of 7 questions repeat an earlier one (1 distinct repeated, e.g. 'same?' x6)`; each distinct "
      "question is sampled once per shard and its answers copied to every row (no blow-up)")
def test_repeated_questions_are_sampled_once(tmp_path, caplog):
    from elical_hf.signals.generation import SamplingSettings

    backend = CountingBackend()
    questions = [{"question": "same?"}] * 6 + [{"question": "other?"}]
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.runner"):
        records = sample_records(questions, backend, SamplingSettings(num_samples=2), tmp_path / "s", progress=False)
    assert "5 of 7 questions repeat an earlier one (1 distinct repeated, e.g. 'same?' x6)" in caplog.text
    assert backend.asked == ["same?", "other?"]
    assert len(records) == 7 and [r["id"] for r in records] == [str(i) for i in range(7)]
    assert all(r["sampling_response"] == ["same?", "same?"] for r in records[:6])


# -- schema errors are errors -------------------------------------------------------------------------------------


@case("silent", "`sampling_response` given as a string, not a list (a records file)",
      "refused, naming the file, line and id: ``<file> line 2 (id '1'): `sampling_response` must be a list (one item "
      "per sample), got a str: 'paris'`` (was: split into one-character samples)")
def test_sampling_response_as_a_string_is_refused(tmp_path, capsys):
    path = jsonl(tmp_path / "records.jsonl", [record(0), record(1, sampling_response="paris")])
    with pytest.raises(ValueError, match=r"line 2 \(id '1'\): `sampling_response` must be a list"):
        read_records(path)
    status, line = run(["judge", "--records", path, "--output", str(tmp_path / "j.jsonl"),
                        "--consistency", "lexical"], capsys)
    assert status == 2 and line.endswith(f"{path} line 2 (id '1'): `sampling_response` must be a list (one item per "
                                         "sample), got a str: 'paris'")
    assert not (tmp_path / "j.jsonl").exists()


@case("silent", "`elical-hf judge` on a question table (no `greedy_response`), not records",
      "exits 2: ``<file>: none of the 12 records has a `greedy_response`, which correctness judging reads; these are "
      "not sampled records (a question table?)`` (was: exit 0, judged 0)")
def test_judge_refuses_a_table_that_is_not_records(tmp_path, capsys):
    table = jsonl(tmp_path / "questions.jsonl", table_rows())
    status, line = judge(table, tmp_path, capsys)
    assert status == 2 and f"{table}: none of the 12 records has a `greedy_response`, which correctness judging " \
                           "reads; these are not sampled records" in line
    assert not (tmp_path / "j.jsonl").exists()


@case("silent", "`elical-hf judge --records runs/x --output runs/x/judged.parquet` (output inside the records folder)",
      "exits 2, nothing written: `--output ... is inside the --records folder ...: reading that folder again would "
      "count every record twice`; judged elsewhere, `evaluate` counts each of the 10 records once (n=10)")
def test_judging_into_the_records_folder_is_refused(tmp_path, capsys):
    records = evaluate_records(tmp_path)
    inside = os.path.join(records, "judged.parquet")
    argv = ["judge", "--records", records, "--correctness", "has_answer", "--output"]
    status, line = run([*argv, inside], capsys)
    assert status == 2 and "is inside the --records folder" in line and "count every record twice" in line
    assert os.listdir(records) == ["nq_test.jsonl"]
    outside = tmp_path / "judged" / "nq_test.parquet"
    assert cli_main([*argv, str(outside)]) == 0
    again = ["judge", "--records", str(outside), "--correctness", "has_answer", "--output", str(outside)]
    assert cli_main(again) == 2  # in place: refused (an output is never one of its inputs), the file kept
    capsys.readouterr()
    assert len(read_records(outside)) == 10
    assert cli_main(["evaluate", "--records", str(outside.parent), "--output_dir", str(tmp_path / "o"),
                     "--baselines", "prob", "--field_sources", "Mine=my_score"]) == 0
    assert json.loads((tmp_path / "o" / "results.json").read_text())["Mine"]["nq"]["n"] == 10
