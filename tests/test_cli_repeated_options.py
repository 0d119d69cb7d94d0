"""An option given twice is never silently dropped (issue 52; the rule of `elical_hf/cli/parser.py`, in `docs/cli.md`):
every list option of every command collects its occurrences in order, a comma-separated one joins them with commas,
any other option given again with a different value is refused in one line that names it, and a value on the command
line replaces the `--config` file's. The options are read from the commands' parsers themselves (as
`tests/test_cli_options.py` reads them), so an option added later is checked too."""

from __future__ import annotations

import argparse
import enum
import functools
import os
import sys
from typing import Any

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.cli.parser import CollectingAction, CommaSeparatedAction, SingleValueAction


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
from cli_options import command_parsers  # noqa: E402


CANDIDATES = ("1", "2", "0.5", "true", "false", "a", "b")
"""The values tried for an option (after its choices or its enum's values): the first that parse to different values
are the ones given."""

NAMED_IN_THE_ISSUE = {("evaluate", "--model"), ("evaluate", "--probes"), ("evaluate", "--field_sources"),
                      ("merge", "--inputs"), ("sample", "--stop_strings")}
COMMA_SEPARATED = {("evaluate", "--baselines"), ("baselines", "--which")}


@functools.cache
def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parsers, lenient: no option is required (positionals included) and a bad value raises
    `argparse.ArgumentError`, so that one option at a time can be parsed. Not for `parse_with_config`."""
    found = command_parsers()
    for parser in found.values():
        parser.exit_on_error = False
        for action in parser._actions:  # argparse has no public list of a parser's arguments
            action.required = False
    return found


def actions(kind: type[argparse.Action]) -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    """`(parser name, parser, action)` of every option (not positional) of exactly the action class `kind`."""
    return [(name, parser, action) for name, parser in parsers().items() for action in parser._actions
            if action.option_strings and type(action) is kind]


def parse(parser: argparse.ArgumentParser, argv: list[str], namespace: argparse.Namespace | None = None) -> Any:
    namespace, _ = parser.parse_known_args(argv, namespace)
    return namespace


def occurrences(parser: argparse.ArgumentParser, action: argparse.Action) -> list[tuple[list[str], Any]]:
    """The ways found to give `action` once (its first option string, and a value unless it takes none), one per
    value it stores: `[(argv, value)]`."""
    option = action.option_strings[0]
    tried = [[option]] if action.nargs in (0, "?") else []
    members = [member.value for member in action.type] if isinstance(action.type, enum.EnumMeta) else []
    if action.nargs != 0:
        tried += [[option, str(value)] for value in (*(action.choices or ()), *members, *CANDIDATES)]
    found: list[tuple[list[str], Any]] = []
    for argv in tried:
        try:
            value = getattr(parse(parser, argv), action.dest)
        except (argparse.ArgumentError, ValueError):
            continue
        if all(value != other for _, other in found):
            found.append((argv, value))
    return found


def two_values(name: str, parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[list[str], ...]:
    """Two one-occurrence argvs of `action` that store different values, with its first and its last option string
    (`--field_sources` and `--field-sources`)."""
    found = occurrences(parser, action)
    assert len(found) >= 2, f"{name} {action.option_strings[0]}: add a value it takes to CANDIDATES"
    (first, _), (second, _) = found[:2]
    return first, [action.option_strings[-1], *second[1:]]


def test_every_list_option_collects_every_occurrence():
    found = actions(CollectingAction)
    assert NAMED_IN_THE_ISSUE <= {(name, action.option_strings[0]) for name, _, action in found}
    for name, parser, action in found:
        first, second = two_values(name, parser, action)
        together = parse(parser, [*first, *second[1:]])  # --model a b
        collected = parse(parser, [*first, *second])  # --model a --model b
        assert getattr(collected, action.dest) == getattr(together, action.dest), (name, action.option_strings)
        assert len(getattr(collected, action.dest)) == 2, (name, action.option_strings)
        # the first occurrence replaces a value already there (a --config file's) instead of adding to it
        from_config = argparse.Namespace(**{action.dest: getattr(parse(parser, first), action.dest)})
        assert getattr(parse(parser, second, from_config), action.dest) == getattr(parse(parser, second), action.dest)


def test_every_comma_separated_option_joins_every_occurrence():
    found = actions(CommaSeparatedAction)
    assert {(name, action.option_strings[0]) for name, _, action in found} == COMMA_SEPARATED
    for name, parser, action in found:
        first, second = two_values(name, parser, action)
        assert getattr(parse(parser, [*first, *second]), action.dest) == f"{first[1]},{second[1]}", name
        from_config = argparse.Namespace(**{action.dest: "prob,n_prob"})
        assert getattr(parse(parser, second, from_config), action.dest) == second[1], name


def test_every_other_option_given_again_with_another_value_is_refused():
    groups: dict[tuple[str, str], list[argparse.Action]] = {}
    for name, _, action in actions(SingleValueAction):
        groups.setdefault((name, action.dest), []).append(action)
    never_given, checked = [], 0
    for (name, dest), group in groups.items():
        parser = parsers()[name]
        found: list[tuple[list[str], Any]] = []
        for action in group:  # `--x` and `--no_x` share one dest
            found += [(argv, value) for argv, value in occurrences(parser, action)
                      if all(value != other for _, other in found)]
        if not found:  # no command-line string is a value of it
            never_given.append((name, dest, group[0].type))
            continue
        (argv, value), *others = found
        assert getattr(parse(parser, [*argv, *argv]), dest) == value, (name, argv)  # the same value twice: fine
        if all(action.nargs == 0 for action in group):
            continue  # a lone flag (`train --help --help_all`) has one value
        assert others, f"{name} --{dest}: add a value it takes to CANDIDATES"
        again = others[0][0]
        with pytest.raises(ValueError) as refused:
            parse(parser, [*argv, *again])
        message = str(refused.value)
        assert "\n" not in message and "with different values" in message, (name, message)
        assert message.startswith(f"{argv[0]} given twice" if argv[0] == again[0] else
                                  f"{argv[0]} and {again[0]} both given"), (name, message)
        checked += 1
    assert checked > 300
    # TrainingArguments' options typed `dict` or a config class (`--liger_kernel_config`, `--parallelism_config`)
    assert all(name == "train" and kind not in (str, int, float) for name, _, kind in never_given), never_given


def test_the_spellings_of_one_option_are_one_option():
    parser = parsers()["evaluate"]
    assert parse(parser, ["--field_sources", "A=a", "--field-sources", "B=b"]).field_sources == ["A=a", "B=b"]
    assert parse(parser, ["--num_labels", "3", "--num-labels", "3"]).num_labels == 3
    with pytest.raises(ValueError, match=r"^--num_labels and --num-labels both given with different values \(3, then "
                       r"4\): give one of them"):
        parse(parser, ["--num_labels", "3", "--num-labels", "4"])
    with pytest.raises(ValueError, match=r"^--bootstrap given twice with different values \(1, then 2\)"):
        parse(parser, ["--boot", "1", "--bootstrap", "2"])  # an abbreviation is the option too
    train = parsers()["train"]
    assert parse(train, ["--no_cal_only", "--cal_only", "false"]).cal_only is False
    with pytest.raises(ValueError, match=r"^--cal_only and --no_cal_only both given with different values \(True, "
                       r"then False\)"):
        parse(train, ["--cal_only", "--no_cal_only"])


def test_the_issue_example_scores_all_four_models(monkeypatch, tmp_path):
    import elical_hf.steps

    class Scored(Exception):
        """Raised by the stand-in for the evaluate step, with the models it was given."""

    def scored(args, **kwargs):
        raise Scored(args.models)

    monkeypatch.setattr(elical_hf.steps, "evaluate", scored)
    with pytest.raises(Scored) as called:
        cli_main(["evaluate", "--records", "R", "--output_dir", str(tmp_path / "report"), "--model", "EliCal=a",
                  "--model", "CalOnly=b", "--model", "EliOnly=c", "--model", "Shipped=d"])
    assert called.value.args[0] == {"EliCal": "a", "CalOnly": "b", "EliOnly": "c", "Shipped": "d"}


def test_a_repeated_scalar_is_one_line_and_exit_2(capsys, tmp_path):
    assert cli_main(["evaluate", "--records", "R", "--output_dir", str(tmp_path), "--bootstrap", "100",
                     "--bootstrap", "1000"]) == 2
    err = capsys.readouterr().err
    assert err == ("elical-hf evaluate: error: --bootstrap given twice with different values (100, then 1000): give "
                   "it once (only list options collect several occurrences).\n")


def test_the_command_line_replaces_the_config_files_value(tmp_path):
    from elical_hf.cli.evaluate import make_parser

    config = tmp_path / "evaluate.yaml"
    config.write_text("records: R\noutput_dir: out\nmodel: [A=a, B=b]\nbaselines: prob,n_prob\nbootstrap: 5\n")
    base = ["--config", str(config)]
    (options,) = make_parser().parse_with_config(base)
    assert (options.model, options.baselines, options.bootstrap) == (["A=a", "B=b"], "prob,n_prob", 5)
    (options,) = make_parser().parse_with_config([*base, "--model", "C=c", "--model", "D=d", "--baselines",
                                                  "consis_lex", "--bootstrap", "7"])
    assert (options.model, options.baselines, options.bootstrap) == (["C=c", "D=d"], "consis_lex", 7)


def test_a_config_file_or_a_key_in_it_given_twice_is_refused(tmp_path):
    from elical_hf.cli.evaluate import make_parser

    config = tmp_path / "evaluate.yaml"
    config.write_text("records: R\noutput_dir: out\nbootstrap: 5\n")
    assert make_parser().parse_with_config(["--config", str(config), "--config", str(config)])[0].bootstrap == 5
    with pytest.raises(ValueError, match="^--config given twice with different values"):
        make_parser().parse_with_config(["--config", str(config), "--config", str(tmp_path / "other.yaml")])
    config.write_text("records: R\nmodel: [A=a]\noutput_dir: out\nmodel: [B=b]\n")
    with pytest.raises(ValueError, match=r"evaluate.yaml, line 4: 'model' written twice \(first on line 2\); write "
                       "it once.$"):
        make_parser().parse_with_config(["--config", str(config)])
