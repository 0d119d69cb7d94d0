"""The example scripts run end to end (tiny random model, tiny sizes)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from elical_hf.signals import load_honestybench
from elical_hf.signals.records import read_records


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


EXPERIMENTS = os.path.join(os.path.dirname(EXAMPLES), "experiments")


def load_example(name: str, folder: str = EXAMPLES):
    """The script `name` of `examples/` (usage), loaded by path as a module."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_experiment(name: str):
    """The script `name` of `experiments/` (research behind docs/results.md), loaded by path; `experiments/` goes on
    the path first, as running the script puts it, for its shared `experiments_common` module."""
    if EXPERIMENTS not in sys.path:
        sys.path.insert(0, EXPERIMENTS)
    return load_example(name, EXPERIMENTS)


TINY = ["--train_per_dataset", "20", "--dev_per_dataset", "5", "--test_per_dataset", "10", "--ood_per_dataset", "10",
        "--num_samples", "2", "--max_new_tokens", "3", "--label_budgets", "10", "0", "--bootstrap", "20",
        "--head_epochs", "3", "--stage1_epochs", "1", "--max_epochs", "1"]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    """The tiny Llama with a 2,048-token context: Verbal-10's ten-shot prompts are ~740 tokens, and the sampler refuses
    a prompt that does not fit (the session-wide tiny model has 512)."""
    from tests.conftest import save_tiny_base

    return save_tiny_base(tmp_path_factory.mktemp("tiny-llama-2k"), "llama", max_position_embeddings=2048)


@pytest.fixture(scope="module")
def replication(tiny_llama, tmp_path_factory):
    out = tmp_path_factory.mktemp("replication")
    assert load_example("reproduce_paper").main(["--model", tiny_llama, "--output_dir", str(out), *TINY]) == 0
    return out


def test_reproduce_paper_runs_every_step(replication):
    questions = [json.loads(line) for line in (replication / "questions.jsonl").read_text().splitlines()]
    by_part = {part: {q["question"].lower() for q in questions if q["partition"] == part}
               for part in ("train", "dev", "test")}
    assert not (by_part["train"] & by_part["test"]) and not (by_part["dev"] & by_part["test"])
    runs = sorted(path.stem for path in (replication / "runs").iterdir())
    assert runs == ["Cal-Only-head@10", "Cal-Only-head@all", "Cal-Only@10", "Cal-Only@all", "DiM-L2@10", "DiM-L2@all",
                    "Eli-Only", "EliCal-head@10", "EliCal-head@all", "EliCal@10", "EliCal@all", "P(IK)-L2@10",
                    "P(IK)-L2@all", "SEP-L2"]
    table = json.loads((replication / "report" / "results.json").read_text())
    assert {"Verbal-10", "Consis-Sem", "EliCal@all", "Cal-Only-head@10", "SEP-L2", "P(IK)-L2@10"} <= set(table)
    # the probes learn from the head-only runs' label draws
    for budget in ("10", "all"):
        probe = json.loads((replication / "runs" / f"P(IK)-L2@{budget}.json").read_text())
        head = json.loads((replication / "runs" / f"Cal-Only-head@{budget}.json").read_text())
        assert probe["labels"] == head["labels"] and probe["seed"] == head["seed"] and probe["layer"] == 2
    assert "alignment_ci" in table["EliCal@10"]["OOD avg"]
    assert (replication / "report" / "auroc_vs_labels_in_domain.png").is_file()
    differences = json.loads((replication / "report" / "differences.json").read_text())
    assert {"EliCal@10 − Cal-Only@10", "EliCal-head@all − Cal-Only-head@all", "Eli-Only − Consis-Sem"} <= set(differences)
    scores = json.loads((replication / "report" / "confidences.json").read_text())
    assert set(scores["confidences"]) == set(table)
    assert len(scores["ids"]) == len(scores["correct"]) == len(scores["confidences"]["EliCal@10"]) == len(by_part["test"])
    report = (replication / "report" / "report.md").read_text()
    assert "## Paired differences" in report and "auroc_vs_labels_ood.png" in report
    bench = load_honestybench(str(replication / "honestybench"), progress=False)
    assert set(bench) == {"train", "in_domain_test", "ood_test"}
    assert len(bench["in_domain_test"]) + len(bench["ood_test"]) == len(by_part["test"])


