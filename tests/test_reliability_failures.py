"""Round 3 of the reliability probes (issue 38), rechecked by new probes: a command whose endpoint fails exits, a gate
used from several threads scores with its own adapter, an `--include` that names no top-level file is refused, and a
retriever's or question's bad text is named as what it is."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap

import pytest

from tests.reliability import case
from tests.test_reliability_endpoints import GATE_QUESTIONS, gate_setup  # noqa: F401 - the fixture


def saved_tiny_model(tmp_path, tiny_llama):
    """A fresh confidence model on the tiny Llama, saved in `tmp_path / "model"`."""
    from elical_hf import AutoModelForConfidence

    folder = tmp_path / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    return folder


@case("data", "`elical-hf judge --judge_endpoint URL` (or `sample --backend openai`) when the endpoint cannot be "
      "reached or answers HTML: the error leaves the endpoint's client in a reference cycle, collected at exit",
      "the command prints its one-line error and exits (was: it then hung forever at interpreter exit, waiting on the "
      "client's stopped event-loop thread)")
def test_a_failed_endpoint_client_does_not_hang_the_exit():
    script = textwrap.dedent("""
        from elical_hf.signals.openai_client import OpenAIClient
        client = OpenAIClient("http://127.0.0.1:9/v1", max_retries=0)
        client._start()  # its event loop and connections, as after a first request
        cycle = [client]
        cycle.append(cycle)  # as an exception's traceback holds it
        del client, cycle
        print("exiting")
    """)
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung at exit")
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr


@case("silent", "`ConfidenceGate.abatch` / `ainvoke` (each input on a thread of its own), or several gates on one "
      "model used from threads at once",
      "every confidence is the one `invoke` gives, and the model keeps its adapter (was: interleaved calls left the "
      "adapter switched off: wrong confidences and decisions for that call and every later one)")
def test_a_gate_used_from_threads_scores_with_its_adapter(gate_setup):  # noqa: F811
    from elical_hf.integrations.langchain import ConfidenceGate

    model, band, answered, banded, abstained = gate_setup
    gate = ConfidenceGate(model, max_new_tokens=2)
    expected = {q: gate.invoke(q).response_metadata["elical"]["confidence"] for q in GATE_QUESTIONS}
    for _ in range(3):
        replies = asyncio.run(gate.abatch(GATE_QUESTIONS * 2))
        got = [r.response_metadata["elical"]["confidence"] for r in replies]
        assert got == pytest.approx([expected[q] for q in GATE_QUESTIONS * 2], abs=1e-4)
    after = [r.response_metadata["elical"]["confidence"] for r in gate.batch(GATE_QUESTIONS)]
    assert after == pytest.approx([expected[q] for q in GATE_QUESTIONS], abs=1e-4)


@case("input", "`ConfidenceGate.batch([q, 'who \\udcff?'])`, or a retriever whose context holds a lone surrogate",
      "that item's error names it: `The text of input 1 is not valid Unicode …` / `The text of the context the "
      "retriever returned for '…' …` (was: `question row 0`, for an item of another row or for the context)")
def test_a_gates_bad_text_is_named_as_what_it_is(gate_setup):  # noqa: F811
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    from elical_hf.integrations.langchain import ConfidenceGate

    model, band, answered, banded, abstained = gate_setup
    replies = ConfidenceGate(model, max_new_tokens=2).batch([answered[0], "who \udcff wrote?"], return_exceptions=True)
    assert isinstance(replies[0], AIMessage)
    assert isinstance(replies[1], ValueError) and "The text of input 1 is not valid Unicode" in str(replies[1])
    gate = ConfidenceGate(model, retriever=RunnableLambda(lambda q: "bad \udcff context"), retrieve_threshold=band,
                          max_new_tokens=2)
    replies = gate.batch([banded[0], answered[0]], return_exceptions=True)
    assert isinstance(replies[0], ValueError)
    assert f"The text of the context the retriever returned for {banded[0]!r}" in str(replies[0])
    assert isinstance(replies[1], AIMessage)


@case("silent", "`elical-hf push FOLDER --include sub/key.pem` or `--include /elsewhere/notes.txt` (not a file at the "
      "top of the folder)",
      "refused before anything is published: `--include sub/key.pem: not a file at the top of …` (was: silently not "
      "published, the push reported done)")
def test_push_include_must_name_a_top_level_file(tmp_path, tiny_llama):
    from elical_hf.publishing.hub import _stage_model_folder

    folder = saved_tiny_model(tmp_path, tiny_llama)
    (folder / "sub").mkdir()
    (folder / "sub" / "notes.txt").write_text("how I trained it\n")
    (tmp_path / "elsewhere.txt").write_text("notes\n")
    for include in ("sub/notes.txt", str(tmp_path / "elsewhere.txt")):
        staging = tmp_path / f"staging-{len(include)}"
        staging.mkdir()
        with pytest.raises(ValueError, match=f"--include {include}: not a file at the top of"):
            _stage_model_folder(str(folder), staging, [include])
        assert list(staging.iterdir()) == []


@case("silent", "records sampled with `--model base/` (a trailing separator) and trained or scored with `base`",
      "the same model: accepted (was: `holds the answers of base/, but this confidence model is built on base`); "
      "records of another model are still refused")
def test_a_trailing_separator_names_the_same_model():
    from elical_hf.signals.records.reader import check_records_model, same_model

    assert same_model("models/base/", "models/base") and same_model("base\\", "./base")
    check_records_model(["base/", "base/"], "base", "r.jsonl")
    with pytest.raises(ValueError, match="holds the answers of other/, but this confidence model is built on base"):
        check_records_model(["other/"], "base", "r.jsonl")


@case("silent", "a hand-edited `confidence_config.json` naming a field twice (`decision_threshold` 0.5, then 0.99), "
      "or with `max_length: 10**30`",
      "refused on load, naming the file: `field(s) decision_threshold given more than once (JSON keeps only the last: "
      "which one was meant?)` / `` `max_length` must lie in [8, 16,777,216] tokens `` (the last value was used)")
def test_a_config_with_a_duplicated_field_or_an_absurd_length_is_refused(tiny_llama, tmp_path):
    from elical_hf import AutoModelForConfidence
    from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME

    folder = saved_tiny_model(tmp_path, tiny_llama)
    path = folder / CONFIDENCE_CONFIG_NAME
    saved = path.read_text()
    path.write_text(saved.replace("{", '{"decision_threshold": 0.5, "decision_threshold": 0.99,', 1))
    with pytest.raises(ValueError, match=r"decision_threshold given more than once"):
        AutoModelForConfidence.from_pretrained(folder)
    config = json.loads(saved)
    path.write_text(json.dumps({**config, "max_length": 10**30}))
    with pytest.raises(ValueError, match=r"`max_length` must lie in \[8, 16,777,216\] tokens"):
        AutoModelForConfidence.from_pretrained(folder)


@case("security", "`elical-hf push` of a folder whose `tokenizer.model` is a symbolic link to `sub/key.pem` (a file "
      "below the folder)", "refused before anything is staged: `… holds symbolic links to files below it: "
      "tokenizer.model -> sub/key.pem …` (was: the key published under the tokenizer's name)")
def test_push_refuses_a_model_file_linked_to_a_file_below_it(tmp_path, tiny_llama):
    from elical_hf.publishing.hub import _stage_model_folder

    folder = saved_tiny_model(tmp_path, tiny_llama)
    (folder / "sub").mkdir()
    (folder / "sub" / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (folder / "tokenizer.model").symlink_to("sub/key.pem")
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(ValueError, match=r"symbolic links to files below it: tokenizer.model -> sub/key.pem"):
        _stage_model_folder(str(folder), staging)
    assert list(staging.iterdir()) == []


@case("input", "`elical-hf serve --mode completion` given a request with `\"elical\": {\"threshold\": 0.9}` (gate "
      "options where nothing is gated)",
      "a 400 for that request, `param: elical`: `The elical gate options (thresholds) apply to a gate server; this one "
      "serves plain completions …` (was: accepted and silently ignored)")
def test_gate_options_are_refused_where_nothing_is_gated():
    from elical_hf.serve.completion import CompletionEngine
    from elical_hf.serve.schema import ChatCompletionRequest, RequestError
    from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    engine = CompletionEngine(make_tiny_causal_lm(tokenizer), tokenizer, "tiny-chat", max_tokens=4)
    request = {"messages": [{"role": "user", "content": "who wrote hamlet"}]}
    assert engine.prepare(ChatCompletionRequest(**request)).max_tokens == 4
    with pytest.raises(RequestError, match="apply to a gate server") as refused:
        engine.prepare(ChatCompletionRequest(**request, elical={"threshold": 0.9}))
    assert refused.value.param == "elical" and refused.value.status == 400


@case("input", "a model folder whose `chat_template.jinja` raises when it renders a question "
      "(`{{ raise_exception('no') }}`)",
      "refused on load in one line naming the folder: `<folder>: its chat template fails to render a question "
      "(TemplateError: no) …` (was: transformers' bare `TemplateError: no`)")
def test_a_chat_template_that_raises_is_named_on_load(tmp_path, tiny_llama):
    from elical_hf import AutoModelForConfidence

    folder = saved_tiny_model(tmp_path, tiny_llama)
    (folder / "chat_template.jinja").write_text("{{ raise_exception('no') }}")
    with pytest.raises(ValueError, match=r"model: its chat template fails to render a question \(TemplateError: no\)"):
        AutoModelForConfidence.from_pretrained(folder)
