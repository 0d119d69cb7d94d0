"""The reliability case registry behind `docs/reliability.md`.

Every reliability test (bad input, incomplete data, unsafe paths, kills and resumes) registers the case it checks
with [`case`]; `tests/test_reliability_table.py` collects the cases of every `tests/test_reliability_*.py` module
and checks that `docs/reliability.md` lists exactly them (regenerate it with
`ELICAL_HF_WRITE_RELIABILITY=1 python -m pytest tests/test_reliability_table.py`).

    from tests.reliability import case

    @case("input", "`elical-hf evaluate --bootstrap -5`", "exits 2: `--bootstrap must be >= 0, got -5`")
    def test_negative_bootstrap(...):
        ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


AREAS = {
    "silent": "Silently wrong results, now refused or reported",
    "input": "Errors a user can read",
    "data": "Data safety: resume, overwrite, permissions",
    "security": "Security: paths, links, tokens",
}
"""Table sections, in order."""


@dataclass(frozen=True)
class Case:
    area: str
    given: str
    outcome: str
    test: str


CASES: list[Case] = []


def case(area: str, given: str, outcome: str) -> Callable:
    """Register the reliability case a test checks: `given` (the input or event) and `outcome` (what happens now)."""
    if area not in AREAS:
        raise ValueError(f"Unknown reliability area {area!r}; one of {sorted(AREAS)}.")

    def register(test: Callable) -> Callable:
        CASES.append(Case(area, given, outcome, f"{test.__module__.rsplit('.', 1)[-1]}::{test.__name__}"))
        return test

    return register


def markdown(cases: list[Case]) -> str:
    """The table section of `docs/reliability.md`: one table per area, rows in test-module order."""
    lines = []
    for area, title in AREAS.items():
        rows = [c for c in cases if c.area == area]
        if not rows:
            continue
        lines += [f"### {title}", "", "| input or event | what happens now | test |", "|---|---|---|"]
        lines += [f"| {c.given} | {c.outcome} | `{c.test}` |" for c in rows]
        lines.append("")
    return "\n".join(lines)
