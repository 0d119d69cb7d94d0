"""Start `elical-hf serve` (or another OpenAI-compatible server) as a real process on a free local port, for tests
and benchmarks that drive it over HTTP.

[`ServerProcess`] starts one and waits until it answers; [`QuietServer`] is that with the tests' environment (offline,
one OpenMP thread, float32) and quiet logs; [`running`] serves an app on a thread of the test's own process.
[`gated_model`] saves a tiny confidence model with a decision threshold between the confidences of the given
questions, so that some are answered and some abstained.

```python
>>> from tests.serving import ServerProcess
>>> with ServerProcess("my-confidence-model", "--threshold", "0.6") as server:  # doctest: +SKIP
...     status, body, headers = server.post("/chat/completions", {"messages": [{"role": "user", "content": "..."}]})
```
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import torch


TEST_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ELICAL_HF_CPU_BF16": "0"}
"""The server processes of tests: offline, one OpenMP thread, float32 (as tests pinned to float32)."""


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
        command (`list[str]`, *optional*): Another server's command line instead of `elical-hf serve MODEL` (e.g.
            `python -m vllm.entrypoints.openai.api_server --model DIR`; `model` is then only its name in messages);
            `--port <free port>` is appended, and `/health` is waited for all the same.
    """

    def __init__(self, model: str, *args: str, cwd: str | None = None, env: dict[str, str] | None = None,
                 startup_timeout: float = 300, command: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = tempfile.TemporaryFile(mode="w+")
        self.name = "elical-hf serve" if command is None else os.path.basename(command[0]) + f" ({model})"
        self.group = command is not None  # another server's workers are stopped with it, as one process group
        if command is None:
            command = [sys.executable, "-m", "elical_hf.cli", "serve", model]
        self.process = subprocess.Popen([*command, "--port", str(self.port), *args], stdout=self.log,
                                        stderr=subprocess.STDOUT, cwd=cwd, env={**os.environ, **(env or {})},
                                        start_new_session=self.group)
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
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{output}")
            try:
                with urllib.request.urlopen(self.url.removesuffix("/v1") + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        output = self.output()
        self.stop()
        raise RuntimeError(f"{self.name} did not answer within {timeout:g} s:\n{output}")

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM (to another server's whole process group: its workers too), then SIGKILL after 30 s."""
        if self.alive:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        else:  # its workers may outlive it
            self._signal(signal.SIGKILL)
        if not self.log.closed:
            self.log.close()

    def _signal(self, number: int) -> None:
        try:
            if self.group:
                os.killpg(self.process.pid, number)
            elif self.alive:
                self.process.send_signal(number)
        except (ProcessLookupError, PermissionError):
            pass

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


@contextlib.contextmanager
def running(app):
    """`app` served by uvicorn on a thread of this process, on a free port of 127.0.0.1; yields the port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()


class QuietServer(ServerProcess):
    """[`ServerProcess`] of `elical-hf serve` with the tests' environment ([`TEST_ENV`]) and quiet logs."""

    def __init__(self, model: str, *args: str, cwd: str | None = None, env: dict[str, str] | None = None):
        super().__init__(model, "--log_level", "warning", *args, cwd=cwd, env={**TEST_ENV, **(env or {})})


def cut(confidences: list[float], k: int) -> float:
    """A threshold that lets exactly the `k` highest of `confidences` through (halfway to the next one)."""
    ranked = sorted(confidences, reverse=True)
    return (ranked[k - 1] + ranked[k]) / 2


def gated_model(base: str, folder, questions: list[str], answered: int, seed: int = 0) -> list[float]:
    """Save into `folder` a float32 confidence model on `base` (LoRA and head moved off their init) whose decision
    threshold lets exactly the `answered` most confident of `questions` through. Returns their confidences."""
    from elical_hf import AutoModelForConfidence

    model = AutoModelForConfidence.from_pretrained(base, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad or "lora_" in name:
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    confidences = model.confidence(questions)
    ranked = sorted(confidences, reverse=True)
    assert min(a - b for a, b in zip(ranked, ranked[1:])) > 1e-4, "confidences too close to set a threshold between"
    model.confidence_config.decision_threshold = cut(confidences, answered)
    model.save_pretrained(folder)
    return confidences
