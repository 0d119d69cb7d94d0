"""The head options of `ConfidenceConfig`: `head_init` (how a fresh head is drawn) and `head_type` (the linear head or
the reference code's MLP head), saved with the model and restored on load."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from elical_hf import AutoModelForConfidence, ConfidenceConfig, calibrate_head
from elical_hf.training.head_calibration import confidence_head_module
from elical_hf.models.modeling import build_confidence_head, initialize_confidence_head
from tests.conftest import save_tiny_base


QUESTIONS = ["who wrote hamlet", "what is the capital of france", "who was the first king of england"]
HIDDEN = 32  # tests/tiny.py

pytestmark = pytest.mark.float32  # float32 weights, and the precision policy decided without a measurement (which
# would draw from the global RNG between the seed and the head's draw)


@pytest.fixture(scope="module")
def wide_init_base(tmp_path_factory) -> str:
    """A tiny base whose `initializer_range` (0.5) is far outside PyTorch's default bound 1/sqrt(32) = 0.18, so the two
    draws cannot be mistaken for each other."""
    return save_tiny_base(tmp_path_factory.mktemp("wide-init"), "llama", initializer_range=0.5)


def _head(model) -> nn.Module:
    return confidence_head_module(model)


def test_the_default_head_is_transformers_normal_draw(wide_init_base):
    torch.manual_seed(0)
    head = _head(AutoModelForConfidence.from_pretrained(wide_init_base))
    assert isinstance(head, nn.Linear)
    assert torch.count_nonzero(head.bias) == 0
    assert head.weight.abs().max() > 1 / math.sqrt(HIDDEN)  # N(0, 0.5) leaves PyTorch's uniform bound
    assert 0.3 < head.weight.std().item() < 0.75
    torch.manual_seed(0)
    same = _head(AutoModelForConfidence.from_pretrained(wide_init_base, head_init="normal"))
    assert torch.equal(same.weight, head.weight)  # "normal" is the default, not another draw


def test_torch_default_head_init_is_pytorchs_uniform_draw(wide_init_base, tmp_path):
    model = AutoModelForConfidence.from_pretrained(wide_init_base, head_init="torch_default")
    head, bound = _head(model), 1 / math.sqrt(HIDDEN)
    assert head.weight.abs().max() <= bound and head.bias.abs().max() <= bound
    assert torch.count_nonzero(head.bias) == 1  # the reference's nn.Linear draws its bias too
    assert model.confidence_config.head_init == "torch_default"
    model.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "confidence_config.json").read_text())["head_init"] == "torch_default"
    with torch.no_grad():
        head.weight.fill_(3.0)  # "trained": loading must keep these weights, not draw new ones
    model.save_pretrained(tmp_path / "m")
    loaded = AutoModelForConfidence.from_pretrained(tmp_path / "m")
    assert torch.equal(_head(loaded).weight, torch.full_like(head.weight, 3.0))
    assert loaded.confidence_config.head_init == "torch_default"
    with pytest.raises(ValueError, match="head_init='torch_default'.*fresh head only"):
        AutoModelForConfidence.from_pretrained(tmp_path / "m", head_init="normal")


def test_bad_head_options_are_refused(tiny_llama):
    with pytest.raises(ValueError, match="head_init"):
        AutoModelForConfidence.from_pretrained(tiny_llama, head_init="xavier")
    with pytest.raises(ValueError, match="head_type"):
        ConfidenceConfig(head_type="transformer")


def test_mlp_head_has_the_reference_layout():
    head = build_confidence_head(HIDDEN, "mlp")
    layers = [m for m in head if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in layers] == [(32, 16), (16, 8), (8, 1)]
    assert [type(m) for m in head] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    initialize_confidence_head(head, "normal", std=0.5)
    assert all(torch.count_nonzero(m.bias) == 0 for m in layers)
    with pytest.raises(ValueError, match="hidden_size >= 4"):
        build_confidence_head(2, "mlp")


def test_mlp_head_trains_saves_and_reloads(tiny_llama, tmp_path):
    model = AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False, head_type="mlp")
    head = _head(model)
    assert isinstance(head, nn.Sequential) and model.confidence_config.head_type == "mlp"
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("confidence_head.modules_to_save" in n for n in trainable)
    assert len(trainable) == 6  # three Linear layers, weight and bias
    rows = [{"question": f"who wrote book number {i}", "correctness": float(i % 3 == 0)} for i in range(24)]
    before = {k: v.clone() for k, v in head.state_dict().items()}
    calibrate_head(model, rows, tmp_path / "mlp", dev_fraction=0.0, num_train_epochs=3, learning_rate=0.05)
    assert all(not torch.equal(before[k], v) for k, v in head.state_dict().items())  # every layer moved
    scores = model.confidence(QUESTIONS)
    loaded = AutoModelForConfidence.from_pretrained(tmp_path / "mlp")
    assert isinstance(_head(loaded), nn.Sequential) and loaded.confidence_config.head_type == "mlp"
    assert loaded.confidence(QUESTIONS) == pytest.approx(scores, abs=1e-6)
    with pytest.raises(ValueError, match="head_type='mlp'"):
        AutoModelForConfidence.from_pretrained(tmp_path / "mlp", head_type="linear")


def test_mlp_head_in_the_zero_overhead_gate(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False, head_type="mlp",
                                                   head_init="torch_default")
    expected = model.confidence(QUESTIONS)
    results = model.answer(QUESTIONS, threshold=0.0, max_new_tokens=3)
    assert [r["confidence"] for r in results] == pytest.approx(expected, abs=1e-5)


def test_train_command_passes_the_head_options_only_when_set(tmp_path, monkeypatch):
    import elical_hf.training.recipe
    from elical_hf.cli import main as cli_main

    calls = []
    monkeypatch.setattr(elical_hf.training.recipe, "train_elical", lambda *args, **kwargs: calls.append(kwargs) or {})
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"question": "q", "consistency": 0.5, "correctness": 0.5}) + "\n")
    base = ["train", "--elicitation_data", str(data), "--calibration_data", str(data),
            "--output_dir", str(tmp_path / "o")]
    assert cli_main([*base, "--head_type", "mlp", "--head_init", "torch_default"]) == 0
    assert cli_main(base) == 0
    chosen, default = (call["training_args"].model_init_kwargs for call in calls)
    assert (chosen["head_type"], chosen["head_init"]) == ("mlp", "torch_default")
    assert "head_type" not in default and "head_init" not in default  # an older run's manifest still matches
    with pytest.raises(SystemExit):
        cli_main([*base, "--head_init", "xavier"])
