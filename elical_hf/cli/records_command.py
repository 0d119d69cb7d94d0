"""What the commands that read records share: the `--allow_incomplete` option (the steps read and write the records,
`elical_hf.steps`)."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def allow_incomplete_field() -> Any:
    """The `--allow_incomplete` option of the commands that read records (an unfinished `elical-hf sample` folder is
    refused without it)."""
    return field(
        default=False,
        metadata={"help": "Read an unfinished `elical-hf sample` folder (manifest complete: false) anyway; the number "
                  "of missing rows is printed. Without it such a folder is refused."},
    )
