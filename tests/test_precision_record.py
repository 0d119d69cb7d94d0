"""How the suite runs itself: the precision record (`tests/precision_record.py`) lists exactly the tests that reach
the precision policy, in one process and under pytest-xdist, and the second branch's run keeps only those; xdist
workers share the cores instead of each running every core's threads (`tests/conftest.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
CONFTEST = """
from tests.precision_record import (  # noqa: F401
    pytest_collection_modifyitems, pytest_configure, pytest_fixture_setup, pytest_runtest_protocol,
    pytest_sessionfinish, pytest_testnodedown,
)
import pytest


def pytest_configure(config):  # noqa: F811  (the record's own hook, then the marks the suite declares)
    from tests.precision_record import pytest_configure as record_configure
    record_configure(config)
    config.addinivalue_line("markers", "float32: pinned")


@pytest.fixture(scope="session")
def decided():
    from elical_hf.settings import precision
    return precision.cpu_capability()
"""
TESTS = """
import subprocess
import sys

import pytest


def test_in_body():
    from elical_hf.settings import precision
    precision.cpu_capability.cache_clear()
    precision.cpu_capability()


def test_in_a_child_process():
    code = "from elical_hf.settings import precision; precision.cpu_capability()"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_through_a_session_fixture(decided):
    pass


def test_second_user_of_the_fixture(decided):
    pass


@pytest.mark.float32
def test_pinned():
    from elical_hf.settings import precision
    precision.cpu_capability()


def test_never():
    assert 1 + 1 == 2


def test_never_either():
    import elical_hf  # importing the package decides nothing
"""
DEPENDENT = ["test_in_a_child_process", "test_in_body", "test_second_user_of_the_fixture",
             "test_through_a_session_fixture"]


def run_pytest(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env}
    for name in ("ELICAL_HF_PRECISION_RECORD", "ELICAL_HF_PRECISION_ONLY", "ELICAL_HF_PRECISION_TRACE",
                 "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS"):
        environment.pop(name, None)
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=folder,
                          env=environment, capture_output=True, text=True, timeout=600)


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST), encoding="utf-8")
    (tmp_path / "test_policy.py").write_text(textwrap.dedent(TESTS), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_the_record_lists_the_tests_that_reach_the_policy(project, workers):
    record = project / "build" / "record.txt"
    done = run_pytest(project, *workers, ELICAL_HF_PRECISION_RECORD=str(record))
    assert done.returncode == 0, done.stdout + done.stderr
    listed = record.read_text(encoding="utf-8").split()
    assert [nodeid.split("::")[1] for nodeid in listed] == DEPENDENT



def test_the_other_branch_runs_only_the_recorded_tests(project):
    record = project / "record.txt"
    record.write_text("test_policy.py::test_in_body\ntest_policy.py::test_through_a_session_fixture\n", encoding="utf-8")
    done = run_pytest(project, "-n", "2", "-rA", ELICAL_HF_PRECISION_ONLY=str(record))
    assert done.returncode == 0, done.stdout + done.stderr
    ran = sorted(line.split("::")[1] for line in done.stdout.splitlines() if line.startswith("PASSED "))
    assert ran == ["test_in_body", "test_through_a_session_fixture"] and "2 passed" in done.stdout


def test_a_crashed_worker_leaves_no_record(project):
    """A worker lost mid-run hands over nothing: no record at all (the second branch then reruns every test) rather
    than one that silently misses that worker's tests."""
    (project / "test_crash.py").write_text("import os\n\n\ndef test_crash():\n    os._exit(3)\n", encoding="utf-8")
    record = project / "record.txt"
    record.write_text("stale\n", encoding="utf-8")
    done = run_pytest(project, "-n", "2", ELICAL_HF_PRECISION_RECORD=str(record))
    assert done.returncode != 0
    assert not record.exists()


@pytest.mark.skipif(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) < 2, reason="runs under pytest-xdist only")
def test_xdist_workers_share_the_cores():
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    threads = int(os.environ["OMP_NUM_THREADS"])  # set by conftest unless the environment already had it
    assert threads <= share and torch.get_num_threads() == threads
