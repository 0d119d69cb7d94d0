"""Train one EliCal stage with the Hugging Face Trainer.

Stage 1 (elicitation) on self-consistency targets, from a base model:

    python examples/train_elical.py --model_name_or_path HuggingFaceTB/SmolLM2-135M-Instruct \
        --train_file records.jsonl --stage elicitation --output_dir out/elicitation

Stage 2 (calibration) from the stage-1 model, on a small correctness-labelled set:

    python examples/train_elical.py --model_name_or_path out/elicitation --train_file labels.jsonl \
        --stage calibration --calibration_trainable head --output_dir out/elical

Every option of `ConfidenceTrainingArguments` (and so of `transformers.TrainingArguments`) is a flag, and
`--config examples/configs/smollm2-cpu.yaml` reads defaults from a YAML file. `--resume_from_checkpoint
out/elicitation/checkpoint-500` continues an interrupted run. Multi-GPU: `accelerate launch --multi_gpu
--num_processes 4 examples/train_elical.py ...` (or `--config_file examples/configs/accelerate-fsdp.yaml` /
`accelerate-deepspeed-zero2.yaml`); see docs/scaling.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elical_hf import AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
from elical_hf.cli.parser import ElicalArgumentParser
from elical_hf.data.training_table import load_table
from elical_hf.models.default_model import DEFAULT_MODEL
from elical_hf.utils.distributed import end_process_group
from elical_hf.training.recipe import split_dev


@dataclass
class ScriptArguments:
    train_file: str = field(metadata={"help": "Table with `question` and the stage's target column."})
    model_name_or_path: str = field(
        default=DEFAULT_MODEL, metadata={"help": "Base causal LM, or a saved confidence model (stage 2)."}
    )
    eval_file: str | None = field(default=None, metadata={"help": "Dev table; default: carve one from train."})
    dev_fraction: float = field(default=0.1, metadata={"help": "Share of train held out as dev when no eval_file."})


def main(argv: list[str] | None = None) -> None:
    parser = ElicalArgumentParser((ScriptArguments, ConfidenceTrainingArguments))
    train_and_evaluate(*parser.parse_with_config(argv))
    end_process_group()  # under `accelerate launch`, once the Trainer (and its DDP wrapper) is out of scope


def train_and_evaluate(script_args: ScriptArguments, training_args: ConfidenceTrainingArguments) -> None:
    """One stage: train, save the confidence model to `output_dir`, and print the dev metrics if there is a dev set."""
    train = load_table(script_args.train_file)
    if script_args.eval_file is not None:
        dev = load_table(script_args.eval_file)
    else:
        train, dev = split_dev(train, script_args.dev_fraction, training_args.seed, "train")

    model = AutoModelForConfidence.from_pretrained(script_args.model_name_or_path, is_trainable=True)
    trainer = ConfidenceTrainer(model, args=training_args, train_dataset=train, eval_dataset=dev)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    if dev is not None:
        print(trainer.evaluate())


if __name__ == "__main__":
    main()
