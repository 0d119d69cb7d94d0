"""Round 2 of the reliability probes (issue 24), second part: a mislabelled push, questions the model cannot read,
what `merge` keeps identical, split words, cells of the wrong type, locks on shared caches, local folders that fail
to load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elical_hf import AutoModelForConfidence, push_folder
from elical_hf.cli import main as cli_main
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.reliability import case
from tests.test_hub import upload_base


REPO = Path(__file__).resolve().parents[1]


@case("silent", "`elical-hf push --base_model X` of an adapter trained on another backbone (a tiny Llama adapter "
      "named as a tiny Qwen2's), or of a folder that records another Hub base",
      "refused before anything is published: `… holds an adapter trained on another backbone than 'tiny/qwen2' "
      "(model_type 'llama' vs 'qwen2', …)` / `… was trained on 'tiny/llama', but it was asked to be published with "
      "the base model …`; a base whose config cannot be read is refused too")
def test_push_refuses_a_base_the_adapter_was_not_trained_on(hub, tiny_llama, tmp_path, raise_user_errors):
    upload_base(tmp_path, "tiny/qwen2", arch="qwen2")
    upload_base(tmp_path, "tiny/llama")
    folder = tmp_path / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)  # records a local path as its base
    with pytest.raises(ValueError, match=r"trained on another backbone than 'tiny/qwen2' \(.*model_type 'llama' vs "
                                         r"'qwen2'"):
        cli_main(["push", str(folder), "alice/mislabelled", "--base_model", "tiny/qwen2"])
    with pytest.raises(ValueError, match="Cannot check that 'tiny/nowhere' is the base model"):
        push_folder(folder, "alice/mislabelled", base_model_name_or_path="tiny/nowhere")
    assert hub.repo("alice/mislabelled") is None
    assert cli_main(["push", str(folder), "alice/right", "--base_model", "tiny/llama"]) == 0
    assert json.loads(hub.files("alice/right")["adapter_config.json"])["base_model_name_or_path"] == "tiny/llama"
    recorded = tmp_path / "recorded"  # a folder that records its Hub base: no other Hub id may replace it
    AutoModelForConfidence.from_pretrained("tiny/llama").save_pretrained(recorded)
    with pytest.raises(ValueError, match="was trained on 'tiny/llama', but it was asked to be published with the "
                                         "base model 'tiny/qwen2'"):
        push_folder(recorded, "alice/relabelled", base_model_name_or_path="tiny/qwen2")
    assert hub.repo("alice/relabelled") is None


@case("silent", "`sample` (or `model.answer`, `generate_answers`) on a question longer than the model's context (a "
      "3,000-word question on a 512-token model)",
      "refused before anything is sampled or written, naming the question: `1 of 2 question(s) do not fit the model's "
      "context of 512 tokens with max_new_tokens=4: id 'long' (3,0xx tokens) …`; scoring still cuts from the left "
      "with its warning (`test_over_long_questions_are_counted`)")
def test_questions_longer_than_the_context_are_refused_before_sampling(tiny_llama, tmp_path, raise_user_errors):
    from elical_hf.signals import HFBackend, SamplingSettings, generate_answers, sample_records

    long_question = " ".join(["paris"] * 3000)
    questions = [{"id": "short", "question": "who wrote hamlet"}, {"id": "long", "question": long_question}]
    backend = HFBackend(tiny_llama)
    settings = SamplingSettings(num_samples=1, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"1 of 2 question\(s\) do not fit the model's context of 512 tokens with "
                                         r"max_new_tokens=4: id 'long' \(3,0\d\d tokens\)"):
        sample_records(questions, backend, settings, tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match=r"question row 1 \(3,0\d\d tokens\)"):
        generate_answers(backend.model, backend.tokenizer, ["who wrote hamlet", long_question], settings)
    near = " ".join(["paris"] * 490)  # fits alone, not with 64 answer tokens
    with pytest.raises(ValueError, match="question row 0 .* Shorten or drop them, or lower max_new_tokens"):
        AutoModelForConfidence.from_pretrained(tiny_llama).answer([near], threshold=0.0, max_new_tokens=64)
    assert len(sample_records(questions[:1], backend, settings, tmp_path / "ok", progress=False)) == 1


@pytest.mark.float32
@case("silent", "`elical-hf merge` of 2 workers' folders vs 1 worker's run (its docs said \"exactly the records one "
      "worker would have written\"; `greedy_logprobs` differed by 8.6e-6 on SmolLM2)",
      "the docs (`merge --help`, `merge_samples`, docs/scaling.md) say what is identical (ids, question fields, order, "
      "shards, seeds; in practice answers, tokens and samples) and what may differ by float rounding "
      "(log-probabilities: other batches, padding and shared prefix); the test checks both halves on a tiny model")
def test_merge_says_what_is_identical_and_what_is_rounded(tiny_llama, tmp_path):
    from elical_hf.cli.merge import __doc__ as merge_help
    from elical_hf.signals import HFBackend, SamplingSettings, merge_samples, runner, sample_records
    from elical_hf.signals.runner import TIMING_FIELDS

    words = "who wrote hamlet what is the capital of france when was the king born which river".split()
    questions = [{"id": f"nq-{i}", "question": " ".join(words[(i + j) % len(words)] for j in range(3 + i % 4)),
                  "dataset": "nq"} for i in range(10)]
    backend = HFBackend(tiny_llama, dtype="float32")
    single = sample_records(questions, backend, SamplingSettings(num_samples=2, max_new_tokens=5, batch_size=4),
                            tmp_path / "one", progress=False)
    for i in range(2):
        sample_records(questions, backend, SamplingSettings(num_samples=2, max_new_tokens=5, batch_size=2 + i),
                       tmp_path / f"w{i}", progress=False, num_workers=2, worker_index=i)
    merged = merge_samples([tmp_path / "w1", tmp_path / "w0"], tmp_path / "merged")
    rounded = ("greedy_logprobs", "greedy_cumulative_logprobs", *TIMING_FIELDS)
    same = [[{k: v for k, v in r.items() if k not in rounded} for r in records] for records in (merged, single)]
    assert same[0] == same[1]  # ids, question fields, order, shards, answers, tokens, samples
    gap = max(abs(a - b) for m, s in zip(merged, single) for a, b in zip(m["greedy_logprobs"], s["greedy_logprobs"]))
    assert gap < 1e-4
    scaling = (Path(__file__).resolve().parents[1] / "docs" / "scaling.md").read_text()
    for text in (merge_help, runner.__doc__, runner.merge_samples.__doc__, scaling):
        assert "exactly the records" not in text and "exactly as one worker" not in text
        assert "float rounding" in " ".join(text.split())


@case("silent", "records in a file whose name holds a near split word (`rec_jtrain.jsonl`) that all carry their own "
      "`source_split` (or legacy `split`) field (`load_honestybench`, `sample --questions`)",
      "read by their own split: the name is checked only for records without one, which are still "
      "refused (`'jtrain' looks like the split word 'train' …`)")
def test_a_near_split_word_in_a_name_never_refuses_records_with_their_own_split(tmp_path):
    from elical_hf.steps.sample import load_questions
    from elical_hf.signals import load_honestybench
    from elical_hf.signals.records import save_records
    from tests.test_reliability_records_and_settings import records_of

    path = save_records(records_of("m", split="train"), tmp_path / "rec_jtrain.jsonl")
    loaded = load_honestybench(path, progress=False, cache_dir=str(tmp_path / "cache"))
    assert list(loaded) == ["train"] and len(loaded["train"]) == 30
    assert [row["source_split"] for row in load_questions(path)] == ["train"] * 30
    unsplit = [{k: v for k, v in r.items() if k != "source_split"} for r in records_of("m")]
    bare = save_records(unsplit, tmp_path / "bare" / "rec_jtrain.jsonl")
    with pytest.raises(ValueError, match="'jtrain' looks like the split word 'train'"):
        load_honestybench(bare, progress=False, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="'jtrain' looks like the split word 'train'"):
        load_questions(bare)


@case("input", "`elical-hf judge` on records with text in an integer field (`\"num_generated_tokens\": \"one\"`, or "
      "`\"num_samples\": \"one\"` where the other records hold numbers)",
      "exits 2 naming the record and field: `<file> line 4 (id 'nq-1'): `num_generated_tokens` must be an integer, "
      "got 'one'.` / `Field 'num_samples' mixes value types across records: record 3 (id 'nq-1') holds 'one' (str), "
      "record 0 holds 2 (int)` (was `ArrowInvalid: Could not convert 'one'`)")
def test_text_in_an_integer_field_names_the_record(tmp_path, capsys):
    from tests.test_reliability_records_and_settings import records_of

    for field, line in (("num_generated_tokens", "line 4 (id 'nq-1'): `num_generated_tokens` must be an integer, "
                                                 "got 'one'."),
                        ("num_samples", "Field 'num_samples' mixes value types across records: record 3 (id 'nq-1') "
                                        "holds 'one' (str), record 0 holds 2 (int)")):
        rows = records_of("m")
        for row in rows:
            row[field] = 2
        rows[3][field] = "one"
        path = tmp_path / f"{field}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        assert cli_main(["judge", "--records", str(path), "--consistency", "lexical",
                         "--output", str(tmp_path / f"{field}-judged.parquet")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("elical-hf judge: error: ") and err[0].endswith(line), err
        assert not (tmp_path / f"{field}-judged.parquet").exists()


@case("input", "`ConfidenceTrainer` (or any training entry point) given a dict of columns of different lengths, or a "
      "column that is not a list", "one `ValueError`: `The train dataset's columns have different lengths "
      "('question': 2, 'consistency': 1): every column needs one value per row.` (was `ArrowInvalid` from datasets)")
def test_columns_of_different_lengths_are_named(tiny_llama, tmp_path):
    from elical_hf import ConfidenceTrainer, ConfidenceTrainingArguments

    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    args = ConfidenceTrainingArguments(output_dir=str(tmp_path / "t"), report_to="none")
    with pytest.raises(ValueError, match=r"The train dataset's columns have different lengths \('question': 2, "
                                         r"'consistency': 1\)"):
        ConfidenceTrainer(model, args=args, train_dataset={"question": ["a?", "b?"], "consistency": [0.5]})
    with pytest.raises(ValueError, match="column 'consistency' must be a list"):
        ConfidenceTrainer(model, args=args, train_dataset={"question": ["a?"], "consistency": 0.5})


@case("input", "a question holding an unpaired surrogate (`\"who \\udcff wrote\"`): training rows, `model.confidence`, "
      "`model.answer`, `sample_records`, a records file",
      "one `ValueError` naming the row (and id, file and line where known): `The text of question row 0 is not valid "
      "Unicode: it holds an unpaired surrogate '\\udcff' at character 4 …` (was a tokenizers `TypeError`)")
def test_a_question_with_an_unpaired_surrogate_is_named(tiny_llama, tmp_path):
    from elical_hf.data.training_table import as_dataset
    from elical_hf.signals import HFBackend, SamplingSettings, sample_records
    from elical_hf.signals.records import read_records

    bad = "who \udcff wrote"
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    unicode = r"is not valid Unicode: it holds an unpaired surrogate '\\udcff' at character 4"
    with pytest.raises(ValueError, match=f"The text of question row 1 {unicode}"):
        model.confidence(["who wrote hamlet", bad])
    with pytest.raises(ValueError, match=f"The text of question row 0 {unicode}"):
        model.answer([bad], threshold=0.0, max_new_tokens=2)
    with pytest.raises(ValueError, match=f"The text of the train dataset's row 1, column 'question', {unicode}"):
        as_dataset([{"question": "fine?", "consistency": 0.5}, {"question": bad, "consistency": 0.5}], "train")
    with pytest.raises(ValueError, match=f"The text of question row 1 \\(id 'q1'\\) {unicode}"):
        sample_records([{"id": "q0", "question": "fine?"}, {"id": "q1", "question": bad}], HFBackend(tiny_llama),
                       SamplingSettings(num_samples=1, max_new_tokens=2), tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"id": "x", "question": bad, "greedy_response": "a"}) + "\n")  # JSON escapes it
    with pytest.raises(ValueError, match=f"records.jsonl line 1 \\(id 'x'\\): The text of the question {unicode}"):
        read_records(path)


@case("input", "`elical-hf threshold MODEL --alpha 2` (or `--delta 1.5`)",
      "exits 2 before any file is read or model loaded: `--alpha must lie in (0, 1) …, got 2.0` / `--delta must lie in "
      "(0, 1) …`")
def test_threshold_levels_are_checked_before_anything_loads(tmp_path, raise_user_errors):
    missing = ["threshold", str(tmp_path / "no-model"), "--records", str(tmp_path / "no-records.jsonl")]
    with pytest.raises(ValueError, match=r"--alpha must lie in \(0, 1\) .*got 2.0"):
        cli_main([*missing, "--alpha", "2"])
    with pytest.raises(ValueError, match=r"--delta must lie in \(0, 1\) .*got 1.5"):
        cli_main([*missing, "--alpha", "0.1", "--delta", "1.5"])
    with pytest.raises(OSError):  # with sound levels the missing files are what is reported
        cli_main([*missing, "--alpha", "0.1"])


def _hold(code: str, tmp_path: Path) -> subprocess.Popen:
    """A process that runs `code` (which prints `held` once it holds its lock); returns once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline().strip() == "held"
    return holder


