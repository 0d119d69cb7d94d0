from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import elical_hf
from elical_hf import AutoModelForConfidence
from elical_hf.cli import COMMANDS
from elical_hf.cli import main as cli_main
from elical_hf.cli.parser import ElicalArgumentParser


REPO = Path(__file__).resolve().parents[1]


@dataclass
class Options:
    name: str = field(metadata={"help": "required"})
    size: int = 3
    rate: float = 0.5


def test_help_and_unknown_command(capsys):
    assert cli_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "demo" in out
    assert cli_main(["nonsense"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_console_script_is_installed():
    """The `elical-hf` script that installation puts next to this interpreter runs and dispatches."""
    script = shutil.which("elical-hf", path=os.path.dirname(sys.executable))
    assert script is not None, f"no elical-hf script in {os.path.dirname(sys.executable)}: run `pip install -e .`"
    result = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: elical-hf <command>")
    listed = {line.split()[0] for line in result.stdout.split("commands:")[1].splitlines() if line.strip()}
    assert listed == set(COMMANDS)
    result = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == f"elical-hf {elical_hf.__version__}"
    result = subprocess.run([sys.executable, "-m", "elical_hf.cli", "nonsense"], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 2 and "unknown command 'nonsense'" in result.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_commands_are_registered(command, capsys):
    """Each command's module builds a dataclass parser, and its --help names every option of its dataclasses (of its
    `make_help_parser()` where it has one: `train`, whose full list is `--help_all`'s)."""
    module = importlib.import_module(COMMANDS[command][0])
    parser = getattr(module, "make_help_parser", module.make_parser)()
    assert isinstance(parser, ElicalArgumentParser) and parser.prog == f"elical-hf {command}"
    with pytest.raises(SystemExit) as exit_info:
        cli_main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    names = [f for dtype in parser.dataclass_types for f in dataclasses.fields(dtype) if f.init]
    assert names
    for f in names:
        shown = f.name if f.metadata.get("positional") else f"--{f.name}"
        assert re.search(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", out), f"{command} --help lacks {shown}"
    assert "--config FILE.yaml" in out


def test_train_help_all_lists_every_training_argument(capsys):
    """`train --help` lists EliCal's options without torch; `--help_all` every field of the run's parser (all of
    `TrainingArguments`), and the help parser's fields are a subset of the run parser's."""
    from elical_hf.cli import train

    run_fields = {f.name for dtype in train.make_parser().dataclass_types for f in dataclasses.fields(dtype) if f.init}
    help_fields = {f.name for dtype in train.make_help_parser().dataclass_types for f in dataclasses.fields(dtype)}
    assert help_fields < run_fields and {"learning_rate", "num_train_epochs", "stage"} <= run_fields
    assert cli_main(["train", "--help_all"]) == 0
    out = capsys.readouterr().out
    for name in run_fields:
        assert re.search(rf"(?<![\w-])--{name}(?![\w-])", out), f"train --help_all lacks --{name}"
    with pytest.raises(SystemExit):
        cli_main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--learning_rate LEARNING_RATE" not in out and "--help_all" in out and "--output_dir DIR" in out


def test_yaml_config_sets_defaults_and_flags_override(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("name: from-yaml\nsize: 7\n")
    (options,) = ElicalArgumentParser(Options).parse_with_config(["--config", str(config), "--size", "9"])
    assert (options.name, options.size, options.rate) == ("from-yaml", 9, 0.5)
    config.write_text("name: x\nsise: 7\n")
    with pytest.raises(ValueError, match="Unknown option.*sise"):
        ElicalArgumentParser(Options).parse_with_config(["--config", str(config)])


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_example_script_trains_one_stage(tiny_llama, tmp_path):
    rows = [{"question": f"who wrote hamlet {i}", "consistency": (i % 4) / 3} for i in range(24)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tmp_path / "config.yaml"
    config.write_text("per_device_train_batch_size: 4\nnum_train_epochs: 1\neval_strategy: epoch\nuse_cpu: true\n")
    out = tmp_path / "out"
    load_example("train_elical").main([
        "--config", str(config), "--model_name_or_path", tiny_llama, "--train_file", str(data),
        "--output_dir", str(out), "--report_to", "none",
    ])
    model = AutoModelForConfidence.from_pretrained(out)
    assert model.confidence_config.trained_stages == ["elicitation"]
    assert model.confidence_config.training_history[0]["num_examples"] < 24  # a dev split was carved out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_its_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"elical-hf {command}" in capsys.readouterr().out


@dataclass
class WithPositionals:
    source: str = field(metadata={"positional": True, "help": "where from"})
    repo_id: str = field(metadata={"positional": True, "help": "where to"})
    private: bool = False
    keep: bool = True
    size: int = 3


def test_positional_fields_and_given_options(tmp_path):
    parser = ElicalArgumentParser(WithPositionals, prog="x")
    assert "usage: x [-h]" in parser.format_usage() and "source repo_id" in parser.format_usage()
    options, given = parser.parse_with_config(["a", "b/c", "--private", "--no_keep"], return_given=True)
    assert (options.source, options.repo_id, options.private, options.keep, options.size) == ("a", "b/c", True, False, 3)
    assert given == {"source": "a", "repo_id": "b/c", "private": True, "keep": False}  # size: left at its default
    config = tmp_path / "c.yaml"
    config.write_text("size: 5\nrepo_id: d/e\n")
    options, given = ElicalArgumentParser(WithPositionals).parse_with_config(
        ["--config", str(config), "a", "b/c", "--size", "7"], return_given=True
    )
    assert (options.repo_id, options.size) == ("b/c", 7) and given == {"source": "a", "repo_id": "b/c", "size": 7}
    with pytest.raises(SystemExit):
        ElicalArgumentParser(WithPositionals).parse_with_config(["only-one"])


def test_convert_and_push_keep_their_flags():
    from elical_hf.cli import convert, push

    (options,) = convert.make_parser().parse_with_config(
        ["authors/release", "out", "--base_model", "b", "--no_chat_template", "--no_reference_special_tokens"]
    )
    assert (options.src, options.dst, options.base_model) == ("authors/release", "out", "b")
    assert options.no_chat_template and not options.reference_special_tokens
    (options,) = convert.make_parser().parse_with_config(["authors/release", "out"])
    assert not options.no_chat_template and options.reference_special_tokens and options.prompt_template is None
    (options,) = push.make_parser().parse_with_config(["folder", "alice/x", "--kind", "metric", "--private"])
    assert (options.source, options.repo_id, options.kind, options.private) == ("folder", "alice/x", "metric", True)
    with pytest.raises(SystemExit):
        push.make_parser().parse_with_config(["folder", "alice/x", "--kind", "space"])


def test_train_passes_every_given_training_argument(tmp_path, monkeypatch):
    import elical_hf.recipe

    calls = []
    monkeypatch.setattr(elical_hf.recipe, "train_elical", lambda *args, **kwargs: calls.append((args, kwargs)) or {})
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"question": "q", "consistency": 0.5, "correctness": 0.5}) + "\n")
    config = tmp_path / "train.yaml"
    config.write_text("max_grad_norm: 0.5\nnum_labels: 10\n")
    base = ["train", "--elicitation_data", str(data), "--calibration_data", str(data)]
    assert cli_main([*base, "--config", str(config), "--output_dir", str(tmp_path / "out"), "--learning_rate", "1e-4",
                     "--lr_scheduler_type", "cosine", "--seed", "7", "--calibration_trainable", "all",
                     "--per_device_train_batch_size", "4", "--bf16", "false", "--no_cal_only"]) == 0
    (args, kwargs), = calls
    assert args[0] == elical_hf.DEFAULT_MODEL and args[3] == str(tmp_path / "out")
    assert (kwargs["seed"], kwargs["calibration_trainable"], kwargs["num_labels"], kwargs["cal_only"]) == (7, "all", 10, False)
    # exactly the training arguments given (file and flags); the rest keep the recipe's defaults (e.g. paper epochs)
    assert kwargs["training_args"] == {"bf16": False, "learning_rate": 1e-4, "lr_scheduler_type": "cosine",
                                       "max_grad_norm": 0.5, "per_device_train_batch_size": 4}
    for per_run, value in (("--stage", "calibration"), ("--label_column", "x")):
        with pytest.raises(SystemExit) as exit_info:
            cli_main([*base, "--output_dir", str(tmp_path / "out"), per_run, value])
        assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:  # --output_dir stays required
        cli_main(base)
    assert exit_info.value.code == 2
    assert len(calls) == 1
