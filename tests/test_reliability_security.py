"""Every write stays in its folder and every upload holds only the folder's own files: names from data that would
become paths, symbolic links that leave a folder, tokens on the command line, and the permissions of atomic writes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from elical_hf import AutoModelForConfidence, push_metric_space, write_honestybench
from elical_hf.utils.atomic import atomic_folder, atomic_write_text
from elical_hf.cli import main as cli_main
from elical_hf.utils.files import links_leaving, path_component
from elical_hf.signals.records import save_records
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.reliability import case
from tests.test_hub import upload_base


def record(i: int, **fields) -> dict:
    return {"question": f"question {i}?", "answer": ["a"], "greedy_response": "a", "greedy_correctness": True,
            "sampling_response": ["a", "b"], "model": "tiny", "dataset": "nq", "split": "test", **fields}


def every_file(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """A fresh folder as the process's temporary folder, to see what a failed push leaves behind there."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@case("security", "`push --kind honestybench` of a records file whose `dataset` is `../../../../escaped`",
      "exits 2 before anything is written: `<file>, record 1: The dataset name '../../../../escaped' cannot be a "
      "folder or file name: ...`; nothing outside (or left in) the staging folder, nothing published")
def test_crafted_dataset_name_cannot_leave_the_staging_folder(hub, tmp_path, own_tmp, capsys):
    crafted = tmp_path / "records" / "crafted.jsonl"
    crafted.parent.mkdir()
    save_records([record(0), record(1, dataset="../../../../escaped")], crafted)
    before = every_file(tmp_path)
    assert cli_main(["push", str(crafted.parent), "mallory/bench", "--kind", "honestybench"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (f"elical-hf push: error: crafted.jsonl, record 1: The dataset name '../../../../escaped' cannot be "
                    "a folder or file name: it must not start with a dot, have spaces around it, or hold / \\ : * ? \" "
                    "< > | or control characters.")
    assert every_file(tmp_path) == before and os.listdir(own_tmp) == []
    assert hub.repo("mallory/bench", "dataset") is None


@case("security", "`write_honestybench` of records whose `model` is `../../outside` (or `a\\b`, `.hidden`)",
      "`ValueError` naming the record and the model name; the target folder gets no file")
def test_crafted_model_name_is_refused(tmp_path):
    for name in ("../../outside", "a\\b", ".hidden"):
        target = tmp_path / "bench"
        with pytest.raises(ValueError, match=r"records, record 0: The model name .* cannot be a folder or file name"):
            write_honestybench([record(0, model=name)], target)
        assert not target.exists() or every_file(target) == set()
    assert write_honestybench([record(0, model="org/Some-Model_v1.5")], tmp_path / "ok")[0]["model"] == \
        "org--Some-Model_v1.5"  # a Hub id's slash becomes `--`, as before
    with pytest.raises(ValueError, match="cannot be a folder or file name"):
        path_component("..", "split")


def saved_model(tiny_llama, folder: Path) -> Path:
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    return folder


@case("security", "`push` of a model folder holding a symbolic link to a file outside it (`notes.txt -> ~/secret`)",
      "exits 2, nothing uploaded: `<folder> holds symbolic links to outside it (notes.txt): refusing to publish what "
      "they point to. ...`; a link to a file inside the folder is uploaded as that file")
def test_push_refuses_links_leaving_the_model_folder(hub, tiny_llama, tmp_path, capsys):
    folder = saved_model(tiny_llama, tmp_path / "model")
    secret = tmp_path / "secret"
    secret.write_text("private key")
    (folder / "notes.txt").symlink_to(secret)
    upload_base(tmp_path)
    argv = ["push", str(folder), "alice/linked", "--base_model", "tiny/llama"]
    assert cli_main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"elical-hf push: error: {folder} holds symbolic links to outside it (notes.txt)")
    assert hub.repo("alice/linked") is None
    (folder / "notes.txt").unlink()
    (folder / "shared.txt").write_text("our notes")
    (folder / "notes.txt").symlink_to(folder / "shared.txt")  # stays inside: fine
    assert cli_main([*argv, "--include", "notes.txt", "shared.txt"]) == 0  # files a model does not need: on purpose
    files = hub.files("alice/linked")
    assert files["notes.txt"] == files["shared.txt"] == b"our notes"
    assert b"private key" not in b"".join(files.values())


@case("security", "a metric folder or a HonestyBench records folder with a link leaving it (`push --kind metric`, "
      "`--kind honestybench`)", "refused before staging, naming the link: `... holds symbolic links to outside it "
      "(...)`")
def test_links_leaving_metric_and_records_folders_are_refused(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    save_records([record(0)], outside / "nq_test.jsonl")
    records = tmp_path / "records"
    (records / "tiny").mkdir(parents=True)
    (records / "tiny" / "nq_test.jsonl").symlink_to(outside / "nq_test.jsonl")
    (records / "inner").symlink_to(records / "tiny")  # a link that stays inside does not count
    assert links_leaving(records) == [os.path.join("tiny", "nq_test.jsonl")]
    assert cli_main(["push", str(records), "alice/bench", "--kind", "honestybench"]) == 2
    assert "holds symbolic links to outside it (tiny/nq_test.jsonl)" in capsys.readouterr().err
    from elical_hf.publishing.metric_cards import write_metric_space

    metric = write_metric_space("honesty_auroc", tmp_path / "honesty_auroc")  # a complete Space folder
    (metric / "extra.txt").symlink_to(outside / "nq_test.jsonl")
    with pytest.raises(ValueError, match=r"holds symbolic links to outside it \(extra.txt\)"):
        push_metric_space("honesty_auroc", "alice/auroc", folder=metric)


@case("security", "`--token hf_...` on the command line (`push`, `convert-official`)",
      "a warning on stderr before the command runs (``--token on the command line is visible to other users (`ps`) "
      "...; set HF_TOKEN or run `hf auth login` instead``); `--help` says to leave it out; no warning for a token "
      "from `--config`")
def test_token_on_the_command_line_is_discouraged(tmp_path, capsys):
    for command in ("push", "convert-official"):
        with pytest.raises(SystemExit):
            cli_main([command, "--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert "HF_TOKEN environment variable or the token of `hf auth login`" in help_text
        assert "visible to other users of the machine (`ps`)" in help_text
    missing = str(tmp_path / "missing")
    assert cli_main(["push", missing, "alice/x", "--token", "hf_secret"]) == 2
    err = capsys.readouterr().err
    assert "warning: --token on the command line is visible to other users" in err and "HF_TOKEN" in err
    config = tmp_path / "push.yaml"
    config.write_text("token: hf_secret\n")
    assert cli_main(["push", missing, "alice/x", "--config", str(config)]) == 2
    assert "warning: --token" not in capsys.readouterr().err


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o077])
@case("data", "files and folders written atomically (`atomic_write_text`, `save_records`, `atomic_folder`) under "
      "umask 022 and 077", "created 0644 / 0600 and folders 0755 / 0700, as a plain `open` / `mkdir` would (was: files "
      "0600 whatever the umask)")
def test_atomic_writes_honour_the_umask(tmp_path, mask):
    with umask(mask):
        atomic_write_text(tmp_path / "a.json", json.dumps({"x": 1}))
        save_records([record(0)], tmp_path / "r.parquet")
        with atomic_folder(tmp_path / "folder") as staging:
            (staging / "inside.txt").write_text("x")
    assert mode(tmp_path / "a.json") == mode(tmp_path / "r.parquet") == 0o666 & ~mask
    assert mode(tmp_path / "folder") == 0o777 & ~mask and mode(tmp_path / "folder" / "inside.txt") == 0o666 & ~mask
