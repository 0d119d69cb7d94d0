"""`docs/reliability.md` lists exactly the reliability cases the tests check (see `tests/reliability.py`)."""

from __future__ import annotations

import glob
import importlib
import os

from tests.reliability import CASES, markdown


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "reliability.md")
BEGIN, END = "<!-- cases:begin -->", "<!-- cases:end -->"


def collected_cases():
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "test_reliability_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if name != "test_reliability_table":
            importlib.import_module(f"tests.{name}")
    return list(CASES)


def test_every_case_is_in_the_doc_and_nothing_else():
    cases = collected_cases()
    assert cases, "no reliability case registered"
    table = markdown(cases)
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    expected = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    if os.environ.get("ELICAL_HF_WRITE_RELIABILITY") == "1":
        with open(DOC, "w", encoding="utf-8") as handle:
            handle.write(expected)
    assert text == expected, "docs/reliability.md is stale: rerun with ELICAL_HF_WRITE_RELIABILITY=1"
