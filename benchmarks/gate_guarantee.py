"""The gate's guarantee by simulation: how often the error-rate threshold of `elical-hf threshold --alpha` exceeds
alpha, how often one is written, and how much it answers, for the single fixed sequence of earlier versions ("old")
and the two fixed sequences of `elical_hf.metrics.risk_control` ("new"), on the same calibration draws.

Each setting gives the confidence `c` a known density `f` and the chance of a right answer a known `g(c)`, so the
selective risk `R(t) = E[1 - g(c) | c >= t]` of every candidate threshold is computed by numerical integration
(`scipy.integrate.quad`, per 0.01-wide cell). A calibration set of `n` rows is drawn as its counts per (cell, right or
wrong), a multinomial with those integrals as probabilities: the same law as drawing `n` rows and counting them. Both
procedures run on the counts through the package's `certify` (`tests/test_gate_guarantee.py` checks that it chooses
what `risk_controlling_threshold` chooses on drawn rows). Per setting, n and alpha (delta 0.1):

- violation: the share of draws that write a threshold whose true risk exceeds alpha (the guarantee: <= delta, no
  threshold counting as success), with the Monte-Carlo slack `3 sqrt(delta (1 - delta) / draws)`;
- written: the share of draws that write a threshold; violation | written: the share of those that exceed alpha;
- coverage: the mean share of questions answered (0 when nothing is written).

    HF_HUB_OFFLINE=1 python benchmarks/gate_guarantee.py [--draws 5000] [--write_doc]

writes `docs/results/gate_guarantee.json` and prints the markdown table; `--write_doc` also puts it in `docs/gate.md`
(between the `gate_guarantee` markers), where `tests/test_gate_guarantee.py` checks it against the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run from a checkout

from elical_hf.metrics.risk_control import DEFAULT_GRID, certify, min_answered  # noqa: E402


OUTPUT = os.path.join(REPO, "docs", "results", "gate_guarantee.json")
DOC = os.path.join(REPO, "docs", "gate.md")
MARKERS = ("<!-- gate_guarantee table: benchmarks/gate_guarantee.py --write_doc -->",
           "<!-- end gate_guarantee table -->")
DELTA = 0.1
SIZES = (100, 300, 1000)
ALPHAS = (0.05, 0.1, 0.2)


def _uniform(c: float) -> float:
    return 1.0


def _arcsine(c: float) -> float:  # Beta(0.5, 0.5): confidences piled at 0 and 1
    return 1.0 / (math.pi * math.sqrt(c * (1.0 - c))) if 0.0 < c < 1.0 else 0.0


SETTINGS: dict[str, dict[str, Any]] = {
    "calibrated": {"text": "c ~ U(0, 1), P(right | c) = c", "density": _uniform,
                   "wrong": lambda c, alpha: 1.0 - c},
    "sharp": {"text": "c ~ Beta(0.5, 0.5), P(right | c) = c", "density": _arcsine,
              "wrong": lambda c, alpha: 1.0 - c},
    "weak": {"text": "c ~ U(0, 1), P(right | c) = 0.6 + 0.38 c", "density": _uniform,
             "wrong": lambda c, alpha: 0.4 - 0.38 * c},
    "overconfident": {"text": "c ~ U(0, 1), P(right | c) = c^2", "density": _uniform,
                      "wrong": lambda c, alpha: 1.0 - c * c},
    "boundary": {"text": "c ~ U(0, 1), P(wrong | c) = alpha (1.75 - c): R(0.5) = alpha, above alpha below 0.5",
                 "density": _uniform, "wrong": lambda c, alpha: alpha * (1.75 - c)},
    "adversarial": {"text": "c ~ U(0, 1), P(wrong | c) = 2 alpha for c >= 0.9, alpha / 2 below: R > alpha on (0.7, 1], "
                            "falling as t falls from 0.9",
                    "density": _uniform, "wrong": lambda c, alpha: 2 * alpha if c >= 0.9 else alpha / 2},
}
"""The simulated models: the confidence's density and P(wrong | c) (which may depend on alpha)."""


def cell_probabilities(density: Callable[[float], float], wrong: Callable[[float], float]) -> np.ndarray:
    """P(cell j, right) and P(cell j, wrong) for the cells of the default grid (cell 0: c >= 0.99, cell j: c in
    [t_j, t_(j-1))), shape (thresholds, 2), by `scipy.integrate.quad`."""
    from scipy.integrate import quad

    edges = np.concatenate([[1.0], DEFAULT_GRID])
    out = np.zeros((DEFAULT_GRID.size, 2))
    for j in range(DEFAULT_GRID.size):
        low, high = float(edges[j + 1]), float(edges[j])
        mass = quad(density, low, high, limit=200)[0]
        bad = quad(lambda c: density(c) * wrong(c), low, high, limit=200, points=[0.9] if low < 0.9 < high else None)[0]
        out[j] = mass - bad, bad
    return out / out.sum()


