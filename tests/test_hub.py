"""Publishing and loading confidence models through the loopback Hub stand-in (the real `huggingface_hub` client)."""

from __future__ import annotations

import json
import logging
import shutil
import sys

import pytest
import torch
from huggingface_hub import HfApi, ModelCard, snapshot_download

from elical_hf import AutoModelForConfidence, HubPublishError, push_folder
from elical_hf.cli import main as cli_main
from tests.conftest import save_tiny_base
from tests.hub_server import go_offline, hub  # noqa: F401 - the fixture


QUESTIONS = ["Who wrote Hamlet?", "What is the capital of France?", "When was the king of Spain born?"]


@pytest.fixture
def embedded_tiny(tmp_path, monkeypatch, tiny_llama):
    """`tiny/embedded`, made an embedded default model: on neither the Hub nor its cache, only as the dequantized
    offline copy (a folder with elical-hf's completion marker) that `convert_embedded` returns."""
    from elical_hf.models import default_model as embedded

    entry = embedded.EmbeddedModel(package="tiny_gguf", gguf_file="tiny.Q4_1.gguf", install_hint="pip install x")
    copy = tmp_path / "elical-cache" / "models" / "tiny--embedded--tiny.Q4_1"
    shutil.copytree(tiny_llama, copy)
    (copy / embedded.COMPLETE_MARKER).write_text("tiny_gguf/tiny.Q4_1.gguf\n")
    monkeypatch.setitem(embedded.EMBEDDED_MODELS, "tiny/embedded", entry)
    monkeypatch.setattr(embedded, "convert_embedded", lambda name: copy)
    return copy


def upload_base(tmp_path, repo_id: str = "tiny/llama", arch: str = "llama") -> str:
    """A tiny base model, saved locally and published on the stand-in (as a real base model would be)."""
    folder = save_tiny_base(tmp_path / repo_id.replace("/", "--"), arch)
    HfApi().create_repo(repo_id)
    HfApi().upload_folder(folder_path=folder, repo_id=repo_id)
    return folder


def random_model(name: str, seed: int = 0, threshold: float | None = None, **kwargs):
    """A confidence model with non-trivial LoRA and head weights (fresh LoRA B is zero); `kwargs` go to
    `from_pretrained`."""
    model = AutoModelForConfidence.from_pretrained(name, **kwargs)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    model.confidence_config.decision_threshold = threshold
    return model


def max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_push_download_revision_and_offline_round_trip(hub, tmp_path, monkeypatch):
    upload_base(tmp_path)
    model = random_model("tiny/llama", threshold=0.5)
    expected = model.confidence(QUESTIONS)

    info = model.push_to_hub("alice/honest-tiny", commit_message="first version")
    assert info.oid == hub.history("alice/honest-tiny")[0].oid
    files = hub.files("alice/honest-tiny")
    assert {"adapter_model.safetensors", "adapter_config.json", "confidence_config.json", "tokenizer.json",
            "tokenizer_config.json", "README.md"} <= set(files)
    assert json.loads(files["adapter_config.json"])["base_model_name_or_path"] == "tiny/llama"
    card = ModelCard(files["README.md"].decode())
    assert card.data.library_name == "elical-hf" and card.data.base_model == "tiny/llama"
    assert {"elical-hf", "confidence-estimation", "honesty", "lora"} <= set(card.data.tags)
    assert 'from_pretrained("alice/honest-tiny")' in card.text and "Decision threshold: 0.5" in card.text
    assert "[`tiny/llama`](https://huggingface.co/tiny/llama)" in card.text

    second = random_model("tiny/llama", seed=1)
    second.push_to_hub("alice/honest-tiny", revision="v1")  # a new branch; main keeps the first version
    loaded = AutoModelForConfidence.from_pretrained("alice/honest-tiny")
    assert max_diff(loaded.confidence(QUESTIONS), expected) < 1e-6
    assert loaded.confidence_config.decision_threshold == 0.5
    on_branch = AutoModelForConfidence.from_pretrained("alice/honest-tiny", revision="v1")
    assert max_diff(on_branch.confidence(QUESTIONS), second.confidence(QUESTIONS)) < 1e-6

    go_offline(monkeypatch)  # HF_HUB_OFFLINE=1: everything comes from the Hub cache
    hub.stop()
    cached = AutoModelForConfidence.from_pretrained("alice/honest-tiny")
    assert max_diff(cached.confidence(QUESTIONS), expected) < 1e-6


