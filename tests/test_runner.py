import json
import logging
import os
from pathlib import Path

import pytest
import torch

from elical_hf.signals import HFBackend, SamplingSettings, generate_answers, sample_records
from elical_hf.signals.records import read_records, save_records
from elical_hf.signals.runner import TIMING_FIELDS
from elical_hf.signals.shards import shard_path
from tests.killing import kill_once_written


QUESTIONS = [
    {"id": f"q{i}", "question": q, "answer": ["shakespeare"] if i % 2 else [], "dataset": "nq"}
    for i, q in enumerate(
        [
            "who wrote hamlet?",
            "what is the capital of france?",
            "who was the first president?",
            "in which year did the war end?",
            "which river is the largest in the world?",
            "who is the king of england?",
            "what is the name of the famous book?",
        ]
    )
]
SETTINGS = SamplingSettings(num_samples=2, max_new_tokens=4, batch_size=2, seed=7)


class CountingBackend:
    """Wraps a backend: counts `generate` calls and can fail on a given call (a simulated crash)."""

    def __init__(self, backend, fail_on_call: int | None = None):
        self.inner, self.fail_on_call, self.calls = backend, fail_on_call, 0
        self.name, self.kind, self.weights_source = backend.name, backend.kind, backend.weights_source
        self.tokenizer = backend.tokenizer  # the manifest records the template variables its prompts render with

    def generate(self, questions, settings, progress=True):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("simulated crash")
        return self.inner.generate(questions, settings, progress=progress)


@pytest.fixture(scope="module")
def backend(tiny_llama):
    return HFBackend(tiny_llama, autocast_dtype=None)  # fp32: exact numerics


@pytest.fixture(scope="module")
def reference(backend, tmp_path_factory):
    """An uninterrupted run: 7 questions in shards of 3 (3, 3, 1)."""
    out = tmp_path_factory.mktemp("reference")
    return out, sample_records(QUESTIONS, backend, SETTINGS, out, shard_size=3, progress=False)


def strip_timings(records):
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in records]


