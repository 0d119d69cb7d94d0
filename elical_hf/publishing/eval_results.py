"""A confidence model's evaluation results in the format the Hub aggregates into benchmark leaderboards.

The Hub reads `.eval_results/*.yaml` in a model repository: a list of entries, each one value of one task of a
benchmark dataset (`dataset: {id, task_id}`, `value`, optional `date`, `source: {url, name}`, `notes`), as
`huggingface_hub.EvalResultEntry` and `eval_result_entries_to_yaml` write them (https://huggingface.co/docs/hub/
eval-results). [`~elical_hf.push_folder`] writes the evaluations of the model's card (its `model-index`, which stays
in the card) there as `.eval_results/elical-hf.yaml`: one entry per dataset and metric, the task named
`<dataset>_<metric>` (`nq_auroc`, `in_domain_avg_ece`), since an entry holds one value and names no metric.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from ..models.hub_ids import validate_hub_repo_id
from ..metrics import METRIC_NAMES
from ..models.model_card import GENERATED_MARKER, ConfidenceModelCardData, EvaluationResult, card_metrics, render_model_card


__all__ = ["EVAL_RESULTS_FILE", "EvalResultsSource", "eval_result_entries", "read_results_row", "stage_card",
           "write_eval_results"]

logger = logging.getLogger(__name__)

EVAL_RESULTS_FILE = ".eval_results/elical-hf.yaml"
"""Where in the model repository the results go: one file of ours, replaced whole at every push."""


def task_id(dataset: str, metric: str, split: str | None = None) -> str:
    """`nq_auroc` for (`"nq"`, `"auroc"`), `in_domain_avg_ece` for (`"in-domain avg"`, `"ece"`), `nq_auroc_test`
    with the split `"test"`."""
    return re.sub(r"[^a-z0-9]+", "_", "_".join(filter(None, (dataset, metric, split))).lower()).strip("_")


def eval_result_entries(
    evaluations: Sequence[EvaluationResult],
    *,
    dataset_id: str | None = None,
    source_url: str | None = None,
    date: str | None = None,
    dated: Sequence[EvaluationResult] | None = None,
) -> list[Any]:
    """
    The evaluations of a card as `huggingface_hub.EvalResultEntry`s, one per dataset and metric.

    Args:
        evaluations (`list[EvaluationResult]`): The card's evaluations (`ConfidenceModelCardData.evaluations`).
        dataset_id (`str`, *optional*): The Hub dataset of the evaluations that do not name one (evaluated on local
            records); without it they are left out (an entry must name a Hub dataset), and said in the log.
        source_url (`str`, *optional*): The page the results come from (the model's page), as the entries' source.
        date (`str`, *optional*): When the evaluation ran (ISO-8601); without it the Hub uses the commit's time.
        dated (`list[EvaluationResult]`, *optional*): The evaluations `date` is the time of (default: all).

    A set evaluated on several splits gets one task per split (`nq_auroc_in_domain_test`, `nq_auroc_test`).

    Returns:
        `list[huggingface_hub.EvalResultEntry]`: AUROC and ECE in [0, 1], alignment in percent.
    """
    from huggingface_hub import EvalResultEntry

    named = [(result, result.dataset_id or dataset_id, result.dataset_config or result.dataset)
             for result in evaluations]
    unnamed = [result.dataset for result, benchmark, _ in named if benchmark is None]
    splits: dict[tuple[str, str], set[str]] = {}
    for result, benchmark, set_name in named:
        splits.setdefault((benchmark, set_name), set()).add(result.split)
    entries = []
    for result, benchmark, set_name in named:
        if benchmark is None:
            continue
        split = result.split if len(splits[benchmark, set_name]) > 1 else None
        when = date if dated is None or result in dated else None
        for metric, value in result.metrics.items():
            entries.append(EvalResultEntry(
                dataset_id=benchmark, task_id=task_id(set_name, metric, split), value=float(value), date=when,
                source_url=source_url, source_name="elical-hf evaluate" if source_url else None,
                notes=f"{METRIC_NAMES.get(metric, metric)} of the confidence on {set_name} ({result.split}), "
                      "scored by elical-hf",
            ))
    if unnamed:
        logger.info("Not in %s: the results on %s name no Hub dataset (evaluated on local records); pass "
                    "--eval_dataset_id (`eval_dataset_id=`) to name the one they come from.", EVAL_RESULTS_FILE,
                    ", ".join(unnamed))
    return entries


def write_eval_results(folder: str | os.PathLike, entries: Sequence[Any]) -> str | None:
    """Write `entries` ([`eval_result_entries`]) as [`EVAL_RESULTS_FILE`] in `folder` (a staged model repository);
    nothing, and a line in the log, when there are none. Returns the file's path, or `None`."""
    import yaml
    from huggingface_hub import eval_result_entries_to_yaml

    if not entries:
        logger.info("No evaluation results to publish: no %s written (evaluate the model with `elical-hf evaluate "
                    "--update_model_cards`, or pass --eval_results).", EVAL_RESULTS_FILE)
        return None
    path = Path(folder) / EVAL_RESULTS_FILE
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(eval_result_entries_to_yaml(list(entries)), sort_keys=False), encoding="utf-8")
    logger.info("Evaluation results: %d values in %s.", len(entries), EVAL_RESULTS_FILE)
    return str(path)


