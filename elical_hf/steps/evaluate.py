"""`elical-hf evaluate` as a step: test records and confidence sources in, the paper's tables out.

[`evaluate`] scores the test records (the `in_domain_test`, `ood_test` and `mmlu` records of any records input) with
every source asked for (saved models, training-free baselines, record columns, confidences computed elsewhere), and
computes from them, in one place, everything a report shows: the per-dataset table with its averages, paired
differences between methods, differences averaged over label draws or training seeds, AUROC against the number of
labels, and what each model's saved answer/abstain rule does. [`write_evaluation`] writes the report. `elical-hf
evaluate`, the demo and the replication script all compose these two, so there is one evaluation.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .arguments import OverwriteArguments, RecordArguments, name_value_pairs
from ..settings.training_options import TrackerOptions
from ..utils.atomic import one_writer
from ..utils.files import check_output_extension, refuse_output_over_inputs
from .probe_layers import ProbeSettings
from .reporting import log_evaluation, reporting_integrations


__all__ = ["TEST_SPLITS", "EvaluateArguments", "Evaluation", "check_trained_model", "evaluate", "model_confidences",
           "test_records", "write_evaluation"]

logger = logging.getLogger(__name__)

TEST_SPLITS = ("in_domain_test", "ood_test", "mmlu")
"""The paper's splits a report is computed on (in this order): MMLU, the paper's unseen multiple-choice test, is a
column of its own."""

Say = Callable[[str], None]
"""Where a step reports what it is doing (a line at a time): the commands print, the library logs."""


@dataclass
class Evaluation:
    """What [`evaluate`] computed.

    Args:
        table (`dict`): `table[method][column]` -> metrics ([`~elical_hf.evaluation.tables.evaluate_table`]): the
            datasets, then `"in-domain avg"` / `"OOD avg"`.
        correct (`list[int]`), datasets (`list[str]`), splits (`list[str]`): The test records' 0/1 greedy
            correctness, dataset and paper split, in the order every confidence list follows.
        confidences (`dict[str, list[float]]`): Every source of the table, by name.
        differences (`dict`): `"<a> − <b>"` -> column -> paired differences of the table's rows `a` and `b`
            ([`~elical_hf.evaluation.tables.paired_differences`]), for the `pairs` asked for.
        draw_differences (`dict`): `"<a> − <b>"` -> column -> differences averaged over draws, with the two-level
            bootstrap interval of that mean (draws resampled with replacement, then test rows:
            [`~elical_hf.evaluation.tables.paired_difference_over_draws`]), for the `draw_pairs` asked for.
        label_curves (`dict`): column -> method -> number of labels -> `{"auroc", "auroc_ci", "draws"}` (AUROC in
            [0, 1]) for every source named `METHOD@N` (a table row, or the mean over the draws of `draws`).
        decisions (`dict`): What each model's saved `decision_threshold` does on these records
            ([`~elical_hf.evaluation.tables.decision_table`]); empty when no model has one.
        configs (`dict`): The `ConfidenceConfig` of each scored model.
    """

    table: dict[str, dict[str, dict[str, Any]]]
    correct: list[int]
    datasets: list[str]
    splits: list[str]
    confidences: dict[str, list[float]]
    differences: dict[str, Any] = field(default_factory=dict)
    draw_differences: dict[str, Any] = field(default_factory=dict)
    label_curves: dict[str, dict[str, dict[int, dict[str, Any]]]] = field(default_factory=dict)
    decisions: dict[str, Any] = field(default_factory=dict)
    configs: dict[str, Any] = field(default_factory=dict)

    def curves(
        self, column: str | None = None, intervals: bool = False, min_points: int = 1
    ) -> dict[str, dict[int, Any]]:
        """AUROC (in [0, 1]) against the number of labels in one column (default: `"in-domain avg"` when the table
        has it, else its first column), as [`~elical_hf.evaluation.plots.auroc_vs_labels_plot`] takes it: method -> N ->
        AUROC, or `(auroc, low, high)` with `intervals`; methods with fewer than `min_points` budgets are left out."""
        if column is None:
            columns = list(next(iter(self.table.values())))
            column = "in-domain avg" if "in-domain avg" in columns else columns[0]
        out = {}
        for method, points in self.label_curves.get(column, {}).items():
            if len(points) < min_points:
                continue
            out[method] = {n: (p["auroc"], *p.get("auroc_ci", (math.nan, math.nan))) if intervals else p["auroc"]
                           for n, p in points.items()}
        return out


@dataclass(kw_only=True)
class EvaluateArguments(RecordArguments, OverwriteArguments, TrackerOptions):
    """Options of [`evaluate`] (`elical-hf evaluate`, also settable from `--config file.yaml`); `records` are the test
    records (in Python, also records in memory), and `output_dir` may be `None` in Python (nothing is written). Read
    once checked: `models` (`model` as a dict, name -> path), `field_columns` (`field_sources` as a dict, name ->
    column), `baseline_names` (`baselines` as a list) and `probe_settings` (the [`ProbeSettings`] of `probes`, or
    `None`)."""

    output_dir: str | None = field(default=None, metadata={"help": "Where results.json, report.md and the plots go."})
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
    field_sources: list[str] = field(default_factory=list, metadata={"help": "Extra confidence columns already in "
                                     "the records, as NAME=COLUMN."})
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
    seed: int = field(default=0, metadata={"help": "Seed of the bootstrap resamples."})
    update_model_cards: bool = field(
        default=False,
        metadata={"help": "Also record each --model folder's results (per dataset and averages) and its reliability "
                  "diagram in that folder's model card (README.md model-index), ready for `elical-hf push`."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bootstrap < 0:
            raise ValueError(f"--bootstrap must be >= 0 (0: no intervals), got {self.bootstrap}.")
        if bool(self.probes) != (self.probe_model is not None):
            raise ValueError("--probes and --probe_model go together: the probes read --probe_model's features.")
        if self.num_labels < 0:
            raise ValueError(f"--num_labels must be >= 0 (0: all), got {self.num_labels}.")
        self.models = name_value_pairs(self.model, "--model")
        self.field_columns = name_value_pairs(self.field_sources, "--field_sources")
        self.baseline_names = [name.strip() for name in self.baselines.split(",") if name.strip()]
        self.probe_settings = ProbeSettings(
            self.probe_model, self.probes, layer=self.probe_layer, num_labels=self.num_labels or None,
            seed=self.probe_seed, cache_dir=self.probe_cache) if self.probes else None


def test_records(records: Any, *, allow_incomplete: bool = False, say: Say | None = None) -> list[dict[str, Any]]:
    """The judged test records of a records input ([`~elical_hf.signals.records.load_records`]): those of
    [`TEST_SPLITS`] (their `paper_split`), in that order; records without a judged greedy answer are left out (and
    counted).

    Raises:
        `ValueError`: no test records, or none with a judged greedy answer (naming the `judge` option that fills it).
    """
    from ..signals.records import PAPER_SPLITS, judged_records, load_records

    say = say or logger.info
    loaded = load_records(records, splits=True, allow_incomplete=allow_incomplete)
    parts = loaded["paper_split"] if len(loaded) else []
    counts = {name: parts.count(name) for name in sorted(set(parts), key=PAPER_SPLITS.index)}
    say("records: " + ", ".join(f"{split} {n}" for split, n in counts.items())
        + f" (only {', '.join(TEST_SPLITS)} are evaluated)")
    where = records if isinstance(records, (str, os.PathLike)) else "The records"
    if not any(name in counts for name in TEST_SPLITS):
        raise ValueError(f"{where} holds no {', '.join(TEST_SPLITS)} records (found {list(counts)}).")
    rows = []
    for name in TEST_SPLITS:
        indices = [i for i, part in enumerate(parts) if part == name]
        rows += loaded.select(indices).to_list() if indices else []
    return judged_records(rows, "test", say)



def _column_confidences(records: list[dict], name: str, column: str, where: str) -> list[float]:
    """The confidences of record column `column` (source `name`): every test record's value, a number."""
    missing = sum(r.get(column) is None for r in records)
    if missing:
        known = sorted({key for r in records for key, value in r.items() if value is not None})
        raise ValueError(f"--field_sources {name}={column}: {missing} of {len(records)} test records in {where} "
                         f"have no {column!r} field; they have {known}.")
    values = []
    for r in records:
        try:
            values.append(float(r[column]))
        except (TypeError, ValueError):
            raise ValueError(f"--field_sources {name}={column}: record {r.get('id', '?')!r} in {where} holds "
                             f"{r[column]!r}, not a number.") from None
    return values


