"""The MMLU results `docs/results.md` and the README quote recompute from what is committed: the per-question
confidences of `docs/results/mmlu.json`, the judged records of `docs/results/mmlu-smollm2-135m`, and the hand labels
of the option judge (`tests/data/option_judge_hand_labels.jsonl`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from elical_hf.metrics.functional import auroc, ece

from .test_examples import load_experiment


ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
RECORDS = RESULTS / "mmlu-smollm2-135m" / "records.parquet"


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def result() -> dict:
    return load("mmlu.json")


@pytest.fixture(scope="module")
def records() -> list[dict]:
    from elical_hf.signals.records import load_records

    return load_records(RECORDS, derive=False).to_list()


def test_every_method_recomputes_from_its_committed_confidences(result, records):
    assert result["ids"] == [r["id"] for r in records]
    correct = np.array(result["correct"])
    assert correct.tolist() == [int(bool(r["greedy_correctness"])) for r in records]
    assert result["all"]["accuracy"] == pytest.approx(100 * correct.mean())
    for name, draws in result["confidences"].items():
        cell = result["all"]["methods"][name]
        per_draw = [100 * auroc(np.array(d), correct) for d in draws]
        assert cell["auroc_per_draw"] == pytest.approx(per_draw), name
        assert cell["auroc"] == pytest.approx(np.mean(per_draw)), name
        assert cell["ece"] == pytest.approx(np.mean([100 * ece(np.array(d), correct) for d in draws])), name
        assert cell["auroc_ci"][0] <= cell["auroc"] <= cell["auroc_ci"][1], name
    for name, cell in result["all"]["differences"].items():
        a, b = name.split(" − ")
        assert cell["auroc"] == pytest.approx(result["all"]["methods"][a]["auroc"]
                                              - result["all"]["methods"][b]["auroc"]), name


def test_the_baselines_recompute_from_the_committed_records(result, records):
    from elical_hf.signals import BASELINES, compute_baselines

    for key in ("prob", "n_prob", "consis_sem", "option_prob"):
        values = compute_baselines([dict(r) for r in records], which=[key], progress=False)[key]
        assert result["confidences"][BASELINES[key].paper_name] == [pytest.approx(values)], key


def test_the_above_chance_view_follows_its_rule(result, records):
    experiment = load_experiment("mmlu_experiment")
    assert result["above_chance_view"]["subjects"] == experiment.above_chance_subjects(records)
    view = [r for r in records if r["subject"] in result["above_chance_view"]["subjects"]
            and experiment.half_of(r["id"]) == 1]
    assert result["above_chance_view"]["n"] == len(view)


def test_docs_results_shows_the_committed_tables(result):
    experiment = load_experiment("mmlu_experiment")
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert experiment.markdown(result) in page
    for sentence in experiment.summary(result).split("\n"):
        assert sentence in page, sentence


def test_the_option_judge_agreement_recomputes(records):
    committed = load("option_judge_agreement.json")
    agreement = load_experiment("option_judge_agreement")
    assert agreement.hand_label_check(records, str(ROOT / "tests" / "data" / "option_judge_hand_labels.jsonl")) \
        == committed["hand_labels"]
    golds = [r["answer"][0] for r in records]
    option = [bool(r["greedy_correctness"]) for r in records]
    for key, guard in (("reference_letter_rule", False), ("letter_rule_guarded", True)):
        other = [agreement.reference_letter_rule(r["greedy_response"], g, guard) for r, g in zip(records, golds)]
        recomputed = agreement.compare(option, other)
        for field, value in recomputed.items():
            assert (math.isnan(value) and math.isnan(committed[key][field])) or committed[key][field] == \
                pytest.approx(value), (key, field)


def test_the_readme_mmlu_column_is_the_committed_seed_42_runs(result):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \**([\w@-]+)\**[^|]*\| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ([\d.]+|—) \|$",
                      readme.split("\n## Does it work?\n", 1)[1].split("\n## ", 1)[0], re.M)
    assert len(rows) >= 6
    for name, mmlu in rows:
        cell = result["all"]["methods"].get(name)
        shown = "—" if cell is None else f"{cell['auroc_per_draw'][0]:.1f}"
        assert mmlu == shown, name


def test_docs_judges_quotes_the_committed_agreement():
    committed = load("option_judge_agreement.json")
    page = " ".join((ROOT / "docs" / "judges.md").read_text(encoding="utf-8").split())
    hand = committed["hand_labels"]
    for name in ("seen", "held_out"):
        assert f"| {hand[name]['n']} | {hand[name]['agree']} of {hand[name]['n']} |" in page
    for key in ("reference_letter_rule", "letter_rule_guarded", "llm_judge"):
        cell = committed[key]
        assert (f"| {cell['n']} | {cell['agreement']:.1f}% | {cell['kappa']:.2f} | {cell['other_correct']:.1f}% "
                f"({cell['option_correct']:.1f}%) |") in page, key
