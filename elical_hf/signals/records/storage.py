"""Records files: `.jsonl` and `.parquet`, read a batch at a time and written atomically, and the manifests of
`elical-hf sample` and `elical-hf judge` folders (an unfinished run is refused)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Features

from ...utils.atomic import atomic_file
from ...utils.files import text_lines
from .schema import RECORD_FEATURES, normalize_record, record_features


__all__ = [
    "JUDGED_MANIFEST_FORMAT", "MANIFEST_FORMAT", "MANIFEST_NAME", "RECORD_EXTENSIONS", "check_complete_samples",
    "iter_record_batches", "normalize_at", "read_metadata", "read_records", "record_files", "record_format",
    "save_records",
]

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "elical-hf/sampled-records"
"""The manifest of an `elical-hf sample` folder ([`~elical_hf.signals.runner.sample_records`]): `complete` is false
until every shard is written."""
JUDGED_MANIFEST_FORMAT = "elical-hf/judged-records"
"""The manifest of an `elical-hf judge` folder ([`~elical_hf.signals.judge_runner.judge_records`]), likewise."""
_UNFINISHED = {
    MANIFEST_FORMAT: ("sample", "questions", "sampled"), JUDGED_MANIFEST_FORMAT: ("judge", "records", "judged"),
}
"""Per manifest format: the command that writes it, what it counts (`num_<rows>`) and what it does to them."""

RECORD_EXTENSIONS = (".jsonl", ".parquet")


def record_format(path: str | os.PathLike) -> str:
    """`"jsonl"` or `"parquet"`, from a records file's name; a `ValueError` for any other extension."""
    extension = Path(path).suffix.lower()
    if extension not in RECORD_EXTENSIONS:
        raise ValueError(
            f"Unknown records format {extension!r} for {os.fspath(path)}: records files must end in .jsonl or .parquet."
        )
    return extension[1:]


def record_files(root: str | os.PathLike) -> list[str]:
    """Every `.jsonl` / `.parquet` records file under `root` (recursively, sorted within each folder, a folder's
    files before its sub-folders, hidden files and folders skipped), or `root` itself when it is a file."""
    root = os.fspath(root)
    if os.path.isfile(root):
        return [root]
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        names = [n for n in sorted(names) if n.endswith(RECORD_EXTENSIONS) and not n.startswith(".")]
        files += [os.path.join(directory, n) for n in names]
    if not files:
        raise ValueError(f"No .jsonl or .parquet records files under {root}.")
    return files


