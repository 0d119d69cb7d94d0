"""`elical-hf evaluate`: test records + confidence sources -> the paper's table (JSON + Markdown) and plots.

For each `--model` with a saved `decision_threshold` it also reports what that answer/abstain rule does on the test
records: the error rate among answered questions and the coverage (`decisions.json`, and a table in `report.md`),
next to the alpha a risk-controlled threshold was chosen to guarantee; the rows the threshold was chosen on (recorded by
`elical-hf threshold`) are left out of that table, and counted. `--report_to trackio` (or any of the Trainer's
trackers) also logs the table and the plots to an experiment tracker."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from elical_hf.arguments import RecordArguments

from .parser import ElicalArgumentParser


@dataclass(kw_only=True)
class EvaluateArguments(RecordArguments):
    """Options of `elical-hf evaluate` (also settable from `--config file.yaml`); `--records` are the test records."""

    output_dir: str = field(metadata={"help": "Where results.json, report.md and the plots go."})
    model: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Trained confidence models as NAME=PATH, several separated by spaces. Name runs of one method with different "
            "label budgets METHOD@N (e.g. EliCal@100, EliCal@1000) to also plot AUROC against the number of labels."
        },
    )
    baselines: str = field(
        default="prob,n_prob,consis_lex,consis_sem",
        metadata={"help": "Comma-separated training-free baselines (those whose inputs are missing are skipped; "
                  "option_prob reads the records' option_probabilities).", "comma_separated": True},
    )
    field_sources: list[str] = field(
        default_factory=list, metadata={"help": "Extra confidence columns already in the records, as NAME=COLUMN."}
    )
    probes: list[str] = field(
        default_factory=list,
        metadata={"help": "Pre-generation probes to train on the records' train split and score, several separated by "
                  "spaces: sep (semantic-entropy probe, label-free), dim (difference-of-means accuracy probe), pik "
                  "(logistic P(IK) probe); see docs/probes.md. They need --probe_model."},
    )
    probe_model: str | None = field(default=None, metadata={"help": "The model whose features the probes read (the "
                                                            "records' model, or a saved confidence model)."})
    probe_layer: int = field(default=-1, metadata={"help": "The layer the probes read (1 to the number of layers; "
                                                   "negative counts from the end, -1 the final one)."})
    num_labels: int = field(default=0, metadata={"help": "Correctness labels of the dim and pik probes: a seeded draw "
                                                 "of the train records, as `elical-hf train` draws them (0: all)."})
    probe_seed: int = field(default=42, metadata={"help": "Seed of the probes' label draw."})
    probe_cache: str | None = field(default=None, metadata={"help": "A folder caching the probes' features across "
                                                            "runs (default: a temporary folder)."})
    bootstrap: int = field(default=0, metadata={"help": "Bootstrap resamples for 95 percent intervals of every metric (0: none)."})
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Write into an --output_dir that already holds results (they are replaced). Without it such "
                  "a folder is refused."},
    )
    update_model_cards: bool = field(
        default=False,
        metadata={"help": "Also record each --model folder's results (per dataset and averages) and its reliability "
                  "diagram in that folder's model card (README.md model-index), ready for `elical-hf push`."},
    )
    report_to: list[str] = field(
        default_factory=lambda: ["none"],
        metadata={"help": "Experiment trackers to log the results table (AUROC, ECE, alignment and their intervals, "
                  "per method and dataset) and the report's plots to, as the Trainer's --report_to: trackio, wandb, "
                  "mlflow, ... (several separated by spaces), all (every installed one) or none."},
    )
    run_name: str | None = field(default=None, metadata={"help": "The trackers' run name (default: theirs)."})
    project: str | None = field(default=None, metadata={"help": "The trackers' project (trackio; default: the "
                                                        "Trainer's, huggingface)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bootstrap < 0:
            raise ValueError(f"--bootstrap must be >= 0 (0: no intervals), got {self.bootstrap}.")
        if bool(self.probes) != (self.probe_model is not None):
            raise ValueError("--probes and --probe_model go together: the probes read --probe_model's features.")
        if self.num_labels < 0:
            raise ValueError(f"--num_labels must be >= 0 (0: all), got {self.num_labels}.")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    """`NAME=VALUE` items as a dict; a `ValueError` for a malformed item or a name given twice (one would be lost)."""
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{what} must look like NAME=VALUE, got {item!r}.")
        if name in pairs:
            raise ValueError(f"{what} names {name} twice ({name}={pairs[name]} and {item}): each needs a name of its "
                             "own, or one would be silently dropped.")
        pairs[name] = value
    return pairs


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(EvaluateArguments, prog="elical-hf evaluate", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.evaluation import decision_table_to_markdown, table_to_markdown
    from elical_hf.steps import ProbeSettings, evaluate

    (options,) = make_parser().parse_with_config(argv)
    probes = None
    if options.probes:
        probes = ProbeSettings(options.probe_model, options.probes, layer=options.probe_layer,
                               num_labels=options.num_labels or None, seed=options.probe_seed,
                               cache_dir=options.probe_cache)
    evaluation = evaluate(
        options.records, models=_pairs(options.model, "--model"),
        baselines=[b.strip() for b in options.baselines.split(",") if b.strip()],
        field_sources=_pairs(options.field_sources, "--field_sources"), probes=probes, bootstrap=options.bootstrap,
        batch_size=options.batch_size, allow_other_model=options.allow_other_model,
        allow_incomplete=options.allow_incomplete, output_dir=options.output_dir,
        overwrite_output_dir=options.overwrite_output_dir, update_model_cards=options.update_model_cards,
        report_to=options.report_to, run_name=options.run_name, project=options.project, say=print,
    )
    if evaluation.decisions:
        print(decision_table_to_markdown(evaluation.decisions) + "\n")
    print(table_to_markdown(evaluation.table, "auroc"))
    print(f"\nReport: {os.path.join(options.output_dir, 'report.md')} (results.json and plots beside it)")
    return 0
