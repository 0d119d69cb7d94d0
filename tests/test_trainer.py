from __future__ import annotations

import math
import os
import warnings

import pytest
import torch
from transformers import TrainerCallback, set_seed

from elical_hf import (
    AutoModelForConfidence,
    CalibrationTrainable,
    ConfidenceTrainer,
    ConfidenceTrainingArguments,
    Stage,
)


WORDS = "who wrote hamlet what is the capital of france germany italy spain japan when was king born river".split()


def make_rows(n: int, seed: int = 0, with_eval_labels: bool = True) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        picks = torch.randint(len(WORDS), (4,), generator=generator).tolist()
        question = " ".join(WORDS[p] for p in picks) + f" {i % 10}"
        target = float(torch.rand((), generator=generator))
        row = {"question": question, "consistency": target, "correctness": round(target, 1)}
        if with_eval_labels:
            row["greedy_correctness"] = int(target > 0.5)
        rows.append(row)
    return rows


def make_args(tmp_path, name: str = "run", **overrides) -> ConfidenceTrainingArguments:
    settings = dict(
        output_dir=str(tmp_path / name),
        per_device_train_batch_size=4,
        num_train_epochs=2,
        learning_rate=1e-2,
        warmup_steps=0,
        seed=0,
        data_seed=0,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=1,
    )
    settings.update(overrides)
    return ConfidenceTrainingArguments(**settings)


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(before, model) -> set[str]:
    return {name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())}


def lora_names(model) -> set[str]:
    return {n for n, _ in model.named_parameters() if "lora_" in n}


def head_names(model) -> set[str]:
    return {n for n, _ in model.named_parameters() if "confidence_head.modules_to_save" in n}


def test_arguments_parse_stage_and_defaults(tmp_path):
    args = ConfidenceTrainingArguments(output_dir=str(tmp_path), stage="calibration", calibration_trainable="all")
    assert args.stage is Stage.CALIBRATION and args.calibration_trainable is CalibrationTrainable.ALL
    assert args.label_column == "correctness"
    assert ConfidenceTrainingArguments(output_dir=str(tmp_path)).label_column == "consistency"
    assert ConfidenceTrainingArguments(output_dir=str(tmp_path), label_column="x").label_column == "x"
    with pytest.raises(ValueError, match="not a valid Stage"):
        ConfidenceTrainingArguments(output_dir=str(tmp_path), stage="pretraining")
    early = ConfidenceTrainingArguments(output_dir=str(tmp_path), early_stopping_patience=2)
    assert early.load_best_model_at_end and early.metric_for_best_model == "loss"


def test_elicitation_trains_every_lora_and_head_parameter(tiny_base, tmp_path):
    model = AutoModelForConfidence.from_pretrained(tiny_base)
    before = snapshot(model)
    trainer = ConfidenceTrainer(model, args=make_args(tmp_path), train_dataset=make_rows(16))
    trainer.train()
    moved = changed(before, model)
    assert moved == lora_names(model) | head_names(model)
    assert any("loss" in entry for entry in trainer.state.log_history)
    assert model.confidence_config.trained_stages == ["elicitation"]


def test_training_lowers_the_loss(tiny_llama, tmp_path):
    from transformers import set_seed

    rows = make_rows(16)
    set_seed(0)  # the fresh head is drawn from the global RNG: not from whatever state the tests before left
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    trainer = ConfidenceTrainer(model, args=make_args(tmp_path, num_train_epochs=16), train_dataset=rows, eval_dataset=rows)
    start = trainer.evaluate()["eval_loss"]
    trainer.train()
    assert trainer.evaluate()["eval_loss"] < 0.7 * start


@pytest.fixture
def stage1(tiny_llama, tmp_path) -> str:
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    ConfidenceTrainer(model, args=make_args(tmp_path, "stage1"), train_dataset=make_rows(16)).train()
    model.save_pretrained(tmp_path / "stage1-model")
    return str(tmp_path / "stage1-model")


