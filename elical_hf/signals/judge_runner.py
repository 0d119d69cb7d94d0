"""Resumable, sharded judging: records -> judged records on disk, safe to kill and rerun.

[`judge_records`] cuts the records (in input order) into fixed shards, judges each shard not yet on disk with the
judge function it is given (`apply_judges` bound to its options: `elical-hf judge` and
[`~elical_hf.steps.judge`]) and writes it atomically to `output_dir/shards/shard-00000.parquet`, the judges'
summary of the shard stored with it (parquet metadata). A manifest (`output_dir/manifest.json`, format
[`~elical_hf.signals.records.JUDGED_MANIFEST_FORMAT`]) records the judge settings and a fingerprint of what the
judges read. A rerun with the same records and settings judges only the missing shards, so a killed run finished by a
rerun ends with the records (and totals) of an uninterrupted one; judged shards are never judged again.

Worker i of N (`num_workers=N, worker_index=i`) judges the records whose dataset and id (its row number where it
has none; [`record_key`]) hash to i ([`~elical_hf.signals.shards.worker_of`]), into its own folder; [`merge_judged`]
(`elical-hf merge`) combines the N folders into the layout one worker writes. The verdicts are those one worker gives,
but for float rounding of the embedding judge's cosines (`consistency_embedding`), which batches other records together.

The layout is an `elical-hf sample` folder's ([`~elical_hf.signals.shards`]): `load_records(output_dir)` reads it,
and refuses it while unfinished (`complete: false`) unless `allow_incomplete`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from tqdm.auto import tqdm

from .records import JUDGED_MANIFEST_FORMAT, MANIFEST_NAME, read_metadata, read_records, save_records
from .runner import check_unique_ids, questions_fingerprint
from .shards import (
    ShardedKind, check_run_options, count_finished, finish_folder, load_shard, merge_folders, open_folder, plan_run,
    shard_path, sum_counts,
)


__all__ = ["FINGERPRINT_FIELDS", "JUDGED", "check_output_folder", "judge_records", "merge_judged", "record_key"]

logger = logging.getLogger(__name__)

JUDGED = ShardedKind(JUDGED_MANIFEST_FORMAT, "judge", "records", "judging", "judged",
                     free_settings=("batch_size", "progress", "judge_endpoint", "judge_api_key_env", "judge_timeout",
                                    "judge_max_retries"))
"""An `elical-hf judge` folder: `batch_size`, `progress`, `judge_endpoint` (its host, port and credentials),
`judge_api_key_env`, `judge_timeout` and `judge_max_retries` may change between runs (no verdict changes with them; a
judge server restarted on another port or host is the same judge, `judge_model` names it)."""

FINGERPRINT_FIELDS = ("id", "question", "answer", "greedy_response", "sampling_response")
"""The record fields the fingerprint of a judging run covers: the id and what the judges read."""

SUMMARY_KEY = "elical_hf.judge_summary"
"""The parquet metadata key of a shard's judge summaries (JSON)."""


def record_key(record: dict[str, Any], row: int) -> str:
    """What names a record among others, for the worker split ([`~elical_hf.signals.shards.worker_of`] of it) and the
    check that no two records share it: `"<dataset>/<id>"` (the row number without an id), since records are matched
    by (dataset, id) everywhere and two datasets may both number their questions from 0."""
    return f"{record.get('dataset') or ''}/{record['id'] if record.get('id') is not None else row}"


