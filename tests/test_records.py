import doctest
import json
import math
import re
from pathlib import Path

import pytest
from datasets import load_dataset

from elical_hf.signals.records import layout as layout_module
from elical_hf.signals.records import schema as schema_module
from elical_hf.signals.honestybench import load_honestybench
from elical_hf.signals.records import canonical_dataset, paper_split, parse_record_path
from elical_hf.signals.records import RECORD_FEATURES, normalize_record, read_records, save_records, training_columns


MODELS = ["Qwen2.5-7B-Instruct", "Llama3-8B-Instruct"]


def official_record(i: int, k: int = 4) -> dict:
    """One record in the exact shape of the official HonestyBench jsonl files."""
    tokens = ["Paris", ".", "<|im_end|>"][: 1 + i % 3]
    logprobs = [-0.1 * (j + 1) - 0.01 * i for j in range(len(tokens))]
    return {
        "question": f"question {i}?",
        "answer": ["Paris", "paris, france"],
        "greedy_response": ["".join(tokens[:2])],
        "greedy_correctness": i % 2,
        "greedy_tokens": [tokens],
        "greedy_cumulative_logprobs": [sum(logprobs)],
        "greedy_logprobs": [logprobs],
        "sampling_response": [f"answer {j}" for j in range(k)],
        "sampling_correctness": [int(j < i % (k + 1)) for j in range(k)],
        "consistency_judgement": [int(j <= i % k) for j in range(k)],
    }