def model_confidences(model: Any, rows: Sequence[Mapping[str, Any]], batch_size: int = 16,
                      progress: bool = True) -> list[float]:
    """A confidence model's confidence for each record, in order: a free-form question read with the model's saved
    prompt, a multiple-choice one ([`~elical_hf.settings.multiple_choice.is_multiple_choice`]) with the multiple-choice
    prompt ([`~elical_hf.settings.prompts.MULTIPLE_CHOICE_PROMPT`], the rest of the saved prompt settings kept), as the
    paper reads MMLU with a model trained on free-form questions."""
    from ..settings.multiple_choice import is_multiple_choice
    from ..settings.prompts import MULTIPLE_CHOICE_PROMPT

    out: list[float] = [math.nan] * len(rows)
    for template in (None, MULTIPLE_CHOICE_PROMPT):
        indices = [i for i, row in enumerate(rows) if is_multiple_choice(row) == (template is not None)]
        if indices:
            values = model.confidence([rows[i]["question"] for i in indices], batch_size=batch_size,
                                      progress=progress, prompt_template=template)
            for i, value in zip(indices, values):
                out[i] = value
    return out


def check_trained_model(path: str, what: str) -> str:
    """Refuse what is not a trained confidence model: a base model (no `confidence_config.json`: it would get a
    freshly initialised, random head), or a saved model that was never trained (no `training_history`, and not a
    converted release). Returns the model's local folder."""
    from ..models.saved_model import find_saved_model
    from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
    from ..models.model_card import ConfidenceModelCardData

    folder = find_saved_model(path)
    if folder is None:
        raise ValueError(
            f"{what}: not a trained confidence model (no {CONFIDENCE_CONFIG_NAME}); a base model would be scored with "
            "a freshly initialised, random head. Pass a model folder written by `elical-hf train` (or "
            "convert-official)."
        )
    config = ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))
    if not config.training_history and "converted" not in ConfidenceModelCardData.from_folder(folder).tags:
        raise ValueError(f"{what}: a confidence model that was never trained (empty training_history): its head is "
                         "random. Train it first (`elical-hf train`).")
    return folder


