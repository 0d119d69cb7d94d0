"""`experiments/layer_experiment.py` end to end: a tiny 4-layer model on a slice of the committed replication records."""

from __future__ import annotations

import json
import math
import os

import pytest

from tests.conftest import save_tiny_base
from tests.test_examples import EXAMPLES, load_experiment


@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory) -> str:
    """60 train, every dev (200: the layer rule reads them) and 24 + 24 test records of the committed replication."""
    from elical_hf.signals.records import load_records, save_records

    records = load_records(os.path.join(EXAMPLES, "..", "docs", "results", "honestybench-smollm2-135m"), splits=True)
    chosen = [r for r in records if r["partition"] == "train"][::80]
    chosen += [r for r in records if r["partition"] == "dev"]
    chosen += [r for r in records if r["paper_split"] == "in_domain_test"][::40]
    chosen += [r for r in records if r["paper_split"] == "ood_test"][::40]
    folder = tmp_path_factory.mktemp("records")
    save_records(chosen, folder / "slice.parquet")
    return str(folder)


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory) -> str:
    return save_tiny_base(tmp_path_factory.mktemp("tiny-llama-4"), "llama", num_hidden_layers=4)


@pytest.mark.float32
def test_layer_experiment_measures_every_layer_and_chooses_on_dev(tiny_records, four_layers, tmp_path, capsys):
    out = tmp_path / "layers"
    common = ["--records", tiny_records, "--model", four_layers, "--output_dir", str(out), "--allow_other_model",
              "--seeds", "42", "43", "--label_budgets", "10", "20", "--head_epochs", "2", "--bootstrap", "20"]
    assert load_experiment("layer_experiment").main(common) == 0
    printed = capsys.readouterr().out
    assert "CPU: " in printed and "total" in printed
    result = json.loads((out / "layers.json").read_text())
    assert result["layers"] == [1, 2, 3, 4] and result["final_layer"] == 4
    assert result["sizes"] == {"train": 60, "dev": 200, "test": 52, "in_domain_test": 25, "ood_test": 27}
    assert result["fit_threads"] == 1 and result["model"] == four_layers
    runs = ["Eli-Only-head"] + [f"{m}@{n}" for n in (10, 20) for m in ("Cal-Only-head", "EliCal-head", "DiM", "P(IK)")]
    runs.append("SEP")
    assert list(dict.fromkeys(cell["run"] for cell in result["curves"])) == runs
    assert len(result["curves"]) == len(runs) * 4
    for cell in result["curves"]:
        seeds = 1 if cell["run"] == "SEP" else 2  # SEP has no seed: one run per layer
        for column in ("in-domain avg", "OOD avg"):
            entry = cell["test"][column]
            assert len(entry["auroc_per_seed"]) == seeds
            finite = [v for v in entry["auroc_per_seed"] if not math.isnan(v)]
            assert entry["auroc"] == pytest.approx(sum(finite) / len(finite)) if finite else math.isnan(entry["auroc"])
        assert len(cell["dev"]["auroc_per_seed"]) == seeds and cell["dev"]["n"] == 200
    # the chosen layer is the dev rule's: the highest mean dev AUROC (the earliest of equal ones), never test's
    assert result["selection"]["rule"] == "dev"
    by = {(cell["run"], cell["layer"]): cell for cell in result["curves"]}
    assert [row["run"] for row in result["chosen_vs_final"]] == runs
    for row in result["chosen_vs_final"]:
        dev = {layer: by[(row["run"], layer)]["dev"]["auroc"] for layer in result["layers"]}
        dev = {layer: -math.inf if math.isnan(v) else v for layer, v in dev.items()}
        assert row["chosen_layer"] == max(dev, key=lambda layer: (dev[layer], -layer)) and row["final_layer"] == 4
        for column in ("in-domain avg", "OOD avg"):
            diff = row["chosen_minus_final"][column]
            assert len(diff["auroc_ci"]) == 2 and len(diff["auroc_per_draw"]) == (1 if row["run"] == "SEP" else 2)
            if row["chosen_layer"] == 4:
                assert diff["auroc"] == 0
            chosen = by[(row["run"], row["chosen_layer"])]["test"][column]["auroc"]
            assert row["chosen"][column] == pytest.approx(chosen)
    assert (out / "auroc_vs_layer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "layers.md").read_text()
    assert "## Chosen layer vs final layer (4)" in text and "## Dev AUROC by layer" in text and "| 3 |" in text
    assert set(result["seconds"]) >= {"load", "features", "layers", "evaluation", "total"}
    cached = sorted(os.listdir(result["runs_folder"]))
    assert "layer-002-seed-43.npz" in cached and "layer-004-sep.npz" in cached
    # Cal-Only-head starts from the reference's head draw, stage 1 from the package default: two different starts
    assert result["baseline_head_init"] == "torch_default"
    kept = json.loads((out / "layer_runs.json").read_text())
    assert len(kept["ids"]) == len(kept["correct"]) == 52 and kept["seeds"] == [42, 43]
    for row in result["chosen_vs_final"]:
        assert set(kept["confidences"][row["run"]]) == {str(row["chosen_layer"]), "4"}
    # the method against its baseline at the final layer, recomputed from the kept confidences
    from elical_hf.evaluation.tables import paired_difference_over_draws

    assert set(result["final_layer_pairs"]) == {f"EliCal-head@{n} − Cal-Only-head@{n}" for n in (10, 20)}
    pair = result["final_layer_pairs"]["EliCal-head@10 − Cal-Only-head@10"]
    again = paired_difference_over_draws(kept["correct"], kept["datasets"], kept["splits"],
                                         kept["confidences"]["EliCal-head@10"]["4"],
                                         kept["confidences"]["Cal-Only-head@10"]["4"], 20, 42)
    for column in ("in-domain avg", "OOD avg"):
        assert pair[column]["auroc_per_draw"] == pytest.approx(again[column]["auroc_per_draw"], abs=1e-3)
    assert "## At the final layer: EliCal-head − Cal-Only-head" in text

    # the probe-layers rule on the train pool: one layer for every run, its recommendation; the runs come from cache
    assert load_experiment("layer_experiment").main([*common, "--layer_rule", "train_cv", "--folds", "2"]) == 0
    assert "(cached runs)" in capsys.readouterr().out
    again = json.loads((out / "layers.json").read_text())
    recommended = again["selection"]["train_cv"]["recommended_layer"]
    assert again["selection"]["rule"] == "train_cv" and again["selection"]["train_cv"]["questions"] <= 60
    assert {row["chosen_layer"] for row in again["chosen_vs_final"]} == {recommended}
    assert again["curves"] == result["curves"]


def test_the_layer_depth_summary_is_the_committed_probe_reports():
    """`experiments/layer_depth_check.py`'s summary (what docs/results.md quotes) is recomputed from the committed
    `probe-layers` reports of both models, and its question draw does not depend on the records' order."""
    depth = load_experiment("layer_depth_check")
    folder = os.path.join(EXAMPLES, "..", "docs", "results", "layers")
    with open(os.path.join(folder, "layer_depth_summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)["summary"]
    assert {key.split(" / ")[1] for key in summary} == {"train", "in_domain_test"}
    for key, recorded in summary.items():
        model, split = key.split(" / ")
        reports = []
        for half in depth.HALVES:
            with open(os.path.join(folder, model, f"probe_layers-{split}-{half}.json"), encoding="utf-8") as handle:
                reports.append(json.load(handle))
        assert depth.summarise(*reports) == {k: v for k, v in recorded.items() if k != "folders"}
        # the layer was chosen on the select half; the interval is the report half's, never the chooser's
        assert recorded["chosen_layer"] == reports[0]["recommended_layer"]
    # the halves: each dataset split in two by a seeded hash of the id, whatever the order
    rows = [{"id": f"q{i}", "dataset": "nq" if i % 3 else "popqa"} for i in range(31)]
    select, report = depth.split_halves(rows, seed=0)
    assert sorted(r["id"] for r in select + report) == sorted(r["id"] for r in rows)
    assert [sum(r["dataset"] == d for r in select) for d in ("nq", "popqa")] == [10, 5]
    assert depth.split_halves(rows[::-1], seed=0) == (select, report)
    assert depth.split_halves(rows, seed=1) != (select, report)
    records = [{"id": f"q{i}", "paper_split": "train" if i % 3 else "in_domain_test"} for i in range(30)]
    chosen = depth.choose_questions(records, 5, 3, seed=0)
    assert chosen == depth.choose_questions(records[::-1], 5, 3, seed=0)
    assert [r["paper_split"] for r in chosen] == ["train"] * 5 + ["in_domain_test"] * 3
    with pytest.raises(SystemExit, match="only 10 in_domain_test records"):
        depth.choose_questions(records, 5, 11, seed=0)


@pytest.mark.float32
def test_layer_mean_check_chooses_a_window_on_dev(tiny_records, four_layers, tmp_path, capsys):
    """`experiments/layer_mean_check.py`: every window's mean is probed beside every single layer; the window is the one
    of highest dev AUROC (the final layer competing), and its test differences are paired with both references."""
    mean_check = load_experiment("layer_mean_check")
    assert mean_check.windows(30, [5]) == [(1, 5), (1, 30), (6, 10), (11, 15), (16, 20), (21, 25), (26, 30)]
    assert mean_check.windows(4, [2, 3]) == [(1, 2), (1, 3), (1, 4)]
    out = tmp_path / "means"
    assert mean_check.main(["--records", tiny_records, "--model", four_layers, "--output_dir", str(out),
                            "--widths", "2", "--seeds", "42", "43", "--label_budgets", "10", "20",
                            "--bootstrap", "20"]) == 0
    result = json.loads((out / "layer_means.json").read_text())
    assert result["windows"] == [[1, 2], [1, 4]] and result["final_layer"] == 4
    assert [row["run"] for row in result["rows"]] == ["P(IK)@10", "DiM@10", "P(IK)@20", "DiM@20", "SEP"]
    for row in result["rows"]:
        dev = {k: -math.inf if math.isnan(v) else v for k, v in row["dev_auroc"].items()}
        assert set(dev) == {"1–2", "1–4", "final layer"}
        best = max(dev.values())
        chosen = "final layer" if row["window"] is None else f"{row['window'][0]}–{row['window'][1]}"
        assert dev[chosen] == best
        assert 1 <= row["single_layer"] <= 4
        for column in ("in-domain avg", "OOD avg"):
            if row["window"] is None:  # the final layer chosen: no difference from itself
                assert row["window_minus_final"][column]["auroc"] == 0
    assert "| SEP |" in (out / "layer_means.md").read_text() and "| SEP |" in capsys.readouterr().out


def _committed_and_docs(name: str) -> tuple[dict, str]:
    """`docs/results/layers/<name>` and the text of docs/results.md (minus signs as hyphens)."""
    folder = os.path.join(EXAMPLES, "..", "docs")
    with open(os.path.join(folder, "results", "layers", name), encoding="utf-8") as handle:
        result = json.load(handle)
    with open(os.path.join(folder, "results.md"), encoding="utf-8") as handle:
        return result, handle.read().replace("−", "-")


def test_the_layer_tables_in_the_docs_are_the_committed_result():
    """docs/results.md's chosen-layer table and its EliCal-head − Cal-Only-head sentence are
    `docs/results/layers/layers.json`, number for number, and recompute from the committed `layer_runs.json`."""
    from elical_hf.evaluation.tables import paired_difference_over_draws

    result, text = _committed_and_docs("layers.json")
    text = " ".join(text.replace("**", "").split())  # a quoted figure may wrap
    assert result["baseline_head_init"] == "torch_default"

    def cell(value: dict) -> str:
        low, high = value["auroc_ci"]
        return f"{value['auroc']:+.1f} [{low:+.1f}, {high:+.1f}]"

    for row in result["chosen_vs_final"]:
        cells = [cell(row["chosen_minus_final"][column]) for column in ("in-domain avg", "OOD avg")]
        assert f"| {row['run']} | {row['chosen_layer']} | " + " | ".join(cells) + " |" in text
    for name, pair in result["final_layer_pairs"].items():
        label = name.replace("−", "-")
        assert f"{label}: in domain {cell(pair['in-domain avg'])}, OOD {cell(pair['OOD avg'])}" in text
    with open(os.path.join(EXAMPLES, "..", "docs", "results", "layers", "layer_runs.json"), encoding="utf-8") as handle:
        kept = json.load(handle)
    pair = result["final_layer_pairs"]["EliCal-head@100 − Cal-Only-head@100"]
    again = paired_difference_over_draws(kept["correct"], kept["datasets"], kept["splits"],
                                         kept["confidences"]["EliCal-head@100"]["30"],
                                         kept["confidences"]["Cal-Only-head@100"]["30"], result["bootstrap"],
                                         result["seeds"][0])
    for column in ("in-domain avg", "OOD avg"):
        assert again[column]["auroc"] == pytest.approx(pair[column]["auroc"], abs=0.01)


def test_the_range_mean_table_in_the_docs_is_the_committed_result():
    """docs/results.md's range-mean table is `docs/results/layers/layer_means.json`, number for number."""
    result, text = _committed_and_docs("layer_means.json")

    def cell(value: dict) -> str:
        low, high = value["auroc_ci"]
        return f"{value['auroc']:+.1f} [{low:+.1f}, {high:+.1f}]"

    for row in result["rows"]:
        window = "final layer" if row["window"] is None else f"{row['window'][0]}–{row['window'][1]}"
        cells = [cell(row[f"window_minus_{ref}"][column]) for ref in ("single", "final")
                 for column in ("in-domain avg", "OOD avg")]
        assert f"| {row['run']} | {window} | {row['single_layer']} | " + " | ".join(cells) + " |" in text


def test_layer_lora_check_pairs_runs_by_name(tmp_path):
    """`experiments/layer_lora_check.py`: each run is paired with the committed run of its name (seeds together); an
    identical run differs by 0, a reversed one by its AUROC's mirror; EliCal@n − Cal-Only@n is compared at both
    layers at 95% and at the Bonferroni level of every cell shown; the runs it writes recompute the same result;
    other test questions are refused."""
    check = load_experiment("layer_lora_check")
    with open(check.COMMITTED, encoding="utf-8") as handle:
        committed = json.load(handle)
    runs = tmp_path / "runs"
    runs.mkdir()
    same = committed["confidences"]["Cal-Only@100"]
    flipped = [1 - c for c in committed["confidences"]["EliCal@100"]]
    for name, confidences in (("Cal-Only@100", same), ("EliCal@100", flipped),
                              ("EliCal@1000~43", committed["confidences"]["EliCal@1000~43"])):
        (runs / f"{name}.json").write_text(json.dumps({"name": name, "confidences": confidences,
                                                       "test_ids": committed["ids"]}))
    out = tmp_path / "out"
    assert check.main(["--runs", str(runs), "--output_dir", str(out), "--bootstrap", "50"]) == 0
    result = json.loads((out / "lora_layer.json").read_text())
    rows = {row["method"]: row for row in result["rows"]}
    assert set(rows) == {"Cal-Only@100", "EliCal@100", "EliCal@1000"} and rows["EliCal@1000"]["seeds"] == 1
    assert result["cells"] == 2 * (3 + 1) and result["level"] == pytest.approx(1 - 0.05 / 8)
    for column in ("in-domain avg", "OOD avg"):
        assert rows["Cal-Only@100"][column]["difference"] == 0 == rows["Cal-Only@100"][column]["interval"][0]
        cell = rows["EliCal@100"][column]
        assert cell["layer"] == pytest.approx(100 - cell["final"], abs=1e-6)
        assert cell["difference"] == pytest.approx(cell["layer"] - cell["final"], abs=1e-6)
        low, high = cell["interval"]
        wide_low, wide_high = cell["corrected_interval"]
        assert wide_low <= low <= high <= wide_high
        [contrast] = result["contrasts"]  # EliCal@1000 has no Cal-Only@1000 run to be paired with
        assert contrast["pair"] == "EliCal@100 − Cal-Only@100"
        assert contrast["layer"][column]["difference"] == pytest.approx(
            rows["EliCal@100"][column]["layer"] - rows["Cal-Only@100"][column]["layer"], abs=1e-6)
        assert contrast["final"][column]["difference"] == pytest.approx(
            rows["EliCal@100"][column]["final"] - rows["Cal-Only@100"][column]["final"], abs=1e-6)
    assert "EliCal@100 − Cal-Only@100 (1)" in (out / "lora_layer.md").read_text()
    # Cal-Only with another head init at this layer: a second contrast, with no final-layer counterpart
    fair = tmp_path / "fair"
    fair.mkdir()
    (fair / "Cal-Only@100.json").write_text(json.dumps({"name": "Cal-Only@100", "confidences": flipped,
                                                       "test_ids": committed["ids"]}))
    assert check.main(["--runs", str(runs), "--baseline_runs", str(fair), "--output_dir", str(tmp_path / "fair_out"),
                       "--bootstrap", "50"]) == 0
    both = json.loads((tmp_path / "fair_out" / "lora_layer.json").read_text())
    assert both["cells"] == 2 * (3 + 2) and [c["pair"] for c in both["contrasts"]] == [
        "EliCal@100 − Cal-Only/torch_default@100", "EliCal@100 − Cal-Only@100"]
    [fair_contrast] = [c for c in both["contrasts"] if "torch_default" in c["pair"]]
    assert fair_contrast["final"] is None and fair_contrast["layer"]["in-domain avg"]["difference"] == 0
    assert check.methods_of(["A@1~44", "A@1", "A@1~43", "B@2"]) == {"A@1": ["A@1", "A@1~43", "A@1~44"], "B@2": ["B@2"]}
    again = tmp_path / "again"
    assert check.main(["--runs", str(out / "lora_layer_runs.json"), "--output_dir", str(again), "--bootstrap", "50"]) == 0
    assert json.loads((again / "lora_layer.json").read_text()) == result
    (runs / "Cal-Only@100.json").write_text(json.dumps({"name": "Cal-Only@100", "confidences": same,
                                                        "test_ids": committed["ids"][::-1]}))
    with pytest.raises(SystemExit, match="other test questions"):
        check.main(["--runs", str(runs), "--output_dir", str(tmp_path / "out2")])


def test_the_lora_layer_table_in_the_docs_is_the_committed_result():
    """docs/results.md's LoRA + head at layer 16 tables are `docs/results/layers/lora_layer.json` as the script writes
    them, and each run's AUROC recomputes from the committed per-question confidences (`lora_layer_runs.json`)."""
    from elical_hf.data.questions import IN_DOMAIN_DATASETS
    from elical_hf.evaluation.tables import evaluate_table

    check = load_experiment("layer_lora_check")
    result, text = _committed_and_docs("lora_layer.json")
    assert result["layer"] == 16 and len(result["rows"]) == 5 and len(result["contrasts"]) == 3
    assert check.markdown(result).replace("−", "-") in text
    with open(check.COMMITTED, encoding="utf-8") as handle:
        committed = json.load(handle)
    runs = check.load_runs(os.path.join(os.path.dirname(check.COMMITTED), "layers", "lora_layer_runs.json"),
                           committed["ids"])
    splits = ["in_domain_test" if d in IN_DOMAIN_DATASETS else "ood_test" for d in committed["datasets"]]
    groups = check.methods_of(list(runs))
    for row in result["rows"]:
        table = evaluate_table(committed["correct"], committed["datasets"], splits,
                               {name: runs[name] for name in groups[row["method"]]})
        for column in ("in-domain avg", "OOD avg"):
            assert row[column]["layer"] == pytest.approx(sum(t[column]["auroc"] for t in table.values()) / len(table))

