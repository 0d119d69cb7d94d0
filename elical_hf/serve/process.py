"""Run `elical-hf serve` in a child process and wait until it answers: for tests, benchmarks and notebooks.

```python
>>> from elical_hf.serve.process import ServerProcess
>>> with ServerProcess("my-confidence-model", "--threshold", "0.6") as server:  # doctest: +SKIP
...     status, body, headers = server.post("/chat/completions", {"messages": [{"role": "user", "content": "..."}]})
```
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class ServerProcess:
    """
    `python -m elical_hf.cli serve MODEL *args --port <free port>` on 127.0.0.1, started and waited for (until
    `GET /health` answers); stopped by [`stop`] (SIGTERM, then SIGKILL) or on leaving a `with` block. Its output is
    kept ([`output`]) and raised with when it fails to start.

    Args:
        model (`str`): What `elical-hf serve` serves.
        args (`str`): More options of `elical-hf serve`.
        cwd (`str`, *optional*): Its working directory (where `--retriever module:function` is imported from).
        env (`dict[str, str]`, *optional*): Variables set on top of this process's environment.
        startup_timeout (`float`, *optional*, defaults to 300): Seconds to wait for it to answer.
    """

    def __init__(self, model: str, *args: str, cwd: str | None = None, env: dict[str, str] | None = None,
                 startup_timeout: float = 300) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = tempfile.TemporaryFile(mode="w+")
        command = [sys.executable, "-m", "elical_hf.cli", "serve", model, "--port", str(self.port), *args]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd,
                                        env={**os.environ, **(env or {})})
        self._wait_ready(startup_timeout)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def output(self) -> str:
        """Everything the server printed so far."""
        self.log.seek(0)
        return self.log.read()

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.output()
                self.log.close()
                raise RuntimeError(f"elical-hf serve exited with {self.process.returncode}:\n{output}")
            try:
                with urllib.request.urlopen(self.url.removesuffix("/v1") + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        output = self.output()
        self.stop()
        raise RuntimeError(f"elical-hf serve did not answer within {timeout:g} s:\n{output}")

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self.log.closed:
            self.log.close()

    def post(self, path: str, body: Any, timeout: float = 300) -> tuple[int, dict, dict]:
        """`POST <url><path>` with `body` as JSON (or raw `bytes`): the status, the decoded JSON reply, its headers."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        return self._open(request, timeout)

    def get(self, path: str, timeout: float = 30) -> tuple[int, dict, dict]:
        """`GET <url><path>`: the status, the decoded JSON reply, its headers."""
        return self._open(urllib.request.Request(self.url + path), timeout)

    @staticmethod
    def _open(request: urllib.request.Request, timeout: float) -> tuple[int, dict, dict]:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read()), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read()), dict(error.headers)
