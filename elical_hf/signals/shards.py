"""Folders of record shards with a manifest, safe to kill and rerun, split over workers and merged: what
`elical-hf sample` ([`~elical_hf.signals.runner`]) and `elical-hf judge` ([`~elical_hf.signals.judge_runner`])
share.

Layout of a folder:

```
manifest.json                # written atomically first (complete: false), rewritten with totals at the end
shards/shard-00000.parquet   # the rows [0, shard_size), in input order, each shard written atomically
shards/shard-00001.parquet
...
```

A [`ShardedKind`] says what a folder holds: its manifest format, the command that writes it and what its rows are.
A rerun whose manifest disagrees (other rows, settings, shard size or worker) is refused with one `ValueError` that
lists the differences; a shard file that cannot be read or holds other ids is made again. Worker i of N takes the rows
whose id hashes to i ([`worker_of`]), into its own folder; [`merge_folders`] checks that the N manifests agree and
writes the folder one worker would have written.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..utils.atomic import atomic_folder, atomic_write_json
from .records import MANIFEST_NAME, read_records, save_records


__all__ = [
    "ShardedKind", "check_manifest", "check_run_options", "check_workers_agree", "count_finished", "finish_folder",
    "load_manifest", "load_shard", "manifest_format", "merge_folders", "open_folder", "plan_run",
    "read_finished_manifest", "shard_path", "single_worker", "sum_counts", "worker_entry", "worker_of",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardedKind:
    """What one kind of sharded folder holds.

    Args:
        format (`str`): Its manifest's `format`.
        command (`str`): The `elical-hf` command that writes it (`"sample"`, `"judge"`).
        rows (`str`): What its rows are (`"questions"`, `"records"`): the manifest counts them in `num_<rows>` and
            `worker.total_<rows>`.
        action (`str`), done (`str`): Its work, for messages (`"sampling"` / `"sampled"`).
        keys (`tuple[str]`, *optional*): Further manifest entries a rerun and every worker must share (`backend`).
        free_settings (`tuple[str]`, *optional*, defaults to `("batch_size",)`): Settings a rerun may change (they
            do not change the rows).
        later_settings (`dict`, *optional*): Settings added after manifests were first written, with the value a
            manifest without them was written with.
        numbered (`bool`, *optional*, defaults to `False`): Its rows carry their shard index in `shard` (renumbered
            by a merge).
    """

    format: str
    command: str
    rows: str
    action: str
    done: str
    keys: tuple[str, ...] = ()
    free_settings: tuple[str, ...] = ("batch_size",)
    later_settings: Mapping[str, Any] = field(default_factory=dict)
    numbered: bool = False

    @property
    def count(self) -> str:
        """The manifest key counting a folder's rows."""
        return f"num_{self.rows}"


def shard_path(output_dir: str | os.PathLike, index: int) -> str:
    """Path of shard `index` in `output_dir`."""
    return os.path.join(os.fspath(output_dir), "shards", f"shard-{index:05d}.parquet")


def worker_of(question_id: Any, num_workers: int) -> int:
    """The worker, in `[0, num_workers)`, that takes the row with id `question_id`: the first 8 bytes of the
    SHA-256 of `str(question_id)`, modulo `num_workers` (stable across processes, machines and Python versions)."""
    digest = hashlib.sha256(str(question_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % num_workers


def check_run_options(shard_size: Any, num_workers: Any, worker_index: Any) -> None:
    """Refuse a `shard_size` or `num_workers` that is not an integer >= 1, or a `worker_index` outside
    `[0, num_workers)`."""
    if not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"`shard_size` must be an integer >= 1, got {shard_size!r}.")
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"`num_workers` must be an integer >= 1, got {num_workers!r}.")
    if not isinstance(worker_index, int) or not 0 <= worker_index < num_workers:
        raise ValueError(f"`worker_index` must be an integer in [0, {num_workers}), got {worker_index!r}.")


