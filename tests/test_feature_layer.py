"""The feature layer: the head reads `hidden_states[i]` of transformers' `output_hidden_states`, computed by running
only the first `i` decoder blocks, in scoring, in training and in the gate's prefill; the layer is saved, reloaded,
converted and named in the card; LoRA adapts only the blocks that run; a layer out of range is one clear error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from peft import LoraConfig

from elical_hf import AutoModelForConfidence, ConfidenceConfig, convert_official
from elical_hf.cli import main as cli_main
from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME, resolve_feature_layer
from elical_hf.data.encoding import encode_prompts, pad_batch
from tests.conftest import save_tiny_base


pytestmark = pytest.mark.float32  # early stop vs a full pass to float32 rounding

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "how tall is mount everest in metres?",
             "when was the king born"]
DEPTH = 4
TOLERANCE = 1e-5
"""The early-stopped state vs the same state from a full pass with `output_hidden_states` (another batch layout:
shared-prefix cache vs whole prompts one by one): float32 rounding, about 1e-7 here."""
BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                         "feature_layer_cost.py")


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def deep_base(request, tmp_path_factory) -> str:
    """A tiny random base with 4 decoder blocks (so there are middle layers)."""
    return save_tiny_base(tmp_path_factory.mktemp(f"deep-{request.param}"), request.param, num_hidden_layers=DEPTH)


@pytest.fixture(scope="module")
def deep_llama(tmp_path_factory) -> str:
    return save_tiny_base(tmp_path_factory.mktemp("deep-llama"), "llama", seed=3, initializer_range=0.2,
                          num_hidden_layers=DEPTH)


def perturbed(base: str, **options):
    """A fresh confidence model whose LoRA (B = 0 at init) and head moved away from their init, so both matter."""
    model = AutoModelForConfidence.from_pretrained(base, **options)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad or "lora_" in name:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model


def full_pass_states(model, questions: list[str], index: int) -> torch.Tensor:
    """`hidden_states[index]` of the last prompt token of each question, from a full forward pass of the backbone
    (LoRA applied) over the whole prompt alone, read through transformers' own `output_hidden_states`."""
    inner = model.get_base_model()
    encoded = encode_prompts(questions, inner.tokenizer, inner.confidence_config)
    states = []
    with torch.no_grad():
        for ids in encoded:
            output = inner.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
            assert len(output.hidden_states) == DEPTH + 1
            states.append(output.hidden_states[index][0, -1])
    return torch.stack(states)


def head_confidence(model, states: torch.Tensor) -> list[float]:
    with torch.no_grad():
        return torch.sigmoid(model.get_base_model().confidence_head(states).squeeze(-1)).tolist()


def lora_blocks(model) -> set[int]:
    """Blocks (from 0) whose modules carry LoRA weights, read from the parameter names."""
    found = (re.search(r"\.layers\.(\d+)\..*lora_", name) for name, _ in model.named_parameters())
    return {int(match.group(1)) for match in found if match}


def blocks_run(model, fn) -> list[int]:
    """Which decoder blocks ran during `fn()`."""
    inner = model.get_base_model()
    ran = []
    handles = [block.register_forward_hook(lambda *args, i=i: ran.append(i))
               for i, block in enumerate(inner.model.layers)]
    try:
        fn()
    finally:
        for handle in handles:
            handle.remove()
    return sorted(set(ran))


def test_the_index_is_output_hidden_states_and_negative_counts_from_the_end():
    assert [resolve_feature_layer(i, 30) for i in (None, -1, 30, 1, -30, -8, 23)] == [30, 30, 30, 1, 1, 23, 23]
    for bad in (0, 31, -31):
        with pytest.raises(ValueError, match=r"use 1 to 30, or -30 to -1"):
            resolve_feature_layer(bad, 30)


