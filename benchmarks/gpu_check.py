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
timing), and only torch, transformers, peft, accelerate, safetensors and `datasets` (which `elical_hf.data.training_table` imports)
are needed.

    python benchmarks/gpu_check.py                                      # CUDA, 7b, 5-8 minutes on one H200
    python benchmarks/gpu_check.py --device cpu --shape tiny --budget_s 60 --output gpu_check.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from common import interleaved_medians, print_table  # puts the repository root on sys.path
from gpu_common import (
    SHAPES, build_causal_lm, device_name, hard_limit, load_kwargs, log, peak_memory, release, synchronize,
    training_arguments, versions,
)
from gpu_device_checks import check_row, describe, device_checks

import torch


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched: a GPU machine here reaches no network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.settings.prompts import QA_PROMPT
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
    from elical_hf.settings.precision import resolve_dtype

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
