from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

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
    result = subprocess.run([sys.executable, "-m", "elical_hf.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("elical-hf ")


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
