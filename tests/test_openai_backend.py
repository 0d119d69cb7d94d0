"""Sampling and judging through an OpenAI-compatible server (`--backend openai`, `--judge_endpoint`), against
[`tests.openai_stub.StubServer`]: a real tiny model behind the OpenAI wire format, with faults on demand. The same
against a real vLLM is tests/test_vllm_server.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.settings.prompts import render_prompt
from elical_hf.signals import HFBackend
from elical_hf.signals.endpoint import ChatEndpoint
from elical_hf.signals.generation import SamplingSettings, build_prompt_ids
from elical_hf.signals.llm_judge import judge_with_llm, logprob_verdict
from elical_hf.signals.openai_backend import OpenAIBackend
from elical_hf.signals.openai_client import EndpointError, OpenAIClient
from elical_hf.signals.records import load_records
from elical_hf.signals.runner import TIMING_FIELDS
from tests.openai_stub import StubServer
from tests.test_cli_sample import write_questions


pytestmark = pytest.mark.float32  # the stub's model runs in float32, as the local backend it is compared with

SETTINGS = SamplingSettings(num_samples=3, max_new_tokens=6, top_k=5, repetition_penalty=1.05)


@pytest.fixture(scope="module")
def stub(tiny_llama):
    with StubServer(tiny_llama, "tiny-served", extra_models=()) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(stub):
    stub.faults.clear()
    stub.requests.clear()
    stub.honour_seed = True


def without_timings(records):
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in records]


def test_the_server_sees_the_hf_samplers_prompt_and_gives_its_greedy_answer(stub, tiny_llama):
    questions = ["who wrote hamlet?", "what is the capital of france?"]
    backend = OpenAIBackend(stub.url, tiny_llama)
    records = backend.generate(questions, SETTINGS, progress=False)
    local = HFBackend(tiny_llama).generate(questions, SETTINGS, progress=False)
    sent = [r["prompt"] for r in stub.requests]
    texts = [render_prompt(backend.tokenizer, SETTINGS.prompt_template.format(question=q)) for q in questions]
    assert sorted(set(sent)) == sorted(texts)  # exactly the text the HF sampler tokenizes
    ids = build_prompt_ids(backend.tokenizer, questions, SETTINGS)
    assert [backend.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts] == ids
    greedy = [r for r in stub.requests if r["temperature"] == 0]
    samples = [r for r in stub.requests if r["temperature"] != 0]
    assert all(r["logprobs"] == 1 and r["n"] == 1 for r in greedy) and all(r["n"] == 3 for r in samples)
    assert all(r["top_k"] == 5 and r["repetition_penalty"] == 1.05 and isinstance(r["seed"], int) for r in samples)
    assert all("top_k" not in r and "repetition_penalty" not in r for r in greedy)  # nothing it would not use
    for remote, here in zip(records, local):
        assert remote["greedy_response"] == here["greedy_response"]
        assert remote["greedy_tokens"] == here["greedy_tokens"]
        assert remote["greedy_logprobs"] == pytest.approx(here["greedy_logprobs"], abs=1e-4)
        assert len(remote["sampling_response"]) == 3 and remote["num_generated_tokens"] > 0
    assert backend.name == "tiny-served" and backend.context_length == 2048


def test_sample_command_records_name_the_served_model_and_resume(stub, tiny_llama, tmp_path, capsys):
    questions = write_questions(tmp_path / "nq_test.jsonl")
    out = tmp_path / "records"
    argv = ["sample", "--questions", questions, "--model", tiny_llama, "--backend", "openai", "--endpoint", stub.url,
            "--output_dir", str(out), "--num_samples", "2", "--max_new_tokens", "4", "--shard_size", "4",
            "--max_concurrency", "3"]
    assert cli_main(argv) == 0
    assert "openai backend, tiny-served" in capsys.readouterr().out
    records = load_records(out).to_list()
    assert len(records) == 6 and {r["model"] for r in records} == {"tiny-served"}
    assert all(r["greedy_logprobs"] for r in records)  # Prob / N-Prob have what they read
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"]["kind"] == "openai" and manifest["backend"]["name"] == "tiny-served"
    before = len(stub.requests)
    assert cli_main(argv) == 0 and len(stub.requests) == before  # finished: a rerun asks the server nothing


def test_a_killed_sample_run_finishes_with_the_records_of_an_uninterrupted_one(stub, tiny_llama, tmp_path):
    questions = write_questions(tmp_path / "nq_test.jsonl")
    argv = ["-m", "elical_hf.cli", "sample", "--questions", questions, "--model", tiny_llama, "--backend", "openai",
            "--endpoint", stub.url, "--num_samples", "2", "--max_new_tokens", "4", "--shard_size", "2"]
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, *argv, "--output_dir", str(clean)], check=True, env=env, capture_output=True)
    stub.faults[:] = ["slow"] * 200  # every request takes seconds: the run is still going when it is killed
    stub.slow_seconds = 0.5
    process = subprocess.Popen([sys.executable, *argv, "--output_dir", str(killed)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "shards" / "shard-00000.parquet").exists() and time.time() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    stub.faults.clear()
    done = sorted(p.name for p in (killed / "shards").glob("shard-*.parquet"))
    assert 1 <= len(done) < 3  # killed part of the way
    subprocess.run([sys.executable, *argv, "--output_dir", str(killed)], check=True, env=env, capture_output=True)
    assert without_timings(load_records(killed).to_list()) == without_timings(load_records(clean).to_list())


def test_a_server_that_ignores_seeds_is_not_reproducible(stub, tiny_llama):
    """What the resume guarantee rests on: with seeds honoured the samples repeat, without they do not."""
    backend = OpenAIBackend(stub.url, tiny_llama)
    settings = SamplingSettings(num_samples=4, max_new_tokens=8, temperature=2.0, top_p=1.0, top_k=0)
    questions = ["who wrote hamlet?", "what is the capital of france?", "who was the first president?"]
    first = backend.generate(questions, settings, progress=False)
    assert backend.generate(questions, settings, progress=False) == first
    stub.honour_seed = False
    assert [r["sampling_response"] for r in backend.generate(questions, settings, progress=False)] != [
        r["sampling_response"] for r in first]


def test_the_stubs_greedy_replies_do_not_depend_on_the_seed(stub):
    """A greedy reply is the same on every request, floats included, as an engine's: the stub decodes it beside a
    sample row it drops, whose length (from the seed) would otherwise change the batch the greedy row decodes in."""
    replies = set()
    for seed in range(40):
        body = {"model": stub.served_name, "prompt": "who wrote hamlet?", "max_tokens": 8, "temperature": 0.0,
                "logprobs": 1, "seed": seed}
        (choice,) = stub.answer(body, chat=False)["choices"]
        replies.add((choice["text"], tuple(choice["logprobs"]["token_logprobs"])))
    assert len(replies) == 1


@pytest.mark.parametrize("fault", [503, 429, 500, "garbage", "empty", "drop"])
def test_failed_requests_are_retried(stub, tiny_llama, fault):
    backend = OpenAIBackend(stub.url, tiny_llama, max_retries=3)
    stub.faults[:] = [fault, fault]
    records = backend.generate(["who wrote hamlet?"], SETTINGS, progress=False)
    assert records[0]["greedy_response"] == HFBackend(tiny_llama).generate(
        ["who wrote hamlet?"], SETTINGS, progress=False)[0]["greedy_response"]
    assert not stub.faults  # both faults were met and retried past


def test_a_server_that_keeps_failing_is_one_line_naming_it_and_nothing_half_written(stub, tiny_llama, tmp_path,
                                                                                   capsys):
    questions = write_questions(tmp_path / "nq_test.jsonl")
    out = tmp_path / "records"
    stub.faults[:] = [503] * 1000
    argv = ["sample", "--questions", questions, "--model", tiny_llama, "--backend", "openai", "--endpoint", stub.url,
            "--output_dir", str(out), "--num_samples", "2", "--max_new_tokens", "4", "--max_retries", "1"]
    assert cli_main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("elical-hf sample: error: EndpointError: The endpoint http://127.0.0.1:")
    assert "503" in error and "failed 2 times" in error
    assert not list((out / "shards").glob("*.parquet"))  # no shard, no partial file
    stub.faults[:] = ["slow"] * 10
    stub.slow_seconds = 2.0
    with pytest.raises(EndpointError, match="timed out"):
        OpenAIBackend(stub.url, tiny_llama, timeout=0.5, max_retries=0).generate(["q"], SETTINGS, progress=False)


def test_bad_endpoints_and_models_are_refused_at_once(stub, tiny_llama, tmp_path, raise_user_errors):
    with pytest.raises(ValueError, match="does not serve 'gpt-4o'; it serves: tiny-served"):
        OpenAIBackend(stub.url, tiny_llama, served_model="gpt-4o")
    with pytest.raises(EndpointError, match=r"http://127.0.0.1:9/v1 cannot be reached"):
        OpenAIBackend("http://127.0.0.1:9/v1", tiny_llama, max_retries=0)
    questions = write_questions(tmp_path / "q.jsonl")
    base = ["sample", "--questions", questions, "--output_dir", str(tmp_path / "o")]
    with pytest.raises(ValueError, match="pass --endpoint"):
        cli_main([*base, "--backend", "openai"])
    with pytest.raises(ValueError, match="must be an http"):
        cli_main([*base, "--backend", "openai", "--endpoint", "127.0.0.1:8000"])
    with pytest.raises(ValueError, match="pass --backend openai"):
        cli_main([*base, "--backend", "hf", "--endpoint", stub.url])
    with pytest.raises(ValueError, match="--max_concurrency must be an integer >= 1"):
        OpenAIClient(stub.url, max_concurrency=0)


def test_several_served_models_need_a_name(tiny_llama):
    with StubServer(tiny_llama, "a", extra_models=("b",)) as server:
        with pytest.raises(ValueError, match="serves 2 models \\(a, b\\): name one with --served_model"):
            OpenAIBackend(server.url, tiny_llama)
        assert OpenAIBackend(server.url, tiny_llama, served_model="a").name == "a"


def test_completions_equal_the_local_ones(stub, tiny_llama):
    prompts = ["who wrote hamlet", "name a river"]
    remote = OpenAIBackend(stub.url, tiny_llama).complete(prompts, max_new_tokens=6, progress=False)
    assert remote == HFBackend(tiny_llama).complete(prompts, max_new_tokens=6, progress=False)


def test_logprob_verdicts_read_the_first_token():
    assert logprob_verdict({"certain": -0.1, "Unc": -2.5}) == pytest.approx(0.9048 / (0.9048 + 0.0821), abs=1e-3)
    assert logprob_verdict({' "Certain': -1.0, "uncertain": -1.0}) == pytest.approx(0.5)
    assert logprob_verdict({"Yes": -0.1, "The": -1.0}) is None
    assert logprob_verdict({"un": -0.2, "c": -3.0}) < 0.1


def test_logprob_judging_through_the_endpoint_equals_the_local_model(stub, tiny_llama):
    records = [{"question": "who wrote hamlet?", "answer": ["Shakespeare"], "greedy_response": "Shakespeare",
                "sampling_response": ["Marlowe", "Shakespeare"]}]
    local, remote = [dict(records[0])], [dict(records[0])]
    backend, endpoint = HFBackend(tiny_llama), ChatEndpoint(stub.url, "tiny-served")
    for kind in ("correctness", "consistency"):
        judge_with_llm(local, backend.complete, kind, verdict="logprob",
                       first_token_logprobs=backend.first_token_logprobs, progress=False)
        judge_with_llm(remote, endpoint.complete, kind, verdict="logprob",
                       first_token_logprobs=endpoint.first_token_logprobs, progress=False)
    for name in ("greedy_correctness", "sampling_correctness", "consistency_judgement"):
        assert remote[0][name] == local[0][name]
    for name in ("greedy_correctness_probability", "sampling_correctness_probability", "consistency_probability"):
        assert name in local[0]
        assert remote[0][name] == pytest.approx(local[0][name], abs=1e-4, nan_ok=True) or remote[0][name] == local[0][name]
    assert all(r["max_tokens"] == 1 and r["top_logprobs"] == 20 for r in stub.requests)


def test_first_token_logprobs_do_not_depend_on_the_batch(tiny_llama):
    backend = HFBackend(tiny_llama)
    prompts = ["who wrote hamlet", "a much longer prompt about the capital of france and its rivers", "x"]
    together = backend.first_token_logprobs(prompts, batch_size=3, progress=False)
    alone = [backend.first_token_logprobs([p], batch_size=1, progress=False)[0] for p in prompts]
    for a, b in zip(together, alone):
        assert list(a) == list(b) and list(a.values()) == pytest.approx(list(b.values()), abs=1e-4)
    greedy = backend.complete(prompts, max_new_tokens=1, progress=False, repetition_penalty=1.0)
    assert [max(t, key=t.get).strip() for t in alone] == [g.strip() for g in greedy]


def test_the_judge_command_reads_logprob_verdicts_through_an_endpoint(stub, tmp_path):
    from elical_hf.signals.records import read_records, save_records
    from tests.test_cli_judge import make_records

    save_records(make_records(), tmp_path / "records.jsonl")
    assert cli_main(["judge", "--records", str(tmp_path / "records.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                     "--consistency", "llm", "--judge_endpoint", stub.url, "--judge_model", "tiny-served",
                     "--judge_verdict", "logprob"]) == 0
    judged = read_records(tmp_path / "out.jsonl")
    assert all(r["max_tokens"] == 1 and r["logprobs"] for r in stub.requests)  # one token per verdict
    for record in judged:
        probabilities = record["consistency_probability"]
        assert len(probabilities) == len(record["sampling_response"]) == len(record["consistency_judgement"])
        for p, verdict in zip(probabilities, record["consistency_judgement"]):
            assert p is None or (0 <= p <= 1 and bool(verdict) == (p >= 0.5))
    manifest_free = not any(p.name.endswith(".judge-parts") for p in tmp_path.iterdir())
    assert manifest_free  # the staging folder is gone once the file is written


def test_a_judge_endpoint_that_fails_midway_keeps_what_it_judged(stub, tmp_path, capsys):
    from elical_hf.signals.records import read_records, save_records
    from tests.test_cli_judge import make_records

    records = make_records()
    save_records(records, tmp_path / "records.jsonl")
    argv = ["judge", "--records", str(tmp_path / "records.jsonl"), "--output", str(tmp_path / "judged"),
            "--consistency", "llm", "--judge_endpoint", stub.url, "--judge_model", "tiny-served",
            "--max_new_tokens", "4", "--shard_size", "1", "--batch_size", "1"]
    first_shard = len(records[0]["sampling_response"])
    stub.faults[:] = [None] * first_shard + [500] * 1000  # the first shard's prompts answer, then the server breaks
    assert cli_main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "The judge endpoint http://127.0.0.1:" in error and "500" in error
    assert sorted(p.name for p in (tmp_path / "judged" / "shards").glob("*.parquet")) == ["shard-00000.parquet"]
    stub.faults.clear()
    stub.requests.clear()
    assert cli_main(argv) == 0
    asked = {r["messages"][0]["content"] for r in stub.requests}
    judged_before = {s for s in records[0]["sampling_response"]}
    assert not any(f"Answer: {s}" in prompt and records[0]["question"] in prompt
                   for prompt in asked for s in judged_before)  # shard 0 is not judged again
    assert len(load_records(tmp_path / "judged").to_list()) == len(records)


def test_records_of_a_served_model_are_refused_for_a_confidence_model_on_another_base(stub, tiny_llama, tmp_path):
    """`evaluate` and `threshold` read the records' `model`: the served name, not the tokenizer's folder."""
    from elical_hf.signals.records import check_records_match

    questions = write_questions(tmp_path / "nq_test.jsonl")
    out = tmp_path / "records"
    assert cli_main(["sample", "--questions", questions, "--model", tiny_llama, "--backend", "openai",
                     "--endpoint", stub.url, "--output_dir", str(out), "--num_samples", "2",
                     "--max_new_tokens", "4"]) == 0
    rows = load_records(out).to_list()
    check_records_match(rows, "org/tiny-served", "records")  # the served model's own base: accepted
    with pytest.raises(ValueError, match="holds the answers of tiny-served, but this confidence model is built on"):
        check_records_match(rows, tiny_llama, "records")
