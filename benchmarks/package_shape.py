"""The package's shape, before and after a change: rooms (modules), floors, arrows (imports between floors), circles
(import cycles), lines, the longest functions, the core's requirements, wheel size and import time; with a drawing.

    python benchmarks/package_shape.py --before a12eae1      # against that commit (its own tests/test_layout.py floors)

Each tree is read with its own `tests/test_layout.py` (its floors, its import reader), so both are measured by the
rules they were built under. The import time is the median of `--repeats` fresh processes of
`import elical_hf; elical_hf.AutoModelForConfidence` (the core's heaviest first use: torch, transformers, peft).
Writes `--output` (JSON) and the drawing beside it (`.png`).
"""

from __future__ import annotations

import argparse
import ast
import configparser
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

from common import print_machine


ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="a12eae1", help="The git revision to compare with.")
    parser.add_argument("--output", default=str(ROOT / "docs" / "results" / "package_shape.json"))
    parser.add_argument("--repeats", type=int, default=3, help="Fresh processes per import-time measurement.")
    return parser.parse_args(argv)


def checkout(revision: str, folder: Path) -> Path:
    """The package, its tests' layout rules and its setup.cfg at `revision`, extracted into `folder`."""
    archive = subprocess.run(["git", "archive", revision, "elical_hf", "tests/test_layout.py", "setup.cfg"],
                             cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def layout_rules(tree: Path):
    """That tree's `tests/test_layout.py`, loaded as a module (its FLOORS and import reader)."""
    spec = importlib.util.spec_from_file_location(f"layout_{abs(hash(tree))}", tree / "tests" / "test_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def longest_functions(package: Path, top: int = 10) -> list[dict]:
    """The `top` functions with the most lines of code (their docstring left out; `lines` counts it too)."""
    found = []
    for path in package.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body[1:] if ast.get_docstring(node) is not None and len(node.body) > 1 else node.body
                found.append({"function": f"{path.relative_to(package.parent)}:{node.name}",
                              "lines": node.end_lineno - node.lineno + 1,
                              "code_lines": node.end_lineno - body[0].lineno + 1})
    return sorted(found, key=lambda f: -f["code_lines"])[:top]


def core_requirements(tree: Path) -> list[str]:
    config = configparser.ConfigParser()
    config.read(tree / "setup.cfg")
    return [line.strip() for line in config["options"]["install_requires"].splitlines() if line.strip()]


def import_seconds(tree: Path, repeats: int) -> float:
    """Median wall time of a fresh `import elical_hf; elical_hf.AutoModelForConfidence` run from `tree`."""
    import statistics
    import time

    code = "import elical_hf; elical_hf.AutoModelForConfidence"
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=tree, check=True, env={**os.environ, "PYTHONPATH": str(tree)})
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def shape(tree: Path, repeats: int) -> dict:
    rules = layout_rules(tree)
    package = tree / "elical_hf"
    modules = rules.package_modules(package)
    graph = {name: rules.imports_of(name, path, modules, "elical_hf") for name, path in modules.items()}
    floors = [name for name, _ in rules.FLOORS]
    arrows: Counter = Counter()
    for name, targets in graph.items():
        for target in targets:
            low, high = rules.floor_of(name, rules.FLOORS), rules.floor_of(target, rules.FLOORS)
            if low is not None and high is not None and low != high:
                arrows[(floors[low], floors[high])] += 1
    rooms = Counter(floors[rules.floor_of(name, rules.FLOORS)] for name in modules)
    root = sorted(name for name in modules if name and "." not in name and not (package / name / "__init__.py").exists())
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in package.rglob("*.py")
                if "__pycache__" not in p.parts)
    return {"modules": len(modules), "root_modules": root, "floors": floors, "rooms": dict(rooms),
            "arrows": [{"from": a, "to": b, "imports": n, "upward": floors.index(b) > floors.index(a)}
                       for (a, b), n in sorted(arrows.items())],
            "cycles": rules.import_cycles(graph), "package_lines": lines,
            "longest_functions": longest_functions(package), "core_requirements": core_requirements(tree),
            "import_seconds": import_seconds(tree, repeats)}


def draw(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 6.5))
    for ax, key in zip(axes, ("before", "after")):
        data = result[key]
        floors = data["floors"]
        y = {floor: i for i, floor in enumerate(floors)}
        for floor in floors:
            ax.add_patch(plt.Rectangle((0, y[floor] - 0.35), 1, 0.7, color="#dfe8f3"))
            ax.text(0.5, y[floor], f"{floor} ({data['rooms'].get(floor, 0)} modules)", ha="center", va="center",
                    fontsize=9)
        for i, arrow in enumerate(data["arrows"]):
            x = 1.05 + 0.95 * i / max(len(data["arrows"]), 1)  # one column per pair of floors
            ax.annotate("", xy=(x, y[arrow["to"]]), xytext=(x, y[arrow["from"]]),
                        arrowprops={"arrowstyle": "->", "lw": 0.5 + arrow["imports"] / 15,
                                    "color": "#c0392b" if arrow["upward"] else "#34495e"})
        ax.set_xlim(0, 2.05)
        ax.set_ylim(len(floors) - 0.5, -0.5)
        ax.axis("off")
        ax.set_title(f"{key} ({result[key + '_revision']}): {data['modules']} modules, {len(data['root_modules'])} at "
                     f"the root, {sum(a['imports'] for a in data['arrows'])} imports between floors "
                     f"({sum(a['imports'] for a in data['arrows'] if a['upward'])} up), "
                     f"{len(data['cycles'])} circles", fontsize=9)
    fig.suptitle("elical_hf: floors (lowest at the top), module counts, and the imports between floors "
                 "(arrow width ~ count; red = upward door)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_machine()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as folder:
        before = shape(checkout(args.before, Path(folder)), args.repeats)
    result = {"before_revision": args.before, "after_revision": head, "before": before,
              "after": shape(ROOT, args.repeats)}
    for key in ("before", "after"):
        data = result[key]
        print(f"{key}: {data['modules']} modules ({len(data['root_modules'])} at the root), {len(data['floors'])} "
              f"floors, {sum(a['imports'] for a in data['arrows'])} imports between floors, {len(data['cycles'])} "
              f"circles, {data['package_lines']:,} lines, {len(data['core_requirements'])} core requirements, "
              f"import {data['import_seconds']:.2f} s; longest function {data['longest_functions'][0]}")
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    draw(result, os.path.splitext(args.output)[0] + ".png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
