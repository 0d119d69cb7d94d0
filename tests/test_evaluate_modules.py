"""The three evaluate metric modules: assembled from the single sources (no checked-in copies), no start-up hook,
offline loading by name once `elical-hf install-metrics` ran and by path (source tree, wheel, Space folder), doctests,
bad inputs, parity, cards."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import numpy as np
import pytest
import yaml

from elical_hf.metrics import functional as F
from elical_hf.publishing import metric_modules
from elical_hf.publishing.metric_cards import CARD_META, check_metric_cards, module_strings, write_metric_space


NAMES = metric_modules.METRIC_MODULES
SPACE_FILES = {"README.md", "app.py", "requirements.txt", *metric_modules.SHARED_FILES}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARD_SECTIONS = (
    "## Metric Description", "## How to Use", "### Inputs", "## Output Values", "### Values from Popular Papers",
    "## Examples", "## Limitations and Bias", "## Citation",
)


def _offline_env(hf_home, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "ELICAL_HF_", "XDG_CACHE"))}
    env.update(HF_HOME=str(hf_home), HF_EVALUATE_OFFLINE="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", **extra)
    return env


def _run(script: str, cwd, env) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _install_metrics_command(cwd, env) -> list[str]:
    """`elical-hf install-metrics` in a fresh process; the module paths it prints."""
    proc = subprocess.run([sys.executable, "-m", "elical_hf.cli", "install-metrics"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    *modules, last = proc.stdout.strip().splitlines()
    assert last == 'evaluate.load("<name>") now finds them offline, by name.'
    return [line.split(": ", 1)[1] for line in modules]


def _data(seed: int = 0, n: int = 400) -> tuple[list[float], list[int]]:
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random(n), 2)  # ties on purpose
    correct = (rng.random(n) < 0.2 + 0.6 * conf).astype(int)
    return conf.tolist(), correct.tolist()


def _expected(name: str, conf, correct) -> dict[str, float]:
    if name == "honesty_auroc":
        return {
            "auroc": F.auroc(conf, correct), "auprc_correct": F.auprc(conf, correct, positive="correct"),
            "auprc_error": F.auprc(conf, correct, positive="error"), "aurc": F.aurc(conf, correct),
            "prr": F.prr(conf, correct),
        }
    if name == "honesty_ece":
        return {"ece": F.ece(conf, correct), "brier": F.brier(conf, correct)}
    return F.alignment(conf, correct)


# ----------------------------------------------------------------------------------------------------------------------
# Loading in fresh processes


def test_nothing_fills_the_cache_but_install_metrics(tmp_path):
    """No start-up hook and no import-time install: with an empty cache, importing evaluate, elical_hf and its metrics
    writes no module, and `evaluate.load("honesty_auroc")` offline fails as for any unknown metric."""
    hf_home = tmp_path / "hf"
    script = """
        import json, os, sys
        import evaluate, elical_hf, elical_hf.metrics
        try:
            evaluate.load("honesty_auroc")
            error = None
        except FileNotFoundError as err:
            error = str(err)
        print(json.dumps({"error": error, "hooks": [type(f).__name__ for f in sys.meta_path
                                                    if getattr(f, "elical_hf_evaluate_hook", False)]}))
    """
    out = _run(script, tmp_path, _offline_env(hf_home))
    assert out["hooks"] == [] and "doesn't exist on the Hugging Face Hub" in out["error"]
    assert not list(hf_home.glob("modules/evaluate_modules/metrics/*honesty_*"))


def test_load_by_name_offline_in_fresh_process(tmp_path):
    """By name, offline, from another directory, once `elical-hf install-metrics` ran with an empty cache; plus by
    path (the copy `metric_module_path` assembles, and Space folders that run on their own)."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    hf_home = tmp_path / "hf"
    installed = _install_metrics_command(cwd, _offline_env(hf_home))
    assert [os.path.basename(p) for p in installed] == [f"{name}.py" for name in NAMES]
    for name in NAMES:  # a Space folder: everything it needs, without the package around it
        write_metric_space(name, tmp_path / "spaces" / name)
    assembled = metric_modules.metric_module_path("honesty_auroc", modules_cache=str(tmp_path / "assembled"))
    conf, correct = _data()
    script = f"""
        import doctest, json, os, sys
        import evaluate
        conf, correct = {conf!r}, {correct!r}
        out = {{"by_name": {{}}, "doctests": {{}}, "by_path": {{}}, "files": {{}}, "functional": {{}}}}
        for name in {NAMES!r}:
            metric = evaluate.load(name, keep_in_memory=True)
            module = sys.modules[type(metric).__module__]
            out["files"][name] = module.__file__
            out["functional"][name] = sys.modules[module.bootstrap_ci.__module__].__file__
            out["by_name"][name] = metric.compute(predictions=conf, references=correct)
            result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
            out["doctests"][name] = [result.attempted, result.failed]
            for kind, path in (("package", {assembled!r}), ("space", os.path.join({str(tmp_path / "spaces")!r}, name))):
                if kind == "package" and name != "honesty_auroc":
                    continue
                loaded = evaluate.load(path, keep_in_memory=True)
                out["by_path"][kind + ":" + name] = loaded.compute(predictions=conf, references=correct)
        out["elical_hf_imported"] = "elical_hf" in sys.modules
        print(json.dumps(out))
    """
    out = _run(script, cwd, _offline_env(hf_home))
    assert not out["elical_hf_imported"], "a metric module must not need the elical_hf package"
    for name, path in zip(NAMES, installed):
        assert out["files"][name] == path, out["files"]  # the copy install-metrics made, in $HF_HOME/modules
        with open(out["functional"][name], "rb") as used, open(F.__file__, "rb") as source:
            assert used.read() == source.read()  # the package's functional.py, as it is now
        attempted, failed = out["doctests"][name]
        assert attempted >= 4 and failed == 0, (name, attempted, failed)
        expected = _expected(name, conf, correct)
        assert out["by_name"][name] == expected  # exact: JSON round-trips floats
        assert out["by_path"][f"space:{name}"] == out["by_name"][name]
    assert out["by_path"]["package:honesty_auroc"] == out["by_name"]["honesty_auroc"]


