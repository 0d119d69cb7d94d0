"""Metric Spaces: an evaluate module published as a Gradio Space in one commit."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from huggingface_hub import RepoCard

import elical_hf
from elical_hf import push_metric_space
from elical_hf.metrics.registration import METRIC_MODULES
from tests.hub_server import hub  # noqa: F401 - the fixture


METRICS_DIR = Path(elical_hf.__file__).parent / "metrics"


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
    push_metric_space(name, f"elical/{name}")
    files = hub.files(f"elical/{name}", "space")
    assert {f"{name}.py", "app.py", "requirements.txt", "README.md"} <= set(files)
    assert files[f"{name}.py"] == (METRICS_DIR / name / f"{name}.py").read_bytes()  # the shipped module, as it is
    assert RepoCard(files["README.md"].decode()).data.sdk == "gradio"


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
