"""`ElicalArgumentParser`: `HfArgumentParser` that also reads defaults from a YAML file (`--config x.yaml`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

import yaml
from transformers import HfArgumentParser


_NOT_GIVEN = object()


TOKEN_HELP = (
    "Hub token; better left out: without it, the HF_TOKEN environment variable or the token of `hf auth login` is "
    "used. A token given here is visible to other users of the machine (`ps`) and stays in the shell history."
)
"""The `--token` help of the commands that talk to the Hub."""


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
    `--num_shards` / `--shard_index`."""
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


def check_dtype_option(value: str) -> str:
    """Return a `--dtype` value (`auto`, `float32`, `bfloat16`, `float16`, ...) once it is known to name a dtype,
    so that a typo fails when the options are parsed, before any data or model is loaded."""
    from elical_hf.precision import AUTO, parse_dtype

    if value != AUTO:
        try:
            parse_dtype(value)
        except ValueError as error:
            raise ValueError(f"--dtype: {error}") from None
    return value


class ElicalArgumentParser(HfArgumentParser):
    """
    Parse dataclasses from the command line; `--config file.yaml` sets defaults that flags then override.

    Unknown YAML keys are an error, so a typo never silently does nothing. A dataclass field with
    `metadata={"positional": True}` is a positional argument (`elical-hf push FOLDER REPO_ID`) instead of an option.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read by `parse_with_config` before anything else; declared here so that `--help` lists it.
        self.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE.yaml",
                          help="YAML file of option values; options given on the command line override it.")

    def add_argument(self, *names: str, positional: bool = False, **kwargs: Any) -> argparse.Action:
        """`argparse.ArgumentParser.add_argument`, plus the `positional` metadata key of dataclass fields (which
        `HfArgumentParser` passes on here as a keyword)."""
        if positional:
            kwargs.pop("required", None)  # positionals are required unless they have a default
            if "default" in kwargs:
                kwargs["nargs"] = "?"
            names = (names[0].lstrip("-"),)
        return super().add_argument(*names, **kwargs)

    def parse_with_config(self, argv: list[str] | None = None, return_given: bool = False) -> tuple[Any, ...]:
        """
        Parse `argv` into the dataclasses, with the values of `--config FILE.yaml` as defaults.

        Args:
            argv (`list[str]`, *optional*): The arguments; defaults to `sys.argv[1:]`.
            return_given (`bool`, *optional*, defaults to `False`): Also return the fields set explicitly, on the
                command line or in the YAML file, rather than left at their defaults: a dict of their values as
                parsed, before the dataclasses' `__post_init__` derives anything from them.

        Returns:
            `tuple`: one instance per dataclass, then the dict of given values when `return_given`.
        """
        pre = argparse.ArgumentParser(add_help=False)
        pre.add_argument("--config", default=None)
        known, rest = pre.parse_known_args(argv)
        from_file: set[str] = set()
        if known.config is not None:
            try:
                with open(known.config, encoding="utf-8") as handle:
                    values = yaml.safe_load(handle) or {}
            except (yaml.YAMLError, UnicodeDecodeError) as error:
                raise ValueError(f"{known.config} is not a valid YAML file: {error}") from None
            if not isinstance(values, dict):
                raise ValueError(f"{known.config} must hold a mapping of option names to values.")
            fields = {f.name for dtype in self.dataclass_types for f in dataclasses.fields(dtype)}
            unknown = sorted(set(values) - fields)
            if unknown:
                raise ValueError(f"Unknown option(s) in {known.config}: {unknown}.")
            self.set_defaults(**values)
            for action in self._actions:  # values from the file satisfy required options
                if action.dest in values:
                    action.required = False
            from_file = set(values)
        outputs = self.parse_args_into_dataclasses(args=rest)
        if not return_given:
            return outputs
        # argparse fills in a default only where the namespace lacks the attribute: what keeps the marker was not given.
        probe = argparse.Namespace(**{action.dest: _NOT_GIVEN for action in self._actions})
        self.parse_known_args(rest, namespace=probe)
        on_command_line = {name for name, value in vars(probe).items() if value is not _NOT_GIVEN}
        parsed = vars(self.parse_known_args(rest)[0])  # what the dataclasses were built from
        return (*outputs, {name: parsed[name] for name in sorted(from_file | on_command_line)})
