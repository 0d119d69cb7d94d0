"""`make test`'s scheduler (tests/scheduling.py): the tests of a group run on one worker, in their order, the rest
are handed out alone; checked on a throwaway suite run under pytest-xdist, as `make test` runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import tests.scheduling


def test_a_named_group_runs_on_one_worker_and_the_other_tests_on_both(tmp_path: Path):
    (tmp_path / "scheduling.py").write_text(Path(tests.scheduling.__file__).read_text(encoding="utf-8"))
    (tmp_path / "conftest.py").write_text(textwrap.dedent('''
        import scheduling
        from scheduling import pytest_xdist_make_scheduler  # noqa: F401

        scheduling.GROUPS = {"shared": ("test_a.py::", "test_b.py::")}
    '''))
    for name in ("a", "b", "c"):
        tests_ = "".join(f"def test_{name}{i}():\n    time.sleep(0.2)\n\n" for i in range(4))
        (tmp_path / f"test_{name}.py").write_text(f"import time\n\n\n{tests_}")
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                           "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
    assert done.returncode == 0, done.stdout[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED (test_\w)\.py::", done.stdout, re.M)
    assert len(ran) == 12
    assert len({worker for worker, module in ran if module in ("test_a", "test_b")}) == 1  # the group: one worker
    assert len({worker for worker, _ in ran}) == 2  # the other tests: the other worker too