@pytest.mark.parametrize("layer", [1, 2, -2, -1])
def test_scoring_stops_at_the_feature_layer_and_reads_that_state(deep_base, layer):
    model = perturbed(deep_base, feature_layer=layer)
    index = resolve_feature_layer(layer, DEPTH)
    assert model.feature_layer_index == index == model.confidence_config.feature_layer
    expected = full_pass_states(model, QUESTIONS, index)
    if index < DEPTH:  # a middle state is not the final one (no final norm, fewer blocks)
        assert (expected - full_pass_states(model, QUESTIONS, DEPTH)).abs().max() > 1e-2
    shared = model.prompt_features(QUESTIONS, batch_size=len(QUESTIONS))  # the shared-prefix path
    alone = torch.cat([model.prompt_features([q]) for q in QUESTIONS])  # the plain path
    torch.testing.assert_close(shared, expected, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(alone, expected, atol=TOLERANCE, rtol=0)
    assert model.confidence(QUESTIONS) == pytest.approx(head_confidence(model, expected), abs=TOLERANCE)
    ran = blocks_run(model, lambda: model.confidence(QUESTIONS, batch_size=len(QUESTIONS)))
    assert ran == list(range(index))  # blocks past the feature layer never run
    assert len(model.get_base_model().model.layers) == DEPTH  # and the model is whole again afterwards


def test_prompt_features_reads_any_layer_of_one_model(deep_base):
    """The helper for probes: `prompt_features(layer=i)` of any model is `hidden_states[i]` of a full pass."""
    model = perturbed(deep_base)
    for layer in (1, 3, -1):
        expected = full_pass_states(model, QUESTIONS, resolve_feature_layer(layer, DEPTH))
        torch.testing.assert_close(model.prompt_features(QUESTIONS, layer=layer), expected, atol=TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="out of range for a backbone of 4 layers"):
        model.prompt_features(QUESTIONS, layer=5)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_training_step_matches_a_full_pass_reading_that_layer(deep_llama, checkpointing):
    model = perturbed(deep_llama, feature_layer=2)
    inner = model.get_base_model()
    model.train()
    if checkpointing:  # the plain path, blocks recomputed in backward
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    encoded = encode_prompts(QUESTIONS, inner.tokenizer, inner.confidence_config)
    batch, labels = pad_batch(encoded, inner.tokenizer), torch.tensor([0.0, 1.0, 0.25, 0.75])
    lora = {name: p for name, p in model.named_parameters() if "lora_" in name and p.requires_grad}

    loss = model(**batch, labels=labels).loss
    grads = dict(zip(lora, torch.autograd.grad(loss, list(lora.values()))))

    states = []
    for ids in encoded:  # the reference: full passes, each prompt alone, the state read from output_hidden_states
        output = inner.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        states.append(output.hidden_states[2][0, -1])
    confidence = torch.sigmoid(inner.confidence_head(torch.stack(states)).squeeze(-1))
    reference = ((confidence - labels) ** 2).mean()
    expected = dict(zip(lora, torch.autograd.grad(reference, list(lora.values()), allow_unused=True)))

    assert loss.item() == pytest.approx(reference.item(), abs=1e-6)
    assert lora and all(int(re.search(r"\.layers\.(\d+)\.", name).group(1)) < 2 for name in lora)
    for name in lora:
        torch.testing.assert_close(grads[name], expected[name], atol=1e-5, rtol=1e-4)
    assert any(grads[name].abs().max() > 1e-6 for name in lora)  # the LoRA learns through the early stop


def test_the_zero_overhead_gate_reads_the_feature_layer_from_the_answer_prefill(deep_llama, monkeypatch):
    model = perturbed(deep_llama, use_lora=False, feature_layer=2)
    inner = model.get_base_model()
    expected = model.confidence(QUESTIONS)
    assert expected == pytest.approx(head_confidence(model, full_pass_states(model, QUESTIONS, 2)), abs=TOLERANCE)
    final = perturbed(deep_llama, use_lora=False)  # same base, the final layer: the answers must not change

    def no_second_pass(*args, **kwargs):
        raise AssertionError("the zero-overhead mode must not run a separate confidence pass")

    monkeypatch.setattr(inner, "confidence", no_second_pass)
    ran = []
    handles = [block.register_forward_hook(lambda *a, i=i: ran.append(i)) for i, block in enumerate(inner.model.layers)]
    results = model.answer(QUESTIONS, threshold=0.0, max_new_tokens=4)
    for handle in handles:
        handle.remove()
    assert [r["confidence"] for r in results] == pytest.approx(expected, abs=TOLERANCE)
    assert sorted(set(ran)) == list(range(DEPTH))  # the answer's prefill and decoding run every block
    answers = final.answer(QUESTIONS, threshold=0.0, max_new_tokens=4)
    assert [r["answer_tokens"] for r in results] == [r["answer_tokens"] for r in answers]
    assert [r["confidence"] for r in answers] != pytest.approx(expected, abs=1e-3)  # another layer, another score


def test_lora_adapts_only_the_blocks_up_to_the_feature_layer(deep_llama):
    assert lora_blocks(AutoModelForConfidence.from_pretrained(deep_llama)) == {0, 1, 2, 3}
    assert lora_blocks(AutoModelForConfidence.from_pretrained(deep_llama, feature_layer=2)) == {0, 1}
    assert lora_blocks(AutoModelForConfidence.from_pretrained(deep_llama, feature_layer=-2)) == {0, 1, 2}
    assert lora_blocks(AutoModelForConfidence.from_pretrained(deep_llama, feature_layer=1, use_lora=False)) == {0}
    listed = LoraConfig(r=4, target_modules=["q_proj", "v_proj"])  # no layers named: restricted for it
    assert lora_blocks(AutoModelForConfidence.from_pretrained(deep_llama, feature_layer=3, peft_config=listed)) == {
        0, 1, 2}
    everywhere = LoraConfig(r=4, target_modules=r".*\.(q_proj|v_proj)")  # a pattern: PEFT takes no layer list
    with pytest.raises(ValueError, match=r"adapts decoder block\(s\) 3 \(from 0\), past feature layer 3: .* Adapt only "
                                         r"blocks 0\.\.2 "):
        AutoModelForConfidence.from_pretrained(deep_llama, feature_layer=3, peft_config=everywhere)


def test_save_and_load_keep_the_layer(deep_llama, tmp_path):
    model = perturbed(deep_llama, feature_layer=-2)
    before = model.confidence(QUESTIONS)
    model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / CONFIDENCE_CONFIG_NAME).read_text())
    assert saved["feature_layer"] == 3  # recorded as its index, not as "-2"
    assert json.loads((tmp_path / "m" / "adapter_config.json").read_text())["layers_to_transform"] == [0, 1, 2]
    card = (tmp_path / "m" / "README.md").read_text()
    assert "hidden state of layer 3 of 4" in card and "without the final norm" in card
    loaded = AutoModelForConfidence.from_pretrained(tmp_path / "m")
    assert loaded.feature_layer_index == 3 and lora_blocks(loaded) == {0, 1, 2}
    assert loaded.confidence(QUESTIONS) == pytest.approx(before, abs=1e-6)
    assert AutoModelForConfidence.from_pretrained(tmp_path / "m", feature_layer=3).feature_layer_index == 3
    with pytest.raises(ValueError, match="reads layer 3; feature_layer=-1 applies to a fresh model only"):
        AutoModelForConfidence.from_pretrained(tmp_path / "m", feature_layer=-1)


