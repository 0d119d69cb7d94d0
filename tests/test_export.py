"""`elical-hf export`: a confidence model as a one-label sequence classifier (LoRA merged, the head as `score`), equal
to the confidence model's own number; what cannot be exported exactly is refused. The real-vLLM check is in
tests/test_vllm_engines.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForSequenceClassification

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.publishing.export import EXPORT_CONFIG_NAME, export_confidence_model, export_prompt_ids
from tests.tiny import perturbed_confidence_model


pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet?", "what is the capital of france?", "when was the king of spain born, and where?"]


def classifier_confidences(folder, questions) -> list[float]:
    """The export's number as transformers computes it: `score` without its bias (transformers drops it), the bias
    added from the file, one prompt per forward pass (no padding)."""
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).eval()
    bias = load_file(f"{folder}/model.safetensors")["score.bias"]
    with torch.no_grad():
        return [torch.sigmoid(model(torch.tensor([ids])).logits[0, 0] + bias[0]).item()
                for ids in export_prompt_ids(questions, folder)]


def test_the_export_gives_the_confidence_models_number(tiny_llama, tmp_path):
    model = perturbed_confidence_model(tiny_llama).float()
    model.confidence_config.decision_threshold = 0.42
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    expected = model.confidence(QUESTIONS)
    out = tmp_path / "export"
    assert cli_main(["export", str(saved), "--output_dir", str(out)]) == 0
    assert classifier_confidences(out, QUESTIONS) == pytest.approx(expected, abs=1e-5)
    config = AutoConfig.from_pretrained(out)
    assert config.architectures == ["LlamaForSequenceClassification"] and config.num_labels == 1
    tensors = load_file(out / "model.safetensors")
    assert tensors["score.weight"].shape == (1, config.hidden_size) and tensors["score.bias"].shape == (1,)
    assert not any("lora" in name or "lm_head" in name for name in tensors)
    saved_config = json.loads((out / EXPORT_CONFIG_NAME).read_text())
    assert saved_config["confidence_config"]["decision_threshold"] == 0.42
    assert saved_config["exported_from"] == str(saved)
    assert "0.42" in (out / "README.md").read_text()

    # A loaded model exports too, and is left as it was (the merge works on a copy).
    again = tmp_path / "again"
    export_confidence_model(model, again)
    assert model.confidence(QUESTIONS) == pytest.approx(expected, abs=1e-7) and model.uses_lora
    assert load_file(again / "model.safetensors")["score.weight"].equal(tensors["score.weight"])


def test_what_cannot_be_exported_exactly_is_refused(tiny_llama, tmp_path, raise_user_errors):
    mlp = tmp_path / "mlp"
    AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False, head_type="mlp").save_pretrained(mlp)
    middle = tmp_path / "middle"
    AutoModelForConfidence.from_pretrained(tiny_llama, feature_layer=1).save_pretrained(middle)
    for folder, reason in ((mlp, "its head is 'mlp', not one linear layer"),
                           (middle, r"its head reads layer 1 of 2, and a sequence classifier reads the final layer")):
        out = tmp_path / f"out-{folder.name}"
        with pytest.raises(ValueError, match=f"^{folder} cannot be exported as a sequence classifier: {reason}"):
            cli_main(["export", str(folder), "--output_dir", str(out)])
        assert not out.exists() and not list(tmp_path.glob(".out-*"))
    with pytest.raises(ValueError, match="is inside the MODEL folder"):
        cli_main(["export", str(mlp), "--output_dir", str(mlp / "export")])
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty; pass --overwrite_output_dir"):
        export_confidence_model(mlp, full)
    assert (full / "keep.txt").read_text() == "mine"


def test_the_served_agreement_quoted_in_the_docs_is_the_measured_one():
    """docs/serve.md quotes docs/results/export_agreement.json (benchmarks/vllm_export_agreement.py)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    measured = json.loads((root / "docs" / "results" / "export_agreement.json").read_text())
    text = " ".join((root / "docs" / "serve.md").read_text().split())

    def short(x: float) -> str:
        return f"{x:.1e}".replace("e-0", "e-")

    merged, lora = measured["merged"], measured["lora"]
    assert merged["questions"] == 64 and merged["same_decisions"] == 64 and lora["demo"]["same_decisions"] == 64
    assert (f"the largest difference was {short(merged['max_abs_difference'])} (median "
            f"{short(merged['median_abs_difference'])})") in text
    assert f"saved threshold ({measured['threshold']:g})" in text and lora["base_alone"] == [0.5]
    assert (f"the demo model's adapter {short(lora['demo']['max_abs_difference'])}, the random LoRA's "
            f"{short(lora['random_lora']['max_abs_difference'])}") in text


def test_the_lora_form_on_the_base_form_gives_the_same_number(tiny_llama, tmp_path):
    """`--form lora` + `--form base`, applied as vLLM applies a classification LoRA (the LoRA added to the base's
    linear layers, `score` replaced by the adapter's): the confidence model's number."""
    from peft import PeftModel

    model = perturbed_confidence_model(tiny_llama).float()
    expected = model.confidence(QUESTIONS)
    base, adapter = tmp_path / "base", tmp_path / "adapter"
    export_confidence_model(model, base, form="base")
    export_confidence_model(model, adapter, form="lora")
    assert load_file(base / "model.safetensors")["score.weight"].abs().sum() == 0  # the adapters bring the head
    settings = json.loads((adapter / "adapter_config.json").read_text())
    assert settings["modules_to_save"] == ["score"] and settings["task_type"] == "SEQ_CLS"
    tensors = load_file(adapter / "adapter_model.safetensors")
    assert {"base_model.model.score.weight", "base_model.model.score.bias"} <= set(tensors)
    assert any(name.endswith("lora_A.weight") for name in tensors) and not any("confidence_head" in n for n in tensors)
    classifier = AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32)
    served = PeftModel.from_pretrained(classifier, adapter).eval()  # PEFT reads the same layout vLLM does
    bias = tensors["base_model.model.score.bias"]
    with torch.no_grad():
        got = [torch.sigmoid(served(torch.tensor([ids])).logits[0, 0] + bias[0]).item()
               for ids in export_prompt_ids(QUESTIONS, adapter)]
    assert got == pytest.approx(expected, abs=1e-5) and model.confidence(QUESTIONS) == pytest.approx(expected)
    with pytest.raises(ValueError, match="Unknown export form 'onnx'"):
        export_confidence_model(model, tmp_path / "x", form="onnx")
