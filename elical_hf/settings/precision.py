"""The precision policy: one function decides the compute dtype from the hardware, and everything uses it.

- CUDA: bfloat16 where the GPU supports it, else float16.
- CPU: bfloat16 only where the CPU runs it natively (oneDNN sees AVX512-BF16 or AMX) *and* a bf16 matmul measured
  here is faster than a float32 one; float32 otherwise. On CPUs without native bf16 (AMD Zen 3, most laptops) bf16
  is emulated and several times slower than float32 — up to ~80x for square matmuls.
- Apple MPS: float32.

An explicit dtype always wins; asking for bfloat16 on a CPU where it is slow logs a warning. The environment variable
`ELICAL_HF_CPU_BF16` overrides the CPU check (`1`: treat bf16 as native and fast, `0`: as not), so both branches can be
exercised on one machine. `precision_report()` is what runs record (`run.json`, a model's training history).
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..utils.cpu import CPU_BF16_ENV, cpuinfo_field, forced_cpu_bf16


logger = logging.getLogger(__name__)

TRACE_ENV = "ELICAL_HF_PRECISION_TRACE"
"""When set to a file path, every process appends one line there (its pid and the decision) each time it decides the
CPU policy: which processes the policy reached (the test suite uses it to find the tests that depend on it)."""

MIN_BF16_SPEEDUP = 1.2
"""A native-bf16 CPU uses bf16 only when a bf16 matmul is at least this much faster than float32 (measured)."""

AUTO = "auto"

__all__ = [
    "AUTO",
    "CPU_BF16_ENV",
    "CPUCapability",
    "TRACE_ENV",
    "cpu_capability",
    "default_device",
    "matmul_gflops",
    "onednn_bf16",
    "parse_dtype",
    "precision_report",
    "resolve_dtype",
]


@dataclass(frozen=True)
class CPUCapability:
    """
    What this CPU can do with bfloat16.

    Attributes:
        model_name (`str`): The CPU's model name (`lscpu`'s "Model name").
        bf16_native (`bool`): oneDNN reports native bf16 kernels (AVX512-BF16 or AMX).
        bf16_speedup (`float`, *optional*): Measured float32 time / bfloat16 time of a square matmul; `None` when not
            measured (no native support, or decided by the environment variable).
        source (`str`): `"detected"` or `"environment"` (`ELICAL_HF_CPU_BF16` was set).
    """

    model_name: str
    bf16_native: bool
    bf16_speedup: float | None
    source: str

    @property
    def bf16_fast(self) -> bool:
        """Whether bf16 is the faster choice on this CPU."""
        if not self.bf16_native:
            return False
        return self.bf16_speedup is None or self.bf16_speedup >= MIN_BF16_SPEEDUP


def cpu_model_name() -> str:
    """The CPU's model name, from `/proc/cpuinfo` where there is one."""
    return cpuinfo_field("model name") or platform.processor() or platform.machine() or "unknown"


