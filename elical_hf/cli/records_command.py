"""The frame of the commands that read records and write them back (`judge`, `baselines`).

Parse the options (`--config file.yaml` included), read `--records` (a .jsonl/.parquet file or a folder of them),
let the command fill in the records, write them atomically to `--output` and print the command's report as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import field
from typing import Any

from .parser import ElicalArgumentParser


def allow_incomplete_field() -> Any:
    """The `--allow_incomplete` option of the commands that read records (an unfinished `elical-hf sample` folder is
    refused without it)."""
    return field(
        default=False,
        metadata={"help": "Read an unfinished `elical-hf sample` folder (manifest complete: false) anyway; the number "
                  "of missing rows is printed. Without it such a folder is refused."},
    )


def run_records_command(
    parser: ElicalArgumentParser, argv: list[str] | None, command: Callable[[Any, list[dict]], dict[str, Any]]
) -> int:
    """Run a records-in, records-out command: `command(options, records)` fills `records` in place and returns its
    report, printed after `records` (their number) and `output`."""
    from elical_hf.signals.records import load_records, save_records

    (options,) = parser.parse_with_config(argv)
    records = load_records(options.records, allow_incomplete=options.allow_incomplete)
    if not records:
        raise ValueError(f"No records in {options.records!r}.")
    report = command(options, records)
    save_records(records, options.output)
    print(json.dumps({"records": len(records), "output": options.output, **report}, indent=2))
    return 0
