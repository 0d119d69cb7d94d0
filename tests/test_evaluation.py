from __future__ import annotations

import json
import math

import numpy as np
import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.evaluation.tables import (
    evaluate_table, paired_difference_over_draws, paired_differences, table_to_markdown, write_report,
)
from elical_hf.models.saved_model import set_decision_threshold
from elical_hf.metrics import auroc, ece


def synthetic(seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = {"nq": 60, "hotpotqa": 140, "squad": 100}
    splits = {"nq": "in_domain_test", "hotpotqa": "in_domain_test", "squad": "ood_test"}
    datasets, split, correct = [], [], []
    for name, size in sizes.items():
        datasets += [name] * size
        split += [splits[name]] * size
        correct += list(rng.integers(0, 2, size))
    correct = np.array(correct)
    good = np.clip(0.5 * correct + 0.5 * rng.random(len(correct)), 0, 1)
    noise = rng.random(len(correct))
    return correct, datasets, split, {"good": good, "noise": noise}


def test_table_matches_metrics_and_weights_by_size():
    correct, datasets, splits, sources = synthetic()
    table = evaluate_table(correct, datasets, splits, sources)
    assert list(table["good"]) == ["nq", "hotpotqa", "squad", "in-domain avg", "OOD avg"]
    nq = np.array(datasets) == "nq"
    assert table["good"]["nq"]["auroc"] == pytest.approx(100 * auroc(sources["good"][nq], correct[nq]))
    assert table["good"]["nq"]["ece"] == pytest.approx(100 * ece(sources["good"][nq], correct[nq]))
    expected = (60 * table["good"]["nq"]["auroc"] + 140 * table["good"]["hotpotqa"]["auroc"]) / 200
    assert table["good"]["in-domain avg"]["auroc"] == pytest.approx(expected)
    assert table["good"]["OOD avg"]["auroc"] == pytest.approx(table["good"]["squad"]["auroc"])
    assert table["good"]["in-domain avg"]["auroc"] > table["noise"]["in-domain avg"]["auroc"] + 20


def test_single_class_dataset_gets_nan_auroc_and_is_left_out_of_the_average():
    correct, datasets, splits, sources = synthetic()
    correct = correct.copy()
    correct[np.array(datasets) == "nq"] = 1
    table = evaluate_table(correct, datasets, splits, sources)
    assert math.isnan(table["good"]["nq"]["auroc"])
    assert table["good"]["in-domain avg"]["auroc"] == pytest.approx(table["good"]["hotpotqa"]["auroc"])
    assert "–" in table_to_markdown(table)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c, d, s, src: (c, d[:-1], s, src), "one entry per record"),
        (lambda c, d, s, src: (c, d, s, {"bad": src["good"][:-1]}), "confidences for"),
        (lambda c, d, s, src: (c, d, s, {"bad": src["good"] + 2}), "outside"),
        (lambda c, d, s, src: (c, d, s, {}), "No confidence source"),
    ],
)
def test_bad_input(mutate, message):
    with pytest.raises(ValueError, match=message):
        evaluate_table(*mutate(*synthetic()))