@case("data", "two processes converting the embedded GGUF model into its cache folder at once",
      "the second waits for the first (a lock beside the folder, `atomic.cache_lock`, up to 30 min) and reuses its "
      "folder, never converting over it (was: the second deleted and rewrote the folder the first was loading)")
def test_a_second_conversion_waits_and_reuses_the_first(tmp_path, monkeypatch):
    from elical_hf.models import default_model

    entry = default_model.EmbeddedModel(package="no_such_gguf_package", gguf_file="tiny.Q4_1.gguf", install_hint="-")
    monkeypatch.setitem(default_model.EMBEDDED_MODELS, "tiny/embedded", entry)
    monkeypatch.setenv("ELICAL_HF_CACHE", str(tmp_path / "cache"))
    target = tmp_path / "cache" / "models" / "tiny--embedded--tiny.Q4_1"
    holder = _hold(  # converts (stands in for it) while holding the lock, slowly
        "import time\nfrom pathlib import Path\nfrom elical_hf.utils.atomic import cache_lock\n"
        f"target = Path({str(target)!r})\n"
        "with cache_lock(target, timeout=5):\n    print('held', flush=True)\n    time.sleep(1.5)\n"
        "    target.mkdir(parents=True)\n    (target / 'config.json').write_text('{\"by\": \"first\"}')\n"
        "    (target / '.elical_complete').write_text('no_such_gguf_package/tiny.Q4_1.gguf\\n')\n", tmp_path)
    try:
        # Converting itself would fail (no such package): it must wait for the first and take its folder.
        assert default_model.convert_embedded("tiny/embedded") == target
    finally:
        holder.wait(timeout=60)
    assert json.loads((target / "config.json").read_text()) == {"by": "first"}


