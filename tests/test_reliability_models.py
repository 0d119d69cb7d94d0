"""Round 4 of the reliability probes (issue 48), the right weights and the right replies: records of another model
whose name ends alike, a base checkpoint or an adapter without all its tensors, the feature cache of another model,
and an endpoint's replies that do not hold what was asked."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.signals.records import save_records
from tests.conftest import save_tiny_base
from tests.reliability import case
from tests.test_reliability_records_and_settings import records_of
from tests.test_reliability_silent import judged_records
from tests.tiny import mark_trained, perturbed_confidence_model


QUESTIONS = ["who wrote hamlet?", "what is the capital of france?", "when was the king of spain born?"]


def rewrite_tensors(file: Path, change) -> None:
    """Write `change(tensors)` back into the safetensors `file`."""
    save_file(change(load_file(str(file))), str(file), metadata={"format": "pt"})


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@case("silent", "records of another model whose name ends alike: `out/run_a/final` vs `out/run_b/final`, "
      "`meta-llama/X` vs `someorg/X`, two tiny bases of different seeds in `a/base` and `b/base` (`train`, "
      "`evaluate`, `threshold`, `select-labels`, `probe-layers`)",
      "refused: `… holds the answers of …/b/base, but the base model you train on is …/a/base` (was: the same "
      "model, compared by the last path component, and `train` trained on the other model's answers); a Hub id still "
      "matches its cache snapshot and lm-eval's bare model name, the embedded default its dequantized copy, a folder "
      "its relative path")
def test_records_of_a_model_whose_name_ends_alike_are_refused(tmp_path, monkeypatch, raise_user_errors):
    from elical_hf.models.default_model import COMPLETE_MARKER, DEFAULT_MODEL, EMBEDDED_MODELS
    from elical_hf.signals.records import same_model

    monkeypatch.chdir(tmp_path)
    first, second = (save_tiny_base(tmp_path / run / "base", seed=seed) for run, seed in (("a", 0), ("b", 1)))
    assert not same_model("out/run_a/final", "out/run_b/final")
    assert not same_model("meta-llama/X", "someorg/X")
    assert not same_model(first, second) and not same_model("a/base", "b/base")
    records = save_records(records_of(second), tmp_path / "records.jsonl")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=f"holds the answers of {re.escape(second)}, but the base model you train on"):
        cli_main(["train", "--model_name_or_path", first, "--elicitation_data", records, "--calibration_data",
                  records, "--output_dir", str(out)])
    assert not out.exists()

    # What names one model still matches.
    snapshot = tmp_path / "hub" / "models--someorg--X" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    assert same_model("someorg/X", str(snapshot)) and same_model(str(snapshot), "SomeOrg/x")
    assert not same_model("meta-llama/X", str(snapshot))
    copy = tmp_path / "cache" / "dequantized"
    copy.mkdir(parents=True)
    (copy / COMPLETE_MARKER).write_text(EMBEDDED_MODELS[DEFAULT_MODEL].origin + "\n")
    assert same_model(DEFAULT_MODEL, str(copy)) and same_model("SmolLM2-135M-Instruct", DEFAULT_MODEL)
    assert same_model("a/base", first) and same_model("./a/base/", first) and same_model("a\\base", "a/base")


@pytest.mark.parametrize("broken", ["layer", "no tensors", "more layers", "fewer layers"])
@case("silent", "a base checkpoint without all its tensors: a decoder layer missing from `model.safetensors`, no "
      "tensors at all, a `config.json` naming more (or fewer) layers than the weights hold",
      "refused on load in one line naming the file and the tensors: `…/model.safetensors does not hold 9 tensor(s) "
      "the model has (model.layers.1.…): they would be random weights` (was: transformers' load report, then random "
      "weights; `train` wrote three \"trained\" models on them)")
def test_a_base_checkpoint_without_all_its_tensors_is_refused(tiny_llama, tmp_path, broken, raise_user_errors):
    from elical_hf.signals import HFBackend

    base = tmp_path / "base"
    shutil.copytree(tiny_llama, base)
    weights = base / "model.safetensors"
    if broken == "layer":
        rewrite_tensors(weights, lambda tensors: {k: v for k, v in tensors.items() if ".layers.1." not in k})
    elif broken == "no tensors":
        rewrite_tensors(weights, lambda tensors: {})
    else:
        edit_json(base / "config.json", num_hidden_layers=3 if broken == "more layers" else 1)
    wrong = "does not hold .* tensor\\(s\\) the model has" if broken != "fewer layers" else \
        "holds .* tensor\\(s\\) the model does not have"
    with pytest.raises(ValueError, match=f"^{re.escape(str(weights))} {wrong} \\(model\\.") as error:
        AutoModelForConfidence.from_pretrained(str(base))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=wrong):
        HFBackend(str(base))
    if broken == "layer":
        records = save_records(records_of(str(base)), tmp_path / "records.jsonl")
        out = tmp_path / "out"
        with pytest.raises(ValueError, match=wrong):
            cli_main(["train", "--model_name_or_path", str(base), "--elicitation_data", records,
                      "--calibration_data", records, "--output_dir", str(out)])
        assert not list(out.rglob("adapter_model.safetensors"))


def saved_model(tiny_llama, folder: Path) -> Path:
    """A trained-looking confidence model on the tiny Llama with non-zero LoRA weights, saved in `folder`."""
    model = perturbed_confidence_model(tiny_llama)
    model.save_pretrained(folder)
    mark_trained(folder)
    return folder


@pytest.mark.parametrize("kept", ["head only", "LoRA only", "nothing"])
@case("silent", "a saved confidence model whose `adapter_model.safetensors` lacks its LoRA tensors, its head's "
      "tensors, or holds none (`evaluate`, `threshold`, the gate, `from_pretrained`)",
      "refused on load in one line naming the file: `…/adapter_model.safetensors does not hold 28 tensor(s) the "
      "adapter has (…lora_A…)` (was: scored with a fresh LoRA, `evaluate` exited 0 with wrong confidences after a "
      "PEFT warning; without the head: a `KeyError` traceback)")
def test_an_adapter_without_its_tensors_is_refused(tiny_llama, tmp_path, capsys, kept):
    folder = saved_model(tiny_llama, tmp_path / "model")
    weights = folder / "adapter_model.safetensors"
    keep = {"head only": lambda key: "lora_" not in key, "LoRA only": lambda key: "confidence_head" not in key,
            "nothing": lambda key: False}[kept]
    rewrite_tensors(weights, lambda tensors: {k: v for k, v in tensors.items() if keep(k)})
    with pytest.raises(ValueError, match=f"^{re.escape(str(weights))} does not hold .* tensor\\(s\\) the adapter has"):
        AutoModelForConfidence.from_pretrained(str(folder))
    argv = ["evaluate", "--records", judged_records(tmp_path), "--model", f"EliCal={folder}", "--baselines", "",
            "--allow_other_model", "true", "--output_dir", str(tmp_path / "report")]
    assert cli_main(argv) == 2
    error = capsys.readouterr().err
    assert error.strip().splitlines()[-1].startswith(f"elical-hf evaluate: error: {weights} does not hold")
    assert "Traceback" not in error
    assert not (tmp_path / "report" / "results.json").exists()


@case("input", "a base checkpoint with a tensor of the wrong shape; a saved adapter whose head (or a LoRA tensor) has "
      "the wrong shape, or that holds a tensor its `adapter_config.json` does not name",
      "one line naming the file and the tensor: `…/model.safetensors holds 1 tensor(s) of the wrong shape "
      "(model.layers.0.mlp.up_proj.weight: [65, 32] in the file, [64, 32] in the model)` (was: a `RuntimeError` "
      "traceback pointing at transformers' load report; an extra adapter tensor was ignored)")
def test_tensors_of_the_wrong_shape_are_one_line_naming_the_file(tiny_llama, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(tiny_llama, base)
    key = "model.layers.0.mlp.up_proj.weight"
    rewrite_tensors(base / "model.safetensors", lambda tensors: {**tensors, key: torch.zeros(65, 32)})
    with pytest.raises(ValueError, match=f"^{re.escape(str(base / 'model.safetensors'))} holds 1 tensor\\(s\\) of the "
                                         f"wrong shape \\({re.escape(key)}: \\[65, 32\\] in the file, \\[64, 32\\]"):
        AutoModelForConfidence.from_pretrained(str(base))

    folder = saved_model(tiny_llama, tmp_path / "model")
    weights = folder / "adapter_model.safetensors"
    saved = load_file(str(weights))
    head = "base_model.model.confidence_head.weight"
    rewrite_tensors(weights, lambda tensors: {**tensors, head: torch.zeros(1, 33)})
    with pytest.raises(ValueError, match=f"^{re.escape(str(weights))} holds 1 tensor\\(s\\) of the wrong shape "
                                         f"\\({re.escape(head)}: \\[1, 33\\] in the file, \\[1, 32\\]"):
        AutoModelForConfidence.from_pretrained(str(folder))
    extra = "base_model.model.model.layers.0.mlp.up_proj.lora_C.weight"
    save_file({**saved, extra: torch.zeros(2)}, str(weights), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=f"holds 1 tensor\\(s\\) the adapter does not have \\({re.escape(extra)}"):
        AutoModelForConfidence.from_pretrained(str(folder))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@case("silent", "a saved adapter whose confidence head (or a LoRA tensor) holds NaN or infinite values",
      "refused on load in one line naming the file: `…/adapter_model.safetensors holds 1 tensor(s) with NaN or "
      "infinite values (…confidence_head.weight)` (was: loaded, every confidence NaN, so the gate abstained on "
      "everything)")
def test_an_adapter_with_non_finite_tensors_is_refused(tiny_llama, tmp_path, value):
    folder = saved_model(tiny_llama, tmp_path / "model")
    weights = folder / "adapter_model.safetensors"
    for part in ("confidence_head.weight", "lora_B"):
        rewrite_tensors(weights, lambda tensors: {k: torch.full_like(v, value) if part in k else v
                                                  for k, v in tensors.items()})
        with pytest.raises(ValueError, match=f"^{re.escape(str(weights))} holds .* tensor\\(s\\) with NaN or infinite "
                                             f"values \\(.*{re.escape(part)}"):
            AutoModelForConfidence.from_pretrained(str(folder))
        saved_model(tiny_llama, folder)


@pytest.mark.parametrize("change", ["missing", "narrow", "wide"])
@case("silent", "a base checkpoint (untied embeddings) whose `lm_head.weight` is missing, or narrower or wider than "
      "the config's `vocab_size` (the gate reads it to answer: `answer`, `serve`)",
      "one line naming the file: `…/model.safetensors: lm_head.weight has shape [357, 32], but the config says "
      "vocab_size 364 by hidden_size 32` (was: a `SafetensorError` traceback, an `IndexError`, or, too narrow, answers "
      "decoded silently over a cut vocabulary)")
def test_the_gates_lm_head_is_checked_against_the_config(tiny_llama, tmp_path, change):
    base = tmp_path / "base"
    shutil.copytree(tiny_llama, base)
    weights = base / "model.safetensors"
    if "lm_head.weight" not in load_file(str(weights)):
        pytest.skip("the tiny base ties its LM head")
    vocab = {"narrow": -7, "wide": 5}.get(change, 0)
    rewrite_tensors(weights, lambda tensors: {k: (torch.zeros(v.shape[0] + vocab, v.shape[1]) if k == "lm_head.weight"
                                                  else v) for k, v in tensors.items()
                                              if k != "lm_head.weight" or change != "missing"})
    model = AutoModelForConfidence.from_pretrained(str(base))
    wanted = "has no lm_head.weight" if change == "missing" else "lm_head.weight has shape .*, but the config says"
    with pytest.raises(ValueError, match=f"^{re.escape(str(weights))}:? {wanted}"):
        model.answer(["who wrote hamlet?"], threshold=0.0, max_new_tokens=2)


@case("silent", "`probe-layers` (or the layer features' cache) with a cache folder that holds the features of "
      "another model: the same config and the same first 1,024 values of every weight, a difference later in a tensor "
      "(or only another LoRA scaling)",
      "the other model's features are never read: the cache key hashes every weight whole, and the LoRA scaling (was: "
      "a sample of each weight's first 1,024 values, so the first model's features were handed to the second)")
def test_the_feature_cache_tells_models_apart_by_every_weight(tiny_llama, tmp_path):
    from elical_hf.training.layer_cache import cache_layer_features, features_fingerprint

    first, second = (AutoModelForConfidence.from_pretrained(tiny_llama) for _ in range(2))
    (weight,) = [p for n, p in second.named_parameters() if "layers.0.mlp.down_proj.base_layer.weight" in n]
    assert weight.numel() > 1024
    with torch.no_grad():
        weight.view(-1)[-1] += 5.0  # past the first 1,024 values
    features = [cache_layer_features(model, QUESTIONS, tmp_path / "cache", layers=[1], progress=False)
                for model in (first, second)]
    assert features[0].folder != features[1].folder
    assert not np.array_equal(features[0][1], features[1][1])

    third, fourth = (AutoModelForConfidence.from_pretrained(tiny_llama, lora_alpha=alpha) for alpha in (16, 32))
    for model in (third, fourth):
        with torch.no_grad():
            for n, parameter in model.named_parameters():
                if "lora_" in n:
                    parameter.fill_(0.01)
    assert dict(third.named_parameters()).keys() == dict(fourth.named_parameters()).keys()
    encoded = [[1, 2, 3]]
    assert features_fingerprint(third, encoded) != features_fingerprint(fourth, encoded)


@pytest.fixture(scope="module")
def stub(tiny_llama):
    from tests.openai_stub import StubServer

    with StubServer(tiny_llama, "tiny-served") as server:
        yield server


def every_choice(change):
    """A stub fault: `change(choice)` applied to each choice of a reply."""

    def fault(reply):
        for choice in reply["choices"]:
            change(choice)
        return reply

    return fault


def greedy_logprob(value: float):
    """A stub fault: the greedy answer's first token gets the log-probability `value`."""

    def change(choice):
        if choice.get("logprobs"):
            choice["logprobs"]["token_logprobs"][0] = value

    return every_choice(change)


