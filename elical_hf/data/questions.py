"""The paper's QA datasets (in-domain and out-of-domain), and the real questions of them bundled with the package,
with a subject-stratified subset of MMLU (multiple choice; see ``resources/qa/README.md``)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import random
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Iterable, Mapping

__all__ = [
    "BUNDLED_DATASETS", "IN_DOMAIN", "IN_DOMAIN_DATASETS", "MULTIPLE_CHOICE", "MULTIPLE_CHOICE_ROLE", "OOD_DATASETS",
    "OUT_OF_DOMAIN", "bundled_file_sha256", "bundled_manifest", "load_bundled_questions", "normalize_question",
    "split_questions",
]

IN_DOMAIN_DATASETS: tuple[str, ...] = ("nq", "triviaqa", "hotpotqa", "2wikimultihopqa", "pararel")
"""The paper's in-domain datasets: their train questions train EliCal, their test questions are the in-domain test."""
OOD_DATASETS: tuple[str, ...] = ("squad", "webquestions", "complexwebquestions", "musique", "popqa")
"""The paper's out-of-domain datasets: test questions only."""
MULTIPLE_CHOICE_ROLE = "multiple-choice"
"""The manifest role of a bundled multiple-choice set (MMLU): neither in-domain nor out-of-domain, its rows carry
`choices`, `answer` `[<gold letter>]` and `subject` ([`~elical_hf.settings.multiple_choice`])."""

if TYPE_CHECKING:
    BUNDLED_DATASETS: dict[str, dict]
    """Dataset name -> manifest entry; the same (cached) dict as `bundled_manifest()`, loaded on first access."""
    IN_DOMAIN: tuple[str, ...]
    """The bundled in-domain datasets: those of `IN_DOMAIN_DATASETS` with a bundled subset, in that order."""
    OUT_OF_DOMAIN: tuple[str, ...]
    """The bundled out-of-domain datasets: those of `OOD_DATASETS` with a bundled subset, in that order."""
    MULTIPLE_CHOICE: tuple[str, ...]
    """The bundled multiple-choice datasets (role `MULTIPLE_CHOICE_ROLE`), in manifest order: `("mmlu",)`."""


def _qa_dir():
    return files("elical_hf") / "resources" / "qa"


@functools.lru_cache(maxsize=None)
def bundled_manifest() -> dict[str, dict]:
    """
    Per-dataset metadata of the bundled QA subsets, read once from ``resources/qa/manifest.json``.

    Returns:
        `dict[str, dict]`: dataset name -> `{"file", "rows", "source_file", "source_rows", "role",
        "license", "citation", "url", "sha256", ...}`.
    """
    manifest = json.loads((_qa_dir() / "manifest.json").read_text(encoding="utf-8"))
    return dict(manifest["datasets"])  # cached: treat as read-only


def __getattr__(attr: str) -> Any:
    # Resolved lazily (PEP 562) so importing this module reads no file.
    if attr == "BUNDLED_DATASETS":
        return bundled_manifest()
    if attr in ("IN_DOMAIN", "OUT_OF_DOMAIN"):
        paper = IN_DOMAIN_DATASETS if attr == "IN_DOMAIN" else OOD_DATASETS
        return tuple(name for name in paper if name in bundled_manifest())
    if attr == "MULTIPLE_CHOICE":
        return tuple(name for name, entry in bundled_manifest().items() if entry["role"] == MULTIPLE_CHOICE_ROLE)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def normalize_question(text: str) -> str:
    """Lowercases `text` and collapses whitespace (the key used for de-duplication and splitting)."""
    return " ".join(str(text).lower().split())


def _entry(name: str) -> dict:
    manifest = bundled_manifest()
    if name not in manifest:
        raise ValueError(f"Unknown bundled dataset {name!r}; valid names: {', '.join(manifest)}.")
    return manifest[name]


def bundled_file_sha256(name: str) -> str:
    """Returns the sha256 hex digest of the bundled ``<name>.jsonl.gz`` file."""
    return hashlib.sha256((_qa_dir() / _entry(name)["file"]).read_bytes()).hexdigest()


