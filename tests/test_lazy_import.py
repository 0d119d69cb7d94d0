"""The package imports lazily: `elical-hf --help` and `elical-hf <command> --help`, for every command, import no torch,
while every public name still resolves."""

from __future__ import annotations

import subprocess
import sys

import pytest

import elical_hf
import elical_hf.signals
from elical_hf.cli import COMMANDS


def fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


HELP_PROBE = """import sys
from elical_hf.cli import main
try:
    code = main(%r)
except SystemExit as exit:
    code = exit.code
print(code, 'torch' in sys.modules, 'transformers.training_args' in sys.modules)"""
"""Run `elical-hf ARGV` in this interpreter: its exit code, and whether torch (and `TrainingArguments`) got imported."""


@pytest.mark.parametrize("argv", [[], *([command] for command in sorted(COMMANDS))])
def test_help_imports_no_torch(argv):
    """Each in a fresh interpreter, so that nothing imported before hides an import of torch."""
    assert fresh(HELP_PROBE % ([*argv, "--help"],)) == "0 False False"


def test_the_probe_sees_torch_imported():
    """The check above can fail: a run that does import torch (train's full option list) is seen as one."""
    assert fresh(HELP_PROBE % (["train", "--help_all"],)) == "0 True True"


def test_importing_the_package_imports_no_torch_and_every_public_name_resolves():
    assert fresh("import sys, elical_hf, elical_hf.signals; print('torch' in sys.modules)") == "False"
    for package in (elical_hf, elical_hf.signals):
        for name in package.__all__:
            assert getattr(package, name) is not None, name
        assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        elical_hf.nonsense  # noqa: B018
    assert elical_hf.__version__ == __import__("elical_hf.version").version.__version__
