"""`ElicalArgumentParser`: `HfArgumentParser` that also reads defaults from a YAML file (`--config x.yaml`), and the
options of the commands that talk to the Hub or to an OpenAI-compatible server."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from transformers import HfArgumentParser


@dataclass(kw_only=True)
class HubArguments:
    """The Hub token option of the commands that talk to the Hub (`push`, `convert-official`)."""

    token: str | None = field(
        default=None,
        metadata={"help": "Hub token; better left out: without it, the HF_TOKEN environment variable or the token of "
                  "`hf auth login` is used. A token given here is visible to other users of the machine (`ps`) and "
                  "stays in the shell history."},
    )


def api_key_env_help(endpoint_option: str) -> str:
    """The help of the option that names the environment variable holding `endpoint_option`'s bearer token
    (`judge --judge_api_key_env`, `sample --api_key_env`: two flags, one text)."""
    return (f"The NAME of the environment variable holding the {endpoint_option}'s bearer token (e.g. OPENAI_API_KEY; "
            "the token itself never goes on the command line, where `ps` shows it). Default: no token.")


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


class ElicalArgumentParser(HfArgumentParser):
    """
    Parse dataclasses from the command line; `--config file.yaml` sets defaults that flags then override.

    Unknown YAML keys are an error, so a typo never silently does nothing. A dataclass field with
    `metadata={"positional": True}` is a positional argument (`elical-hf push FOLDER REPO_ID`) instead of an option.
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

    def add_argument(self, *names: str, positional: bool = False, **kwargs: Any) -> argparse.Action:
        """`argparse.ArgumentParser.add_argument`, plus the `positional` metadata key of dataclass fields (which
        `HfArgumentParser` passes on here as a keyword) and this parser's `overrides`."""
        kwargs.update(self.overrides.get(names[0].lstrip("-"), {}) if names else {})
        if positional:
            kwargs.pop("required", None)  # positionals are required unless they have a default
            if "default" in kwargs:
                kwargs["nargs"] = "?"
            names = (names[0].lstrip("-"),)
        return super().add_argument(*names, **kwargs)

    def parse_with_config(self, argv: list[str] | None = None) -> tuple[Any, ...]:
        """
        Parse `argv` into the dataclasses, with the values of `--config FILE.yaml` as defaults.

        Args:
            argv (`list[str]`, *optional*): The arguments; defaults to `sys.argv[1:]`.

        Returns:
            `tuple`: one instance per dataclass.
        """
        pre = argparse.ArgumentParser(add_help=False)
        pre.add_argument("--config", default=None)
        known, rest = pre.parse_known_args(argv)
        if known.config is not None:
            try:
                with open(known.config, encoding="utf-8") as handle:
                    values = yaml.safe_load(handle) or {}
            except (yaml.YAMLError, UnicodeDecodeError) as error:
                raise ValueError(f"{known.config} is not a valid YAML file: {error}") from None
            if not isinstance(values, dict):
                raise ValueError(f"{known.config} must hold a mapping of option names to values.")
            fields = {f.name for dtype in self.dataclass_types for f in dataclasses.fields(dtype) if f.init}
            unknown = sorted(set(values) - fields)
            if unknown:
                raise ValueError(f"Unknown option(s) in {known.config}: {unknown}.")
            self.set_defaults(**values)
            for action in self._actions:  # values from the file satisfy required options
                if action.dest in values:
                    action.required = False
        return self.parse_args_into_dataclasses(args=rest)
