"""The column names records and training tables share, and the old spellings still read (with a `FutureWarning`).

One vocabulary for both: a judged record *is* a training row once its targets are derived, so the greedy answer's
correctness is `greedy_correctness` everywhere, the HonestyBench schema's name, in records, training tables, the
collator's batches and the trainer's dev metrics. Training tables once named it `greedy_correct`; such a table still
trains, with one warning that says to rename the column ([`renamed_columns`], [`upgrade_row`], [`upgrade_table`]).
No torch here: the record readers and the trainer's data module both read it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any


__all__ = [
    "CONSISTENCY_COLUMN", "CORRECTNESS_COLUMN", "DEPRECATED_COLUMNS", "EVAL_LABEL_COLUMN", "QUESTION_COLUMN",
    "renamed_columns", "upgrade_row", "upgrade_table",
]

QUESTION_COLUMN = "question"
CONSISTENCY_COLUMN = "consistency"
"""Stage 1's target: the share of sampled answers judged equivalent to the greedy one."""
CORRECTNESS_COLUMN = "correctness"
"""Stage 2's target: the share of sampled answers judged correct."""
EVAL_LABEL_COLUMN = "greedy_correctness"
"""The evaluation label: whether the greedy answer is correct (the HonestyBench schema's field; `bool` or 0/1)."""

DEPRECATED_COLUMNS: dict[str, str] = {"greedy_correct": EVAL_LABEL_COLUMN}
"""Old column name -> its name now. The old one is read as the new one, with a `FutureWarning`."""


def _warn(old: str, new: str, where: str) -> None:
    warnings.warn(
        f"{where}: the column {old!r} is now named {new!r} (the HonestyBench schema's name, shared by records and "
        f"training tables); {old!r} is read as {new!r} for now but will stop being accepted in a future release. "
        "Rename the column.",
        FutureWarning,
        stacklevel=3,
    )


def renamed_columns(columns: Iterable[str]) -> dict[str, str]:
    """The deprecated names among `columns`, each mapped to its name now."""
    return {old: new for old, new in DEPRECATED_COLUMNS.items() if old in set(columns)}


def upgrade_row(row: Mapping[str, Any], where: str = "A row") -> dict[str, Any]:
    """`row` with its deprecated keys renamed (a `FutureWarning` names them). Where both spellings are present the
    new one is kept and the old one dropped.

    Example:

    ```python
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", FutureWarning)
    ...     upgrade_row({"question": "q", "greedy_correct": 1})
    {'question': 'q', 'greedy_correctness': 1}

    ```
    """
    renamed = renamed_columns(row)
    if not renamed:
        return dict(row)
    for old, new in renamed.items():
        _warn(old, new, where)
    out = {}
    for key, value in row.items():
        if key in renamed:
            if renamed[key] not in row:
                out[renamed[key]] = value
        else:
            out[key] = value
    return out


def upgrade_table(table: Any, where: str = "A table") -> Any:
    """A `datasets.Dataset` with its deprecated columns renamed (or dropped where the new name is there too), with a
    `FutureWarning` for each; a table without them comes back as it is."""
    for old, new in renamed_columns(table.column_names).items():
        _warn(old, new, where)
        table = table.remove_columns(old) if new in table.column_names else table.rename_column(old, new)
    return table