def save_records(
    records: Iterable[Mapping[str, Any]], path: str | os.PathLike, metadata: Mapping[str, str] | None = None
) -> str:
    """Write records (normalized, see [`normalize_record`]) to `.parquet` (default) or `.jsonl`, atomically.

    The file is written next to `path` under a temporary name and moved into place with `os.replace`
    ([`~elical_hf.utils.atomic.atomic_file`]), so a reader (or a rerun after a crash) sees either no file or the
    complete one. Parquet files carry [`RECORD_FEATURES`] types and load with `datasets.load_dataset("parquet",
    data_files=path)`.

    Args:
        records (`Iterable[dict]`): The records.
        path (`str` or `os.PathLike`): A `.parquet` or `.jsonl` file.
        metadata (`dict[str, str]`, *optional*): Parquet only: key-value metadata stored with the table's schema
            (written in the same atomic move as the records; read back with [`read_metadata`]).

    Returns:
        `str`: `path`.
    """
    path = os.fspath(path)
    rows = [normalize_record(r) for r in records]
    kind = record_format(path)
    if metadata and kind != "parquet":
        raise ValueError(f"Only parquet files hold metadata; {path} is {kind}.")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_file(path) as tmp:
        if kind == "jsonl":
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        else:
            features = record_features(rows) if rows else Features({"question": RECORD_FEATURES["question"]})
            table = pa.Table.from_pylist(rows, schema=features.arrow_schema)
            if metadata:
                table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
            pq.write_table(table, tmp)
    return path


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The key-value metadata of a parquet records file ([`save_records`] with `metadata`), without its rows."""
    found = pq.read_schema(os.fspath(path)).metadata or {}
    return {key.decode(): value.decode() for key, value in found.items()}


def iter_record_batches(path: str | os.PathLike, batch_size: int = 10_000) -> Iterator[list[dict[str, Any]]]:
    """Normalized records of a `.parquet` or `.jsonl` file (official or ours), `batch_size` at a time: the file is
    streamed (jsonl line by line, parquet by row batches), so memory holds one batch, whatever the file's size.

    Raises:
        `ValueError`: naming the file and the line (jsonl) or row (parquet, counted from 0) of a line that is not
            UTF-8 or not JSON, of a line that is not a JSON object, or of a record whose fields have the wrong shape
            (e.g. `sampling_response` given as one string instead of a list); or a parquet file that cannot be read.
    """
    path = os.fspath(path)
    if record_format(path) == "parquet":
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=batch_size)
            start = 0
            for batch in batches:
                rows = batch.to_pylist()
                yield [normalize_at(row, f"{path} row {start + i}") for i, row in enumerate(rows)]
                start += len(rows)
        except pa.ArrowException as error:  # truncated, corrupt or not parquet at all
            raise ValueError(f"{path} is not a readable parquet file: {error}") from None
        return
    rows: list[dict[str, Any]] = []
    for number, line in text_lines(path):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} line {number} is not valid JSON: {error}") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path} line {number} is not a record (a JSON object): {line.strip()[:80]}")
            rows.append(normalize_at(row, f"{path} line {number}"))
        if len(rows) == batch_size:
            yield rows
            rows = []
    if rows:
        yield rows


def normalize_at(record: Mapping[str, Any], where: str) -> dict[str, Any]:
    """[`~elical_hf.signals.records.normalize_record`], its `ValueError` prefixed with `where` the record is (file and
    line or row) and its id."""
    try:
        return normalize_record(record)
    except ValueError as error:
        named = f" (id {record['id']!r})" if record.get("id") is not None else ""
        raise ValueError(f"{where}{named}: {error}") from None


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a `.parquet` or `.jsonl` records file (official or ours) into normalized records (errors as in
    [`iter_record_batches`])."""
    return [record for batch in iter_record_batches(path) for record in batch]


def _sample_folders(root: str) -> list[str]:
    """Folders of `elical-hf sample` (or `judge`) runs that `root` reads from: those below it holding a manifest, or
    the run `root` is part of (its `shards/` folder, or a shard file)."""
    root = os.path.abspath(root)
    folder = root if os.path.isdir(root) else os.path.dirname(root)
    up = [folder, os.path.dirname(folder)] if os.path.basename(folder) == "shards" else [folder]
    found = [d for d in up if os.path.isfile(os.path.join(d, MANIFEST_NAME))]
    if os.path.isdir(root):
        for directory, subdirs, names in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
            if MANIFEST_NAME in names and directory not in found:
                found.append(directory)
    return found


def check_complete_samples(root: str | os.PathLike, allow_incomplete: bool = False) -> None:
    """Refuse records of an unfinished `elical-hf sample` or `elical-hf judge` run (its manifest says `complete:
    false`, e.g. after a kill): a `ValueError` that says how many rows are missing, or, with `allow_incomplete`, a
    warning with the same count. Folders without such a manifest are not checked."""
    for folder in _sample_folders(os.fspath(root)):
        try:
            with open(os.path.join(folder, MANIFEST_NAME), encoding="utf-8") as handle:
                manifest = json.load(handle)
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(manifest, dict) or manifest.get("format") not in _UNFINISHED or manifest.get("complete"):
            continue
        command, rows, done = _UNFINISHED[manifest["format"]]
        shards = os.path.join(folder, "shards")
        names = sorted(n for n in os.listdir(shards) if n.endswith(".parquet")) if os.path.isdir(shards) else []
        written = sum(pq.read_metadata(os.path.join(shards, n)).num_rows for n in names)
        expected = manifest.get(f"num_{rows}", "?")
        missing = expected - written if isinstance(expected, int) else "?"
        what = (f"{folder} is an unfinished `elical-hf {command}` run ({MANIFEST_NAME} says complete: false): "
                f"{written} of {expected} {rows} {done}, {missing} missing")
        if not allow_incomplete:
            raise ValueError(
                f"{what}. Rerun the same `elical-hf {command}` command to finish it, or pass --allow_incomplete "
                f"(`allow_incomplete=True`) to use the {written} records anyway."
            )
        logger.warning("%s; using the %d %s records (allow_incomplete), %s rows dropped.", what, written, done, missing)
