"""No local path of the user's in what is published: the records a threshold was chosen on by their last part only,
and every absolute local path in a staged JSON file (the trainer's `training_args.json` `output_dir` and
`logging_dir`, `trainer_state.json`'s `best_model_checkpoint`, a tokenizer's `name_or_path`, ...) by its last part.
An absolute path publishes the user's folders and names nothing a reader can open."""

from __future__ import annotations

import json
import ntpath
import os
import re
from pathlib import Path
from typing import Any

from ..utils.atomic import json_text
from ..settings.configuration import CONFIDENCE_CONFIG_NAME
from ..evaluation.drift import REFERENCE_NAME
from ..models.hub_ids import is_hub_id


_WINDOWS_ABSOLUTE = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def is_local_absolute_path(value: Any) -> bool:
    """Whether `value` is a string that names an absolute local path: POSIX (`/home/alice/x`), home-relative (`~/x`),
    a `file://` URL or a Windows one (`C:\\x`, `\\\\server\\share`)."""
    return isinstance(value, str) and "\n" not in value and (
        value.startswith(("/", "~/", "file://")) or bool(_WINDOWS_ABSOLUTE.match(value)))


def _last_part(path: str) -> str:
    """The last part of the path `path` (POSIX or Windows separators); `path` itself when it has none (`/`)."""
    path = path.removeprefix("file://")
    return ntpath.basename(ntpath.normpath(path.replace("/", "\\"))) or path


def published_source(source: Any) -> Any:
    """How a published file names where rows came from (the records a threshold was chosen on): a Hub dataset id as
    it is, a local path by its last part only (`/home/alice/runs/records` -> `records`): an absolute path would
    publish the user's folders and names nothing a reader can open."""
    if not isinstance(source, str) or not source or is_hub_id(source, local_wins=False):
        return source
    if is_local_absolute_path(source):
        return _last_part(source)
    return os.path.basename(os.path.normpath(source)) or source


def without_local_paths(value: Any) -> Any:
    """`value` (parsed JSON) with every string that is an absolute local path ([`is_local_absolute_path`]) replaced
    by its last part, at any depth (mapping keys included)."""
    if is_local_absolute_path(value):
        return _last_part(value)
    if isinstance(value, dict):
        return {without_local_paths(key): without_local_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_local_paths(item) for item in value]
    return value


def publish_no_local_paths(staging: Path) -> None:
    """Rewrite the staged files of a model about to be published so that they name no local path: the records in
    `confidence_config.json` (`risk_control.records`) and [`REFERENCE_NAME`] (`records`) as [`published_source`]
    names them, and every absolute local path in any staged `*.json` file by its last part. Files are rewritten only
    where something changes; the card is rendered from them afterwards."""
    for path in sorted(staging.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{path.name} is not valid JSON; refusing to publish it.") from None
        changed = without_local_paths(data)
        for name, field in ((CONFIDENCE_CONFIG_NAME, "risk_control"), (REFERENCE_NAME, None)):
            record = changed.get(field) if field and isinstance(changed, dict) else changed
            if path.name == name and isinstance(record, dict) and record.get("records"):
                record["records"] = published_source(record["records"])
        if changed != data:
            path.write_text(json_text(changed, sort_keys=path.name in (CONFIDENCE_CONFIG_NAME, REFERENCE_NAME))
                            + "\n", encoding="utf-8")
