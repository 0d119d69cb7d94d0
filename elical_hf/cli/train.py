"""`elical-hf train`: stage 1 on consistency, stage 2 on a label budget, and Cal-Only, each saved as a model.

Every option of `ConfidenceTrainingArguments` (and so of `transformers.TrainingArguments`) is a flag and applies to
all three runs (`--help` lists EliCal's own; `--help_all` all of them), except what the recipe sets per run:
`--output_dir` gets elicitation/, elical/ and cal-only/, `--seed` seeds the label subset, the dev splits and training,
and `--calibration_trainable` is what stage 2 trains. `--num_train_epochs` and `--early_stopping_patience` left unset
follow the recipe's rules (the paper's number of epochs for the data size; patience 4 with a dev split).

A rerun with the same data and options resumes: finished models are kept and an interrupted one continues from its
last complete checkpoint. A non-empty `--output_dir` that holds another run (or no run) is refused unless
`--overwrite_output_dir`.
"""

from __future__ import annotations

import sys

from elical_hf.steps.arguments import ModelArguments
from elical_hf.steps.train import TrainArguments
from elical_hf.settings.training_options import ConfidenceTrainingOptions

from .parser import ElicalArgumentParser


USAGE = "%(prog)s --elicitation_data FILE --calibration_data FILE --output_dir DIR [options] (see --help)"
OUTPUT_DIR_HELP = "Gets elicitation/, elical/ and cal-only/ model folders."
HELP_ALL = "--help_all"
RUN_OVERRIDES = {
    "output_dir": {"required": True, "help": OUTPUT_DIR_HELP},
    "num_train_epochs": {"default": None, "help": "Epochs of each run (default: the paper's rule for its number of "
                         "rows: 50 up to 10k, 10 from 500k, else 15)."},
}
"""How this command declares two `TrainingArguments` fields: `--output_dir` required, and `--num_train_epochs`
left to the recipe's rule unless given."""


def make_parser() -> ElicalArgumentParser:
    """The parser of a run: (`TrainArguments`, `ModelArguments`, `ConfidenceTrainingArguments`), every field of the
    last included (imports torch, as `transformers.TrainingArguments` does)."""
    from elical_hf.training.training_args import ConfidenceTrainingArguments

    return ElicalArgumentParser((TrainArguments, ModelArguments, ConfidenceTrainingArguments), prog="elical-hf train",
                                description=__doc__, usage=USAGE, overrides=RUN_OVERRIDES)


def make_help_parser() -> ElicalArgumentParser:
    """The parser `elical-hf train --help` prints, without torch: this command's options and EliCal's training options
    ([`~elical_hf.settings.training_options.ConfidenceTrainingOptions`]); `--help_all` prints [`make_parser`]'s."""
    parser = ElicalArgumentParser(
        (TrainArguments, ModelArguments, ConfidenceTrainingOptions), prog="elical-hf train", description=__doc__,
        usage=USAGE, epilog="Every option of transformers.TrainingArguments is accepted too (--learning_rate, "
        "--num_train_epochs, --per_device_train_batch_size, --seed, --logging_steps, ...): "
        f"`elical-hf train {HELP_ALL}` lists them all.",
    )
    parser.add_argument("--output_dir", metavar="DIR", required=True, help=OUTPUT_DIR_HELP)
    parser.add_argument(HELP_ALL, action="store_true", help="List every option, TrainingArguments' included.")
    return parser


def main(argv: list[str] | None = None) -> int:
    from elical_hf.utils.atomic import json_text
    from elical_hf.steps import train

    parser = make_parser()
    if HELP_ALL in (sys.argv[1:] if argv is None else argv):
        parser.print_help()
        return 0
    args, model_args, training_args = parser.parse_with_config(argv)
    trained = train(args, training_args, model_args)
    print(json_text(trained["models"]))
    for name, cell in (trained["diagnosis"] or {"datasets": {}})["datasets"].items():
        print(f"diagnosis, {name}: {cell['verdict']}.")
    return 0
