"""The `.pth` start-up hook can never fail, or print into, a Python process (docs/architecture.md has its cost)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from elical_hf.metrics import registration


HAS_HOOK = "any(getattr(f, 'elical_hf_evaluate_hook', False) for f in sys.meta_path)"

BROKEN = {
    "system_exit": "raise SystemExit(3)\n",
    "keyboard_interrupt": "raise KeyboardInterrupt\n",
    "syntax_error": "def (:\n",
    "not_callable": "find_evaluate_spec = None\n",
    "raises": "def find_evaluate_spec(*args):\n    raise MemoryError\n",
    "missing": "",
}


def _start(tmp_path, registration_source: str | None, script: str, **env_vars: str) -> subprocess.CompletedProcess:
    """A fresh interpreter that processes the `.pth` line the way site.py does at start-up, from a site folder that
    also holds a stand-in `evaluate` package and an `elical_hf` whose `metrics/registration.py` is
    `registration_source` (`None`: a copy of the real metrics folder). No other elical_hf or evaluate is importable."""
    site_dir = tmp_path / "site"
    metrics = site_dir / "elical_hf" / "metrics"
    if registration_source is None:
        shutil.copytree(os.path.dirname(registration.__file__), metrics)
    else:
        metrics.mkdir(parents=True)
        (metrics / "registration.py").write_text(registration_source)
    (site_dir / "elical_hf" / "__init__.py").write_text("raise SystemExit('the package must not be imported')\n")
    (site_dir / "evaluate").mkdir()
    (site_dir / "evaluate" / "__init__.py").write_text("STAND_IN = 1\n")
    (site_dir / registration.PTH_FILENAME).write_text(registration.pth_content())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", registration.DISABLE_ENV)}
    env.update(env_vars)
    code = f"import site, sys; site.addsitedir({str(site_dir)!r}); " + script
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)


def test_start_up_reads_nothing_of_the_package(tmp_path):
    proc = _start(tmp_path, BROKEN["system_exit"], f"print('alive', {HAS_HOOK}, 'elical_hf' in sys.modules)")
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "alive True False", "")


def test_import_evaluate_fills_the_cache(tmp_path):
    modules = tmp_path / "modules"
    proc = _start(tmp_path, None, f"import evaluate; print('alive', evaluate.STAND_IN, {HAS_HOOK})",
                  HF_MODULES_CACHE=str(modules))
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "alive 1 False", "")  # one shot: hook gone
    for name in registration.METRIC_MODULES:  # assembled from the package's files: the script and the shared ones
        (cached,) = (modules / "evaluate_modules" / "metrics" / f"evaluate-metric--{name}").glob(f"*/{name}.py")
        for target, source in registration.module_sources(name).items():
            assert (cached.parent / target).read_bytes() == open(source, "rb").read()


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_import_evaluate_survives_a_broken_registration_file(tmp_path, name):
    proc = _start(tmp_path, BROKEN[name], f"import evaluate; print('alive', evaluate.STAND_IN, {HAS_HOOK})",
                  HF_MODULES_CACHE=str(tmp_path / "modules"))
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "alive 1 False", "")
    assert not (tmp_path / "modules").exists()


def test_import_evaluate_survives_an_unwritable_cache(tmp_path):
    """When the module cache cannot be written, `import evaluate` still works; the hook says why it did nothing."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    script = textwrap.dedent(f"""
        import sys
        sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "elical_hf_evaluate_hook", False)]
        exec({registration.pth_content()!r})
        assert {HAS_HOOK}
        import evaluate
        print("imported", {HAS_HOOK})
    """)
    env = {k: v for k, v in os.environ.items() if k != registration.DISABLE_ENV}
    env.update(HF_MODULES_CACHE=str(blocker / "modules"), HF_EVALUATE_OFFLINE="1", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imported False"  # the one-shot hook ran, and removed itself
    assert "could not copy its evaluate metric modules" in proc.stderr


def test_finder_errors_fall_back_to_the_normal_import(monkeypatch):
    class Broken:
        def find_spec(self, fullname, path=None, target=None):
            raise RuntimeError("a finder that fails")

    monkeypatch.delenv(registration.DISABLE_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "evaluate", raising=False)  # as before `import evaluate` (put back after)
    monkeypatch.setattr(sys, "meta_path", [Broken()])
    registration.install_import_hook()
    (hook,) = [f for f in sys.meta_path if getattr(f, "elical_hf_evaluate_hook", False)]
    assert hook.find_spec("json") is None  # not evaluate: not ours to look at
    assert hook.find_spec("evaluate") is None  # the error is not the hook's to raise: the import system goes on
    assert not any(getattr(f, "elical_hf_evaluate_hook", False) for f in sys.meta_path)