@case("silent", "an endpoint (`sample --backend openai`) whose reply is far longer than `max_tokens` (a 60 MB answer "
      "to `--max_new_tokens 4`), names another model than the one asked for, or gives a greedy token a positive, huge "
      "or NaN log-probability; a `GET /models` entry without `id`",
      "refused in one line naming the endpoint: `The endpoint … answered a request for at most 4 token(s) with an "
      "answer of 600 characters …` / `… with a reply of more than N bytes` (past the size its request allows, a body "
      "is not read on) / `… answered a request for 'tiny-served' with a reply from 'other-model'` / `… gave the token "
      "'…' the log-probability 3.0: a log-probability is a finite number <= 0` / ``… lists a model without an `id` in "
      "GET /models`` (was: stored whole, 1.5 GB RSS and 240 MB of records, rc 0; credited to the model asked for; "
      "stored as given, for Prob and N-Prob to read; a `KeyError` traceback)")
def test_endpoint_replies_that_do_not_hold_what_was_asked_are_refused(stub, tiny_llama, tmp_path, capsys):
    from elical_hf.signals.generation import SamplingSettings
    from elical_hf.signals.openai_backend import OpenAIBackend
    from tests.test_cli_sample import write_questions

    settings = SamplingSettings(num_samples=2, max_new_tokens=4)
    backend = OpenAIBackend(stub.url, tiny_llama, max_retries=0)
    where = re.escape(f"The endpoint {stub.url}")
    faults = {
        "long": (every_choice(lambda c: c.update(text="paris " * 100)), "answered a request for at most 4 token"),
        "huge": (every_choice(lambda c: c.update(text="paris " * 1_000_000)), "more than [0-9,]+ bytes"),
        "model": (lambda reply: {**reply, "model": "other-model"}, "with a reply from 'other-model'"),
        "positive": (greedy_logprob(3.0), "the log-probability 3.0"),
        "overflow": (greedy_logprob(1e300), "the log-probability 1e\\+300"),
        "nan": (greedy_logprob(float("nan")), "the log-probability nan"),
    }
    try:
        for fault, message in faults.values():
            stub.faults[:] = [fault] * 20
            with pytest.raises(ValueError, match=f"^{where} .*{message}"):
                backend.generate(QUESTIONS[:1], settings, progress=False)
        stub.faults[:] = [faults["long"][0]] * 20
        out = tmp_path / "records"
        assert cli_main(["sample", "--questions", write_questions(tmp_path / "nq_test.jsonl"), "--model", tiny_llama,
                         "--backend", "openai", "--endpoint", stub.url, "--output_dir", str(out), "--num_samples", "2",
                         "--max_new_tokens", "4", "--max_retries", "0"]) == 2
        error = capsys.readouterr().err
        assert error.strip().splitlines()[-1].startswith(f"elical-hf sample: error: The endpoint {stub.url} ")
        assert "at most 4 token" in error.strip().splitlines()[-1]
        assert not list(out.rglob("*.jsonl")) and not list(out.rglob("*.parquet"))
    finally:
        stub.faults.clear()
    stub.listing = [{"object": "model", "root": tiny_llama}]
    try:
        with pytest.raises(ValueError, match=f"^{where} lists a model without an `id` in GET /models"):
            OpenAIBackend(stub.url, max_retries=0)
    finally:
        stub.listing = None


