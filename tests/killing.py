"""Kill -9 a child process once it has written a given file: how the resume tests interrupt a run mid-way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def kill_once_written(script: str, args: list[str], path: str | os.PathLike, timeout: float = 240) -> None:
    """Run `script` (Python source, dedented) with `args` in a child process that imports this checkout offline, and
    SIGKILL it as soon as `path` exists; assert that it got there and was killed (not finished)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                               stdout=subprocess.DEVNULL)
    path = Path(path)
    deadline = time.monotonic() + timeout  # generous: CI machines can be loaded
    try:
        while not path.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.exists(), f"the child never wrote {path}"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL
