"""What every benchmark script prints first and measures with: the machine, medians, peak memory, a table.

Run benchmarks one at a time on a quiet machine: several torch jobs on the same cores oversubscribe OpenMP and every
figure becomes noise.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags() -> list[str]:
    """The bf16-relevant flags of this CPU (from `/proc/cpuinfo`)."""
    from elical_hf.utils.cpu import cpu_flags as all_flags

    flags = all_flags()
    return [flag for flag in CPU_FLAGS if flag in flags]


def machine_report() -> dict[str, Any]:
    """CPU model and flags, the precision policy's decision, threads, and measured fp32 / bf16 matmul GFLOP/s."""
    import torch

    from elical_hf.settings.precision import cpu_capability, matmul_gflops, resolve_dtype

    capability = cpu_capability()
    report = {
        "cpu": capability.model_name,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "flags": cpu_flags(),
        "bf16_native": capability.bf16_native,
        "policy_dtype": str(resolve_dtype("auto", "cpu")).removeprefix("torch."),
        "fp32_gflops": round(matmul_gflops(torch.float32, size=1024), 1),
        "bf16_gflops": round(matmul_gflops(torch.bfloat16, size=1024, repeats=3), 1),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        report["gpu"] = torch.cuda.get_device_name()
    for name in ("ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "ELICAL_HF_CPU_BF16"):
        if os.environ.get(name):
            report[name] = os.environ[name]
    return report


def print_machine() -> dict[str, Any]:
    report = machine_report()
    print("Machine: " + "; ".join(f"{key}={value}" for key, value in report.items()))
    return report


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `fn()` over `repeats` runs, after `warmup` untimed runs."""
    return interleaved_medians({"fn": fn}, repeats, warmup)["fn"]


def interleaved_medians(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1, budget_s: float | None = None
) -> dict[str, float]:
    """Median wall time of each `fns[name]()` over `repeats` rounds, the methods taking turns within each round (after
    `warmup` untimed rounds): a slow drift of the machine's speed then weighs on every method alike, which timing one
    method's repeats after another's does not. With `budget_s`, no round starts that would end (at the mean round's
    time) past `budget_s` seconds of timed rounds; the first round always runs."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    begin = time.perf_counter()
    for done in range(1, repeats + 1):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
        spent = time.perf_counter() - begin
        if budget_s is not None and spent * (done + 1) / done > budget_s:
            break
    return {name: statistics.median(values) for name, values in times.items()}


def peak_rss_mib(children: bool = False) -> float:
    """Peak resident memory of this process (or of its finished children) in MiB (Linux reports KiB)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_maxrss / 1024


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A Markdown table (pastes into `docs/benchmarks.md` as is)."""
    cells = [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|")
    for row in cells:
        print("| " + " | ".join(row) + " |")