def _budget(name: str) -> tuple[str, int] | None:
    """`("EliCal", 100)` for a source named `EliCal@100`; `None` for any other name."""
    method, sep, budget = name.rpartition("@")
    return (method, int(budget)) if sep and method and budget.isdigit() else None


def _label_curves(evaluation: Evaluation, draws: Mapping[str, Sequence[Sequence[float]]]) -> dict:
    """[`Evaluation.label_curves`]: the table's `METHOD@N` rows, and the mean over draws of each `METHOD@N` of
    `draws` (each draw scored on its own, without intervals)."""
    from ..evaluation.tables import evaluate_table

    curves: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for name, row in evaluation.table.items():
        if (named := _budget(name)) is None:
            continue
        for column, cell in row.items():
            point = {"auroc": cell["auroc"] / 100, "draws": 1}
            if "auroc_ci" in cell:
                point["auroc_ci"] = (cell["auroc_ci"][0] / 100, cell["auroc_ci"][1] / 100)
            curves.setdefault(column, {}).setdefault(named[0], {})[named[1]] = point
    for name, runs in draws.items():
        if (named := _budget(name)) is None:
            continue
        rows = [evaluate_table(evaluation.correct, evaluation.datasets, evaluation.splits, {"m": c})["m"] for c in runs]
        for column in rows[0]:
            values = [row[column]["auroc"] / 100 for row in rows]
            curves.setdefault(column, {}).setdefault(named[0], {})[named[1]] = {"auroc": sum(values) / len(values),
                                                                                 "draws": len(values)}
    for column in curves:  # each method's budgets in increasing order
        curves[column] = {method: dict(sorted(points.items())) for method, points in curves[column].items()}
    return curves


