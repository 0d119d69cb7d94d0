"""What this CPU is, read without importing torch: `/proc/cpuinfo`'s fields and the `ELICAL_HF_CPU_BF16` override of
the precision policy ([`~elical_hf.settings.precision`] decides with them; the demo reads them before torch loads)."""

from __future__ import annotations

import os


__all__ = ["CPU_BF16_ENV", "cpu_flags", "cpuinfo_field", "forced_cpu_bf16"]

CPU_BF16_ENV = "ELICAL_HF_CPU_BF16"
"""Environment variable overriding the CPU bf16 check: `1` (native and fast) or `0` (not)."""


def cpuinfo_field(name: str) -> str | None:
    """The value of the first `/proc/cpuinfo` line named `name` (case-insensitive), or `None` where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith(name.lower()) and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> set[str]:
    """This CPU's feature flags (`avx2`, `amx_bf16`, ...; empty where `/proc/cpuinfo` has none)."""
    return set((cpuinfo_field("flags") or "").split())


def forced_cpu_bf16() -> bool | None:
    """`ELICAL_HF_CPU_BF16` read: `True` (`1`, `true`, `yes`: treat bf16 as native and fast), `False` (`0`, `false`,
    `no`), `None` when unset; a `ValueError` for anything else."""
    forced = os.environ.get(CPU_BF16_ENV, "").strip().lower()
    if not forced:
        return None
    if forced not in ("0", "1", "true", "false", "yes", "no"):
        raise ValueError(f"{CPU_BF16_ENV} must be 1 or 0, got {forced!r}.")
    return forced in ("1", "true", "yes")
