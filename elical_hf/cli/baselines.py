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

from dataclasses import dataclass, field

from elical_hf.arguments import LexicalScoringArguments, RecordArguments, only
from elical_hf.default_model import DEFAULT_MODEL

from .parser import ElicalArgumentParser


@dataclass(kw_only=True)
class BaselinesArguments(only(RecordArguments, "records", "allow_incomplete", "batch_size"), LexicalScoringArguments):
    """Options of `elical-hf baselines` (also settable from `--config file.yaml`); `--batch_size` is the verbal
    baselines' prompts per batch."""

    output: str = field(metadata={"help": "Where to write the records with `confidence_<name>` columns."})
    which: str = field(
        default="prob,n_prob,consis_lex,consis_sem",
        metadata={"help": "Comma-separated baselines: prob,n_prob,consis_lex,consis_sem,verbal0,verbal10,option_prob "
                  "(multiple-choice records).", "comma_separated": True},
    )
    train_records: str | None = field(
        default=None, metadata={"help": "Judged TRAIN records, the source of Verbal-10's demonstrations."}
    )
    model: str = field(default=DEFAULT_MODEL,
                       metadata={"help": "Answering model (Hub id or folder) of verbal0/10 and option_prob."})
    parser: str = field(default="paper", metadata={"help": "Verbal score parser: 'paper' (its regex) or 'robust'."})
    seed: int = field(default=42, metadata={"help": "Seed of the demonstration draw."})

    def __post_init__(self) -> None:
        from elical_hf.signals.baselines import BASELINES, SCORE_PARSERS
        from elical_hf.signals.records import record_format

        super().__post_init__()
        self.names = [name.strip() for name in self.which.split(",") if name.strip()]
        unknown = [name for name in self.names if name not in BASELINES]
        if not self.names or unknown:
            raise ValueError(f"--which must list baselines from {sorted(BASELINES)}, got {self.which!r}.")
        if self.parser not in SCORE_PARSERS:
            raise ValueError(f"--parser must be one of {sorted(SCORE_PARSERS)}, got {self.parser!r}.")
        if "verbal10" in self.names and not self.train_records:
            raise ValueError("verbal10 needs --train_records: demonstrations come from train records, never test.")
        record_format(self.output)


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(BaselinesArguments, prog="elical-hf baselines", description=__doc__)


def main(argv: list[str] | None = None, complete=None) -> int:
    from elical_hf.atomic import json_text
    from elical_hf.steps import score_baselines

    (options,) = make_parser().parse_with_config(argv)
    scored = score_baselines(
        options.records, options.names, output=options.output, complete=complete, model=options.model,
        train_records=options.train_records, parser=options.parser, seed=options.seed, batch_size=options.batch_size,
        lexical_scoring=options.lexical_scoring, allow_incomplete=options.allow_incomplete,
    )
    print(json_text({"records": len(scored.records), "output": options.output, **scored.report}))
    return 0
