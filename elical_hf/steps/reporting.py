"""`elical-hf evaluate --report_to`: an evaluation's results, logged to experiment trackers as the Trainer logs.

The trackers are those of transformers' `report_to` (trackio, wandb, mlflow, ...), driven through the Trainer's own
integration callbacks (`transformers.integrations.get_reporting_integration_callbacks`): a run is started as
`on_train_begin` starts one, every metric of the table goes through `on_log` as `test/<method>/<column>/<metric>`
(the Trainer's prefix for a test set), and `on_train_end` finishes the run. The results table and the report's plots
go through the tracker's own `Table` / `Image` / `log` API, for the trackers that have one (trackio, wandb).
"""

from __future__ import annotations

import importlib
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any


__all__ = ["MEDIA_TRACKERS", "log_evaluation", "reporting_integrations"]

logger = logging.getLogger(__name__)

MEDIA_TRACKERS = ("trackio", "wandb")
"""Trackers whose module has `Table(columns=, data=)`, `Image(path)` and `log(dict)`: they also get the results table
and the plots (the others get the metrics only)."""

PLOTS = ("reliability", "risk_coverage", "labels")
"""The plots of a report ([`~elical_hf.steps.write_evaluation`]'s paths) that are logged, when written."""


def reporting_integrations(report_to: str | Sequence[str] | None) -> list[str]:
    """
    The trackers `report_to` names, read as `TrainingArguments.report_to` is: `None`, `"none"` or nothing -> none,
    `"all"` -> every installed one (`transformers.integrations.get_available_reporting_integrations`).

    Raises:
        `ValueError`: a name transformers has no integration for, or one whose package is not installed (checked
            here, before any work).
    """
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if not names or names in (["none"], []):
        return []
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    available = get_available_reporting_integrations()
    if names == ["all"]:
        return [name for name in available if name in INTEGRATION_TO_CALLBACK]
    unknown = [name for name in names if name not in INTEGRATION_TO_CALLBACK]
    if unknown:
        raise ValueError(f"--report_to {unknown[0]}: not an integration of transformers' report_to; choose from "
                         f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}, 'all' or 'none'.")
    missing = [name for name in names if name not in available]
    if missing:
        raise ValueError(f"--report_to {missing[0]}: its package is not installed (`pip install {missing[0]}`); "
                         f"installed trackers: {', '.join(available) or 'none'}.")
    return list(dict.fromkeys(names))


def results_table(table: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> tuple[list[str], list[list[Any]]]:
    """An evaluation table ([`~elical_hf.evaluation.tables.evaluate_table`], x100) as columns and rows: one row per
    method and dataset (or average), with its records, accuracy, AUROC, ECE and alignment and their 95% intervals (empty
    without bootstrap); undefined metrics are `None`."""
    from ..evaluation.tables import TABLE_METRICS

    columns = ["method", "dataset", "n", "accuracy"]
    for metric in TABLE_METRICS:
        columns += [metric, f"{metric}_low", f"{metric}_high"]
    rows = []
    for method, row in table.items():
        for column, cell in row.items():
            values: list[Any] = [method, column, cell.get("n"), _number(cell.get("accuracy"))]
            for metric in TABLE_METRICS:
                low, high = cell.get(f"{metric}_ci") or (None, None)
                values += [_number(cell.get(metric)), _number(low), _number(high)]
            rows.append(values)
    return columns, rows


def _number(value: Any) -> float | None:
    """`value` as a float; `None` for an undefined metric (NaN in the table, `null` in results.json)."""
    return None if value is None or math.isnan(float(value)) else float(value)


def log_evaluation(
    table: Mapping[str, Mapping[str, Mapping[str, Any]]],
    report_to: Sequence[str],
    *,
    output_dir: str | None = None,
    plots: Mapping[str, str] | None = None,
    run_name: str | None = None,
    project: str | None = None,
    say: Callable[[str], None] | None = None,
) -> None:
    """
    Log an evaluation to the trackers `report_to` ([`reporting_integrations`]) in one run each.

    Args:
        table (`dict`): [`Evaluation.table`](~elical_hf.steps.Evaluation) (x100, as `results.json`).
        report_to (`list[str]`): The trackers (already checked).
        output_dir (`str`, *optional*): The report's folder (the Trainer's `output_dir`: some trackers keep their
            files there).
        plots (`dict[str, str]`, *optional*): The report's paths ([`~elical_hf.steps.write_evaluation`]); its
            reliability, risk-coverage and AUROC-vs-labels plots are logged as images.
        run_name (`str`, *optional*): The run's name (default: the tracker's). project (`str`, *optional*): The
            project (trackio; default: transformers' `"huggingface"`).
        say (`Callable[[str], None]`, *optional*): Where to report what was logged (default: the log).
    """
    if not report_to:
        return
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import get_reporting_integration_callbacks

    from ..evaluation.tables import TABLE_METRICS

    say = say or logger.info
    settings = {"output_dir": output_dir, "project": project}
    args = TrainingArguments(report_to=list(report_to), run_name=run_name,
                             **{key: value for key, value in settings.items() if value is not None})
    scalars = {f"test_{method}/{column}/{metric}": _number(value) for method, row in table.items()
               for column, cell in row.items() for metric, value in cell.items()
               if metric in ("accuracy", *TABLE_METRICS) and _number(value) is not None}
    columns, rows = results_table(table)
    images = {name: path for name, path in (plots or {}).items() if name in PLOTS and os.path.isfile(path)}
    for name, callback_class in zip(report_to, get_reporting_integration_callbacks(list(report_to)), strict=True):
        callback, state, control = callback_class(), TrainerState(), TrainerControl()
        callback.on_train_begin(args, state, control)
        try:
            callback.on_log(args, state, control, logs=scalars)
            if name in MEDIA_TRACKERS:
                tracker = importlib.import_module(name)
                tracker.log({"test/results": tracker.Table(columns=columns, data=rows),
                             **{f"test/{plot}": tracker.Image(path) for plot, path in images.items()}})
        finally:
            callback.on_train_end(args, state, control)
        media = f", the results table and {len(images)} plots" if name in MEDIA_TRACKERS else ""
        say(f"{name}: logged {len(scalars)} metrics{media}")
