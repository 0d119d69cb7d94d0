"""Each command-line option is declared once: no option name in two of the commands' dataclasses (but the homonyms
below, one word for different options), and every command accepts exactly the flags, with the defaults, it accepted
before the option groups (`tests/data/cli_options.json`, written by `tests/data/cli_options.py`)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from elical_hf.steps.arguments import ModelArguments, RecordArguments, only
from elical_hf.cli import COMMANDS
from elical_hf.cli.parser import ElicalArgumentParser


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
sys.path.insert(0, DATA)
from cli_options import FIXTURE, command_options  # noqa: E402


CHANGED_DEFAULTS = {
    ("train", "--num_train_epochs"): None, ("train", "--num-train-epochs"): None,
}
"""Defaults that changed on purpose: `train --num_train_epochs` is `None`, the recipe's rule (the paper's epochs for
the data size), which the recipe applied to an unset value before too."""

HOMONYMS = {
    "base_model": "push: the Hub id a local base path stands for (checked against the adapter's); convert-official: "
                  "the model the release is loaded on (a Hub id or folder, default the release's): two options",
    "baselines": "demo: a list, the six of its live run (verbal ones included); evaluate: four, comma-separated: one "
                 "declaration would change either's default or syntax",
    "batch_size": "sample: SamplingSettings' decoding batch (None: chosen for the machine), not RecordArguments' 16 "
                  "questions: one default would change the batches of sample or of every other command",
    "bootstrap": "evaluate: 0 (no intervals) by default; demo, diagnose, probe-layers: 1000 resamples of their own: "
                 "one default would add intervals to evaluate (and its time) or drop the others'",
    "learning_rate": "demo: its head calibration's (1e-3); train: TrainingArguments' (5e-5, the paper's): two recipes",
    "log_level": "serve: uvicorn's log level (info); train: TrainingArguments' logging level (passive): two loggers, "
                 "two sets of choices",
    "max_new_tokens": "demo: answer length (24); judge: LLM judge reply length (64); sample: answer length (256)",
    "model": "a different model in each: positional folder (threshold, select-labels, probe-layers, serve, export), "
             "NAME=PATH list (evaluate), verbal baselines' model (baselines), optional sampler (sample)",
    "model_name_or_path": "demo: DemoSettings' (elical_hf/demo.py), a positional dataclass whose fields demo.json "
                          "records in order: taking ModelArguments' field would reorder them",
    "num_labels": "train: stage-2 budget (None: all); evaluate: probes' labels (0: all); select-labels: 250 to choose; "
                  "demo: 100",
    "num_samples": "demo: 4 live samples (its CPU time); sample: SamplingSettings' k (20, the paper's)",
    "num_workers": "judge: None, a Slurm array's task count (else 1); sample: 1, no Slurm array read: one declaration "
                   "would change what one of them does by default",
    "output": "a different file or folder per command (judged records, scored records, a diagnosis, a probe report, "
              "chosen records; required in select-labels)",
    "output_dir": "a different folder per command (report, shards, merged shards, training runs, the demo, an export), "
                  "required in some",
    "records": "demo: its committed records by default; RecordArguments' is required",
    "revision": "push: the branch to commit to; convert-official: the revision of SRC to download",
    "seed": "the seed of each command's own draws: 42 (train: TrainingArguments', sample, baselines, demo) or 0 "
            "(evaluate's bootstrap, diagnose, probe-layers, select-labels): one default would change the draws, so the "
            "output, of the commands of the other",
    "split": "a paper split everywhere (a record's `paper_split`), with each command's default: threshold and monitor "
             "in_domain_test, probe-layers train, diagnose and select-labels None (no filter)",
    "worker_index": "judge: None, this Slurm array task's index (else 0); sample: 0 (see num_workers)",
}
"""One word, different options: the same flag name in two commands' dataclasses for options that differ in default or
meaning. Anything else declared twice is one option written twice: fold it into a group of `elical_hf.steps.arguments`."""


def declaring_class(dtype: type, name: str) -> type:
    """The class that declares field `name` of dataclass `dtype` (the first of its MRO that annotates it)."""
    return next(cls for cls in dtype.__mro__ if name in cls.__dict__.get("__annotations__", {}))


def declarations(parsers: dict[str, list[ElicalArgumentParser]]) -> dict[str, set[str]]:
    """Option name -> the classes that declare it, over the dataclasses of `{command: [its parsers]}`."""
    found: dict[str, set[str]] = defaultdict(set)
    for command_parsers in parsers.values():
        for parser in command_parsers:
            for dtype in parser.dataclass_types:
                for f in dataclasses.fields(dtype):
                    if f.init:
                        cls = declaring_class(dtype, f.name)
                        found[f.name].add(f"{cls.__module__}.{cls.__qualname__}")
    return found


def command_parsers() -> dict[str, list[ElicalArgumentParser]]:
    parsers = {}
    for command, (module_name, _) in COMMANDS.items():
        module = importlib.import_module(module_name)
        helper = [module.make_help_parser()] if hasattr(module, "make_help_parser") else []
        parsers[command] = [module.make_parser(), *helper]
    return parsers


FOLDED = {
    "dtype": {"elical_hf.steps.arguments.ModelArguments"},  # was train's, sample's and serve's
    "batch_size": {"elical_hf.steps.arguments.RecordArguments", "elical_hf.signals.settings.SamplingSettings"},  # 6 + sample
    "records": {"elical_hf.steps.arguments.RecordArguments", "elical_hf.demo.DemoSettings"},
    "allow_incomplete": {"elical_hf.steps.arguments.RecordArguments"},
    "allow_other_model": {"elical_hf.steps.arguments.RecordArguments"},
    "shard_size": {"elical_hf.steps.arguments.ShardArguments"},
    "lexical_scoring": {"elical_hf.steps.arguments.LexicalScoringArguments"},
    "token": {"elical_hf.cli.parser.HubArguments"},
    "overwrite_output_dir": {"elical_hf.steps.arguments.OverwriteArguments"},  # was train's, evaluate's and export's
    "report_to": {"elical_hf.settings.training_options.TrackerOptions"},  # TrainingArguments' and evaluate's
    "run_name": {"elical_hf.settings.training_options.TrackerOptions"},
    "project": {"elical_hf.settings.training_options.TrackerOptions"},
    "prompt_template": {"elical_hf.signals.settings.SamplingSettings"},  # sample's and convert-official's
    "system_prompt": {"elical_hf.signals.settings.SamplingSettings"},
}
"""Where the options that several commands share are declared now."""


def test_no_option_is_declared_in_two_dataclasses():
    found = declarations(command_parsers())
    twice = {name for name, classes in found.items() if len(classes) > 1}
    again = {name: found[name] for name in twice - set(HOMONYMS)}
    assert again == {}, f"declared twice: {again}"
    assert set(HOMONYMS) - twice == set(), "no longer homonyms (leave HOMONYMS): " + str(set(HOMONYMS) - twice)
    assert {name: found[name] for name in FOLDED} == FOLDED


def test_the_two_api_key_options_share_one_help():
    from elical_hf.steps.arguments import api_key_env_help
    from elical_hf.steps import JudgeArguments, SampleArguments

    helps = {f.name: f.metadata["help"] for dtype in (JudgeArguments, SampleArguments)
             for f in dataclasses.fields(dtype)}
    assert helps["judge_api_key_env"] == api_key_env_help("--judge_endpoint")
    assert helps["api_key_env"] == "'openai' backend: " + api_key_env_help("--endpoint")


@dataclass(kw_only=True)
class _Again:
    """A command dataclass that declares `batch_size` once more."""

    records: str = field(metadata={"help": "x"})
    batch_size: int = 8


def test_the_check_sees_an_option_declared_again():
    parsers = {"a": [ElicalArgumentParser(only(RecordArguments, "records", "batch_size"))],
               "b": [ElicalArgumentParser(_Again)]}
    found = declarations(parsers)
    assert found["batch_size"] == {"elical_hf.steps.arguments.RecordArguments", f"{__name__}._Again"}
    assert len(found["records"]) == 2 and "allow_incomplete" not in found  # left out by `only`


def test_every_command_accepts_the_flags_it_accepted_before():
    with open(FIXTURE, encoding="utf-8") as handle:
        before = json.load(handle)
    now = command_options()
    for parser_name, options in before.items():
        assert sorted(now[parser_name]) == sorted(options), parser_name
        for option, declared in options.items():
            expected = dict(declared)
            if (parser_name, option) in CHANGED_DEFAULTS:
                expected["default"] = CHANGED_DEFAULTS[parser_name, option]
            assert now[parser_name][option] == expected, (parser_name, option)


def test_only_gives_a_command_part_of_a_group():
    part = only(RecordArguments, "records", "batch_size")
    assert part is only(RecordArguments, "records", "batch_size") and issubclass(part, RecordArguments)
    assert [f.name for f in dataclasses.fields(part)] == ["records", "batch_size"]
    options = part(records="r.jsonl", batch_size=4)
    assert (options.allow_incomplete, options.allow_other_model) == (False, False)  # constants at their defaults
    assert dataclasses.asdict(options) == {"records": "r.jsonl", "batch_size": 4}
    with pytest.raises(TypeError):
        part(records="r.jsonl", allow_other_model=True)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):  # the group's checks still run
        part(records="r.jsonl", batch_size=0)
    with pytest.raises(ValueError, match=r"not used .*'--allow_other_model'"):  # not an option of the command
        ElicalArgumentParser(part).parse_with_config(["--records", "r", "--allow_other_model", "true"])
    assert only(RecordArguments, "allow_other_model")().records is None  # a required option left out: None
    with pytest.raises(ValueError, match=r"no option\(s\) \['nope'\]"):
        only(RecordArguments, "nope")
    with pytest.raises(ValueError, match="--dtype: Unknown dtype"):
        only(ModelArguments, "dtype")(dtype="float33")
