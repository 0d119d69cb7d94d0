"""One prepared command for a GPU machine: the device-dependent checks on tiny models, then the speed of a
Qwen2.5-7B-shaped model (random weights), in one Markdown table.

Part 1, device checks (tiny random Qwen2 models from `tests/tiny.py`, on `--device`), each PASS or FAIL with its error:
- our sampler's greedy answers are HF `generate(do_sample=False)`'s, token for token (float32);
- one `ConfidenceTrainer` step (stage 1) changes every trainable parameter and gives a finite loss;
- `model.confidence(questions)` lies in [0, 1] and is the same with batch size 1 and N;
- the gate's decisions, read from the answer prompt's prefill (a model without LoRA), are `confidence()` + threshold;
- the precision policy: bf16 on a CUDA device (and the confidence model loads in it); on a CPU, what it picks.

Part 2, speed, for `--shape 7b` (Qwen2.5-7B-Instruct's config: 28 layers, hidden 3584, 28 heads, 4 KV heads, vocab
152064) or `--shape tiny` (4 layers of width 64), built from the config with random weights in the policy's dtype:
- signals: our sampler (`generate_answers`) vs HF `generate(num_return_sequences=k)` + a greedy `generate`, tokens/s;
- the gate (`model.answer`, threshold 0: every question answered; LoRA + head, and without LoRA) vs plain greedy
  `generate` and our own greedy decoder on the same prompts, seconds per question;
- scoring (`model.confidence`), questions/s;
- stage-1 LoRA + head training (`ConfidenceTrainer`), samples/s (median step after warm-up steps) and peak memory
  (`torch.cuda.max_memory_allocated`, weights included; on a CPU the peak RSS of the run), with and without
  activation checkpointing.
Methods compared in one row group take turns in each timed round, after a short warm-up; medians of as many rounds
as the row group's share of `--budget_s` allows (at least one). The base model is saved to a temporary folder once,
because confidence models load from a folder and the gate reads the LM head from the checkpoint (about 15 GB for 7b).

No network, no GGUF, no installed elical-hf: the repository root goes on `sys.path` (`common.py`), the tokenizer is
`tests/tiny.py`'s word-level tokenizer (built in code; ids past its ~360 words decode to nothing, which changes no
timing), and only torch, transformers, peft, accelerate, safetensors and `datasets` (which `elical_hf.data` imports)
are needed.

    python benchmarks/gpu_check.py                                      # CUDA, 7b, 5-8 minutes on one H200
    python benchmarks/gpu_check.py --device cpu --shape tiny --budget_s 60 --output gpu_check.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

from common import interleaved_medians, peak_rss_mib, print_table  # puts the repository root on sys.path

import torch


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched: a GPU machine here reaches no network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QWEN2_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768, rms_norm_eps=1e-6,
                rope_theta=1e6, tie_word_embeddings=False)
"""Qwen2.5-7B-Instruct's `config.json` (the fields that set its shape and cost)."""

SHAPES = {
    "7b": QWEN2_7B,
    "tiny": dict(QWEN2_7B, hidden_size=64, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=4096, max_position_embeddings=4096),
}
"""Both have a vocabulary larger than the tokenizer's, so the tiny run goes through what the 7b run does."""

SIZES = {
    "7b": dict(sample_questions=16, num_samples=20, max_new_tokens=256, gate_questions=32, gate_new_tokens=64,
               gate_batch=16, score_questions=256, train_batch=16, train_steps=10, warmup_steps=2, repeats=3),
    "tiny": dict(sample_questions=2, num_samples=20, max_new_tokens=8, gate_questions=4, gate_new_tokens=6,
                 gate_batch=4, score_questions=32, train_batch=4, train_steps=5, warmup_steps=2, repeats=3),
}
"""What each speed row runs, per shape (the table says it again)."""

