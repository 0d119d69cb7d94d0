"""`ElicalArgumentParser`: `HfArgumentParser` that also reads defaults from a YAML file (`--config x.yaml`), and the
options of the commands that talk to the Hub or to an OpenAI-compatible server.

An option given more than once is never silently dropped (argparse keeps the last occurrence): a list option collects
every occurrence, in order (`--model a --model b` is `--model a b`, and `--which a --which b` is `--which a,b` for
an option declared `comma_separated`); any other option given again with a different value is refused in one line
that names it (the same value again is accepted); a key written twice in a `--config` file is refused too. A value
on the command line replaces the `--config` file's value of that option, a list included (never appended to it).
See `docs/cli.md`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from transformers import HfArgumentParser

from .config_values import config_value, refuse_unsafe_config


@dataclass(kw_only=True)
class HubArguments:
    """The Hub token option of the commands that talk to the Hub (`push`, `convert-official`)."""

    token: str | None = field(
        default=None,
        metadata={"help": "Hub token; better left out: without it, the HF_TOKEN environment variable or the token of "
                  "`hf auth login` is used. A token given here is visible to other users of the machine (`ps`) and "
                  "stays in the shell history."},
    )


def warn_token_on_command_line(argv: list[str] | None) -> None:
    """Print a warning when `--token` was given on the command line (not in a `--config` file)."""
    argv = sys.argv[1:] if argv is None else argv
    if any(arg == "--token" or arg.startswith("--token=") for arg in argv):
        print("warning: --token on the command line is visible to other users (`ps`) and kept in the shell history; "
              "set HF_TOKEN or run `hf auth login` instead.", file=sys.stderr)


def slurm_array_task() -> tuple[int | None, int | None]:
    """This Slurm job-array task's `(number of tasks, index from 0)`: `SLURM_ARRAY_TASK_COUNT`, and
    `SLURM_ARRAY_TASK_ID` less `SLURM_ARRAY_TASK_MIN`, over `SLURM_ARRAY_TASK_STEP` (`--array=1-8` and
    `--array=0-28:4` give 0, 1, ...); `None` for what the environment does not set. The defaults of
    `--num_workers` / `--worker_index`."""
    import os

    values = {}
    for name in ("COUNT", "ID", "MIN", "STEP"):
        text = os.environ.get(f"SLURM_ARRAY_TASK_{name}")
        try:
            values[name] = int(text) if text not in (None, "") else None
        except ValueError:
            raise ValueError(f"SLURM_ARRAY_TASK_{name}={text!r} is not a whole number.") from None
    index = values["ID"]
    if index is not None:
        index = (index - (values["MIN"] or 0)) // (values["STEP"] or 1)
    return values["COUNT"], index


_GIVEN = "_elical_given_options"
"""The attribute of the namespace being parsed that maps each option's `dest` to the option string it was last given
as on the command line; `ElicalArgumentParser.parse_known_args` removes it before the namespace is read."""


def _given(namespace: argparse.Namespace) -> dict[str, str]:
    """The options given so far on the command line being parsed into `namespace`: `{dest: option string}`."""
    if not hasattr(namespace, _GIVEN):
        setattr(namespace, _GIVEN, {})
    return getattr(namespace, _GIVEN)


class SingleValueAction(argparse.Action):
    """
    The action of an option that holds one value (`store`, and `store_const` / `store_true` / `store_false` as
    `nargs=0` with their `const`): it stores the value, and refuses the same option (or another one with the same
    `dest`, as `--fp16` and `--no_fp16`) given again with a different value, with a `ValueError` naming both. The
    same value twice is accepted.
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        value = self.const if self.nargs == 0 else values
        given = _given(namespace)
        if self.dest in given and getattr(namespace, self.dest) != value:
            earlier = given[self.dest]
            what, fix = ((f"{option_string} given twice", "give it once") if earlier == option_string else
                         (f"{earlier} and {option_string} both given", "give one of them"))
            raise ValueError(f"{what} with different values ({getattr(namespace, self.dest)!r}, then {value!r}): "
                             f"{fix} (only list options collect several occurrences).")
        given[self.dest] = option_string
        setattr(namespace, self.dest, value)


