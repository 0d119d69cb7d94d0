"""`elical-hf select-labels`: choose which N questions to send for correctness labels (stage 2's few labels).

Reads a pool of questions (records without labels are fine: only `question` is needed), scores them with the stage-1
model, and writes the N chosen records to `--output` (`.parquet` or `.jsonl`). `--strategy random` (the default) is a
seeded uniform sample; `quantile` stratifies across confidence quantiles and `uniform` across confidence values (see
`elical_hf.evaluation.label_selection`); random stays the default unless a stratified strategy is measured to calibrate
better (`docs/gate.md`).
"""

from __future__ import annotations

from elical_hf.steps.select_labels import SelectLabelsArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(SelectLabelsArguments, prog="elical-hf select-labels", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.utils.atomic import json_text
    from elical_hf.steps import select_labels

    (options,) = make_parser().parse_with_config(argv)
    print(json_text(select_labels(options)))
    return 0