def plan_run(
    kind: ShardedKind, rows: list, ids: Sequence[Any], shard_size: int, num_workers: int, worker_index: int,
    fingerprint: str, **entries: Any,
) -> tuple[list, dict[str, Any], list[list]]:
    """This worker's share of `rows` (whose ids are `ids`: [`worker_of`] each), its run's manifest (`entries`, such
    as the settings, after its format) and the rows of each of its shards."""
    worker, positions = single_worker(kind, len(rows)), None
    if num_workers > 1:
        positions = [i for i, key in enumerate(ids) if worker_of(key, num_workers) == worker_index]
        worker = worker_entry(kind, len(rows), num_workers, worker_index)
        rows = [rows[i] for i in positions]
    slices = [rows[start : start + shard_size] for start in range(0, len(rows), shard_size)]
    manifest = {"format": kind.format, **entries, kind.count: len(rows), "shard_size": shard_size,
                "num_shards": len(slices), "fingerprint": fingerprint, "worker": worker}
    if positions is not None:
        manifest["positions"] = positions  # where this worker's rows stand in the whole list, for merging
    return rows, manifest, slices


def count_finished(output_dir: str, kind: ShardedKind, slices: list[list], shards: list) -> int:
    """How many rows the shards already on disk hold (`shards[i]`: `None` for one still to make), logged."""
    done = sum(len(chunk) for chunk, shard in zip(slices, shards) if shard is not None)
    if done:
        logger.info("Resuming in %s: %d of %d %s already %s.", output_dir, done, sum(map(len, slices)), kind.rows,
                    kind.done)
    return done


def single_worker(kind: ShardedKind, total: Any) -> dict[str, Any]:
    """The `worker` entry of a run that takes every row (also read for manifests written before workers)."""
    return worker_entry(kind, total, 1, 0)


def worker_entry(kind: ShardedKind, total: Any, num_workers: int, worker_index: int) -> dict[str, Any]:
    """The manifest's `worker` entry: this worker's index, the number of workers, and every worker's rows."""
    return {"index": worker_index, "num_workers": num_workers, f"total_{kind.rows}": total}


def load_manifest(path: str, kind: ShardedKind, advice: str) -> dict[str, Any]:
    """The manifest at `path`, its `worker` entry and later settings filled in when it predates them; a `ValueError`
    ending in `advice` when it is unreadable or not a `kind` manifest."""
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot read {path} ({error}); {advice}.") from None
    if not isinstance(found, dict) or found.get("format") != kind.format:
        raise ValueError(f"{path} is not a {kind.action} manifest written by elical-hf; {advice}.")
    if isinstance(found.get("settings"), dict):
        found["settings"] = {**kind.later_settings, **found["settings"]}
    return {"worker": single_worker(kind, found.get(kind.count)), **found}


def manifest_format(folder: str | os.PathLike) -> str | None:
    """The `format` of the manifest in `folder`, or `None` when it has no readable one."""
    try:
        with open(os.path.join(os.fspath(folder), MANIFEST_NAME), encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, json.JSONDecodeError):
        return None
    return found.get("format") if isinstance(found, dict) else None


def _settings(manifest: Mapping[str, Any], kind: ShardedKind) -> dict[str, Any]:
    return {k: v for k, v in manifest.get("settings", {}).items() if k not in kind.free_settings}


def check_manifest(path: str, expected: Mapping[str, Any], kind: ShardedKind) -> dict[str, Any]:
    """The manifest at `path` (see [`load_manifest`]); a `ValueError` listing every difference when it was written
    for other rows, settings (but `kind.free_settings`), shard size or worker than `expected`."""
    found = load_manifest(path, kind, "use a fresh output folder or delete this one")
    found_settings, expected_settings = _settings(found, kind), _settings(expected, kind)
    differences = [
        f"settings.{k}: {found_settings.get(k)!r} -> {expected_settings.get(k)!r}"
        for k in sorted(set(found_settings) | set(expected_settings))
        if found_settings.get(k) != expected_settings.get(k)
    ]
    for key in (*kind.keys, kind.count, "shard_size", "fingerprint", "worker"):
        if found.get(key) != expected[key]:
            differences.append(f"{key}: {found.get(key)!r} -> {expected[key]!r}")
    if differences:
        other = "".join(f" or {key}" for key in kind.keys)
        raise ValueError(
            f"{os.path.dirname(path)} holds records {kind.done} from other {kind.rows} or with other settings{other}; "
            "resuming would mix them. Use a fresh output folder (or delete this one). Differences: "
            + "; ".join(differences)
        )
    return found