def test_a_config_without_the_field_loads_as_the_final_layer(deep_llama, tmp_path):
    model = perturbed(deep_llama)
    assert model.confidence_config.feature_layer == DEPTH  # a new model names its layer
    before = model.confidence(QUESTIONS)
    model.save_pretrained(tmp_path / "old")
    assert "final hidden\nstate (layer 4 of 4, after the final norm)" in (tmp_path / "old" / "README.md").read_text()
    path = tmp_path / "old" / CONFIDENCE_CONFIG_NAME
    data = json.loads(path.read_text())
    del data["feature_layer"]  # as every save before the field existed
    path.write_text(json.dumps(data))
    loaded = AutoModelForConfidence.from_pretrained(tmp_path / "old")
    assert loaded.confidence_config.feature_layer is None and loaded.feature_layer_index == DEPTH
    assert loaded.confidence(QUESTIONS) == pytest.approx(before, abs=1e-6)


@pytest.mark.parametrize("bad", [0, 5, -5])
def test_a_layer_out_of_range_is_one_clear_error(deep_llama, bad):
    with pytest.raises(ValueError) as raised:
        AutoModelForConfidence.from_pretrained(deep_llama, feature_layer=bad)
    message = str(raised.value)
    assert "\n" not in message and f"`feature_layer` {bad}" in message
    assert "use 1 to 4, or -4 to -1 counting from the end" in message or "token embeddings" in message