def evaluate(
    args: EvaluateArguments,
    *,
    confidences: Mapping[str, Sequence[float]] | None = None,
    draws: Mapping[str, Sequence[Sequence[float]]] | None = None,
    pairs: Sequence[tuple[str, str]] = (),
    draw_pairs: Sequence[tuple[str, str]] = (),
    say: Say | None = None,
) -> Evaluation:
    """
    Score the test records with every source and compute the paper's table and what a report shows from it.

    The test records are the `in_domain_test`, `ood_test` and `mmlu` records of `args.records` ([`test_records`]).
    `args` names trained models (`NAME=PATH`; runs of one method with label budgets named `METHOD@N` give AUROC
    against the number of labels), training-free baselines (those whose inputs the records lack are skipped, and
    said), record columns and pre-generation probes ([`~elical_hf.steps.probe_confidences`], named like `SEP-L18`,
    `P(IK)-L18@100`); confidences computed elsewhere come beside them. Every source needs a name of its own.

    With `args.output_dir` the report is also written there ([`write_evaluation`]), holding the folder's one-writer
    lock; it is refused when it already holds files, unless `args.overwrite_output_dir`, and when it is, holds or lies
    inside an input. `args.report_to` trackers get the results table and the plots (checked before anything is
    scored, [`~elical_hf.steps.reporting.log_evaluation`]).

    Args:
        args ([`EvaluateArguments`]): The test records, the sources they name, the intervals (`bootstrap`
            resamples, at least 1 for `pairs` and `draw_pairs`, seeded by `seed`) and the report.
        confidences (`dict[str, list[float]]`, *optional*): Sources computed elsewhere, one confidence per test
            record in [`test_records`]' order (e.g. a head calibrated on cached features).
        draws (`dict[str, list[list[float]]]`, *optional*): `METHOD@N` -> one confidence list per label draw (or
            training seed): its curve point is the mean over the draws, and `draw_pairs` compares them.
        pairs (`list[tuple[str, str]]`, *optional*): Table rows `(a, b)` to compare by paired bootstrap.
        draw_pairs (`list[tuple[str, str]]`, *optional*): Keys `(a, b)` of `draws` to compare, draw `d` of `a` with
            draw `d` of `b` (they used the same labels).
        say (`Callable[[str], None]`, *optional*): Where progress lines and warnings go (default: the log).

    Returns:
        [`Evaluation`].
    """
    say = say or logger.info
    records, output_dir, probes, models = args.records, args.output_dir, args.probe_settings, args.models
    _check_source_names(models, confidences, args.field_columns, args.baseline_names)
    if probes is not None and probes.cache_dir is not None:  # a folder the probes write their features into
        refuse_output_over_inputs(probes.cache_dir, {"--records": records, "--model": list(models.values()),
                                                     "--probe_model": probes.model}, "--probe_cache")
        check_output_extension(probes.cache_dir, None, "--probe_cache")
    trackers = reporting_integrations(args.report_to)
    sources = dict(confidences=confidences or {}, draws=draws or {}, pairs=pairs, draw_pairs=draw_pairs, say=say)
    if output_dir is None:
        evaluation = _evaluate(args, **sources)
        log_evaluation(evaluation.table, trackers, run_name=args.run_name, project=args.project, say=say)
        return evaluation
    refuse_output_over_inputs(output_dir, {"--records": records, "--model": list(models.values()),
                                           "--probe_model": probes.model if probes else None,
                                           "--probe_cache": probes.cache_dir if probes else None}, "--output_dir")
    check_output_extension(output_dir, None, "--output_dir")
    with one_writer(output_dir):  # a second evaluate into this folder would mix two reports
        _check_output_dir(output_dir, args.overwrite_output_dir)
        evaluation = _evaluate(args, **sources)
        paths = write_evaluation(evaluation, output_dir)
        if args.update_model_cards:
            _update_model_cards(models, evaluation, records, say)
        log_evaluation(evaluation.table, trackers, output_dir=output_dir, plots=paths, run_name=args.run_name,
                       project=args.project, say=say)  # the plots, before another run could replace them
    return evaluation


