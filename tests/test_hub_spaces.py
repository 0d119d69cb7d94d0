"""Metric Spaces: an evaluate module published as a Gradio Space in one commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import RepoCard

from elical_hf import push_metric_space
from elical_hf.metrics.functional import alignment
from elical_hf.publishing.metric_modules import METRIC_MODULES, SHARED_FILES, module_sources
from tests.hub_server import hub  # noqa: F401 - the fixture


def fake_metric(folder: Path, name: str) -> Path:
    folder.mkdir()
    (folder / f"{name}.py").write_text("from .helpers import value\n")
    (folder / "helpers.py").write_text("value = 1\n")
    (folder / "app.py").write_text(f"load('{name}.py')\n")
    (folder / "requirements.txt").write_text("evaluate\n")
    (folder / "README.md").write_text("---\ntitle: Fake\ntags:\n- custom\n---\n# Metric Card for Fake\n")
    return folder


def test_space_from_a_metric_folder(hub, tmp_path):
    folder = fake_metric(tmp_path / "fake_metric", "fake_metric")
    info = push_metric_space("fake_metric", "alice/renamed_metric", folder=folder)
    space = hub.repo("alice/renamed_metric", "space")
    assert space.sdk == "gradio" and info.oid == hub.history("alice/renamed_metric", "space")[0].oid
    files = hub.files("alice/renamed_metric", "space")
    assert {"renamed_metric.py", "helpers.py", "app.py", "requirements.txt", "README.md"} <= set(files)
    assert "fake_metric.py" not in files and "renamed_metric.py" in files["app.py"].decode()
    card = RepoCard(files["README.md"].decode())
    assert card.data.sdk == "gradio" and card.data.app_file == "app.py"
    assert {"custom", "evaluate", "metric"} <= set(card.data.tags)


@pytest.mark.parametrize("name", METRIC_MODULES)
def test_the_library_metric_spaces(hub, name):
    """A library metric's Space is assembled from the single sources: its script and card, the shared files."""
    push_metric_space(name, f"elical/{name}")
    files = hub.files(f"elical/{name}", "space")
    assert set(files) - {".gitattributes"} == {f"{name}.py", *SHARED_FILES, "app.py", "requirements.txt", "README.md"}
    for target, source in module_sources(name).items():
        assert files[target] == Path(source).read_bytes()  # the shipped module and the package's own files, as they are
    assert RepoCard(files["README.md"].decode()).data.sdk == "gradio"


def test_a_pushed_space_runs_on_its_own(hub, tmp_path):
    """The pushed files, in a folder of their own, load with evaluate by path: no elical_hf, no installed module."""
    push_metric_space("honesty_alignment", "alice/my_alignment")
    folder = tmp_path / "my_alignment"
    folder.mkdir()
    for name, data in hub.files("alice/my_alignment", "space").items():
        (folder / name).write_bytes(data)
    conf = [round(0.025 * i, 3) for i in range(40)]
    correct = [int(i % 3 != 0) if i >= 20 else int(i % 3 == 0) for i in range(40)]
    script = f"""
import json, sys
import evaluate
metric = evaluate.load({str(folder)!r}, keep_in_memory=True)
print(json.dumps([metric.compute(predictions={conf!r}, references={correct!r}), "elical_hf" in sys.modules]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    result, imported = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == alignment(conf, correct) and not imported
    cached = tmp_path / "hf" / "modules" / "evaluate_modules" / "metrics"
    assert not (cached / "evaluate-metric--honesty_alignment").exists()  # the Space needed no install-metrics


def test_bad_metric_space_inputs(hub, tmp_path):
    with pytest.raises(ValueError, match="Unknown metric"):
        push_metric_space("accuracy", "alice/accuracy")
    with pytest.raises(ValueError, match="Invalid Hub repo id"):
        push_metric_space("honesty_auroc", "honesty auroc")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="lacks"):
        push_metric_space("empty", "alice/empty", folder=tmp_path / "empty")
    assert hub.repos == {}


def test_evaluate_loads_the_published_space(hub, tmp_path, monkeypatch):
    import evaluate
    import evaluate.config

    push_metric_space("honesty_auroc", "elical/honesty_auroc")
    # evaluate reads HF_ENDPOINT at import time too.
    monkeypatch.setattr(evaluate.config, "HF_ENDPOINT", hub.url)
    monkeypatch.setattr(evaluate.config, "HUB_EVALUATE_URL", hub.url + "/spaces/{path}/resolve/{revision}/{name}")
    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", False)
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path / "modules")
    # evaluate imports modules as `evaluate_modules.*` from the modules cache it puts on sys.path: isolate both.
    for module in [m for m in sys.modules if m.split(".")[0] == "evaluate_modules"]:
        monkeypatch.delitem(sys.modules, module)  # put back after the test
    # Earlier tests may have put another modules cache on sys.path; its `evaluate_modules` package would win.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not os.path.isdir(os.path.join(p, "evaluate_modules"))])
    try:
        metric = evaluate.load("elical/honesty_auroc", cache_dir=str(tmp_path / "evaluate"))
        assert metric.compute(predictions=[0.1, 0.9, 0.4, 0.8], references=[0, 1, 0, 1])["auroc"] == 1.0
    finally:
        for module in [m for m in sys.modules if m.split(".")[0] == "evaluate_modules"]:
            del sys.modules[module]