def write_jsonl(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def official_folder(tmp_path):
    """2 models x 3 datasets (in-domain train + test, OOD), in two layouts the official repo might use."""
    root = tmp_path / "honestybench"
    a, b = MODELS
    write_jsonl(root / a / "train" / "nq.jsonl", [official_record(i) for i in range(5)])
    write_jsonl(root / a / "test" / "hotpot_qa.jsonl", [official_record(i) for i in range(3)])
    write_jsonl(root / a / "test" / "web_questions.jsonl", [official_record(i) for i in range(4)])
    write_jsonl(root / b / "nq_train.jsonl", [official_record(i) for i in range(2)])
    write_jsonl(root / b / "hq_dev.jsonl", [official_record(i) for i in range(3)])
    write_jsonl(root / b / "wq_test.jsonl", [official_record(i) for i in range(1)])
    (root / "README.md").write_text("not records")
    return root


def test_normalize_official_and_flat_shapes_agree():
    official = official_record(4)
    flat = normalize_record(official)
    assert flat["greedy_response"] == "Paris."
    assert flat["greedy_tokens"] == ["Paris", ".", "<|im_end|>"][:2]
    assert flat["greedy_logprobs"] == official["greedy_logprobs"][0]
    assert flat["greedy_cumulative_logprobs"] == official["greedy_cumulative_logprobs"][0]
    assert flat["greedy_correctness"] is False
    assert flat["sampling_correctness"] == [True, True, True, True]
    assert flat["consistency_judgement"] == [1.0, 0.0, 0.0, 0.0]
    assert normalize_record(flat) == flat  # idempotent: our own records are already flat
    extras = {**flat, "id": 7, "dataset": "nq", "model": "m", "consistency_lexical": [1, 0.5], "shard_seconds": 1.5}
    out = normalize_record(extras)
    assert out["id"] == "7" and out["consistency_lexical"] == [1.0, 0.5] and out["shard_seconds"] == 1.5
    wrapped_empty = normalize_record({"answer": "Paris", "greedy_response": []})
    assert wrapped_empty == {"answer": ["Paris"], "greedy_response": None}
    judged_text = normalize_record({"consistency_judgement": ["Certain.", "uncertain", "No, sorry", True, None]})
    assert judged_text["consistency_judgement"] == [1.0, 0.0, 0.0, 1.0, None]


@pytest.mark.parametrize(
    "record, message",
    [
        ({"greedy_response": ["a", "b"]}, "greedy_response"),
        ({"greedy_tokens": [["a"], ["b"]]}, "greedy_tokens"),
        ({"greedy_correctness": 2}, "greedy_correctness"),
        ({"sampling_correctness": ["maybe"]}, "sampling_correctness"),
        ({"greedy_logprobs": 0.5}, "greedy_logprobs"),
    ],
)
def test_normalize_rejects_bad_shapes(record, message):
    with pytest.raises(ValueError, match=message):
        normalize_record(record)


def test_training_columns():
    columns = training_columns(official_record(6))  # judgement [1, 1, 1, 0], correctness [1, 0, 0, 0], greedy 0
    assert columns == {
        "consistency": 0.75,
        "consistency_source": "consistency_judgement",
        "correctness": 0.25,
        "greedy_correctness": 0,
    }
    ours = {"greedy_response": "x", "sampling_response": ["x", "y"], "consistency_lexical": [1.0, 0.0]}
    assert training_columns(ours) == {
        "consistency": 0.5,
        "consistency_source": "consistency_lexical",
        "correctness": None,
        "greedy_correctness": None,
    }
    empty = training_columns({**ours, "consistency_judgement": [], "consistency_lexical": None})
    assert empty["consistency"] is None and empty["consistency_source"] is None


def test_save_and_read_round_trip(tmp_path):
    rows = [
        {**normalize_record(official_record(i)), "id": f"nq-{i}", "dataset": "nq", "model": "m", "note": f"n{i}"}
        for i in range(3)
    ]
    rows[1]["greedy_correctness"] = None  # not judged
    rows[2]["sampling_correctness"] = None
    for name in ("records.parquet", "records.jsonl"):
        path = save_records(rows, tmp_path / "out" / name)
        assert read_records(path) == rows
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["records.jsonl", "records.parquet"]  # no temp
    loaded = load_dataset("parquet", data_files=str(tmp_path / "out" / "records.parquet"), split="train")
    assert loaded.features["greedy_logprobs"] == RECORD_FEATURES["greedy_logprobs"]
    assert loaded.features["greedy_correctness"] == RECORD_FEATURES["greedy_correctness"]
    assert loaded["note"] == ["n0", "n1", "n2"] and loaded[0]["greedy_logprobs"] == rows[0]["greedy_logprobs"]
    # Official jsonl is read into the flat shape too.
    write_jsonl(tmp_path / "official.jsonl", [official_record(0)])
    assert read_records(tmp_path / "official.jsonl") == [normalize_record(official_record(0))]


def test_save_and_read_errors(tmp_path):
    with pytest.raises(ValueError, match="Unknown records format"):
        save_records([], tmp_path / "x.csv")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="Unknown records format"):
        read_records(tmp_path / "x.csv")
    (tmp_path / "bad.jsonl").write_text('{"question": "q"}\n{oops\n')
    with pytest.raises(ValueError, match="line 2"):
        read_records(tmp_path / "bad.jsonl")
    save_records([], tmp_path / "empty.parquet")
    assert read_records(tmp_path / "empty.parquet") == []


