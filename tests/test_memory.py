"""Freed CPU memory goes back to the OS: `elical_hf.utils.memory.release_memory` (the demo calls it between its steps)."""

from __future__ import annotations

import sys

import pytest
import torch

from elical_hf.utils import memory
from elical_hf.utils.memory import release_memory


def rss_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as handle:
        return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc are Linux's")
def test_freed_heap_goes_back_to_the_os():
    if memory._malloc_trim() is None:
        pytest.skip("this C library has no malloc_trim")
    big = torch.ones(1024 * 1024)  # freeing a 4 MiB mmapped block raises glibc's mmap threshold past 256 KiB,
    del big  # so the blocks below land in the heap (as activations do after the first steps)
    blocks = [torch.ones(64 * 1024) for _ in range(4000)]  # 4000 x 256 KiB = ~1 GiB
    del blocks[::2]  # every other block freed: a fragmented heap with ~500 MiB free
    keep = blocks[-1]
    blocks = None
    before = rss_mib()
    assert release_memory() is True
    assert rss_mib() < before - 200  # the free pages left the process
    assert keep.sum() == 64 * 1024


def test_without_malloc_trim_only_garbage_is_collected(monkeypatch):
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert release_memory() is False



FRAGMENT = """
import sys, torch
from elical_hf.utils.memory import limit_heap_growth
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:"))
if sys.argv[1] == "limited":
    assert limit_heap_growth() is True
big = torch.ones(2 * 1024 * 1024)  # an 8 MiB mapping freed: glibc raises its mmap threshold past 2 MiB
del big
blocks = [torch.ones(512 * 1024) for _ in range(300)]  # 300 x 2 MiB
before = rss()
del blocks[::2]  # every other block freed, no malloc_trim
print(before - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc are Linux's")
def test_limit_heap_growth_returns_freed_tensors_without_a_trim():
    import os
    import subprocess

    if memory._libc() is None or not hasattr(memory._libc(), "mallopt"):
        pytest.skip("this C library has no mallopt")
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX")}
    freed = {mode: float(subprocess.run([sys.executable, "-c", FRAGMENT, mode], capture_output=True, text=True,
                                        check=True, env=env).stdout) for mode in ("default", "limited")}
    assert freed["default"] < 100  # the freed blocks stay in the fragmented heap
    assert freed["limited"] > 250  # each was its own mapping: ~300 MiB left the process at once


def test_limit_heap_growth_keeps_the_environment_s_own_settings(monkeypatch):
    calls = []

    class LibC:
        def mallopt(self, parameter, value):
            calls.append((parameter, value))
            return 1

    monkeypatch.setattr(memory, "_libc", lambda: LibC())
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert memory.limit_heap_growth() is True
    assert calls == [(memory.M_MMAP_THRESHOLD, 1 << 20)]
    monkeypatch.setattr(memory, "_libc", lambda: None)
    assert memory.limit_heap_growth() is False
