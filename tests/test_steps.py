"""The steps (`elical_hf.steps`): records in, records or results out; the commands are one call of them, and the
evaluation step computes what every report shows in one place."""

from __future__ import annotations

import json

import numpy as np
import pytest

from elical_hf import ConfidenceTrainingArguments, steps
from elical_hf.cli import main as cli_main
from elical_hf.evaluation.tables import evaluate_table, paired_difference_over_draws, paired_differences
from elical_hf.signals.records import load_records, read_records
from tests.test_evaluation import write_records


@pytest.fixture
def records(tmp_path):
    folder = tmp_path / "records" / "tiny-model"
    folder.mkdir(parents=True)
    write_records(folder, "nq", 30, 0)
    write_records(folder, "squad", 20, 1)
    return str(tmp_path / "records")


def test_the_command_is_the_step(records, tmp_path, capsys):
    assert cli_main(["evaluate", "--records", records, "--output_dir", str(tmp_path / "cli"), "--bootstrap", "20"]) == 0
    printed = capsys.readouterr().out
    assert "records: in_domain_test 30, ood_test 20" in printed
    in_memory = load_records(records, splits=True).to_list()  # the same records in memory, with the split their
    # paths gave them
    evaluation = steps.evaluate(steps.EvaluateArguments(records=in_memory, bootstrap=20))
    assert json.loads((tmp_path / "cli" / "results.json").read_text()) == json.loads(json.dumps(evaluation.table))
    assert list(evaluation.table) == ["Prob", "N-Prob", "Consis-Lex"]  # Consis-Sem skipped: no semantic judgements
    assert evaluation.splits == ["in_domain_test"] * 30 + ["ood_test"] * 20


def test_draws_give_curves_and_differences_over_draws(records, tmp_path):
    rng = np.random.default_rng(0)
    draws = {f"{method}@{n}": [rng.uniform(0, 1, 50).tolist() for _ in range(3)]
             for n in (10, 100) for method in ("EliCal", "Cal-Only")}
    confidences = {"EliCal@10 #1": draws["EliCal@10"][0], "Cal-Only@10 #1": draws["Cal-Only@10"][0]}
    evaluation = steps.evaluate(steps.EvaluateArguments(records=records, baselines="prob", bootstrap=30, seed=3),
                                confidences=confidences, draws=draws, pairs=[("EliCal@10 #1", "Cal-Only@10 #1")],
                                draw_pairs=[("EliCal@10", "Cal-Only@10")])
    correct, datasets, splits = evaluation.correct, evaluation.datasets, evaluation.splits
    per_draw = [evaluate_table(correct, datasets, splits, {"m": c})["m"]["in-domain avg"]["auroc"] / 100
                for c in draws["Cal-Only@100"]]
    assert evaluation.curves()["Cal-Only"][100] == pytest.approx(sum(per_draw) / 3)
    assert list(evaluation.curves()) == ["EliCal", "Cal-Only"] and list(evaluation.curves()["EliCal"]) == [10, 100]
    assert evaluation.draw_differences["EliCal@10 − Cal-Only@10"] == paired_difference_over_draws(
        correct, datasets, splits, draws["EliCal@10"], draws["Cal-Only@10"], 30, 3)
    assert evaluation.differences == paired_differences(correct, datasets, splits, evaluation.confidences,
                                                        [("EliCal@10 #1", "Cal-Only@10 #1")], 30, 3)
    paths = steps.write_evaluation(evaluation, str(tmp_path / "report"), plotted=["Prob"])
    assert json.loads(open(paths["differences"]).read()).keys() == {"EliCal@10 #1 − Cal-Only@10 #1"}
    assert "Paired differences" in open(paths["report"]).read() and "labels" in paths


def test_a_missing_judgement_names_the_judge_option(records, tmp_path):
    unjudged = [{**r, "greedy_correctness": None} for r in load_records(records).to_list()]
    with pytest.raises(ValueError, match=r"run `elical-hf judge --correctness has_answer"):
        steps.evaluate(steps.EvaluateArguments(records=unjudged))
    train = [{**r, "split": "train", "dataset": "nq"} for r in unjudged]
    with pytest.raises(ValueError, match=r"found 0 \(judge them: `elical-hf judge --correctness has_answer"):
        steps.threshold(steps.ThresholdArguments(model=str(tmp_path / "no-model"), records=train, split="train"))
    with pytest.raises(ValueError, match=r"'consistency' target .*`elical-hf judge --consistency embedding"):
        steps.train(steps.TrainArguments(elicitation_data=unjudged, calibration_data=unjudged),
                    ConfidenceTrainingArguments(output_dir=str(tmp_path / "out"), num_train_epochs=None))
    assert not (tmp_path / "out").exists()


def test_judge_and_baselines_give_records_back(records, tmp_path):
    judged = steps.judge(steps.JudgeArguments(records=records, correctness="has_answer", consistency="lexical",
                                              output=str(tmp_path / "j.jsonl")))
    assert read_records(tmp_path / "j.jsonl") == judged.records  # what it gives back is what it wrote
    assert len(judged.records) == 50 and all(len(r["consistency_judgement"]) == 2 for r in judged.records)
    assert "consistency" not in judged.records[0]  # as stored: no training columns written back
    scored = steps.score_baselines(steps.BaselinesArguments(records=judged.records, which="prob,consis_lex"))
    assert scored.scores["consis_lex"] == [r["confidence_consis_lex"] for r in scored.records]
    assert set(scored.report["auroc"]) == {"prob", "consis_lex"}
    with pytest.raises(ValueError, match="inside the --records folder"):
        steps.judge(steps.JudgeArguments(records=records, consistency="lexical",
                                         output=f"{records}/tiny-model/out.jsonl"))
