"""The package imports lazily: `elical-hf --help` (and the help of commands that need no model) imports no torch,
while every public name still resolves."""

from __future__ import annotations

import subprocess
import sys

import pytest

import elical_hf
import elical_hf.signals


def fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("argv", [[], ["diagnose"], ["judge"], ["demo"], ["baselines"], ["push"]])
def test_help_imports_no_torch(argv):
    code = ("import sys\nfrom elical_hf.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)") % ([*argv, "--help"],)
    assert fresh(code) == "False"


def test_importing_the_package_imports_no_torch_and_every_public_name_resolves():
    assert fresh("import sys, elical_hf, elical_hf.signals; print('torch' in sys.modules)") == "False"
    for package in (elical_hf, elical_hf.signals):
        for name in package.__all__:
            assert getattr(package, name) is not None, name
        assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        elical_hf.nonsense  # noqa: B018
    assert elical_hf.__version__ == __import__("elical_hf.version").version.__version__