def _evaluate(
    args: EvaluateArguments, *, confidences: Mapping[str, Sequence[float]],
    draws: Mapping[str, Sequence[Sequence[float]]], pairs: Sequence[tuple[str, str]],
    draw_pairs: Sequence[tuple[str, str]], say: Say,
) -> Evaluation:
    """[`evaluate`] without writing anything."""
    from ..evaluation.tables import decision_table, evaluate_table, paired_difference_over_draws, paired_differences
    from ..signals.baselines import BASELINES, compute_baselines
    from ..signals.records import check_records_match

    records, models, probes, allow_other_model = args.records, args.models, args.probe_settings, args.allow_other_model
    bootstrap, seed, batch_size = args.bootstrap, args.seed, args.batch_size
    where = records if isinstance(records, (str, os.PathLike)) else "the records"
    folders = {name: check_trained_model(path, f"--model {name}={path}") for name, path in models.items()}
    rows = test_records(records, allow_incomplete=args.allow_incomplete, say=say)
    if not models:
        check_records_match(rows, None, where, allow_other_model)
    sources: dict[str, list[float]] = {}
    for name in args.baseline_names:
        try:
            for key, values in compute_baselines(rows, which=[name], progress=False).items():
                sources[BASELINES[key].paper_name] = values
        except ValueError as error:  # e.g. consis_sem without semantic judgements
            say(f"skipping baseline {name}: {error}")
    sources.update({name: list(values) for name, values in confidences.items()})
    for name, column in args.field_columns.items():
        sources[name] = _column_confidences(rows, name, column, where)
    questions = [r.get("question") for r in rows]
    unusable = [i for i, q in enumerate(questions) if not isinstance(q, str) or not q.strip()]
    if (models or probes) and unusable:
        raise ValueError(f"{len(unusable)} test records in {where} have no `question` text (first: record "
                         f"{rows[unusable[0]].get('id', unusable[0])!r}); a model scores the question.")
    if probes is not None:
        from .probe_layers import probe_confidences

        for name, values in probe_confidences(probes, records, questions, batch_size=batch_size,
                                              allow_other_model=allow_other_model,
                                              allow_incomplete=args.allow_incomplete, say=say).items():
            if name in sources or name in models:
                raise ValueError(f"Two confidence sources are named {name!r}: rename the other one.")
            sources[name] = values
    configs, chosen_on = {}, {}
    if models:
        from ..models.auto import AutoModelForConfidence
        from ..evaluation.drift import load_reference
        from ..models.saved_model import QUESTIONS_KEY, digest_members

        for name, path in models.items():
            model = AutoModelForConfidence.from_pretrained(path)
            check_records_match(rows, model.confidence_config.base_model_name_or_path, where, allow_other_model)
            sources[name] = model_confidences(model, rows, batch_size=batch_size)
            configs[name] = model.confidence_config
            del model
            try:  # the rows its current threshold was chosen on, when `elical-hf threshold` recorded them
                chosen = load_reference(folders[name]).get(QUESTIONS_KEY)
            except ValueError:  # no threshold set here, or the reference of another state of the model
                chosen = None
            chosen_on[name] = digest_members(chosen, questions) if isinstance(chosen, str) else None
            if configs[name].decision_threshold is not None and chosen_on[name] and any(chosen_on[name]):
                say(f"--model {name}: its threshold was chosen on {sum(chosen_on[name])} of these {len(rows)} "
                    "records; they are left out of its decision table (its AUROC, ECE and alignment keep them).")
    correct = [int(r["greedy_correctness"]) for r in rows]
    datasets, splits = [r["dataset"] for r in rows], [r["paper_split"] for r in rows]
    evaluation = Evaluation(evaluate_table(correct, datasets, splits, sources, bootstrap=bootstrap, seed=seed),
                            correct, datasets, splits, sources, configs=configs)
    if pairs:
        evaluation.differences = paired_differences(correct, datasets, splits, sources, pairs, bootstrap, seed)
    for a, b in draw_pairs:
        evaluation.draw_differences[f"{a} − {b}"] = paired_difference_over_draws(
            correct, datasets, splits, draws[a], draws[b], bootstrap, seed)
    evaluation.label_curves = _label_curves(evaluation, draws)
    evaluation.decisions = decision_table(correct, splits, sources, configs, chosen_on)
    return evaluation