def test_report_files_and_plots(tmp_path):
    correct, datasets, splits, sources = synthetic()
    table = evaluate_table(correct, datasets, splits, sources, bootstrap=50)
    assert len(table["good"]["nq"]["auroc_ci"]) == 2
    paths = write_report(table, str(tmp_path), correct=correct, confidences=sources,
                         label_curves={"EliCal": {100: 0.70, 1000: 0.80}, "Cal-Only": {100: 0.60, 1000: 0.78}})
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["good"]["squad"]["n"] == 100
    report = (tmp_path / "report.md").read_text()
    assert "## AUROC" in report and "reliability.png" in report and "auroc_vs_labels.png" in report
    for key in ("reliability", "risk_coverage", "labels"):
        assert open(paths[key], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_one_metric_vocabulary_names_the_report_and_the_card():
    import elical_hf.training.callbacks
    import elical_hf.models.model_card
    from elical_hf.evaluation.tables import TABLE_METRICS, averages_to_markdown
    from elical_hf.metrics import METRIC_NAMES

    assert elical_hf.models.model_card.METRIC_NAMES is METRIC_NAMES and elical_hf.training.callbacks.METRIC_NAMES is METRIC_NAMES
    assert list(TABLE_METRICS) == ["auroc", "ece", "alignment"] and set(TABLE_METRICS) <= set(METRIC_NAMES)
    header = averages_to_markdown(evaluate_table(*synthetic())).splitlines()[0]
    assert header == (
        "| method | in-domain AUROC ↑ | in-domain ECE ↓ | in-domain Alignment ↑ | OOD AUROC ↑ | OOD ECE ↓ "
        "| OOD Alignment ↑ |"
    )


def test_decision_threshold_is_stored_and_used(tiny_llama, tmp_path):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    model.save_pretrained(tmp_path / "m")
    threshold = set_decision_threshold(str(tmp_path / "m"), [0.1, 0.2, 0.7, 0.9], [0, 0, 1, 1])
    assert threshold == pytest.approx(0.21)
    assert AutoModelForConfidence.from_pretrained(tmp_path / "m").confidence_config.decision_threshold == threshold
    with pytest.raises(ValueError, match="not a saved confidence model"):
        set_decision_threshold(str(tmp_path), [0.1, 0.9], [0, 1])


def write_records(folder, dataset: str, n: int, seed: int) -> None:
    from elical_hf.signals.records import save_records

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        correct = bool(rng.integers(0, 2))
        logprobs = list(rng.uniform(-2, 0, 3) + (1.5 if correct else 0.0))
        logprobs = [min(lp, 0.0) for lp in logprobs]
        rows.append({
            "question": f"who wrote hamlet {dataset} {i}", "answer": ["shakespeare"], "dataset": dataset,
            "greedy_response": "shakespeare" if correct else "dickens", "greedy_correctness": correct,
            "greedy_tokens": ["a", "b", "c"], "greedy_logprobs": logprobs,
            "greedy_cumulative_logprobs": float(sum(logprobs)),
            "sampling_response": ["shakespeare", "dickens"], "sampling_correctness": [True, False],
        })
    save_records(rows, folder / f"{dataset}_test.jsonl")


def records_and_model(tmp_path, tiny_llama):
    """Judged test records of two datasets (HonestyBench layout) and a saved tiny confidence model."""
    records = tmp_path / "records" / "tiny-model"
    records.mkdir(parents=True)
    write_records(records, "nq", 30, 0)
    write_records(records, "squad", 20, 1)
    from elical_hf import ConfidenceTrainingArguments
    from elical_hf.training.recipe import train_stage
    from tests.test_trainer import make_rows

    model = AutoModelForConfidence.from_pretrained(tiny_llama)  # `evaluate` refuses a model that was never trained
    train_stage(model, make_rows(4), str(tmp_path / "model"), "elicitation", dev_fraction=0.0,
                training_args=ConfidenceTrainingArguments(num_train_epochs=1, per_device_train_batch_size=4,
                                                          report_to="none", use_cpu=True, disable_tqdm=True,
                                                          save_strategy="no"))


def test_evaluate_command(tiny_llama, tmp_path):
    from elical_hf.cli import main as cli_main

    records_and_model(tmp_path, tiny_llama)
    out = tmp_path / "report"
    code = cli_main([
        "evaluate", "--records", str(tmp_path / "records"), "--output_dir", str(out), "--allow_other_model", "true",
        "--model", f"Tiny@10={tmp_path / 'model'}", f"Tiny@100={tmp_path / 'model'}",
        "--baselines", "prob,n_prob,consis_lex,consis_sem",
    ])
    assert code == 0
    table = json.loads((out / "results.json").read_text())
    assert list(table) == ["Prob", "N-Prob", "Consis-Lex", "Tiny@10", "Tiny@100"]  # no Consis-Sem: no judgements
    assert (out / "auroc_vs_labels.png").exists()  # two label budgets of one method
    assert set(table["N-Prob"]) == {"nq", "squad", "in-domain avg", "OOD avg"}
    assert table["N-Prob"]["nq"]["n"] == 30 and table["N-Prob"]["squad"]["n"] == 20
    assert table["N-Prob"]["in-domain avg"]["auroc"] > 90  # the records' logprobs are built to reveal correctness
    assert (out / "reliability.png").exists() and (out / "report.md").exists()
    assert not (tmp_path / "model" / "reliability.png").exists()  # model folders are left alone by default


def test_evaluate_command_updates_model_cards(tiny_llama, tmp_path):
    from huggingface_hub import ModelCard

    from elical_hf.cli import main as cli_main

    records_and_model(tmp_path, tiny_llama)
    assert cli_main(["evaluate", "--records", str(tmp_path / "records"), "--allow_other_model", "true", "--output_dir", str(tmp_path / "report"),
                     "--model", f"Tiny={tmp_path / 'model'}", "--baselines", "prob", "--update_model_cards"]) == 0
    table = json.loads((tmp_path / "report" / "results.json").read_text())
    card = ModelCard.load(tmp_path / "model" / "README.md")
    results = {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert results[("nq", "ece")] == pytest.approx(table["Tiny"]["nq"]["ece"] / 100)
    assert results[("OOD avg", "alignment")] == pytest.approx(table["Tiny"]["OOD avg"]["alignment"])
    assert (tmp_path / "model" / "reliability.png").exists() and "reliability.png" in card.text
    reloaded = AutoModelForConfidence.from_pretrained(str(tmp_path / "model"))  # the folder still loads
    assert len(reloaded.confidence(["who wrote hamlet"])) == 1


def test_bootstrap_intervals_cover_every_metric_and_the_averages():
    correct, datasets, splits, sources = synthetic()
    table = evaluate_table(correct, datasets, splits, sources, bootstrap=200, seed=3)
    for column in ("nq", "in-domain avg", "OOD avg"):
        cell = table["noise"][column]  # ("good" separates perfectly: its AUROC interval is [100, 100])
        for metric in ("auroc", "ece", "alignment"):
            low, high = cell[f"{metric}_ci"]
            assert high > low, (column, metric, cell)
        low, high = cell["auroc_ci"]  # (ECE's resamples are biased upwards: its interval may miss the point)
        assert low <= cell["auroc"] <= high
    # the average's interval is narrower than a single dataset's (more rows)
    width = lambda cell: cell["auroc_ci"][1] - cell["auroc_ci"][0]  # noqa: E731
    assert width(table["noise"]["in-domain avg"]) < width(table["noise"]["nq"])
    # paired and seeded: the same call gives the same intervals, another seed different ones
    again = evaluate_table(correct, datasets, splits, sources, bootstrap=200, seed=3)
    assert again["good"]["nq"]["ece_ci"] == table["good"]["nq"]["ece_ci"]
    other = evaluate_table(correct, datasets, splits, sources, bootstrap=200, seed=4)
    assert other["good"]["nq"]["ece_ci"] != table["good"]["nq"]["ece_ci"]
    assert "[" in table_to_markdown(table, "ece") and "[" not in table_to_markdown(evaluate_table(*synthetic()))


def test_paired_differences():
    correct, datasets, splits, sources = synthetic()
    sources = {**sources, "copy": sources["good"]}
    diffs = paired_differences(correct, datasets, splits, sources, [("good", "noise"), ("good", "copy")], 200, seed=1)
    better = diffs["good − noise"]["in-domain avg"]
    table = evaluate_table(correct, datasets, splits, sources)
    assert better["auroc"] == pytest.approx(table["good"]["in-domain avg"]["auroc"] - table["noise"]["in-domain avg"]["auroc"])
    assert better["auroc_ci"][0] > 0  # paired: clearly better on every resample
    same = diffs["good − copy"]["OOD avg"]
    assert same["ece"] == 0 and same["ece_ci"] == [0.0, 0.0] and same["alignment_ci"] == [0.0, 0.0]
    with pytest.raises(ValueError, match="Unknown method"):
        paired_differences(correct, datasets, splits, sources, [("good", "nope")])


def test_paired_difference_over_draws_carries_the_draw_variance():
    correct, datasets, splits, sources = synthetic()
    good, noise = sources["good"], sources["noise"]
    # One draw: the same point and interval as paired_differences on the same resamples.
    one = paired_difference_over_draws(correct, datasets, splits, [good], [noise], 300, seed=3)
    reference = paired_differences(correct, datasets, splits, {"a": good, "b": noise}, [("a", "b")], 300, seed=3)
    for column, cell in reference["a − b"].items():
        assert one[column]["auroc"] == pytest.approx(cell["auroc"])
        assert one[column]["auroc_ci"] == pytest.approx(cell["auroc_ci"])
    # Draws that disagree: the mean of the per-draw differences, and a wider interval than either draw alone.
    draws = paired_difference_over_draws(correct, datasets, splits, [good, noise], [noise, noise], 300, seed=3)
    cell = draws["in-domain avg"]
    assert cell["auroc_per_draw"] == pytest.approx([one["in-domain avg"]["auroc"], 0.0])
    assert cell["auroc"] == pytest.approx(one["in-domain avg"]["auroc"] / 2)
    width = cell["auroc_ci"][1] - cell["auroc_ci"][0]
    assert width > one["in-domain avg"]["auroc_ci"][1] - one["in-domain avg"]["auroc_ci"][0]
    assert cell["auroc_ci"][0] <= 0.0 + 1e-9 < cell["auroc_ci"][1]  # the zero draw is inside the interval
    with pytest.raises(ValueError, match="same number"):
        paired_difference_over_draws(correct, datasets, splits, [good], [noise, noise])


def test_the_interval_over_draws_is_that_of_the_mean_over_resampled_draws():
    """Two-level bootstrap: the draws resampled with replacement, one resample of the test rows shared by them."""
    correct, datasets, splits, sources = synthetic()
    good, noise = sources["good"], sources["noise"]
    mixed = paired_difference_over_draws(correct, datasets, splits, [good, noise, good], None, 400, seed=5)
    single = evaluate_table(correct, datasets, splits, {"good": good, "noise": noise})
    cell = mixed["squad"]  # one method alone: the mean of its draws' metrics
    assert cell["auroc_per_draw"] == pytest.approx(
        [single["good"]["squad"]["auroc"], single["noise"]["squad"]["auroc"], single["good"]["squad"]["auroc"]])
    assert cell["auroc"] == pytest.approx(np.mean(cell["auroc_per_draw"]))
    low, high = cell["auroc_ci"]
    assert low < cell["auroc"] < high
    # identical draws: resampling them changes nothing, so the interval is the single draw's (rows shared by draws)
    alone = paired_difference_over_draws(correct, datasets, splits, [good], None, 400, seed=5)
    same = paired_difference_over_draws(correct, datasets, splits, [good, good, good], None, 400, seed=5)
    assert same["squad"]["auroc_ci"] == pytest.approx(alone["squad"]["auroc_ci"])
    # draws that disagree widen it (a resample of the three may hold the noise draw once, twice or three times)
    assert high - low > alone["squad"]["auroc_ci"][1] - alone["squad"]["auroc_ci"][0]


def test_threshold_command_chooses_and_stores_the_decision_threshold(tiny_llama, tmp_path, capsys):
    from elical_hf.cli import main as cli_main
    from elical_hf.metrics import select_threshold

    records_and_model(tmp_path, tiny_llama)
    folder, model = str(tmp_path / "records"), str(tmp_path / "model")
    assert cli_main(["threshold", "--model", model, "--records", folder, "--split", "train"]) == 2  # one line, exit 2
    err = capsys.readouterr().err
    assert "elical-hf threshold: error: " in err and "no 'train' records" in err
    assert cli_main(["threshold", "--model", model, "--records", folder, "--split", "in_domain_test",
                     "--allow_other_model", "true"]) == 0
    printed = capsys.readouterr().out
    assert "warning: choosing the threshold on 'in_domain_test'" in printed and "decision_threshold = " in printed
    stored = AutoModelForConfidence.from_pretrained(model).confidence_config.decision_threshold
    from elical_hf.signals.honestybench import load_honestybench

    rows = [r for r in load_honestybench(folder)["in_domain_test"]]
    scores = AutoModelForConfidence.from_pretrained(model).confidence([r["question"] for r in rows])
    assert stored == pytest.approx(select_threshold(scores, [int(r["greedy_correctness"]) for r in rows]))