def test_reproduce_paper_retrains_from_committed_records(replication, tiny_llama, tmp_path):
    args = ["--model", tiny_llama, "--output_dir", str(tmp_path), "--records", str(replication / "honestybench"),
            "--steps", "train", "evaluate", *TINY, "--label_budgets", "10"]
    assert load_example("reproduce_paper").main(args) == 0
    assert (tmp_path / "runs" / "EliCal@10.json").is_file() and not (tmp_path / "samples").exists()
    # the same label subset and the same model as the run that sampled the records
    for name in ("Cal-Only-head@10", "Eli-Only"):
        fresh = json.loads((replication / "runs" / f"{name}.json").read_text())
        again = json.loads((tmp_path / "runs" / f"{name}.json").read_text())
        assert again["test_ids"] == fresh["test_ids"]
        assert again["confidences"] == pytest.approx(fresh["confidences"], abs=1e-5), name


def test_reproduce_paper_seed_variance_and_rejudging(replication, tiny_llama, tmp_path):
    args = ["--model", tiny_llama, "--output_dir", str(tmp_path), "--records", str(replication / "honestybench"),
            "--steps", "train", "evaluate", *TINY, "--label_budgets", "10", "--seeded_budgets", "10",
            "--extra_seeds", "43", "--correctness", "has_answer_squad"]
    assert load_example("reproduce_paper").main(args) == 0
    runs = sorted(path.stem for path in (tmp_path / "runs").iterdir())
    assert {"EliCal@10~43", "Cal-Only@10~43", "EliCal-head@10~43", "Cal-Only-head@10~43", "EliCal@10"} <= set(runs)
    seed42 = json.loads((tmp_path / "runs" / "Cal-Only@10.json").read_text())
    seed43 = json.loads((tmp_path / "runs" / "Cal-Only@10~43.json").read_text())
    # (a tiny model barely moves in one step; Cal-Only's fresh LoRA and head are drawn with the run's seed)
    assert seed43["seed"] == 43 and seed43["confidences"] != seed42["confidences"]
    table = json.loads((tmp_path / "report" / "results.json").read_text())
    assert "EliCal@10" in table and not any("~" in name for name in table)  # extra seeds stay out of the main table
    over = json.loads((tmp_path / "report" / "seed_differences.json").read_text())
    entry = over["EliCal - Cal-Only @ 10"]
    assert entry["seeds"] == [42, 43] and len(entry["in-domain avg"]["auroc_per_draw"]) == 2
    mean = sum(entry["in-domain avg"]["auroc_per_draw"]) / 2
    assert entry["in-domain avg"]["auroc"] == pytest.approx(mean, nan_ok=True)
    assert "## Differences over seeds" in (tmp_path / "report" / "report.md").read_text()
    records = read_records(str(tmp_path / "records.parquet"))
    assert {r["correctness_judge"] for r in records} == {"has_answer_squad"}


def test_reproduce_paper_runs_only_the_chosen_calibration(replication, tiny_llama, tmp_path):
    args = ["--model", tiny_llama, "--output_dir", str(tmp_path), "--records", str(replication / "honestybench"),
            "--steps", "train", *TINY, "--label_budgets", "0", "--calibration", "lora"]
    assert load_example("reproduce_paper").main(args) == 0
    assert sorted(path.stem for path in (tmp_path / "runs").iterdir()) == ["Cal-Only@all", "Eli-Only", "EliCal@all"]


def test_reproduce_paper_refuses_other_settings_in_the_same_folder(replication, tiny_llama):
    with pytest.raises(SystemExit, match="other settings"):
        load_example("reproduce_paper").main(["--model", tiny_llama, "--output_dir", str(replication), *TINY,
                                              "--seed", "7", "--steps", "evaluate"])


