"""`elical-hf judge` is resumable, sharded and mergeable: killed at any point and run again, it ends with the output of
an uninterrupted run without judging a finished shard again; N workers merged give one worker's records."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from elical_hf.utils.atomic import one_writer
from elical_hf.cli import judge as judge_cli
from elical_hf.cli import main as cli_main
from elical_hf.signals.records import load_records, read_records, save_records
from elical_hf.signals.judge_runner import record_key
from elical_hf.signals.shards import shard_path, worker_of
from tests.killing import kill_once_written


LEXICAL = ["--correctness", "has_answer", "--consistency", "lexical"]
LLM = ["--correctness", "has_answer", "--consistency", "llm"]


def make_records(n: int = 10) -> list[dict]:
    """`n` sampled records (ids `r0`, ...), every fourth without a gold answer."""
    towns = ["Paris", "Lyon", "Nice", "Lille", "Metz"]
    return [{"id": f"r{i}", "dataset": "nq", "question": f"which town is number {i}?",
             "answer": [] if i % 4 == 3 else [towns[i % 5]], "greedy_response": f"It is {towns[(i * 2) % 5]}.",
             "sampling_response": [towns[(i + j) % 5] for j in range(3)]} for i in range(n)]


def reply(prompt: str) -> str:
    """A judge model's reply, a function of the prompt alone."""
    return "certain" if sum(map(ord, prompt)) % 3 else "uncertain"


class CountingJudge:
    """A completion function that counts its calls (one per shard and judge) and can crash on one of them."""

    def __init__(self, fail_on_call: int | None = None):
        self.fail_on_call, self.calls, self.prompts = fail_on_call, 0, 0

    def __call__(self, prompts, max_new_tokens=16, batch_size=16, progress=True):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("simulated crash")
        self.prompts += len(prompts)
        return [reply(p) for p in prompts]


def replaced(argv: list[str], changes: list[str]) -> list[str]:
    """`argv` with each `--option value` of `changes` in place of the option's value there (an option is given once:
    the CLI refuses a repeated one), or added."""
    argv = list(argv)
    for option, value in zip(changes[::2], changes[1::2]):
        if option in argv:
            argv[argv.index(option) + 1] = value
        else:
            argv += [option, value]
    return argv


def judge(records: str, output, *extra: str, complete=None) -> list[str]:
    """Run `elical-hf judge` in shards of 3 (LLM consistency with `complete`, else the lexical judges)."""
    argv = replaced(["--records", records, "--output", str(output), *(LLM if complete else LEXICAL), "--shard_size",
                     "3"], list(extra))
    assert judge_cli.main(argv, complete=complete) == 0
    return argv


@pytest.fixture
def source(tmp_path) -> str:
    return save_records(make_records(), tmp_path / "in" / "records.jsonl")


@pytest.fixture
def reference(source, tmp_path):
    """An uninterrupted run into a folder: 10 records in shards of 3 (3, 3, 3, 1), and the judge's calls."""
    counting = CountingJudge()
    judge(source, tmp_path / "reference", complete=counting)
    return load_records(tmp_path / "reference", derive=False).to_list(), counting


def as_table(records: list[dict]) -> list[dict]:
    """The records with every field any of them has (`None` where absent), as a table holds them."""
    names = list(dict.fromkeys(name for record in records for name in record))
    return [{name: record.get(name) for name in names} for record in records]


def manifest(folder) -> dict:
    return json.loads((Path(folder) / "manifest.json").read_text())


