"""Giving freed CPU memory back to the operating system.

glibc's `malloc` keeps the memory of freed tensors in its heap for reuse: after the demo's live sampling or its
live stage 1 the process stays hundreds of MB above what it still uses. `malloc_trim(0)` returns the free pages
(~10 ms); the demo calls [`release_memory`] between its steps, so each step starts from what the process really
holds. It does not lower a step's own peak: trimming after every training micro-batch left the live stage 1's
peak where it was and cost up to ~10% of its time (`benchmarks/training_memory.py`, `docs/benchmarks.md`), so the
Trainer does not. Elsewhere (macOS, Windows, musl, an allocator without the symbol) it only collects garbage.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


__all__ = ["release_memory"]


@functools.lru_cache(maxsize=1)
def _libc():
    """The C library, or `None` where it cannot be loaded."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


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
