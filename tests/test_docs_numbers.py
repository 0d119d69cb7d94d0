"""The numbers README.md and its docs pages quote are the committed results' (`docs/results/*.json`), so the two cannot
drift apart, and a difference whose interval includes zero is worded as such. The README's results table is
`results.json`'s rows; the replication and demo summaries are in `docs/demo.md`, the diagnosis hit rates in
`docs/cli.md`, the precision figures in `docs/usage.md`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {name: (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8") for name in ("demo", "cli", "usage")}
INTERVAL = re.compile(r"[+−-]?\d+\.\d \[[+−-]?\d+\.\d, [+−-]?\d+\.\d\]")
ZERO_WORDS = ("not distinguishable from zero", "includes zero", "neither distinguishable from zero")


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def section(title: str, text: str = PAGES["demo"]) -> str:
    """One section of a page (by default `docs/demo.md`), its lines joined (a quoted figure may wrap)."""
    return " ".join(text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0].split())


def joined(text: str) -> str:
    return " ".join(text.split())


def signed(value: float) -> str:
    return f"{value:+.1f}".replace("-", "−")


def interval(value: float, low: float, high: float) -> str:
    return f"{signed(value)} [{signed(low)}, {signed(high)}]"


def committed_intervals() -> dict[str, tuple[float, float, float]]:
    """Every AUROC difference with its interval the results files hold: name -> (value, low, high)."""
    out = {}
    mmlu = load("mmlu.json")
    for file, entries in (("seed_differences.json", load("seed_differences.json")),
                          ("differences.json", load("differences.json")),
                          ("routing.json", load("routing.json")["differences"]),
                          ("mmlu.json", {name: {"mmlu": cell} for name, cell in mmlu["all"]["differences"].items()})):
        for name, entry in entries.items():
            for column, cell in entry.items():
                if isinstance(cell, dict) and "auroc_ci" in cell:
                    out[f"{file}: {name} / {column}"] = (cell["auroc"], *cell["auroc_ci"])
    return out


def normalise(text: str) -> str:
    """README writes a positive lower bound without its sign sometimes; compare intervals in one spelling."""
    value, low, high = (float(x.replace("−", "-")) for x in re.findall(r"[+−-]?\d+\.\d", text))
    return interval(value, low, high)


SUMMARIES = {"docs/demo.md": section("Replication at CPU scale"), "README.md": section("Does it work?", README)}
"""The two summaries of the replication: the README's and `docs/demo.md`'s."""


@pytest.mark.parametrize("page", SUMMARIES)
def test_every_replication_interval_is_a_committed_result(page):
    known = {interval(*v) for v in committed_intervals().values()}
    quoted = INTERVAL.findall(SUMMARIES[page])
    assert len(quoted) >= (6 if page == "docs/demo.md" else 3)
    for text in quoted:
        assert normalise(text) in known, f"{page} quotes {text}, which no file in docs/results/ holds"


@pytest.mark.parametrize("page", SUMMARIES)
def test_intervals_that_include_zero_say_so(page):
    text = SUMMARIES[page]
    for match in INTERVAL.finditer(text):
        value, low, high = (float(x.replace("−", "-")) for x in re.findall(r"[+−-]?\d+\.\d", match.group()))
        if low < 0 < high:
            around = text[max(0, match.start() - 250) : match.end() + 250]
            assert any(words in around for words in ZERO_WORDS), f"{match.group()} includes 0 but is not worded so"
            before = text[max(0, match.start() - 80) : match.start()]
            assert not re.search(r"\b(beats|wins|outperforms)\b", before), match.group()


def test_replication_point_figures_are_the_committed_ones():
    results = load("results.json")
    text = section("Replication at CPU scale")
    elical, full, cal = (results[m]["in-domain avg"]["auroc"] for m in ("EliCal@1000", "Cal-Only@all", "Cal-Only@1000"))
    assert f"({elical:.1f} vs {full:.1f}" in text
    assert f"EliCal@1000 reaches {100 * elical / full:.0f}%" in text and f"Cal-Only@1000 {100 * cal / full:.0f}%" in text
    assert f"Eli-Only's OOD AUROC ({results['Eli-Only']['OOD avg']['auroc']:.1f}" in text
    sizes = load("confidences.json")
    assert f"{len(sizes['ids']):,} test" in text


def test_runs_the_readme_names_were_run_or_are_said_not_to_be():
    results = load("results.json")
    text = section("Replication at CPU scale")
    for name in ("Prob", "N-Prob", "Consis-Lex", "Consis-Sem", "Verbal-0", "Eli-Only", "Cal-Only@all"):
        assert name in results, name
    assert "Verbal-10" not in results and "Verbal-10 was not" in text
    assert "EliCal@all" not in results and "EliCal@all with LoRA + head was not run" in text


def test_the_readme_results_table_is_the_committed_results():
    """Every row of the README's table: the run it names (`**EliCal@100**` is `EliCal@100`), its in-domain and OOD
    AUROC and in-domain ECE as `results.json` holds them."""
    results = load("results.json")
    table = re.findall(r"^\| \**([\w@-]+)\**[^|]*\| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|(?: [\d.—]+ \|)?$",
                       README.split("\n## Does it work?\n", 1)[1].split("\n## ", 1)[0], re.M)
    assert len(table) >= 6
    for name, labels, in_domain, ood, ece in table:
        cells = results[name]
        assert (in_domain, ood, ece) == (f"{cells['in-domain avg']['auroc']:.1f}", f"{cells['OOD avg']['auroc']:.1f}",
                                         f"{cells['in-domain avg']['ece']:.1f}"), name
        budget = name.rpartition("@")[2] if "@" in name else "0"
        assert labels.replace(",", "") == {"all": "4800"}.get(budget, budget), name
    assert {"EliCal@100", "Cal-Only@100", "EliCal@1000", "Cal-Only@1000"} <= {row[0] for row in table}


def test_the_demo_headline_is_the_committed_runs():
    demo = load("demo.json")
    assert "DEMO_HEADLINE" not in PAGES["demo"]
    assert demo["headline"] in section("The demo")
    low, high = demo["difference"]["in-domain avg"]["auroc_ci"]
    if low < 0 < high:
        assert "not distinguishable" in demo["headline"]


def test_diagnosis_hit_rates_are_the_committed_validation():
    budgets = load("diagnosis_validation.json")["budgets"]
    for n, cell in budgets.items():
        low, high = cell["hit_rate_ci"]
        quoted = f"{cell['hit_rate']:.0f}% [{low:.0f}, {high:.0f}] at {int(n):,}"
        assert quoted in joined(PAGES["cli"]), quoted


def test_precision_figures_are_the_committed_benchmark_run():
    figures = load("precision_agreement.json")["methods"]["Eli-Only"]
    low, high = figures["auroc_difference_ci"]
    two = [f"{v:+.2f}".replace("-", "−") for v in (figures["auroc_difference"], low, high)]
    text = joined(PAGES["usage"])
    assert f"by {figures['mean_abs_delta']:.4f} on average" in text
    assert f"in-domain AUROC by {two[0]} [{two[1]}, {two[2]}]" in text


@pytest.mark.parametrize("number", ["+16 AUROC", "~1,000 labels reach the all-label result", "the six training-free baselines, Eli-Only"])
def test_refuted_claims_are_gone(number):
    for text in (README, *PAGES.values()):
        assert number not in text


def test_prob_recomputes_from_the_committed_log_probabilities():
    """`confidences.json` keeps Prob as a log-probability too: at 6 decimals most Prob values round to 0."""
    import numpy as np

    from elical_hf.metrics.functional import auroc

    scores, results = load("confidences.json"), load("results.json")
    datasets, correct = np.asarray(scores["datasets"]), np.asarray(scores["correct"])
    log_prob = np.asarray(scores["log_prob"])
    for name in dict.fromkeys(scores["datasets"]):
        mask = datasets == name
        assert 100 * auroc(np.exp(log_prob[mask]), correct[mask]) == pytest.approx(results["Prob"][name]["auroc"])


def test_every_seed_is_committed_and_recomputes_the_seed_table():
    """`confidences.json` holds every run of every seed (`EliCal@100~43`): each per-seed difference of the seed table
    recomputes from it."""
    from elical_hf.data.questions import IN_DOMAIN
    from elical_hf.evaluation.tables import evaluate_table

    scores, seeds = load("confidences.json"), load("seed_differences.json")
    splits = ["in_domain_test" if name in IN_DOMAIN else "ood_test" for name in scores["datasets"]]
    assert {entry_seed for entry in seeds.values() for entry_seed in entry["seeds"]} == {42, 43, 44}
    for name, entry in seeds.items():  # "EliCal - Cal-Only @ 100"
        pair, budget = name.split(" @ ")
        a, b = pair.split(" - ")
        for i, seed in enumerate(entry["seeds"]):
            suffix = "" if seed == 42 else f"~{seed}"
            runs = {m: scores["confidences"][f"{m}@{budget}{suffix}"] for m in (a, b)}
            table = evaluate_table(scores["correct"], scores["datasets"], splits, runs)
            for column in ("in-domain avg", "OOD avg"):
                recomputed = table[a][column]["auroc"] - table[b][column]["auroc"]
                assert recomputed == pytest.approx(entry[column]["auroc_per_draw"][i], abs=0.05), (name, seed, column)


def test_every_interval_that_misses_its_estimate_is_an_ece_the_results_page_names():
    """A percentile interval that lies off its own point estimate is ECE's (near zero its resamples are biased upward),
    and docs/results.md's note names each such cell of `results.json` with its figures."""
    page = joined((ROOT / "docs" / "results.md").read_text(encoding="utf-8"))
    missed = []
    for method, row in load("results.json").items():
        for column, cell in row.items():
            for metric in ("auroc", "ece", "alignment"):
                low, high = cell.get(f"{metric}_ci") or (None, None)
                if None not in (low, high, cell[metric]) and not low <= cell[metric] <= high:
                    missed.append((method, column, metric, cell[metric], low, high))
    assert missed and {metric for _, _, metric, *_ in missed} == {"ece"}
    note = page.split(f"{len(missed)} ECE cells of the tables below", 1)[1][:1200]
    for method, column, _, value, low, high in missed:
        assert f"{method} on {column} ({value:.2f} [{low:.1f}, {high:.1f}]" in note, (method, column)


def script(path: str):
    """A script of `examples/` or `experiments/`, loaded by path (`experiments/` on the import path for its siblings)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_seed_table_of_the_results_page_is_the_committed_seed_differences():
    """docs/results.md's table of differences over seeds is what `reproduce_paper.py` writes from
    `seed_differences.json`, caption (what the interval is) included."""
    table = script("examples/reproduce_paper.py").seed_markdown(load("seed_differences.json"))
    assert table.replace("## ", "### ", 1) in (ROOT / "docs" / "results.md").read_text(encoding="utf-8")


def test_the_ablation_tables_of_the_results_page_are_the_committed_result():
    tables = script("experiments/scaling_ablations.py").markdown(load("ablations.json")).replace("## ", "### ")
    assert tables in (ROOT / "docs" / "results.md").read_text(encoding="utf-8")


def test_the_routing_table_of_the_results_page_is_the_committed_result():
    assert load("routing.json")["table"] in (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
