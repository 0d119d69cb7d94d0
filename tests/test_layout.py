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


# -- Floors: no module imports a module of a higher floor, and no import cycle ---------------------------------------

FLOORS: list[tuple[str, list[str]]] = [
    ("plumbing", ["utils", "utils.*", "version"]),
    ("settings", ["settings", "settings.*", "signals.settings"]),
    ("metrics", ["metrics", "metrics.*"]),
    ("data", ["data", "data.*"]),
    ("model", ["models", "models.*"]),
    ("training", ["training", "training.*"]),
    ("signals", ["signals", "signals.*"]),
    ("evaluation", ["evaluation", "evaluation.*"]),
    ("steps", ["steps", "steps.*"]),
    ("publishing", ["publishing", "publishing.*"]),
    ("entry points", ["", "cli", "cli.*", "demo", "gate", "pipeline", "serve", "serve.*", "integrations",
                      "integrations.*"]),
]
"""The floors of docs/architecture.md's room table, lowest first: module names relative to `elical_hf` (`""` is the
package itself, `x.*` every module of the package `x` not named on another floor). Each floor is a folder of the
package (the entry points stand at its root): a module may import modules of its own floor and of lower ones."""

ROOT_MODULES = {"version", "demo", "gate", "pipeline"}
"""The only modules at the package's root besides its `__init__`: its version and the three entry points that are one module."""

UPWARD_DOORS: dict[tuple[str, str], str] = {
    ("models.modeling", "gate"): "`model.answer(...)` is the gate's door on the model (ForConfidenceMixin.answer); the gate "
    "needs the model and the sampler, so it cannot sit below the model",
    ("models.auto", "publishing.hub"): "transformers' API puts `push_to_hub` on the model: PeftModelForConfidence.push_to_hub "
    "is one call of hub.push_model",
    ("training.trainer", "publishing.hub"): "transformers' Trainer pushes with `push_to_hub=True`: ConfidenceTrainer.push_to_hub "
    "and _push_from_checkpoint are calls of hub.push_folder",
}
"""The only imports of a higher floor: each inside a function (made when called, never when the lower module is
imported), for the reason given; docs/architecture.md argues them."""


def package_modules(package: Path) -> dict[str, Path]:
    """Module name (relative to the package, `""` for the package itself) -> file, for every importable module: files
    in folders without `__init__.py` (the metric module scripts, assembled elsewhere) are not modules of it."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        folders = path.relative_to(package).parents
        if "__pycache__" in path.parts or any(not (package / f / "__init__.py").is_file() for f in folders):
            continue
        parts = list(path.relative_to(package).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(name: str, path: Path, modules: dict[str, Path], package: str = "elical_hf") -> dict[str, bool]:
    """The package's modules that module `name` imports -> whether at import time (`False`: only inside a function).
    `from x import y` counts as an import of `x.y` when that is a module, else of `x`; imports under `if
    TYPE_CHECKING:` are not made at run time and are left out."""
    found: dict[str, bool] = {}
    is_package = path.name == "__init__.py"

    def resolve(module: str | None, level: int) -> str | None:
        if level:
            base = name.split(".") if name else []
            base = base if is_package else base[:-1]
            base = base[: len(base) - (level - 1)] if level > 1 else base
            return ".".join([*base, *([module] if module else [])])
        if module == package or (module or "").startswith(package + "."):
            return module[len(package) + 1 :]
        return None

    def visit(node: ast.AST, in_function: bool) -> None:
        if _type_checking_only(node):
            for child in node.orelse:
                visit(child, in_function)
            return
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = resolve(node.module, node.level)
            if base is not None:
                targets = [f"{base}.{a.name}".lstrip(".") if f"{base}.{a.name}".lstrip(".") in modules else base
                           for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [r for a in node.names if (r := resolve(a.name, 0)) is not None]
        for target in targets:
            if target in modules and target != name:
                found[target] = found.get(target, False) or not in_function
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def floor_of(name: str, floors: list[tuple[str, list[str]]] = FLOORS) -> int | None:
    """Index in `floors` of the floor that names `name` (exactly, else through the nearest `package.*`)."""
    for index, (_, names) in enumerate(floors):
        if name in names:
            return index
    prefixes = [(len(p), i) for i, (_, names) in enumerate(floors) for p in names
                if p.endswith(".*") and name.startswith(p[:-1])]
    return max(prefixes)[1] if prefixes else None


def layering_problems(
    package: Path,
    floors: list[tuple[str, list[str]]] = FLOORS,
    doors: dict[tuple[str, str], str] = UPWARD_DOORS,
) -> list[str]:
    """Every module without a floor, every import of a higher floor that is not a door (and every door imported at
    import time), and every import cycle."""
    modules = package_modules(package)
    graph = {name: imports_of(name, path, modules, package.name) for name, path in modules.items()}
    problems = [f"{name or package.name}: on no floor (add it to FLOORS and to docs/architecture.md's table)"
                for name in modules if floor_of(name, floors) is None]
    for name, targets in graph.items():
        for target, at_import in sorted(targets.items()):
            low, high = floor_of(name, floors), floor_of(target, floors)
            if low is None or high is None or high <= low:
                continue
            where = f"{name} ({floors[low][0]}) imports {target} ({floors[high][0]})"
            if (name, target) not in doors:
                problems.append(f"{where}: a lower floor reaches up")
            elif at_import:
                problems.append(f"{where} at import time: a door is imported only when it is used")
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in import_cycles(graph)]
    return problems


def import_cycles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """One cycle (as a path back to its start) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, {}):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    cycles = []
    for component in components:
        start, members = component[0], set(component)
        path, seen = [start], {start}
        while True:  # walk inside the component until it closes
            step = next(t for t in sorted(graph[path[-1]]) if t in members and (t == start or t not in seen))
            path.append(step)
            if step == start:
                break
            seen.add(step)
        cycles.append(path)
    return cycles


