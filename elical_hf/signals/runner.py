"""Resumable, sharded sampling: questions -> raw HonestyBench records on disk, safe to kill and rerun.

[`sample_records`] cuts the question list into fixed shards (shard i holds questions `[i * shard_size, (i + 1) *
shard_size)`) and writes each finished shard atomically to `output_dir/shards/shard-00000.parquet`. A manifest
(`output_dir/manifest.json`) records the backend, the settings and a fingerprint of the questions. A rerun with the same
questions and settings skips the finished shards; since every sample row is seeded from (seed, question, sample
index), an interrupted run finished by a rerun ends with the same records as an uninterrupted one.

Several workers (processes, GPUs or machines) share one question list with `num_workers=N, worker_index=i`: worker i
samples the questions whose id hashes to i ([`worker_of`]: SHA-256 of the id, so the assignment does not depend on
the order or number of the other questions), each into its own `output_dir`, and [`merge_samples`] checks that the N
manifests agree and writes the records in the original question order, in the layout one worker would have written.

What a merge shares with one worker's run, and what it does not: the ids, the question fields, the record order, the
shards and the seeds are the same (seeds are per question, so which worker samples a question does not change its
random draws), and so, in practice, are the greedy answers, their tokens and the sampled answers. The log-probabilities
(`greedy_logprobs`, `greedy_cumulative_logprobs`) may differ by float rounding, about 1e-5 (8.6e-6 measured on
SmolLM2): a worker batches other questions together, which changes the padding, the prefix shared by a batch and the
order of the float reductions. For the same reason a near-tie between two tokens could, rarely, decode another token.
The timing fields differ.

Layout of `output_dir`:

```
manifest.json                  # written atomically first, rewritten with totals when all shards are done
shards/shard-00000.parquet     # records of questions[0:shard_size], in question order
shards/shard-00001.parquet
...
```
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, replace
from typing import Any

from tqdm.auto import tqdm

from ..atomic import atomic_write_text
from ..prompts import chat_template_kwargs_for, check_prompt_texts
from .decoding import check_prompt_lengths
from .generation import SamplingSettings, build_prompt_ids
from .records import MANIFEST_FORMAT, MANIFEST_NAME, normalize_record, read_records, save_records


__all__ = [
    "MANIFEST_NAME", "TIMING_FIELDS", "merge_samples", "questions_fingerprint", "sample_records", "shard_path",
    "worker_of",
]

logger = logging.getLogger(__name__)

TIMING_FIELDS = ("shard_seconds", "shard_tokens")
"""Per-record fields that vary between runs (wall time of the shard that produced the record, and its tokens)."""

# Settings that do not change the records: a rerun may change them (e.g. a smaller batch after running out of memory).
_FREE_SETTINGS = ("batch_size",)
LATER_SETTINGS = {"greedy_repetition_penalty": 1.0, "chat_template_kwargs": {}}
"""Settings added after manifests were first written, with the value that a manifest without them was sampled with
(what the code did before the setting existed), so such a run still resumes and merges."""


def shard_path(output_dir: str | os.PathLike, index: int) -> str:
    """Path of shard `index` in `output_dir`."""
    return os.path.join(os.fspath(output_dir), "shards", f"shard-{index:05d}.parquet")


def _prepare_questions(questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies with `id` (row index when absent; always a string), `answer` (a list; `[]` when absent) and `dataset`."""
    prepared = []
    for row, question in enumerate(questions):
        if not isinstance(question, dict):
            raise ValueError(f"Question row {row} must be a dict with a 'question', got {type(question).__name__}.")
        text = question.get("question")
        name = f"row {row}" + (f" (id {question['id']!r})" if question.get("id") is not None else "")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"Question {name} has an empty or non-string 'question': {text!r}.")
        check_prompt_texts([text], [f"question {name}"])
        defaults = {"id": question.get("id", row), "answer": question.get("answer"), "dataset": question.get("dataset")}
        prepared.append(normalize_record({**question, **defaults}))
    return prepared


def check_unique_ids(questions: list[dict[str, Any]]) -> None:
    """Refuse one id given to two different questions: records are keyed by id (resuming, merging, evaluation), so
    the second question's answers would be taken for the first's. The same question repeated under its id is fine
    (see [`_warn_repeats`])."""
    seen: dict[str, str] = {}
    for row, question in enumerate(questions):
        key = str(question["id"])
        if seen.setdefault(key, question["question"]) != question["question"]:
            raise ValueError(f"Id {question['id']!r} names two different questions ({seen[key][:60]!r} and, at row "
                             f"{row}, {question['question'][:60]!r}): give every question its own id.")


