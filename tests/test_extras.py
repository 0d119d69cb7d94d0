"""A lean core with extras: every package the library imports is declared (in the core or in one extra), the core
does not import an extra's package at `import elical_hf`, and a feature whose extra is missing says in one line which
`pip install "elical-hf[...]"` it needs."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.utils.extras import EXTRAS, MissingExtraError, require_extra


ROOT = Path(__file__).resolve().parent.parent


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """The core's distributions and each extra's, normalised, from setup.cfg."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")

    def names(text: str) -> set[str]:
        return {re.split(r"[<>=\[; ]", line.strip())[0].lower().replace("_", "-")
                for line in text.splitlines() if line.strip() and not line.strip().startswith("#")}

    extras = {name: names(value) for name, value in config["options.extras_require"].items()}
    return names(config["options"]["install_requires"]), extras


def imported_top_level_modules() -> set[str]:
    modules = set()
    for path in (ROOT / "elical_hf").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"elical_hf", "__future__"}


def test_every_imported_package_is_declared():
    core, extras = declared()
    everything = core.union(*extras.values())
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for module in imported_top_level_modules():
        if module == "vllm":  # no extra on purpose (setup.cfg says why); imported only by the in-process backend
            continue
        owners = {name.lower().replace("_", "-") for name in distributions.get(module, [module])}
        if not owners & everything:
            undeclared[module] = sorted(owners)
    assert undeclared == {}
    for extra, modules in EXTRAS.items():  # what require_extra names is what setup.cfg's extra installs
        provided = {name.lower().replace("_", "-") for module in modules for name in distributions.get(module, [])}
        assert provided and provided <= extras[extra] | core, extra
    assert not {"sentence-transformers", "matplotlib", "openai", "gguf", "rouge-score", "fastapi"} & core


def test_importing_the_package_imports_no_extra():
    modules = sorted({module for extra in EXTRAS.values() for module in extra})
    code = ("import sys, elical_hf, elical_hf.cli; from elical_hf import AutoModelForConfidence, ConfidenceTrainer; "
            f"print([m for m in {modules!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture
def missing(monkeypatch):
    """Make the named modules unimportable (`import x` raises ImportError), as on a core-only install."""
    def hide(*names: str) -> None:
        for name in names:
            monkeypatch.setitem(sys.modules, name, None)
    return hide


def test_a_missing_extra_is_one_line_naming_the_install(missing, tmp_path, capsys):
    from elical_hf.evaluation.plots import risk_coverage_plot
    from elical_hf.signals.embedding_judge import EmbeddingJudge
    from elical_hf.signals.openai_client import check_url

    missing("sentence_transformers", "matplotlib", "httpx", "rouge_score")
    cases = [
        (lambda: EmbeddingJudge(model_path=str(tmp_path)).model, "The embedding judge needs sentence-transformers",
         "judges"),
        (lambda: risk_coverage_plot({"a": ([0.5], [1])}, None), "Plotting needs matplotlib", "plots"),
        (lambda: check_url("http://127.0.0.1:8000/v1"), "An OpenAI-compatible endpoint needs httpx", "openai"),
    ]
    for call, start, extra in cases:
        with pytest.raises(MissingExtraError) as error:
            call()
        assert str(error.value).startswith(start) and str(error.value).endswith(f'pip install "elical-hf[{extra}]"')
        assert len(str(error.value).splitlines()) == 1
    with pytest.raises(MissingExtraError, match=r'needs gguf: pip install "elical-hf\[gguf\]"'):
        missing("gguf")
        require_extra("gguf", "Reading the embedded model")

    from elical_hf.signals.lexical_judge import _rouge_scorer
    from tests.test_cli_judge import write  # a judge run on a core-only install: one line, exit 2

    _rouge_scorer.cache_clear()
    records = write(tmp_path)
    assert cli_main(["judge", "--records", records, "--output", str(tmp_path / "judged.jsonl"),
                     "--consistency", "lexical"]) == 2
    assert capsys.readouterr().err.strip().endswith('needs rouge-score: pip install "elical-hf[judges]"')
    assert not (tmp_path / "judged.jsonl").exists()
