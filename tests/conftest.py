"""Shared fixtures: tiny random backbones saved to disk like a Hub checkpoint, and the offline switches."""

from __future__ import annotations

import os

import pytest


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _name in ("COUNT", "ID", "MIN", "STEP"):  # a Slurm array job's task would make `elical-hf judge` judge a share
    os.environ.pop(f"SLURM_ARRAY_TASK_{_name}", None)
# Under pytest-xdist (`make test` runs one worker per core) each worker, and every process it starts, gets its share of
# the cores as torch / OpenMP threads: two processes each running all cores' threads slow each other far more than 2x.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    _threads = max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(_threads))

from tests.precision_record import (  # noqa: E402,F401  (hooks: which tests the other precision branch reruns)
    pytest_configure, pytest_fixture_setup, pytest_runtest_protocol, pytest_sessionfinish, pytest_testnodedown,
    pytest_unconfigure,
)
from tests.precision_record import pytest_collection_modifyitems as keep_recorded_tests  # noqa: E402
from tests.scheduling import pytest_xdist_make_scheduler, slow_first  # noqa: E402,F401  (the vLLM tests on one worker)
from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer  # noqa: E402


def save_tiny_base(folder, arch: str = "llama", seed: int = 0, **overrides) -> str:
    """Save a tiny random causal LM and its tokenizer into `folder`, as a Hub checkpoint would look (`"qwen3"`: with
    Qwen3's chat template and reasoning tags, `tests.tiny.QWEN3_CHAT_TEMPLATE`)."""
    tokenizer = make_tiny_tokenizer(reasoning=arch == "qwen3")
    model = make_tiny_causal_lm(tokenizer, arch=arch, seed=seed, **overrides)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def pytest_collection_modifyitems(config, items):
    keep_recorded_tests(config, items)
    slow_first(items)


@pytest.fixture
def vllm_generation():
    """A real vLLM generate runner on the embedded SmolLM2 ([`tests.vllm_server.generation_server`]): one server for
    consecutive tests that ask for it, stopped after the last of them ([`pytest_runtest_teardown`])."""
    from tests.vllm_server import generation_server

    return generation_server()


def pytest_runtest_teardown(item, nextitem):
    if "vllm_generation" in item.fixturenames and (nextitem is None or "vllm_generation" not in nextitem.fixturenames):
        from tests.vllm_server import stop_generation_server

        stop_generation_server()


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> str:
    return save_tiny_base(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory) -> str:
    return save_tiny_base(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2")


@pytest.fixture(params=["llama", "qwen2"])
def tiny_base(request, tiny_llama, tiny_qwen2) -> str:
    return {"llama": tiny_llama, "qwen2": tiny_qwen2}[request.param]


def _force_cpu_policy(monkeypatch, native: bool) -> None:
    from elical_hf.settings import precision

    monkeypatch.setenv(precision.CPU_BF16_ENV, "1" if native else "0")
    precision.cpu_capability.cache_clear()
    precision.log_once.cache_clear()


@pytest.fixture(autouse=True)
def _pinned_precision(request, monkeypatch):
    """`@pytest.mark.float32` / `@pytest.mark.bfloat16` pin the precision policy for one test (and the processes it
    starts, through `ELICAL_HF_CPU_BF16`), whatever the machine's own choice or the suite's environment.

    Equivalence tests (padding sides, shared prefix vs plain pass, convert vs reference, token-for-token answers)
    assert float32-exact agreement: they test the logic, so they run in float32. Their bf16 twins, with tolerances
    derived from bf16, are marked `bfloat16` (emulated, slower, on CPUs without native bf16; tiny models only)."""
    marks = {m.name for m in request.node.iter_markers() if m.name in ("float32", "bfloat16")}
    if len(marks) > 1:
        raise pytest.UsageError(f"{request.node.nodeid} is marked both float32 and bfloat16")
    if not marks:
        yield
        return
    from elical_hf.settings import precision

    _force_cpu_policy(monkeypatch, native=marks == {"bfloat16"})
    yield
    monkeypatch.undo()
    precision.cpu_capability.cache_clear()
    precision.log_once.cache_clear()


@pytest.fixture
def cpu_bf16(monkeypatch):
    """Set the precision policy's view of the CPU: `cpu_bf16(True)` (native, fast bf16) or `cpu_bf16(False)`."""
    from elical_hf.settings import precision

    def force(native: bool) -> None:
        _force_cpu_policy(monkeypatch, native)

    yield force
    monkeypatch.undo()
    precision.cpu_capability.cache_clear()
    precision.log_once.cache_clear()


@pytest.fixture
def raise_user_errors(monkeypatch):
    """`elical_hf.cli.main` re-raises user errors (instead of printing one line and returning 2), so a test can match
    the exception; the one-line form is tested in `tests/test_reliability_cli.py`."""
    from elical_hf.cli import TRACEBACK_ENV

    monkeypatch.setenv(TRACEBACK_ENV, "1")