def test_a_saved_config_with_a_bad_layer_is_refused_with_its_problem(tmp_path):
    signature = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 4, "vocab_size": 10}
    config = ConfidenceConfig(base_model_signature=signature, feature_layer=2)
    for value, problem in ((9, "out of range for a backbone of 4 layers"), ("2", "must be an integer or null"),
                           (True, "must be an integer or null"), (0, "out of range")):
        data = {**config.to_dict(), "feature_layer": value}
        (tmp_path / CONFIDENCE_CONFIG_NAME).write_text(json.dumps(data))
        with pytest.raises(ValueError, match=problem) as raised:
            ConfidenceConfig.from_json_file(tmp_path / CONFIDENCE_CONFIG_NAME)
        assert str(raised.value).count("\n") == 0


def test_train_command_passes_the_layer_and_refuses_one_out_of_range_before_writing(deep_llama, tmp_path, capsys,
                                                                                      monkeypatch):
    import elical_hf.training.recipe

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"question": f"q {i}?", "consistency": 0.5, "correctness": 1.0 * (i % 2)})
                            + "\n" for i in range(8)))
    argv = ["train", "--elicitation_data", str(data), "--calibration_data", str(data), "--model_name_or_path",
            deep_llama, "--output_dir", str(tmp_path / "out")]
    assert cli_main([*argv, "--feature_layer", "9"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "elical-hf train: error: `feature_layer` 9 is out of range for a backbone of 4 layers: use 1 to 4, or -4 to "
        "-1 counting from the end (-1 is the final layer).")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["rows.jsonl"]  # refused before anything was written

    calls = []
    monkeypatch.setattr(elical_hf.training.recipe, "train_elical", lambda *args, **kwargs: calls.append(kwargs) or {})
    (tmp_path / "run.yaml").write_text("feature_layer: -2\n")
    assert cli_main([*argv, "--feature_layer", "-3"]) == 0
    assert cli_main([*argv, "--config", str(tmp_path / "run.yaml")]) == 0
    assert cli_main(argv) == 0
    init = [call["training_args"].model_init_kwargs for call in calls]
    assert [kwargs.get("feature_layer") for kwargs in init] == [-3, -2, None]
    assert "feature_layer" not in init[2]  # an older run's manifest still matches


def test_converted_paper_checkpoints_name_the_final_layer(tiny_llama, tmp_path):
    from tests.test_convert import build_release

    build_release(tiny_llama, tmp_path / "release")
    out = convert_official(tmp_path / "release", tmp_path / "converted")
    assert json.loads((tmp_path / "converted" / CONFIDENCE_CONFIG_NAME).read_text())["feature_layer"] == 2
    assert "(layer 2 of 2, after the final norm)" in (tmp_path / "converted" / "README.md").read_text()
    assert AutoModelForConfidence.from_pretrained(out).feature_layer_index == 2
    with pytest.raises(ValueError, match="The paper's heads read the final layer"):
        convert_official(tmp_path / "release", tmp_path / "other", confidence_config=ConfidenceConfig(feature_layer=1))
    assert not (tmp_path / "other").exists()


def test_the_cost_benchmark_runs_on_a_tiny_model():
    done = subprocess.run([sys.executable, BENCHMARK, "--tiny", "--questions", "8", "--batch_size", "4",
                           "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Machine: cpu=")
    check = next(line for line in lines if line.startswith("check: "))
    assert float(check.rsplit(" ", 1)[1]) < 1e-5  # the early stop reads what a full pass gives at that layer
    rows = {line.split("|")[1].strip(): line.split("|") for line in lines if line.startswith("| ")}
    assert set(rows) >= {"score", "train step"} and "layer 2 of 4" in done.stdout
    assert all(float(rows[task][4]) > 0 for task in ("score", "train step"))  # the time ratios
