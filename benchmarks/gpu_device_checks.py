"""Part 1 of `benchmarks/gpu_check.py`: the device-dependent checks on tiny random models, each PASS or FAIL
with its error (see that script's docstring)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from gpu_common import load_kwargs, release, training_arguments  # gpu_common puts the repository root on sys.path


CHECK_QUESTIONS = ["who wrote hamlet", "what is the capital of france", "who was the first president",
                   "when was the king born", "which river is the largest in the world", "what year did the war end"]

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}
"""Largest confidence difference between two batch layouts of the same questions, by the backbone's dtype."""


# Part 1: device checks ------------------------------------------------------------------------------------------


def describe(error: BaseException) -> str:
    """`Type: first line of the message` (at most 300 characters): what a failed row says."""
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:300]}"


def run_check(name: str, fn: Callable[[], str]) -> dict[str, Any]:
    """`fn()` returns what it checked; an exception (an assertion too) is the check's failure, never the script's."""
    start = time.perf_counter()
    try:
        detail, status = fn(), "PASS"
    except Exception as error:  # noqa: BLE001  (every failure is a row of the table)
        detail, status = describe(error), "FAIL"
    return check_row(name, status, detail, time.perf_counter() - start)


def check_row(name: str, status: str, detail: str, seconds: float = 0.0) -> dict[str, Any]:
    return {"part": "device check", "name": name, "status": status, "detail": detail, "seconds": round(seconds, 2)}


def sampler_matches_generate(lm: Any, tokenizer: Any, device: str) -> str:
    from elical_hf.signals import SamplingSettings, build_prompt_ids, generate_answers

    settings = SamplingSettings(num_samples=3, max_new_tokens=12, batch_size=4)
    results = generate_answers(lm, tokenizer, CHECK_QUESTIONS, settings, progress=False, autocast_dtype=None)
    for question, ids, result in zip(CHECK_QUESTIONS, build_prompt_ids(tokenizer, CHECK_QUESTIONS, settings), results):
        input_ids = torch.tensor([ids], device=device)
        with torch.no_grad():
            out = lm.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False, max_new_tokens=12,
                              pad_token_id=tokenizer.pad_token_id)
        expected = out[0, len(ids):].tolist()
        if tokenizer.eos_token_id in expected:
            expected = expected[: expected.index(tokenizer.eos_token_id) + 1]
        theirs = tokenizer.batch_decode([[t] for t in expected])
        assert result["greedy_tokens"] == theirs, f"{question!r}: ours {result['greedy_tokens']} vs generate {theirs}"
        assert len(result["sampling_response"]) == 3
    return f"{len(CHECK_QUESTIONS)} questions, 12 new tokens, float32: identical tokens"


def trainer_step(base: str, device: str, workdir: str) -> str:
    from elical_hf import AutoModelForConfidence, ConfidenceTrainer
    from training_speed import rows_for

    model = AutoModelForConfidence.from_pretrained(base, **load_kwargs(device))
    before = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    assert any("lora_" in name for name in before) and any("confidence_head" in name for name in before), sorted(before)
    args = training_arguments(output_dir=os.path.join(workdir, "train-check"), per_device_train_batch_size=4,
                              max_steps=1, learning_rate=1e-2, warmup_steps=0, save_strategy="no", report_to="none",
                              disable_tqdm=True, logging_steps=1, seed=0, use_cpu=device == "cpu")
    trainer = ConfidenceTrainer(model, args=args, train_dataset=rows_for(8))
    loss = trainer.train().training_loss
    assert math.isfinite(loss), f"training loss {loss}"
    same = [name for name, p in model.named_parameters() if name in before and torch.equal(before[name], p.detach())]
    assert not same, f"{len(same)} of {len(before)} trainable parameters unchanged, e.g. {same[:3]}"
    where = {p.device.type for p in model.parameters()}
    assert where == {torch.device(device).type}, f"parameters on {where}"
    return f"1 step, batch 4: loss {loss:.4f}; all {len(before)} LoRA + head tensors changed"


