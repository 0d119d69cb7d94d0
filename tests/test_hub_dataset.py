"""The HonestyBench dataset repository: parquet layout + card configs, loaded back with `datasets.load_dataset`."""

from __future__ import annotations

import json

import datasets.config
import pytest
from datasets import load_dataset
from huggingface_hub import DatasetCard, snapshot_download

from elical_hf import push_honestybench, write_honestybench
from elical_hf.signals.records import normalize_record
from tests.hub_server import hub  # noqa: F401 - the fixture


def official_record(i: int) -> dict:
    """A record in the official (wrapped) HonestyBench shape."""
    return {
        "question": f"Question number {i}?",
        "answer": [f"answer {i}", f"alias {i}"],
        "greedy_response": [f"answer {i}"],
        "greedy_correctness": i % 2,
        "greedy_tokens": [["answer", f" {i}"]],
        "greedy_cumulative_logprobs": [-0.25 * i],
        "greedy_logprobs": [[-0.125 * i, -0.125 * i]],
        "sampling_response": [f"answer {i}", "something else"],
        "sampling_correctness": [1, 0],
        "consistency_judgement": [1, 0],
    }


def our_record(i: int, dataset: str) -> dict:
    """A record in our flat shape, with extras and judge names."""
    return {
        "id": f"{dataset}-{i}",
        "question": f"Our question {i} about {dataset}?",
        "answer": [f"gold {i}"],
        "greedy_response": f"gold {i}",
        "greedy_correctness": bool(i % 3),
        "greedy_tokens": ["gold", f" {i}"],
        "greedy_cumulative_logprobs": -0.5,
        "greedy_logprobs": [-0.25, -0.25],
        "sampling_response": ["gold", "other", "gold"],
        "sampling_correctness": [True, False, True],
        "consistency_judgement": [1.0, 0.0, 1.0],
        "consistency_lexical": [1.0, 0.0, 0.5],
        "correctness_judge": "has_answer",
        "consistency_judge": "Qwen/Qwen2.5-32B-Instruct",
        "model": "Org/Tiny-Chat",
        "dataset": dataset,
        "split": "test" if i % 2 else "train",
    }


@pytest.fixture
def records_folder(tmp_path):
    """Official-style files: one jsonl per (model, dataset, split)."""
    root = tmp_path / "records"
    layout = {"Qwen2.5-7B-Instruct/nq_train.jsonl": range(0, 6), "Qwen2.5-7B-Instruct/nq_test.jsonl": range(6, 9),
              "Qwen2.5-7B-Instruct/squad_dev.jsonl": range(9, 13)}
    for path, numbers in layout.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("".join(json.dumps(official_record(i)) + "\n" for i in numbers))
    return root


def rows_of(dataset) -> list[dict]:
    return sorted(dataset.to_list(), key=lambda row: row["question"])


def expected_rows(records: list[dict], features, **fields) -> list[dict]:
    rows = []
    for record in records:
        row = normalize_record(record)
        row.pop("split", None)
        rows.append({name: {**row, **fields}.get(name) for name in features})
    return sorted(rows, key=lambda row: row["question"])


def test_write_layout_card_and_load_locally(records_folder, tmp_path):
    out = tmp_path / "repo"
    parts = write_honestybench(records_folder, out)
    assert {p["path"] for p in parts} == {
        "data/Qwen2.5-7B-Instruct/nq/train.parquet",
        "data/Qwen2.5-7B-Instruct/nq/in_domain_test.parquet",
        "data/Qwen2.5-7B-Instruct/squad/ood_test.parquet",
    }
    card = DatasetCard.load(out / "README.md")
    configs = {c["config_name"]: c for c in card.data.configs}
    assert set(configs) == {"Qwen2.5-7B-Instruct--nq", "Qwen2.5-7B-Instruct--squad", "Qwen2.5-7B-Instruct", "default"}
    assert set(card.data.license) == {"cc-by-sa-3.0", "cc-by-sa-4.0"}  # NQ and SQuAD
    assert "greedy_cumulative_logprobs" in card.text and "CC BY-SA 3.0" in card.text

    cache = str(tmp_path / "datasets-cache")
    nq = load_dataset(str(out), "Qwen2.5-7B-Instruct--nq", cache_dir=cache)
    assert set(nq) == {"train", "in_domain_test"} and nq["train"].num_rows == 6
    originals = [official_record(i) for i in range(6)]
    expected = expected_rows(originals, nq["train"].features, model="Qwen2.5-7B-Instruct", dataset="nq",
                             source_split="train")
    assert rows_of(nq["train"]) == expected
    everything = load_dataset(str(out), "Qwen2.5-7B-Instruct", cache_dir=cache)
    assert {name: ds.num_rows for name, ds in everything.items()} == {"train": 6, "in_domain_test": 3, "ood_test": 4}


