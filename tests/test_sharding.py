"""Sampling on N workers: questions assigned by a hash of their id, each worker's folder merged into one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from elical_hf.cli import main as cli_main
from elical_hf.signals import SamplingSettings, load_records, merge_samples, sample_records, worker_of
from elical_hf.signals.runner import TIMING_FIELDS


REPO = Path(__file__).resolve().parents[1]
WORDS = "who wrote hamlet what is the capital of france when was the king born which river".split()
QUESTIONS = [{"id": f"nq-{i}", "question": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(4)) + " ?",
              "answer": ["paris"], "dataset": "nq"} for i in range(11)]
SETTINGS = SamplingSettings(num_samples=2, max_new_tokens=4, batch_size=3, seed=5)


class EchoBackend:
    """A model-free backend: answers are functions of the question, so records are known without sampling."""

    name, kind, weights_source = "echo", "echo", None

    def generate(self, questions, settings, progress=True):
        return [{"greedy_response": q.upper(), "sampling_response": [f"{q} {j}" for j in range(settings.num_samples)],
                 "num_generated_tokens": settings.num_samples + 1} for q in questions]


def strip_timings(records):
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in records]


def test_worker_of_hashes_the_id_not_the_position():
    assert [worker_of(f"q{i}", 2) for i in range(8)] == [0, 1, 0, 0, 1, 0, 1, 1]  # SHA-256 of the id: fixed
    assert worker_of("nq-17", 4) == 3 and worker_of(3, 5) == worker_of("3", 5) == 3
    ids = [q["id"] for q in QUESTIONS]
    first = {i: worker_of(i, 3) for i in ids}
    assert {i: worker_of(i, 3) for i in reversed(ids)} == first and len(set(first.values())) == 3


def test_workers_cover_the_questions_once_and_merge_in_order(tmp_path):
    single = sample_records(QUESTIONS, EchoBackend(), SETTINGS, tmp_path / "single", shard_size=4, progress=False)
    parts = []
    for index in range(3):
        out = tmp_path / f"worker-{index}"
        records = sample_records(QUESTIONS, EchoBackend(), SETTINGS, out, shard_size=4, progress=False,
                                 num_workers=3, worker_index=index)
        assert {r["id"] for r in records} == {q["id"] for q in QUESTIONS if worker_of(q["id"], 3) == index}
        parts.append(str(out))
    merged = merge_samples(list(reversed(parts)), tmp_path / "merged")  # any order
    assert strip_timings(merged) == strip_timings(single)
    assert strip_timings(load_records(tmp_path / "merged", derive=False).to_list()) == strip_timings(single)
    manifest = json.loads((tmp_path / "merged" / "manifest.json").read_text())
    reference = json.loads((tmp_path / "single" / "manifest.json").read_text())
    for key in ("backend", "settings", "num_questions", "shard_size", "num_shards", "fingerprint", "worker"):
        assert manifest[key] == reference[key], key
    assert manifest["totals"]["generated_tokens"] == reference["totals"]["generated_tokens"]
    # A single-worker rerun on the merged folder finds every shard done.
    class Refusing(EchoBackend):
        def generate(self, questions, settings, progress=True):
            raise AssertionError("nothing should be sampled again")

    assert sample_records(QUESTIONS, Refusing(), SETTINGS, tmp_path / "merged", shard_size=4, progress=False) == merged


@pytest.fixture
def workers(tmp_path):
    folders = []
    for index in range(2):
        out = tmp_path / f"w{index}"
        sample_records(QUESTIONS, EchoBackend(), SETTINGS, out, shard_size=4, progress=False, num_workers=2,
                       worker_index=index)
        folders.append(out)
    return folders


def test_merge_refuses_workers_that_do_not_add_up(workers, tmp_path):
    w0, w1 = workers
    with pytest.raises(ValueError, match=r"worker\(s\) \[1\] of 2 missing"):
        merge_samples([w0], tmp_path / "m")
    with pytest.raises(ValueError, match=r"worker\(s\) \[0\] given more than once.*\[1\] of 2 missing"):
        merge_samples([w0, w0], tmp_path / "m")
    other = tmp_path / "other"
    sample_records(QUESTIONS, EchoBackend(), SamplingSettings(**{**vars(SETTINGS), "num_samples": 3}), other,
                   shard_size=4, progress=False, num_workers=2, worker_index=1)
    with pytest.raises(ValueError, match="settings.*'num_samples': 3"):
        merge_samples([w0, other], tmp_path / "m")
    fewer = tmp_path / "fewer"
    sample_records(QUESTIONS[:-1], EchoBackend(), SETTINGS, fewer, shard_size=4, progress=False, num_workers=2,
                   worker_index=1)
    with pytest.raises(ValueError, match="fingerprint"):
        merge_samples([w0, fewer], tmp_path / "m")
    assert not (tmp_path / "m").exists()  # nothing half-written


def test_merge_refuses_unfinished_or_changed_folders(workers, tmp_path):
    w0, w1 = workers
    manifest_path = w1 / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "complete": False}))
    with pytest.raises(ValueError, match="not finished"):
        merge_samples([w0, w1], tmp_path / "m")
    w0_positions = json.loads((w0 / "manifest.json").read_text())["positions"]
    manifest_path.write_text(json.dumps({**manifest, "positions": w0_positions[: len(manifest["positions"])]}))
    with pytest.raises(ValueError, match="sampled by two workers"):
        merge_samples([w0, w1], tmp_path / "m")
    manifest_path.write_text(json.dumps(manifest))
    os.remove(w1 / "shards" / "shard-00000.parquet")
    with pytest.raises(ValueError, match="shard-00000.parquet is missing"):
        merge_samples([w0, w1], tmp_path / "m")
    assert not (tmp_path / "m").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        merge_samples([w0, w1], tmp_path / "full")
    with pytest.raises(ValueError, match="must not be one of the inputs"):
        merge_samples([w0, w1], w0)
    with pytest.raises(ValueError, match="worker_index"):
        sample_records(QUESTIONS, EchoBackend(), SETTINGS, tmp_path / "bad", num_workers=2, worker_index=2)


def test_a_worker_folder_resumes_only_as_the_same_worker(workers):
    with pytest.raises(ValueError, match="worker"):
        sample_records(QUESTIONS, EchoBackend(), SETTINGS, workers[0], shard_size=4, progress=False, num_workers=2,
                       worker_index=1)


def _sample_command(questions: str, model: str, out: Path, *extra: str) -> list[str]:
    return ["sample", "--questions", questions, "--model", model, "--backend", "hf", "--output_dir", str(out),
            "--num_samples", "2", "--max_new_tokens", "4", "--shard_size", "3", "--dtype", "float32", *extra]


def test_two_worker_processes_write_the_records_of_one(tiny_llama, tmp_path):
    """`elical-hf sample --num_shards 2 --shard_index i` in two processes, then `elical-hf merge`: one run's records."""
    questions = tmp_path / "nq_train.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen([sys.executable, "-m", "elical_hf.cli",
                          *_sample_command(str(questions), tiny_llama, tmp_path / f"w{i}", "--batch_size", str(2 + i),
                                           "--num_shards", "2", "--shard_index", str(i))],
                         env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    try:
        outputs = [process.communicate(timeout=240)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    assert "Worker 1 of 2" in outputs[1] and "elical-hf merge" in outputs[1]
    assert cli_main(_sample_command(str(questions), tiny_llama, tmp_path / "single", "--batch_size", "4")) == 0
    assert cli_main(["merge", "--inputs", str(tmp_path / "w0"), str(tmp_path / "w1"),
                     "--output_dir", str(tmp_path / "merged")]) == 0

    single, merged = (load_records(tmp_path / name).to_list() for name in ("single", "merged"))
    assert [r["id"] for r in merged] == [q["id"] for q in QUESTIONS]
    assert {r["shard"] for r in merged} == {0, 1, 2, 3}
    numbers = ("greedy_logprobs", "greedy_cumulative_logprobs")
    ours, theirs = ([{k: r.pop(k) for k in numbers} for r in records] for records in (merged, single))
    assert strip_timings(merged) == strip_timings(single)  # same answers, samples, tokens, shards
    # Batches differ (2 and 3 questions vs 4): log-probabilities agree up to the rounding of batched kernels.
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
