"""Head-only calibration on cached prompt features (`elical_hf.training.head_calibration`)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from elical_hf import AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
from elical_hf.training.head_calibration import (
    HEAD_TRAINING_DEFAULTS,
    calibrate_head,
    confidence_head_module,
    fit_head,
    head_confidences,
    head_training_args,
    label_budget_sweep,
)
from elical_hf.utils.loading import unwrap_peft
from elical_hf.training.recipe import take_labels


QUESTIONS = [f"who wrote book number {i} of the series" for i in range(24)]


def _rows(n: int = 24) -> list[dict]:
    return [{"question": q, "correctness": float(i % 3 == 0)} for i, q in enumerate(QUESTIONS[:n])]


def test_prompt_features_are_what_the_head_reads(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    features = model.prompt_features(QUESTIONS[:5], batch_size=2)
    assert features.shape == (5, model.config.hidden_size) and features.dtype == torch.float32
    head = confidence_head_module(model)
    expected = torch.sigmoid(head(features).squeeze(-1)).tolist()
    assert model.confidence(QUESTIONS[:5], batch_size=3) == pytest.approx(expected, abs=1e-5)
    assert model.prompt_features([]).shape == (0, model.config.hidden_size)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scoring_skips_a_lora_that_adds_nothing_and_reads_the_same_features(tiny_llama, dtype):
    """A fresh model's LoRA adds exact zeros (`lora_B` is zero): scoring leaves its branch out (`idle_adapters_off`)
    and reads, bit for bit, what the full forward pass gives; a LoRA layer that adds something still runs."""
    from peft.tuners.lora import LoraLayer

    model = AutoModelForConfidence.from_pretrained(tiny_llama, dtype=dtype)
    layers = [module for module in model.modules() if isinstance(module, LoraLayer)]
    calls = []
    for layer in layers:
        layer.lora_A["default"].register_forward_hook(lambda *_: calls.append(1))
    skipped = model.prompt_features(QUESTIONS[:5], batch_size=2)
    assert not calls
    with torch.enable_grad():  # gradients on: every LoRA branch runs
        full = torch.cat(model._map_prompts(QUESTIONS[:5], lambda pooled: pooled.detach().float(), 2, None, False))
    assert len(calls) >= len(layers) and torch.equal(skipped, full)
    assert not any(layer.disable_adapters for layer in layers)  # each switch restored
    with torch.no_grad():
        layers[0].lora_B["default"].weight.fill_(0.5)
    calls.clear()
    moved = model.prompt_features(QUESTIONS[:5], batch_size=2)
    assert len(calls) == 3 and not torch.equal(moved, skipped)  # that layer alone, once per batch


def test_fit_head_learns_and_restores_the_best_epoch():
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(200, 6, generator=generator)
    targets = (features[:, 0] > 0).float()
    head = torch.nn.Linear(6, 1)
    before = ((torch.sigmoid(head(features).squeeze(-1)) - targets) ** 2).mean().item()
    summary = fit_head(head, features[:160], targets[:160], features[160:], targets[160:], num_train_epochs=30,
                       learning_rate=0.05, early_stopping_patience=3)
    with torch.no_grad():
        dev = ((torch.sigmoid(head(features[160:]).squeeze(-1)) - targets[160:]) ** 2).mean().item()
    assert dev < before / 2
    assert dev == pytest.approx(summary["eval_loss"], abs=1e-6)  # the best epoch's head is what is left
    assert 1 <= summary["best_epoch"] <= summary["epochs"] <= 30


def test_fit_head_rejects_bad_targets():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_head(torch.nn.Linear(2, 1), torch.zeros(3, 2), [0.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="do not match"):
        fit_head(torch.nn.Linear(2, 1), torch.zeros(3, 2), [0.0, 1.0])


def test_calibrate_head_changes_only_the_head_and_saves(tiny_llama, tmp_path):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    lora_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    head_before = confidence_head_module(model).weight.detach().clone()
    summary = calibrate_head(model, _rows(), tmp_path / "cal", num_train_epochs=5, learning_rate=0.05)
    assert summary["epochs"] >= 1
    assert not torch.equal(confidence_head_module(model).weight, head_before)
    for name, parameter in model.named_parameters():
        if "lora_" in name:
            assert torch.equal(parameter, lora_before[name]), name
    reloaded = AutoModelForConfidence.from_pretrained(str(tmp_path / "cal"))
    assert reloaded.confidence(QUESTIONS[:4]) == pytest.approx(model.confidence(QUESTIONS[:4]), abs=1e-5)
    with open(os.path.join(tmp_path, "cal", "confidence_config.json")) as handle:
        entry = json.load(handle)["training_history"][-1]
    assert entry["calibration_trainable"] == "head" and entry["lora_trainable"] is False
    assert entry["num_examples"] < 24  # the dev questions came out of the labels


def test_calibrate_head_uses_given_features(tiny_llama, monkeypatch):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    cache = dict(zip(QUESTIONS, model.prompt_features(QUESTIONS)))
    inner = model.get_base_model()
    computed = []
    original = inner.prompt_features

    def counting(questions, *args, **kwargs):
        computed.extend(questions)
        return original(questions, *args, **kwargs)

    monkeypatch.setattr(inner, "prompt_features", counting)
    calibrate_head(model, _rows(), features=cache, num_train_epochs=2)
    assert len(computed) == 1  # one question recomputed, to check the cache is this model's; the rest are reused


def test_calibrate_head_refuses_another_layers_features(tiny_llama):
    """Features are keyed by question text only: a cache from another layer (or a wrong shape) is one clear error,
    not a head silently trained on the wrong inputs."""
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    other = AutoModelForConfidence.from_pretrained(tiny_llama, feature_layer=1)
    stale = dict(zip(QUESTIONS, other.prompt_features(QUESTIONS)))
    head_before = confidence_head_module(model).weight.detach().clone()
    with pytest.raises(ValueError, match="not this model's"):
        calibrate_head(model, _rows(), features=stale, num_train_epochs=2)
    with pytest.raises(ValueError, match="shape"):
        calibrate_head(model, _rows(), features={QUESTIONS[0]: torch.zeros(3)}, num_train_epochs=2)
    assert torch.equal(confidence_head_module(model).weight, head_before)


def test_calibrate_head_needs_the_label_column(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    with pytest.raises(ValueError, match="'correctness'"):
        calibrate_head(model, [{"question": "q", "consistency": 0.5}] * 4)


def test_calibrate_head_of_a_model_loaded_for_inference(tiny_llama, tmp_path):
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "stage1")
    model = AutoModelForConfidence.from_pretrained(str(tmp_path / "stage1"))  # not is_trainable: frozen head
    head = confidence_head_module(model)
    assert not head.weight.requires_grad
    before = head.weight.detach().clone()
    calibrate_head(model, _rows(), num_train_epochs=3, learning_rate=0.05)
    assert not torch.equal(head.weight, before)
    assert not head.weight.requires_grad  # left as it was


def test_head_training_args_read_one_set_of_defaults():
    args = head_training_args(batch_size=4, warmup_ratio=0.2)
    assert isinstance(args, ConfidenceTrainingArguments)
    assert args.per_device_train_batch_size == 4 and args.warmup_steps == 0.2
    assert args.learning_rate == HEAD_TRAINING_DEFAULTS["learning_rate"]
    assert args.early_stopping_patience == HEAD_TRAINING_DEFAULTS["early_stopping_patience"] and args.load_best_model_at_end
    trainer_defaults = ConfidenceTrainingArguments(output_dir="unused")
    for name in ("weight_decay", "max_grad_norm", "optim", "lr_scheduler_type", "seed", "adam_beta2"):
        assert getattr(args, name) == getattr(trainer_defaults, name), name
    with pytest.raises(ValueError, match="not both"):
        head_training_args(args, learning_rate=0.1)
    with pytest.raises(ValueError, match="alias"):
        head_training_args(batch_size=4, per_device_train_batch_size=8)
    with pytest.raises(ValueError, match="calibration_trainable='head'"):
        calibrate_head(None, _rows(), args=ConfidenceTrainingArguments(output_dir="unused", stage="calibration",
                                                                         calibration_trainable="all"))


def test_fit_head_warms_up_with_the_transformers_schedule(monkeypatch):
    # 10 rows, batch 5, 4 epochs: 8 steps, warm-up ceil(0.25 * 8) = 2 as `TrainingArguments.get_warmup_steps` says
    seen = []
    original = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    features, targets = torch.randn(10, 3, generator=torch.Generator().manual_seed(0)), torch.rand(10)
    summary = fit_head(torch.nn.Linear(3, 1), features, targets, batch_size=5, num_train_epochs=4, learning_rate=0.1,
                       warmup_ratio=0.25)
    monkeypatch.undo()
    assert summary["global_steps"] == 8 and summary["epochs"] == 4
    assert seen == pytest.approx([0.0, 0.05, 0.1, 0.1 * 5 / 6, 0.1 * 4 / 6, 0.1 * 3 / 6, 0.1 * 2 / 6, 0.1 / 6])


@pytest.fixture
def stage1_folder(tiny_llama, tmp_path) -> str:
    """A confidence model as after stage 1: nonzero LoRA weights (so that the features depend on them) and an
    elicitation entry in its history (which `calibration_trainable="head"` requires)."""
    torch.manual_seed(0)
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.2 * torch.randn(parameter.shape, generator=generator))
    model.confidence_config.training_history.append({"stage": "elicitation"})
    model.save_pretrained(tmp_path / "stage1")
    return str(tmp_path / "stage1")


def _head_args(tmp_path, **overrides) -> ConfidenceTrainingArguments:
    settings = dict(
        output_dir=str(tmp_path / "trainer"),
        stage="calibration",
        calibration_trainable="head",
        per_device_train_batch_size=4,
        num_train_epochs=3,
        learning_rate=0.05,
        warmup_steps=0.2,  # a ratio: ceil(0.2 * 9 steps) = 2 warm-up steps
        max_grad_norm=0.05,  # small enough to clip most steps
        train_sampling_strategy="sequential",  # both paths see the same rows in the same batches
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=1,
        seed=0,
    )
    settings.update(overrides)
    return ConfidenceTrainingArguments(**settings)


def _head_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in confidence_head_module(model).state_dict().items()}


# Both paths read the same frozen features, computed in different batches (the Trainer's collator pads each training
# batch, `prompt_features` pads its own), then run the same optimizer kernels on the same batches. On the CPU the two
# heads come out bit for bit equal; 1e-6 leaves room for float32 round-off where other kernels see other padded
# shapes, and is well below the smallest recipe change tried: decaying the bias too moves the head by 3e-5, dropping
# the warm-up or the clipping by more than 1e-2.
HEAD_TOLERANCE = 1e-6


def test_cached_features_and_the_trainer_give_the_same_head(stage1_folder, tmp_path):
    rows = _rows(12)
    args = _head_args(tmp_path)
    by_trainer = AutoModelForConfidence.from_pretrained(stage1_folder, is_trainable=True)
    start = _head_state(by_trainer)
    lora_before = {n: p.detach().clone() for n, p in by_trainer.named_parameters() if "lora_" in n}
    trainer = ConfidenceTrainer(by_trainer, args=args, train_dataset=rows)
    trainer.train()
    for name, parameter in by_trainer.named_parameters():
        if "lora_" in name:
            assert torch.equal(parameter, lora_before[name]), name  # LoRA stayed frozen

    cached = AutoModelForConfidence.from_pretrained(stage1_folder)
    assert all(torch.equal(start[k], v) for k, v in _head_state(cached).items())
    summary = calibrate_head(cached, rows, dev_fraction=0.0, args=args)

    trained, fitted = _head_state(by_trainer), _head_state(cached)
    assert not torch.allclose(trained["weight"], start["weight"], atol=1e-3)  # the head moved well beyond the tolerance
    for key in trained:
        torch.testing.assert_close(fitted[key], trained[key], atol=HEAD_TOLERANCE, rtol=0)
    assert summary["global_steps"] == trainer.state.global_step == 9

    trainer_entry = by_trainer.confidence_config.training_history[-1]
    cached_entry = cached.confidence_config.training_history[-1]
    assert set(cached_entry) - {"method"} == set(trainer_entry)
    for key in ("stage", "label_column", "num_examples", "lora_trainable", "calibration_trainable", "epochs",
                "global_steps", "learning_rate", "effective_batch_size", "precision"):
        assert cached_entry[key] == trainer_entry[key], key


def test_cached_features_and_the_trainer_stop_early_at_the_same_epoch(stage1_folder, tmp_path):
    rows = _rows(12)
    # the dev targets are the opposite of the training ones: the dev MSE rises as the head fits, so training stops
    # after `early_stopping_patience` epochs and the first epoch's head is restored
    dev = [{**row, "correctness": 1.0 - row["correctness"]} for row in rows]
    args = _head_args(tmp_path, num_train_epochs=8, early_stopping_patience=2, learning_rate=0.1)
    by_trainer = AutoModelForConfidence.from_pretrained(stage1_folder, is_trainable=True)
    trainer = ConfidenceTrainer(by_trainer, args=args, train_dataset=rows, eval_dataset=dev)
    trainer.train()

    cached = AutoModelForConfidence.from_pretrained(stage1_folder)
    features = cached.prompt_features([row["question"] for row in rows])
    head = confidence_head_module(cached)
    summary = fit_head(head, features, [r["correctness"] for r in rows], features, [r["correctness"] for r in dev],
                       args=args)
    assert summary["best_epoch"] < summary["epochs"] < 8  # it did stop early and went back to an earlier epoch
    assert summary["global_steps"] == trainer.state.global_step
    for key, value in _head_state(by_trainer).items():
        torch.testing.assert_close(head.state_dict()[key], value, atol=HEAD_TOLERANCE, rtol=0)
    trainer_dev = by_trainer.confidence_config.training_history[-1]["dev_metrics"]["loss"]
    assert summary["eval_loss"] == pytest.approx(trainer_dev, abs=HEAD_TOLERANCE)


def test_calibrate_head_records_dev_metrics_the_card_shows(tiny_llama, tmp_path):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    rows = [{**row, "greedy_correctness": int(row["correctness"])} for row in _rows()]
    calibrate_head(model, rows, tmp_path / "cal", num_train_epochs=3, learning_rate=0.05)
    dev = model.confidence_config.training_history[-1]["dev_metrics"]
    assert {"loss", "ece", "brier"} <= set(dev)
    readme = (tmp_path / "cal" / "README.md").read_text(encoding="utf-8")
    assert f"MSE {dev['loss']:.4f}" in readme


def test_unwrap_peft_gives_the_confidence_model_under_the_wrapper(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    inner = unwrap_peft(model)
    assert inner is model.get_base_model() and inner is not model and inner.confidence_config is not None
    assert unwrap_peft(inner) is inner  # not wrapped: itself


def test_head_confidences_are_the_models_confidences(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    features = model.prompt_features(QUESTIONS[:6], batch_size=3)
    expected = model.confidence(QUESTIONS[:6], batch_size=3)
    by_question = dict(zip(QUESTIONS[:6], features))
    assert head_confidences(model, features) == pytest.approx(expected, abs=1e-5)
    assert head_confidences(model, by_question, QUESTIONS[5::-1]) == pytest.approx(expected[::-1], abs=1e-5)


SWEEP = {"num_train_epochs": 3, "learning_rate": 0.05, "dev_fraction": 0.0}


def test_label_budget_sweep_starts_every_draw_from_the_same_head(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    cache = dict(zip(QUESTIONS, model.prompt_features(QUESTIONS)))
    start = {k: v.clone() for k, v in confidence_head_module(model).state_dict().items()}
    before = len(model.confidence_config.training_history)
    runs = list(label_budget_sweep(model, _rows(), [(12, 0), (8, 1), (12, 0)], cache, QUESTIONS[:5], **SWEEP))
    assert [(r.num_labels, r.seed, len(r.labels)) for r in runs] == [(12, 0, 12), (8, 1, 8), (12, 0, 12)]
    assert runs[2].confidences == pytest.approx(runs[0].confidences, abs=1e-7)  # not from the second run's head
    assert max(abs(a - b) for a, b in zip(runs[0].confidences, runs[1].confidences)) > 1e-4
    assert len(model.confidence_config.training_history) == before + 1  # each run's history starts afresh
    assert head_confidences(model, cache, QUESTIONS[:5]) == pytest.approx(runs[2].confidences, abs=1e-7)  # left

    # one run is `calibrate_head` from the starting head on `take_labels`' draw, scored by `head_confidences`
    confidence_head_module(model).load_state_dict(start)
    calibrate_head(model, take_labels(_rows(), 8, 1), None, seed=1, features=cache, **SWEEP)
    assert head_confidences(model, cache, QUESTIONS[:5]) == pytest.approx(runs[1].confidences, abs=1e-7)
    # `start_head` puts the head back first, whatever it holds now; `draw_labels` picks the rows
    again = next(label_budget_sweep(model, _rows(), [(8, 1)], cache, QUESTIONS[:5], start_head=start,
                                    draw_labels=lambda pool, n, seed: take_labels(pool, n, seed), **SWEEP))
    assert again.confidences == pytest.approx(runs[1].confidences, abs=1e-7)
    first = next(label_budget_sweep(model, _rows(), [(5, 0)], cache, QUESTIONS[:5], start_head=start,
                                    draw_labels=lambda pool, n, seed: pool[:n], **SWEEP))
    assert first.labels == _rows()[:5]


def test_label_budget_sweep_draws_a_fresh_head_per_seed(tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    cache = dict(zip(QUESTIONS, model.prompt_features(QUESTIONS)))
    start = {k: v.clone() for k, v in confidence_head_module(model).state_dict().items()}
    settings = {**SWEEP, "num_train_epochs": 1}
    fresh = list(label_budget_sweep(model, _rows(), [(12, 0), (12, 0), (12, 1)], cache, QUESTIONS[:5],
                                    fresh_head="torch_default", **settings))
    assert fresh[1].confidences == pytest.approx(fresh[0].confidences, abs=1e-7)  # one seed, one head
    assert max(abs(a - b) for a, b in zip(fresh[0].confidences, fresh[2].confidences)) > 1e-4
    # the model's own head on the same draw: the fresh runs did not start from it
    kept = next(label_budget_sweep(model, _rows(), [(12, 0)], cache, QUESTIONS[:5], start_head=start, **settings))
    assert max(abs(a - b) for a, b in zip(fresh[0].confidences, kept.confidences)) > 1e-4


def test_label_budget_sweep_checks_the_cached_features_once(tiny_llama, monkeypatch):
    """One recomputed question per sweep (every draw has the same model and features), and a cache from another
    model is still refused on the first draw."""
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    cache = dict(zip(QUESTIONS, model.prompt_features(QUESTIONS)))
    calls = []
    compute = model.prompt_features
    monkeypatch.setattr(model, "prompt_features", lambda questions, **kw: calls.append(len(questions)) or
                        compute(questions, **kw))
    runs = list(label_budget_sweep(model, _rows(), [(8, 0), (8, 1), (12, 2)], cache, QUESTIONS[:5], **SWEEP))
    assert len(runs) == 3 and calls == [1]
    wrong = {q: torch.randn_like(v) * 10 for q, v in cache.items()}
    with pytest.raises(ValueError, match="not this model's"):
        next(label_budget_sweep(model, _rows(), [(8, 0)], wrong, QUESTIONS[:5], **SWEEP))