def judge_records(
    records: list[dict[str, Any]],
    judge: Callable[[list[dict[str, Any]]], Mapping[str, Any]],
    settings: Mapping[str, Any],
    output_dir: str | os.PathLike,
    shard_size: int = 64,
    progress: bool = True,
    *,
    num_workers: int = 1,
    worker_index: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Judge records (or this worker's share) in resumable shards under `output_dir`.

    Args:
        records (`list[dict]`): The records, in their order; `id` optional (a record without one is keyed by its row
            number). With `num_workers > 1`, an id must not name two different questions.
        judge (`Callable`): Judges a shard's records in place and returns its summaries (`{"correctness": {...},
            "consistency": {...}}`, counts); given copies of the records.
        settings (`dict`): Every setting of `judge` that can change a verdict (stored in the manifest, compared on a
            rerun but `batch_size` and `progress`); JSON data.
        output_dir (`str` or `os.PathLike`): Gets `manifest.json` and `shards/`; new, empty, or a folder of this run.
        shard_size (`int`, *optional*, defaults to `64`): Records per shard (and per call of `judge`).
        progress (`bool`, *optional*, defaults to `True`): Progress bar over records.
        num_workers (`int`, *optional*, defaults to `1`), worker_index (`int`, *optional*, defaults to `0`):
            Judge only the records of worker `worker_index` out of `num_workers`; every worker gets the same records
            and its own `output_dir`, and [`merge_judged`] combines the folders.

    Returns:
        `tuple[list[dict], dict]`: the judged records (of this worker, in input order, as read back from the shards)
        and the summaries of every shard added up.

    Raises:
        `ValueError`: `shard_size < 1`, bad worker options, an `output_dir` that is a file or holds other files, or
        one holding records judged from other records or with other settings, shard size or worker (naming the
        differences). Checked before anything is written.

    A shard file that cannot be read, or whose ids do not match its slice, is reported (logged warning) and judged
    again. Two processes must not write to the same `output_dir` (`elical-hf judge` holds its one-writer lock).
    """
    check_run_options(shard_size, num_workers, worker_index)
    output_dir = os.fspath(output_dir)
    check_output_folder(output_dir)
    records = list(records)
    keys = [record_key(r, row) for row, r in enumerate(records)]
    if num_workers > 1:
        check_unique_ids([{"id": key, "question": r.get("question")} for key, r in zip(keys, records)])
    fingerprint = questions_fingerprint([{name: r.get(name) for name in FINGERPRINT_FIELDS} for r in records])
    records, manifest, slices = plan_run(JUDGED, records, keys, shard_size, num_workers, worker_index, fingerprint,
                                         settings=json.loads(json.dumps(dict(settings), default=str)))  # as read back
    existed = os.path.isdir(output_dir)
    found = open_folder(output_dir, manifest, JUDGED)
    finished = (found or {}).get("totals") if (found or {}).get("complete") else None
    shards = [_load_judged(shard_path(output_dir, i), chunk, finished is not None) for i, chunk in enumerate(slices)]
    done = count_finished(output_dir, JUDGED, slices, shards)
    with tqdm(total=len(records), initial=done, unit="record", desc="Judging", disable=not progress) as bar:
        for index, chunk in enumerate(slices):
            if shards[index] is None:
                try:
                    shards[index] = _judge_shard(judge, chunk, shard_path(output_dir, index))
                except BaseException:
                    if found is None and not any(shards):  # a new run that judged nothing: leave nothing behind
                        _remove_new_run(output_dir, existed)
                    raise
                bar.update(len(chunk))
    summaries = [summary for _, summary in shards]
    totals = sum_counts(summaries) if all(s is not None for s in summaries) else finished
    finish_folder(output_dir, manifest, totals)
    return [record for judged, _ in shards for record in judged], totals


def check_output_folder(output_dir: str | os.PathLike) -> None:
    """Refuse an output folder that is a file, or that holds other files and no manifest: a judging run writes into
    a new or empty folder (the temporary files of a killed writer aside), or resumes its own."""
    output_dir = os.fspath(output_dir)
    if os.path.isfile(output_dir):
        raise ValueError(f"{output_dir} is a file; judged shards go into a folder (or pass a .jsonl/.parquet output).")
    others = [n for n in os.listdir(output_dir) if not n.startswith(".tmp-")] if os.path.isdir(output_dir) else []
    if others and MANIFEST_NAME not in others:
        raise ValueError(f"--output {output_dir} is a folder that holds other files and no {MANIFEST_NAME} of "
                         "`elical-hf judge`; give a new or empty folder (or a .jsonl/.parquet file).")


def _remove_new_run(output_dir: str, existed: bool) -> None:
    """Remove what a new run wrote into `output_dir` (its manifest and empty `shards/`; the folder too when the run
    made it), so that an error before the first shard (a judge model that does not load) leaves nothing behind."""
    if not existed:
        shutil.rmtree(output_dir, ignore_errors=True)
        return
    os.remove(os.path.join(output_dir, MANIFEST_NAME))
    shutil.rmtree(os.path.join(output_dir, "shards"), ignore_errors=True)


def _load_judged(path: str, chunk: list[dict[str, Any]], finished: bool) -> tuple[list[dict], dict | None] | None:
    """A judged shard on disk and its summaries, or `None` when it must be judged (again). A merged folder's shards
    carry no summaries (`finished`: the manifest's totals count them)."""
    records = load_shard(path, [r.get("id") for r in chunk], JUDGED)
    if records is None:
        return None
    text = read_metadata(path).get(SUMMARY_KEY)
    if text is None and not finished:
        logger.warning("Shard %s has no judge summary; judging it again.", path)
        return None
    return records, json.loads(text) if text is not None else None


def _judge_shard(judge: Callable, chunk: list[dict[str, Any]], path: str) -> tuple[list[dict], dict]:
    """Judge copies of a shard's records, write them with their summaries, and read them back (what a resumed run
    reads, so an interrupted run's records equal an uninterrupted one's)."""
    rows = [dict(record) for record in chunk]
    summaries = dict(judge(rows))
    save_records(rows, path, metadata={SUMMARY_KEY: json.dumps(summaries)})
    return read_records(path), summaries


def merge_judged(inputs: list[str | os.PathLike], output_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Combine the folders of the N workers of one judging run ([`judge_records`] with `num_workers=N`) into the
    layout one worker writes, the manifest's totals the workers' added up; refuses what
    [`~elical_hf.signals.runner.merge_samples`] refuses (settings compared but [`JUDGED`]'s free ones)."""
    return merge_folders(inputs, output_dir, JUDGED)
