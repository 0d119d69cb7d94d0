"""`elical-hf evaluate`: test records + confidence sources -> the paper's table (JSON + Markdown) and plots.

For each `--model` with a saved `decision_threshold` it also reports what that answer/abstain rule does on the test
records: the error rate among answered questions and the coverage (`decisions.json`, and a table in `report.md`),
next to the alpha a risk-controlled threshold was chosen to guarantee; the rows the threshold was chosen on (recorded by
`elical-hf threshold`) are left out of that table, and counted. `--report_to trackio` (or any of the Trainer's
trackers) also logs the table and the plots to an experiment tracker."""

from __future__ import annotations

import os

from elical_hf.steps.evaluate import EvaluateArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(EvaluateArguments, prog="elical-hf evaluate", description=__doc__,
                                overrides={"output_dir": {"required": True}})


def main(argv: list[str] | None = None) -> int:
    from elical_hf.evaluation.tables import decision_table_to_markdown, table_to_markdown
    from elical_hf.steps import evaluate

    (options,) = make_parser().parse_with_config(argv)
    evaluation = evaluate(options, say=print)
    if evaluation.decisions:
        print(decision_table_to_markdown(evaluation.decisions) + "\n")
    print(table_to_markdown(evaluation.table, "auroc"))
    print(f"\nReport: {os.path.join(options.output_dir, 'report.md')} (results.json and plots beside it)")
    return 0
