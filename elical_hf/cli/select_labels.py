"""`elical-hf select-labels`: choose which N questions to send for correctness labels (stage 2's few labels).

Reads a pool of questions (records without labels are fine: only `question` is needed), scores them with the stage-1
model, and writes the N chosen records to `--output` (`.parquet` or `.jsonl`). `--strategy random` (the default) is a
seeded uniform sample; `quantile` stratifies across confidence quantiles and `uniform` across confidence values (see
`elical_hf.label_selection`); random stays the default unless a stratified strategy is measured to calibrate better
(`docs/gate.md`).
"""

from __future__ import annotations

import json
import os
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
    from elical_hf.auto import AutoModelForConfidence
    from elical_hf.label_selection import SELECTION_STRATEGIES, select_for_labelling
    from elical_hf.signals.records import check_records_match, load_records, save_records

    from .records_command import check_output_outside

    (options,) = make_parser().parse_with_config(argv)
    if options.strategy not in SELECTION_STRATEGIES:  # before any model is loaded
        raise ValueError(f"--strategy must be one of {SELECTION_STRATEGIES}, got {options.strategy!r}.")
    check_output_outside(options.records, options.output)
    if os.path.exists(options.output) and os.path.realpath(options.output) == os.path.realpath(options.records):
        raise ValueError(f"--output {options.output} is the --records pool itself: writing the chosen records there "
                         "would destroy the pool. Write them to another file.")
    if os.path.exists(options.output) and not options.overwrite:
        raise ValueError(f"--output {options.output} exists; pass --overwrite to replace it.")
    pool = load_records(options.records)
    if options.split is not None:
        pool = [r for r in pool if r.get("split") == options.split]
    if not 1 <= options.num_labels <= len(pool):
        raise ValueError(f"--num_labels must lie in [1, {len(pool)}] (the pool's size), got {options.num_labels}.")
    model = AutoModelForConfidence.from_pretrained(options.model)
    check_records_match(pool, model.confidence_config.base_model_name_or_path, options.records,
                        options.allow_other_model)
    confidences = model.confidence([r["question"] for r in pool], batch_size=options.batch_size, progress=True)
    chosen = select_for_labelling(confidences, options.num_labels, options.strategy, options.seed)
    save_records([pool[i] for i in chosen], options.output)
    picked = [confidences[i] for i in chosen]
    print(json.dumps({"pool": len(pool), "chosen": len(chosen), "strategy": options.strategy, "output": options.output,
                      "stage1_confidence": {"pool_mean": sum(confidences) / len(pool),
                                            "chosen_mean": sum(picked) / len(picked),
                                            "chosen_min": min(picked), "chosen_max": max(picked)}}, indent=2))
    return 0