def _site_run(site_dir, script: str, hf_home) -> dict:
    """A fresh `python -S` whose site folder is `site_dir` (its `.pth` files processed as site.py does) and which
    imports evaluate and its dependencies from this environment, without processing this environment's `.pth` files:
    the only elical_hf is the one in `site_dir`."""
    purelib = sysconfig.get_paths()["purelib"]
    code = f"import site, sys; site.addsitedir({str(site_dir)!r}); sys.path.append({purelib!r})\n"
    code += textwrap.dedent(script)
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=site_dir.parent, env=_offline_env(hf_home),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load_all(conf, correct, names: tuple[str, ...] = NAMES) -> str:
    """A script that loads the modules `names` by name and prints each one's file and result, as JSON."""
    return f"""
        import json, sys
        import evaluate
        out = {{}}
        for name in {names!r}:
            metric = evaluate.load(name, keep_in_memory=True)
            result = metric.compute(predictions={conf!r}, references={correct!r})
            out[name] = {{"file": sys.modules[type(metric).__module__].__file__, "result": result}}
        print(json.dumps(out))
    """


def test_an_edit_of_the_source_is_loaded_after_the_next_install(tmp_path, monkeypatch):
    """As with an editable install: `install_metrics` assembles the modules from the package's files as they are, and
    makes its copy the newest, so after an edit of `functional.py` (and after putting it back, whose older copy is
    still in the cache) the next process loads what the last install read."""
    sources = tmp_path / "metrics"
    shutil.copytree(metric_modules.METRICS_FOLDER, sources, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(metric_modules, "METRICS_FOLDER", str(sources))
    hf_home = tmp_path / "hf"
    conf, correct = _data(n=60)
    original = (sources / "functional.py").read_text()
    edited = original + "\n\ndef auroc(confidences, correct):\n    return 0.125\n"
    results = []
    for text in (original, edited, original):
        (sources / "functional.py").write_text(text)
        (path,) = metric_modules.install_metrics(hf_home / "modules", names=("honesty_auroc",))
        out = _run(_load_all(conf, correct, names=("honesty_auroc",)), tmp_path, _offline_env(hf_home))
        assert out["honesty_auroc"]["file"] == path
        results.append(out["honesty_auroc"]["result"]["auroc"])
        with open(os.path.join(os.path.dirname(path), "functional.py")) as used:
            assert used.read() == text
    assert results == [F.auroc(conf, correct), 0.125, F.auroc(conf, correct)]
    assert len(list(hf_home.glob("modules/evaluate_modules/metrics/evaluate-metric--honesty_auroc/*/"))) == 2


def test_a_wheel_install_loads_by_name(tmp_path):
    """After a normal (non-editable) install: the wheel of this source tree ships no start-up hook (no `.pth`), each
    metric's script and card and the shared files, and no copy of them; once its `elical-hf install-metrics` ran,
    a fresh process loads the modules by name, assembled from the wheel's files."""
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=lambda folder, names: [
        n for n in names if n in ("__pycache__", "build", "dist", "outputs", "tests", "benchmarks", "examples", "docs")
        or n.startswith(".") or n.endswith(".egg-info")
    ])
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("elical_hf-*.whl")
    site_dir = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(site_dir)
    assert [n for n in names if n.endswith(".pth")] == []
    assert {n.split("/")[0] for n in names} == {"elical_hf", wheel.name[: -len("-py3-none-any.whl")] + ".dist-info"}
    for name in NAMES:
        assert {n for n in names if n.startswith(f"elical_hf/metrics/{name}/")} == {
            f"elical_hf/metrics/{name}/{name}.py", f"elical_hf/metrics/{name}/README.md"
        }
    assert {f"elical_hf/metrics/{f}" for f in metric_modules.SHARED_FILES} <= names
    hf_home = tmp_path / "hf"
    conf, correct = _data(n=60)
    install = 'from elical_hf.cli import main\nmain(["install-metrics"])\nprint("{}")\n'
    _site_run(site_dir, install, hf_home)
    out = _site_run(site_dir, _load_all(conf, correct), hf_home)
    for name in NAMES:
        assert out[name]["file"].startswith(str(hf_home / "modules")), out[name]["file"]
        with open(out[name]["file"][: -len(".py")] + ".json", encoding="utf-8") as handle:
            origin = json.load(handle)["original file path"]  # the unpacked wheel's script, not this tree's
        assert origin == str(site_dir / "elical_hf" / "metrics" / name / f"{name}.py")
        assert out[name]["result"] == _expected(name, conf, correct)


