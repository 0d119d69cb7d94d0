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
