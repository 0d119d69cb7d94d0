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
    help_fields = {f.name for dtype in train.make_help_parser().dataclass_types for f in dataclasses.fields(dtype)
                   if f.init}
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


def test_positional_fields_and_overrides(tmp_path):
    parser = ElicalArgumentParser(WithPositionals, prog="x")
    assert "usage: x [-h]" in parser.format_usage() and "source repo_id" in parser.format_usage()
    (options,) = parser.parse_with_config(["a", "b/c", "--private", "--no_keep"])
    assert (options.source, options.repo_id, options.private, options.keep) == ("a", "b/c", True, False)
    assert options.size == 3
    config = tmp_path / "c.yaml"
    config.write_text("size: 5\nrepo_id: d/e\n")
    (options,) = ElicalArgumentParser(WithPositionals).parse_with_config(["--config", str(config), "a", "b/c"])
    assert (options.repo_id, options.size) == ("b/c", 5)
    with pytest.raises(SystemExit):
        ElicalArgumentParser(WithPositionals).parse_with_config(["only-one"])
    # a command may declare an option of a dataclass it shares otherwise (train: --output_dir required)
    overridden = ElicalArgumentParser(WithPositionals, overrides={"size": {"required": True, "default": None}})
    (options,) = overridden.parse_with_config(["a", "b/c", "--size", "4"])
    assert options.size == 4
    with pytest.raises(SystemExit):
        overridden.parse_with_config(["a", "b/c"])
    with pytest.raises(ValueError, match=r"overrides of options the parser does not have: \['sise'\]"):
        ElicalArgumentParser(WithPositionals, overrides={"sise": {"required": True}})


def test_convert_and_push_keep_their_flags():
    from elical_hf.cli import convert, push
    from elical_hf.settings.prompts import QA_PROMPT

    (options,) = convert.make_parser().parse_with_config(
        ["authors/release", "out", "--base_model", "b", "--no_chat_template", "--no_reference_special_tokens"]
    )
    assert (options.src, options.dst, options.base_model) == ("authors/release", "out", "b")
    assert options.no_chat_template and not options.reference_special_tokens
    (options,) = convert.make_parser().parse_with_config(["authors/release", "out"])
    assert not options.no_chat_template and options.reference_special_tokens
    assert (options.prompt_template, options.system_prompt) == (QA_PROMPT, None)  # sample's: the paper's QA prompt
    (options,) = push.make_parser().parse_with_config(["folder", "alice/x", "--kind", "metric", "--private"])
    assert (options.source, options.repo_id, options.kind, options.private) == ("folder", "alice/x", "metric", True)
    with pytest.raises(SystemExit):
        push.make_parser().parse_with_config(["folder", "alice/x", "--kind", "space"])