def confidence_batch_invariance(base: str, device: str) -> str:
    from elical_hf import AutoModelForConfidence

    model = AutoModelForConfidence.from_pretrained(base, **load_kwargs(device))
    dtype = model.get_input_embeddings().weight.dtype
    one = model.confidence(CHECK_QUESTIONS, batch_size=1)
    many = model.confidence(CHECK_QUESTIONS, batch_size=len(CHECK_QUESTIONS))
    assert all(0.0 <= c <= 1.0 for c in one + many), f"outside [0, 1]: {one + many}"
    largest = max(abs(a - b) for a, b in zip(one, many))
    assert largest <= TOLERANCE[dtype], f"batch 1 vs {len(one)}: max abs Δ {largest:.2e} > {TOLERANCE[dtype]:g}"
    return (f"{str(dtype).removeprefix('torch.')}: batch 1 vs {len(one)}: max abs Δ {largest:.1e} (tolerance "
            f"{TOLERANCE[dtype]:g})")


def gate_from_prefill(base: str, device: str) -> str:
    """A model without LoRA reads its confidence from the answer prompt's prefill; a separate `confidence()` pass
    would hide a broken fused path, so it is switched off while the gate runs."""
    from elical_hf import AutoModelForConfidence
    from elical_hf.gate import decide

    model = AutoModelForConfidence.from_pretrained(base, use_lora=False, **load_kwargs(device))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a head moved away from its init, so the confidences spread over (0, 1)
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator).to(parameter))
    inner = model.get_base_model()
    dtype = inner.get_input_embeddings().weight.dtype
    expected = inner.confidence(CHECK_QUESTIONS)
    ranked = sorted(expected)
    gap = max(range(len(ranked) - 1), key=lambda i: ranked[i + 1] - ranked[i])
    threshold = (ranked[gap] + ranked[gap + 1]) / 2  # in the widest gap: decisions do not hang on rounding

    def no_second_pass(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the gate ran a separate confidence pass instead of reading the prefill")

    inner.confidence = no_second_pass
    try:
        results = model.answer(CHECK_QUESTIONS, threshold=threshold, max_new_tokens=4)
    finally:
        del inner.confidence
    decisions = [r["decision"] for r in results]
    assert decisions == [decide(c, threshold) for c in expected], f"{decisions} at threshold {threshold:.3f}"
    largest = max(abs(r["confidence"] - c) for r, c in zip(results, expected))
    assert largest <= TOLERANCE[dtype], f"prefill vs confidence(): max abs Δ {largest:.2e}"
    assert all((r["answer"] is None) == (d == "abstain") for r, d in zip(results, decisions))
    return (f"threshold {threshold:.3f}: {decisions.count('answer')} answer, {decisions.count('abstain')} abstain, as "
            f"confidence() + threshold; max abs Δ confidence {largest:.1e}")


def precision_policy(base: str, device: str) -> str:
    from elical_hf import AutoModelForConfidence
    from elical_hf.settings.precision import precision_report, resolve_dtype

    chosen = resolve_dtype("auto", device)
    loaded = AutoModelForConfidence.from_pretrained(base, **load_kwargs(device)).get_input_embeddings().weight.dtype
    report = precision_report(device=device)
    if device.startswith("cuda"):
        wanted = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        assert chosen == wanted, f"policy picked {chosen} on {torch.cuda.get_device_name()}, expected {wanted}"
    assert loaded == chosen, f"the confidence model loaded in {loaded}, the policy says {chosen}"
    extra = "" if device.startswith("cuda") else (
        f" (bf16_native={report.get('cpu_bf16_native')}, speedup={report.get('cpu_bf16_speedup')})")
    return f"policy picks {str(chosen).removeprefix('torch.')} on {device}{extra}; the confidence model loads in it"


def device_checks(device: str, tokenizer: Any, workdir: str) -> list[dict[str, Any]]:
    from tests.tiny import make_tiny_causal_lm

    base = os.path.join(workdir, "tiny-base")
    lm = make_tiny_causal_lm(tokenizer, arch="qwen2", seed=3, initializer_range=0.3)  # peaked: no near-ties
    lm.save_pretrained(base)
    tokenizer.save_pretrained(base)
    lm.to(device)
    rows = [
        run_check("sampler greedy = HF generate greedy", lambda: sampler_matches_generate(lm, tokenizer, device)),
        run_check("ConfidenceTrainer step", lambda: trainer_step(base, device, workdir)),
        run_check("confidence in [0, 1], batch 1 = batch N", lambda: confidence_batch_invariance(base, device)),
        run_check("gate decision from the prefill", lambda: gate_from_prefill(base, device)),
        run_check("precision policy", lambda: precision_policy(base, device)),
    ]
    del lm
    release()
    return rows
