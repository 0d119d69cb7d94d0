"""The values of a `--config FILE.yaml`, read as the command line reads its values, and what a config file may not set.

A config value goes through the conversion of the option it sets ([`config_value`]): the option's argparse `type`
(a YAML `2.5` or `true` for a whole-number option is refused, as `--num_samples 2.5` is), its `choices`, its `nargs`
(one value for a list option is a one-item list, never a string read character by character), and a YAML list for a
comma-separated option (`which: [prob, n_prob]`) is joined with commas. A wrong type is one `ValueError` naming the key.

A config file can be written by someone else than the person running the command (a shared recipe, a downloaded
example), so it may not choose where a secret goes nor what code runs ([`refuse_unsafe_config`]):

- an `*api_key_env` option (the environment variable whose value is sent as the endpoint's bearer token) may name only
  `OPENAI_API_KEY` or a variable whose name starts with `ELICAL_HF_` (put the endpoint's key in
  `ELICAL_HF_JUDGE_API_KEY`, say); any other variable must be named on the command line itself;
- an option that imports code (a field with `metadata={"command_line_only": True}`, e.g. `serve --retriever
  module:function`) is taken from the command line only.
"""

from __future__ import annotations

import argparse
import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any


CONFIG_API_KEY_ENVS = ("OPENAI_API_KEY",)
"""The environment variables, besides those named `ELICAL_HF_*`, that a `--config` file may name as an endpoint's bearer
token ([`config_may_name_secret`])."""

CONFIG_API_KEY_PREFIX = "ELICAL_HF_"


def config_may_name_secret(name: Any) -> bool:
    """Whether a `--config` file may name the environment variable `name` as an `*api_key_env`: `OPENAI_API_KEY`
    (the OpenAI-compatible default) or a name starting with `ELICAL_HF_` (exact case, as the environment's)."""
    return isinstance(name, str) and (name in CONFIG_API_KEY_ENVS or name.startswith(CONFIG_API_KEY_PREFIX))


def refuse_unsafe_config(values: Mapping[str, Any], config: str, command_line: Iterable[str],
                         command_line_only: Iterable[str]) -> None:
    """
    Refuse a `--config` file that sets an option a config file may not set (see the module's docstring), unless
    the command line names that option itself: one `ValueError` naming the key.

    Args:
        values (`Mapping[str, Any]`): The file's option values.
        config (`str`): The file's path, for the message.
        command_line (`Iterable[str]`): The `dest`s of the options the command line gives (abbreviations included).
        command_line_only (`Iterable[str]`): The `dest`s of the options that import code.
    """
    given = set(command_line)
    for key, value in values.items():
        if key in given:
            continue
        if key in set(command_line_only) and value is not None:
            raise ValueError(f"{key}: {value} in {config}: --{key} imports and runs code, so a config file may not "
                             f"set it; give it on the command line (--{key} {value}).")
        if key.endswith("api_key_env") and value is not None and not config_may_name_secret(value):
            raise ValueError(f"{key}: {value} in {config}: a config file may name only OPENAI_API_KEY or an "
                             f"{CONFIG_API_KEY_PREFIX}* variable as the endpoint's bearer token (put the key in, e.g., "
                             f"{CONFIG_API_KEY_PREFIX}{key.upper().removesuffix('_ENV')}); name any other on the "
                             f"command line itself (--{key} {value}).")


def _accepts_dict(annotation: Any) -> bool:
    """Whether the dataclass field annotation `annotation` admits a `dict` (a JSON string on the command line)."""
    return annotation is dict or typing.get_origin(annotation) is dict or any(
        _accepts_dict(arg) for arg in typing.get_args(annotation))


def _as_command_line(value: Any, key: str, config: str, annotation: Any) -> str:
    """`value` (one YAML scalar, or a mapping for a field that takes a dict) as the text the command line would
    give; a `ValueError` naming `key` for a list or mapping where one value goes."""
    if isinstance(value, Mapping) and _accepts_dict(annotation):
        return json.dumps(value)
    if isinstance(value, (list, tuple, Mapping)) or value is None:
        what = "nothing" if value is None else f"a {'mapping' if isinstance(value, Mapping) else 'list'}"
        raise ValueError(f"{key}: {value!r} in {config}: expected one value, got {what}.")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_value(parser: argparse.ArgumentParser, actions: list[argparse.Action], key: str, value: Any, config: str,
                 annotation: Any = None) -> Any:
    """
    The value the option `key` takes from its `--config` file value `value`, converted as on the command line.

    Args:
        parser (`argparse.ArgumentParser`): The parser that declares the option.
        actions (`list[argparse.Action]`): The option's actions (`--x` and `--no_x` share one `dest`).
        key (`str`): The option's name (its `dest`), for messages.
        value (`Any`): The YAML value.
        config (`str`): The file's path, for messages.
        annotation (`Any`, *optional*): The dataclass field's annotation (a mapping is accepted for a `dict` field).

    Returns:
        The converted value: a list for a list option, a comma-joined string for a comma-separated option.

    Raises:
        `ValueError`: One line naming `key` and `config`, for a value of the wrong type or out of `choices`.
    """
    action = next((a for a in actions if a.nargs != 0), actions[0])
    if value is None:
        if action.default is None:
            return None
        raise ValueError(f"{key} in {config} has no value; give one or leave the key out.")
    if getattr(action, "comma_separated", False) and isinstance(value, (list, tuple)):
        value = ",".join(_as_command_line(item, key, config, annotation) for item in value)
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 1
    if many:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if not items and action.nargs != "*":
            raise ValueError(f"{key}: [] in {config}: give at least one value or leave the key out.")
    else:
        items = [value]
    converted = []
    for item in items:
        text = _as_command_line(item, key, config, annotation)
        try:
            if action.nargs == 0:  # store_true / store_false / store_const: a yes or no
                from transformers.hf_argparser import string_to_bool

                result = action.const if string_to_bool(text) else action.default
            else:
                result = parser._get_value(action, text)
                parser._check_value(action, result)
        except argparse.ArgumentError as error:
            raise ValueError(f"{key}: {item!r} in {config}: {error.message}") from None
        except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
            raise ValueError(f"{key}: {item!r} in {config}: {error}") from None
        converted.append(result)
    return converted if many else converted[0]
