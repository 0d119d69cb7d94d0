"""Which tests depend on the precision policy, so that the second precision branch reruns only those.

`ELICAL_HF_CPU_BF16` acts through one function, [`elical_hf.precision.cpu_capability`]. With
`ELICAL_HF_PRECISION_RECORD=<file>`, the suite notes every test that calls it (in its own body, or in the set-up of a
fixture it uses, such as a model loaded once per session), or that starts a process (which may call it itself), and
writes their node ids to `<file>` at the end. With `ELICAL_HF_PRECISION_ONLY=<file>`, only the tests listed there
run; the others are deselected (and counted in pytest's summary). Tests marked `float32` or `bfloat16` pin the
policy themselves and are never listed: both branches run them the same way.

`make test` records and `make test-other-precision` reruns the recorded tests under the other branch (all not-slow
tests when there is no record, or when a file under `elical_hf/` or `tests/` is newer than it).
"""

from __future__ import annotations

import functools
import os
import subprocess

import pytest


RECORD_ENV = "ELICAL_HF_PRECISION_RECORD"
ONLY_ENV = "ELICAL_HF_PRECISION_ONLY"
PINNED_MARKS = ("float32", "bfloat16")

_state = {"consulted": False}
_dependent_fixtures: set[str] = set()
_dependent_tests: list[str] = []


def _consulted() -> None:
    _state["consulted"] = True


def _install_probes() -> None:
    """Wrap the policy's one entry point and the ways a test starts a process, so a call sets the flag."""
    from elical_hf import precision

    original = precision.cpu_capability
    if getattr(original, "_recorded", False):
        return

    @functools.wraps(original)
    def cpu_capability():
        _consulted()
        return original()

    cpu_capability.cache_clear = original.cache_clear
    cpu_capability._recorded = True
    precision.cpu_capability = cpu_capability  # precision.py calls it by its global name

    popen_init = subprocess.Popen.__init__

    @functools.wraps(popen_init)
    def init(self, *args, **kwargs):
        _consulted()
        popen_init(self, *args, **kwargs)

    subprocess.Popen.__init__ = init
    fork = os.fork

    @functools.wraps(fork)
    def forked():
        _consulted()
        return fork()

    os.fork = forked
    import multiprocessing.util as mp_util

    spawn = mp_util.spawnv_passfds

    @functools.wraps(spawn)
    def spawned(*args, **kwargs):
        _consulted()
        return spawn(*args, **kwargs)

    mp_util.spawnv_passfds = spawned


def pytest_configure(config) -> None:
    if os.environ.get(RECORD_ENV):
        _install_probes()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if not os.environ.get(RECORD_ENV):
        yield
        return
    before, _state["consulted"] = _state["consulted"], False
    yield
    if _state["consulted"]:
        _dependent_fixtures.add(fixturedef.argname)
    _state["consulted"] = _state["consulted"] or before


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _state["consulted"] = False
    yield
    if not os.environ.get(RECORD_ENV) or any(item.get_closest_marker(name) for name in PINNED_MARKS):
        return
    if _state["consulted"] or _dependent_fixtures.intersection(item.fixturenames):
        _dependent_tests.append(item.nodeid)


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get(RECORD_ENV)
    if path and not os.environ.get(ONLY_ENV):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(f"{nodeid}\n" for nodeid in dict.fromkeys(_dependent_tests))


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