def test_every_declared_config_loads_with_plain_datasets(tmp_path):
    """What `push --kind honestybench` uploads, written locally: every config of its card, and every split of each,
    loads with `datasets.load_dataset(folder, config, split=...)` alone and holds exactly the records it names."""
    records = [dict(our_record(i, dataset), model=model) for model in ("Org/Tiny-Chat", "Other/Small")
               for dataset in ("hotpotqa", "popqa", "nq") for i in range(4 if model == "Other/Small" else 6)]
    records = [r for r in records if not (r["model"] == "Other/Small" and r["dataset"] == "nq")]
    out = tmp_path / "repo"
    parts = write_honestybench(records, out)
    card = DatasetCard.load(out / "README.md")
    declared = {c["config_name"]: {f["split"] for f in c["data_files"]} for c in card.data.configs}
    assert set(declared) == {"default", "Org--Tiny-Chat", "Other--Small", *(f"Org--Tiny-Chat--{d}" for d in (
        "hotpotqa", "popqa", "nq")), "Other--Small--hotpotqa", "Other--Small--popqa"}
    assert card.data.configs[0]["config_name"] == "default"
    sizes = {c["config_name"]: {s["name"]: s["num_examples"] for s in c["splits"]} for c in card.data.dataset_info}

    def expected(config: str, split: str) -> list[tuple[str, str]]:
        """(model, dataset) of every record the config's split should hold, from what was written."""
        chosen = [p for p in parts  # (`model`: its config's name, `Org--Tiny-Chat` for `Org/Tiny-Chat`)
                  if p["split"] == split and config in ("default", p["model"], f"{p['model']}--{p['dataset']}")]
        return sorted((p["model"], p["dataset"]) for p in chosen for _ in range(p["num_examples"]))

    cache = str(tmp_path / "cache")
    for config, splits in declared.items():
        for split in splits:
            loaded = load_dataset(str(out), config, split=split, cache_dir=cache)
            held = sorted((model.replace("/", "--"), dataset) for model, dataset in zip(loaded["model"],
                                                                                         loaded["dataset"]))
            assert held == expected(config, split), (config, split)
            assert sizes[config][split] == loaded.num_rows
    everything = load_dataset(str(out), split="in_domain_test", cache_dir=cache)  # no config name: `default`
    assert everything.num_rows == sum(p["num_examples"] for p in parts if p["split"] == "in_domain_test") == 8
    assert 'load_dataset("<this repository>", "Org--Tiny-Chat--hotpotqa")' in card.text


def test_push_and_load_from_the_hub_snapshot(hub, tmp_path, monkeypatch):
    records = [our_record(i, dataset) for dataset in ("hotpotqa", "popqa") for i in range(4)]
    info = push_honestybench(records, "alice/honestybench")
    assert info.oid == hub.history("alice/honestybench", repo_type="dataset")[0].oid
    folder = snapshot_download("alice/honestybench", repo_type="dataset")
    card = DatasetCard.load(f"{folder}/README.md")
    assert "`has_answer`: string matching" in card.text and "LLM judge" in card.text
    assert set(card.data.license) == {"cc-by-sa-4.0", "mit"}
    hotpot = load_dataset(folder, "Org--Tiny-Chat--hotpotqa", cache_dir=str(tmp_path / "cache"))
    originals = [r for r in records if r["dataset"] == "hotpotqa"]
    assert {name: ds.num_rows for name, ds in hotpot.items()} == {"train": 2, "in_domain_test": 2}
    loaded = rows_of(hotpot["train"]) + rows_of(hotpot["in_domain_test"])
    expected = [
        {name: {**normalize_record({k: v for k, v in r.items() if k != "split"}), "source_split": r["split"]}.get(name)
         for name in hotpot["train"].features}
        for r in originals
    ]
    assert sorted(loaded, key=lambda row: row["id"]) == sorted(expected, key=lambda row: row["id"])
    popqa = load_dataset(folder, "Org--Tiny-Chat--popqa", cache_dir=str(tmp_path / "cache"))
    # An OOD dataset's *train* records are not part of the paper's splits: they go to `other`.
    assert {name: ds.num_rows for name, ds in popqa.items()} == {"ood_test": 2, "other": 2}

    # By repo id, through the Hub client (datasets reads its endpoint and offline switch at import time).
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", hub.url)
    monkeypatch.setattr(datasets.config, "HUB_DATASETS_URL", hub.url + "/datasets/{repo_id}/resolve/{revision}/{path}")
    remote = load_dataset("alice/honestybench", "Org--Tiny-Chat", cache_dir=str(tmp_path / "remote-cache"))
    assert {name: ds.num_rows for name, ds in remote.items()} == {"train": 2, "in_domain_test": 2, "ood_test": 2,
                                                                  "other": 2}
    assert rows_of(remote["in_domain_test"]) == rows_of(hotpot["in_domain_test"])


def test_bad_dataset_inputs(hub, tmp_path):
    with pytest.raises(ValueError, match="Invalid Hub repo id"):
        push_honestybench([our_record(0, "nq")], "no namespace here")
    with pytest.raises(ValueError, match="no `model` or `dataset`"):
        write_honestybench([{"question": "q?", "answer": ["a"]}], tmp_path / "out")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        write_honestybench([our_record(0, "nq")], tmp_path / "full")
    assert hub.repos == {}