def onednn_bf16() -> bool:
    """Whether this PyTorch's oneDNN runs bfloat16 on this CPU (natively or emulated)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def matmul_gflops(dtype: torch.dtype, size: int = 512, repeats: int = 5) -> float:
    """Median GFLOP/s of a `size x size` matmul in `dtype` on the CPU (after one warm-up run). Its operands come from a
    generator of its own: measuring never moves the global RNG (a seeded run draws the same fresh head whether or
    not this process probed its CPU first)."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator).to(dtype) for _ in range(2))
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 2 * size**3 / max(sorted(times)[len(times) // 2], 1e-9) / 1e9


@functools.cache
def cpu_capability() -> CPUCapability:
    """This CPU's bf16 capability: decided once per process (by `ELICAL_HF_CPU_BF16`, or detected and measured)."""
    capability = _decide_cpu_capability()
    trace = os.environ.get(TRACE_ENV)
    if trace:
        with open(trace, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()} {capability.source} bf16_fast={capability.bf16_fast}\n")
    return capability


def _decide_cpu_capability() -> CPUCapability:
    name, forced = cpu_model_name(), forced_cpu_bf16()
    if forced is not None:
        return CPUCapability(name, forced, None, "environment")
    if not onednn_bf16():
        return CPUCapability(name, False, None, "detected")
    speedup = matmul_gflops(torch.bfloat16) / matmul_gflops(torch.float32)
    return CPUCapability(name, True, round(speedup, 2), "detected")


def default_device() -> str:
    """Where work runs when nothing says otherwise: `"cuda"` when a GPU is visible, else `"mps"` or `"cpu"`."""
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """`"bfloat16"`, `"torch.float32"`, `"fp16"`, ... as a floating-point `torch.dtype`; one clear error otherwise."""
    if isinstance(dtype, torch.dtype):
        return dtype
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    name = str(dtype).strip().removeprefix("torch.")
    value = getattr(torch, aliases.get(name, name), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"Unknown dtype {dtype!r}; use 'auto', 'float32', 'bfloat16' or 'float16'.")
    return value


def _device_type(device: str | torch.device | None) -> str:
    return torch.device(device).type if device is not None else default_device()


def _policy_dtype(device_type: str) -> torch.dtype:
    if device_type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device_type == "cpu":
        return torch.bfloat16 if cpu_capability().bf16_fast else torch.float32
    return torch.float32


@functools.cache
def log_once(message: str, *args: Any, level: int = logging.INFO) -> None:
    logger.log(level, message, *args)


def resolve_dtype(dtype: str | torch.dtype | None = AUTO, device: str | torch.device | None = None) -> torch.dtype:
    """
    The compute dtype for `device` under the precision policy (see the module docstring).

    Args:
        dtype (`str` or `torch.dtype`, *optional*, defaults to `"auto"`):
            `"auto"` or `None`: the policy's choice. Anything else is the user's choice and wins (a warning is logged
            when it is bfloat16 on a CPU where bf16 is slow).
        device (`str` or `torch.device`, *optional*):
            Where the model will run; defaults to [`default_device`].

    Returns:
        `torch.dtype`
    """
    device_type = _device_type(device)
    if dtype is None or dtype == AUTO:
        chosen = _policy_dtype(device_type)
        capability = cpu_capability() if device_type == "cpu" else None
        log_once("Precision policy: %s on %s (%s).", str(chosen).removeprefix("torch."), device_type,
                  _describe(capability) if capability is not None else "accelerator")
        return chosen
    chosen = parse_dtype(dtype)
    if chosen == torch.bfloat16 and device_type == "cpu" and not cpu_capability().bf16_fast:
        log_once("bfloat16 was asked for on a CPU where it is slow (%s): float32 is usually several times faster "
                  "here (pass dtype='auto').", _describe(cpu_capability()), level=logging.WARNING)
    return chosen


def _describe(capability: CPUCapability) -> str:
    if not capability.bf16_native:
        forced = f", per {CPU_BF16_ENV}" if capability.source == "environment" else ""
        return f"{capability.model_name}: no native bf16{forced}"
    if capability.bf16_speedup is None:
        return f"{capability.model_name}: native bf16 per {CPU_BF16_ENV}"
    return f"{capability.model_name}: native bf16, bf16 matmul {capability.bf16_speedup}x float32"


def precision_report(
    dtype: torch.dtype | None = None, device: str | torch.device | None = None, mixed_precision: str | None = None
) -> dict[str, Any]:
    """What a run records about its precision: the weights' dtype (default: the policy's), the device, mixed
    precision if any, and on a CPU its bf16 capability and thread count."""
    device_type = _device_type(device)
    chosen = dtype if dtype is not None else resolve_dtype(AUTO, device_type)
    report: dict[str, Any] = {"device": device_type, "dtype": str(chosen).removeprefix("torch.")}
    if mixed_precision is not None:
        report["mixed_precision"] = mixed_precision
    if device_type == "cpu":
        report.update({f"cpu_{k}": v for k, v in asdict(cpu_capability()).items()}, num_threads=torch.get_num_threads())
    elif device_type == "cuda":
        report["gpu"] = torch.cuda.get_device_name()
    return report