BUDGET_SHARES = {"sampler": (0.25, 0.45), "gate": (0.12, 0.25), "scoring": (0.04, 0.1), "training": (0.0, 0.25)}
"""Per row group, the shares of `--budget_s` that its timed rounds may take (the first round always runs), and after
which it is interrupted (it fails; the groups after it still run), though never before `MIN_GROUP_LIMIT_S`."""

MIN_GROUP_LIMIT_S = 60.0
"""A tiny run on a busy CPU is no runaway: only the overall limit stops its groups."""

SAMPLER_ROWS = ("sampler: ours (generate_answers)", "sampler: HF generate(num_return_sequences=k) + greedy")
GATE_ROWS = ("plain greedy: HF generate(do_sample=False)", "plain greedy: our decoder (complete_prompts)",
             "gate: zero-overhead (no LoRA), model.answer", "gate: LoRA + head, model.answer")
SCORING_ROWS = ("scoring: model.confidence",)
TRAINING_ROWS = tuple(f"training: stage-1 LoRA + head, activation checkpointing {state}" for state in ("off", "on"))
"""The speed rows, by row group (the first gate row is the baseline the others are compared with)."""

CHECK_QUESTIONS = ["who wrote hamlet", "what is the capital of france", "who was the first president",
                   "when was the king born", "which river is the largest in the world", "what year did the war end"]

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}
"""Largest confidence difference between two batch layouts of the same questions, by the backbone's dtype."""


class OverTime(Exception):
    """Raised in whatever runs when the hard limit passes: its row group fails, the rest is skipped, the table
    prints."""


@contextlib.contextmanager
def hard_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block with `OverTime` after `seconds` (a real-time timer; nothing where there is none), so a
    row group that runs far past its share still leaves a table within the machine's time. Nests: an inner limit
    never outlasts the outer one, which runs on after it."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise OverTime(f"stopped by a hard limit after {time.perf_counter() - began:.0f} s")

    began = time.perf_counter()
    outer = signal.getitimer(signal.ITIMER_REAL)[0]  # seconds left on an enclosing limit; 0: none
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, min(seconds, outer) if outer else seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer - (time.perf_counter() - began)))