def true_risk(cells: np.ndarray) -> np.ndarray:
    """R(t) at every threshold of the default grid (NaN where nothing is answered)."""
    mass, bad = np.cumsum(cells.sum(axis=1)), np.cumsum(cells[:, 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mass > 0, bad / mass, np.nan)


def draw_counts(cells: np.ndarray, n: int, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`draws` calibration sets of `n` rows as (answered, errors) at every threshold, shape (draws, thresholds)."""
    counts = rng.multinomial(n, cells.ravel(), size=draws).reshape(draws, *cells.shape)
    return np.cumsum(counts.sum(axis=2), axis=1), np.cumsum(counts[:, :, 1], axis=1)


def measure(chosen: np.ndarray, risk: np.ndarray, coverage: np.ndarray, alpha: float) -> dict[str, float]:
    """Violation, written and coverage shares of one procedure's chosen indices (-1: nothing written)."""
    written = chosen >= 0
    violated = written & (risk[np.maximum(chosen, 0)] > alpha)
    return {"violation": float(violated.mean()), "written": float(written.mean()),
            "violation_given_written": float(violated.sum() / written.sum()) if written.any() else None,
            "coverage": float(np.where(written, coverage[np.maximum(chosen, 0)], 0.0).mean())}


def simulate(draws: int, seed: int = 0, settings: tuple[str, ...] = tuple(SETTINGS), sizes: tuple[int, ...] = SIZES,
             alphas: tuple[float, ...] = ALPHAS, delta: float = DELTA) -> dict[str, Any]:
    """Every setting x n x alpha, `draws` calibration sets each, both procedures on the same sets."""
    rng = np.random.default_rng(seed)
    rows = []
    for name in settings:
        for alpha in alphas:
            setting = SETTINGS[name]
            cells = cell_probabilities(setting["density"], lambda c: setting["wrong"](c, alpha))
            risk, coverage = true_risk(cells), np.cumsum(cells.sum(axis=1))
            for n in sizes:
                answered, errors = draw_counts(cells, n, draws, rng)
                single = [(min_answered(alpha, delta), delta)]  # earlier versions' procedure
                old = certify(answered, errors, n, alpha, delta, sequences=single)["chosen"]
                new = certify(answered, errors, n, alpha, delta)["chosen"]
                best = coverage[risk <= alpha].max(initial=0.0)
                rows.append({"setting": name, "n": n, "alpha": alpha, "oracle_coverage": float(best),
                             "old": measure(old, risk, coverage, alpha), "new": measure(new, risk, coverage, alpha)})
    return {"delta": delta, "draws": draws, "seed": seed, "slack": 3 * math.sqrt(delta * (1 - delta) / draws),
            "settings": {name: SETTINGS[name]["text"] for name in settings}, "rows": rows}


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def markdown_table(results: dict[str, Any]) -> str:
    """The table `docs/gate.md` shows: one row per setting, n and alpha; old / new side by side."""
    lines = ["| setting | n | alpha | violation old / new | written old / new | violation given written old / new "
             "| coverage old / new (oracle) |", "|---|---:|---:|---|---|---|---|"]
    for row in results["rows"]:
        old, new = row["old"], row["new"]
        lines.append(f"| {row['setting']} | {row['n']} | {row['alpha']:g} | {_share(old['violation'])} / "
                     f"{_share(new['violation'])} | {_share(old['written'])} / {_share(new['written'])} | "
                     f"{_share(old['violation_given_written'])} / {_share(new['violation_given_written'])} | "
                     f"{_share(old['coverage'])} / {_share(new['coverage'])} ({row['oracle_coverage']:.2f}) |")
    return "\n".join(lines)


def summary(results: dict[str, Any]) -> dict[str, float]:
    """Per procedure: the largest violation rate, the mean written and coverage shares over all rows, and the
    largest violation rate among written thresholds where at least 1% of the draws write one."""
    rows = results["rows"]
    out = {}
    for method in ("old", "new"):
        out[f"{method}_max_violation"] = max(r[method]["violation"] for r in rows)
        out[f"{method}_mean_written"] = float(np.mean([r[method]["written"] for r in rows]))
        out[f"{method}_mean_coverage"] = float(np.mean([r[method]["coverage"] for r in rows]))
        out[f"{method}_max_violation_given_written"] = max(
            r[method]["violation_given_written"] for r in rows if r[method]["written"] >= 0.01)
    return out


def write_doc(table: str, path: str = DOC) -> None:
    """Replace the table between the markers of `docs/gate.md`."""
    text = open(path, encoding="utf-8").read()
    start, end = text.index(MARKERS[0]) + len(MARKERS[0]), text.index(MARKERS[1])
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text[:start] + "\n" + table + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=5000, help="Calibration sets per setting, n and alpha.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=OUTPUT)
    parser.add_argument("--write_doc", action="store_true", help="Put the table into docs/gate.md.")
    args = parser.parse_args(argv)
    results = simulate(args.draws, args.seed)
    results["summary"] = summary(results)
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
        handle.write("\n")
    table = markdown_table(results)
    print(table)
    print(json.dumps(results["summary"]))
    if args.write_doc:
        write_doc(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
