"""The layer-feature cache (`elical_hf.training.layer_cache`), the pre-generation probes (`elical_hf.evaluation.probes`), and the
commands and steps that use them: `elical-hf probe-layers`, `evaluate --probes`."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from elical_hf import AutoModelForConfidence
from elical_hf.training import layer_cache as cache_module
from elical_hf.cli import main as cli_main
from elical_hf.data.encoding import encode_prompts
from elical_hf.training.layer_cache import cache_layer_features, resolve_layers
from elical_hf.metrics import auroc
from elical_hf.evaluation.probes import (
    best_split, fit_logistic, fit_probe, mean_difference, semantic_entropy, sep_targets, train_probe,
)
from elical_hf.training.recipe import take_labels
from elical_hf.signals.records import save_records


WORDS = ("paris france london england berlin germany rome italy madrid spain tokyo japan hamlet dickens king queen "
         "river mountain war world film song team gold red blue green").split()


def questions(n: int) -> list[str]:
    """`n` different questions of different lengths over the tiny tokenizer's words."""
    return [f"what is the {' '.join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 4))} {WORDS[i % len(WORDS)]}?"
            for i in range(n)]


def make_records(model: str, n: int = 24, split: str = "train", start: int = 0) -> list[dict]:
    """Judged records of `model`: greedy correctness alternating, three samples whose agreement with the greedy answer
    (and so their semantic entropy) varies."""
    verdicts = ([1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0])
    rows = []
    for i, question in enumerate(questions(start + n)[start:], start):
        rows.append({
            "id": f"nq-{split}-{i}", "dataset": "nq", "split": split, "model": model, "question": question,
            "answer": ["paris"], "greedy_response": "paris", "greedy_correctness": i % 2 == 0,
            "sampling_response": ["paris", WORDS[i % 7], WORDS[(i + 3) % 5]],
            "sampling_correctness": [True, False, i % 3 == 0], "consistency_judgement": verdicts[i % 4],
        })
    return rows


@pytest.fixture
def base_model(tiny_llama):
    """The frozen base model's features (loaded per test, under the test's precision mark)."""
    return AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False)


def direct_states(model, texts: list[str], layer: int) -> np.ndarray:
    """`hidden_states[layer]` of the last prompt token, one question per full forward pass of the backbone."""
    inner = model.get_base_model()
    rows = []
    with torch.no_grad():
        for ids in encode_prompts(texts, inner.tokenizer, inner.confidence_config):
            output = inner.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
            rows.append(output.hidden_states[layer][0, -1].float().numpy())
    return np.stack(rows)


# -- the cache --------------------------------------------------------------------------------------------------------

@pytest.mark.float32
def test_the_cache_holds_what_output_hidden_states_gives(base_model, tmp_path):
    texts = questions(7)
    features = cache_layer_features(base_model, texts, tmp_path, batch_size=3, progress=False)
    assert features.layers == [1, 2] and features.num_questions == 7
    for layer in (1, 2):
        cached = features[layer]
        assert cached.dtype == np.float16 and cached.shape == (7, base_model.config.hidden_size)
        np.testing.assert_allclose(cached, direct_states(base_model, texts, layer), rtol=2e-3, atol=2e-3)
    # the final layer is what the head reads; a middle one what a model with that feature layer reads
    np.testing.assert_allclose(features[2], base_model.prompt_features(texts).numpy(), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(features[1], base_model.prompt_features(texts, layer=1).numpy(), rtol=2e-3, atol=2e-3)


@pytest.mark.float32
def test_a_second_run_reuses_the_cache_and_computes_only_missing_layers(base_model, tiny_llama, tmp_path,
                                                                         monkeypatch):
    texts = questions(5)
    first = cache_layer_features(base_model, texts, tmp_path, layers=[-1], progress=False)
    computed: list[list[int]] = []
    real = cache_module._last_token_states

    def counted(inner, sequences, layers):
        computed.append(list(layers))
        return real(inner, sequences, layers)

    monkeypatch.setattr(cache_module, "_last_token_states", counted)
    again = cache_layer_features(base_model, texts, tmp_path, layers=[1, 2], progress=False)
    assert again.folder == first.folder and computed and all(layers == [1] for layers in computed)
    np.testing.assert_array_equal(again[2], first[2])  # read back from the memory map, not recomputed
    np.testing.assert_allclose(again[2], direct_states(base_model, texts, 2), rtol=2e-3, atol=2e-3)
    computed.clear()
    cache_layer_features(base_model, texts, tmp_path, layers=[1, 2], progress=False)
    assert computed == []
    reloaded = AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False)  # a later run's own load
    assert cache_layer_features(reloaded, texts, tmp_path, layers=[2], progress=False).folder == first.folder
    assert computed == []
    other = cache_layer_features(base_model, texts[:4], tmp_path, layers=[2], progress=False)
    assert other.folder != first.folder  # other prompts: another fingerprint


