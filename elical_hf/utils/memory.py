"""Giving freed CPU memory back to the operating system.

glibc's `malloc` keeps the memory of freed tensors in its heap for reuse: after the demo's live sampling or its
live stage 1 the process stays hundreds of MB above what it still uses. `malloc_trim(0)` returns the free pages
(~10 ms); the demo calls [`release_memory`] between its steps, so each step starts from what the process really
holds. It does not lower a step's own peak: trimming after every training micro-batch left the live stage 1's
peak where it was and cost up to ~10% of its time (`benchmarks/training_memory.py`, `docs/benchmarks.md`), so the
Trainer does not. Elsewhere (macOS, Windows, musl, an allocator without the symbol) it only collects garbage.

What trimming cannot return is memory still mapped into the heap between live blocks. glibc raises its mmap threshold
each time a large mmapped block is freed (up to 32 MiB), so after the first steps most tensors are carved from the
heap, where the freed ones fragment it; bfloat16 halves every tensor, so more of them fall under the raised threshold
(the demo's bf16 runs climbed in small steps that `malloc_trim` did not give back). [`limit_heap_growth`] pins the
threshold at 1 MiB (every larger tensor is its own mapping, returned when freed) and the arenas at 2, as the glibc
environment variables `MALLOC_MMAP_THRESHOLD_` / `MALLOC_ARENA_MAX` would, from inside the process: the demo calls
it first (`docs/benchmarks.md` section 5 has the measurement).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os


__all__ = ["limit_heap_growth", "release_memory"]


M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8
"""glibc's `mallopt` parameters (malloc.h)."""


@functools.lru_cache(maxsize=1)
def _libc():
    """The C library, or `None` where it cannot be loaded."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def limit_heap_growth(mmap_threshold: int = 1 << 20, arenas: int = 2) -> bool:
    """Keep glibc's heap from holding freed tensors: blocks of `mmap_threshold` bytes or more are mapped on their own
    (and unmapped when freed) instead of the dynamic threshold glibc raises up to 32 MiB, and at most `arenas` heaps
    (glibc's default is 8 per core). Applies to the whole process from the call on; an environment that already sets
    `MALLOC_MMAP_THRESHOLD_` or `MALLOC_ARENA_MAX` keeps its own values.

    Returns:
        `bool`: whether both settings took effect (glibc only; elsewhere nothing changes).
    """
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    done = True
    for variable, parameter, value in (("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, mmap_threshold),
                                       ("MALLOC_ARENA_MAX", M_ARENA_MAX, arenas)):
        if variable not in os.environ:
            done = bool(mallopt(parameter, value)) and done
    return done


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's `malloc_trim`, or `None` where the C library has none."""
    return getattr(_libc(), "malloc_trim", None)


def release_memory(collect: bool = True) -> bool:
    """Collect garbage (unless `collect=False`) and return the C heap's free pages to the operating system.

    Returns:
        `bool`: whether the heap was trimmed (glibc only).
    """
    if collect:
        gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