def write_evaluation(
    evaluation: Evaluation,
    output_dir: str,
    *,
    title: str = "Confidence evaluation",
    notes: str = "",
    plotted: Sequence[str] | None = None,
    label_curves: Mapping[str, Mapping[int, Any]] | None = None,
) -> dict[str, str]:
    """
    Write the report of an [`Evaluation`]: `results.json`, `report.md`, reliability diagrams and risk-coverage
    curves (of the sources named in `plotted`, default all), AUROC against the number of labels (`label_curves`,
    default [`Evaluation.curves`] of the methods with at least two budgets), `decisions.json` and its table when a
    model has a saved decision rule, and `differences.json` with its table when `pairs` were compared.

    Returns:
        `dict[str, str]`: the paths written (`report`, `results`, ...).
    """
    from ..utils.atomic import atomic_write_json
    from ..evaluation.tables import averages_to_markdown, decision_table_to_markdown, write_report

    if evaluation.decisions:  # the saved answer/abstain rules, applied to these test records
        notes += f"## Decisions at the saved thresholds\n\n{decision_table_to_markdown(evaluation.decisions)}\n"
    if evaluation.differences:
        notes += ("## Paired differences (x100; 95% paired bootstrap intervals)\n\n"
                  f"{averages_to_markdown(evaluation.differences)}\n")
    shown = {name: evaluation.confidences[name] for name in (plotted or evaluation.confidences)}
    curves = label_curves if label_curves is not None else evaluation.curves(min_points=2)
    paths = write_report(evaluation.table, output_dir, correct=evaluation.correct, confidences=shown,
                         label_curves=curves, title=title, notes=notes)
    for name, content in (("decisions", evaluation.decisions), ("differences", evaluation.differences)):
        if content:
            paths[name] = os.path.join(output_dir, f"{name}.json")
            atomic_write_json(paths[name], content)
    return paths


def _check_source_names(models: Mapping[str, str], confidences: Mapping[str, Any] | None,
                        field_sources: Mapping[str, str], baselines: Sequence[str]) -> None:
    """Refuse two confidence sources of one name (a model, a confidence list, a record column, a baseline's paper
    name): the second would silently replace the first in every table."""
    from ..signals.baselines import BASELINES

    names = [*models, *(confidences or {}), *field_sources,
             *(BASELINES[name].paper_name for name in baselines if name in BASELINES)]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"Two confidence sources are named {twice[0]!r} (models, --field_sources and the baselines' "
                         "names must all differ): one would replace the other in the results. Rename one.")


def _check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuse to write over the results of an earlier evaluation (or any non-empty folder) without `overwrite`."""
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        held = "the results of an earlier run" if os.path.exists(os.path.join(output_dir, "results.json")) else "files"
        raise ValueError(f"--output_dir {output_dir} already holds {held}; use a new folder or pass "
                         "--overwrite_output_dir to replace them.")


def _update_model_cards(models: Mapping[str, str], evaluation: Evaluation, records: Any, say: Say) -> None:
    from ..models.model_card import RELIABILITY_IMAGE, record_folder_evaluations
    from ..evaluation.plots import reliability_diagram

    for name, path in models.items():
        if not os.path.isdir(path):
            say(f"not updating the card of {name}: {path} is not a local folder")
            continue
        reliability_diagram(evaluation.confidences[name], evaluation.correct, os.path.join(path, RELIABILITY_IMAGE),
                            title=name)
        dataset_id = records if isinstance(records, str) and not os.path.exists(records) else None
        say(f"card updated: {record_folder_evaluations(path, evaluation.table[name], dataset_id=dataset_id)}")