def test_install_metrics_fills_the_cache_evaluate_reads(tmp_path):
    """`HF_MODULES_CACHE`, when set, is where both `elical-hf install-metrics` writes and `evaluate.load` reads."""
    chosen = tmp_path / "chosen-modules"
    env = _offline_env(tmp_path / "hf", HF_MODULES_CACHE=str(chosen))
    (_, _, path) = _install_metrics_command(tmp_path, env)
    assert path.startswith(str(chosen / "evaluate_modules" / "metrics" / "evaluate-metric--honesty_ece"))
    script = """
        import json, sys
        import evaluate
        metric = evaluate.load("honesty_ece", keep_in_memory=True)
        result = metric.compute(predictions=[0.9, 0.2, 1.0], references=[1, 0, 1], n_bins=5)
        print(json.dumps({"file": sys.modules[type(metric).__module__].__file__, "result": result}))
    """
    out = _run(script, tmp_path, env)
    assert out["file"] == path
    conf, correct = [0.9, 0.2, 1.0], [1, 0, 1]
    assert out["result"] == {"ece": F.ece(conf, correct, n_bins=5), "brier": F.brier(conf, correct)}
    assert not (tmp_path / "hf" / "modules").exists()


# ----------------------------------------------------------------------------------------------------------------------
# install_metrics, without evaluate


