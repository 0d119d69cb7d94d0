"""`elical-hf train`: stage 1 on consistency, stage 2 on a label budget, and Cal-Only, each saved as a model.

Every option of `ConfidenceTrainingArguments` (and so of `transformers.TrainingArguments`) is a flag and applies to
all three runs (`--help` lists EliCal's own; `--help_all` all of them), except what the recipe sets per run: `--output_dir` gets elicitation/, elical/ and cal-only/,
`--seed` seeds the label subset, the dev splits and training, and `--calibration_trainable` is what stage 2 trains.
Options left unset keep the recipe's defaults (e.g. the paper's number of epochs for the data size).

A rerun with the same data and options resumes: finished models are kept and an interrupted one continues from its
last complete checkpoint. A non-empty `--output_dir` that holds another run (or no run) is refused unless
`--overwrite_output_dir`.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field

from elical_hf.default_model import DEFAULT_MODEL
from elical_hf.training_options import ConfidenceTrainingOptions

from .parser import ElicalArgumentParser, check_dtype_option


@dataclass
class TrainCommandArguments:
    """Options of `elical-hf train` besides the training arguments (all also settable from `--config file.yaml`)."""

    elicitation_data: str = field(metadata={"help": "Judged records (an `elical-hf judge` output, a judged sample or "
                                  "HonestyBench folder, a Hub dataset) or a table with `question` and `consistency` "
                                  "(jsonl/parquet/csv/json/arrow/saved dataset)."})
    calibration_data: str = field(metadata={"help": "Judged records, or a table with `question` and `correctness`."})
    model_name_or_path: str = field(default=DEFAULT_MODEL, metadata={"help": "Base causal LM (Hub id or folder)."})
    num_labels: int | None = field(default=None, metadata={"help": "Stage-2 label budget (default: all rows)."})
    num_elicitation: int | None = field(
        default=None, metadata={"help": "Stage-1 budget: a seeded random subset of this many elicitation rows "
                                "(default: all rows)."}
    )
    num_samples_used: int | None = field(
        default=None, metadata={"help": "Derive the consistency and correctness targets of judged records from their "
                                "first N samples only (the paper's k ablation; default: every sample)."}
    )
    cal_only: bool = field(default=True, metadata={"help": "Also train Cal-Only on the same labels."})
    dev_fraction: float = field(default=0.1, metadata={"help": "Share of rows held out (by question) for early stopping."})
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train anew in an --output_dir that is not empty or holds a run with other data or options "
                  "(its models are replaced). Without it such a folder is refused, and the same run is resumed."},
    )
    dtype: str = field(
        default="auto",
        metadata={"help": "Backbone dtype: 'auto' (the precision policy: bf16 on GPUs that support it and on CPUs where "
                  "it is native and faster, else float32), or 'float32' / 'bfloat16' / 'float16'."},
    )
    load_in_4bit: bool = field(
        default=False,
        metadata={"help": "Load the frozen backbone in 4 bits (QLoRA: NF4, bitsandbytes, one CUDA GPU), computing in "
                  "--dtype; for 7B-class backbones on one GPU."},
    )
    allow_other_model: bool = field(
        default=False, metadata={"help": "Train on records of another model than --model_name_or_path (e.g. of the "
                                 "model it was fine-tuned from). Without it such records are refused."})
    head_type: str = field(
        default="linear",
        metadata={"help": "Head of the fresh models: 'linear' (the paper's) or 'mlp' (H -> H/2 -> H/4 -> 1 with ReLU, "
                  "the reference code's no-LoRA ablation head).", "choices": ["linear", "mlp"]},
    )
    head_init: str = field(
        default="normal",
        metadata={"help": "How a fresh head is drawn: 'normal' (transformers' N(0, 0.02), bias 0) or 'torch_default' "
                  "(PyTorch's uniform +-1/sqrt(H), the reference code's).", "choices": ["normal", "torch_default"]},
    )
    feature_layer: int | None = field(
        default=None,
        metadata={"help": "The hidden state the head reads, as transformers' output_hidden_states indexes them: i = "
                  "the residual stream after decoder block i (no final norm), the number of layers = the final, "
                  "normed state (the default, the paper's); negative counts from the end (-1 final, -8 the 8th from "
                  "the end). Only the blocks up to it run and get a LoRA."},
    )

    def __post_init__(self) -> None:
        check_dtype_option(self.dtype)
        if not 0.0 <= self.dev_fraction < 1.0:  # checked before any file is read or written
            raise ValueError(f"--dev_fraction must lie in [0, 1), got {self.dev_fraction}.")
        if self.num_labels is not None and self.num_labels < 2:
            raise ValueError(f"--num_labels must be at least 2, got {self.num_labels}.")
        if self.num_elicitation is not None and self.num_elicitation < 2:
            raise ValueError(f"--num_elicitation must be at least 2, got {self.num_elicitation}.")
        if self.num_samples_used is not None and self.num_samples_used < 1:
            raise ValueError(f"--num_samples_used must be at least 1, got {self.num_samples_used}.")


RECIPE_ARGUMENTS = ("output_dir", "seed", "calibration_trainable")
"""Training arguments that `train_elical` takes as its own parameters (it sets them per run)."""

PER_STAGE_ARGUMENTS = ("stage", "label_column")
"""Training arguments that the recipe decides per run, so not options of this command."""


USAGE = "%(prog)s --elicitation_data FILE --calibration_data FILE --output_dir DIR [options] (see --help)"
OUTPUT_DIR_HELP = "Gets elicitation/, elical/ and cal-only/ model folders."
HELP_ALL = "--help_all"


def make_parser() -> ElicalArgumentParser:
    """The parser of a run: this command's options and every field of `ConfidenceTrainingArguments` (imports torch,
    as `transformers.TrainingArguments` does)."""
    from elical_hf.training_args import ConfidenceTrainingArguments

    parser = ElicalArgumentParser(
        (TrainCommandArguments, ConfidenceTrainingArguments), prog="elical-hf train", description=__doc__, usage=USAGE
    )
    for action in parser._actions:
        if action.dest == "output_dir":
            action.required = True
            action.help = OUTPUT_DIR_HELP
    return parser


def make_help_parser() -> ElicalArgumentParser:
    """The parser `elical-hf train --help` prints, without torch: this command's options and EliCal's training options
    ([`~elical_hf.training_options.ConfidenceTrainingOptions`]); `--help_all` prints [`make_parser`]'s."""
    parser = ElicalArgumentParser(
        (TrainCommandArguments, ConfidenceTrainingOptions), prog="elical-hf train", description=__doc__, usage=USAGE,
        epilog="Every option of transformers.TrainingArguments is accepted too (--learning_rate, --num_train_epochs, "
        f"--per_device_train_batch_size, --seed, --report_to, ...): `elical-hf train {HELP_ALL}` lists them all.",
    )
    parser.add_argument("--output_dir", metavar="DIR", required=True, help=OUTPUT_DIR_HELP)
    parser.add_argument(HELP_ALL, action="store_true", help="List every option, TrainingArguments' included.")
    return parser


