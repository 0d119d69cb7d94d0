"""`elical-hf demo`: sample, judge, train both stages and Cal-Only, and compare with baselines, all offline."""

from __future__ import annotations

from elical_hf.demo import DemoSettings

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(DemoSettings, prog="elical-hf demo", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.demo import run_demo
    from elical_hf.evaluation import averages_to_markdown

    (settings,) = make_parser().parse_with_config(argv)
    summary = run_demo(settings)
    print()
    print(averages_to_markdown(summary["table"]))
    print(
        f"\nDone in {summary['seconds']:.0f} s. Report: {summary['report']} (per-dataset tables, reliability "
        f"diagrams; records.parquet, results.json and the trained models in {settings.output_dir}/models are beside it)."
    )
    return 0
