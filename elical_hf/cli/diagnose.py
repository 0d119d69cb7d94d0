"""`elical-hf diagnose`: will elicitation help on this model? The teacher's quality on the labels you have.

Reads judged records (a jsonl/parquet file or a folder of them) with consistency judgements and greedy correctness and
prints, per dataset and overall, the teacher's AUROC (consistency vs greedy correctness, x100) with a bootstrap
interval, the number of correct answers it rests on, and one verdict line each. Run it on the ~100 labelled questions
you would calibrate on, before sampling stage 1 on 100k: where consistency does not track correctness, stage 1 teaches
the wrong signal (docs/results.md measures how often the verdict is right).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elical_hf.arguments import RecordArguments, only

from .parser import ElicalArgumentParser


@dataclass(kw_only=True)
class DiagnoseArguments(only(RecordArguments, "records", "allow_incomplete")):
    """Options of `elical-hf diagnose` (also settable from `--config file.yaml`)."""

    split: str | None = field(default=None, metadata={"help": "Only records of this split/partition (e.g. train)."})
    bootstrap: int = field(default=1000, metadata={"help": "Bootstrap resamples of the 95%% interval (>= 1)."})
    seed: int = field(default=0, metadata={"help": "Seed of the bootstrap resamples."})
    output: str | None = field(default=None, metadata={"help": "Also write the diagnosis as JSON here."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bootstrap < 1:
            raise ValueError(f"--bootstrap must be >= 1, got {self.bootstrap}.")


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(DiagnoseArguments, prog="elical-hf diagnose", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    import dataclasses

    from elical_hf.diagnosis import diagnosis_to_markdown
    from elical_hf.steps import diagnose

    (options,) = make_parser().parse_with_config(argv)
    report = diagnose(**dataclasses.asdict(options))
    print(diagnosis_to_markdown(report))
    for name, cell in report["datasets"].items():
        print(f"{name}: {cell['verdict']}.")
    print(f"overall: {report['overall']['verdict']}.")
    if report["skipped"]:
        print(f"({report['skipped']} records without both judgements were skipped.)")
    return 0
