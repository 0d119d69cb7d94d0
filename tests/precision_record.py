"""Which tests depend on the precision policy, so that the second precision branch reruns only those.

`ELICAL_HF_CPU_BF16` acts through one function, [`elical_hf.settings.precision.cpu_capability`]. With
`ELICAL_HF_PRECISION_RECORD=<file>`, the suite notes every test that calls it (in its own body, in the set-up of a
fixture it uses, such as a model loaded once per session, or in a process it starts, which says so in the trace file
of `ELICAL_HF_PRECISION_TRACE`), and writes their node ids to `<file>` at the end. With
`ELICAL_HF_PRECISION_ONLY=<file>`, only the tests listed there run; the others are deselected (and counted in pytest's
summary). Tests marked `float32` or `bfloat16` pin the
policy themselves and are never listed: both branches run them the same way.

`make test` records and `make test-other-precision` reruns the recorded tests under the other branch (all not-slow
tests when there is no record, or when a file under `elical_hf/` or `tests/` is newer than it). Under `pytest-xdist`
each worker notes its own tests and hands them to the controller, which writes the one record.
"""

from __future__ import annotations

import functools
import os

import pytest


RECORD_ENV = "ELICAL_HF_PRECISION_RECORD"
ONLY_ENV = "ELICAL_HF_PRECISION_ONLY"
PINNED_MARKS = ("float32", "bfloat16")

_state = {"consulted": False}
_dependent_fixtures: set[str] = set()
_dependent_tests: list[str] = []
WORKER_OUTPUT_KEY = "elical_precision_dependent_tests"


def _install_probes() -> None:
    """Wrap the policy's one entry point, so that a call in this process sets the flag, and have every process this
    one starts note its own decision in a trace file ([`elical_hf.settings.precision.TRACE_ENV`], inherited through the
    environment; a process started with an environment of its own inherits neither it nor the branch variable)."""
    import tempfile

    from elical_hf.settings import precision

    original = precision.cpu_capability
    if getattr(original, "_recorded", False):
        return

    @functools.wraps(original)
    def cpu_capability():
        _state["consulted"] = True
        return original()

    cpu_capability.cache_clear = original.cache_clear
    cpu_capability._recorded = True
    precision.cpu_capability = cpu_capability  # precision.py calls it by its global name
    handle, path = tempfile.mkstemp(prefix="elical-precision-trace-")
    os.close(handle)
    os.environ[precision.TRACE_ENV] = _state["trace"] = path


def _trace_size() -> int:
    from elical_hf.settings.precision import TRACE_ENV

    path = os.environ.get(TRACE_ENV)
    return os.path.getsize(path) if path and os.path.exists(path) else 0


def pytest_configure(config) -> None:
    if os.environ.get(RECORD_ENV):
        _install_probes()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if not os.environ.get(RECORD_ENV):
        yield
        return
    before, _state["consulted"] = _state["consulted"], False
    size = _trace_size()
    yield
    consulted = _state["consulted"] or _trace_size() > size
    if consulted:
        _dependent_fixtures.add(fixturedef.argname)
    _state["consulted"] = consulted or before  # the test that set the fixture up reached the policy too


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _state["consulted"] = False
    recording = bool(os.environ.get(RECORD_ENV))
    size = _trace_size() if recording else 0
    yield
    if not recording or any(item.get_closest_marker(name) for name in PINNED_MARKS):
        return
    if _state["consulted"] or _trace_size() > size or _dependent_fixtures.intersection(item.fixturenames):
        _dependent_tests.append(item.nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist, in the controller: a worker is done; take the tests it found to depend on the policy (a worker
    that crashed hands none over, and then no record is written: the other branch reruns every not-slow test)."""
    found = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
    if error is not None or found is None:
        _state["incomplete"] = True
    _dependent_tests.extend(found or [])


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get(RECORD_ENV)
    if not path or os.environ.get(ONLY_ENV):
        return
    tests = list(dict.fromkeys(_dependent_tests))
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: the controller writes the record
        session.config.workeroutput[WORKER_OUTPUT_KEY] = tests
        return
    if _state.get("incomplete"):
        if os.path.exists(path):
            os.remove(path)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{nodeid}\n" for nodeid in sorted(tests))


def pytest_unconfigure(config) -> None:
    """Each process removes the trace file it made (a worker's, the controller's)."""
    path = _state.pop("trace", None)
    if path and os.path.exists(path):
        os.remove(path)


def pytest_collection_modifyitems(config, items) -> None:
    path = os.environ.get(ONLY_ENV)
    if not path:
        return
    with open(path, encoding="utf-8") as handle:
        wanted = {line.strip() for line in handle if line.strip()}
    keep = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
