import json

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.steps import load_questions
from elical_hf.signals import load_honestybench


QUESTIONS = [
    ("who wrote hamlet?", ["William Shakespeare"]),
    ("what is the capital of france?", ["Paris"]),
    ("who was the first president?", ["George Washington"]),
    ("in which year did the war end?", ["1945"]),
    ("which river is the largest in the world?", []),
    ("who is the king of england?", ["Charles"]),
]


def write_questions(path) -> str:
    rows = [{"id": f"nq-{i}", "question": q, "answer": a} for i, (q, a) in enumerate(QUESTIONS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_cli_sample_writes_records_that_load_back(tiny_llama, tmp_path, capsys):
    questions = write_questions(tmp_path / "nq_test.jsonl")  # the file name names the dataset
    out = tmp_path / "records"
    argv = [
        "sample", "--questions", questions, "--model", tiny_llama, "--backend", "hf", "--output_dir", str(out),
        "--num_samples", "2", "--max_new_tokens", "4", "--shard_size", "4", "--batch_size", "3",
    ]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert "Wrote 6 records" in printed and "load_records" in printed and str(out) in printed
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["shard-00000.parquet", "shard-00001.parquet"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["num_samples"] == 2 and manifest["settings"]["max_new_tokens"] == 4

    bench = load_honestybench(out, progress=False)
    assert list(bench) == ["in_domain_test"]  # nq *test* file -> the paper's in-domain test split
    rows = bench["in_domain_test"]
    assert rows["id"] == [f"nq-{i}" for i in range(6)] and set(rows["dataset"]) == {"nq"}
    assert set(rows["model"]) == {tiny_llama} and all(len(s) == 2 for s in rows["sampling_response"])
    assert rows[4]["answer"] == [] and rows[0]["answer"] == ["William Shakespeare"]

    assert cli_main(argv) == 0  # a rerun resumes: nothing left to sample
    assert "Wrote 6 records" in capsys.readouterr().out
    assert cli_main(argv[:-8] + ["--num_samples", "3", "--max_new_tokens", "4", "--shard_size", "4"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # a user error: one line, exit 2
    assert last.startswith("elical-hf sample: error:") and "settings.num_samples" in last


def test_load_questions_sources(tmp_path):
    rows = load_questions("bundled:nq:2,squad:1")
    assert [r["dataset"] for r in rows] == ["nq", "nq", "squad"] and all(r["answer"] for r in rows)
    assert len(load_questions("bundled:popqa:5", limit=3)) == 3
    with pytest.raises(ValueError, match="Unknown bundled dataset"):
        load_questions("bundled:nope")
    with pytest.raises(ValueError, match="Bad bundled limit"):
        load_questions("bundled:nq:x")
    (tmp_path / "q.txt").write_text("who?\n")
    with pytest.raises(ValueError, match="Unknown table format"):
        load_questions(str(tmp_path / "q.txt"))
    (tmp_path / "q.csv").write_text("text\nwho?\n")
    with pytest.raises(ValueError, match="no `question` column"):
        load_questions(str(tmp_path / "q.csv"))
    (tmp_path / "mine.csv").write_text("question\nwho?\n")
    assert load_questions(str(tmp_path / "mine.csv"), dataset="popqa") == [{"question": "who?", "dataset": "popqa"}]
    assert load_questions(str(tmp_path / "mine.csv")) == [{"question": "who?"}]