@case("silent", "an LLM judge endpoint (`judge --judge_endpoint URL --judge_verdict logprob`) whose first reply token "
      "has a positive, huge or NaN log-probability",
      "refused in one line naming the endpoint and the token (was: P(\"certain\") 0.997 stored silently, or an "
      "`OverflowError` traceback)")
def test_judge_endpoint_log_probabilities_are_checked(stub):
    from elical_hf.signals.endpoint import ChatEndpoint

    endpoint = ChatEndpoint(stub.url, "tiny-served", max_retries=0)

    def first_token(value):
        def fault(reply):
            for choice in reply["choices"]:
                content = (choice.get("logprobs") or {}).get("content") or []
                if content:
                    content[0]["logprob"] = value
                    for alternative in content[0].get("top_logprobs") or []:
                        alternative["logprob"] = value
            return reply
        return fault

    assert endpoint.first_token_logprobs(["Is Paris in France?"], progress=False)[0]  # a sound reply reads
    for value, shown in ((3.0, "3.0"), (1e300, "1e\\+300"), (float("nan"), "nan")):
        stub.faults[:] = [first_token(value)] * 5
        try:
            with pytest.raises(ValueError, match=f"{re.escape(stub.url)}.* the log-probability {shown}"):
                endpoint.first_token_logprobs(["Is Paris in France?"], progress=False)
        finally:
            stub.faults.clear()