def open_folder(output_dir: str, manifest: Mapping[str, Any], kind: ShardedKind) -> dict[str, Any] | None:
    """Start or resume a run in `output_dir`: check the manifest there against `manifest` ([`check_manifest`]) or
    write `manifest` with `complete: false`, and remove the temporary files a killed writer left.

    Returns:
        `dict` or `None`: the manifest found (a resumed run), or `None` for a new one.

    Raises:
        `ValueError`: a manifest that disagrees, or shards without a manifest.
    """
    manifest_path = os.path.join(output_dir, MANIFEST_NAME)
    found = None
    if os.path.exists(manifest_path):
        found = check_manifest(manifest_path, manifest, kind)
    elif glob.glob(os.path.join(output_dir, "shards", "shard-*.parquet")):
        raise ValueError(f"{output_dir}/shards holds shards but no {MANIFEST_NAME}; use a fresh output folder.")
    if found is None:
        os.makedirs(output_dir, exist_ok=True)
        atomic_write_json(manifest_path, {**manifest, "complete": False})
    os.makedirs(os.path.join(output_dir, "shards"), exist_ok=True)
    for folder in (output_dir, os.path.join(output_dir, "shards")):
        for stale in glob.glob(os.path.join(folder, ".tmp-*")):  # left by a killed writer
            os.remove(stale)
    return found


def finish_folder(output_dir: str, manifest: Mapping[str, Any], totals: Mapping[str, Any]) -> None:
    """Rewrite the manifest of `output_dir` as complete, with the run's `totals`."""
    atomic_write_json(os.path.join(output_dir, MANIFEST_NAME), {**manifest, "complete": True, "totals": totals})


def load_shard(path: str, expected_ids: list[Any], kind: ShardedKind) -> list[dict[str, Any]] | None:
    """The shard's records when the file is readable and holds the ids of its slice (in order), else `None` (and a
    warning that the shard is made again)."""
    if not os.path.exists(path):
        return None
    try:
        records = read_records(path)
    except Exception as error:  # truncated or corrupted file
        logger.warning("Shard %s is unreadable (%s: %s); %s it again.", path, type(error).__name__, error, kind.action)
        return None
    ids = [r.get("id") for r in records]
    if ids != expected_ids:
        logger.warning("Shard %s holds %d records (ids %s...) but its slice has %d %s; %s it again.",
                       path, len(records), ids[:3], len(expected_ids), kind.rows, kind.action)
        return None
    return records


