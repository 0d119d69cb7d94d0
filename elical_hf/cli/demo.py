"""`elical-hf demo`: sample, judge, train both stages and Cal-Only, and compare with baselines, all offline."""

from __future__ import annotations

from elical_hf.demo import DemoSettings

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(DemoSettings, prog="elical-hf demo", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.demo import markdown_table, run_demo

    (settings,) = make_parser().parse_with_config(argv)
    summary = run_demo(settings)
    print()
    print(markdown_table(summary["results"]))
    print(
        f"\nDone in {summary['seconds']:.0f} s. Report: {settings.output_dir}/report.md "
        f"(results.json, records.jsonl and the trained models are beside it)."
    )
    return 0