def test_train_passes_the_parsed_arguments(tmp_path, monkeypatch):
    """`train` hands the recipe the parsed training arguments as they are (file and flags), `None` where the recipe has
    a rule (epochs, patience), and `ModelArguments`' loading options as their `model_init_kwargs`."""
    import torch

    import elical_hf.training.recipe
    from elical_hf.training.recipe import changed_training_args

    calls = []
    monkeypatch.setattr(elical_hf.training.recipe, "train_elical", lambda *args, **kwargs: calls.append((args, kwargs)) or {})
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"question": "q", "consistency": 0.5, "correctness": 0.5}) + "\n")
    config = tmp_path / "train.yaml"
    config.write_text("max_grad_norm: 0.5\nnum_labels: 10\n")
    base = ["train", "--elicitation_data", str(data), "--calibration_data", str(data)]
    assert cli_main([*base, "--config", str(config), "--output_dir", str(tmp_path / "out"), "--learning_rate", "1e-4",
                     "--lr_scheduler_type", "cosine", "--seed", "7", "--calibration_trainable", "head",
                     "--per_device_train_batch_size", "4", "--bf16", "false", "--no_cal_only", "--dtype", "float32",
                     "--head_type", "mlp", "--model_init_kwargs", '{"attn_implementation": "eager"}']) == 0
    (args, kwargs), = calls
    assert args[0] == elical_hf.DEFAULT_MODEL and args[3] == str(tmp_path / "out")
    assert (kwargs["num_labels"], kwargs["cal_only"]) == (10, False)
    training = kwargs["training_args"]
    assert (training.seed, training.calibration_trainable, training.output_dir) == (7, "head", str(tmp_path / "out"))
    assert training.num_train_epochs is None and training.early_stopping_patience is None  # the recipe's rules
    assert training.model_init_kwargs == {"dtype": torch.float32, "load_in_4bit": False, "head_type": "mlp",
                                          "attn_implementation": "eager"}
    # the run manifest records the settings that differ from the defaults (seed and calibration_trainable apart)
    assert changed_training_args(training) == {"learning_rate": 1e-4, "lr_scheduler_type": "cosine",
                                               "max_grad_norm": 0.5, "per_device_train_batch_size": 4}
    for per_run, value in (("--stage", "calibration"), ("--label_column", "x")):  # the recipe sets them per run
        assert cli_main([*base, "--output_dir", str(tmp_path / "out"), per_run, value]) == 2
    assert cli_main([*base, "--output_dir", str(tmp_path / "out"), "--model_init_kwargs", '{"dtype": "float16"}']) == 2
    with pytest.raises(SystemExit) as exit_info:  # --output_dir stays required
        cli_main(base)
    assert exit_info.value.code == 2
    assert len(calls) == 1


def test_the_recipe_rules_fill_what_is_left_none(tmp_path, caplog):
    """Each run's arguments: the given settings as they are, the paper's epochs and patience 4 (with a dev split)
    where they are `None`; without a dev split no early stopping, with a warning when one was asked for."""
    from elical_hf import ConfidenceTrainingArguments
    from elical_hf.training.recipe import paper_epochs, run_arguments

    given = ConfidenceTrainingArguments(output_dir=str(tmp_path), num_train_epochs=None, learning_rate=1e-4, seed=3,
                                        model_init_kwargs={"head_type": "mlp"})  # a field: every copy keeps it
    run = run_arguments(given, str(tmp_path / "cal"), "calibration", "head", num_rows=200, has_dev=True)
    assert (run.num_train_epochs, run.early_stopping_patience, run.eval_strategy, run.save_total_limit) == (
        paper_epochs(200), 4, "epoch", 1)
    assert (run.stage, run.label_column, run.calibration_trainable) == ("calibration", "correctness", "head")
    assert (run.learning_rate, run.seed, run.output_dir, run.model_init_kwargs) == (
        1e-4, 3, str(tmp_path / "cal"), {"head_type": "mlp"})
    assert given.num_train_epochs is None and given.stage == "elicitation"  # the template is left as it was
    patient = ConfidenceTrainingArguments(output_dir=str(tmp_path), num_train_epochs=2, early_stopping_patience=2)
    run = run_arguments(patient, str(tmp_path / "e"), "elicitation", num_rows=200, has_dev=True)
    assert (run.num_train_epochs, run.early_stopping_patience) == (2, 2)
    with caplog.at_level("WARNING", logger="elical_hf.training.recipe"):
        run = run_arguments(patient, str(tmp_path / "e"), "elicitation", num_rows=3, has_dev=False)
    assert (run.early_stopping_patience, run.eval_strategy, run.load_best_model_at_end) == (None, "no", False)
    assert "training without early stopping" in caplog.text
    # no settings: the defaults, seeded by the stage's `seed`, with the rules; a dict of settings is refused
    run = run_arguments(None, str(tmp_path / "d"), "elicitation", num_rows=20_000, has_dev=False, seed=5)
    assert (run.num_train_epochs, run.early_stopping_patience, run.eval_strategy, run.seed) == (15, None, "no", 5)
    with pytest.raises(TypeError, match=r"pass ConfidenceTrainingArguments\(\*\*settings\)"):
        run_arguments({"learning_rate": 1e-3}, str(tmp_path / "d"), "elicitation", num_rows=20_000, has_dev=False)