def read_results_row(path: str | os.PathLike, method: str | None = None) -> tuple[dict[str, dict[str, float]], str]:
    """
    One method's row of an `elical-hf evaluate` report, in the card's units.

    Args:
        path (`str`): The report's `results.json`, or the `--output_dir` holding it.
        method (`str`, *optional*): The row (a `--model` name of the evaluation); needed when it has several.

    Returns:
        `tuple`: column (dataset or average) -> metrics ([`~elical_hf.models.model_card.card_metrics`]), and when the
        report was written (ISO-8601, UTC).

    Raises:
        `ValueError`: no such report, or `method` missing or not one of its rows (the message lists them).
    """
    file = Path(path) / "results.json" if Path(path).is_dir() else Path(path)
    try:
        table = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"--eval_results {path}: not the results.json of `elical-hf evaluate` ({error}).") from None
    if not isinstance(table, dict) or not table or not all(
            isinstance(row, dict) and all(isinstance(cell, dict) for cell in row.values()) for row in table.values()):
        raise ValueError(f"--eval_results {path}: not the results.json of `elical-hf evaluate` (method -> dataset -> "
                         "metrics).")
    if method is None and len(table) > 1:
        raise ValueError(f"--eval_results {path} holds {len(table)} methods ({', '.join(table)}): name the one to "
                         "publish with --eval_method.")
    method = method if method is not None else next(iter(table))
    if method not in table:
        raise ValueError(f"--eval_method {method!r} is not a row of {file} ({', '.join(table)}).")
    row = {column: metrics for column, cell in table[method].items() if (metrics := card_metrics(cell))}
    if not row:
        raise ValueError(f"--eval_results {path}: {method!r} has no defined metric to publish.")
    written = datetime.fromtimestamp(file.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    return row, written


@dataclass
class EvalResultsSource:
    """Evaluation results to publish besides those of the model's card.

    Args:
        path (`str`, *optional*): An `elical-hf evaluate` report (`results.json` or its folder), added to the card's
            evaluations ([`read_results_row`]).
        method (`str`, *optional*): Its row to publish (needed when it has several).
        dataset_id (`str`, *optional*): The Hub dataset the evaluated records come from, for the results that name
            none (a report's, and those the card recorded from local records).
    """

    path: str | os.PathLike | None = None
    method: str | None = None
    dataset_id: str | None = None

    def read(self) -> tuple[dict[str, dict[str, float]], str | None]:
        """Check the settings and read the report: (column -> metrics, when it was written), or `({}, None)`."""
        if self.dataset_id is not None:
            validate_hub_repo_id(self.dataset_id)
        if self.path is None:
            if self.method is not None:
                raise ValueError("--eval_method names a row of --eval_results: pass the report too.")
            return {}, None
        return read_results_row(self.path, self.method)


def stage_card(staging: Path, repo_id: str, base: str, results: EvalResultsSource | None = None) -> str | None:
    """
    Make the card of a staged model folder the one to publish as `repo_id`, and write its evaluations as
    [`EVAL_RESULTS_FILE`]: a card this library generated is re-rendered for `repo_id` with the `results` added to
    its `model-index`; a card of the user's own keeps its text and model-index, with its metadata naming `base`
    (only the `results` given are published then).

    Returns:
        `str`: the path of the evaluation results written, or `None` when there were none.
    """
    from huggingface_hub import ModelCard, constants

    results = results or EvalResultsSource()
    row, date = results.read()
    readme = staging / "README.md"
    generated = not readme.is_file() or GENERATED_MARKER in readme.read_text(encoding="utf-8")
    card_data = ConfidenceModelCardData.from_folder(staging) if generated else ConfidenceModelCardData()
    for column, metrics in row.items():
        card_data.add_evaluation(column, metrics, dataset_id=results.dataset_id)
    if generated:
        card_data.model_id = repo_id
        config = ConfidenceConfig.from_json_file(staging / CONFIDENCE_CONFIG_NAME)
        render_model_card(config, card_data, staging).save(readme)
    else:  # a card of the user's own: keep its text, but its metadata must name the same base
        card = ModelCard.load(readme)
        card.data.base_model = base
        card.save(readme)
        if row:
            logger.info("README.md is a card of your own: its model-index is left as it is; the --eval_results go "
                        "to %s only.", EVAL_RESULTS_FILE)
    source = f"{constants.ENDPOINT.rstrip('/')}/{repo_id}"  # the model's page (HF_ENDPOINT: another Hub's)
    reported = [e for e in card_data.evaluations if e.dataset in row and e.split == "test" and not e.dataset_config]
    entries = eval_result_entries(card_data.evaluations, dataset_id=results.dataset_id, source_url=source, date=date,
                                  dated=reported)  # the card's earlier results: the Hub dates them by the commit
    return write_eval_results(staging, entries)