@case("data", "two processes installing the metric modules into evaluate's module cache at once "
      "(`elical-hf install-metrics` in two processes)",
      "they take turns (`atomic.cache_lock`, the lock of every cache written once), and each module folder is built "
      "aside and moved into place, so another process's `evaluate.load` never sees a module without its "
      "`functional.py`")
def test_evaluate_module_installs_take_turns_and_never_show_a_part(tmp_path, monkeypatch):
    from elical_hf.publishing import metric_modules

    cache = tmp_path / "modules"
    metrics = cache / "evaluate_modules" / "metrics"
    released = tmp_path / "released"
    holder = _hold(
        "import time\nfrom pathlib import Path\nfrom elical_hf.utils.atomic import cache_lock\n"
        f"with cache_lock({str(metrics)!r}):\n    print('held', flush=True)\n    time.sleep(1.5)\n"
        f"    Path({str(released)!r}).write_text('done')\n", tmp_path)
    try:
        metric_modules.install_metrics(str(cache))
        assert released.exists()  # it waited for the holder
    finally:
        holder.wait(timeout=60)

    seen_parts = []
    replace = os.replace

    def watching_replace(source, destination):  # what a reader in another process could see at each step
        for script in (tmp_path / "fresh").glob("evaluate_modules/metrics/*/*/honesty_*.py"):
            shared = [script.parent / name for name in metric_modules.SHARED_FILES]
            if len(script.parent.name) == 64 and not all(path.is_file() for path in shared):
                seen_parts.append(script)
        return replace(source, destination)

    monkeypatch.setattr(os, "replace", watching_replace)
    paths = metric_modules.install_metrics(str(tmp_path / "fresh"))
    assert seen_parts == [] and all(Path(p).is_file() for p in paths)