def test_install_metrics_is_idempotent_and_newest(tmp_path):
    cache = tmp_path / "modules"
    first = metric_modules.install_metrics(str(cache))
    name_dir = cache / "evaluate_modules" / "metrics" / "evaluate-metric--honesty_auroc"
    other = name_dir / ("f" * 64)  # a newer copy left by another install
    other.mkdir()
    (other / "honesty_auroc.py").write_text("# other version\n")
    future = os.stat(first[1]).st_mtime_ns + 10**10
    os.utime(other / "honesty_auroc.py", ns=(future, future))
    second = metric_modules.install_metrics(str(cache))
    assert first == second and [os.path.basename(p) for p in first] == [f"{n}.py" for n in NAMES]
    assert os.stat(second[1]).st_mtime_ns > future  # ours is the one evaluate's cache fallback picks
    for path, name in zip(second, NAMES):
        folder = os.path.dirname(path)
        assert len(os.path.basename(folder)) == 64
        sources = metric_modules.module_sources(name)
        assert sorted(os.listdir(folder)) == sorted(["__init__.py", f"{name}.json", *sources])
        for target, source in sources.items():
            with open(os.path.join(folder, target), "rb") as mine, open(source, "rb") as src:
                assert mine.read() == src.read()
    for init in ("__init__.py", "evaluate_modules/__init__.py", "evaluate_modules/metrics/__init__.py"):
        assert (cache / init).is_file()
    assert not [p for p in (cache / "evaluate_modules").rglob(".*")]  # no lock file or staging folder left behind


def test_install_metrics_replaces_an_incomplete_copy(tmp_path):
    """A module folder missing a file (an install killed by an older version) is rebuilt, not kept."""
    cache = tmp_path / "modules"
    (path,) = metric_modules.install_metrics(cache, names=("honesty_ece",))
    os.remove(os.path.join(os.path.dirname(path), "functional.py"))
    assert metric_modules.install_metrics(cache, names=("honesty_ece",)) == [path]
    with open(os.path.join(os.path.dirname(path), "functional.py"), "rb") as copy:
        assert copy.read() == open(F.__file__, "rb").read()