def load_bundled_questions(
    name: str, limit: int | None = None, exclude: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """
    Loads one bundled QA subset.

    Args:
        name (`str`):
            One of `BUNDLED_DATASETS` (`IN_DOMAIN + OUT_OF_DOMAIN + MULTIPLE_CHOICE`).
        limit (`int`, *optional*):
            Return only the first `limit` rows (file order), counted after `exclude`. `None` returns all rows.
        exclude (`Iterable[str]`, *optional*):
            Questions to leave out, compared by `normalize_question` (e.g. the in-domain questions, to draw
            out-of-domain test questions that do not repeat them).

    Returns:
        `list[dict]`: rows `{"id": str, "question": str, "answer": list[str], "dataset": str}` in file order; those
        of a multiple-choice set (`MULTIPLE_CHOICE`) also hold `choices` and `subject`, their `question` the
        options ([`~elical_hf.settings.multiple_choice.format_question`]) and their `answer` the gold letter.

    Raises:
        `ValueError`: if `name` is unknown or `limit` is negative.
    """
    entry = _entry(name)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}.")
    rows: list[dict[str, Any]] = []
    if limit == 0:
        return rows
    excluded = {normalize_question(question) for question in exclude or ()}
    with gzip.open((_qa_dir() / entry["file"]).open("rb"), "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if excluded and normalize_question(row["question"]) in excluded:
                continue
            extra = {key: row[key] for key in ("choices", "subject") if key in row}  # multiple choice
            rows.append({"id": row["id"], "question": row["question"], "answer": list(row["answer"]), **extra,
                         "dataset": name})
            if limit is not None and len(rows) >= limit:
                break
    return rows


def question_parts(questions: Iterable[str], fractions: Mapping[str, float], seed: int = 42) -> list[str]:
    """
    The part of each question in [`split_questions`]'s rule, from the question texts alone (one short string per
    row, so a 560k-row table is split with `Dataset.select` instead of a Python list of its rows).

    Args:
        questions (`Iterable[str]`): The question of each row.
        fractions (`Mapping[str, float]`): Part name -> fraction, all positive, summing to 1.
        seed (`int`, *optional*, defaults to 42): Seed of the shuffle.

    Returns:
        `list[str]`: the part name of each row, in input order.

    Raises:
        `ValueError`: if `fractions` is empty, has a non-positive value, or does not sum to 1 (±1e-9).
    """
    if not fractions:
        raise ValueError("fractions must not be empty.")
    if any(not (float(v) > 0) for v in fractions.values()):
        raise ValueError(f"All fractions must be positive, got {dict(fractions)}.")
    if abs(sum(float(v) for v in fractions.values()) - 1.0) > 1e-9:
        raise ValueError(f"fractions must sum to 1, got {sum(fractions.values())}.")
    normalized = [normalize_question(q) for q in questions]
    keys = sorted(set(normalized))
    random.Random(seed).shuffle(keys)
    names = list(fractions)
    assignment: dict[str, str] = {}
    cumulative, start = 0.0, 0
    for i, part in enumerate(names):
        cumulative += float(fractions[part])
        end = len(keys) if i == len(names) - 1 else round(cumulative * len(keys))
        for key in keys[start:end]:
            assignment[key] = part
        start = max(start, end)
    return [assignment[key] for key in normalized]


def split_questions(
    rows: Iterable[dict[str, Any]], fractions: Mapping[str, float], seed: int = 42
) -> dict[str, list[dict[str, Any]]]:
    """
    Splits `rows` into disjoint parts, keeping rows with the same normalized question together.

    The distinct normalized questions are shuffled with `random.Random(seed)` (after sorting, so the
    result does not depend on input order) and cut into consecutive blocks sized by `fractions`; each
    row goes to the part of its question ([`question_parts`]). Within a part, rows keep their input order.

    Args:
        rows (`Iterable[dict]`):
            Rows with a `"question"` key, e.g. from `load_bundled_questions`.
        fractions (`Mapping[str, float]`):
            Part name -> fraction, e.g. `{"train": 0.6, "dev": 0.1, "test": 0.3}`. All positive, summing to 1.
        seed (`int`, *optional*, defaults to 42):
            Seed of the shuffle.

    Returns:
        `dict[str, list[dict]]`: part name -> rows, with the keys in the order of `fractions`.

    Raises:
        `ValueError`: if `fractions` is empty, has a non-positive value, or does not sum to 1 (±1e-9).
    """
    rows = list(rows)
    out: dict[str, list[dict[str, Any]]] = {part: [] for part in fractions}
    for row, part in zip(rows, question_parts([r["question"] for r in rows], fractions, seed)):
        out[part].append(row)
    return out