@pytest.mark.parametrize(
    "path, expected",
    [
        ("Qwen2.5-7B-Instruct/nq.jsonl", ("Qwen2.5-7B-Instruct", "nq", None)),
        ("Qwen2.5-7B-Instruct/train/trivia_qa.jsonl", ("Qwen2.5-7B-Instruct", "triviaqa", "train")),
        ("data/Llama3-8B-Instruct/2wikimultihopqa/dev.jsonl", ("Llama3-8B-Instruct", "2wikimultihopqa", "dev")),
        ("Llama3-8B-Instruct_complex_web_questions.jsonl", ("Llama3-8B-Instruct", "complexwebquestions", None)),
        ("pararel_patterns_test_Qwen2.5-14B-Instruct.jsonl", ("Qwen2.5-14B-Instruct", "pararel", "test")),
        ("Qwen2.5-7B-Instruct/mmla.jsonl", ("Qwen2.5-7B-Instruct", "mmlu", None)),
        ("Qwen2.5-7B-Instruct/PopQA_test.jsonl", ("Qwen2.5-7B-Instruct", "popqa", "test")),
        ("notes.jsonl", ("notes", None, None)),
        # the reference code's output layout: <model>/<dataset>/<split>_data/<prompt type>/<file>
        ("Qwen2.5-7B-Instruct/nq/test_data/long_qa/nq_test_Qwen2.5-7B-Instruct_long_qa_0.0_0.95_50_sample_1.jsonl",
         ("Qwen2.5-7B-Instruct", "nq", "test")),
        ("Qwen2.5-7B-Instruct/nq/test_data/long_qa/nq_test_Qwen2.5-7B-Instruct_long_qa_sample_1.jsonl",
         ("Qwen2.5-7B-Instruct", "nq", "test")),
        ("res/Llama3-8B-Instruct/complex_web_questions/test_data/long_qa/complex_web_questions_test_Llama3-8B-Instruct"
         "_long_qa_1.0_0.95_50_sample_20_for_greedy_consistency_res.jsonl",
         ("Llama3-8B-Instruct", "complexwebquestions", "test")),
        ("Qwen2.5-14B-Instruct/tq/train_data/long_qa/tq_train_Qwen2.5-14B-Instruct_long_qa_1.0_0.95_50_sample_20"
         "_long_qa_judge.jsonl", ("Qwen2.5-14B-Instruct", "triviaqa", "train")),
        ("My-Model/mmlu/test_data/long_mc_qa/mmlu_test_My-Model_long_mc_qa_0.0_0.95_50_sample_1.jsonl",
         ("My-Model", "mmlu", "test")),
        # the model folder itself as the root, or a lone file: the model comes from the file name
        ("hq/test_data/long_qa/hq_test_Qwen2.5-7B-Instruct_long_qa_0.0_0.95_50_sample_1.jsonl",
         ("Qwen2.5-7B-Instruct", "hotpotqa", "test")),
        ("pararel_patterns_test_Qwen2.5-7B-Instruct_long_qa_1.0_0.95_50_sample_20.jsonl",
         ("Qwen2.5-7B-Instruct", "pararel", "test")),
    ],
)
def test_parse_record_path(path, expected):
    assert tuple(parse_record_path(path).values()) == expected


@pytest.fixture
def reference_folder(tmp_path):
    """The paper's reference code's output layout, with HonestyBench-shaped records inside."""
    root = tmp_path / "res"
    for model, dataset, split, sampling, n in [("Qwen2.5-7B-Instruct", "nq", "test", "0.0_0.95_50_sample_1", 3),
                                              ("Qwen2.5-7B-Instruct", "hq", "train", "1.0_0.95_50_sample_20", 2),
                                              ("Llama3-8B-Instruct", "nq", "test", "0.0_0.95_50_sample_1", 1)]:
        name = f"{dataset}_{split}_{model}_long_qa_{sampling}.jsonl"
        write_jsonl(root / model / dataset / f"{split}_data" / "long_qa" / name, [official_record(i) for i in range(n)])
    return root


def test_load_honestybench_reference_layout_filters_by_the_top_folder_model(reference_folder):
    qwen = load_honestybench(reference_folder, models="Qwen2.5-7B-Instruct", progress=False)
    assert qwen.num_rows == {"train": 2, "in_domain_test": 3}
    assert set(qwen["train"]["dataset"]) == {"hotpotqa"} and set(qwen["in_domain_test"]["dataset"]) == {"nq"}
    assert {m for split in qwen.values() for m in split["model"]} == {"Qwen2.5-7B-Instruct"}
    assert load_honestybench(reference_folder, progress=False).num_rows == {"train": 2, "in_domain_test": 4}


def test_load_honestybench_filter_leaving_nothing_says_what_was_found(reference_folder):
    found = ("Found models: Llama3-8B-Instruct, Qwen2.5-7B-Instruct; datasets: hotpotqa, nq; "
             "splits: in_domain_test, train.")
    with pytest.raises(ValueError, match="No records left") as error:
        load_honestybench(reference_folder, models="Qwen2.5-14B-Instruct", progress=False)
    assert found in str(error.value) and "models=['Qwen2.5-14B-Instruct']" in str(error.value)
    with pytest.raises(ValueError, match=re.escape(found)):
        load_honestybench(reference_folder, models="Llama3-8B-Instruct", split="train", progress=False)
    with pytest.raises(ValueError, match=re.escape(found)):
        load_honestybench(reference_folder, datasets="squad", progress=False)


