"""Model cards: filled by the trainer's callback, written by `save_pretrained`, read back on load."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from datasets import Dataset
from huggingface_hub import ModelCard

from elical_hf import AutoModelForConfidence, ConfidenceTrainer, ConfidenceTrainingArguments
from elical_hf.training.callbacks import ConfidenceCardCallback
from elical_hf.models.model_card import GENERATED_MARKER, ConfidenceModelCardData, folder_card_text, get_card_data
from tests.test_trainer import make_rows


def train(model, tmp_path, stage: str, rows, eval_rows, **overrides):
    args = ConfidenceTrainingArguments(
        output_dir=str(tmp_path / stage), stage=stage, per_device_train_batch_size=4, num_train_epochs=1,
        learning_rate=1e-2, warmup_steps=0, seed=0, save_strategy="no", eval_strategy="epoch", use_cpu=True,
        disable_tqdm=True, report_to="none", **overrides,
    )
    named = {"dev": Dataset.from_list(eval_rows), "nq": Dataset.from_list(eval_rows)}
    trainer = ConfidenceTrainer(model, args=args, train_dataset=rows, eval_dataset=named)
    trainer.train()
    return trainer


def test_card_callback_groups_evaluation_metrics_by_set():
    metrics = {"eval_loss": 0.1, "eval_runtime": 1.0, "eval_nq_auroc": 0.7, "test_squad_ece": 0.2, "epoch": 1.0,
               "eval_samples_per_second": 3.0, "eval_dev_auroc": float("nan")}
    model = SimpleNamespace()  # anything that can carry card data
    ConfidenceCardCallback().on_evaluate(None, None, None, model=model, metrics=metrics)  # after training
    # `eval*` metrics come from the trainer's own dev sets: training history, never results of the card
    assert [(e.dataset, e.split, e.metrics) for e in get_card_data(model).evaluations] == [
        ("squad", "test", {"ece": 0.2})
    ]


def test_trainer_fills_the_card_across_both_stages(tiny_llama, tmp_path):
    rows, dev = make_rows(12, seed=0), make_rows(8, seed=1)
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    trainer = train(model, tmp_path, "elicitation", rows, dev)
    data = get_card_data(model)
    assert data.generated_from_trainer and "elical-hf" in data.tags
    assert [log["eval_set"] for log in data.training_logs] == ["eval_dev", "eval_nq"]
    trainer.evaluate(trainer.eval_dataset["nq"], metric_key_prefix="test_nq")  # after training: an evaluation result
    assert [(e.dataset, e.split) for e in data.evaluations] == [("nq", "test")]
    first = tmp_path / "stage1"
    model.save_pretrained(first)
    card = ModelCard.load(first / "README.md")
    assert GENERATED_MARKER in card.content and "[More Information Needed]" not in card.content  # not PEFT's card
    assert card.data.library_name == "elical-hf" and card.data.base_model == tiny_llama
    assert {r.metric_type for r in card.data.eval_results} >= {"auroc", "ece", "brier", "loss"}
    assert "| 1 | Elicitation" in card.text and "| 12 |" in card.text

    reloaded = AutoModelForConfidence.from_pretrained(first, is_trainable=True)
    assert [(e.dataset, e.split) for e in get_card_data(reloaded).evaluations] == [("nq", "test")]
    labelled = make_rows(8, seed=2)
    train(reloaded, tmp_path, "calibration", labelled, dev)
    history = reloaded.confidence_config.training_history
    assert [h["stage"] for h in history] == ["elicitation", "calibration"]
    assert history[-1]["epochs"] == 1.0 and history[-1]["learning_rate"] == 1e-2 and "dev_metrics" in history[-1]
    second = tmp_path / "stage2"
    reloaded.save_pretrained(second)
    card = ModelCard.load(second / "README.md")
    assert card.data.eval_results is None  # the stage-1 evaluation described another model
    assert "| 2 | Calibration" in card.text and "on 8 correctness-labelled questions" in card.text
    assert "reliability.png" not in card.text
    (second / "reliability.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (second / "README.md").write_text(folder_card_text(second, model_id="alice/honest-tiny"))  # re-rendered
    card = ModelCard.load(second / "README.md")
    assert "![Reliability diagram" in card.text and 'from_pretrained("alice/honest-tiny")' in card.text


def test_card_data_round_trip(tmp_path, tiny_llama):
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    data = get_card_data(model)
    data.license, data.datasets = "apache-2.0", ["Shiyunee/HonestyBench"]
    data.add_evaluation("nq", {"auroc": 0.81, "ece": 0.04, "alignment": 77.5, "threshold": "n/a"}, "in_domain_test",
                        dataset_id="Shiyunee/HonestyBench", dataset_config="Qwen2.5-7B-Instruct--nq")
    data.add_evaluation("squad", {"auroc": 0.7}, "ood_test")
    model.confidence_config.decision_threshold = 0.42
    model.save_pretrained(tmp_path / "m")
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.license == "apache-2.0" and card.data.datasets == ["Shiyunee/HonestyBench"]
    assert card.data.pipeline_tag == "text-classification" and "Decision threshold: 0.42" in card.text
    assert f"A **confidence model** for `{tiny_llama}`" in card.text  # a local base: no link to the Hub
    assert "| nq | in_domain_test | 0.8100 | 0.0400 | 77.50 |" in card.text
    restored = ConfidenceModelCardData.from_folder(tmp_path / "m")
    assert [(e.dataset, e.split, e.metrics) for e in restored.evaluations] == [
        ("nq", "in_domain_test", {"auroc": 0.81, "ece": 0.04, "alignment": 77.5}),
        ("squad", "ood_test", {"auroc": 0.7}),
    ]
    assert restored.evaluations[0].dataset_id == "Shiyunee/HonestyBench" and restored.license == "apache-2.0"
    with pytest.raises(ValueError, match="No numeric metric"):
        data.add_evaluation("nq", {"auroc": "high"})


def test_eval_results_are_the_model_index_with_display_names():
    data = ConfidenceModelCardData()
    data.add_evaluation("nq", {"auroc": 0.81, "loss": 0.2, "prr": 0.5}, "in_domain_test",
                        dataset_id="Shiyunee/HonestyBench")
    results = data.eval_results()
    assert [(r.dataset_type, r.dataset_name, r.dataset_split) for r in results] == [
        ("Shiyunee/HonestyBench", "nq", "in_domain_test")
    ] * 3
    assert [(r.metric_type, r.metric_name, r.metric_value) for r in results] == [
        ("auroc", "AUROC", 0.81), ("loss", "MSE", 0.2), ("prr", "prr", 0.5)
    ]


def test_sets_of_one_hub_dataset_stay_apart_in_the_model_index(tmp_path, tiny_llama):
    """The model-index tells results apart by dataset id, config and split, not by name: the datasets of one Hub
    dataset (`evaluate --update_model_cards` on HonestyBench) are given their name as the config, read back as none."""
    model = AutoModelForConfidence.from_pretrained(tiny_llama)
    data = get_card_data(model)
    for name, value in (("nq", 0.8), ("in-domain avg", 0.75), ("squad", 0.6)):
        data.add_evaluation(name, {"auroc": value}, dataset_id="Shiyunee/HonestyBench")
    data.add_evaluation("popqa", {"auroc": 0.5}, dataset_id="Shiyunee/HonestyBench", dataset_config="Qwen--popqa")
    model.save_pretrained(tmp_path / "m")
    index = ModelCard.load(tmp_path / "m" / "README.md").data.eval_results
    assert sorted((r.dataset_name, r.dataset_config, r.metric_value) for r in index) == [
        ("in-domain avg", "in-domain avg", 0.75), ("nq", "nq", 0.8), ("popqa", "Qwen--popqa", 0.5),
        ("squad", "squad", 0.6)]
    restored = ConfidenceModelCardData.from_folder(tmp_path / "m").evaluations
    assert [(e.dataset, e.dataset_id, e.dataset_config, e.metrics) for e in restored] == [
        (e.dataset, e.dataset_id, e.dataset_config, e.metrics) for e in data.evaluations]


def test_every_doc_the_cards_and_scripts_name_exists():
    """A card or script that sends readers to `docs/<name>.md` names a file that exists (the model card once linked
    a `docs/conversion.md` that never did)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sources = [*root.glob("model_cards/*.md"), *root.glob("elical_hf/**/*.py"), *root.glob("experiments/*.py"),
               *root.glob("benchmarks/*.py"), *root.glob("examples/*.py")]
    named = {(source.name, name) for source in sources
             for name in re.findall(r"docs/([\w/-]+\.md)", source.read_text(encoding="utf-8"))}
    assert named and [pair for pair in named if not (root / "docs" / pair[1]).is_file()] == []
