"""`ElicalArgumentParser`: `HfArgumentParser` that also reads defaults from a YAML file (`--config x.yaml`)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import yaml
from transformers import HfArgumentParser


class ElicalArgumentParser(HfArgumentParser):
    """
    Parse dataclasses from the command line; `--config file.yaml` sets defaults that flags then override.

    Unknown YAML keys are an error, so a typo never silently does nothing.
    """

    def parse_with_config(self, argv: list[str] | None = None) -> tuple[Any, ...]:
        pre = argparse.ArgumentParser(add_help=False)
        pre.add_argument("--config", default=None)
        known, rest = pre.parse_known_args(argv)
        if known.config is not None:
            with open(known.config, encoding="utf-8") as handle:
                values = yaml.safe_load(handle) or {}
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
        return self.parse_args_into_dataclasses(args=rest)