def test_dataset_aliases_and_paper_splits():
    pairs = {"hq": "hotpotqa", "hotpot_qa": "hotpotqa", "2wiki": "2wikimultihopqa", "web_questions": "webquestions",
             "wq": "webquestions", "natural_questions": "nq", "tq": "triviaqa", "trivia_qa": "triviaqa",
             "cwq": "complexwebquestions", "MMLA": "mmlu", "SQuAD": "squad", "nope": None}
    assert {alias: canonical_dataset(alias) for alias in pairs} == pairs
    assert paper_split("nq", "train") == "train" and paper_split("tq", "dev") == "in_domain_test"
    assert paper_split("nq", None) == "train" and paper_split("popqa", None) == "ood_test"
    assert paper_split("web_questions", "train") == "other" and paper_split("mmlu", "test") == "mmlu"
    assert paper_split("my-own-set", None) == "other" and paper_split("squad", "in_domain_test") == "in_domain_test"


def test_load_honestybench_official_layout(official_folder):
    bench = load_honestybench(official_folder, progress=False)
    assert list(bench) == ["train", "in_domain_test", "ood_test"]
    assert bench.num_rows == {"train": 7, "in_domain_test": 6, "ood_test": 5}
    train = bench["train"]
    assert sorted(set(train["model"])) == sorted(MODELS) and set(train["dataset"]) == {"nq"}
    assert set(bench["in_domain_test"]["dataset"]) == {"hotpotqa"}
    assert set(bench["ood_test"]["source_split"]) == {"test"}
    row = train[0]
    expected = {**normalize_record(official_record(0)), **training_columns(official_record(0))}
    assert {k: row[k] for k in expected} == expected
    assert row["consistency_source"] == "consistency_judgement" and isinstance(row["greedy_response"], str)
    for split in bench.values():
        for name in ("consistency", "correctness"):
            assert all(0.0 <= v <= 1.0 for v in split[name])
        assert set(split["greedy_correctness"]) <= {0, 1}


def test_load_honestybench_filters(official_folder):
    only_llama = load_honestybench(official_folder, models="llama3-8b-instruct", progress=False)
    assert {m for split in only_llama.values() for m in split["model"]} == {"Llama3-8B-Instruct"}
    hotpot = load_honestybench(official_folder, datasets=["hq", "wq"], split="in_domain_test", progress=False)
    assert list(hotpot) == ["in_domain_test"] and hotpot["in_domain_test"].num_rows == 6
    with pytest.raises(ValueError, match="Unknown dataset"):
        load_honestybench(official_folder, datasets="nope", progress=False)
    with pytest.raises(ValueError, match="Unknown split"):
        load_honestybench(official_folder, split="dev", progress=False)
    with pytest.raises(ValueError, match="No records left"):
        load_honestybench(official_folder, models="gpt-5", progress=False)


def test_load_honestybench_path_parser_override_and_errors(tmp_path):
    write_jsonl(tmp_path / "bench" / "m1" / "part-1.jsonl", [official_record(0)])
    with pytest.raises(ValueError, match="path_parser"):
        load_honestybench(tmp_path / "bench", progress=False)
    bench = load_honestybench(
        tmp_path / "bench", path_parser=lambda p: {"model": "m1", "dataset": "squad", "split": None}, progress=False
    )
    assert list(bench) == ["ood_test"] and bench["ood_test"]["model"] == ["m1"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="No .jsonl or .parquet"):
        load_honestybench(tmp_path / "empty", progress=False)


