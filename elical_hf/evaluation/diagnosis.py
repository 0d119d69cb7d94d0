"""Will elicitation help on *my* model? The teacher's quality, measured on the labels a user already has.

Stage 1 teaches the model its own self-consistency (how many of its sampled answers agree with its greedy answer). That
pays where consistency tracks correctness and hurts where it does not: on the CPU-scale replication, EliCal beats
Cal-Only where the teacher's AUROC is high and loses badly where it is below 50 (`docs/results.md`). This module
measures the teacher on judged records that carry both judgements — consistency and greedy correctness — per dataset
and overall, with a bootstrap interval, and says in one line what it means for stage 1.

>>> from elical_hf import diagnose
>>> report = diagnose("judged.parquet")  # or a list of records / a `datasets.Dataset`
>>> print(report["overall"]["verdict"])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..settings.columns import CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN

__all__ = ["HELPFUL_AUROC", "MIN_CLASS_SIZE", "diagnose", "diagnosis_to_markdown", "teacher_verdict"]

HELPFUL_AUROC = 60.0
"""A teacher whose AUROC (x100) is at least this, with an interval above 50, is called informative."""
MIN_CLASS_SIZE = 5
"""Fewest correct and fewest wrong greedy answers a verdict rests on; below it the verdict says "too few"."""


def teacher_verdict(auroc: float, low: float, high: float, positives: int, negatives: int) -> tuple[str, str]:
    """The verdict key and its sentence for a teacher AUROC (x100) with its 95% interval `[low, high]`.

    Keys: `"informative"` (interval above 50 and AUROC >= `HELPFUL_AUROC`), `"inverted"` (interval below 50: stage 1
    would teach the opposite of correctness), `"weak"` (anything else) and `"too_few"` (fewer than `MIN_CLASS_SIZE`
    correct or wrong answers).
    """
    if min(positives, negatives) < MIN_CLASS_SIZE:
        return "too_few", (f"only {positives} correct and {negatives} wrong greedy answers: too few labels to tell "
                           f"whether consistency tracks correctness")
    stated = f"consistency separates right from wrong answers at {auroc:.1f} [{low:.1f}, {high:.1f}]"
    if high < 50:
        return "inverted", f"{stated}: stage 1 would teach the opposite of correctness there"
    if low > 50 and auroc >= HELPFUL_AUROC:
        return "informative", f"{stated}: stage 1 teaches a useful signal there"
    return "weak", f"{stated}: consistency barely tracks correctness, so stage 1 is unlikely to help there"


def _rows(records: Any, split: str | None = None) -> list[dict[str, Any]]:
    """The records as dicts; with `split`, only those of that paper split (read by `load_records`, which refuses a
    name that is not one of [`~elical_hf.signals.records.PAPER_SPLITS`])."""
    if split is not None or isinstance(records, (str, bytes)) or hasattr(records, "__fspath__"):
        from ..signals.records import load_records

        return load_records(records, split=split).to_list()  # none left: one line naming the splits there are
    if hasattr(records, "to_list"):  # datasets.Dataset
        return records.to_list()
    return [dict(r) for r in records]


def _scores(rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Dataset, teacher (stage-1 target) and greedy correctness of every row that carries both judgements."""
    from ..signals.records import training_columns

    datasets, teacher, correct = [], [], []
    for row in rows:
        columns = row if {CONSISTENCY_COLUMN, EVAL_LABEL_COLUMN} <= row.keys() else training_columns(row)
        if columns.get(CONSISTENCY_COLUMN) is None or columns.get(EVAL_LABEL_COLUMN) is None:
            continue
        datasets.append(str(row.get("dataset") or "all"))
        teacher.append(float(columns[CONSISTENCY_COLUMN]))
        correct.append(int(columns[EVAL_LABEL_COLUMN]))
    return datasets, np.asarray(teacher, dtype=np.float64), np.asarray(correct, dtype=np.int64)


def _cell(teacher: np.ndarray, correct: np.ndarray, bootstrap: int, seed: int) -> dict[str, Any]:
    from ..metrics.functional import auroc, bootstrap_ci

    positives = int(correct.sum())
    negatives = int(correct.size - positives)
    cell: dict[str, Any] = {"questions": int(correct.size), "positives": positives}
    if min(positives, negatives) == 0:
        cell.update(auroc=None, auroc_ci=[None, None])
        cell["verdict_key"], cell["verdict"] = teacher_verdict(float("nan"), 0, 0, positives, negatives)
        return cell
    interval = bootstrap_ci(auroc, teacher, correct, n_resamples=bootstrap, seed=seed)
    point, low, high = (100 * interval[k] for k in ("point", "low", "high"))
    cell.update(auroc=point, auroc_ci=[low, high])
    cell["verdict_key"], cell["verdict"] = teacher_verdict(point, low, high, positives, negatives)
    return cell


def diagnose(records: Any, bootstrap: int = 1000, seed: int = 0, split: str | None = None) -> dict[str, Any]:
    """
    The teacher's quality (consistency vs greedy correctness) per dataset and overall, with a verdict each.

    Args:
        records: Judged records (a path `load_records` reads, a list of dicts, or a `datasets.Dataset`) with
            consistency judgements and greedy correctness — or training rows with `consistency` and
            `greedy_correctness`. Rows lacking either are skipped (and counted).
        bootstrap (`int`, *optional*, defaults to 1000): Bootstrap resamples of the 95% AUROC interval.
        seed (`int`, *optional*, defaults to 0): Seed of the resamples.
        split (`str`, *optional*): Keep only records of this paper split (`"train"`, `"in_domain_test"`, ...: the
            `paper_split` of [`~elical_hf.signals.records.load_records`], as every `--split` means).

    Returns:
        `dict`: `{"datasets": {name: cell}, "overall": cell, "skipped": n}`; a cell has `questions`, `positives`,
        `auroc` (x100) with `auroc_ci`, `verdict_key` and `verdict` (see [`teacher_verdict`]).

    Raises:
        `ValueError`: When no record carries both judgements (with what `elical-hf judge` option fills them).
    """
    rows = _rows(records, split)
    datasets, teacher, correct = _scores(rows)
    if not datasets:
        raise ValueError(f"None of the {len(rows)} records carries both a consistency judgement and greedy "
                         "correctness: judge them first (`elical-hf judge --correctness has_answer --consistency "
                         "embedding`).")
    names = np.asarray(datasets)
    out = {"datasets": {}, "skipped": len(rows) - len(datasets)}
    for name in dict.fromkeys(datasets):
        mask = names == name
        out["datasets"][name] = _cell(teacher[mask], correct[mask], bootstrap, seed)
    out["overall"] = _cell(teacher, correct, bootstrap, seed)
    return out


def diagnosis_to_markdown(report: Mapping[str, Any]) -> str:
    """The diagnosis as a Markdown table, one row per dataset and one overall, then the overall verdict."""
    lines = ["| dataset | questions | correct | teacher AUROC [95%] | verdict |", "|---|---:|---:|---:|---|"]
    cells = [*report["datasets"].items(), ("overall", report["overall"])]
    for name, cell in cells:
        if cell["auroc"] is None:
            stated = "—"
        else:
            stated = f"{cell['auroc']:.1f} [{cell['auroc_ci'][0]:.1f}, {cell['auroc_ci'][1]:.1f}]"
        lines.append(f"| {name} | {cell['questions']} | {cell['positives']} | {stated} | {cell['verdict_key']} |")
    return "\n".join(lines)