def test_an_interrupted_run_leaves_no_layer_file(base_model, tmp_path, monkeypatch):
    real, calls = cache_module._last_token_states, []

    def fail_second(inner, sequences, layers):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("interrupted")
        return real(inner, sequences, layers)

    monkeypatch.setattr(cache_module, "_last_token_states", fail_second)
    with pytest.raises(RuntimeError, match="interrupted"):
        cache_layer_features(base_model, questions(6), tmp_path, batch_size=2, progress=False)
    leftovers = [name for _, _, names in os.walk(tmp_path) for name in names if name.endswith((".npy", ".partial"))]
    assert leftovers == []


def test_layers_are_resolved_and_a_bad_one_is_one_line():
    assert resolve_layers(None, 3) == [1, 2, 3]
    assert resolve_layers([-1, 1, 3], 3) == [1, 3]
    with pytest.raises(ValueError, match=r"^--layers: `feature_layer` 4 is out of range .* use 1 to 3") as error:
        resolve_layers([4], 3)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="`feature_layer` 0 is out of range"):  # the embedding: no layer
        resolve_layers(0, 3)
    with pytest.raises(ValueError, match="a layer is an integer"):
        resolve_layers(["2"], 3)


# -- the probes -------------------------------------------------------------------------------------------------------

def test_fit_logistic_is_scikit_learns_logistic_regression():
    linear_model = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 5))
    y = (x @ np.array([1.0, -2.0, 0.5, 0.0, 0.0]) + rng.normal(size=80) > 0).astype(float)
    weight, bias = fit_logistic(x, y, l2=1.0)
    reference = linear_model.LogisticRegression(C=1.0, tol=1e-10, max_iter=10_000).fit(x, y)
    np.testing.assert_allclose(weight, reference.coef_[0], atol=2e-3)
    assert bias == pytest.approx(reference.intercept_[0], abs=2e-3)


def test_difference_of_means_by_hand():
    x = np.array([[1.0, 3.0], [3.0, 3.0], [1.0, 1.0], [3.0, 1.0]])  # mean (2, 2), standard deviation (1, 1)
    y = [1, 1, 0, 0]
    z = np.array([[-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]])
    np.testing.assert_array_equal(mean_difference(z, y), [0.0, 2.0])
    probe = fit_probe("dim", x, y)
    np.testing.assert_allclose(probe.mean, [2, 2]) and np.testing.assert_allclose(probe.scale, [1, 1])
    assert probe.weight[0] == 0 and probe.weight[1] > 0  # the direction, scaled by the 1-d logistic fit
    assert probe.bias == pytest.approx(0, abs=1e-4)  # the projections (2, 2, -2, -2) are symmetric
    confidence = probe.confidence(x)
    assert confidence[0] == confidence[1] > 0.5 > confidence[2] == confidence[3]
    with pytest.raises(ValueError, match="correct and wrong"):
        mean_difference(z, [1, 1, 1, 1])