def test_gpu_recipe_parses_with_the_train_command():
    from elical_hf.cli.train import make_parser

    import yaml

    config = os.path.join(EXAMPLES, "configs", "qwen2.5-7b-instruct.yaml")
    with open(config, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    assert raw["bf16"] is True and raw["dtype"] == "auto" and raw["calibration_trainable"] == "all"
    # bf16 mixed precision needs a GPU (TrainingArguments refuses it on a CPU); everything else parses as written.
    options, model, training = make_parser().parse_with_config(["--config", config, "--bf16", "false"])
    assert model.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct" and options.num_labels == 1000
    assert training.per_device_train_batch_size * training.gradient_accumulation_steps * 4 == 512  # the paper's batch
    assert training.learning_rate == 5e-5 and training.calibration_trainable == "all"


def test_judge_rule_agreement_counts_by_hand(tmp_path, capsys):
    from elical_hf.signals.records import save_records

    records = [
        {"question": "q1", "answer": ["USA"], "greedy_response": "U.S.A.", "greedy_correctness": True,
         "sampling_response": ["USA", "Paris-based"]},
        {"question": "q2", "answer": ["Paris", "The"], "greedy_response": "Paris-based", "sampling_response": ["London"]},
    ]
    save_records(records, tmp_path / "records.jsonl")
    result = load_experiment("judge_rule_agreement").main(["--records", str(tmp_path / "records.jsonl")])
    # greedy: "U.S.A." has USA only under SQuAD rules; "Paris-based" has Paris only under the reference rule
    assert result["counts"]["greedy"] == {"answers": 2, "both_correct": 0, "only_reference": 1, "only_squad": 1,
                                          "both_wrong": 0, "disagree": 2, "disagree_rate": 1.0}
    assert result["counts"]["samples"] == {"answers": 3, "both_correct": 1, "only_reference": 0, "only_squad": 0,
                                           "both_wrong": 2, "disagree": 0, "disagree_rate": 0.0}
    assert result["judge_summaries"]["has_answer"] == {"judged": 2, "without_answer": 0, "skipped_aliases": 1}
    assert result["stored_greedy_correctness_equals_squad"] == "1/1"
    assert result["examples"]["greedy/only_reference"] == [{"answer": "Paris-based", "gold": ["Paris", "The"]}]
    assert "| greedy | 2 | 0 | 1 | 1 | 0 | 2 (100.00%) |" in capsys.readouterr().out


def test_gate_measurement_scripts_run(tiny_llama, tmp_path):
    """`label_selection.py` and `no_lora_head.py` end to end on a slice of the committed replication records, with
    a tiny model standing in for the stage-1 adapter and the base model."""
    from elical_hf import AutoModelForConfidence
    from elical_hf.signals.records import load_records, save_records

    records = load_records(os.path.join(EXAMPLES, "..", "docs", "results", "honestybench-smollm2-135m"), splits=True)
    chosen = [r for r in records if r["partition"] == "train"][:40]
    chosen += [r for r in records if r["paper_split"] == "in_domain_test"][:12]
    chosen += [r for r in records if r["paper_split"] == "ood_test"][:12]
    save_records(chosen, tmp_path / "records" / "slice.parquet")
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "stage1")
    common = ["--records", str(tmp_path / "records"), "--stage1", str(tmp_path / "stage1"), "--output_dir",
              str(tmp_path / "out"), "--seeds", "0", "1", "--head_epochs", "2"]
    assert load_experiment("label_selection").main([*common, "--budgets", "10", "20"]) == 0
    result = json.loads((tmp_path / "out" / "label_selection.json").read_text())
    assert set(result["summary"]) == {f"{s}@{n}" for s in ("random", "quantile", "uniform") for n in (10, 20)}
    assert len(result["summary"]["quantile@10"]["in-domain auroc - random"]) == 2  # paired by seed
    assert (tmp_path / "out" / "features-stage1.pt").is_file()
    assert load_experiment("no_lora_head").main([*common, "--base", tiny_llama, "--budgets", "10",
                                              "--stage1_questions", "20"]) == 0
    result = json.loads((tmp_path / "out" / "no_lora_head.json").read_text())
    assert set(result["eli_only"]) == {"LoRA + head", "no LoRA", "no LoRA, MLP head"}
    assert {"no LoRA@10", "no LoRA, MLP head@10"} <= set(result["summary"])
    assert "beats LoRA + head" in (tmp_path / "out" / "no_lora_head.md").read_text()
    # the MLP head reads the same cached base features as the linear one, but is its own head: other confidences
    assert result["eli_only"]["no LoRA, MLP head"] != result["eli_only"]["no LoRA"]
    # run alone, the linear no-LoRA rows come out as in the full run: its fresh head is drawn first either way
    assert load_experiment("no_lora_head").main([*common, "--base", tiny_llama, "--budgets", "10", "--stage1_questions",
                                              "20", "--methods", "no LoRA", "no LoRA, MLP head",
                                              "--output_dir", str(tmp_path / "alone")]) == 0
    alone = json.loads((tmp_path / "alone" / "no_lora_head.json").read_text())
    assert alone["eli_only"] == {k: result["eli_only"][k] for k in ("no LoRA", "no LoRA, MLP head")}
    assert "beats no LoRA" in (tmp_path / "alone" / "no_lora_head.md").read_text()


