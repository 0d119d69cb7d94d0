"""Tests for the bundled QA subsets (``elical_hf.data.questions``); runs in about a second, no network."""

from __future__ import annotations

import hashlib
from importlib.resources import files

import pytest

from elical_hf.data.questions import (
    BUNDLED_DATASETS,
    IN_DOMAIN,
    MULTIPLE_CHOICE,
    OUT_OF_DOMAIN,
    bundled_file_sha256,
    bundled_manifest,
    load_bundled_questions,
    normalize_question,
    split_questions,
)

ALL_NAMES = IN_DOMAIN + OUT_OF_DOMAIN  # the free-form sets (MMLU's rows: tests/test_mmlu_questions.py)
FRACTIONS = {"train": 0.6, "dev": 0.1, "test": 0.3}


def test_manifest_lists_exactly_the_named_datasets():
    assert set(BUNDLED_DATASETS) == set(ALL_NAMES + MULTIPLE_CHOICE)
    assert BUNDLED_DATASETS is bundled_manifest()
    assert MULTIPLE_CHOICE == ("mmlu",)
    assert not set(IN_DOMAIN) & set(OUT_OF_DOMAIN) and not set(ALL_NAMES) & set(MULTIPLE_CHOICE)
    for name in ALL_NAMES + MULTIPLE_CHOICE:
        entry = BUNDLED_DATASETS[name]
        roles = {**dict.fromkeys(IN_DOMAIN, "in-domain"), **dict.fromkeys(MULTIPLE_CHOICE, "multiple-choice")}
        assert entry["role"] == roles.get(name, "ood")
        assert entry["file"] == f"{name}.jsonl.gz"
        assert entry["license"] and entry["citation"] and entry["source_file"]
        assert 0 < entry["rows"] <= entry["source_rows"]


@pytest.mark.parametrize("name", ALL_NAMES)
def test_dataset_loads_with_manifest_row_count(name):
    rows = load_bundled_questions(name)
    assert len(rows) == BUNDLED_DATASETS[name]["rows"]
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({normalize_question(r["question"]) for r in rows}) == len(rows)
    for r in rows:
        assert set(r) == {"id", "question", "answer", "dataset"}
        assert r["dataset"] == name and r["id"].startswith(f"{name}-")
        assert isinstance(r["question"], str) and r["question"].strip()
        assert isinstance(r["answer"], list) and r["answer"]
        assert all(isinstance(a, str) and a.strip() for a in r["answer"])
    # file order follows the original line index
    indices = [int(r["id"].rsplit("-", 1)[1]) for r in rows]
    assert indices == sorted(indices)


@pytest.mark.parametrize("name", ALL_NAMES + MULTIPLE_CHOICE)
def test_manifest_sha256_matches_file(name):
    data = (files("elical_hf") / "resources" / "qa" / f"{name}.jsonl.gz").read_bytes()
    assert hashlib.sha256(data).hexdigest() == BUNDLED_DATASETS[name]["sha256"]
    assert bundled_file_sha256(name) == BUNDLED_DATASETS[name]["sha256"]


def test_limit():
    full = load_bundled_questions("nq")
    assert load_bundled_questions("nq", limit=5) == full[:5]
    assert load_bundled_questions("nq", limit=0) == []
    assert load_bundled_questions("nq", limit=10**9) == full
    with pytest.raises(ValueError, match="limit"):
        load_bundled_questions("nq", limit=-1)


def test_exclude_drops_questions_by_normalized_text_before_the_limit():
    full = load_bundled_questions("nq")
    dropped = ["  " + full[0]["question"].upper() + " ", full[2]["question"]]
    kept = load_bundled_questions("nq", limit=3, exclude=dropped)
    assert kept == [full[1], full[3], full[4]]
    assert load_bundled_questions("nq", exclude=[]) == full


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError) as err:
        load_bundled_questions("triviaqa")
    for name in ALL_NAMES:
        assert name in str(err.value)


def _rows_with_duplicates() -> list[dict]:
    rows = load_bundled_questions("pararel", limit=500)
    # near-duplicates differing only in case/whitespace must stay together
    dups = [dict(r, id=r["id"] + "-dup", question="  " + r["question"].upper() + " ") for r in rows[::7]]
    return rows + dups


def test_split_is_deterministic_and_covers_all_rows():
    rows = _rows_with_duplicates()
    a = split_questions(rows, FRACTIONS, seed=3)
    b = split_questions(list(reversed(rows)), FRACTIONS, seed=3)
    assert list(a) == list(FRACTIONS)
    assert a == split_questions(rows, FRACTIONS, seed=3)
    # membership does not depend on input order
    assert {k: {r["id"] for r in v} for k, v in a.items()} == {k: {r["id"] for r in v} for k, v in b.items()}
    ids = [r["id"] for part in a.values() for r in part]
    assert sorted(ids) == sorted(r["id"] for r in rows)  # every row exactly once
    assert split_questions(rows, FRACTIONS, seed=4) != a


def test_split_is_disjoint_by_normalized_question_and_respects_fractions():
    rows = _rows_with_duplicates()
    parts = split_questions(rows, FRACTIONS)
    keys = {k: {normalize_question(r["question"]) for r in v} for k, v in parts.items()}
    names = list(keys)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            assert not keys[x] & keys[y]
    n_keys = sum(len(v) for v in keys.values())
    for name, frac in FRACTIONS.items():
        assert abs(len(keys[name]) / n_keys - frac) < 0.01


@pytest.mark.parametrize(
    "fractions",
    [{}, {"train": 0.5, "test": 0.4}, {"train": 1.2, "test": -0.2}, {"train": 1.0, "test": 0.0}],
)
def test_split_rejects_bad_fractions(fractions):
    with pytest.raises(ValueError):
        split_questions([{"question": "q"}], fractions)


def test_split_single_part_and_empty_rows():
    rows = load_bundled_questions("webquestions", limit=20)
    assert split_questions(rows, {"all": 1.0}) == {"all": rows}
    assert split_questions([], FRACTIONS) == {"train": [], "dev": [], "test": []}


def test_bundled_roles_come_from_the_paper_lists():
    # the order is the paper's: reproduce_paper's partitions (and cached runs) depend on it
    assert IN_DOMAIN == ("nq", "hotpotqa", "2wikimultihopqa", "pararel")
    assert OUT_OF_DOMAIN == ("squad", "webquestions", "popqa")
