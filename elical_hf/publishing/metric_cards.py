"""The metric cards, and the metric Space folders assembled from the single sources.

The checked-in folder `elical_hf/metrics/<name>/` holds what is specific to one metric: its evaluate module `<name>.py`
and its card `README.md`. In the card, the YAML front matter and every block between
`<!-- BEGIN GENERATED: <block> ... -->` and `<!-- END GENERATED: <block> -->` markers are rendered from the module's
`_DESCRIPTION` and `_KWARGS_DESCRIPTION` (its Args, Returns and Examples) and the shared citation
(`evaluate_mixin.CITATION`), read with `ast`, so nothing heavy is imported; the prose sections are written by hand.
Run `python -m elical_hf.publishing.metric_cards` to rewrite the cards, `--check` to list the stale ones (exit status 1;
a test runs the check).

A Space folder, one that runs on its own ([`write_metric_space`]; `hub.push_metric_space` stages one, and
`python -m elical_hf.publishing.metric_cards --spaces DIR` writes all three), is assembled from
`metric_modules.module_sources` (the script, `functional.py`, `evaluate_mixin.py`), the rendered card, and `app.py`
and `requirements.txt` from the templates below.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path


from .metric_modules import METRIC_MODULES, metric_source_folder, module_sources


__all__ = [
    "CARD_META", "check_metric_cards", "module_strings", "render_card", "sync_metric_cards", "write_metric_space",
]

_GRADIO_VERSION = "3.19.1"  # launch_gradio_widget uses the gradio 3 `gr.inputs` API


@dataclass(frozen=True)
class CardMeta:
    """Space metadata of one metric card (the YAML front matter besides `description`)."""

    title: str
    emoji: str
    color_from: str
    color_to: str


CARD_META: dict[str, CardMeta] = {
    "honesty_alignment": CardMeta("Honesty Alignment", "🎯", "green", "blue"),
    "honesty_auroc": CardMeta("Honesty AUROC", "🧭", "blue", "purple"),
    "honesty_ece": CardMeta("Honesty ECE", "📏", "yellow", "red"),
}

_APP = '''\
"""Gradio widget of the `{name}` metric, loaded from the file next to this one (works in a Space and locally)."""

from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget


launch_gradio_widget(evaluate.load(str(Path(__file__).with_name("{name}.py"))))
'''

_REQUIREMENTS = """\
evaluate>=0.4.3
datasets>=2.0
numpy>=1.24
"""

_HOW_TO_USE = """\
`predictions` are the model's confidences in [0, 1] that its answers are correct; `references` are the 0/1
correctness labels of those answers (1 = correct).

```python
>>> import evaluate
>>> {name} = evaluate.load("{name}")  # offline too, once `elical-hf install-metrics` has run
>>> results = {name}.compute(predictions=[0.9, 0.2, 0.7], references=[1, 0, 0])
```

With elical-hf installed, `elical-hf install-metrics` (or `elical_hf.install_metrics()`) puts the module into
evaluate's module cache, where `evaluate.load("{name}")` finds it by name, offline, from then on;
`evaluate.load(elical_hf.metric_module_path("{name}"))` loads it by path. Without elical-hf, load the published Space
(`evaluate.load("<user>/{name}")`) or a Space folder by path (`evaluate.load("path/to/{name}")`, a folder written by
`python -m elical_hf.publishing.metric_cards --spaces DIR`): the module only needs `evaluate`, `datasets` and `numpy`,
since a Space carries `functional.py` and `evaluate_mixin.py`, the files of `elical_hf.metrics` it computes with."""

_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<block>[\w-]+)[^\n]*-->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=block) -->)", re.S
)
_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
_SECTIONS = ("Args", "Returns", "Examples")


def _string_constants(path: str, wanted: set[str]) -> dict[str, str]:
    """The module-level string constants `wanted` of the Python file `path`, read with `ast` (nothing is imported)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in wanted:
                found[node.targets[0].id] = ast.literal_eval(node.value)
    missing = wanted - set(found)
    if missing:
        raise ValueError(f"{path} does not define {sorted(missing)} as string literals")
    return found