def test_load_honestybench_our_own_records(tmp_path):
    rows = []
    for i, dataset in enumerate(["nq", "hq", "squad", "my-set", "popqa", "mmla"]):
        row = {"id": str(i), "question": f"q{i}", "answer": ["a"], "dataset": dataset, "model": "tiny",
               "greedy_response": "a", "sampling_response": ["a", "b"], "consistency_lexical": [1.0, 0.0]}
        rows.append(row)
    rows[1]["split"] = "dev"  # a question table's own split column
    save_records(rows[:3], tmp_path / "run" / "shards" / "shard-00000.parquet")
    save_records(rows[3:], tmp_path / "run" / "shards" / "shard-00001.parquet")
    bench = load_honestybench(tmp_path / "run", progress=False)
    assert bench.num_rows == {"train": 1, "in_domain_test": 1, "ood_test": 2, "mmlu": 1, "other": 1}
    assert bench["other"]["dataset"] == ["my-set"] and bench["in_domain_test"]["source_split"] == ["dev"]
    assert bench["train"][0]["consistency"] == 0.5 and bench["train"][0]["consistency_source"] == "consistency_lexical"
    assert bench["train"][0]["correctness"] is None and bench["train"][0]["greedy_correctness"] is None
    single = load_honestybench(tmp_path / "run" / "shards" / "shard-00001.parquet", progress=False)
    assert sum(single.num_rows.values()) == 3


def test_hub_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="Shiyunee/HonestyBench.*pass that folder"):
        load_honestybench("Shiyunee/HonestyBench", progress=False)


def test_docstring_examples():
    for module in (schema_module, layout_module):
        result = doctest.testmod(module)
        assert result.attempted and not result.failed, module.__name__


def test_nan_free_training_columns(official_folder):
    bench = load_honestybench(official_folder, progress=False)
    assert not any(math.isnan(v) for v in bench["train"]["consistency"])


def test_load_records_reads_a_file_or_every_records_file_below_a_folder(tmp_path):
    from elical_hf.signals.records import load_records, record_files, record_format

    save_records([{"question": "top"}], tmp_path / "run" / "b.jsonl")
    save_records([{"question": "deep"}], tmp_path / "run" / "a" / "x.parquet")
    save_records([{"question": "hidden"}], tmp_path / "run" / ".cache" / "y.parquet")
    (tmp_path / "run" / "notes.txt").write_text("not records")
    # a folder's own files first, then its sub-folders (sorted); hidden files and folders are skipped
    found = [Path(p).relative_to(tmp_path / "run").as_posix() for p in record_files(tmp_path / "run")]
    assert found == ["b.jsonl", "a/x.parquet"]
    assert [r["question"] for r in load_records(tmp_path / "run")] == ["top", "deep"]
    assert [r["question"] for r in load_records(tmp_path / "run" / "b.jsonl")] == ["top"]
    assert record_format("x/Y.PARQUET") == "parquet" and record_format("y.jsonl") == "jsonl"
    with pytest.raises(ValueError, match="must end in .jsonl or .parquet"):
        load_records(tmp_path / "run" / "notes.txt")
    with pytest.raises(FileNotFoundError, match="No such file or folder"):
        load_records(tmp_path / "missing")


def test_load_honestybench_streams_into_memory_mapped_arrow(official_folder, tmp_path, monkeypatch):
    """Files are read a batch at a time into Arrow files that the splits map from disk; a second load of the same
    files reads those back without parsing a record."""
    from elical_hf.signals.records import reader

    reference = load_honestybench(official_folder, progress=False, cache_dir=tmp_path / "one")
    monkeypatch.setattr(reader, "RECORD_BATCH_SIZE", 2)  # every file spans several batches
    batched = load_honestybench(official_folder, progress=False, cache_dir=tmp_path / "two")
    assert batched.num_rows == reference.num_rows
    for name, split in batched.items():
        assert split.cache_files and all(f["filename"].startswith(str(tmp_path / "two")) for f in split.cache_files)
        assert split.to_list() == reference[name].to_list()  # same rows, same order, batch size aside

    def no_parsing(*args, **kwargs):
        raise AssertionError("the cached Arrow files should have been used")

    monkeypatch.setattr(reader, "iter_record_batches", no_parsing)
    again = load_honestybench(official_folder, progress=False, cache_dir=tmp_path / "two")
    assert again["train"].to_list() == reference["train"].to_list()
    write_jsonl(official_folder / MODELS[0] / "train" / "nq.jsonl", [official_record(i) for i in range(6)])
    with pytest.raises(AssertionError, match="cached Arrow files"):  # a changed file is read again
        load_honestybench(official_folder, progress=False, cache_dir=tmp_path / "two")
