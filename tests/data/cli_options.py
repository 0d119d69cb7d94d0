"""Write `cli_options.json`: every `elical-hf` command's options as its parsers declare them (the run parser
`make_parser()`, and `make_help_parser()` where a command has one): each option string with whether it is required
and its default. `tests/test_cli_options.py` checks that the commands still declare exactly these.

    python tests/data/cli_options.py        # rewrite the fixture (only when a flag is meant to change)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "cli_options.json")


def _default(value: object) -> object:
    """A parser default as JSON: a value of the package's own folder (the demo's assets) as `<package>/...`."""
    import elical_hf

    if value is argparse.SUPPRESS:
        return "==SUPPRESS=="
    if isinstance(value, (bool, int, float, str)) or value is None:
        package = os.path.dirname(os.path.abspath(elical_hf.__file__))
        return value.replace(package, "<package>") if isinstance(value, str) else value
    if isinstance(value, (list, tuple)):
        return [_default(item) for item in value]
    return repr(value)


def parser_options(parser: argparse.ArgumentParser) -> dict[str, dict[str, object]]:
    """`{option string: {"required", "default"}}` of every argument of `parser` (positionals by their name)."""
    options = {}
    for action in parser._actions:  # argparse has no public list of a parser's arguments
        if action.dest == "help":
            continue
        names = action.option_strings or [action.dest]
        for name in names:
            options[name] = {"required": bool(action.required), "default": _default(action.default)}
    return dict(sorted(options.items()))


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """`{"<command>": its run parser, "<command> --help": its help parser (where it has one)}`, freshly made."""
    from elical_hf.cli import COMMANDS

    out = {}
    for command, (module_name, _) in sorted(COMMANDS.items()):
        module = importlib.import_module(module_name)
        out[command] = module.make_parser()
        if hasattr(module, "make_help_parser"):
            out[f"{command} --help"] = module.make_help_parser()
    return out


def command_options() -> dict[str, dict[str, dict[str, object]]]:
    """`{"<command>" (its run parser) or "<command> --help" (its help parser): parser_options(...)}`."""
    return {name: parser_options(parser) for name, parser in command_parsers().items()}


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
    with open(FIXTURE, "w", encoding="utf-8") as handle:
        json.dump(command_options(), handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(f"wrote {FIXTURE}")