def test_refused_inputs_publish_nothing(hub, tmp_path, tiny_llama):
    local = AutoModelForConfidence.from_pretrained(tiny_llama)  # base known only as a local path
    for bad in ["not a repo id", "a/b/c", "alice/", "/alice/x"]:
        with pytest.raises(ValueError, match="Invalid Hub repo id"):
            local.push_to_hub(bad)
    with pytest.raises(ValueError, match="local path, not a Hub id.*base_model_name_or_path="):
        local.push_to_hub("alice/local-base")
    with pytest.raises(ValueError, match="local path, not a Hub id"):
        local.push_to_hub("alice/local-base", base_model_name_or_path=tiny_llama)
    folder = tmp_path / "saved"
    local.save_pretrained(folder)
    (folder / "confidence_config.json").unlink()  # an interrupted save
    with pytest.raises(ValueError, match="no confidence_config.json"):
        push_folder(folder, "alice/partial", base_model_name_or_path="tiny/llama")
    assert hub.repos == {}

    upload_base(tmp_path)  # the base named below is a model of the Hub (push checks it)
    folder = tmp_path / "complete"
    local.save_pretrained(folder)
    (folder / "training_args.bin").write_bytes(b"pickle")  # never published
    push_folder(folder, "alice/with-hub-base", base_model_name_or_path="tiny/llama")
    files = hub.files("alice/with-hub-base")
    assert "training_args.bin" not in files
    for name in ("adapter_config.json", "confidence_config.json"):
        assert json.loads(files[name])["base_model_name_or_path"] == "tiny/llama"
    assert ModelCard(files["README.md"].decode()).data.base_model == "tiny/llama"

    readme = folder / "README.md"  # a card of the user's own (no "generated" marker): text kept, metadata fixed
    readme.write_text("\n".join(l for l in readme.read_text().splitlines() if "elical-hf: generated" not in l))
    readme.write_text(readme.read_text() + "\nMy own words.\n")
    push_folder(folder, "alice/own-card", base_model_name_or_path="tiny/llama")
    card = ModelCard(hub.files("alice/own-card")["README.md"].decode())
    assert card.data.base_model == "tiny/llama" and "My own words." in card.text


def test_network_failure_mid_upload(hub, tmp_path, caplog):
    upload_base(tmp_path)
    model = random_model("tiny/llama")
    model.push_to_hub("alice/flaky")
    before = [c.oid for c in hub.history("alice/flaky")]
    hub.fail_next_commits(1)
    model.confidence_config.decision_threshold = 0.7
    with caplog.at_level(logging.INFO, logger="elical_hf.publishing.hub"), \
            pytest.raises(HubPublishError, match="single commit"):
        model.push_to_hub("alice/flaky")
    assert [c.oid for c in hub.history("alice/flaky")] == before  # nothing committed
    assert "Published" not in caplog.text  # nothing claimed
    model.push_to_hub("alice/flaky")  # the retry goes through
    assert json.loads(hub.files("alice/flaky")["confidence_config.json"])["decision_threshold"] == 0.7


def test_downloaded_adapter_with_another_base_is_refused(hub, tmp_path, tiny_qwen2):
    upload_base(tmp_path)
    twin = upload_base(tmp_path, "tiny/llama-twin")  # another Hub model of the very same architecture
    model = random_model("tiny/llama")
    model.push_to_hub("alice/for-llama")
    with pytest.raises(ValueError, match="was trained on 'tiny/llama'"):
        AutoModelForConfidence.from_pretrained("alice/for-llama", base_model_name_or_path=tiny_qwen2)
    with pytest.raises(ValueError, match="trained on 'tiny/llama', but its base model was asked to be 'tiny/llama-tw"):
        AutoModelForConfidence.from_pretrained("alice/for-llama", base_model_name_or_path="tiny/llama-twin")
    with pytest.raises(ValueError, match="asked to be 'tiny/llama-twin'"):  # its Hub cache snapshot, likewise
        AutoModelForConfidence.from_pretrained("alice/for-llama", base_model_name_or_path=snapshot_download(
            "tiny/llama-twin"))
    # The same Hub id, or a local folder (a copy of the base, made elsewhere), is accepted.
    for base in ("tiny/llama", twin):
        loaded = AutoModelForConfidence.from_pretrained("alice/for-llama", base_model_name_or_path=base)
        assert max_diff(loaded.confidence(QUESTIONS), model.confidence(QUESTIONS)) < 1e-6


def test_local_copies_are_published_under_their_hub_id(hub, tmp_path, embedded_tiny):
    model = random_model("tiny/embedded")  # neither on the Hub nor in its cache: the offline copy is loaded
    source = model.confidence_config.base_weights_source
    assert source == "gguf:tiny_gguf/tiny.Q4_1.gguf (dequantized)"
    from_copy = random_model(str(embedded_tiny))  # the dequantized folder itself, by path
    assert from_copy.confidence_config.base_model_name_or_path == "tiny/embedded"
    assert from_copy.confidence_config.base_weights_source == source
    for repo_id, pushed in (("alice/embedded", model), ("alice/from-copy", from_copy)):
        pushed.push_to_hub(repo_id)
        files = hub.files(repo_id)
        for name in ("adapter_config.json", "confidence_config.json"):
            assert json.loads(files[name])["base_model_name_or_path"] == "tiny/embedded"
        assert ModelCard(files["README.md"].decode()).data.base_model == "tiny/embedded"
    loaded = AutoModelForConfidence.from_pretrained("alice/from-copy")
    assert max_diff(loaded.confidence(QUESTIONS), from_copy.confidence(QUESTIONS)) < 1e-6

    upload_base(tmp_path)
    snapshot = snapshot_download("tiny/llama")  # a Hub cache snapshot, by path
    folder = tmp_path / "from-snapshot"
    random_model(snapshot).save_pretrained(folder)
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny/llama"
    for name in ("adapter_config.json", "confidence_config.json"):  # as an older save recorded it: the path
        config = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**config, "base_model_name_or_path": snapshot}))
    push_folder(folder, "alice/from-snapshot")
    published = json.loads(hub.files("alice/from-snapshot")["adapter_config.json"])
    assert published["base_model_name_or_path"] == "tiny/llama"