def test_difference_of_means_is_the_raw_activations_direction():
    """"No Answer Needed" takes the difference of the classes' mean raw activations. On standardised features the
    direction is another one (each coordinate divided by its variance), which the probe must not take."""
    rng = np.random.default_rng(4)
    y = np.repeat([1, 0], 400)
    x = rng.normal(size=(800, 2)) * [10.0, 1.0]  # the first coordinate has 10x the spread
    x[y == 1] += [20.0, 1.0]
    probe = fit_probe("dim", x, y)
    raw = mean_difference(x, y)
    in_raw_coordinates = probe.weight / probe.scale  # w . (x - mean) / scale = (w / scale) . (x - mean)

    def cosine(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    assert cosine(in_raw_coordinates, raw) == pytest.approx(1.0, abs=1e-6)
    standardised = mean_difference((x - x.mean(axis=0)) / x.std(axis=0), y) / x.std(axis=0)
    assert cosine(standardised, raw) < 0.5  # what the probe used to take: another direction
    assert np.corrcoef(probe.logits(x), x @ raw)[0, 1] == pytest.approx(1.0, abs=1e-6)  # it ranks by the projection


def test_difference_of_means_separates_a_separable_set():
    rng = np.random.default_rng(1)
    direction = rng.normal(size=20)
    direction /= np.linalg.norm(direction)
    y = rng.integers(0, 2, size=400)
    x = rng.normal(size=(400, 20)) + 10 * y[:, None] * direction
    probe = fit_probe("dim", x[:200], y[:200])
    assert auroc(probe.confidence(x[200:]), y[200:]) == 1.0


def test_one_class_gives_a_constant_probe_and_bad_targets_are_refused(caplog):
    x = np.random.default_rng(3).normal(size=(6, 3))
    with caplog.at_level("WARNING", logger="elical_hf.evaluation.probes"):
        probe = fit_probe("dim", x, [0, 0, 0, 0, 0, 0])
    assert "all 0.0: it can only learn a constant" in caplog.text
    np.testing.assert_allclose(probe.confidence(x), 1e-4, rtol=1e-6)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_probe("pik", x, [0, 1, 2, 0, 1, 0])
    with pytest.raises(ValueError, match="do not match"):
        fit_probe("pik", x, [0, 1])


def test_the_sep_probe_is_the_other_side_of_a_logistic_probe_of_high_entropy():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 4))
    high = (x[:, 0] + 0.5 * rng.normal(size=60) > 0).astype(float)
    np.testing.assert_allclose(fit_probe("sep", x, high).confidence(x),
                               1 - fit_probe("logistic", x, high).confidence(x), atol=1e-6)


def test_semantic_entropy_by_hand():
    two_two = {"consistency_judgement": [1, 1, 0, 0], "sampling_response": ["Paris", "paris.", "London", "the London"]}
    assert semantic_entropy(two_two) == pytest.approx(math.log(2))  # {greedy: 2, "london": 2}
    three = {"consistency_judgement": [1, 0, 0, None], "sampling_response": ["a", "Rome", "Berlin", "x"]}
    assert semantic_entropy(three) == pytest.approx(math.log(3))  # the unjudged sample is left out
    assert semantic_entropy({"consistency_judgement": [1, 1], "sampling_response": ["x", "y"]}) == 0.0
    assert semantic_entropy({"consistency_judgement": [0, 0]}) == pytest.approx(math.log(2))  # no texts: apart
    assert semantic_entropy({"consistency_judgement": [None]}) is None