def _warn_repeats(questions: list[dict[str, Any]]) -> None:
    """Warn (with the count) when questions repeat: each is sampled once per shard and its answers copied, since the
    samples are seeded by the question and would be the same."""
    counts: dict[str, int] = {}
    for question in questions:
        counts[question["question"]] = counts.get(question["question"], 0) + 1
    repeats = {text: n for text, n in counts.items() if n > 1}
    if repeats:
        text, n = max(repeats.items(), key=lambda item: item[1])
        logger.warning(
            "%d of %d questions repeat an earlier one (%d distinct repeated, e.g. %r x%d); each is sampled once per "
            "shard and its answers copied (samples are seeded by the question). Deduplicate the table if the "
            "repeats are a mistake.", sum(repeats.values()) - len(repeats), len(questions), len(repeats), text[:80], n,
        )


def questions_fingerprint(questions: list[dict[str, Any]]) -> str:
    """SHA-256 of the question rows (all their fields, in order): what a rerun must match to resume."""
    digest = hashlib.sha256()
    for question in questions:
        digest.update(json.dumps(question, sort_keys=True, default=str, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def worker_of(question_id: Any, num_workers: int) -> int:
    """The worker, in `[0, num_workers)`, that samples the question with id `question_id`: the first 8 bytes of the
    SHA-256 of `str(question_id)`, modulo `num_workers` (stable across processes, machines and Python versions)."""
    digest = hashlib.sha256(str(question_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % num_workers


def _check_worker(num_workers: Any, worker_index: Any) -> None:
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"`num_workers` must be an integer >= 1, got {num_workers!r}.")
    if not isinstance(worker_index, int) or not 0 <= worker_index < num_workers:
        raise ValueError(f"`worker_index` must be an integer in [0, {num_workers}), got {worker_index!r}.")


def _single_worker(num_questions: Any) -> dict[str, Any]:
    """The `worker` entry of a run that samples every question (also read for manifests written before workers)."""
    return {"index": 0, "num_workers": 1, "total_questions": num_questions}


def _check_context(backend: Any, questions: list[dict[str, Any]], settings: SamplingSettings) -> None:
    """Refuse, before sampling, questions whose prompt and answer do not fit the backend's context (naming their ids
    and token counts); a backend without `tokenizer` and `context_length` is not checked here."""
    tokenizer, limit = getattr(backend, "tokenizer", None), getattr(backend, "context_length", None)
    if tokenizer is None or not isinstance(limit, int) or not questions:
        return
    prompt_ids = build_prompt_ids(tokenizer, [q["question"] for q in questions], settings)
    check_prompt_lengths(prompt_ids, limit, settings.max_new_tokens, [f"id {q['id']!r}" for q in questions])


def _backend_info(backend: Any) -> dict[str, Any]:
    return {
        "kind": getattr(backend, "kind", type(backend).__name__),
        "name": getattr(backend, "name", None),
        "weights_source": getattr(backend, "weights_source", None),
    }


def _load_manifest(path: str, advice: str) -> dict[str, Any]:
    """The sampling manifest at `path`, its `worker` entry filled in when it predates workers; a `ValueError` ending
    in `advice` when it is unreadable or not ours."""
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot read {path} ({error}); {advice}.") from None
    if found.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path} is not a sampling manifest written by elical-hf; {advice}.")
    if isinstance(found.get("settings"), dict):
        found["settings"] = {**LATER_SETTINGS, **found["settings"]}
    return {"worker": _single_worker(found.get("num_questions")), **found}


def _check_manifest(path: str, expected: dict[str, Any]) -> None:
    """Raise `ValueError` when the manifest at `path` was written for other questions, settings or backend."""
    found = _load_manifest(path, "use a fresh output_dir or delete the folder")
    found_settings = {k: v for k, v in found.get("settings", {}).items() if k not in _FREE_SETTINGS}
    expected_settings = {k: v for k, v in expected["settings"].items() if k not in _FREE_SETTINGS}
    differences = [
        f"settings.{k}: {found_settings.get(k)!r} -> {expected_settings.get(k)!r}"
        for k in sorted(set(found_settings) | set(expected_settings))
        if found_settings.get(k) != expected_settings.get(k)
    ]
    for key in ("backend", "num_questions", "shard_size", "fingerprint", "worker"):
        if found.get(key) != expected[key]:
            differences.append(f"{key}: {found.get(key)!r} -> {expected[key]!r}")
    if differences:
        raise ValueError(
            f"{os.path.dirname(path)} holds records sampled with other questions, settings or backend; resuming would "
            f"mix them. Use a fresh output_dir (or delete this one). Differences: " + "; ".join(differences)
        )


def _load_shard(path: str, expected: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The shard's records when the file is readable and matches its questions (ids and count), else `None`."""
    if not os.path.exists(path):
        return None
    try:
        records = read_records(path)
    except Exception as error:  # truncated or corrupted file
        logger.warning("Shard %s is unreadable (%s: %s); sampling it again.", path, type(error).__name__, error)
        return None
    ids = [r.get("id") for r in records]
    if ids != [q["id"] for q in expected]:
        logger.warning(
            "Shard %s holds %d records (ids %s...) but its slice has %d questions; sampling it again.",
            path, len(records), ids[:3], len(expected),
        )
        return None
    return records


def sample_records(
    questions: list[dict[str, Any]],
    backend: Any,
    settings: SamplingSettings | None,
    output_dir: str | os.PathLike,
    shard_size: int = 64,
    progress: bool = True,
    *,
    num_workers: int = 1,
    worker_index: int = 0,
) -> list[dict[str, Any]]:
    """Sample the greedy answer and k answers for every question (or for this worker's share), in resumable shards
    under `output_dir`.

    Args:
        questions (`list[dict]`):
            Rows with a non-empty `question`; `id` (default: the row index), `answer` (gold aliases, default `[]`) and
            `dataset` are optional, and every other field is copied into the records.
        backend ([`~elical_hf.signals.backends.HFBackend`], [`~elical_hf.signals.backends.VLLMBackend`], ...):
            Anything with `name`, `kind` and `generate(questions, settings, progress)`.
        settings ([`SamplingSettings`], *optional*): Decoding settings; `None` means the paper's defaults.
        output_dir (`str` or `os.PathLike`): Gets `manifest.json` and `shards/`.
        shard_size (`int`, *optional*, defaults to `64`): Questions per shard (and per call to the backend).
        progress (`bool`, *optional*, defaults to `True`): Progress bar over questions with questions/s and tokens/s.
        num_workers (`int`, *optional*, defaults to `1`), worker_index (`int`, *optional*, defaults to `0`):
            Sample only the questions of worker `worker_index` out of `num_workers` ([`worker_of`] their id); every
            worker gets the same `questions` and its own `output_dir`, and [`merge_samples`] combines the folders.

    Returns:
        `list[dict]`: one normalized record per question (of this worker), in input order: the question's fields, the
        answers of [`generate_answers`], `model` (the backend's name), `shard`, and the timing fields [`TIMING_FIELDS`]
        (`shard_seconds`, `shard_tokens`: wall time and generated tokens of the whole shard).

    Raises:
        `ValueError`: for an empty question (naming its row), `shard_size < 1`, an `output_dir` holding records of
        other questions, settings, backend or worker (a manifest mismatch; only `batch_size` may change between runs),
        or questions whose prompt and `settings.max_new_tokens` do not fit the backend's `context_length` (naming
        their ids and token counts; checked before anything is sampled).

    A shard file that cannot be read, or whose ids or row count do not match its slice, is reported (logged warning)
    and sampled again; finished shards are never lost. Two processes must not write to the same `output_dir`.
    """
    settings = settings if settings is not None else SamplingSettings()
    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is not None:  # the manifest records the template variables the prompts were really rendered with
        settings = replace(settings, chat_template_kwargs=chat_template_kwargs_for(tokenizer,
                                                                                   settings.chat_template_kwargs))
    if not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"`shard_size` must be an integer >= 1, got {shard_size!r}.")
    _check_worker(num_workers, worker_index)
    questions = _prepare_questions(list(questions))
    check_unique_ids(questions)
    _warn_repeats(questions)
    fingerprint, total = questions_fingerprint(questions), len(questions)
    worker = _single_worker(total)
    if num_workers > 1:
        positions = [i for i, q in enumerate(questions) if worker_of(q["id"], num_workers) == worker_index]
        questions = [questions[i] for i in positions]
        worker = {"index": worker_index, "num_workers": num_workers, "total_questions": total}
    _check_context(backend, questions, settings)  # before anything is written
    output_dir = os.fspath(output_dir)
    num_shards = -(-len(questions) // shard_size)
    manifest = {
        "format": MANIFEST_FORMAT,
        "backend": _backend_info(backend),
        "settings": asdict(settings),
        "num_questions": len(questions),
        "shard_size": shard_size,
        "num_shards": num_shards,
        "fingerprint": fingerprint,
        "worker": worker,
    }
    if num_workers > 1:
        manifest["positions"] = positions  # where this worker's questions stand in the whole list, for merging
    manifest_path = os.path.join(output_dir, MANIFEST_NAME)
    os.makedirs(os.path.join(output_dir, "shards"), exist_ok=True)
    if os.path.exists(manifest_path):
        _check_manifest(manifest_path, manifest)
    else:
        if glob.glob(os.path.join(output_dir, "shards", "shard-*.parquet")):
            raise ValueError(f"{output_dir}/shards holds shards but no {MANIFEST_NAME}; use a fresh output_dir.")
        atomic_write_text(manifest_path, json.dumps({**manifest, "complete": False}, indent=2) + "\n")
    for stale in glob.glob(os.path.join(output_dir, "shards", ".tmp-*")):  # left by a killed writer
        os.remove(stale)

    slices = [questions[i * shard_size : (i + 1) * shard_size] for i in range(num_shards)]
    shards = [_load_shard(shard_path(output_dir, i), chunk) for i, chunk in enumerate(slices)]
    done = sum(len(s) for s, records in zip(slices, shards) if records is not None)
    if done:
        logger.info("Resuming in %s: %d of %d questions already sampled.", output_dir, done, len(questions))
    bar = tqdm(total=len(questions), initial=done, unit="q", desc="Sampling", disable=not progress)
    start, new_questions, new_tokens = time.perf_counter(), 0, 0
    try:
        for index, (chunk, records) in enumerate(zip(slices, shards)):
            if records is not None:
                continue
            shard_start = time.perf_counter()
            distinct = list(dict.fromkeys(q["question"] for q in chunk))  # a repeated question is sampled once
            answers = backend.generate(distinct, settings, progress=False)
            seconds = time.perf_counter() - shard_start
            if len(answers) != len(distinct):
                raise RuntimeError(f"The backend returned {len(answers)} answers for {len(distinct)} questions.")
            tokens = sum(int(a.get("num_generated_tokens", 0)) for a in answers)  # tokens generated, once each
            by_question = dict(zip(distinct, answers))
            answers = [dict(by_question[q["question"]]) for q in chunk]
            timing = {"model": backend.name, "shard": index, "shard_seconds": seconds, "shard_tokens": tokens}
            records = [normalize_record({**q, **a, **timing}) for q, a in zip(chunk, answers)]
            save_records(records, shard_path(output_dir, index))
            shards[index] = records
            new_questions, new_tokens = new_questions + len(chunk), new_tokens + tokens
            elapsed = max(time.perf_counter() - start, 1e-9)
            bar.update(len(chunk))
            bar.set_postfix(q_s=f"{new_questions / elapsed:.2f}", tok_s=f"{new_tokens / elapsed:.1f}")
    finally:
        bar.close()
    all_records = [record for records in shards for record in records]
    totals = {
        "seconds": sum(r["shard_seconds"] for i, r in enumerate(all_records) if i % shard_size == 0),
        "generated_tokens": sum(r.get("num_generated_tokens") or 0 for r in all_records),
    }
    atomic_write_text(manifest_path, json.dumps({**manifest, "complete": True, "totals": totals}, indent=2) + "\n")
    return all_records


def _read_manifest(folder: str) -> dict[str, Any]:
    """The manifest of a finished worker's folder (a `ValueError` otherwise)."""
    manifest = _load_manifest(os.path.join(folder, MANIFEST_NAME), "pass the output_dir of an `elical-hf sample` run")
    if not manifest.get("complete"):
        raise ValueError(f"{folder} is not finished (its manifest says complete: false); rerun its sample command.")
    return manifest


def _run_signature(manifest: dict[str, Any]) -> dict[str, Any]:
    """What every worker of one sampling run must share: backend, settings (but `batch_size`), questions, workers."""
    return {
        "backend": manifest.get("backend"),
        "settings": {k: v for k, v in manifest.get("settings", {}).items() if k not in _FREE_SETTINGS},
        "fingerprint": manifest.get("fingerprint"),
        "num_workers": manifest["worker"].get("num_workers"),
        "total_questions": manifest["worker"].get("total_questions"),
    }


def _check_workers_agree(folders: list[str], manifests: list[dict[str, Any]]) -> None:
    """One `ValueError` listing every way the workers' manifests disagree, miss a worker or repeat one."""
    expected, problems = _run_signature(manifests[0]), []
    for folder, manifest in zip(folders[1:], manifests[1:]):
        found = _run_signature(manifest)
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
        raise ValueError("Cannot merge these sampling folders: " + "; ".join(problems) + ".")


def merge_samples(inputs: list[str | os.PathLike], output_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Combine the folders of the N workers of one sampling run into the layout one worker would have written (the
    same ids, question fields, order, shards and seeds; log-probabilities may differ by float rounding, since the
    workers batched other questions together: see the module docstring).

    Args:
        inputs (`list[str]`): The `output_dir` of every worker ([`sample_records`] with `num_workers=N`), each
            finished, in any order.
        output_dir (`str` or `os.PathLike`): Gets `manifest.json` and `shards/` (same layout, shard size and record
            order as a single run, so [`sample_records`] with `num_workers=1` resumes it without sampling anything);
            must not exist or be empty. Written atomically: it appears complete or not at all.

    Returns:
        `list[dict]`: the merged records, in the original question order.

    Raises:
        `ValueError`: for an unfinished or unreadable folder, manifests that disagree (backend, settings other than
        `batch_size`, questions, number of workers), a worker missing or given twice, or shards that do not hold the
        questions their manifest lists (overlaps or gaps).
    """
    from ..atomic import atomic_folder

    folders = [os.fspath(folder) for folder in inputs]
    output_dir = os.fspath(output_dir)
    if not folders:
        raise ValueError("No sampling folders to merge.")
    if os.path.abspath(output_dir) in {os.path.abspath(f) for f in folders}:
        raise ValueError(f"The merged output_dir {output_dir} must not be one of the inputs.")
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        raise ValueError(f"{output_dir} is not empty; merge into a new folder.")
    manifests = [_read_manifest(folder) for folder in folders]
    _check_workers_agree(folders, manifests)
    total = manifests[0]["worker"]["total_questions"]
    merged: list[dict[str, Any] | None] = [None] * total
    for folder, manifest in zip(folders, manifests):
        positions = manifest.get("positions", list(range(manifest["num_questions"])))
        files = [shard_path(folder, i) for i in range(manifest["num_shards"])]
        missing = [file for file in files if not os.path.isfile(file)]
        if missing:
            raise ValueError(f"{missing[0]} is missing ({len(missing)} shard file(s) of {folder}): rerun that worker's "
                             "sample command to sample them again.")
        records = [record for file in files for record in read_records(file)]
        if len(records) != len(positions) or any(not 0 <= p < total for p in positions):
            raise ValueError(f"{folder} holds {len(records)} records for {len(positions)} questions; its shards were "
                             "changed after sampling. Sample that worker again into a fresh folder.")
        for position, record in zip(positions, records):
            if merged[position] is not None:
                raise ValueError(f"Question {position} (id {record.get('id')!r}) was sampled by two workers.")
            merged[position] = record
    gaps = [i for i, record in enumerate(merged) if record is None]
    if gaps:
        raise ValueError(f"{len(gaps)} questions were sampled by no worker (positions {gaps[:5]}...).")
    first = manifests[0]
    shard_size = first["shard_size"]
    records = [{**record, "shard": i // shard_size} for i, record in enumerate(merged)]
    manifest = {
        **{key: first[key] for key in ("format", "backend", "settings", "shard_size", "fingerprint")},
        "num_questions": total,
        "num_shards": -(-total // shard_size),
        "worker": _single_worker(total),
        "complete": True,
        "totals": {key: sum(m.get("totals", {}).get(key, 0) for m in manifests)
                   for key in ("seconds", "generated_tokens")},
        "merged_from": [{"folder": os.path.abspath(f), "worker": m["worker"]["index"]} for f, m in zip(folders, manifests)],
    }
    with atomic_folder(output_dir) as staging:
        for index in range(manifest["num_shards"]):
            save_records(records[index * shard_size : (index + 1) * shard_size], shard_path(staging, index))
        atomic_write_text(os.path.join(staging, MANIFEST_NAME), json.dumps(manifest, indent=2) + "\n")
    return records