def test_a_crashed_run_resumes_without_judging_finished_shards_again(source, reference, tmp_path, capsys):
    records, uninterrupted = reference
    assert uninterrupted.calls == 4  # one call per shard
    out = tmp_path / "judged"
    with pytest.raises(RuntimeError, match="simulated crash"):
        judge(source, out, complete=CountingJudge(fail_on_call=3))
    assert sorted(os.listdir(out / "shards")) == ["shard-00000.parquet", "shard-00001.parquet"]
    assert manifest(out)["complete"] is False
    with pytest.raises(ValueError, match=r"unfinished `elical-hf judge` run .*6 of 10 records judged, 4 missing"):
        load_records(out)
    capsys.readouterr()
    counting = CountingJudge()
    judge(source, out, complete=counting)
    report = json.loads(capsys.readouterr().out)
    assert counting.calls == 2  # shards 2 and 3 only
    assert load_records(out, derive=False).to_list() == records
    assert report["consistency"] == manifest(tmp_path / "reference")["totals"]["consistency"]
    assert report["consistency"]["judged"] == 10 and manifest(out)["complete"] is True
    again = CountingJudge()
    judge(source, out, "--batch_size", "4", complete=again)  # batch_size changes no verdict
    assert again.calls == 0


KILL_SCRIPT = """
import sys, time
from elical_hf.cli import judge
from tests.test_judge_resume import reply

def slow(prompts, max_new_tokens=16, batch_size=16, progress=True):
    time.sleep(1.0)  # long enough to be killed between shards, or while writing one
    return [reply(p) for p in prompts]

judge.main(sys.argv[1:], complete=slow)
"""


def test_sigkill_then_the_same_command_gives_the_uninterrupted_file(source, reference, tmp_path):
    out = tmp_path / "out" / "judged.jsonl"
    parts = out.parent / ".judged.jsonl.judge-parts"
    argv = ["--records", source, "--output", str(out), *LLM, "--shard_size", "3"]
    kill_once_written(KILL_SCRIPT, argv, shard_path(parts, 0))
    assert not out.exists() and not Path(shard_path(parts, 3)).exists()  # killed before the end
    counting = CountingJudge()
    assert judge_cli.main(argv, complete=counting) == 0
    assert 1 <= counting.calls <= 3
    assert read_records(out) == reference[0]
    assert not parts.exists() and [name for name in os.listdir(out.parent) if not name.endswith(".lock")] == [
        "judged.jsonl"]


def test_file_output_resumes_from_its_staging_folder_and_equals_judging_in_memory(source, tmp_path):
    from elical_hf.steps import JudgeArguments
    from elical_hf.steps import judge as judge_step

    out = tmp_path / "judged.parquet"
    parts = tmp_path / ".judged.parquet.judge-parts"
    with pytest.raises(RuntimeError, match="simulated crash"):
        judge(source, out, complete=CountingJudge(fail_on_call=2))
    assert not out.exists() and manifest(parts)["complete"] is False
    counting = CountingJudge()
    judge(source, out, complete=counting)
    assert counting.calls == 3 and not parts.exists()
    in_memory = judge_step(JudgeArguments(records=source, correctness="has_answer", consistency="llm"),
                           complete=CountingJudge()).records
    assert as_table(read_records(out)) == as_table(in_memory)
    lexical = tmp_path / "lexical.jsonl"
    judge(source, lexical, "--shard_size", "1")  # shards of one record: some without any gold answer
    lexical_args = JudgeArguments(records=source, correctness="has_answer", consistency="lexical")
    assert as_table(read_records(lexical)) == as_table(judge_step(lexical_args).records)


def test_an_error_before_the_first_shard_leaves_nothing_behind(source, tmp_path):
    for out in (tmp_path / "judged", tmp_path / "judged.jsonl"):
        with pytest.raises(RuntimeError, match="simulated crash"):
            judge(source, out, complete=CountingJudge(fail_on_call=1))
        assert sorted(name for name in os.listdir(tmp_path) if not name.endswith(".lock")) == ["in"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="simulated crash"):
        judge(source, tmp_path / "empty", complete=CountingJudge(fail_on_call=1))
    assert os.listdir(tmp_path / "empty") == []
    counting = CountingJudge()
    judge(source, tmp_path / "empty", "--lexical_threshold", "0.7", complete=counting)  # other settings: a new run
    assert counting.calls == 4


