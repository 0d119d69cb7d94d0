"""`elical-hf select-labels`: choose which N questions to send for correctness labels (stage 2's few labels).

Reads a pool of questions (records without labels are fine: only `question` is needed), scores them with the stage-1
model, and writes the N chosen records to `--output` (`.parquet` or `.jsonl`). `--strategy random` (the default) is a
seeded uniform sample; `quantile` stratifies across confidence quantiles and `uniform` across confidence values (see
`elical_hf.label_selection`); random stays the default unless a stratified strategy is measured to calibrate better
(`docs/gate.md`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elical_hf.label_selection import DEFAULT_STRATEGY

from .parser import ElicalArgumentParser


@dataclass
class SelectLabelsArguments:
    """Options of `elical-hf select-labels` (also settable from `--config file.yaml`)."""

    model: str = field(metadata={"positional": True, "help": "The stage-1 (elicitation) confidence model folder."})
    records: str = field(metadata={"help": "The pool: a records file or folder (.jsonl / .parquet)."})
    output: str = field(metadata={"help": "Where the chosen records go (.parquet or .jsonl)."})
    num_labels: int = field(default=250, metadata={"help": "How many questions to choose."})
    strategy: str = field(default=DEFAULT_STRATEGY, metadata={"help": "random, quantile or uniform (see elical_hf.label_selection)."})
    split: str | None = field(default=None, metadata={"help": "Only records whose `split` is this (e.g. train)."})
    seed: int = field(default=0, metadata={"help": "Seed of the draw."})
    batch_size: int = field(default=16, metadata={"help": "Questions per forward pass when scoring."})
    allow_other_model: bool = field(
        default=False, metadata={"help": "Score records of another model than the confidence model's base (e.g. "
                                 "the model it was fine-tuned from)."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing --output file."})


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(SelectLabelsArguments, prog="elical-hf select-labels", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    import dataclasses

    from elical_hf.atomic import json_text
    from elical_hf.steps import select_labels

    (options,) = make_parser().parse_with_config(argv)
    print(json_text(select_labels(**dataclasses.asdict(options))))
    return 0