class CollectingAction(argparse.Action):
    """
    The action of a list option (`nargs="+"` or `"*"`): every occurrence adds its values after the earlier ones',
    so `--model a --model b` is `--model a b`. The first occurrence replaces the default (a `--config` file's value
    included) instead of adding to it.
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = _given(namespace)
        value = self.combine(getattr(namespace, self.dest), values) if self.dest in given else values
        given[self.dest] = option_string
        setattr(namespace, self.dest, value)

    def combine(self, before: Any, values: Any) -> Any:
        """The option's value once `values` are given after `before` (the earlier occurrences' value)."""
        return [*before, *values]


class CommaSeparatedAction(CollectingAction):
    """The action of a comma-separated list option (a `str` field with `metadata={"comma_separated": True}`, e.g.
    `evaluate --baselines`): occurrences are joined with commas, so `--which a --which b` is `--which a,b`."""

    def combine(self, before: str, values: str) -> str:
        return f"{before},{values}"


def repetition_action(kwargs: dict[str, Any], comma_separated: bool = False) -> Any:
    """
    The action of an option whose `add_argument` keywords are `kwargs` under the command line's rule for repeated
    options ([`SingleValueAction`], [`CollectingAction`], [`CommaSeparatedAction`]); `kwargs` is adapted for it
    (`nargs=0` and `const` for `store_true` / `store_false` / `store_const`). Other actions (`help`, `append`, a
    class of the caller's) are returned as given.
    """
    action = kwargs.get("action", "store")
    if action in ("store_true", "store_false"):
        kwargs.setdefault("default", action == "store_false")
        kwargs["const"] = action == "store_true"
    if action in ("store_true", "store_false", "store_const"):
        kwargs["nargs"] = 0
        return SingleValueAction
    if action not in (None, "store"):
        return action
    if comma_separated:
        return CommaSeparatedAction
    return CollectingAction if kwargs.get("nargs") in ("+", "*") else SingleValueAction


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a mapping with a key written twice (`yaml.safe_load` keeps the last one
    silently): a `--config` file's option is given once, like an option on the command line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # unhashable keys: the base class refuses them
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in lines:
                raise ValueError(f"{key_node.start_mark.name}, line {line}: {key!r} written twice (first on line "
                                 f"{lines[key]}); write it once.")
            lines[key] = line
        return super().construct_mapping(node, deep=deep)


class ElicalArgumentParser(HfArgumentParser):
    """
    Parse dataclasses from the command line; `--config file.yaml` sets defaults that flags then override.

    Unknown YAML keys are an error, so a typo never silently does nothing. A dataclass field with
    `metadata={"positional": True}` is a positional argument (`elical-hf push FOLDER REPO_ID`) instead of an option;
    a `str` field with `metadata={"comma_separated": True}` is a comma-separated list, whose occurrences are joined (the
    rule for options given more than once, in this module's docstring).
    `overrides` changes what a command declares differently from the dataclass it parses (`elical-hf train`: its
    `--output_dir` is required, and its `--num_train_epochs` defaults to `None`, the recipe's rule), e.g.
    `{"output_dir": {"required": True, "help": ...}}`.
    """

    def __init__(self, *args: Any, overrides: Mapping[str, Mapping[str, Any]] | None = None, **kwargs: Any) -> None:
        self.overrides = dict(overrides or {})  # read by add_argument, which the base class calls
        super().__init__(*args, **kwargs)
        names = {f.name for dtype in self.dataclass_types for f in dataclasses.fields(dtype)}
        unknown = sorted(set(self.overrides) - names)
        if unknown:
            raise ValueError(f"overrides of options the parser does not have: {unknown}.")
        # Read by `parse_with_config` before anything else; declared here so that `--help` lists it.
        self.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE.yaml",
                          help="YAML file of option values; options given on the command line override it.")

    def add_argument(self, *names: str, positional: bool = False, comma_separated: bool = False,
                     command_line_only: bool = False, **kwargs: Any) -> argparse.Action:
        """`argparse.ArgumentParser.add_argument`, plus the `positional`, `comma_separated` and `command_line_only`
        (an option that imports code, which a `--config` file may not set) metadata keys of dataclass fields (which
        `HfArgumentParser` passes on here as keywords), this parser's `overrides`, and the rule for repeated options
        ([`repetition_action`]) for every option."""
        kwargs.update(self.overrides.get(names[0].lstrip("-"), {}) if names else {})
        if positional:
            kwargs.pop("required", None)  # positionals are required unless they have a default
            if "default" in kwargs:
                kwargs["nargs"] = "?"
            names = (names[0].lstrip("-"),)
        elif names and names[0].startswith("-"):
            kwargs["action"] = repetition_action(kwargs, comma_separated)
        action = super().add_argument(*names, **kwargs)
        action.comma_separated = comma_separated
        if command_line_only:
            vars(self).setdefault("command_line_only", set()).add(action.dest)
        return action

    def parse_known_args(self, args: list[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """`argparse.ArgumentParser.parse_known_args`, without the record of which options were given (kept on the
        namespace while parsing, see [`SingleValueAction`])."""
        namespace, rest = super().parse_known_args(args, namespace)
        vars(namespace).pop(_GIVEN, None)
        return namespace, rest

    def command_line_options(self, argv: list[str] | None) -> tuple[str | None, set[str]]:
        """The `--config` file that `argv` names and the `dest`s of the options it gives, each recognised as the
        parser itself recognises it (abbreviations, `--x=v`, `--x-y`; `--conf` is refused as ambiguous where another
        option starts so too). Required options are not required here (the config file may give them)."""
        required = {action: action.required for action in self._actions}
        try:
            for action in self._actions:
                action.required = False
            namespace, _ = super().parse_known_args(argv, argparse.Namespace())
        finally:
            for action, was in required.items():
                action.required = was
        return getattr(namespace, "config", None), set(getattr(namespace, _GIVEN, {}))

    def parse_with_config(self, argv: list[str] | None = None) -> tuple[Any, ...]:
        """
        Parse `argv` into the dataclasses, with the values of `--config FILE.yaml` as defaults.

        Args:
            argv (`list[str]`, *optional*): The arguments; defaults to `sys.argv[1:]`.

        Returns:
            `tuple`: one instance per dataclass.
        """
        argv = sys.argv[1:] if argv is None else list(argv)
        config, given = self.command_line_options(argv)
        if config is not None:
            try:
                with open(config, encoding="utf-8") as handle:
                    values = yaml.load(handle, Loader=UniqueKeyLoader) or {}
            except (yaml.YAMLError, UnicodeDecodeError) as error:
                raise ValueError(f"{config} is not a valid YAML file: {error}") from None
            if not isinstance(values, dict):
                raise ValueError(f"{config} must hold a mapping of option names to values.")
            annotations = {}
            for dtype in self.dataclass_types:
                hints = typing.get_type_hints(dtype)
                annotations.update({f.name: hints.get(f.name) for f in dataclasses.fields(dtype) if f.init})
            unknown = sorted(set(values) - set(annotations), key=str)
            if unknown:
                raise ValueError(f"Unknown option(s) in {config}: {unknown}.")
            refuse_unsafe_config(values, config, given, getattr(self, "command_line_only", ()))
            actions: dict[str, list[argparse.Action]] = {}
            for action in self._actions:
                actions.setdefault(action.dest, []).append(action)
            self.set_defaults(**{key: config_value(self, actions[key], key, value, config, annotations[key])
                                 for key, value in values.items()})
            for action in self._actions:  # values from the file satisfy required options
                if action.dest in values:
                    action.required = False
        outputs = self.parse_args_into_dataclasses(args=argv)
        if len(outputs) > len(self.dataclass_types):  # the namespace of what no dataclass took: `--config`'s file
            vars(outputs[-1]).pop("config", None)
            if not vars(outputs[-1]):
                outputs = outputs[:-1]
        return outputs
