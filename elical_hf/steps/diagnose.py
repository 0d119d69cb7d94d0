"""`elical-hf diagnose` as a step: will elicitation help? From judged records, whether stage 1's teacher (consistency)
tracks correctness ([`~elical_hf.evaluation.diagnosis.diagnose`])."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .arguments import RecordArguments, only
from ..utils.files import check_output_extension, refuse_output_over_inputs


__all__ = ["DiagnoseArguments", "diagnose"]


@dataclass(kw_only=True)
class DiagnoseArguments(only(RecordArguments, "records", "allow_incomplete")):
    """Options of [`diagnose`] (`elical-hf diagnose`, also settable from `--config file.yaml`); in Python, `records`
    may also hold records in memory."""

    split: str | None = field(default=None, metadata={"help": "Only records of this paper split (train, in_domain_test, "
                              "ood_test, ...), as every --split reads records."})
    bootstrap: int = field(default=1000, metadata={"help": "Bootstrap resamples of the 95%% interval (>= 1)."})
    seed: int = field(default=0, metadata={"help": "Seed of the bootstrap resamples."})
    output: str | None = field(default=None, metadata={"help": "Also write the diagnosis as JSON here."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bootstrap < 1:
            raise ValueError(f"--bootstrap must be >= 1, got {self.bootstrap}.")


def diagnose(args: DiagnoseArguments) -> dict[str, Any]:
    """
    Will elicitation help? The teacher's AUROC (consistency vs greedy correctness) per dataset and overall, with a
    verdict each ([`~elical_hf.evaluation.diagnosis.diagnose`], `args.bootstrap` resamples seeded by `args.seed`), from
    the records of `args.records` (any records input; only those of `args.split` when given); also written as JSON to
    `args.output`.
    """
    from ..utils.atomic import atomic_write_json
    from ..evaluation.diagnosis import diagnose as diagnose_records
    from ..signals.records import load_records

    if args.output:
        refuse_output_over_inputs(args.output, {"--records": args.records})
        check_output_extension(args.output, (".json",))
    report = diagnose_records(load_records(args.records, allow_incomplete=args.allow_incomplete),
                              bootstrap=args.bootstrap, seed=args.seed, split=args.split)
    if args.output:
        atomic_write_json(args.output, report)
    return report
