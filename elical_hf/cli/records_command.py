"""The frame of the commands that read records and write them back (`judge`, `baselines`).

Parse the options (`--config file.yaml` included), read `--records` (a .jsonl/.parquet file or a folder of them),
let the command fill in the records, write them atomically to `--output` and print the command's report as JSON.
"""

from __future__ import annotations

import json
import os
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
    check_output_outside(options.records, options.output)
    records = load_records(options.records, allow_incomplete=options.allow_incomplete)
    if not records:
        raise ValueError(f"No records in {options.records!r}.")
    report = command(options, records)
    save_records(records, options.output)
    print(json.dumps({"records": len(records), "output": options.output, **report}, indent=2))
    return 0


def check_output_outside(records: str, output: str) -> None:
    """Refuse an `output` file inside the `records` folder: the next read of the folder (by this command again, or by
    `elical-hf evaluate`) would take every record twice, once from the input files and once from the output. A
    records file may be rewritten in place (`--output` the same file)."""
    folder, target = os.path.realpath(records), os.path.realpath(output)
    if os.path.isdir(folder) and os.path.commonpath([folder, target]) == folder:
        raise ValueError(
            f"--output {output} is inside the --records folder {records}: reading that folder again would count every "
            "record twice (the input files and this output). Write the output outside it."
        )