def test_scaling_ablations_cut_the_targets_to_k_samples(tiny_llama, tmp_path):
    """`scaling_ablations.py` on a slice of the committed records: the k' rows really use k' samples (Consis-Sem at
    k' = 1 is each record's first verdict), and every (N, seed) makes its own stage 1."""
    from elical_hf.signals.records import load_records, save_records

    records = load_records(os.path.join(EXAMPLES, "..", "docs", "results", "honestybench-smollm2-135m"), splits=True)
    chosen = [r for r in records if r["partition"] == "train"][:60]
    chosen += [r for r in records if r["paper_split"] == "in_domain_test"][:16]
    chosen += [r for r in records if r["paper_split"] == "ood_test"][:16]
    save_records(chosen, tmp_path / "records" / "slice.parquet")
    assert load_experiment("scaling_ablations").main(
        ["--records", str(tmp_path / "records"), "--base", tiny_llama, "--output_dir", str(tmp_path / "out"),
         "--result", "", "--seeds", "0", "1", "--samples_used", "1", "5", "--elicitation_sizes", "20", "60",
         "--budgets", "10", "--head_epochs", "2", "--bootstrap", "5"]) == 0
    result = json.loads((tmp_path / "out" / "ablations.json").read_text())
    # each row is paired with the same method at the largest k' / N, over seeds (same label draws)
    k1 = next(e for e in result["samples"] if e["k"] == 1 and e["method"] == "Eli-Only")
    assert set(k1["auroc - k=5"]) == {"in-domain avg", "OOD avg"} and len(k1["auroc - k=5"]["OOD avg"]["auroc_ci"]) == 2
    assert "auroc - k=5" not in next(e for e in result["samples"] if e["k"] == 5 and e["method"] == "Eli-Only")
    assert len(result["elical_minus_cal_only_at_100"]["in-domain avg"]["auroc_per_draw"]) == 2
    rows = {(e["k"], e["method"]): e for e in result["samples"]}
    assert set(rows) == {(k, m) for k in (1, 5) for m in ("Consis-Sem", "Eli-Only", "EliCal@10")}
    assert rows[(1, "Eli-Only")]["seeds"] == 2 and len(rows[(1, "Eli-Only")]["in-domain avg"]["per_seed"]) == 2
    assert rows[(1, "Consis-Sem")]["in-domain avg"] != rows[(5, "Consis-Sem")]["in-domain avg"]
    sizes = {(e["N"], e["method"]) for e in result["elicitation_size"]}
    assert sizes == {(n, m) for n in (20, 60) for m in ("Eli-Only", "EliCal@100")} | {(0, "Cal-Only@100")}
    small = [r for r in result["runs"]["elicitation_size"] if r["N"] == 20 and r["method"] == "Eli-Only"]
    large = [r for r in result["runs"]["elicitation_size"] if r["N"] == 60 and r["method"] == "Eli-Only"]
    assert small[0]["metrics"] != large[0]["metrics"]
    assert "## k ablation" in (tmp_path / "out" / "ablations.md").read_text()