def test_workers_merged_equal_one_run_and_a_rerun_of_the_merge_judges_nothing(source, reference, tmp_path, capsys):
    records, _ = reference
    folders = []
    for index in range(3):
        folders.append(tmp_path / f"w{index}")
        judge(source, folders[-1], "--num_shards", "3", "--shard_index", str(index), complete=CountingJudge())
        ids = [r["id"] for r in load_records(folders[-1], derive=False).to_list()]
        assert ids == [r["id"] for r in records if worker_of(record_key(r, 0), 3) == index]
    assert cli_main(["merge", "--inputs", *map(str, reversed(folders)), "--output_dir", str(tmp_path / "m")]) == 0
    assert load_records(tmp_path / "m", derive=False).to_list() == records
    merged, single = manifest(tmp_path / "m"), manifest(tmp_path / "reference")
    for key in ("format", "settings", "num_records", "shard_size", "num_shards", "fingerprint", "worker", "totals"):
        assert merged[key] == single[key], key
    capsys.readouterr()
    counting = CountingJudge()
    judge(source, tmp_path / "m", complete=counting)
    assert counting.calls == 0 and json.loads(capsys.readouterr().out)["consistency"] == single["totals"]["consistency"]


def test_merge_refuses_judged_folders_that_do_not_add_up(source, tmp_path, raise_user_errors):
    w0, w1 = tmp_path / "w0", tmp_path / "w1"
    for index, folder in enumerate((w0, w1)):
        judge(source, folder, "--num_shards", "2", "--shard_index", str(index))

    def merge(*inputs):
        cli_main(["merge", "--inputs", *map(str, inputs), "--output_dir", str(tmp_path / "m")])

    with pytest.raises(ValueError, match=r"judging folders: worker\(s\) \[1\] of 2 missing"):
        merge(w0)
    with pytest.raises(ValueError, match=r"worker\(s\) \[0\] given more than once"):
        merge(w0, w0)
    judge(source, tmp_path / "other", "--num_shards", "2", "--shard_index", "1", "--lexical_threshold", "0.7")
    with pytest.raises(ValueError, match="settings.*'lexical_threshold': 0.7"):
        merge(w0, tmp_path / "other")
    fewer = save_records(make_records(9), tmp_path / "fewer.jsonl")
    judge(fewer, tmp_path / "fewer", "--num_shards", "2", "--shard_index", "1")
    with pytest.raises(ValueError, match="fingerprint"):
        merge(w0, tmp_path / "fewer")
    state = manifest(w0)
    (w0 / "manifest.json").write_text(json.dumps({**state, "complete": False}))
    with pytest.raises(ValueError, match="not finished"):
        merge(w0, w1)
    count, others = len(state["positions"]), manifest(w1)["positions"]
    taken = (others + state["positions"])[:count]  # w0 now claims positions w1 judged, as many as it holds records
    (w0 / "manifest.json").write_text(json.dumps({**state, "positions": taken}))
    with pytest.raises(ValueError, match="Record .* was judged by two workers"):
        merge(w0, w1)
    (w0 / "manifest.json").write_text(json.dumps(state))
    sampled = tmp_path / "sampled"
    sampled.mkdir()
    (sampled / "manifest.json").write_text(json.dumps({"format": "elical-hf/sampled-records"}))
    with pytest.raises(ValueError, match="not a judging manifest"):
        merge(w0, sampled)
    assert not (tmp_path / "m").exists()  # nothing half-written
    with pytest.raises(ValueError, match="every worker writes its own folder"):
        judge(source, tmp_path / "w.jsonl", "--num_shards", "2", "--shard_index", "0")
    same = save_records([{**record, "id": "same"} for record in make_records(2)], tmp_path / "same.jsonl")
    with pytest.raises(ValueError, match="Id 'nq/same' names two different questions"):  # ids split the workers
        judge(same, tmp_path / "same", "--num_shards", "2", "--shard_index", "0")
    assert not (tmp_path / "same").exists()


