"""`elical-hf diagnose`: will elicitation help on this model? The teacher's quality on the labels you have.

Reads judged records (a jsonl/parquet file or a folder of them) with consistency judgements and greedy correctness and
prints, per dataset and overall, the teacher's AUROC (consistency vs greedy correctness, x100) with a bootstrap
interval, the number of correct answers it rests on, and one verdict line each. Run it on the ~100 labelled questions
you would calibrate on, before sampling stage 1 on 100k: where consistency does not track correctness, stage 1 teaches
the wrong signal (docs/results.md measures how often the verdict is right).
"""

from __future__ import annotations

from elical_hf.steps.diagnose import DiagnoseArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(DiagnoseArguments, prog="elical-hf diagnose", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.evaluation.diagnosis import diagnosis_to_markdown
    from elical_hf.steps import diagnose

    (options,) = make_parser().parse_with_config(argv)
    report = diagnose(options)
    print(diagnosis_to_markdown(report))
    for name, cell in report["datasets"].items():
        print(f"{name}: {cell['verdict']}.")
    print(f"overall: {report['overall']['verdict']}.")
    if report["skipped"]:
        print(f"({report['skipped']} records without both judgements were skipped.)")
    return 0
