"""The diagnosis step: will elicitation help? From judged records, whether stage 1's teacher (consistency) tracks
correctness ([`~elical_hf.diagnosis.diagnose`])."""

from __future__ import annotations

from typing import Any

from ..files import check_output_extension, refuse_output_over_inputs


__all__ = ["diagnose"]


def diagnose(
    records: Any,
    *,
    split: str | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    output: str | None = None,
    allow_incomplete: bool = False,
) -> dict[str, Any]:
    """
    Will elicitation help? The teacher's AUROC (consistency vs greedy correctness) per dataset and overall, with a
    verdict each ([`~elical_hf.diagnosis.diagnose`]), from any records input; also written as JSON to `output`.
    """
    from ..atomic import atomic_write_json
    from ..diagnosis import diagnose as diagnose_records
    from ..signals.records import load_records

    if output:
        refuse_output_over_inputs(output, {"--records": records})
        check_output_extension(output, (".json",))
    report = diagnose_records(load_records(records, allow_incomplete=allow_incomplete), bootstrap=bootstrap, seed=seed,
                              split=split)
    if output:
        atomic_write_json(output, report)
    return report