def test_install_metrics_command_reports_an_unwritable_cache_in_one_line(tmp_path, capsys):
    from elical_hf.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["install-metrics", "--modules_cache", str(blocker / "modules")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("elical-hf install-metrics: error: ") and "a-file" in err



# ----------------------------------------------------------------------------------------------------------------------
# Folder layout, Space folders and generated cards


@pytest.mark.parametrize("name", NAMES)
def test_checked_in_folder_holds_only_the_metric(name):
    """The module script and its card; `functional.py`, the mixin, the widget and the requirements are assembled."""
    folder = metric_modules.metric_source_folder(name)
    assert {f for f in os.listdir(folder) if f != "__pycache__"} == {f"{name}.py", "README.md"}
    script = open(os.path.join(folder, f"{name}.py"), encoding="utf-8").read()
    for shared in metric_modules.SHARED_FILES:  # evaluate copies only the script's own relative imports
        assert f"from .{shared[:-3]} import " in script


@pytest.mark.parametrize("name", NAMES)
def test_space_folder(tmp_path, name):
    folder = write_metric_space(name, tmp_path / "space", module_name="renamed")
    assert {f.name for f in folder.iterdir()} == SPACE_FILES | {"renamed.py"}
    for target, source in metric_modules.module_sources(name).items():
        copy = folder / ("renamed.py" if target == f"{name}.py" else target)
        assert copy.read_bytes() == open(source, "rb").read()
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert readme == open(os.path.join(metric_modules.metric_source_folder(name), "README.md"), encoding="utf-8").read()
    front = yaml.safe_load(readme.split("---\n")[1])
    assert front["title"] == CARD_META[name].title and front["sdk"] == "gradio" and front["app_file"] == "app.py"
    assert front["pinned"] is False and front["tags"] == ["evaluate", "metric"] and front["sdk_version"]
    assert {"emoji", "colorFrom", "colorTo", "description"} <= set(front)
    positions = [readme.index(section) for section in CARD_SECTIONS]
    assert positions == sorted(positions)
    strings = module_strings(name)
    assert "2510.17509" in strings["_CITATION"]
    assert "Annotation-Efficient Universal Honesty Alignment" in strings["_CITATION"]
    app = (folder / "app.py").read_text(encoding="utf-8")
    compile(app, "app.py", "exec")
    assert 'launch_gradio_widget(evaluate.load(str(Path(__file__).with_name("renamed.py"))))' in app
    requirements = (folder / "requirements.txt").read_text().split()
    assert {"evaluate", "datasets", "numpy"} <= {line.split(">=")[0] for line in requirements}
    with pytest.raises(FileExistsError, match="already holds"):  # never over another folder's files
        write_metric_space(name, folder)


def test_cards_in_sync():
    assert check_metric_cards() == [], "run `python -m elical_hf.publishing.metric_cards` to regenerate them"


def test_metric_module_path_rejects_unknown(tmp_path):
    with pytest.raises(ValueError, match="Unknown elical-hf metric module"):
        metric_modules.metric_module_path("accuracy", modules_cache=str(tmp_path / "modules"))
    assert not (tmp_path / "modules").exists()


# ----------------------------------------------------------------------------------------------------------------------
# In-process: parity with the functional API and bad inputs


@pytest.fixture(scope="module")
def metrics(tmp_path_factory):
    if "evaluate" not in sys.modules:  # keep this process's evaluate caches out of the user's home
        root = tmp_path_factory.mktemp("hf-in-process")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HF_MODULES_CACHE", str(root / "modules"))
            patch.setenv("HF_EVALUATE_CACHE", str(root / "evaluate"))
            patch.setenv("HF_METRICS_CACHE", str(root / "metrics"))
            import evaluate  # noqa: F401
    import evaluate

    assembled = str(tmp_path_factory.mktemp("assembled"))
    return {
        name: evaluate.load(metric_modules.metric_module_path(name, modules_cache=assembled), keep_in_memory=True)
        for name in NAMES
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_results_equal_functional(metrics, seed):
    conf, correct = _data(seed)
    for name in NAMES:
        assert metrics[name].compute(predictions=conf, references=correct) == _expected(name, conf, correct)
    got = metrics["honesty_ece"].compute(predictions=conf, references=correct, n_bins=7, strategy="quantile")
    assert got["ece"] == F.ece(conf, correct, n_bins=7, strategy="quantile")
    got = metrics["honesty_ece"].compute(predictions=conf, references=correct, strategy="reference")
    assert got["ece"] == F.ece(conf, correct, strategy="reference") != F.ece(conf, correct)  # data hold 1.0, 0.3, 0.6, 0.7
    got = metrics["honesty_alignment"].compute(
        predictions=conf, references=correct, calibration_fraction=0.3, shuffle_seed=seed
    )
    assert got == F.alignment(conf, correct, calibration_fraction=0.3, shuffle_seed=seed)


def test_bootstrap_intervals(metrics):
    conf, correct = _data(3, n=120)
    fns = {
        "honesty_auroc": ("auroc", F.auroc, None),
        "honesty_ece": ("ece", functools.partial(F.ece, n_bins=10, strategy="uniform"), None),
        "honesty_alignment": ("alignment", lambda c, y: F.alignment(c, y)["alignment"], 0.2),
    }
    for name, (key, fn, fraction) in fns.items():
        got = metrics[name].compute(predictions=conf, references=correct, bootstrap=50, bootstrap_seed=7)
        ci = F.bootstrap_ci(fn, conf, correct, n_resamples=50, seed=7, calibration_fraction=fraction)
        assert (got[f"{key}_ci_low"], got[f"{key}_ci_high"]) == (ci["low"], ci["high"])
        assert got[f"{key}_ci_low"] <= got[key] <= got[f"{key}_ci_high"]
        assert f"{key}_ci_low" not in metrics[name].compute(predictions=conf, references=correct)


@pytest.mark.parametrize("seed", [0, 5])
def test_alignment_interval_agrees_with_evaluate_table(metrics, seed):
    """One bootstrap rule (threshold rows and scored rows resampled apart): the module and `elical-hf evaluate` give
    the same alignment interval on the same data and seed, also after the module's shuffle."""
    from elical_hf.evaluation.tables import evaluate_table

    conf, correct = map(np.asarray, _data(seed, n=150))
    order = np.random.default_rng(11).permutation(conf.size)
    for shuffle_seed, rows in ((None, np.arange(conf.size)), (11, order)):
        got = metrics["honesty_alignment"].compute(
            predictions=conf, references=correct, shuffle_seed=shuffle_seed, bootstrap=200, bootstrap_seed=seed
        )
        table = evaluate_table(
            correct[rows], ["nq"] * conf.size, ["in_domain_test"] * conf.size, {"m": conf[rows]}, 200, seed
        )
        cell = table["m"]["nq"]
        assert cell["alignment"] == got["alignment"]
        assert cell["alignment_ci"] == [got["alignment_ci_low"], got["alignment_ci_high"]]
        assert got["alignment_ci_low"] < got["alignment_ci_high"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "predictions, references, match",
    [
        ([0.2, 0.8, 0.5], [0, 1], "same length"),
        ([0.2, float("nan"), 0.5], [0, 1, 1], "finite"),
        ([0.2, 1.5, 0.5], [0, 1, 1], r"must lie in \[0, 1\]"),
        ([0.2, -0.1, 0.5], [0, 1, 1], r"must lie in \[0, 1\]"),
        ([0.2, 0.8, 0.5], [0, 2, 1], "only 0/1"),
        ([0.2, 0.8, 0.5], [0, 0.5, 1], "only 0/1"),  # evaluate's int32 cast alone would turn 0.5 into 0
        ([0.2, 0.8, 0.5], ["a", "b", "c"], "only 0/1"),
        (["x", 0.8, 0.5], [0, 1, 1], "must be numeric"),
        ([], [], "non-empty"),
    ],
)
def test_bad_inputs_raise_one_clear_error(metrics, name, predictions, references, match):
    with pytest.raises(ValueError, match=match):
        metrics[name].compute(predictions=predictions, references=references)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bootstrap", [-1, 1.5, True])
def test_bad_bootstrap(metrics, name, bootstrap):
    with pytest.raises(ValueError, match="bootstrap must be an integer >= 0"):
        metrics[name].compute(predictions=[0.2, 0.8, 0.5, 0.4, 0.9], references=[0, 1, 1, 0, 1], bootstrap=bootstrap)


def test_bad_options(metrics):
    data = {"predictions": [0.2, 0.8, 0.5, 0.4], "references": [0, 1, 1, 0]}
    with pytest.raises(ValueError, match="strategy must be one of"):
        metrics["honesty_ece"].compute(**data, strategy="kmeans")
    with pytest.raises(ValueError, match="n_bins must be an integer"):
        metrics["honesty_ece"].compute(**data, n_bins=0)
    with pytest.raises(ValueError, match="calibration_fraction must lie in"):
        metrics["honesty_alignment"].compute(**data, calibration_fraction=1.5)
    with pytest.raises(ValueError, match="at least one evaluation row"):
        metrics["honesty_alignment"].compute(**data, calibration_fraction=1.0)


@pytest.mark.parametrize("name", NAMES)
def test_add_and_add_batch_validate_and_accumulate(metrics, name):
    conf, correct = _data(5, n=60)
    metric = metrics[name]
    with pytest.raises(ValueError, match="only 0/1"):
        metric.add(prediction=0.3, reference=0.5)
    metric.add_batch(predictions=conf[:30], references=correct[:30])
    for c, y in zip(conf[30:], correct[30:]):
        metric.add(prediction=c, reference=y)
    assert metric.compute() == _expected(name, conf, correct)


def test_single_class_auroc_is_nan_with_one_warning(metrics):
    with pytest.warns(UserWarning, match="single class") as record:
        got = metrics["honesty_auroc"].compute(predictions=[0.2, 0.9, 0.6], references=[1, 1, 1])
    assert len([w for w in record if issubclass(w.category, UserWarning)]) == 1
    assert np.isnan(got["auroc"]) and np.isnan(got["prr"]) and np.isnan(got["auprc_error"])
    assert got["auprc_correct"] == 1.0 and got["aurc"] == 0.0


def test_the_readme_states_the_route_in_its_first_lines():
    """The README's set-up paragraph names the step that makes `evaluate.load("honesty_auroc")` work by name (the one
    `test_load_by_name_offline_in_fresh_process` runs), and the by-path route."""
    readme = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md"),
                  encoding="utf-8").read()
    head = readme.split("\n## ", 1)[0]
    assert 'pip install -e ".[all]" && elical-hf install-metrics' in head
    assert 'evaluate.load("honesty_auroc")' in head and 'metric_module_path("honesty_auroc")' in head
