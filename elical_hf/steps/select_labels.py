"""`elical-hf select-labels` as a step: a stage-1 model and a pool of questions in, the questions to send for
correctness labels out ([`~elical_hf.evaluation.label_selection.select_for_labelling`])."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .arguments import RecordArguments, only
from ..evaluation.label_selection import DEFAULT_STRATEGY


__all__ = ["SelectLabelsArguments", "select_labels"]


@dataclass(kw_only=True)
class SelectLabelsArguments(only(RecordArguments, "records", "allow_other_model", "batch_size")):
    """Options of [`select_labels`] (`elical-hf select-labels`); `records` is the pool."""

    model: str = field(metadata={"positional": True, "help": "The stage-1 (elicitation) confidence model folder."})
    output: str = field(metadata={"help": "Where the chosen records go (.parquet or .jsonl)."})
    num_labels: int = field(default=250, metadata={"help": "How many questions to choose."})
    strategy: str = field(default=DEFAULT_STRATEGY,
                          metadata={"help": "random, quantile or uniform (see elical_hf.evaluation.label_selection)."})
    split: str | None = field(default=None, metadata={"help": "Only records of this paper split (train, in_domain_test, "
                              "ood_test, ...), as every --split reads records."})
    seed: int = field(default=0, metadata={"help": "Seed of the draw."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing --output file."})


def select_labels(args: SelectLabelsArguments) -> dict[str, Any]:
    """
    Choose which `args.num_labels` questions of a pool to send for correctness labels: score them with the stage-1
    model and draw them ([`~elical_hf.evaluation.label_selection.select_for_labelling`]), then write the chosen records
    to `args.output`.

    `args.model` is the stage-1 (elicitation) confidence model folder (trained: a base model is refused); the pool,
    `args.records`, is any records input (records without labels are fine: only `question` is needed), only those
    of the paper split `args.split` when given. `args.output` (`.parquet` or `.jsonl`) is not the pool itself, nor
    inside its folder, and an existing file only with `overwrite`; it is checked, as the model is, before anything is
    read.

    Returns:
        `dict`: `pool`, `chosen`, `strategy`, `output` and the stage-1 confidences' `pool_mean`, `chosen_mean`,
        `chosen_min`, `chosen_max`.
    """
    from ..models.auto import AutoModelForConfidence
    from ..utils.files import check_output_extension, refuse_output_over_inputs
    from ..evaluation.label_selection import SELECTION_STRATEGIES, select_for_labelling
    from ..signals.records import RECORD_EXTENSIONS, check_records_match, load_records, save_records
    from .evaluate import check_trained_model, model_confidences

    model, records, output, num_labels, strategy = args.model, args.records, args.output, args.num_labels, args.strategy
    if strategy not in SELECTION_STRATEGIES:  # before any model is loaded
        raise ValueError(f"--strategy must be one of {SELECTION_STRATEGIES}, got {strategy!r}.")
    refuse_output_over_inputs(output, {"--records": records, "MODEL": model})
    check_output_extension(output, RECORD_EXTENSIONS)
    if os.path.exists(output) and not args.overwrite:
        raise ValueError(f"--output {output} exists; pass --overwrite to replace it.")
    check_trained_model(model, model)
    pool = load_records(records, derive=False).to_list()  # written back as they are stored
    if args.split is not None:  # the paper split of each, as every --split reads records
        parts = load_records(records, derive=False, splits=True)["paper_split"]
        pool = [record for record, part in zip(pool, parts) if part == args.split]
        if not pool:
            raise ValueError(f"{records} has no record of the paper split {args.split!r} (it has "
                             f"{', '.join(sorted(set(parts)))}).")
    if not 1 <= num_labels <= len(pool):
        raise ValueError(f"--num_labels must lie in [1, {len(pool)}] (the pool's size), got {num_labels}.")
    stage1 = AutoModelForConfidence.from_pretrained(model)
    check_records_match(pool, stage1.confidence_config.base_model_name_or_path, str(records), args.allow_other_model)
    confidences = model_confidences(stage1, pool, batch_size=args.batch_size)
    chosen = select_for_labelling(confidences, num_labels, strategy, args.seed)
    save_records([pool[i] for i in chosen], output)
    picked = [confidences[i] for i in chosen]
    return {"pool": len(pool), "chosen": len(chosen), "strategy": strategy, "output": output,
            "stage1_confidence": {"pool_mean": sum(confidences) / len(pool), "chosen_mean": sum(picked) / len(picked),
                                  "chosen_min": min(picked), "chosen_max": max(picked)}}