def test_sep_targets_split_where_the_squared_error_is_least():
    agree = {"consistency_judgement": [1, 1, 1], "sampling_response": ["a", "a", "a"]}
    records = [agree, agree, {"consistency_judgement": [1, 0], "sampling_response": ["a", "b"]},
               {"consistency_judgement": [1, 0, 0], "sampling_response": ["a", "b", "c"]},
               {"consistency_judgement": [0, 0, 0], "sampling_response": ["b", "c", "d"]}, {"question": "unjudged"}]
    rows, targets, threshold = sep_targets(records)  # entropies 0, 0, ln 2, ln 3, ln 3
    assert rows.tolist() == [0, 1, 2, 3, 4]
    # splitting {0, 0} from {ln 2, ln 3, ln 3} leaves 0.110 of squared error, {0, 0, ln 2} from {ln 3, ln 3} 0.320
    assert threshold == pytest.approx(math.log(2) / 2) and targets.tolist() == [0, 0, 1, 1, 1]
    assert best_split([0.0, 1.0, 5.0, 6.0]) == 3.0
    with pytest.raises(ValueError, match="All 2 semantic entropies are equal"):
        best_split([0.5, 0.5])
    with pytest.raises(ValueError, match="--consistency embedding"):
        sep_targets([{"question": "q"}])
    rows, targets, threshold = sep_targets([records[2], records[2]])  # nothing to split: one class, no error
    assert targets.tolist() == [0, 0] and threshold == pytest.approx(math.log(2))


def test_train_probe_refuses_records_without_labels():
    with pytest.raises(ValueError, match="2 of its 2 records lack: run `elical-hf judge --correctness"):
        train_probe("pik", [{"question": "a"}, {"question": "b"}], np.zeros((2, 3)))


# -- probe-layers -----------------------------------------------------------------------------------------------------

@pytest.mark.float32
def test_probe_layers_prints_plots_and_recommends_a_layer(tiny_llama, tmp_path, capsys):
    records = save_records(make_records(tiny_llama), tmp_path / "records.jsonl")
    out = tmp_path / "layers"
    argv = ["probe-layers", tiny_llama, "--records", records, "--folds", "3", "--bootstrap", "50", "--output", str(out)]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "probe_layers.json").read_text())
    assert report["layers"] == [1, 2] and report["targets"] == ["correctness", "consistency"]
    best = max(report["curves"]["correctness"], key=lambda cell: (cell["auroc"], -cell["layer"]))
    assert report["recommended_layer"] == best["layer"] and report["final_layer"] == 2
    assert f"Recommended layer: {best['layer']}" in printed and "| 2 (" in printed
    for cell in report["curves"]["consistency"] + report["curves"]["correctness"]:
        assert 0 <= cell["auroc"] <= 100 and cell["auroc_ci"][0] <= cell["auroc_ci"][1]
    # every layer against the final one, paired: the final layer's own difference is 0 on every resample
    final = report["curves"]["correctness"][-1]
    assert final["minus_final"] == {"auroc": 0.0, "auroc_ci": [0.0, 0.0]}
    first = report["curves"]["correctness"][0]
    assert first["minus_final"]["auroc"] == pytest.approx(first["auroc"] - final["auroc"])
    low, high = first["minus_final"]["auroc_ci"]
    assert low <= high and (low, high) != (0.0, 0.0)
    assert report["recommended_minus_final"] == best["minus_final"]
    assert (out / "auroc_vs_layer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cached = [name for _, _, names in os.walk(out / "features") for name in names if name.endswith(".npy")]
    assert sorted(cached) == ["layer-001.npy", "layer-002.npy"]
    # the curve is what the probes give: a 3-fold logistic probe on the final layer, by hand
    from elical_hf.evaluation.probes import _folds

    correct = np.array([r["greedy_correctness"] for r in make_records(tiny_llama)], dtype=int)
    x = direct_states(AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False), questions(24), 2)
    fold, scores = _folds(correct, 3, 0), np.empty(24)
    for k in range(3):
        scores[fold == k] = fit_probe("logistic", x[fold != k], correct[fold != k]).confidence(x[fold == k])
    assert report["curves"]["correctness"][1]["auroc"] == pytest.approx(100 * auroc(scores, correct), abs=3)


