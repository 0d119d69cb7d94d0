"""`elical-hf baselines`: training-free confidences (Prob, N-Prob, Consis-Lex, Consis-Sem, Verbal-0, Verbal-10, and
Option-Prob for multiple-choice questions).

Reads judged HonestyBench records (a jsonl/parquet file or a folder of them), adds one `confidence_<name>` column per
baseline and writes them atomically to `--output`. Verbal baselines run `--model`; Verbal-10 draws its demonstrations
from `--train_records` (never from the scored records). Option-Prob reads `--model`'s probability of each option
letter after the multiple-choice prompt (stored as `option_probabilities`; records that carry them, e.g. read from
lm-evaluation-harness logs, need no model). When every record has a greedy correctness label, the AUROC
(x100) of each baseline is printed too.
"""

from __future__ import annotations

from elical_hf.steps.baselines import BaselinesArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(BaselinesArguments, prog="elical-hf baselines", description=__doc__,
                                overrides={"output": {"required": True}})


def main(argv: list[str] | None = None, complete=None) -> int:
    from elical_hf.utils.atomic import json_text
    from elical_hf.steps import score_baselines

    (options,) = make_parser().parse_with_config(argv)
    scored = score_baselines(options, complete=complete)
    print(json_text({"records": len(scored.records), "output": options.output, **scored.report}))
    return 0
