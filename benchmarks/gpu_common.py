"""Helpers of `benchmarks/gpu_check.py` shared by its device checks (`gpu_device_checks.py`) and its speed rows:
time limits, device synchronisation, versions, models built from a config, training arguments across
transformers versions, peak memory."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import signal
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from common import peak_rss_mib  # puts the repository root on sys.path

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
    from elical_hf.settings.precision import cpu_model_name

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
