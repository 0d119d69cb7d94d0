"""Round 2 of the reliability probes (issue 24): the right model on the right records, no input destroyed, nonsense
thresholds and judge settings refused, one line for each bad input."""

from __future__ import annotations

import json
import logging
import math

import pytest

from elical_hf import AutoModelForConfidence
from elical_hf.cli import main as cli_main
from elical_hf.metrics.functional import auroc
from elical_hf.training.recipe import take_labels
from elical_hf.signals.baselines import consis_sem, prob
from elical_hf.signals.records import save_records
from elical_hf.signals.runner import check_unique_ids
from tests.reliability import case
from tests.test_diagnosis import make_records
from tests.test_reliability_silent import QUICK, trained_model  # noqa: F401 - trained_model: a fixture


def records_of(model: str, n: int = 30, split: str = "train") -> list[dict]:
    names = {"good": "nq", "inverted": "hotpotqa", "noise": "pararel"}  # datasets HonestyBench knows
    rows = make_records(n // 3 + 1)[:n]
    for row in rows:
        del row["split"]  # the diagnosis rows' legacy field: records name their split word `source_split`
        row.update(model=model, source_split=split, dataset=names[row["dataset"]], id=row["id"].replace(
            row["dataset"], names[row["dataset"]]))
    return rows


@case("silent", "`elical-hf evaluate` / `threshold` / `select-labels` with records of another model than the "
      "confidence model's base (or records pooling several models)",
      "refused: `… holds the answers of M, but this confidence model is built on B …`; `--allow_other_model` for a "
      "model fine-tuned from that base")
def test_records_of_another_model_are_refused(trained_model, tmp_path, raise_user_errors):  # noqa: F811
    path = save_records(records_of("HuggingFaceTB/SmolLM2-135M-Instruct", split="in_domain_test"),
                        tmp_path / "other.jsonl")
    argv = ["evaluate", "--records", path, "--model", f"EliCal={trained_model}", "--baselines", ""]
    with pytest.raises(ValueError, match="holds the answers of HuggingFaceTB/SmolLM2-135M-Instruct, but this "
                                         "confidence model is built on"):
        cli_main([*argv, "--output_dir", str(tmp_path / "a")])
    assert not (tmp_path / "a" / "results.json").exists()
    assert cli_main([*argv, "--output_dir", str(tmp_path / "b"), "--allow_other_model", "true"]) == 0
    with pytest.raises(ValueError, match="holds the answers of"):
        cli_main(["threshold", trained_model, "--records", save_records(records_of("other/model"),
                                                                       tmp_path / "t.jsonl"), "--split", "train"])
    mixed = records_of("model-a")[:15] + [{**r, "id": r["id"] + "-b", "model": "model-b"} for r in records_of("x")][:15]
    with pytest.raises(ValueError, match="pools the answers of several models"):
        cli_main(["select-labels", trained_model, "--records", save_records(mixed, tmp_path / "m.jsonl"),
                  "--output", str(tmp_path / "chosen.jsonl"), "--num_labels", "3"])


@case("silent", "`elical-hf evaluate` on records holding one record twice",
      "refused: `… holds record 'nq-0' (nq) twice (rows 0 and 30) …`")
def test_a_duplicated_record_is_refused(tmp_path, raise_user_errors):
    rows = records_of("m", split="in_domain_test")
    path = save_records(rows + rows[:1], tmp_path / "dup.jsonl")
    with pytest.raises(ValueError, match=r"holds record 'nq-0' \(nq\) twice"):
        cli_main(["evaluate", "--records", path, "--baselines", "consis_sem", "--output_dir", str(tmp_path / "o")])


@case("data", "`elical-hf select-labels --output` pointing at its own `--records` pool, or at an existing file",
      "refused before any model loads: `… is the --records input itself …` / `… exists; pass --overwrite …`")
def test_select_labels_never_destroys_its_input(trained_model, tmp_path, raise_user_errors):  # noqa: F811
    from elical_hf.cli.select_labels import main

    pool = save_records(records_of("m"), tmp_path / "pool.jsonl")
    before = (tmp_path / "pool.jsonl").read_text()
    with pytest.raises(ValueError, match="is the --records input itself"):
        main([trained_model, "--records", pool, "--output", pool, "--num_labels", "3", "--allow_other_model", "true"])
    assert (tmp_path / "pool.jsonl").read_text() == before
    existing = tmp_path / "chosen.jsonl"
    existing.write_text("keep me\n")
    with pytest.raises(ValueError, match="exists; pass --overwrite"):
        main([trained_model, "--records", pool, "--output", str(existing), "--num_labels", "3"])
    assert existing.read_text() == "keep me\n"


@case("silent", "`model.answer(q, threshold=2 / -1 / nan / \"0.5\")`, `retrieve_threshold > threshold`, a `retrieve` "
      "returning 42, `pipeline([])`",
      "one `ValueError` each: `threshold must lie in [0, 1]`, `must be a number`, `must not exceed`, `must return a "
      "string or None`, `empty list of questions`")
def test_the_gate_refuses_nonsense(tiny_llama):
    from elical_hf import ConfidenceEstimationPipeline

    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    for bad in (2, -1, math.nan):
        with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
            model.answer("who wrote hamlet", threshold=bad)
    with pytest.raises(ValueError, match="must be a number"):
        model.answer("who wrote hamlet", threshold="0.5")
    with pytest.raises(ValueError, match="must not exceed"):
        model.answer("who wrote hamlet", threshold=0.3, retrieve_threshold=0.6)
    with pytest.raises(ValueError, match="must return a string or None"):
        model.answer("who wrote hamlet", threshold=1.0, retrieve_threshold=0.0, retrieve=lambda q: 42,
                     max_new_tokens=2)
    with pytest.raises(ValueError, match="empty list of questions"):
        ConfidenceEstimationPipeline(model)([])


@case("input", "`elical-hf judge --lexical_threshold 5` (or any judge threshold outside [0, 1]); `--output` a folder "
      "that holds other files (not a judge folder)",
      "exits 2: `--lexical_threshold must lie in [0, 1], got 5.0 …` / `--output … is a folder that holds other files "
      "and no manifest.json of elical-hf judge …`")
def test_judge_thresholds_outside_the_unit_interval(tmp_path, raise_user_errors):
    path = save_records(records_of("m"), tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match=r"--lexical_threshold must lie in \[0, 1\], got 5.0"):
        cli_main(["judge", "--records", path, "--consistency", "lexical", "--lexical_threshold", "5",
                  "--output", str(tmp_path / "o.jsonl")])
    with pytest.raises(ValueError, match="is a folder that holds other files"):
        cli_main(["judge", "--records", path, "--consistency", "lexical", "--output", str(tmp_path)])


@case("silent", "`baselines`: Consis-Sem asked of lexically judged records; positive log-probabilities; all-correct "
      "records", "refused: `… judged lexically … that is Consis-Lex`; `… has a positive log-probability …`; the "
      "report says why there is no AUROC (`auroc_skipped: every greedy answer is correct …`)")
def test_baselines_name_what_they_compute(tmp_path, capsys):
    rows = records_of("m")
    for row in rows:
        row.update(consistency_judge="lexical:rougeL@0.5", greedy_logprobs=[-0.1, -0.2],
                   greedy_cumulative_logprobs=-0.3)
    with pytest.raises(ValueError, match="judged lexically .* that is Consis-Lex"):
        consis_sem(rows)
    with pytest.raises(ValueError, match="positive log-probability"):
        prob([{**rows[0], "greedy_logprobs": [5.0]}])
    right = [{**r, "greedy_correctness": True} for r in rows]
    path = save_records(right, tmp_path / "right.jsonl")
    assert cli_main(["baselines", "--records", path, "--which", "prob", "--output", str(tmp_path / "o.jsonl")]) == 0
    printed = capsys.readouterr().out
    report = json.loads(printed[printed.index("{\n"):])
    assert report["auroc"] == {} and "every greedy answer is correct" in report["auroc_skipped"]


@case("silent", "`sample` with one id given to two different questions; `--limit 0`",
      "refused: `Id 'x' names two different questions …`; `--limit must be >= 1`")
def test_sample_refuses_ambiguous_ids_and_an_empty_limit(tmp_path, raise_user_errors):
    check_unique_ids([{"id": "x", "question": "a?"}, {"id": "x", "question": "a?"}])  # a repeat is fine
    with pytest.raises(ValueError, match="Id 'x' names two different questions"):
        check_unique_ids([{"id": "x", "question": "a?"}, {"id": "x", "question": "b?"}])
    with pytest.raises(ValueError, match="--limit must be >= 1"):
        cli_main(["sample", "--questions", "bundled:nq:3", "--limit", "0", "--output_dir", str(tmp_path / "s")])
    assert not (tmp_path / "s").exists()


@case("silent", "stage 2 with more `--num_labels` than rows, or labels of one class",
      "a warning each (`num_labels=500 asked for, but … 40 rows …`, `Every calibration label has greedy_correctness = 0 …`);"
      " the run manifest records `num_labels_used`")
def test_label_budget_beyond_the_rows_and_one_class_are_said(caplog):
    rows = [{"question": f"q{i}?", "correctness": 0.0, "greedy_correctness": 0} for i in range(40)]
    with caplog.at_level(logging.WARNING, logger="elical_hf.training.recipe"):
        assert len(take_labels(rows, 500, 0)) == 40
    assert "num_labels=500 asked for, but the calibration data has 40 rows" in caplog.text
    assert "Every calibration label has greedy_correctness = 0" in caplog.text


@case("input", "`honesty_auroc` / any metric given string predictions (`[\"0.9\", \"0.2\"]`)",
      "`ValueError: confidences must be numeric, got dtype <U3 (e.g. strings)`")
def test_metrics_refuse_strings():
    with pytest.raises(ValueError, match="confidences must be numeric, got dtype"):
        auroc(["0.9", "0.2", "0.7"], [1, 0, 1])


@case("security", "`convert-official` on a head whose pickle holds code",
      "refused without running it, and the message never suggests `weights_only=False`")
def test_convert_never_suggests_unsafe_loading(tmp_path):
    import torch

    from elical_hf.publishing.convert import load_head
    from tests.test_convert import _Exploit

    ran = tmp_path / "ran"
    torch.save({"weight": torch.zeros(1, 4), "bias": _Exploit(ran)}, tmp_path / "head.pt")
    with pytest.raises(ValueError) as error:
        load_head(tmp_path / "head.pt", 4)
    assert "not a plain state_dict" in str(error.value) and not ran.exists()
    assert "weights_only=False" not in str(error.value) and "will likely succeed" not in str(error.value)
    assert "weights_only` set to `False" not in str(error.value)


@case("input", "a model folder whose template is `\"Q: {question} {answer}\"`, or whose `confidence_config.json` is "
      "broken JSON", "refused on load, naming the file: `prompt_template may use only the '{question}' field …` / "
      "`…/confidence_config.json is not valid JSON (… at line 1, column 2) …`")
def test_bad_saved_configs_are_named_on_load(tiny_llama, tmp_path):
    from elical_hf import ConfidenceConfig
    from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME

    with pytest.raises(ValueError, match="may use only the '\\{question\\}' field"):
        ConfidenceConfig(prompt_template="Q: {question} {answer}")
    folder = tmp_path / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    (folder / CONFIDENCE_CONFIG_NAME).write_text("{broken")
    with pytest.raises(ValueError, match=f"{CONFIDENCE_CONFIG_NAME} is not valid JSON"):
        ConfidenceConfig.from_json_file(folder / CONFIDENCE_CONFIG_NAME)


@case("input", "`AutoModelForConfidence.from_pretrained(\"./no/such/folder\")` (a path that looks local)",
      "`FileNotFoundError: [Errno 2] No such model folder: './no/such/folder'`, never a Hub or cache error")
def test_a_missing_local_model_folder_is_named():
    with pytest.raises(FileNotFoundError, match="No such model folder: './no/such/folder'"):
        AutoModelForConfidence.from_pretrained("./no/such/folder")


@case("input", "`train` on a .jsonl of blank lines or a .csv with only a header; `--dev_fraction 1.5`",
      "exits 2 before anything is written: `… holds no rows (only blank lines, or a header without rows)` / "
      "`--dev_fraction must lie in [0, 1)`")
def test_train_says_the_file_is_empty_and_checks_options_first(tiny_llama, tmp_path, raise_user_errors):
    blank, header = tmp_path / "blank.jsonl", tmp_path / "header.csv"
    blank.write_text("\n\n\n")
    header.write_text("question,consistency,correctness\n")
    out = tmp_path / "out"
    for path in (blank, header):
        with pytest.raises(ValueError, match="holds no rows"):
            cli_main(["train", "--model_name_or_path", tiny_llama, "--elicitation_data", str(path),
                      "--calibration_data", str(path), "--output_dir", str(out)])
    with pytest.raises(ValueError, match=r"--dev_fraction must lie in \[0, 1\)"):
        cli_main(["train", "--model_name_or_path", tiny_llama, "--elicitation_data", str(blank),
                  "--calibration_data", str(blank), "--output_dir", str(out), "--dev_fraction", "1.5"])
    assert not out.exists()


@case("data", "`save_pretrained` / the push staging folder under umask 022",
      "`adapter_model.safetensors` is 0644 like every other file (safetensors writes 0600)")
def test_saved_adapter_weights_follow_the_umask(tiny_llama, tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "m")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "m").iterdir() if p.is_file()}
    assert modes["adapter_model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes


@case("data", "two processes writing to one output folder (`sample`, `train`, `evaluate`)",
      "the second is refused at once: `Another process is writing to … (it holds ….lock)`; the first's files are "
      "untouched, and the lock file sits beside the folder, never in it")
def test_a_second_writer_is_refused(tmp_path, raise_user_errors):
    import subprocess
    import sys

    from elical_hf.utils.atomic import one_writer

    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom elical_hf.utils.atomic import one_writer\n"
        f"with one_writer({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match="Another process is writing to"):
            with one_writer(out):
                pass
        with pytest.raises(ValueError, match="Another process is writing"):
            cli_main(["evaluate", "--records", str(tmp_path / "none.jsonl"), "--output_dir", str(out)])
    finally:
        holder.kill()
        holder.wait()
    with one_writer(out):  # free again once the holder is gone
        pass
    assert not out.exists() and not (tmp_path / ".out.lock").exists()  # removed once let go