def test_every_module_has_a_floor_and_none_reaches_up():
    problems = layering_problems(PACKAGE)
    assert problems == [], "\n".join(problems)


def test_the_package_root_holds_only_its_entry_points_and_each_floor_is_a_folder():
    modules = package_modules(PACKAGE)
    assert {name for name in modules if "." not in name and not (PACKAGE / name / "__init__.py").is_file()} \
        == ROOT_MODULES
    for floor, names in FLOORS[:-1]:  # below the entry points, a floor is its folder (and the sampler's settings)
        folders = {name.split(".")[0] for name in names if name != "version"}
        assert all((PACKAGE / folder / "__init__.py").is_file() for folder in folders), floor


def test_the_doors_are_real_and_only_called():
    """Each allowed upward import exists, inside a function (a stale door would hide nothing, but says what is not)."""
    modules = package_modules(PACKAGE)
    for (name, target), reason in UPWARD_DOORS.items():
        found = imports_of(name, modules[name], modules)
        assert found.get(target) is False, f"{name} -> {target} ({reason}) is not a call-time import"


def metric_import_problems(package: Path) -> list[str]:
    """What keeps `metrics/` from being the maths alone: a module of `metrics` importing a module of the package
    outside `metrics` (publishing above all; at import time or inside a function, doors included), or a metric
    module script (`metrics/<name>/<name>.py`, assembled elsewhere) importing more of the package than its two
    siblings `functional` and `evaluate_mixin`."""
    modules = package_modules(package)
    problems = [f"{name} imports {target}" for name, path in modules.items() if name.split(".")[0] == "metrics"
                for target in imports_of(name, path, modules, package.name) if target.split(".")[0] != "metrics"]
    for script in sorted((package / "metrics").glob("*/*.py")):
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(package.name)):
                if node.level != 1 or node.module not in ("functional", "evaluate_mixin"):
                    problems.append(f"{script.relative_to(package)} imports {'.' * node.level}{node.module}")
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == package.name for a in node.names):
                problems.append(f"{script.relative_to(package)} imports {package.name}")
    return problems


def test_metrics_are_the_maths_and_import_nothing_from_publishing():
    assert metric_import_problems(PACKAGE) == []


def test_the_metrics_check_catches_what_it_must(tmp_path):
    package = tmp_path / "pkg"
    (package / "metrics" / "m").mkdir(parents=True)
    (package / "publishing").mkdir()
    for name, text in {
        "__init__.py": "", "publishing/__init__.py": "", "publishing/cards.py": "",
        "metrics/__init__.py": "from .functional import f\n",
        "metrics/functional.py": "def f():\n    from ..publishing import cards\n",  # inside a function: still out
        "metrics/m/m.py": "from .functional import f\nfrom .evaluate_mixin import M\nfrom ..publishing import cards\n",
    }.items():
        (package / name).write_text(text)
    assert metric_import_problems(package) == ["metrics.functional imports publishing.cards",
                                               "metrics/m/m.py imports ..publishing"]


def test_the_layering_check_catches_what_it_must(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "scripts").mkdir()
    for name, text in {
        "__init__.py": "",
        "low.py": "from .high import thing\n",  # a lower floor reaching up at import time
        "mid.py": "def f():\n    from . import high\n",  # only inside a function: still up, and no door
        "door.py": "import pkg.high\n",  # a door, but imported at import time
        "high.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import low\nfrom .sub import a\n",
        "stray.py": "",
        "sub/__init__.py": "",
        "sub/a.py": "from .b import x\n",
        "sub/b.py": "from ..sub import a\n",  # a cycle inside one floor
        "scripts/tool.py": "from pkg.low import y\n",  # no __init__.py: not a module of the package
    }.items():
        (package / name).write_text(text)
    floors = [("low", ["low", "mid", "door"]), ("high", ["", "high", "sub", "sub.*"])]
    problems = layering_problems(package, floors, {("door", "high"): "a reason"})
    assert problems == [
        "stray: on no floor (add it to FLOORS and to docs/architecture.md's table)",
        "door (low) imports high (high) at import time: a door is imported only when it is used",
        "low (low) imports high (high): a lower floor reaches up",
        "mid (low) imports high (high): a lower floor reaches up",
        "import cycle: sub.a -> sub.b -> sub.a",
    ], problems
    (package / "high.py").write_text("def f():\n    from . import mid\n")  # now mid <-> high, both call-time
    assert "import cycle: high -> mid -> high" in layering_problems(package, floors, {})


def test_examples_are_usage_and_experiments_share_one_path_module():
    """`examples/` holds runnable usage only (the Trainer scripts, configs, the replication); the research behind
    docs/results.md is in `experiments/`, whose scripts reach their siblings through the one shared `experiments_common` module."""
    root = PACKAGE.parent
    assert sorted(p.stem for p in (root / "examples").glob("*.py")) == ["reproduce_paper", "train_elical"]
    experiments = sorted((root / "experiments").glob("*.py"))
    assert len(experiments) >= 10
    for script in experiments:
        if script.name != "experiments_common.py":
            assert "sys.path" not in script.read_text(encoding="utf-8"), script.name
