"""The precision policy: one decision from the hardware, used by loading, sampling and training; the user's choice
wins, with a warning on a known slow path."""

from __future__ import annotations

import logging

import pytest
import torch

from elical_hf import AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
from elical_hf.settings.precision import CPU_BF16_ENV, cpu_capability, parse_dtype, precision_report, resolve_dtype
from elical_hf.signals import HFBackend


@pytest.fixture(autouse=True)
def on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cpu_policy_follows_the_capability(cpu_bf16):
    cpu_bf16(True)
    assert cpu_capability().bf16_native and cpu_capability().source == "environment"
    assert resolve_dtype() == resolve_dtype("auto", "cpu") == resolve_dtype(None) == torch.bfloat16
    cpu_bf16(False)
    assert not cpu_capability().bf16_fast
    assert resolve_dtype() == torch.float32


def test_native_but_measured_slower_is_not_used(cpu_bf16, monkeypatch):
    from elical_hf.settings import precision

    cpu_bf16(True)
    monkeypatch.delenv(CPU_BF16_ENV)
    precision.cpu_capability.cache_clear()
    monkeypatch.setattr(precision, "onednn_bf16", lambda: True)
    speeds = {torch.bfloat16: 10.0, torch.float32: 40.0}  # e.g. oneDNN limited to AVX2 by ONEDNN_MAX_CPU_ISA
    monkeypatch.setattr(precision, "matmul_gflops", lambda dtype, **_: speeds[dtype])
    capability = precision.cpu_capability()
    assert capability.bf16_native and capability.bf16_speedup == 0.25 and not capability.bf16_fast
    assert resolve_dtype() == torch.float32
    speeds[torch.bfloat16] = 160.0
    precision.cpu_capability.cache_clear()
    assert resolve_dtype() == torch.bfloat16


def test_explicit_choice_wins_and_slow_bf16_warns(cpu_bf16, caplog):
    cpu_bf16(False)
    with caplog.at_level(logging.WARNING, logger="elical_hf.settings.precision"):
        assert resolve_dtype("bfloat16") == torch.bfloat16
    assert "slow" in caplog.text and "no native bf16" in caplog.text
    caplog.clear()
    cpu_bf16(True)
    with caplog.at_level(logging.WARNING, logger="elical_hf.settings.precision"):
        assert resolve_dtype("bf16") == torch.bfloat16 and resolve_dtype(torch.float32) == torch.float32
    assert not caplog.text


@pytest.mark.parametrize("bad", ["float17", "int8", "bool", ""])
def test_bad_dtype_is_one_clear_error(bad):
    with pytest.raises(ValueError, match="Unknown dtype"):
        parse_dtype(bad)


def test_bad_environment_value(cpu_bf16, monkeypatch):
    cpu_bf16(True)
    monkeypatch.setenv(CPU_BF16_ENV, "maybe")
    cpu_capability.cache_clear()
    with pytest.raises(ValueError, match=CPU_BF16_ENV):
        cpu_capability()


def test_loading_uses_the_policy(tiny_llama, cpu_bf16):
    cpu_bf16(False)
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    assert model.get_input_embeddings().weight.dtype == torch.float32
    backend = HFBackend(tiny_llama)
    assert backend.model.dtype == torch.float32 and backend.precision["dtype"] == "float32"
    assert backend.precision["cpu_bf16_native"] is False and backend.precision["num_threads"] >= 1
    cpu_bf16(True)
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert model.base_model.model.confidence_head.weight.dtype == torch.float32  # the head stays float32
    assert HFBackend(tiny_llama).model.dtype == torch.bfloat16
    assert AutoModelForConfidence.from_pretrained(tiny_llama, dtype="float32").dtype == torch.float32


def test_training_records_its_precision(tiny_llama, cpu_bf16, tmp_path):
    cpu_bf16(False)
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    rows = {"question": ["q one", "q two", "q three", "q four"], "consistency": [0.1, 0.9, 0.4, 0.6]}
    args = ConfidenceTrainingArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2,
                                       report_to="none", save_strategy="no")
    ConfidenceTrainer(model, args=args, train_dataset=rows).train()
    recorded = model.confidence_config.training_history[-1]["precision"]
    assert recorded == {**precision_report(torch.float32, "cpu"), "device": "cpu"}
    assert recorded["cpu_source"] == "environment" and recorded["dtype"] == "float32"


def test_bf16_training_args_warn_on_a_slow_cpu(cpu_bf16, caplog, tmp_path):
    cpu_bf16(False)
    with caplog.at_level(logging.WARNING, logger="elical_hf.settings.precision"):
        ConfidenceTrainingArguments(output_dir=str(tmp_path), bf16=True, use_cpu=True, report_to="none")
    assert "slow" in caplog.text


def test_measuring_the_cpu_never_moves_the_global_rng():
    """The bf16 probe runs once per process, on bf16 CPUs only: a seeded fresh head must not depend on whether it ran."""
    from elical_hf.settings.precision import matmul_gflops

    torch.manual_seed(42)
    expected = torch.randn(4)
    torch.manual_seed(42)
    matmul_gflops(torch.float32, size=32, repeats=1)
    assert torch.equal(torch.randn(4), expected)
