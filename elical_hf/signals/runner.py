"""Resumable, sharded sampling: questions -> raw HonestyBench records on disk, safe to kill and rerun.

[`sample_records`] cuts the question list into fixed shards (shard i holds questions `[i * shard_size, (i + 1) *
shard_size)`) and writes each finished shard atomically to `output_dir/shards/shard-00000.parquet`. A manifest
(`output_dir/manifest.json`) records the backend, the settings and a fingerprint of the questions. A rerun with the same
questions and settings skips the finished shards; since every sample row is seeded from (seed, question, sample
index), an interrupted run finished by a rerun ends with the same records as an uninterrupted one.

Several workers (processes, GPUs or machines) share one question list with `num_workers=N, worker_index=i`: worker i
samples the questions whose id hashes to i ([`~elical_hf.signals.shards.worker_of`]: SHA-256 of the id, so the
assignment does not depend on the order or number of the other questions), each into its own `output_dir`, and
[`merge_samples`] checks that the N manifests agree and writes the records in the original question order, in the
layout one worker would have written.

What a merge shares with one worker's run, and what it does not: the ids, the question fields, the record order, the
shards and the seeds are the same (seeds are per question, so which worker samples a question does not change its
random draws), and so, in practice, are the greedy answers, their tokens and the sampled answers. The log-probabilities
(`greedy_logprobs`, `greedy_cumulative_logprobs`) may differ by float rounding, about 1e-5 (8.6e-6 measured on
SmolLM2): a worker batches other questions together, which changes the padding, the prefix shared by a batch and the
order of the float reductions. For the same reason a near-tie between two tokens could, rarely, decode another token.
The timing fields differ.

The folder's layout and machinery (manifest checks, shards made again, worker split, merge) are
[`~elical_hf.signals.shards`]'s, shared with `elical-hf judge` ([`~elical_hf.signals.judge_runner`]).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter
from dataclasses import asdict, replace
from typing import Any

from tqdm.auto import tqdm

from ..settings.prompts import chat_template_kwargs_for, check_prompt_texts
from .decoding import check_prompt_lengths
from .generation import SamplingSettings, build_prompt_ids
from .records import MANIFEST_FORMAT, normalize_record, save_records
from .shards import (
    ShardedKind, check_run_options, count_finished, finish_folder, load_shard, merge_folders, open_folder, plan_run,
    shard_path,
)


__all__ = [
    "SAMPLED", "TIMING_FIELDS", "check_unique_ids", "merge_samples", "questions_fingerprint", "sample_records",
]

logger = logging.getLogger(__name__)

TIMING_FIELDS = ("shard_seconds", "shard_tokens")
"""Per-record fields that vary between runs (wall time of the shard that produced the record, and its tokens)."""

LATER_SETTINGS = {"greedy_repetition_penalty": 1.0, "chat_template_kwargs": {}}
"""Settings added after manifests were first written, with the value that a manifest without them was sampled with
(what the code did before the setting existed), so such a run still resumes and merges."""

SAMPLED = ShardedKind(MANIFEST_FORMAT, "sample", "questions", "sampling", "sampled", keys=("backend",),
                      later_settings=LATER_SETTINGS, numbered=True)
"""An `elical-hf sample` folder: its records carry their shard index; only `batch_size` may change between runs (it
does not change the records: e.g. a smaller batch after running out of memory)."""


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
    repeats = {text: n for text, n in Counter(q["question"] for q in questions).items() if n > 1}
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


def _check_context(backend: Any, questions: list[dict[str, Any]], settings: SamplingSettings) -> None:
    """Refuse, before sampling, questions whose prompt and answer do not fit the backend's context (naming their ids
    and token counts); a backend without `tokenizer` and `context_length` is not checked here."""
    tokenizer, limit = getattr(backend, "tokenizer", None), getattr(backend, "context_length", None)
    if tokenizer is None or not isinstance(limit, int) or not questions:
        return
    prompt_ids = build_prompt_ids(tokenizer, [q["question"] for q in questions], settings)
    check_prompt_lengths(prompt_ids, limit, settings.max_new_tokens, [f"id {q['id']!r}" for q in questions])


def _backend_info(backend: Any) -> dict[str, Any]:
    info = {
        "kind": getattr(backend, "kind", type(backend).__name__),
        "name": getattr(backend, "name", None),
        "weights_source": getattr(backend, "weights_source", None),
    }
    if getattr(backend, "tokenizer_source", None) is not None:  # a served model: whose template rendered the prompts
        info["tokenizer"] = backend.tokenizer_source
    return info


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
            Sample only the questions of worker `worker_index` out of `num_workers`
            ([`~elical_hf.signals.shards.worker_of`] of their id); every worker gets the same `questions` and its own
            `output_dir`, and [`merge_samples`] combines the folders.

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
    check_run_options(shard_size, num_workers, worker_index)
    questions = _prepare_questions(list(questions))
    check_unique_ids(questions)
    _warn_repeats(questions)
    questions, manifest, slices = plan_run(
        SAMPLED, questions, [q["id"] for q in questions], shard_size, num_workers, worker_index,
        questions_fingerprint(questions), backend=_backend_info(backend), settings=asdict(settings),
    )
    _check_context(backend, questions, settings)  # before anything is written
    output_dir = os.fspath(output_dir)
    open_folder(output_dir, manifest, SAMPLED)
    shards = [load_shard(shard_path(output_dir, i), [q["id"] for q in chunk], SAMPLED)
              for i, chunk in enumerate(slices)]
    done = count_finished(output_dir, SAMPLED, slices, shards)
    bar = tqdm(total=len(questions), initial=done, unit="q", desc="Sampling", disable=not progress)
    start, new_questions, new_tokens = time.perf_counter(), 0, 0
    try:
        for index, chunk in enumerate(slices):
            if shards[index] is None:
                shards[index], tokens = _sample_shard(backend, chunk, settings, index, shard_path(output_dir, index))
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
    finish_folder(output_dir, manifest, totals)
    return all_records


def _sample_shard(
    backend: Any, chunk: list[dict[str, Any]], settings: SamplingSettings, index: int, path: str
) -> tuple[list[dict[str, Any]], int]:
    """Sample shard `index`'s questions (each distinct question once) and write its records to `path`; returns the
    records and the tokens generated."""
    shard_start = time.perf_counter()
    distinct = list(dict.fromkeys(q["question"] for q in chunk))  # a repeated question is sampled once
    answers = backend.generate(distinct, settings, progress=False)
    seconds = time.perf_counter() - shard_start
    if len(answers) != len(distinct):
        raise RuntimeError(f"The backend returned {len(answers)} answers for {len(distinct)} questions.")
    tokens = sum(int(a.get("num_generated_tokens", 0)) for a in answers)  # tokens generated, once each
    by_question = dict(zip(distinct, answers))
    timing = {"model": backend.name, "shard": index, "shard_seconds": seconds, "shard_tokens": tokens}
    records = [normalize_record({**q, **by_question[q["question"]], **timing}) for q in chunk]
    save_records(records, path)
    return records, tokens


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
    return merge_folders(inputs, output_dir, SAMPLED)