def test_head_init_experiment_compares_paired_seeds(tiny_llama, tmp_path):
    """`head_init_experiment.py` with a tiny model against the committed Cal-Only@100 runs: it trains only the
    torch_default runs and both head-only inits, pairs them by seed, and pairs the committed EliCal-head@100 with
    each head-only baseline; `--variants head` remakes the head-only rows and keeps the LoRA ones."""
    out, cache = tmp_path / "head_init.json", tmp_path / "work" / "runs.json"
    common = ["--output_dir", str(tmp_path / "work"), "--model", tiny_llama, "--seeds", "42", "43", "--bootstrap",
              "5", "--result", str(out), "--runs", str(cache)]
    assert load_experiment("head_init_experiment").main(common) == 0
    result = json.loads(out.read_text())
    assert set(result["differences"]) == {"Cal-Only@100/torch_default − Cal-Only@100/normal",
                                          "Cal-Only-head@100/torch_default − Cal-Only-head@100/normal",
                                          "EliCal-head@100 − Cal-Only-head@100/torch_default",
                                          "EliCal-head@100 − Cal-Only-head@100/normal"}
    cell = result["differences"]["Cal-Only@100/torch_default − Cal-Only@100/normal"]["in-domain avg"]
    assert len(cell["auroc_per_draw"]) == 2 and cell["auroc"] == pytest.approx(sum(cell["auroc_per_draw"]) / 2)
    runs = json.loads(cache.read_text())
    assert "Cal-Only@100/normal~42" not in runs and "Cal-Only@100/normal~42" in result["runs"]  # committed, not made
    assert runs["Cal-Only-head@100/torch_default~42"]["confidences"] != runs["Cal-Only-head@100/normal~42"]["confidences"]
    # the EliCal pairs differ by the baselines' difference only
    elical = {init: result["differences"][f"EliCal-head@100 − Cal-Only-head@100/{init}"]["OOD avg"]["auroc_per_draw"]
              for init in ("torch_default", "normal")}
    inits = result["differences"]["Cal-Only-head@100/torch_default − Cal-Only-head@100/normal"]["OOD avg"]
    assert [a - b for a, b in zip(elical["normal"], elical["torch_default"])] == pytest.approx(inits["auroc_per_draw"])

    lora_row = result["differences"]["Cal-Only@100/torch_default − Cal-Only@100/normal"]
    cache.write_text(json.dumps({k: v for k, v in runs.items() if "-head@" in k}))  # the LoRA runs' cache lost
    assert load_experiment("head_init_experiment").main([*common, "--variants", "head"]) == 0
    again = json.loads(out.read_text())
    assert again["differences"]["Cal-Only@100/torch_default − Cal-Only@100/normal"] == lora_row  # kept, not remade
    assert "Cal-Only@100/torch_default − Cal-Only@100/normal" in again["kept_from_previous"]
    assert not any("-head@" in name for name in again["kept_from_previous"])
    assert set(json.loads(cache.read_text())) == {k for k in runs if "-head@" in k}  # nothing retrained


def test_the_head_init_table_in_the_docs_is_the_committed_result():
    """docs/results.md's head-init table is `docs/results/head_init.json`'s, and every head-only run in it recomputes
    from the committed per-question confidences (`head_init_runs.json`, on `confidences.json`'s test questions)."""
    from elical_hf.data.questions import IN_DOMAIN
    from elical_hf.evaluation.tables import evaluate_table

    experiment = load_experiment("head_init_experiment")
    results = os.path.join(EXAMPLES, "..", "docs", "results")
    with open(os.path.join(results, "head_init.json"), encoding="utf-8") as handle:
        result = json.load(handle)
    with open(os.path.join(results, "..", "results.md"), encoding="utf-8") as handle:
        assert experiment.markdown(result) in handle.read()
    with open(os.path.join(results, "head_init_runs.json"), encoding="utf-8") as handle:
        runs = json.load(handle)
    with open(os.path.join(results, "confidences.json"), encoding="utf-8") as handle:
        scores = json.load(handle)
    splits = ["in_domain_test" if name in IN_DOMAIN else "ood_test" for name in scores["datasets"]]
    head_only = [name for name in result["runs"] if "-head@" in name]
    assert len(head_only) == 6 and not any("-head@" in name for name in result.get("kept_from_previous", []))
    table = evaluate_table(scores["correct"], scores["datasets"], splits,
                           {name: runs[name]["confidences"] for name in head_only})
    for name in head_only:
        for column in ("in-domain avg", "OOD avg"):
            assert table[name][column]["auroc"] == pytest.approx(result["runs"][name][column]["auroc"], abs=1e-6)


def test_judge_decoding_experiment_counts_changed_verdicts(tiny_llama, tmp_path):
    """`judge_decoding_experiment.py` with a tiny judge on three committed records: every answer is judged under both
    decodings and the changes add up."""
    out = tmp_path / "decoding.json"
    assert load_experiment("judge_decoding_experiment").main(
        ["--num_records", "3", "--judge_model", tiny_llama, "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["num_records"] == 3 and result["answers_judged"] == 3 * 6  # greedy + 5 samples each
    assert result["changed"]["0 -> 1"] + result["changed"]["1 -> 0"] <= result["verdicts_changed"]
    assert set(result["seconds"]) == set(load_experiment("judge_decoding_experiment").DECODINGS)