def test_no_code_runs_from_the_repo(hub, tmp_path):
    upload_base(tmp_path)
    random_model("tiny/llama").push_to_hub("mallory/model")
    api = HfApi()
    adapter = json.loads(hub.files("mallory/model")["adapter_config.json"])
    adapter["auto_mapping"] = {"base_model_class": "Evil", "parent_library": "evil_module_from_the_repo"}
    api.upload_file(path_or_fileobj=json.dumps(adapter).encode(), path_in_repo="adapter_config.json",
                    repo_id="mallory/model")
    api.upload_file(path_or_fileobj=b"raise SystemExit('executed')\n", path_in_repo="evil_module_from_the_repo.py",
                    repo_id="mallory/model")
    AutoModelForConfidence.from_pretrained("mallory/model").confidence(QUESTIONS[:1])
    assert "evil_module_from_the_repo" not in sys.modules


def test_cli_push(hub, tmp_path, tiny_llama, capsys):
    upload_base(tmp_path)
    folder = tmp_path / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    assert cli_main(["push", str(folder), "alice/cli"]) == 2  # a user error: one line, exit 2
    assert "--base_model" in capsys.readouterr().err
    assert cli_main(["push", str(folder), "alice/cli", "--base_model", "tiny/llama", "--private"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["commit"] == hub.history("alice/cli")[0].oid and hub.repo("alice/cli").private
    hub.fail_next_commits(1)
    assert cli_main(["push", str(folder), "alice/cli-flaky", "--base_model", "tiny/llama"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "failed" in err and "single commit" in err  # nothing printed as published
    assert "adapter_model.safetensors" not in hub.files("alice/cli-flaky")


def test_trainer_push_to_hub_publishes_the_final_model_only(hub, tmp_path):
    from elical_hf import ConfidenceTrainer, ConfidenceTrainingArguments

    upload_base(tmp_path)
    model = AutoModelForConfidence.from_pretrained("tiny/llama")
    rows = [{"question": f"{q} {i}", "consistency": (i % 4) / 4} for i, q in enumerate(QUESTIONS * 4)]
    args = ConfidenceTrainingArguments(
        output_dir=str(tmp_path / "run"), num_train_epochs=1, per_device_train_batch_size=4, report_to="none",
        push_to_hub=True, hub_model_id="alice/trained", save_strategy="epoch",
    )
    trainer = ConfidenceTrainer(model, args=args, train_dataset=rows)
    trainer.train()  # the epoch's save pushes a complete model (hub_strategy="every_save")
    assert "confidence_config.json" in hub.files("alice/trained")
    assert len(hub.history("alice/trained")) == 2  # repo creation + the epoch's push
    trainer.push_to_hub()
    files = hub.files("alice/trained")
    assert {"adapter_model.safetensors", "confidence_config.json", "README.md"} <= set(files)
    assert not any(name.startswith("checkpoint-") or name.endswith((".bin", ".pt", ".pkl")) for name in files)
    assert json.loads(files["adapter_config.json"])["base_model_name_or_path"] == "tiny/llama"
    assert ModelCard(files["README.md"].decode()).data.library_name == "elical-hf"
    loaded = AutoModelForConfidence.from_pretrained("alice/trained")
    assert max_diff(loaded.confidence(QUESTIONS), model.confidence(QUESTIONS)) < 1e-6


def test_a_feature_layer_round_trips_through_the_hub(hub, tmp_path):
    upload_base(tmp_path)
    model = random_model("tiny/llama", feature_layer=-2)
    expected = model.confidence(QUESTIONS)
    model.push_to_hub("alice/middle-layer")
    files = hub.files("alice/middle-layer")
    saved = json.loads(files["confidence_config.json"])["feature_layer"]
    assert saved == model.confidence_config.feature_layer and saved < model.config.num_hidden_layers
    assert f"layer {saved} of {model.config.num_hidden_layers}" in files["README.md"].decode()
    loaded = AutoModelForConfidence.from_pretrained("alice/middle-layer")
    assert loaded.confidence_config.feature_layer == saved
    assert max_diff(loaded.confidence(QUESTIONS), expected) < 1e-6
    final = AutoModelForConfidence.from_pretrained("tiny/llama")
    assert final.confidence_config.feature_layer == model.config.num_hidden_layers