def module_strings(name: str) -> dict[str, str]:
    """`_DESCRIPTION` and `_KWARGS_DESCRIPTION` of `<name>/<name>.py`, and as `_CITATION` the `CITATION` of
    `evaluate_mixin.py` that every module cites, read without importing them."""
    script = os.path.join(metric_source_folder(name), f"{name}.py")
    strings = _string_constants(script, {"_DESCRIPTION", "_KWARGS_DESCRIPTION"})
    mixin = module_sources(name)["evaluate_mixin.py"]
    strings["_CITATION"] = _string_constants(mixin, {"CITATION"})["CITATION"]
    return strings


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, each joined into one line."""
    return [" ".join(line.strip() for line in chunk.splitlines()) for chunk in re.split(r"\n\s*\n", text.strip())]


def _kwargs_sections(kwargs_description: str) -> dict[str, list[str]]:
    """Split `_KWARGS_DESCRIPTION` into its `Args:`, `Returns:` and `Examples:` sections (lines dedented by 4)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in kwargs_description.strip("\n").splitlines():
        header = line.strip().rstrip(":")
        if not line.startswith(" ") and line.rstrip().endswith(":") and header in _SECTIONS:
            current = sections.setdefault(header, [])
        elif current is None:
            raise ValueError(f"_KWARGS_DESCRIPTION must start with one of {_SECTIONS} headers, got {line!r}")
        else:
            current.append(line[4:] if line.startswith("    ") else line.strip())
    if set(sections) != set(_SECTIONS):
        raise ValueError(f"_KWARGS_DESCRIPTION must have the sections {_SECTIONS}, got {sorted(sections)}")
    return sections


def _entries_to_markdown(lines: list[str]) -> str:
    """`name (type): text` entries with indented continuation lines -> a markdown bullet list."""
    items: list[str] = []
    for line in lines:
        match = re.match(r"^(\w+) \((.*?)\): (.*)$", line)
        if match:
            items.append(f"- **`{match.group(1)}`** ({match.group(2)}): {match.group(3)}")
        elif line.strip() and items:
            items[-1] += " " + line.strip()
        elif line.strip():
            raise ValueError(f"Cannot parse argument line {line!r}")
    return "\n".join(items)


def _examples_to_markdown(lines: list[str]) -> str:
    """Doctest chunks become python code blocks, other paragraphs stay prose."""
    chunks = re.split(r"\n\s*\n", "\n".join(lines).strip())
    out = []
    for chunk in chunks:
        if chunk.lstrip().startswith(">>>"):
            out.append("```python\n" + textwrap.dedent(chunk) + "\n```")
        else:
            out.append(" ".join(part.strip() for part in chunk.splitlines()))
    return "\n\n".join(out)


def _front_matter(name: str, description: str) -> str:
    meta = CARD_META[name]
    described = "\n\n".join("  " + paragraph for paragraph in _paragraphs(description))
    return (
        f"---\ntitle: {meta.title}\nemoji: {meta.emoji}\ncolorFrom: {meta.color_from}\ncolorTo: {meta.color_to}\n"
        f"sdk: gradio\nsdk_version: {_GRADIO_VERSION}\napp_file: app.py\npinned: false\ntags:\n- evaluate\n- metric\n"
        f"description: >-\n{described}\n---\n"
    )


def render_blocks(name: str) -> dict[str, str]:
    """The generated README blocks of metric `name`, keyed by block name."""
    strings = module_strings(name)
    sections = _kwargs_sections(strings["_KWARGS_DESCRIPTION"])
    return {
        "description": "\n\n".join(_paragraphs(strings["_DESCRIPTION"])),
        "how-to-use": _HOW_TO_USE.format(name=name),
        "inputs": _entries_to_markdown(sections["Args"]),
        "outputs": _entries_to_markdown(sections["Returns"]),
        "examples": _examples_to_markdown(sections["Examples"]),
        "citation": "```bibtex\n" + strings["_CITATION"].strip() + "\n```",
    }