def test_calibration_head_only_freezes_lora(stage1, tmp_path):
    model = AutoModelForConfidence.from_pretrained(stage1, is_trainable=True)
    before = snapshot(model)
    args = make_args(tmp_path, "stage2", stage="calibration", calibration_trainable="head")
    ConfidenceTrainer(model, args=args, train_dataset=make_rows(12, seed=1)).train()
    assert changed(before, model) == head_names(model)
    assert model.confidence_config.trained_stages == ["elicitation", "calibration"]


def test_calibration_all_trains_lora_and_head(stage1, tmp_path):
    model = AutoModelForConfidence.from_pretrained(stage1, is_trainable=True)
    before = snapshot(model)
    args = make_args(tmp_path, "stage2", stage="calibration", calibration_trainable="all")
    ConfidenceTrainer(model, args=args, train_dataset=make_rows(12, seed=1)).train()
    assert changed(before, model) == lora_names(model) | head_names(model)


def test_head_only_calibration_needs_stage1(tiny_llama, tmp_path):
    args = make_args(tmp_path, stage="calibration", calibration_trainable="head")
    with pytest.raises(ValueError, match="no elicitation training"):
        ConfidenceTrainer(tiny_llama, args=args, train_dataset=make_rows(8))
    args = make_args(tmp_path, stage="calibration", calibration_trainable="all")  # Cal-Only is fine
    ConfidenceTrainer(tiny_llama, args=args, train_dataset=make_rows(8))


def test_gradient_accumulation_matches_a_big_batch(tiny_llama, tmp_path):
    rows = make_rows(10)  # 10 rows: the last accumulated batch is uneven
    finals = []
    for batch, accumulation in [(10, 1), (4, 3), (1, 10)]:
        set_seed(0)  # same fresh LoRA and head in every run
        model = AutoModelForConfidence.from_pretrained(tiny_llama)
        args = make_args(
            tmp_path, f"ga{batch}", per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
            num_train_epochs=1, learning_rate=1e-3, optim="sgd",
        )
        ConfidenceTrainer(model, args=args, train_dataset=rows).train()
        finals.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    for other in finals[1:]:
        for name, value in finals[0].items():
            torch.testing.assert_close(other[name], value, atol=1e-6, rtol=1e-4)