def log(message: str, start: float) -> None:
    print(f"[{time.perf_counter() - start:7.1f} s] {message}", file=sys.stderr, flush=True)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def versions() -> dict[str, str]:
    found = {}
    for name in ("torch", "transformers", "peft", "accelerate", "tokenizers", "datasets"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    from elical_hf.precision import cpu_model_name

    return f"{cpu_model_name()} ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def load_kwargs(device: str) -> dict[str, Any]:
    """Where `AutoModelForConfidence.from_pretrained` puts the backbone (its dtype is then the policy's for it)."""
    return {} if device == "cpu" else {"device_map": device}


def from_config(config: Any, dtype: torch.dtype) -> Any:
    """`AutoModelForCausalLM.from_config` in `dtype` (`dtype=` since transformers 4.56, `torch_dtype=` before)."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_config(config, dtype=dtype)
    except TypeError:
        return AutoModelForCausalLM.from_config(config, torch_dtype=dtype)


def build_causal_lm(shape: str, tokenizer: Any, device: str, dtype: torch.dtype) -> Any:
    """A Qwen2 causal LM of `SHAPES[shape]` with random weights, allocated on `device` in `dtype`; EOS and PAD are
    the tokenizer's."""
    from transformers import Qwen2Config

    config = Qwen2Config(**SHAPES[shape], bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 7B model drawn on a CPU takes minutes
        model = from_config(config, dtype)
    for name in ("eos_token_id", "pad_token_id"):
        setattr(model.generation_config, name, getattr(tokenizer, name))
    model.generation_config.bos_token_id = None
    return model.eval()


def training_arguments(**kwargs: Any) -> Any:
    """`ConfidenceTrainingArguments`, with transformers' older names where this transformers has no newer ones
    (`gradient_checkpointing` for `activation_checkpointing`, `no_cuda` for `use_cpu`)."""
    from elical_hf import ConfidenceTrainingArguments

    fields = {field.name for field in dataclasses.fields(ConfidenceTrainingArguments)}
    for new, old in (("activation_checkpointing", "gradient_checkpointing"), ("use_cpu", "no_cuda")):
        if new in kwargs and new not in fields:
            kwargs[old] = kwargs.pop(new)
    return ConfidenceTrainingArguments(**kwargs)


@contextlib.contextmanager
def peak_memory(device: str) -> Iterator[dict[str, Any]]:
    """Peak memory of the block in MiB (`found["mib"]`): the GPU's allocated peak, weights included; on a CPU the
    peak RSS since the block began (Linux's resettable high-water mark), else the process's peak so far."""
    found: dict[str, Any] = {}
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield found
        torch.cuda.synchronize()
        found.update(mib=torch.cuda.max_memory_allocated() / 2**20, kind="GPU allocated")
        return
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")  # resets VmHWM
        resettable = True
    except OSError:
        resettable = False
    yield found
    if resettable:
        with open("/proc/self/status", encoding="ascii") as handle:
            hwm = next(line for line in handle if line.startswith("VmHWM:"))
        found.update(mib=int(hwm.split()[1]) / 1024, kind="RSS")
    else:
        found.update(mib=peak_rss_mib(), kind="process peak RSS")


def release() -> None:
    """Hand back the memory of models the caller dropped."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


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
    from elical_hf.precision import precision_report, resolve_dtype

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


# Part 2: speed --------------------------------------------------------------------------------------------------


def speed_row(name: str, setting: str, value: float | None, unit: str, note: str = "", **extra: Any) -> dict[str, Any]:
    return {"part": "speed", "name": name, "setting": setting, "value": value, "unit": unit, "note": note, **extra}


def failed_rows(names: tuple[str, ...], setting: str, error: BaseException | str) -> list[dict[str, Any]]:
    text = error if isinstance(error, str) else describe(error)
    return [speed_row(name, setting, None, "", text) for name in names]


def timed(fns: dict[str, Callable[[], Any]], device: str, repeats: int, budget_s: float) -> dict[str, float]:
    """Median seconds of each method, taking turns, every call ending on a synchronized device."""
    def synced(fn: Callable[[], Any]) -> Callable[[], None]:
        def call() -> None:
            fn()
            synchronize(device)
        return call

    return interleaved_medians({name: synced(fn) for name, fn in fns.items()}, repeats, warmup=0, budget_s=budget_s)


def sampler_speed(lm: Any, tokenizer: Any, device: str, size: dict, budget_s: float) -> list[dict[str, Any]]:
    from elical_hf.signals import SamplingSettings
    from elical_hf.signals.decoding import auto_batch_size
    from sampling_speed import questions_for, run_hf, run_ours

    k, n = size["num_samples"], size["sample_questions"]
    questions = questions_for(n)
    settings = SamplingSettings(num_samples=k, max_new_tokens=size["max_new_tokens"],
                                batch_size=min(n, auto_batch_size(k + 1, device)))
    setting = (f"k={k}, {settings.max_new_tokens} new tokens, {n} questions in batches of {settings.batch_size}, "
               f"{str(lm.dtype).removeprefix('torch.')}")
    short = dataclasses.replace(settings, max_new_tokens=4)
    run_ours(lm, tokenizer, questions[:2], short)  # warm-up
    run_hf(lm, tokenizer, questions[:2], short, per_sample=False)
    synchronize(device)
    tokens: dict[str, int] = {}

    def measure(name: str, run: Callable[[], dict]) -> Callable[[], None]:
        def call() -> None:
            tokens[name] = run()["tokens"]
        return call

    seconds = timed({"ours": measure("ours", lambda: run_ours(lm, tokenizer, questions, settings)),
                     "hf": measure("hf", lambda: run_hf(lm, tokenizer, questions, settings, per_sample=False))},
                    device, size["repeats"], budget_s)
    speed = {name: tokens[name] / seconds[name] for name in seconds}
    ratio = f"{speed['ours'] / speed['hf']:.2f}x HF generate"
    return [speed_row(SAMPLER_ROWS[0], setting, speed["ours"], "tokens/s", ratio, tokens=tokens["ours"],
                      seconds=seconds["ours"]),
            speed_row(SAMPLER_ROWS[1], setting, speed["hf"], "tokens/s", "baseline", tokens=tokens["hf"],
                      seconds=seconds["hf"])]


def gate_speed(lm: Any, lora: Any, zero: Any, tokenizer: Any, device: str, size: dict,
               budget_s: float) -> list[dict[str, Any]]:
    from elical_hf.bundled import load_bundled_questions
    from elical_hf.prompts import QA_PROMPT
    from elical_hf.signals import SamplingSettings, build_prompt_ids, complete_prompts
    from sampling_speed import hf_batch

    questions = [row["question"].strip() for row in load_bundled_questions("nq", size["gate_questions"])]
    new_tokens, batch = size["gate_new_tokens"], size["gate_batch"]
    settings = SamplingSettings(num_samples=1, max_new_tokens=new_tokens, batch_size=batch)
    prompt_ids = build_prompt_ids(tokenizer, questions, settings)  # the gate's answer prompt, token for token
    prompts = [QA_PROMPT.format(question=q) for q in questions]
    options = {"threshold": 0.0, "max_new_tokens": new_tokens, "batch_size": batch}
    fns = dict(zip(GATE_ROWS, (
        lambda: [hf_batch(lm, tokenizer, prompt_ids[i : i + batch], settings, 1, sample=False, scores=False)
                 for i in range(0, len(prompt_ids), batch)],
        lambda: complete_prompts(lm, tokenizer, prompts, new_tokens, batch, progress=False, autocast_dtype=None),
        lambda: zero.answer(questions, **options),
        lambda: lora.answer(questions, **options),
    )))
    setting = (f"{len(questions)} NQ questions in batches of {batch}, {new_tokens} new tokens, threshold 0 (all "
               "answered)")
    for fn in fns.values():  # warm-up
        fn()
    seconds = timed(fns, device, size["repeats"], budget_s)
    base = seconds[GATE_ROWS[0]]
    return [speed_row(name, setting, value / len(questions), "s/question", f"{value / base:.3f}x HF generate")
            for name, value in seconds.items()]


def scoring_speed(lora: Any, device: str, size: dict, budget_s: float) -> list[dict[str, Any]]:
    from sampling_speed import questions_for

    questions = questions_for(size["score_questions"])
    lora.confidence(questions, batch_size=16)  # warm-up, every batch shape included
    seconds = timed({"score": lambda: lora.confidence(questions, batch_size=16)}, device, size["repeats"], budget_s)
    return [speed_row(SCORING_ROWS[0], f"{len(questions)} NQ/HotpotQA questions, batch_size=16",
                      len(questions) / seconds["score"], "questions/s")]


def training_speed(lora: Any, device: str, size: dict, workdir: str) -> list[dict[str, Any]]:
    from transformers import TrainerCallback

    from elical_hf import ConfidenceTrainer
    from training_speed import rows_for

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            synchronize(device)
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            synchronize(device)
            self.times.append(time.perf_counter() - self.start)

    batch, steps, warmup = size["train_batch"], size["train_steps"], size["warmup_steps"]
    data = rows_for(batch * steps)

    def train(checkpointing: bool, timer: StepTimer | None = None) -> None:
        args = training_arguments(output_dir=os.path.join(workdir, f"train-{checkpointing}"),
                                  per_device_train_batch_size=batch, max_steps=steps, learning_rate=1e-4,
                                  warmup_steps=0, save_strategy="no", logging_strategy="no", report_to="none",
                                  disable_tqdm=True, seed=0, use_cpu=device == "cpu",
                                  activation_checkpointing=checkpointing)
        ConfidenceTrainer(lora, args=args, train_dataset=data, callbacks=[timer] if timer else None).train()

    train(False)  # warm-up: the same batches (and so the same shapes: CPU kernels are built per shape) once untimed
    rows = []
    for name, checkpointing in zip(TRAINING_ROWS, (False, True)):
        setting = f"batch {batch}, {steps} steps (median of the last {steps - warmup}), LoRA r=8 on every linear layer"
        try:
            timer = StepTimer()
            with peak_memory(device) as memory:
                train(checkpointing, timer)
            step = statistics.median(timer.times[warmup:] or timer.times)
            rows.append(speed_row(name, setting, batch / step, "samples/s",
                                  f"peak {memory['kind']} {memory['mib']:,.0f} MiB", peak_memory_mib=memory["mib"]))
        except Exception as error:  # noqa: BLE001
            rows += failed_rows((name,), setting, error)
        finally:
            if checkpointing:  # the Trainer leaves it on, and scoring then skips the shared-prefix path
                disable = getattr(lora, "activation_checkpointing_disable", None) or getattr(
                    lora, "gradient_checkpointing_disable", None)
                with contextlib.suppress(Exception):
                    disable()
            release()
    return rows


def speed(shape: str, device: str, tokenizer: Any, workdir: str, budget_s: float, deadline: float, start: float,
          rows: list[dict[str, Any]], setup: dict[str, Any]) -> None:
    """The speed rows, appended to `rows` as they are measured (a failure later keeps them); `setup` gets the model's
    size and its build, save and load times."""
    from elical_hf.precision import resolve_dtype

    size = SIZES[shape]
    dtype = resolve_dtype("auto", device)
    began = time.perf_counter()
    lm = build_causal_lm(shape, tokenizer, device, dtype)
    synchronize(device)
    setup.update(parameters=sum(p.numel() for p in lm.parameters()), dtype=str(dtype).removeprefix("torch."),
                 build_s=round(time.perf_counter() - began, 1))
    log(f"built a {setup['parameters'] / 1e6:,.1f}M-parameter {shape} model in {setup['build_s']} s", start)

    def guarded(group: str, names: tuple[str, ...], fn: Callable[[float], list[dict[str, Any]]]) -> None:
        """`fn(seconds its timed rounds may take)`'s rows, or failed rows saying why not."""
        if time.perf_counter() > deadline:
            rows.extend(failed_rows(names, "", "skipped: --budget_s spent"))
            return
        rounds, limit = BUDGET_SHARES[group]
        try:
            with hard_limit(max(limit * budget_s, MIN_GROUP_LIMIT_S)):
                rows.extend(fn(rounds * budget_s))
        except Exception as error:  # noqa: BLE001
            rows.extend(failed_rows(names, "", error))
        release()
        log(f"{group} rows done", start)

    guarded("sampler", SAMPLER_ROWS, lambda seconds: sampler_speed(lm, tokenizer, device, size, seconds))

    later = (*GATE_ROWS, *SCORING_ROWS, *TRAINING_ROWS)
    if time.perf_counter() > deadline:  # not even the save and loads (a minute for 7b)
        rows.extend(failed_rows(later, "", "skipped: --budget_s spent"))
        return
    base = os.path.join(workdir, f"{shape}-base")
    began = time.perf_counter()
    lm.save_pretrained(base)
    tokenizer.save_pretrained(base)
    setup["save_s"] = round(time.perf_counter() - began, 1)
    log(f"saved the base model in {setup['save_s']} s", start)

    from elical_hf import AutoModelForConfidence

    began = time.perf_counter()
    lora = AutoModelForConfidence.from_pretrained(base, **load_kwargs(device))
    zero = AutoModelForConfidence.from_pretrained(base, use_lora=False, **load_kwargs(device))
    setup["load_s"] = round(time.perf_counter() - began, 1)
    log(f"loaded two confidence models in {setup['load_s']} s", start)
    guarded("gate", GATE_ROWS, lambda seconds: gate_speed(lm, lora, zero, tokenizer, device, size, seconds))
    del lm, zero
    release()
    guarded("scoring", SCORING_ROWS, lambda seconds: scoring_speed(lora, device, size, seconds))
    guarded("training", TRAINING_ROWS, lambda seconds: training_speed(lora, device, size, workdir))


# The table ------------------------------------------------------------------------------------------------------


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    cells = []
    for row in rows:
        if row["part"] == "device check":
            cells.append([row["part"], row["name"], f"tiny models, {row['seconds']} s", row["status"], row["detail"]])
        else:
            value = "FAIL" if row["value"] is None else f"{row['value']:,.4g} {row['unit']}"
            cells.append([row["part"], row["name"], row["setting"], value, row["note"]])
    return [[cell.replace("|", "/") for cell in row] for row in cells]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when one is visible)")
    parser.add_argument("--shape", default="7b", choices=sorted(SHAPES), help="model of the speed rows")
    parser.add_argument("--budget_s", type=float, default=420.0,
                        help="wall-clock budget: row groups take medians of as many rounds as fit their share, none "
                             "starts after it, and the work is interrupted at 1.05x it + 20 s (the table still "
                             "prints)")
    parser.add_argument("--output", default=None, help="also write the table and its context to this JSON file")
    parser.add_argument("--skip_speed", action="store_true", help="run the device checks only")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            parser.error(f"--device {device}: torch {torch.__version__} sees no CUDA device")
        device = str(torch.device(device if ":" in device else f"cuda:{torch.cuda.current_device()}"))
        torch.cuda.set_device(device)  # the Trainer's device, and `device_map`'s: one and the same
    start = time.perf_counter()
    deadline = start + args.budget_s

    with contextlib.suppress(Exception):
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # generation-config notes on random models would bury the table
    from tests.tiny import make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    workdir = tempfile.mkdtemp(prefix="elical-gpu-check-")
    rows: list[dict[str, Any]] = []
    setup: dict[str, Any] = {}
    try:
        quiet = contextlib.redirect_stdout(sys.stderr)  # stdout: the report alone (the Trainer prints its metrics)
        with quiet, hard_limit(1.05 * args.budget_s + 20):
            try:
                rows += device_checks(device, tokenizer, workdir)
            except Exception as error:  # noqa: BLE001  (building or saving the tiny models)
                rows.append(check_row("device checks: the tiny models", "FAIL", describe(error)))
            log("device checks done", start)
            if not args.skip_speed:
                try:
                    speed(args.shape, device, tokenizer, workdir, args.budget_s, deadline, start, rows, setup)
                except Exception as error:  # noqa: BLE001  (building, saving or loading the model)
                    rows += failed_rows((f"speed ({args.shape}): the rows not measured",), "", error)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    report = {"device": device, "device_name": device_name(device), "versions": versions(), "shape": args.shape,
              "budget_s": args.budget_s, "wall_s": round(time.perf_counter() - start, 1), "setup": setup, "rows": rows}
    print(f"Device: {report['device_name']} ({device}); "
          + ", ".join(f"{name} {version}" for name, version in report["versions"].items()))
    if setup:
        print(f"Speed model: Qwen2ForCausalLM, {args.shape} shape, {setup['parameters'] / 1e6:,.1f}M parameters, "
              f"random weights, {setup['dtype']}; built in {setup['build_s']} s, saved in "
              f"{setup.get('save_s', '-')} s, two confidence models loaded in {setup.get('load_s', '-')} s.")
    print(f"Wall time {report['wall_s']} s of a {args.budget_s:g} s budget.\n")
    print_table(["part", "row", "what was run", "result", "note"], table_rows(rows))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2, default=str)
    failed = [row for row in rows if row.get("status") == "FAIL" or (row["part"] == "speed" and row["value"] is None)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
