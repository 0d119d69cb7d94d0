"""`elical-hf demo`: EliCal vs Cal-Only on the same few labels, with every step of the method, offline."""

from __future__ import annotations

from elical_hf.demo import DemoSettings

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(DemoSettings, prog="elical-hf demo", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.demo import run_demo
    from elical_hf.evaluation.tables import averages_to_markdown
    from elical_hf.utils.files import check_output_extension, refuse_output_over_inputs

    (settings,) = make_parser().parse_with_config(argv)
    inputs = {"--records": settings.records, "--stage1_model": settings.stage1_model,
              "--model_name_or_path": settings.model_name_or_path}
    refuse_output_over_inputs(settings.output_dir, inputs, "--output_dir")
    check_output_extension(settings.output_dir, None, "--output_dir")
    summary = run_demo(settings)
    print()
    print(averages_to_markdown(summary["table"]))
    print(
        f"\n{summary['headline']}\nDone in {summary['seconds']:.0f} s. Report: {summary['report']} (what ran live and "
        f"what came from committed records, per-dataset tables, plots; the models are in {settings.output_dir}/models)."
    )
    return 0
