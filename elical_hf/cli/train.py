"""`elical-hf train`: stage 1 on consistency, stage 2 on a label budget, and Cal-Only, each saved as a model."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from elical_hf.embedded import DEFAULT_MODEL

from .parser import ElicalArgumentParser


@dataclass
class TrainCommandArguments:
    """Options of `elical-hf train` (also settable from `--config file.yaml`)."""

    elicitation_data: str = field(metadata={"help": "Table with `question` and `consistency` (jsonl/parquet/csv/dir/Hub id)."})
    calibration_data: str = field(metadata={"help": "Table with `question` and `correctness`."})
    output_dir: str = field(metadata={"help": "Gets elicitation/, elical/ and cal-only/ model folders."})
    model_name_or_path: str = field(default=DEFAULT_MODEL, metadata={"help": "Base causal LM (Hub id or folder)."})
    num_labels: int | None = field(default=None, metadata={"help": "Stage-2 label budget (default: all rows)."})
    calibration_trainable: str = field(default="head", metadata={"help": "Stage 2 trains 'head' or 'all' (LoRA + head)."})
    cal_only: bool = field(default=True, metadata={"help": "Also train Cal-Only on the same labels."})
    dev_fraction: float = field(default=0.1, metadata={"help": "Share of rows held out (by question) for early stopping."})
    seed: int = field(default=42, metadata={"help": "Seed of label subset, dev splits and training."})
    num_train_epochs: float | None = field(default=None, metadata={"help": "Epochs (default: the paper's rule by data size)."})
    learning_rate: float | None = field(default=None, metadata={"help": "Peak learning rate (default 5e-5)."})
    per_device_train_batch_size: int | None = field(default=None, metadata={"help": "Batch size per device."})
    gradient_accumulation_steps: int | None = field(default=None, metadata={"help": "Gradient accumulation steps."})
    bf16: bool | None = field(default=None, metadata={"help": "Train in bf16 mixed precision."})
    dtype: str = field(
        default="auto",
        metadata={"help": "Backbone dtype: 'auto' (the precision policy: bf16 on GPUs that support it and on CPUs where "
                  "it is native and faster, else float32), or 'float32' / 'bfloat16' / 'float16'."},
    )


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(TrainCommandArguments, prog="elical-hf train", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.data import load_table
    from elical_hf.precision import resolve_dtype
    from elical_hf.recipe import train_elical

    (options,) = make_parser().parse_with_config(argv)
    training = {
        name: getattr(options, name)
        for name in ("num_train_epochs", "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "bf16")
        if getattr(options, name) is not None
    }
    paths = train_elical(
        options.model_name_or_path,
        load_table(options.elicitation_data),
        load_table(options.calibration_data),
        options.output_dir,
        num_labels=options.num_labels,
        calibration_trainable=options.calibration_trainable,
        cal_only=options.cal_only,
        dev_fraction=options.dev_fraction,
        seed=options.seed,
        training_args=training,
        model_init_kwargs={"dtype": resolve_dtype(options.dtype)},
    )
    print(json.dumps(paths, indent=2))
    return 0