class StopAt(TrainerCallback):
    """Simulates a crash: training stops right after step `step` was checkpointed."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_save = True
            control.should_training_stop = True
        return control


def test_resume_reaches_the_same_weights(tiny_llama, tmp_path):
    rows = make_rows(16)

    def run(name: str, resume: str | None = None, stop_at: int | None = None):
        set_seed(0)
        model = AutoModelForConfidence.from_pretrained(tiny_llama)
        args = make_args(tmp_path, name, num_train_epochs=2, save_strategy="steps", save_steps=100)
        callbacks = [StopAt(stop_at)] if stop_at else []
        trainer = ConfidenceTrainer(model, args=args, train_dataset=rows, callbacks=callbacks)
        trainer.train(resume_from_checkpoint=resume)
        return model

    full = run("full")
    interrupted = run("interrupted", stop_at=3)
    checkpoint = str(tmp_path / "interrupted" / "checkpoint-3")
    assert os.path.isfile(os.path.join(checkpoint, "confidence_config.json"))
    reference = dict(full.named_parameters())
    assert any(not torch.equal(p, reference[n]) for n, p in interrupted.named_parameters()), "stopped too late"
    resumed = run("resumed", resume=checkpoint)
    for name, parameter in resumed.named_parameters():
        torch.testing.assert_close(parameter, reference[name], atol=1e-5, rtol=1e-4)


def test_eval_reports_auroc_ece_brier_alignment(tiny_llama, tmp_path):
    from elical_hf.metrics import alignment

    rows = make_rows(30, 3)
    trainer = ConfidenceTrainer(tiny_llama, args=make_args(tmp_path), train_dataset=make_rows(8), eval_dataset=rows)
    metrics = trainer.evaluate()
    assert {"eval_loss", "eval_auroc", "eval_ece", "eval_brier", "eval_alignment"} <= set(metrics)
    assert 0.0 <= metrics["eval_auroc"] <= 1.0
    confidences = trainer.model.confidence([row["question"] for row in rows])
    expected = alignment(confidences, [row["greedy_correctness"] for row in rows])["alignment"]
    assert metrics["eval_alignment"] == pytest.approx(expected)  # in the eval set's own order
    plain = ConfidenceTrainer(tiny_llama, args=make_args(tmp_path), eval_dataset=make_rows(8, 3, with_eval_labels=False))
    metrics = plain.evaluate()
    assert "eval_loss" in metrics and "eval_auroc" not in metrics
    small = ConfidenceTrainer(tiny_llama, args=make_args(tmp_path), eval_dataset=rows[:12])  # 20% = 2 rows
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "threshold chosen on 2 rows" warning at every evaluation
        metrics = small.evaluate()
    assert "eval_auroc" in metrics and "eval_alignment" not in metrics


def test_early_stopping_uses_the_dev_split(tiny_llama, tmp_path):
    with pytest.raises(ValueError, match="dev split"):
        ConfidenceTrainer(tiny_llama, args=make_args(tmp_path, early_stopping_patience=1), train_dataset=make_rows(8))
    args = make_args(tmp_path, "es", early_stopping_patience=1, num_train_epochs=30, learning_rate=0.5, eval_strategy="epoch")
    trainer = ConfidenceTrainer(tiny_llama, args=args, train_dataset=make_rows(8), eval_dataset=make_rows(8, 5))
    trainer.train()
    assert trainer.state.epoch < 30, "training should stop early"
    assert trainer.state.best_metric is not None


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda rows: [{k: v for k, v in r.items() if k != "question"} for r in rows], "lacks column"),
        (lambda rows: [{k: v for k, v in r.items() if k != "consistency"} for r in rows], "lacks column"),
        (lambda rows: [{**r, "consistency": math.nan} if i == 3 else r for i, r in enumerate(rows)], "row 3"),
        (lambda rows: [{**r, "consistency": 1.5} if i == 2 else r for i, r in enumerate(rows)], r"\[0, 1\]"),
        (lambda rows: [{**r, "consistency": None} if i == 1 else r for i, r in enumerate(rows)], "row 1"),
        (lambda rows: [{**r, "question": "  "} if i == 4 else r for i, r in enumerate(rows)], "empty"),
        (lambda rows: [{**r, "greedy_correctness": 0.5} if i == 0 else r for i, r in enumerate(rows)], "0/1"),
        (lambda rows: [], "empty"),
    ],
)
def test_bad_datasets_fail_before_anything_is_written(tiny_llama, tmp_path, mutate, message):
    args = make_args(tmp_path, "bad")
    with pytest.raises(ValueError, match=message):
        ConfidenceTrainer(tiny_llama, args=args, train_dataset=mutate(make_rows(8)))
    assert not (tmp_path / "bad").exists()


def test_resuming_head_only_calibration_keeps_lora_frozen(stage1, tmp_path):
    rows = make_rows(16, seed=2)

    def run(name: str, resume: str | None = None, stop_at: int | None = None):
        set_seed(0)
        model = AutoModelForConfidence.from_pretrained(stage1, is_trainable=True)
        args = make_args(tmp_path, name, stage="calibration", calibration_trainable="head", save_steps=100,
                         save_strategy="steps")
        ConfidenceTrainer(model, args=args, train_dataset=rows, callbacks=[StopAt(stop_at)] if stop_at else []).train(
            resume_from_checkpoint=resume
        )
        return model

    before = snapshot(AutoModelForConfidence.from_pretrained(stage1))
    run("cal", stop_at=2)
    resumed = run("cal-resumed", resume=str(tmp_path / "cal" / "checkpoint-2"))
    # `original_module` is the unused fresh head of the base model (re-drawn at each load).
    assert {n for n in changed(before, resumed) if "original_module" not in n} == head_names(resumed)


def test_train_stage_uses_a_given_dev_set(tiny_llama, tmp_path):
    from elical_hf.training.recipe import train_stage

    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    train, dev = make_rows(24, seed=1), make_rows(6, seed=2)
    trainer = train_stage(model, train, str(tmp_path / "out"), "elicitation", dev_data=dev,
                          training_args=ConfidenceTrainingArguments(num_train_epochs=1, per_device_train_batch_size=8,
                                                                    report_to="none"))
    assert len(trainer.train_dataset) == 24 and len(trainer.eval_dataset) == 6
    assert os.path.isfile(tmp_path / "out" / "confidence_config.json")
    assert not os.path.exists(tmp_path / "out" / "checkpoints")


@pytest.mark.float32  # an equivalence of the logic (bf16 twin: tests/test_bf16.py)
def test_activation_checkpointing_trains_the_same_lora_and_head(tiny_llama, tmp_path):
    """With checkpointing the backbone recomputes its activations in the backward pass and the batch's shared prompt
    prefix runs per row (no KV cache under checkpointing); without it the prefix runs once. Same weights after."""
    from elical_hf import ConfidenceConfig
    from elical_hf.models.modeling import ForConfidenceMixin

    system = " ".join(["you are a helpful assistant who answers the question of the user"] * 4)  # >= 32 shared tokens
    rows, finals, paths = make_rows(12), [], []
    original = ForConfidenceMixin._pooled_with_shared_prefix

    def spy(self, *args, **kwargs):
        paths.append("shared")
        return original(self, *args, **kwargs)

    for checkpointing in (False, True):
        set_seed(0)
        model = AutoModelForConfidence.from_pretrained(tiny_llama, confidence_config=ConfidenceConfig(system_prompt=system))
        before = snapshot(model)
        args = make_args(tmp_path, f"ckpt-{checkpointing}", num_train_epochs=1, activation_checkpointing=checkpointing)
        trainer = ConfidenceTrainer(model, args=args, train_dataset=rows)
        paths.clear()
        ForConfidenceMixin._pooled_with_shared_prefix = spy
        try:
            trainer.train()
        finally:
            ForConfidenceMixin._pooled_with_shared_prefix = original
        assert model.get_base_model().is_activation_checkpointing == checkpointing
        assert bool(paths) == (not checkpointing)  # the shared-prefix path only without checkpointing
        assert changed(before, model) == lora_names(model) | head_names(model)
        finals.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    for name, value in finals[0].items():
        torch.testing.assert_close(finals[1][name], value, atol=1e-5, rtol=1e-4, msg=name)


def test_four_bit_loading_says_what_is_missing(tiny_llama, tmp_path, monkeypatch):
    import importlib.util

    from elical_hf.cli import main as cli_main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else
                        real_find_spec(name, *a))
    with pytest.raises(ImportError, match="load_in_4bit .QLoRA. needs bitsandbytes and a CUDA GPU"):
        AutoModelForConfidence.from_pretrained(tiny_llama, load_in_4bit=True)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(__import__("json").dumps(row) + "\n" for row in make_rows(8)))
    out = tmp_path / "out"
    with pytest.raises(ImportError, match="pip install bitsandbytes"):
        cli_main(["train", "--model_name_or_path", tiny_llama, "--elicitation_data", str(data), "--calibration_data",
                  str(data), "--output_dir", str(out), "--load_in_4bit", "true", "--use_cpu", "true"])
    assert not out.exists()  # nothing written
    # With bitsandbytes installed but no CUDA device: the other half of the message.
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "bitsandbytes" else
                        real_find_spec(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        AutoModelForConfidence.from_pretrained(tiny_llama, load_in_4bit=True)
