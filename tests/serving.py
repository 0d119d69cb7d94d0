"""Start `elical-hf serve` as a real process on a free local port, for tests that drive it over HTTP.

[`ServerProcess`] runs `python -m elical_hf.cli serve ...` (offline, one OpenMP thread, float32 unless the test says
otherwise), waits until `GET /health` answers, and stops the process (SIGTERM, then SIGKILL) when the test is done;
its output is kept and shown when start-up fails. [`gated_model`] saves a tiny confidence model with a decision
threshold between the confidences of the given questions, so that some are answered and some abstained.
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
import urllib.request

import torch


STARTUP_SECONDS = 180


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """`elical-hf serve MODEL *args` on 127.0.0.1:<free port>; `url` is its `/v1` base URL."""

    def __init__(self, model: str, *args: str, cwd: str | None = None, env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = tempfile.TemporaryFile(mode="w+")
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ELICAL_HF_CPU_BF16": "0",
                       "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                      os.environ.get("PYTHONPATH", "")]), **(env or {})}
        command = [sys.executable, "-m", "elical_hf.cli", "serve", model, "--port", str(self.port),
                   "--log_level", "warning", *args]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd, env=environment)
        self._wait_ready()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"elical-hf serve exited with {self.process.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(self.url.removesuffix("/v1") + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"elical-hf serve did not answer within {STARTUP_SECONDS} s:\n{self.output()}")

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
        self.log.close()

    def post(self, path: str, body: object, timeout: float = 120) -> tuple[int, dict, dict]:
        """`POST url+path` with a JSON body (or raw bytes): status, decoded JSON body, headers."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        return self._open(request, timeout)

    def get(self, path: str, timeout: float = 30) -> tuple[int, dict, dict]:
        return self._open(urllib.request.Request(self.url + path), timeout)

    @staticmethod
    def _open(request: urllib.request.Request, timeout: float) -> tuple[int, dict, dict]:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read()), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read()), dict(error.headers)


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
