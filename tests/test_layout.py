"""The package's own boundaries: no module imports another module's private (`_underscored`) names, and importing
the package leaves every other library as it found it (see also tests/test_pipeline.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import elical_hf


PACKAGE = Path(elical_hf.__file__).parent


def own_private_imports(path: Path) -> list[str]:
    """`from <elical_hf module> import _name` and `import elical_hf._x` statements in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            ours = node.level > 0 or (node.module or "").startswith("elical_hf")
            private_module = any(part.startswith("_") and part != "__future__" for part in (node.module or "").split("."))
            names = [a.name for a in node.names if a.name.startswith("_") and a.name not in ("__version__",)]
            if ours and (names or private_module):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: from {'.' * node.level}{node.module} import "
                             f"{', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("elical_hf") and any(p.startswith("_") for p in alias.name.split(".")):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: import {alias.name}")
    return found


def test_no_private_name_is_imported_across_modules():
    files = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    assert len(files) > 30
    offenders = [line for path in files for line in own_private_imports(path)]
    assert offenders == [], "make shared names public or move the code:\n" + "\n".join(offenders)


def test_the_check_catches_a_private_import(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("from .signals.decoding import _Decoder\nfrom torch import _C\nimport elical_hf._x\n")
    assert own_private_imports(bad) == ["bad.py:1: from .signals.decoding import _Decoder", "bad.py:3: import elical_hf._x"]