def main(argv: list[str] | None = None) -> int:
    from elical_hf.atomic import json_text
    from elical_hf.precision import resolve_dtype
    from elical_hf.steps import train
    from elical_hf.training_args import ConfidenceTrainingArguments

    parser = make_parser()
    if HELP_ALL in (sys.argv[1:] if argv is None else argv):
        parser.print_help()
        return 0
    options, training_args, given = parser.parse_with_config(argv, return_given=True)
    fixed = sorted(set(given) & set(PER_STAGE_ARGUMENTS))
    if fixed:
        parser.error(f"{', '.join('--' + name for name in fixed)}: set per run by the recipe, not an option here.")
    passed = {f.name for f in dataclasses.fields(ConfidenceTrainingArguments) if f.init} - set(RECIPE_ARGUMENTS)
    trained = train(
        options.elicitation_data, options.calibration_data, training_args.output_dir,
        model_name_or_path=options.model_name_or_path, num_labels=options.num_labels,
        num_elicitation=options.num_elicitation, num_samples_used=options.num_samples_used, cal_only=options.cal_only,
        dev_fraction=options.dev_fraction, calibration_trainable=training_args.calibration_trainable.value,
        seed=training_args.seed, overwrite_output_dir=options.overwrite_output_dir,
        allow_other_model=options.allow_other_model,
        # each run derives the rest of its training arguments
        training_args={name: value for name, value in given.items() if name in passed},
        model_init_kwargs={"dtype": resolve_dtype(options.dtype), "load_in_4bit": options.load_in_4bit,
                           **head_options(options)},
    )
    print(json_text(trained["models"]))
    for name, cell in (trained["diagnosis"] or {"datasets": {}})["datasets"].items():
        print(f"diagnosis, {name}: {cell['verdict']}.")
    return 0


def head_options(options: TrainCommandArguments) -> dict[str, str | int]:
    """`--head_type` / `--head_init` / `--feature_layer` where they differ from the defaults (a run that leaves them
    keeps the run manifest it had before they existed, so it still resumes)."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainCommandArguments)}
    return {name: getattr(options, name) for name in ("head_type", "head_init", "feature_layer")
            if getattr(options, name) != defaults[name]}
