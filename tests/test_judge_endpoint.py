"""The LLM judge through an OpenAI-compatible endpoint: `elical-hf serve --mode completion` answers each judge prompt
exactly as the local judge does, and `elical-hf judge --judge_endpoint URL` gives the same verdicts as in-process."""

from __future__ import annotations

import copy

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.signals import ChatEndpoint, HFBackend, apply_judges
from elical_hf.signals.generation import complete_prompts
from elical_hf.signals.llm_judge import consistency_prompt, correctness_prompt
from elical_hf.signals.records import read_records, save_records
from tests.conftest import save_tiny_base
from tests.serving import QuietServer
from tests.test_cli_judge import make_records


pytestmark = pytest.mark.float32  # the server process runs in float32 too
VERDICT_FIELDS = ("greedy_correctness", "sampling_correctness", "consistency_judgement")


@pytest.fixture(scope="module")
def judge_server(tmp_path_factory):
    base = save_tiny_base(tmp_path_factory.mktemp("judge"), "llama", seed=3, initializer_range=0.2)
    server = QuietServer(base, "--mode", "completion", "--served_model_name", "judge", "--batch_wait_ms", "20")
    yield server, base
    server.stop()


def judge_prompts() -> list[str]:
    records = make_records()[:2]
    return ([correctness_prompt(r["question"], r["answer"], r["greedy_response"]) for r in records]
            + [consistency_prompt(r["question"], r["greedy_response"], s) for r in records for s in r["sampling_response"]])


def test_the_endpoint_answers_as_the_local_judge_does(judge_server):
    server, base = judge_server
    prompts = judge_prompts()
    backend, endpoint = HFBackend(base), ChatEndpoint(server.url, "judge")
    for penalty in (1.0, 1.05):  # plain greedy, and the judges' default (the reference code's) penalty
        local = backend.complete(prompts, max_new_tokens=8, progress=False, repetition_penalty=penalty)
        remote = endpoint.complete(prompts, max_new_tokens=8, batch_size=4, progress=False, repetition_penalty=penalty)
        assert remote == local and len(set(local)) > 1  # replies differ by prompt: the comparison means something
    plain = backend.complete(prompts, max_new_tokens=8, progress=False)
    assert plain != local  # the penalty changes replies here, so sending it matters


def test_completion_mode_renders_the_whole_conversation(judge_server):
    server, base = judge_server
    backend = HFBackend(base)
    expected = complete_prompts(backend.model, backend.tokenizer, ["who wrote hamlet"], max_new_tokens=5,
                                system_prompt="you are a helpful assistant", progress=False)[0]
    status, body, headers = server.post("/chat/completions", {"model": "judge", "max_tokens": 5, "messages": [
        {"role": "system", "content": "you are a helpful assistant"}, {"role": "user", "content": "who wrote hamlet"}]})
    assert status == 200 and body["choices"][0]["message"]["content"] == expected
    assert "elical" not in body and not any(name.startswith("x-elical") for name in headers)  # no gating here
    status, error, _ = server.post("/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                         "stream": True})
    assert status == 400 and error["error"]["param"] == "stream"


def test_the_judge_command_through_an_endpoint_gives_the_local_verdicts(judge_server, tmp_path, capsys):
    server, base = judge_server
    records = make_records()
    save_records(records, tmp_path / "records.jsonl")
    assert cli_main(["judge", "--records", str(tmp_path / "records.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                     "--correctness", "llm", "--consistency", "llm", "--judge_endpoint", server.url,
                     "--judge_model", "judge", "--max_new_tokens", "8"]) == 0
    judged = read_records(tmp_path / "out.jsonl")
    local = copy.deepcopy(records)
    apply_judges(local, "llm", "llm", complete=HFBackend(base).complete, max_new_tokens=8)
    for remote, here in zip(judged, local):
        assert [remote.get(name) for name in VERDICT_FIELDS] == [here.get(name) for name in VERDICT_FIELDS]
    assert judged[0]["correctness_judge"] == "judge"  # the judge's model, not where it was served
    assert judged[0]["consistency_judge"] == "judge"


def test_endpoint_failures_are_one_line(judge_server, tmp_path, capsys):
    server, _ = judge_server
    save_records(make_records(), tmp_path / "records.jsonl")
    argv = ["judge", "--records", str(tmp_path / "records.jsonl"), "--output", str(tmp_path / "out.jsonl"),
            "--correctness", "llm", "--judge_endpoint", server.url]
    assert cli_main([*argv, "--judge_model", "gpt-4o"]) == 2  # the server serves "judge"
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert error.startswith("elical-hf judge: error: The judge endpoint ")
    assert "refused a request (404)" in error and "'gpt-4o' is not served" in error
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(OSError, match="failed 2 times"):
        ChatEndpoint("http://127.0.0.1:9/v1", "judge", max_retries=1).complete(["x"], progress=False)


def test_bad_judge_endpoint_options_are_refused(tmp_path, raise_user_errors):
    save_records(make_records(), tmp_path / "records.jsonl")
    argv = ["judge", "--records", str(tmp_path / "records.jsonl"), "--output", str(tmp_path / "out.jsonl")]
    with pytest.raises(ValueError, match="--judge_endpoint runs the `llm` judge"):
        cli_main([*argv, "--correctness", "has_answer", "--judge_endpoint", "http://127.0.0.1:8000/v1"])
    with pytest.raises(ValueError, match="must be an http"):
        cli_main([*argv, "--correctness", "llm", "--judge_endpoint", "127.0.0.1:8000"])


@pytest.mark.slow
def test_the_embedded_model_judges_the_same_through_elical_hf_serve(tmp_path):
    """The issue's setting: `elical-hf serve` of the embedded SmolLM2 in completion mode as the paper's LLM judge, on
    real sampled records (the demo's committed ones): the same verdicts as the judge loaded in-process."""
    from elical_hf import DEFAULT_MODEL
    from elical_hf.demo import DEMO_RECORDS
    from elical_hf.signals.records import read_records as read

    records = [r for r in read(DEMO_RECORDS) if r.get("answer")][:4]  # 8 answers, each judged twice (CI time)
    for record in records:
        record["sampling_response"] = record["sampling_response"][:1]
    local = copy.deepcopy(records)
    apply_judges(local, "llm", "llm", judge_model=DEFAULT_MODEL)
    with QuietServer(DEFAULT_MODEL, "--mode", "completion") as server:
        remote = copy.deepcopy(records)
        apply_judges(remote, "llm", "llm", judge_model=DEFAULT_MODEL, judge_endpoint=server.url)
    for a, b in zip(remote, local):
        assert [a[name] for name in VERDICT_FIELDS] == [b[name] for name in VERDICT_FIELDS]