@case("silent", "`sample --backend openai --model A` against a server serving another model B (another folder, "
      "another Hub id)",
      "refused before any request in one line naming both (`… serves tiny-served / …, not …/other: its answers would "
      "be credited to …`), accepted with `--allow_other_model` (a warning says so) (was: a warning, then B's answers "
      "recorded as A's)")
def test_sampling_a_server_that_serves_another_model_is_refused(stub, tiny_llama, tmp_path, caplog, raise_user_errors):
    from elical_hf.signals.openai_backend import OpenAIBackend
    from tests.test_cli_sample import write_questions

    other = save_tiny_base(tmp_path / "other", seed=1)
    out = tmp_path / "records"
    command = ["sample", "--questions", write_questions(tmp_path / "nq_test.jsonl"), "--backend", "openai",
               "--endpoint", stub.url, "--output_dir", str(out), "--num_samples", "2", "--max_new_tokens", "4"]
    for model in (other, "someorg/other-model"):
        with pytest.raises(ValueError, match=rf"serves tiny-served / .*, not {re.escape(model)}: its answers would be "
                                             "credited"):
            cli_main([*command, "--model", model])
        assert not out.exists()
    requests = len(stub.requests)
    assert OpenAIBackend(stub.url, tiny_llama).name == "tiny-served"  # the served folder: accepted, named as served
    with caplog.at_level("WARNING"):
        backend = OpenAIBackend(stub.url, other, allow_other_model=True)
    assert backend.tokenizer_source == other and "(allowed)" in caplog.text
    assert len(stub.requests) == requests  # refused or not, no completion was asked for


@case("silent", "two Hub cache snapshots of one repository at different commits (a record's model and a base), also "
      "as a server's `root` path that is not on this machine",
      "different models (was: the same model, both being the repo's Hub id); a snapshot still matches its Hub id and "
      "itself at the same commit")
def test_two_revisions_of_one_hub_model_are_not_the_same_model(tmp_path):
    from elical_hf.models.hub_ids import same_model

    cache = tmp_path / "hub" / "models--someorg--X" / "snapshots"
    old, new = cache / "1111aaaa", cache / "2222bbbb"
    old.mkdir(parents=True)
    new.mkdir()
    assert not same_model(str(old), str(new)) and not same_model(str(new), str(old))
    remote = "/srv/cache/huggingface/hub/models--someorg--X/snapshots/"
    assert not same_model(remote + "1111aaaa", str(new)) and same_model(remote + "2222bbbb", str(new))
    assert same_model(remote + "2222bbbb", "someorg/X") and same_model(str(old), "someorg/X")
    assert same_model(str(old), str(old) + "/") and not same_model(remote + "1111aaaa", "otherorg/X")