@case("input", "local folders that fail to load: a confidence model folder without `adapter_model.safetensors`, one "
      "whose recorded base folder was moved, a missing path given to `ConfidenceEstimationPipeline.from_pretrained`, "
      "`load_honestybench` or `convert-official` (transformers' own `pipeline()` reads the path before any code of "
      "ours runs and keeps its Hub error)",
      "one line naming the folder: `… holds confidence_config.json but no adapter_model.safetensors: an incomplete "
      "copy …` / `… was trained on the base model in the folder …, which is not there any more …` / `No such model "
      "folder: …` / `No such file or folder: …` / `No such release folder: …` (were `LocalEntryNotFoundError`, `Repo "
      "id must be in the form …`)")
def test_local_folders_that_fail_to_load_are_named(tiny_llama, tmp_path, raise_user_errors):
    import shutil

    from elical_hf import ConfidenceEstimationPipeline
    from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME
    from elical_hf.pipeline import ConfidencePipelineLoadError
    from elical_hf.signals import load_honestybench

    saved = tmp_path / "saved"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(saved)
    weightless = tmp_path / "weightless"
    shutil.copytree(saved, weightless)
    (weightless / "adapter_model.safetensors").unlink()
    with pytest.raises(ValueError, match="holds confidence_config.json but no adapter_model.safetensors: an "
                                         "incomplete copy"):
        AutoModelForConfidence.from_pretrained(str(weightless))
    base = tmp_path / "base"
    shutil.copytree(tiny_llama, base)
    moved = tmp_path / "moved"
    AutoModelForConfidence.from_pretrained(str(base)).save_pretrained(moved)
    base.rename(tmp_path / "base-elsewhere")
    with pytest.raises(ValueError, match=f"was trained on the base model in the folder {base}, which is not there "
                                         f"any more"):
        AutoModelForConfidence.from_pretrained(str(moved))
    elsewhere = str(tmp_path / "base-elsewhere")
    loaded = AutoModelForConfidence.from_pretrained(str(moved), base_model_name_or_path=elsewhere)
    assert loaded.confidence_config.base_model_name_or_path == str(base)  # the provenance saved, the weights found
    assert json.loads((moved / CONFIDENCE_CONFIG_NAME).read_text())["base_model_name_or_path"] == str(base)
    missing = str(tmp_path / "no" / "such" / "folder")
    with pytest.raises(ConfidencePipelineLoadError, match=f"No such model folder: '{missing}'"):
        ConfidenceEstimationPipeline.from_pretrained(missing)
    with pytest.raises(FileNotFoundError, match=f"No such file or folder: '{missing}'"):
        load_honestybench(missing)
    with pytest.raises(FileNotFoundError, match=f"No such release folder: '{missing}'"):
        cli_main(["convert-official", missing, str(tmp_path / "converted")])