@pytest.mark.parametrize("case", ["unjudged", "layer", "output"])
def test_probe_layers_refuses_bad_input_in_one_line(case, tiny_llama, tmp_path, capsys):
    rows = make_records(tiny_llama)
    if case == "unjudged":
        rows = [{**r, "greedy_correctness": None} for r in rows]
    records = save_records(rows, tmp_path / "records.jsonl")
    out = tmp_path / "out"
    argv = ["probe-layers", tiny_llama, "--records", records, "--output", str(out), "--folds", "2"]
    argv += {"unjudged": [], "layer": ["--layers", "1", "5"], "output": []}[case]
    if case == "output":
        argv[argv.index("--output") + 1] = records
    assert cli_main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    error = [line for line in lines if line.startswith("elical-hf")]  # (after the weights' loading bar)
    expected = {"unjudged": "has a judged greedy answer", "layer": "--layers: `feature_layer` 5 is out of range",
                "output": "is the --records input itself"}[case]
    assert error == lines[-1:] and error[0].startswith("elical-hf probe-layers: error: ") and expected in error[0]
    assert not out.exists()


# -- the probes as methods of evaluate --------------------------------------------------------------------------------

@pytest.mark.float32
def test_evaluate_trains_and_reports_the_probes(tiny_llama, tmp_path):
    train = make_records(tiny_llama, 24)
    test = make_records(tiny_llama, 12, split="test", start=24)
    records = save_records(train + test, tmp_path / "records.jsonl")
    out = tmp_path / "report"
    argv = ["evaluate", "--records", records, "--output_dir", str(out), "--baselines", "consis_sem", "--probes", "sep",
            "dim", "pik", "--probe_model", tiny_llama, "--probe_layer", "1", "--num_labels", "10"]
    assert cli_main(argv) == 0
    table = json.loads((out / "results.json").read_text())
    assert {"Consis-Sem", "SEP-L1", "DiM-L1@10", "P(IK)-L1@10"} == set(table)
    assert table["P(IK)-L1@10"]["in-domain avg"]["n"] == 12
    # P(IK) is the logistic probe on the drawn labels' features, as the model's own layer-1 features give them
    from elical_hf import steps

    evaluation = steps.evaluate(steps.EvaluateArguments(records=records, baselines="", probes=["pik"],
                                                        probe_model=tiny_llama, probe_layer=1, num_labels=10))
    model = AutoModelForConfidence.from_pretrained(tiny_llama, use_lora=False)
    judged = [{"row": i, "greedy_correctness": r["greedy_correctness"]} for i, r in enumerate(train)]
    labels = [train[i] for i in take_labels(judged, 10, 42)["row"]]
    probe = fit_probe("pik", model.prompt_features([r["question"] for r in labels], layer=1).numpy(),
                      [float(r["greedy_correctness"]) for r in labels])
    expected = probe.confidence(model.prompt_features([r["question"] for r in test], layer=1).numpy())
    np.testing.assert_allclose(evaluation.confidences["P(IK)-L1@10"], expected, atol=2e-2)


def test_evaluate_probes_need_their_model_in_one_line(tiny_llama, tmp_path, capsys):
    records = save_records(make_records(tiny_llama, 6, split="test"), tmp_path / "records.jsonl")
    argv = ["evaluate", "--records", records, "--output_dir", str(tmp_path / "out"), "--probes", "sep"]
    assert cli_main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["elical-hf evaluate: error: --probes and --probe_model go together: the probes read "
                     "--probe_model's features."]
    assert cli_main([*argv, "--probe_model", tiny_llama, "--probes", "sep", "nonsense"]) == 2
    assert "unknown probe(s) ['nonsense']" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_layer_plot_draws_each_target_and_refuses_a_bad_layer():
    from elical_hf.evaluation.plots import auroc_vs_layer_plot

    figure = auroc_vs_layer_plot({"correctness": {1: (0.6, 0.5, 0.7), 2: 0.65}, "consistency": {1: 0.55, 2: 0.58}},
                                 None, recommended=2)
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert list(lines["correctness"].get_ydata()) == pytest.approx([60, 65]) and "Recommended layer (2)" in lines
    with pytest.raises(ValueError, match="layers must be integers"):
        auroc_vs_layer_plot({"correctness": {"1": 0.6}}, None)