def test_uninterrupted_run_writes_shards_and_manifest(reference, backend):
    out, records = reference
    assert [r["id"] for r in records] == [q["id"] for q in QUESTIONS]
    assert sorted(os.listdir(out / "shards")) == [f"shard-0000{i}.parquet" for i in range(3)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["num_questions"] == 7 and manifest["num_shards"] == 3
    assert manifest["settings"]["num_samples"] == 2 and manifest["backend"]["name"] == backend.name
    assert manifest["totals"]["generated_tokens"] == sum(r["num_generated_tokens"] for r in records)
    first = records[0]
    assert first["model"] == backend.name and first["shard"] == 0 and first["answer"] == []
    assert first["shard_tokens"] == sum(r["num_generated_tokens"] for r in records[:3]) and first["shard_seconds"] > 0
    assert len(first["sampling_response"]) == 2 and isinstance(first["greedy_response"], str)
    assert read_records(shard_path(out, 2)) == records[6:]


def test_shards_do_not_change_randomness(reference, backend):
    """Seeds are per question: one call over all questions gives the same answers as the shards."""
    _, records = reference
    whole = generate_answers(
        backend.model, backend.tokenizer, [q["question"] for q in QUESTIONS], SETTINGS, False, autocast_dtype=None
    )
    for record, answers in zip(records, whole):
        for key in ("greedy_response", "greedy_tokens", "sampling_response", "num_generated_tokens"):
            assert record[key] == answers[key]
        torch.testing.assert_close(record["greedy_logprobs"], answers["greedy_logprobs"], atol=1e-5, rtol=0)


def test_rerun_skips_finished_shards(reference, backend):
    out, records = reference
    counting = CountingBackend(backend)
    again = sample_records(QUESTIONS, counting, SamplingSettings(**{**vars(SETTINGS), "batch_size": 5}), out, 3, False)
    assert counting.calls == 0 and again == records  # batch_size may change between runs


def test_resume_after_exception(reference, backend, tmp_path):
    crashing = CountingBackend(backend, fail_on_call=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        sample_records(QUESTIONS, crashing, SETTINGS, tmp_path, shard_size=3, progress=False)
    assert os.listdir(tmp_path / "shards") == ["shard-00000.parquet"]
    counting = CountingBackend(backend)
    resumed = sample_records(QUESTIONS, counting, SETTINGS, tmp_path, shard_size=3, progress=False)
    assert counting.calls == 2 and strip_timings(resumed) == strip_timings(reference[1])


KILL_SCRIPT = """
import sys, time
from elical_hf.signals import HFBackend, SamplingSettings, sample_records
from tests.test_runner import QUESTIONS, SETTINGS

backend = HFBackend(sys.argv[1], autocast_dtype=None)
generate = backend.generate

def slow_generate(questions, settings, progress=True):
    result = generate(questions, settings, progress=progress)
    time.sleep(2.0)  # long enough for the parent to kill us between shards... or while writing
    return result

backend.generate = slow_generate
sample_records(QUESTIONS, backend, SETTINGS, sys.argv[2], shard_size=3, progress=False)
"""


def test_resume_after_sigkill(reference, backend, tiny_llama, tmp_path):
    out = tmp_path / "killed"
    kill_once_written(KILL_SCRIPT, [tiny_llama, str(out)], shard_path(out, 0))
    assert not Path(shard_path(out, 2)).exists()  # killed before the end
    counting = CountingBackend(backend)
    resumed = sample_records(QUESTIONS, counting, SETTINGS, out, shard_size=3, progress=False)
    assert 1 <= counting.calls <= 2
    assert strip_timings(resumed) == strip_timings(reference[1])
    assert json.loads((out / "manifest.json").read_text())["complete"]


def test_corrupted_and_mismatched_shards_are_redone(reference, backend, tmp_path, caplog):
    out, records = reference
    for name in ["manifest.json"] + [f"shards/shard-0000{i}.parquet" for i in range(3)]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes((out / name).read_bytes())
    truncated = Path(shard_path(tmp_path, 1))
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    save_records(records[:1], shard_path(tmp_path, 2))  # a shard whose ids do not match its slice
    (tmp_path / "shards" / ".tmp-xyz-shard-00003.parquet").write_bytes(b"partial")  # left by a killed writer
    counting = CountingBackend(backend)
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.runner"):
        redone = sample_records(QUESTIONS, counting, SETTINGS, tmp_path, shard_size=3, progress=False)
    assert counting.calls == 2
    assert "shard-00001.parquet is unreadable" in caplog.text and "shard-00002.parquet holds 1 records" in caplog.text
    assert strip_timings(redone) == strip_timings(records)
    assert redone[:3] == records[:3]  # the intact shard was kept as it was
    assert sorted(os.listdir(tmp_path / "shards")) == [f"shard-0000{i}.parquet" for i in range(3)]


def test_mismatched_settings_or_questions_raise(reference, backend):
    out, _ = reference
    with pytest.raises(ValueError, match="settings.num_samples: 2 -> 3"):
        sample_records(QUESTIONS, backend, SamplingSettings(**{**vars(SETTINGS), "num_samples": 3}), out, 3, False)
    with pytest.raises(ValueError, match="fingerprint"):
        sample_records(QUESTIONS[::-1], backend, SETTINGS, out, 3, False)
    with pytest.raises(ValueError, match="shard_size: 3 -> 2"):
        sample_records(QUESTIONS, backend, SETTINGS, out, 2, False)


def test_bad_inputs(backend, tmp_path):
    with pytest.raises(ValueError, match="row 1 \\(id 'b'\\)"):
        sample_records([{"question": "ok?"}, {"id": "b", "question": "  "}], backend, SETTINGS, tmp_path)
    with pytest.raises(ValueError, match="row 0"):
        sample_records([{"id": "a"}], backend, SETTINGS, tmp_path)
    with pytest.raises(ValueError, match="shard_size"):
        sample_records(QUESTIONS, backend, SETTINGS, tmp_path, shard_size=0)
    with pytest.raises(ValueError, match="num_samples"):
        SamplingSettings(num_samples=0)
    (tmp_path / "orphan" / "shards").mkdir(parents=True)
    (tmp_path / "orphan" / "shards" / "shard-00000.parquet").write_bytes(b"x")
    with pytest.raises(ValueError, match="no manifest.json"):
        sample_records(QUESTIONS, backend, SETTINGS, tmp_path / "orphan")


def test_questions_without_answers_or_ids_and_progress_bar(backend, tmp_path, capsys):
    records = sample_records([{"question": "who wrote hamlet?"}], backend, SETTINGS, tmp_path, shard_size=4)
    assert records[0]["id"] == "0" and records[0]["answer"] == [] and records[0]["dataset"] is None
    assert "tok_s" in capsys.readouterr().err