def _render_readme(name: str, current: str) -> str:
    strings = module_strings(name)
    blocks = render_blocks(name)
    seen = set()

    def fill(match: re.Match) -> str:
        block = match.group("block")
        if block not in blocks:
            raise ValueError(f"{name}/README.md has an unknown generated block {block!r}; known: {sorted(blocks)}")
        seen.add(block)
        return f"{match.group(1)}{blocks[block]}\n{match.group(4)}"

    body = _BLOCK.sub(fill, _FRONT_MATTER.sub("", current, count=1))
    missing = set(blocks) - seen
    if missing:
        raise ValueError(f"{name}/README.md lacks the generated blocks {sorted(missing)}")
    return _front_matter(name, strings["_DESCRIPTION"]) + body


def render_card(name: str) -> str:
    """The card `README.md` of metric `name`: the checked-in one with its front matter and generated blocks rendered.

    Args:
        name (`str`): One of `metric_modules.METRIC_MODULES`.

    Returns:
        `str`: The card's text.
    """
    with open(os.path.join(metric_source_folder(name), "README.md"), encoding="utf-8", newline="") as handle:
        return _render_readme(name, handle.read())


def write_metric_space(name: str, folder: str | os.PathLike, module_name: str | None = None) -> Path:
    """Write the Space folder of metric `name`, a folder that runs on its own (`evaluate.load(folder)`).

    It holds the module script, the files it imports (`metric_modules.module_sources`), the rendered card
    ([`render_card`]), `app.py` (the Gradio widget) and `requirements.txt`.

    Args:
        name (`str`): One of `metric_modules.METRIC_MODULES`.
        folder (`str` or `os.PathLike`): Where to write; created if missing, and must hold none of the files.
        module_name (`str`, *optional*, defaults to `name`): File name of the script (`<module_name>.py`): evaluate
            loads a Space's module by the Space's name.

    Returns:
        `Path`: `folder`.
    """
    module_name = module_name or name
    files: dict[str, bytes] = {}
    for target, src in module_sources(name).items():
        with open(src, "rb") as handle:
            files[f"{module_name}.py" if target == f"{name}.py" else target] = handle.read()
    files["README.md"] = render_card(name).encode("utf-8")
    files["app.py"] = _APP.format(name=module_name).encode("utf-8")
    files["requirements.txt"] = _REQUIREMENTS.encode("utf-8")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    present = sorted(f for f in files if (folder / f).exists())
    if present:
        raise FileExistsError(f"{folder} already holds {present}; write a metric Space into an empty folder.")
    for target, data in files.items():
        (folder / target).write_bytes(data)
    return folder


def _read(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def sync_metric_cards(check: bool = False, names: tuple[str, ...] = METRIC_MODULES) -> list[str]:
    """Rewrite (or, with `check=True`, only list) the checked-in cards that differ from what their modules give.

    Args:
        check (`bool`, *optional*, defaults to `False`): Only report, write nothing.
        names (`tuple[str, ...]`, *optional*, defaults to all modules): Metric folders to process.

    Returns:
        `list[str]`: Paths of the `README.md` files that were stale (and, unless `check`, have been rewritten).
    """
    stale = []
    for name in names:
        path = os.path.join(metric_source_folder(name), "README.md")
        text = render_card(name)
        if _read(path) != text:
            stale.append(path)
            if not check:
                with open(path, "w", encoding="utf-8", newline="") as handle:
                    handle.write(text)
    return stale


def check_metric_cards(names: tuple[str, ...] = METRIC_MODULES) -> list[str]:
    """Paths of the cards that are out of date; empty when every card matches its module."""
    return sync_metric_cards(check=True, names=names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="list stale cards and exit 1 instead of rewriting them")
    group.add_argument("--spaces", metavar="DIR", help="write the three Space folders into DIR/<name>/ instead")
    args = parser.parse_args(argv)
    if args.spaces:
        for name in METRIC_MODULES:
            try:
                print(f"wrote: {write_metric_space(name, os.path.join(args.spaces, name))}")
            except FileExistsError as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
        return 0
    stale = sync_metric_cards(check=args.check)
    verb = "stale" if args.check else "rewrote"
    for path in stale:
        print(f"{verb}: {os.path.relpath(path)}")
    if args.check and stale:
        print("Run `python -m elical_hf.publishing.metric_cards` to regenerate them.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