def test_a_rerun_with_other_records_or_settings_is_refused_in_one_line(source, tmp_path, capsys):
    out = tmp_path / "judged"
    judge(source, out)
    before = {name: (out / "shards" / name).read_bytes() for name in os.listdir(out / "shards")}
    capsys.readouterr()
    argv = ["judge", "--records", source, "--output", str(out), *LEXICAL, "--shard_size", "3"]
    other = save_records(make_records(11), tmp_path / "other.jsonl")
    for changed, expected in ([["--lexical_threshold", "0.7"], "settings.lexical_threshold: 0.5 -> 0.7"],
                              [["--shard_size", "2"], "shard_size: 3 -> 2"],
                              [["--records", other], "fingerprint: '"]):
        assert cli_main(replaced(argv, changed)) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err and "holds records judged from other records" in err
    assert {name: (out / "shards" / name).read_bytes() for name in os.listdir(out / "shards")} == before
    assert manifest(out)["complete"] is True


def test_bad_shards_are_judged_again_and_bad_outputs_refused(source, reference, tmp_path, caplog, raise_user_errors):
    records, _ = reference
    out = tmp_path / "reference"
    truncated = Path(shard_path(out, 1))
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    save_records(records[:1], shard_path(out, 2))  # a shard whose ids do not match its slice
    (out / "shards" / ".tmp-xyz-shard-00003.parquet").write_bytes(b"partial")  # left by a killed writer
    counting = CountingJudge()
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.shards"):
        judge(source, out, complete=counting)
    assert counting.calls == 2
    assert "shard-00001.parquet is unreadable" in caplog.text and "shard-00002.parquet holds 1 records" in caplog.text
    assert load_records(out, derive=False).to_list() == records
    assert sorted(os.listdir(out / "shards")) == [f"shard-0000{i}.parquet" for i in range(4)]
    with pytest.raises(ValueError, match="is inside the --records folder"):
        judge(os.path.dirname(source), os.path.join(os.path.dirname(source), "judged"))
    with pytest.raises(ValueError, match="is inside the --output folder"):
        judge(shard_path(out, 0), out)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is a folder that holds other files"):
        judge(source, tmp_path / "full")
    with one_writer(tmp_path / "locked"), pytest.raises(ValueError, match="Another process is writing"):
        judge(source, tmp_path / "locked")
    assert not (tmp_path / "locked").exists()


@pytest.mark.parametrize("env, given, expected", [
    ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "2"}, [], (4, 2)),
    ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1"}, [], (4, 3)),
    ({"SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_STEP": "4"}, [], (3, 2)),
    ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "2"}, ["--num_shards", "2", "--shard_index", "0"], (2, 0)),
    ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "2"}, ["--num_shards", "1"], (1, 0)),
    ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "2"}, ["--shard_index", "3"], (4, 3)),
    ({}, [], (1, 0)),
])
def test_worker_options_default_to_the_slurm_array_task(monkeypatch, tmp_path, env, given, expected):
    """`main` reads the Slurm array (the environment), not the dataclass: parsed, the options are what was given."""
    for name in ("COUNT", "ID", "MIN", "STEP"):
        monkeypatch.delenv(f"SLURM_ARRAY_TASK_{name}", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (options,) = judge_cli.make_parser().parse_with_config(
        ["--records", "r.jsonl", "--output", str(tmp_path / "out"), *LEXICAL, *given])
    assert (options.num_workers is None, options.worker_index is None) == ("--num_shards" not in given,
                                                                           "--shard_index" not in given)
    options, _ = judge_cli.slurm_workers(options)
    assert (options.num_workers, options.worker_index) == expected


def test_a_slurm_array_task_judges_its_share(source, reference, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    judge(source, tmp_path / "task", complete=CountingJudge())
    said = capsys.readouterr().err
    assert "judging as worker 1 of 2 (--num_workers and --worker_index from SLURM_ARRAY_TASK_*" in said
    assert manifest(tmp_path / "task")["worker"] == {"index": 1, "num_workers": 2, "total_records": 10}
    ids = [r["id"] for r in reference[0] if worker_of(record_key(r, 0), 2) == 1]
    assert [r["id"] for r in load_records(tmp_path / "task", derive=False).to_list()] == ids
    with pytest.raises(ValueError, match="every worker writes its own folder"):
        judge(source, tmp_path / "task.jsonl")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    with pytest.raises(ValueError, match=r"got worker 2 of 2\. \(--num_workers and --worker_index from SLURM_ARRAY_"):
        judge(source, tmp_path / "task")
