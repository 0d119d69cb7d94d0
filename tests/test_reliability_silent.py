"""Inputs that used to give silently wrong results: each is now refused or reported, with counts."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
from huggingface_hub import ModelCard

from elical_hf import AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
from elical_hf.models.model_card import get_card_data
from elical_hf.cli import main as cli_main
from elical_hf.metrics import alignment, select_threshold
from elical_hf.training.recipe import train_stage
from elical_hf.signals.honestybench import load_honestybench
from elical_hf.signals.records import save_records
from elical_hf.signals.runner import sample_records
from tests.reliability import case
from tests.test_evaluation import write_records
from tests.test_trainer import make_rows


QUICK = {"num_train_epochs": 1, "per_device_train_batch_size": 4, "report_to": "none", "use_cpu": True,
         "disable_tqdm": True, "save_strategy": "no"}


@pytest.fixture(scope="module")
def trained_model(tiny_llama, tmp_path_factory) -> str:
    """A tiny confidence model after one real (short) elicitation run."""
    folder = tmp_path_factory.mktemp("trained") / "model"
    train_stage(AutoModelForConfidence.from_pretrained(tiny_llama), make_rows(8), str(folder), "elicitation",
                dev_fraction=0.0, training_args=ConfidenceTrainingArguments(**QUICK))
    return str(folder)


def judged_records(tmp_path, unjudged: int = 0) -> str:
    folder = tmp_path / "records" / "tiny-model"
    folder.mkdir(parents=True)
    write_records(folder, "nq", 30, 0)
    if unjudged:
        path = folder / "nq_test.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows[:unjudged]:
            row["greedy_correctness"] = None
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(tmp_path / "records")


@case("silent", "`elical-hf evaluate --model EliCal=<a base model folder>` (or a saved model that was never trained)",
      "refused before scoring: `--model EliCal=…: not a trained confidence model (no confidence_config.json); a base "
      "model would be scored with a freshly initialised, random head` / `… never trained (empty training_history)`")
def test_evaluate_refuses_a_model_without_a_trained_head(tiny_llama, tmp_path, trained_model, raise_user_errors):
    records = judged_records(tmp_path)
    argv = ["evaluate", "--records", records, "--baselines", "prob", "--allow_other_model", "true"]
    with pytest.raises(ValueError, match="not a trained confidence model .*random head"):
        cli_main([*argv, "--output_dir", str(tmp_path / "a"), "--model", f"EliCal={tiny_llama}"])
    untrained = tmp_path / "untrained"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(untrained)
    with pytest.raises(ValueError, match="never trained"):
        cli_main([*argv, "--output_dir", str(tmp_path / "b"), "--model", f"EliCal={untrained}"])
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert cli_main([*argv, "--output_dir", str(tmp_path / "c"), "--model", f"EliCal={trained_model}"]) == 0
    assert "EliCal" in json.loads((tmp_path / "c" / "results.json").read_text())


class Answers:
    """A stand-in answering backend that dies (like a kill) on its `die_on`-th call."""

    name, kind, weights_source = "tiny-model", "fake", None

    def __init__(self, die_on: int | None = None):
        self.calls, self.die_on = 0, die_on

    def generate(self, questions, settings, progress=True):
        self.calls += 1
        if self.calls == self.die_on:
            raise KeyboardInterrupt
        return [{"greedy_response": "shakespeare", "greedy_correctness": True, "sampling_response": ["a", "b"],
                 "num_generated_tokens": 1} for _ in questions]


@pytest.fixture
def unfinished_sample(tmp_path) -> str:
    """An `elical-hf sample` folder killed after its first shard: 24 of 40 questions sampled."""
    questions = [{"question": f"who wrote hamlet {i}", "dataset": "nq", "split": "test", "answer": ["shakespeare"]}
                 for i in range(40)]
    out = tmp_path / "sample"
    with pytest.raises(KeyboardInterrupt):
        sample_records(questions, Answers(die_on=2), None, out, shard_size=24, progress=False)
    assert json.loads((out / "manifest.json").read_text())["complete"] is False
    return str(out)


@case("silent", "`evaluate`, `judge` or `load_honestybench` on a killed `sample` folder (manifest `complete: false`)",
      "refused: `… is an unfinished elical-hf sample run …: 24 of 40 questions sampled, 16 missing. Rerun … or pass "
      "--allow_incomplete`; with `--allow_incomplete` / `allow_incomplete=True` it is read with a warning that says "
      "`16 rows dropped`")
def test_unfinished_sample_folders_are_refused_unless_allowed(unfinished_sample, tmp_path, caplog, raise_user_errors):
    with pytest.raises(ValueError, match="unfinished `elical-hf sample` run .*24 of 40 questions sampled, 16 missing"):
        load_honestybench(unfinished_sample, progress=False)
    for argv in (["judge", "--records", unfinished_sample, "--output", str(tmp_path / "j.jsonl"),
                  "--correctness", "has_answer"],
                 ["evaluate", "--records", unfinished_sample, "--output_dir", str(tmp_path / "e"), "--baselines", "prob"]):
        with pytest.raises(ValueError, match="24 of 40 questions sampled, 16 missing.*--allow_incomplete"):
            cli_main(argv)
    assert not (tmp_path / "j.jsonl").exists()
    with caplog.at_level(logging.WARNING, logger="elical_hf.signals.records"):
        loaded = load_honestybench(unfinished_sample, allow_incomplete=True, progress=False)
        assert cli_main(["judge", "--records", unfinished_sample, "--output", str(tmp_path / "j.jsonl"),
                         "--correctness", "has_answer", "--allow_incomplete"]) == 0
    assert loaded["in_domain_test"].num_rows == 24
    assert "16 rows dropped" in caplog.text
    assert len((tmp_path / "j.jsonl").read_text().splitlines()) == 24


@case("silent", "`evaluate` on test records of which some have no judged greedy answer",
      "says so: `warning: 2 of 30 test records have no judged greedy answer (greedy_correctness is null) and are left "
      "out: n = 28.`")
def test_evaluate_counts_unjudged_records(tmp_path, capsys):
    records = judged_records(tmp_path, unjudged=2)
    assert cli_main(["evaluate", "--records", records, "--output_dir", str(tmp_path / "out"), "--baselines", "prob"]) == 0
    printed = capsys.readouterr().out
    assert "2 of 30 test records have no judged greedy answer" in printed and "n = 28" in printed
    assert json.loads((tmp_path / "out" / "results.json").read_text())["Prob"]["nq"]["n"] == 28


@case("silent", "a saved model folder without `chat_template.jinja` (the base model's tokenizer has a template)",
      "refused on load: `… holds a tokenizer without its chat template (no chat_template.jinja), but the model was "
      "trained on chat-templated prompts …`; never scored with another template. Refused rather than restored: the "
      "base model's template need not be the one the head was trained with")
def test_a_model_folder_without_its_chat_template_is_refused(tiny_llama, tmp_path):
    folder = tmp_path / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    AutoModelForConfidence.from_pretrained(folder)  # complete: loads
    os.remove(folder / "chat_template.jinja")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert "chat_template" not in config  # nothing else in the folder holds the template
    with pytest.raises(ValueError, match="without its chat template"):
        AutoModelForConfidence.from_pretrained(folder)


@case("silent", "a question longer than the model's context (`max_length`, by default the backbone's "
      "`max_position_embeddings`)",
      "one warning with a count: `1 of 2 prompts are longer than max_length=512 tokens (the longest: N) and were cut "
      "from the left (their start, with the instruction, is lost)` (scoring and training alike)")
def test_over_long_questions_are_counted(tiny_llama, caplog):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    assert model.confidence_config.max_length == 512  # the tiny backbone's context
    long_question = " ".join(["paris"] * 3000)
    with caplog.at_level(logging.WARNING, logger="elical_hf.data.encoding"):
        scores = model.confidence(["who wrote hamlet", long_question])
    assert len(scores) == 2
    assert "1 of 2 prompts are longer than max_length=512 tokens (the longest: 30" in caplog.text
    assert "instruction, is lost" in caplog.text


@case("silent", "training rows where one question appears several times with contradicting targets",
      "a warning with a count and an example: `The train dataset has 1 question(s) that appear more than once with "
      "different 'consistency' targets (e.g. 'who wrote hamlet': [0.1, 0.9]) …`")
def test_contradicting_duplicates_are_reported(tiny_llama, tmp_path, caplog):
    rows = make_rows(6) + [{"question": "who wrote hamlet", "consistency": 0.1},
                           {"question": "who wrote hamlet ", "consistency": 0.9}]
    args = ConfidenceTrainingArguments(output_dir=str(tmp_path / "t"), **QUICK)
    with caplog.at_level(logging.WARNING, logger="elical_hf.data.training_table"):
        ConfidenceTrainer(AutoModelForConfidence.from_pretrained(tiny_llama), args=args, train_dataset=rows)
    assert "has 1 question(s) that appear more than once with different 'consistency' targets" in caplog.text
    assert "[0.1, 0.9]" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="elical_hf.data.training_table"):
        ConfidenceTrainer(AutoModelForConfidence.from_pretrained(tiny_llama), args=args, train_dataset=make_rows(6))
    assert "appear more than once" not in caplog.text


@case("silent", "`load_honestybench` on records that carry their own `consistency` / `correctness` columns",
      "kept as given (derived only where missing; `consistency_source` is `consistency`), never overwritten with None")
def test_own_training_columns_are_kept(tmp_path):
    rows = [{"question": f"q{i}", "dataset": "nq", "model": "m", "split": "train", "consistency": 0.7,
             "correctness": 0.25} for i in range(3)]
    rows[0]["consistency_lexical"] = [1.0, 0.0]  # derivable, but the record's own value wins
    rows.append({"question": "q9", "dataset": "nq", "model": "m", "split": "train", "consistency_lexical": [1.0, 1.0]})
    save_records(rows, tmp_path / "own.jsonl")
    train = load_honestybench(tmp_path / "own.jsonl", progress=False)["train"]
    assert train["consistency"] == [0.7, 0.7, 0.7, 1.0] and train["correctness"] == [0.25, 0.25, 0.25, None]
    assert train["consistency_source"] == ["consistency"] * 3 + ["consistency_lexical"]


@case("silent", "records under a folder named `train_run1/`, or in a file with a mistyped split word (`nq_tset.jsonl`)",
      "a typo of a split word is refused (`'tset' looks like the split word 'test' …`); a train word inside a longer "
      "folder name is not a split; what was inferred is logged (`train_run1/nq.jsonl -> train_run1 / nq / train`) and "
      "in-domain records that land in train only because nothing names their split get a warning with their count")
def test_split_inference_never_guesses_test_into_train(tmp_path, caplog):
    rows = [{"question": f"q{i}", "answer": ["a"], "greedy_correctness": True} for i in range(3)]
    save_records(rows, tmp_path / "bench" / "train_run1" / "nq_tset.jsonl")
    with pytest.raises(ValueError, match="'tset' looks like the split word 'test'"):
        load_honestybench(tmp_path / "bench", progress=False)
    os.rename(tmp_path / "bench" / "train_run1" / "nq_tset.jsonl", tmp_path / "bench" / "train_run1" / "nq_test.jsonl")
    assert list(load_honestybench(tmp_path / "bench", progress=False)) == ["in_domain_test"]
    os.rename(tmp_path / "bench" / "train_run1" / "nq_test.jsonl", tmp_path / "bench" / "train_run1" / "nq.jsonl")
    save_records(rows, tmp_path / "bench" / "eval_run1" / "hq.jsonl")  # a test word in a longer name still counts
    with caplog.at_level(logging.INFO, logger="elical_hf.signals.records"):
        loaded = load_honestybench(tmp_path / "bench", progress=False)
    assert loaded.num_rows == {"train": 3, "in_domain_test": 3}
    assert "train_run1/nq.jsonl -> train_run1 / nq / train" in caplog.text
    assert "3 in-domain record(s) in 1 file(s) name no split" in caplog.text


@case("silent", "`trainer.evaluate()` after training, on the early-stopping dev split",
      "kept out of the model card's results (`model-index`), so `push` cannot publish dev metrics as a benchmark; "
      "sets evaluated with another prefix (`metric_key_prefix=\"test_nq\"`) are recorded")
def test_dev_metrics_never_become_card_results(tiny_llama, tmp_path):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    args = ConfidenceTrainingArguments(output_dir=str(tmp_path / "t"), eval_strategy="epoch", **QUICK)
    dev = make_rows(6, seed=1)
    trainer = ConfidenceTrainer(model, args=args, train_dataset=make_rows(8), eval_dataset=dev)
    trainer.train()
    assert "eval_loss" in trainer.evaluate()
    assert get_card_data(model).evaluations == []
    model.save_pretrained(tmp_path / "m")
    assert ModelCard.load(tmp_path / "m" / "README.md").data.eval_results is None
    trainer.evaluate(trainer.eval_dataset, metric_key_prefix="test_nq")  # (a test set, prepared like the dev split)
    assert [(e.dataset, e.split) for e in get_card_data(model).evaluations] == [("nq", "test")]


@case("silent", "alignment (or `select_threshold`) with fewer than 5 threshold rows, or rows of one class",
      "a `UserWarning`: `The alignment threshold is chosen on 0 row(s) holding 0 class(es) … no threshold separates "
      "them, so t = 0.5 is used`")
def test_unreliable_alignment_thresholds_warn():
    with pytest.warns(UserWarning, match=r"chosen on 0 row\(s\) .*t = 0.5 is used"):
        assert alignment([0.2, 0.9, 0.4, 0.8], [0, 1, 0, 1])["threshold"] == 0.5
    with pytest.warns(UserWarning, match=r"chosen on 6 row\(s\) holding 1 class\(es\)"):
        select_threshold([0.1, 0.2, 0.3, 0.6, 0.7, 0.9], [1] * 6)
    rng = np.random.default_rng(0)
    correct = rng.integers(0, 2, 50)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # enough rows of both classes: silent
        alignment(np.clip(correct * 0.6 + rng.uniform(0, 0.4, 50), 0, 1), correct)
