"""float32 weights under bf16 autocast, the reference code's precision (`honesty_alignment/train_one_conf.py:47`
loads the backbone in float32, `:341-342` turn on `bf16=`): `dtype="float32"` with the training argument `bf16=True`
(`elical-hf train --dtype float32 --bf16`)."""

from __future__ import annotations

import json

import torch

from elical_hf import AutoModelForConfidence, ConfidenceTrainingArguments
from elical_hf.training.recipe import train_stage


def test_float32_weights_train_under_bf16_autocast(tiny_llama, tmp_path):
    torch.manual_seed(0)
    model = AutoModelForConfidence.from_pretrained(tiny_llama, dtype="float32")
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert before and all(p.dtype == torch.float32 for p in model.parameters())
    seen = set()
    layer = model.get_base_model().model.layers[0].mlp.down_proj.base_layer  # a frozen backbone matmul
    handle = layer.register_forward_hook(lambda module, args, output: seen.add((module.training, output.dtype)))
    rows = [{"question": f"who wrote book number {i}", "consistency": (i % 4) / 3} for i in range(16)]
    try:
        train_stage(model, rows, str(tmp_path / "m"), "elicitation", dev_fraction=0.0,
                    training_args=ConfidenceTrainingArguments(
                        bf16=True, use_cpu=True,  # use_cpu: transformers' condition for bf16 on a machine without a GPU
                        num_train_epochs=1, per_device_train_batch_size=8, learning_rate=1e-2, report_to="none"))
    finally:
        handle.remove()
    assert torch.bfloat16 in {dtype for _, dtype in seen}  # the matmuls ran in bf16
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stayed float32
    trained = dict(model.named_parameters())
    assert all(not torch.equal(trained[n], p) for n, p in before.items() if "lora_A" in n or "modules_to_save" in n)
    history = json.loads((tmp_path / "m" / "confidence_config.json").read_text())["training_history"][-1]
    assert history["precision"]["mixed_precision"] == "bf16" and "float32" in history["precision"]["dtype"]


def test_train_command_passes_float32_weights_and_bf16_autocast(tmp_path, monkeypatch):
    import elical_hf.training.recipe
    from elical_hf.cli import main as cli_main

    calls = []
    monkeypatch.setattr(elical_hf.training.recipe, "train_elical", lambda *args, **kwargs: calls.append(kwargs) or {})
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"question": "q", "consistency": 0.5, "correctness": 0.5}) + "\n")
    assert cli_main(["train", "--elicitation_data", str(data), "--calibration_data", str(data), "--output_dir",
                     str(tmp_path / "o"), "--dtype", "float32", "--bf16", "--use_cpu"]) == 0  # --use_cpu: no GPU here
    (kwargs,) = calls
    args = kwargs["training_args"]
    assert args.model_init_kwargs["dtype"] == torch.float32 and args.bf16 is True