def sum_counts(counts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Add up counts (`{"judged": 3}`, nested dicts of them) key by key, keys in the order first met; a value that is
    no number is taken from the first count that has it."""
    total: dict[str, Any] = {}
    for count in counts:
        for key, value in count.items():
            if key not in total:
                total[key] = sum_counts([value]) if isinstance(value, Mapping) else value
            elif isinstance(value, Mapping) and isinstance(total[key], dict):
                total[key] = sum_counts([total[key], value])
            elif _is_number(value) and _is_number(total[key]):
                total[key] += value
    return total


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_finished_manifest(folder: str, kind: ShardedKind) -> dict[str, Any]:
    """The manifest of a finished worker's folder (a `ValueError` otherwise)."""
    path = os.path.join(folder, MANIFEST_NAME)
    manifest = load_manifest(path, kind, f"pass the output folder of an `elical-hf {kind.command}` run")
    if not manifest.get("complete"):
        raise ValueError(f"{folder} is not finished (its manifest says complete: false); rerun its {kind.command} "
                         "command.")
    return manifest


def _run_signature(manifest: Mapping[str, Any], kind: ShardedKind) -> dict[str, Any]:
    """What every worker of one run must share: the kind's keys, settings (but the free ones), rows, workers."""
    total = f"total_{kind.rows}"
    return {
        **{key: manifest.get(key) for key in kind.keys},
        "settings": _settings(manifest, kind),
        "fingerprint": manifest.get("fingerprint"),
        "num_workers": manifest["worker"].get("num_workers"),
        total: manifest["worker"].get(total),
    }


def check_workers_agree(folders: list[str], manifests: list[dict[str, Any]], kind: ShardedKind) -> None:
    """One `ValueError` listing every way the workers' manifests disagree, miss a worker or repeat one."""
    expected, problems = _run_signature(manifests[0], kind), []
    for folder, manifest in zip(folders[1:], manifests[1:]):
        found = _run_signature(manifest, kind)
        problems += [f"{folder}: {key} {found[key]!r} differs from {folders[0]}'s {expected[key]!r}"
                     for key in expected if found[key] != expected[key]]
    indices = [m["worker"]["index"] for m in manifests]
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    missing = sorted(set(range(expected["num_workers"])) - set(indices))
    if repeated:
        problems.append(f"worker(s) {repeated} given more than once")
    if missing:
        problems.append(f"worker(s) {missing} of {expected['num_workers']} missing")
    if problems:
        raise ValueError(f"Cannot merge these {kind.action} folders: " + "; ".join(problems) + ".")


def merge_folders(
    inputs: Sequence[str | os.PathLike], output_dir: str | os.PathLike, kind: ShardedKind
) -> list[dict[str, Any]]:
    """Combine the folders of the N workers of one run into the layout one worker would have written: the rows in
    their original order, the same shard size, a manifest with the workers' totals added up.

    Args:
        inputs (`list[str]`): Every worker's folder, each finished, in any order.
        output_dir (`str` or `os.PathLike`): Gets `manifest.json` and `shards/`; must not exist or be empty. Written
            atomically: it appears complete or not at all.
        kind ([`ShardedKind`]): What the folders hold.

    Returns:
        `list[dict]`: the merged records, in the original order.

    Raises:
        `ValueError`: for an unfinished or unreadable folder, manifests that disagree (settings other than the free
        ones, rows, shard size, number of workers, `kind.keys`), a worker missing or given twice, or shards that do
        not hold the rows their manifest lists (overlaps or gaps).
    """
    folders = [os.fspath(folder) for folder in inputs]
    output_dir = os.fspath(output_dir)
    if not folders:
        raise ValueError(f"No {kind.action} folders to merge.")
    if os.path.abspath(output_dir) in {os.path.abspath(f) for f in folders}:
        raise ValueError(f"The merged output_dir {output_dir} must not be one of the inputs.")
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        raise ValueError(f"{output_dir} is not empty; merge into a new folder.")
    manifests = [read_finished_manifest(folder, kind) for folder in folders]
    check_workers_agree(folders, manifests, kind)
    total = manifests[0]["worker"][f"total_{kind.rows}"]
    merged: list[dict[str, Any] | None] = [None] * total
    for folder, manifest in zip(folders, manifests):
        _place(folder, manifest, kind, merged)
    gaps = [i for i, record in enumerate(merged) if record is None]
    if gaps:
        raise ValueError(f"{len(gaps)} {kind.rows} were {kind.done} by no worker (positions {gaps[:5]}...).")
    first = manifests[0]
    shard_size = first["shard_size"]
    records = [{**record, "shard": i // shard_size} if kind.numbered else record for i, record in enumerate(merged)]
    manifest = {
        **{key: first[key] for key in ("format", *kind.keys, "settings", "shard_size", "fingerprint")},
        kind.count: total,
        "num_shards": -(-total // shard_size),
        "worker": single_worker(kind, total),
        "complete": True,
        "totals": sum_counts([m.get("totals") or {} for m in manifests]),
        "merged_from": [{"folder": os.path.abspath(folder), "worker": m["worker"]["index"]}
                        for folder, m in zip(folders, manifests)],
    }
    with atomic_folder(output_dir) as staging:
        for index in range(manifest["num_shards"]):
            save_records(records[index * shard_size : (index + 1) * shard_size], shard_path(staging, index))
        atomic_write_json(os.path.join(staging, MANIFEST_NAME), manifest)
    return records


def _place(folder: str, manifest: Mapping[str, Any], kind: ShardedKind, merged: list[dict[str, Any] | None]) -> None:
    """Put the records of one worker's `folder` at their positions in `merged` (refusing missing shards, a count
    that does not match the manifest, and a position two workers fill)."""
    total = len(merged)
    positions = manifest.get("positions", list(range(manifest[kind.count])))
    files = [shard_path(folder, i) for i in range(manifest["num_shards"])]
    missing = [file for file in files if not os.path.isfile(file)]
    if missing:
        raise ValueError(f"{missing[0]} is missing ({len(missing)} shard file(s) of {folder}): rerun that worker's "
                         f"{kind.command} command to {kind.command} them again.")
    records = [record for file in files for record in read_records(file)]
    if len(records) != len(positions) or any(not 0 <= p < total for p in positions):
        raise ValueError(f"{folder} holds {len(records)} records for {len(positions)} {kind.rows}; its shards were "
                         f"changed after {kind.action}. Run that worker's {kind.command} command again into a fresh "
                         "folder.")
    for position, record in zip(positions, records):
        if merged[position] is not None:
            raise ValueError(f"{kind.rows[:-1].capitalize()} {position} (id {record.get('id')!r}) was {kind.done} by "
                             "two workers.")
        merged[position] = record

