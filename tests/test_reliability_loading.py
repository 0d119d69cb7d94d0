"""Round 3 of the reliability probes (issue 38), model loading and saved configs: no code from a model folder runs or
is offered, pickled weights are refused, and a hand-edited `confidence_config.json` is checked strictly."""

from __future__ import annotations

import builtins
import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi

from elical_hf import AutoModelForConfidence, ConfidenceConfig, push_folder
from elical_hf.cli import main as cli_main
from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME
from elical_hf.data.encoding import load_tokenizer
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.reliability import case
from tests.test_hub import upload_base
from tests.test_reliability_silent import judged_records
from tests.tiny import mark_trained


EVIL_MODULE = """import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import LlamaConfig, PreTrainedTokenizerFast
class EvilConfig(LlamaConfig):
    model_type = "evil"
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def with_remote_code(folder: Path, marker: Path, config: bool = False, tokenizer: bool = False) -> Path:
    """Put a module that writes `marker` when imported into `folder`, and name it in an `auto_map` of its config
    (`model_type` "evil", which transformers does not have) and / or of its tokenizer config (`EvilTokenizer`)."""
    (folder / "evil.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    if config:
        edit_json(folder / "config.json", model_type="evil", auto_map={"AutoConfig": "evil.EvilConfig"})
    if tokenizer:
        edit_json(folder / "tokenizer_config.json", tokenizer_class="EvilTokenizer",
                  auto_map={"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"]})
    return folder


@pytest.fixture
def answer_yes(monkeypatch, tmp_path):
    """A user who answers `y` to any question on the terminal; the questions asked are recorded. transformers'
    dynamic modules go to a temporary folder (they are only written where the folder's code is run)."""
    import transformers.dynamic_module_utils as dynamic

    asked: list[str] = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": asked.append(prompt) or "y")
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    return asked


@case("security", "a model folder whose `config.json` or `tokenizer_config.json` has an `auto_map` naming its own "
      "`.py` (a class transformers does not have), loaded by `AutoModelForConfidence.from_pretrained` (base or saved "
      "model), `load_tokenizer` or `elical-hf evaluate --model T=<folder>`, with a user who answers `y`",
      "nothing is asked and no code runs (`trust_remote_code=False` on every load, `elical_hf/utils/loading.py`): one line "
      "`… needs its own Python code to load (an `auto_map` in its config.json or tokenizer_config.json names a class "
      "transformers does not have): elical-hf never runs code from a model folder or Hub repo …`; an `auto_map` "
      "beside a built-in class loads the built-in one")
def test_no_code_from_a_model_folder_is_run_or_offered(tiny_llama, tmp_path, answer_yes, capsys):
    marker = tmp_path / "ran"
    evil_base = with_remote_code(Path(shutil.copytree(tiny_llama, tmp_path / "evil-base")), marker, config=True)
    evil_tokenizer = with_remote_code(Path(shutil.copytree(tiny_llama, tmp_path / "evil-tok")), marker, tokenizer=True)
    message = "needs its own Python code to load .* elical-hf never runs code from a model folder or Hub repo"
    with pytest.raises(ValueError, match=f"{evil_base} {message}") as error:
        AutoModelForConfidence.from_pretrained(evil_base)
    assert "\n" not in str(error.value) and "trust_remote_code=True" not in str(error.value)
    with pytest.raises(ValueError, match=message):
        AutoModelForConfidence.from_pretrained(evil_tokenizer)
    with pytest.raises(ValueError, match=message):
        load_tokenizer(evil_tokenizer)
    saved = tmp_path / "saved"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(saved)
    mark_trained(saved)
    with_remote_code(saved, marker, tokenizer=True)
    with pytest.raises(ValueError, match=message):
        AutoModelForConfidence.from_pretrained(saved)
    argv = ["evaluate", "--records", judged_records(tmp_path), "--baselines", "prob", "--allow_other_model", "true",
            "--output_dir", str(tmp_path / "out"), "--model", f"T={saved}"]
    assert cli_main(argv) == 2
    assert "needs its own Python code to load" in capsys.readouterr().err
    assert answer_yes == [] and not marker.exists()
    # An auto_map beside classes transformers has: the built-in ones load, the folder's module is never imported.
    beside = with_remote_code(Path(shutil.copytree(tiny_llama, tmp_path / "beside")), marker)
    edit_json(beside / "config.json", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForConfidence": "evil.X"})
    edit_json(beside / "tokenizer_config.json", auto_map={"AutoTokenizer": ["evil.EvilTokenizer", None]})
    assert AutoModelForConfidence.from_pretrained(beside).confidence(["Who wrote Hamlet?"])
    assert answer_yes == [] and not marker.exists()
    with pytest.raises(ValueError, match="`trust_remote_code=True` is not supported"):
        load_tokenizer(tiny_llama, trust_remote_code=True)


class RunsCode:
    """Unpickling this writes `ran` next to the pickle: what a crafted `pytorch_model.bin` can do."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "ran"))


@case("security", "a base model folder whose only weights are a pickled `pytorch_model.bin` (a plain state dict, or "
      "one with code in it), a Hub repo with only that file, or a config naming a pickle in `transformers_weights`",
      "refused before anything is unpickled, in one line naming the folder: `… holds only pickled weights "
      "(pytorch_model.bin), no model.safetensors: elical-hf loads only safetensors weights, because unpickling a file "
      "can run code …` / `<repo> has no model.safetensors (only pickled weights?) …` (it used to load the plain one, "
      "and end the other in a traceback advising `weights_only=False`)")
def test_pickled_base_weights_are_refused(tiny_llama, tmp_path, hub, monkeypatch):
    plain = Path(shutil.copytree(tiny_llama, tmp_path / "plain"))
    state = AutoModelForConfidence.from_pretrained(tiny_llama).get_base_model().state_dict()
    torch.save({key: value for key, value in state.items() if "confidence_head" not in key},
               plain / "pytorch_model.bin")
    (plain / "model.safetensors").unlink()
    crafted = Path(shutil.copytree(plain, tmp_path / "crafted"))
    torch.save({"weights": RunsCode(str(tmp_path / "ran"))}, crafted / "pytorch_model.bin")
    for folder in (plain, crafted):
        with pytest.raises(ValueError, match=f"{folder} holds only pickled weights \\(pytorch_model.bin\\), no "
                                             "model.safetensors: elical-hf loads only safetensors weights, because "
                                             "unpickling a file can run code") as error:
            AutoModelForConfidence.from_pretrained(folder)
        assert "\n" not in str(error.value) and "weights_only" not in str(error.value)
    assert not (tmp_path / "ran").exists()
    monkeypatch.setenv("DISABLE_SAFETENSORS_CONVERSION", "1")  # the stand-in Hub has no conversion service
    HfApi().create_repo("tiny/pickled")
    HfApi().upload_folder(folder_path=plain, repo_id="tiny/pickled")
    with pytest.raises(ValueError, match="^tiny/pickled has no model.safetensors .* elical-hf loads only safetensors "
                                         "weights, because unpickling a file can run code"):
        AutoModelForConfidence.from_pretrained("tiny/pickled")
    named = Path(shutil.copytree(tiny_llama, tmp_path / "named"))
    torch.save({}, named / "adapter_model.bin")
    edit_json(named / "config.json", transformers_weights="adapter_model.bin")
    with pytest.raises(ValueError, match="names the weights file 'adapter_model.bin' .* which is not safetensors"):
        AutoModelForConfidence.from_pretrained(named)


@pytest.fixture(scope="module")
def saved_model(tiny_llama, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved") / "model"
    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(folder)
    return folder


def hand_edited(saved_model: Path, tmp_path: Path, config=..., **changes) -> Path:
    """A copy of `saved_model` whose `confidence_config.json` is `config`, or the saved one with `changes`."""
    folder = Path(shutil.copytree(saved_model, tmp_path / "edited", dirs_exist_ok=True))
    if config is ...:
        config = {**json.loads((folder / CONFIDENCE_CONFIG_NAME).read_text()), **changes}
    (folder / CONFIDENCE_CONFIG_NAME).write_text(json.dumps(config))
    return folder


def load_error(folder: Path) -> str:
    with pytest.raises(ValueError) as error:
        AutoModelForConfidence.from_pretrained(folder)
    return str(error.value)


@case("silent", "a `confidence_config.json` of `{}`, or a saved one without `prompt_template` (or another field that "
      "every save writes)", "refused on load, naming the file and the fields: `…/confidence_config.json: missing "
      "field(s) prompt_template (every saved model has them: an old or hand-written file? …)` (it loaded with the "
      "default template)")
def test_a_config_missing_saved_fields_is_refused(saved_model, tmp_path):
    saved = json.loads((saved_model / CONFIDENCE_CONFIG_NAME).read_text())
    without = {key: value for key, value in saved.items() if key != "prompt_template"}
    message = load_error(hand_edited(saved_model, tmp_path, without))
    assert message == (f"{tmp_path / 'edited' / CONFIDENCE_CONFIG_NAME}: missing field(s) prompt_template (every saved "
                       "model has them: an old or hand-written file? save the model again)")
    assert "missing field(s) prompt_template, use_chat_template, system_prompt" in load_error(
        hand_edited(saved_model, tmp_path, {}))
    added_later = ("prompt_tail", "chat_template_kwargs", "head_type", "head_init", "retrieve_threshold",
                   "risk_control", "use_lora")  # an older save without them loads, with the defaults it meant
    older = {key: value for key, value in saved.items() if key not in added_later}
    assert AutoModelForConfidence.from_pretrained(hand_edited(saved_model, tmp_path, older)).confidence_config.use_lora


@case("silent", "a hand-edited `confidence_config.json` with `\"use_chat_template\": \"false\"` (or `\"no\"`), "
      "`\"decision_threshold\": true`, `\"max_length\": 512.0`, or a file that is `[]` / `null`",
      "refused on load, every problem on its own line: `…/confidence_config.json has 3 problems:` / "
      "`` `use_chat_template` must be true or false, got \"false\". `` / `` `decision_threshold` must be a number or "
      "null, got true. `` / `` `max_length` must be an integer or null, got 512.0. ``; `[]` / `null`: `… must hold a "
      "JSON object of settings, got []` (the strings counted as true, `true` as threshold 1.0, the others ended "
      "in tracebacks)")
def test_config_values_of_the_wrong_type_are_refused(saved_model, tmp_path):
    path = tmp_path / "edited" / CONFIDENCE_CONFIG_NAME
    message = load_error(hand_edited(saved_model, tmp_path, use_chat_template="false", decision_threshold=True,
                                     max_length=512.0))
    assert message.splitlines() == [
        f"{path} has 3 problems:",
        '  `use_chat_template` must be true or false, got "false".',
        "  `max_length` must be an integer or null, got 512.0.",
        "  `decision_threshold` must be a number or null, got true.",
    ]
    assert 'got "no"' in load_error(hand_edited(saved_model, tmp_path, add_generation_prompt="no"))
    for value, shown in (([], "[]"), (None, "null")):
        assert load_error(hand_edited(saved_model, tmp_path, value)) == (
            f"{path} must hold a JSON object of settings, got {shown}.")
    assert "`use_lora` must be true or false" in load_error(hand_edited(saved_model, tmp_path, use_lora=0))
    config = ConfidenceConfig.from_json_file(hand_edited(saved_model, tmp_path, decision_threshold=1) / path.name)
    assert config.decision_threshold == 1  # an integer is a number


@case("silent", "a `prompt_template` with format fields `{question.__class__}`, `{question[0]}`, `{question!r}` or "
      "`{question:>3000}` (the check only called `format(question=\"\")`), or `sample --prompt_template \"Q: "
      "{question} {answer}\"` (the sampler only looked for `{question}`)",
      "refused on load, in `ConfidenceConfig(...)` and in `SamplingSettings(...)`: `` `prompt_template` may use only "
      "the '{question}' field, bare (no other field, attribute, index, conversion or format spec; …): found "
      "{question.__class__} in … ``")
def test_template_format_fields_are_refused(saved_model, tmp_path):
    from elical_hf.signals import SamplingSettings

    for field in ("{question.__class__}", "{question[0]}", "{question!r}", "{question:>3000}", "{answer}"):
        template = f"Question: {{question}} {field}"
        for settings in (ConfidenceConfig, SamplingSettings):
            with pytest.raises(ValueError, match="may use only the '\\{question\\}' field, bare"):
                settings(prompt_template=template)
        assert f"found {field} in" in load_error(hand_edited(saved_model, tmp_path, prompt_template=template))
    assert ConfidenceConfig(prompt_template="{{literal}} Q: {question}").prompt_template.startswith("{{")


@case("silent", "a saved model (or a base model) whose chat template drops the messages "
      "(`chat_template.jinja` without `message['content']`)",
      "refused on load: `…: the prompt is the same for every question (…): its chat template drops the user's "
      "message, so every question would get the same confidence …` (every question got the same confidence)")
def test_a_chat_template_that_drops_the_question_is_refused(saved_model, tiny_llama, tmp_path):
    constant = "<|im_start|>user\nhello<|im_end|>\n{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    folder = hand_edited(saved_model, tmp_path)
    (folder / "chat_template.jinja").write_text(constant)
    assert "its chat template drops the user's message" in load_error(folder)
    base = Path(shutil.copytree(tiny_llama, tmp_path / "base"))
    (base / "chat_template.jinja").write_text(constant)
    assert load_error(base).startswith(f"{base}: the prompt is the same for every question")


@case("silent", "a hand-edited `confidence_config.json` with a misspelt field (`\"prompt_templte\"`) or a "
      "`training_history` entry without `stage`",
      "refused on load: `unknown field(s) prompt_templte (a typo, or written by a newer elical-hf?)` / "
      "`` `training_history[0]` must be an object with a string `stage`, got {} `` (the typo was ignored and the "
      "saved template used; the entry ended in a `KeyError`)")
def test_unknown_fields_and_bad_history_are_refused(saved_model, tmp_path):
    assert "unknown field(s) prompt_templte (a typo" in load_error(
        hand_edited(saved_model, tmp_path, prompt_templte="Q: {question}"))
    assert "`training_history[0]` must be an object with a string `stage`, got {}" in load_error(
        hand_edited(saved_model, tmp_path, training_history=[{}]))


@case("silent", "`elical-hf push` (`push_folder`) of a model folder whose `confidence_config.json` is `{}` or otherwise "
      "would not load", "refused before anything is published, naming the file: `…/confidence_config.json: missing "
      "field(s) …` (it was published, as a model that does not load)")
def test_push_refuses_a_config_that_would_not_load(hub, saved_model, tmp_path):
    upload_base(tmp_path, "tiny/llama")
    folder = hand_edited(saved_model, tmp_path, {})
    with pytest.raises(ValueError, match=f"{folder / CONFIDENCE_CONFIG_NAME}: missing field"):
        push_folder(folder, "alice/broken", base_model_name_or_path="tiny/llama")
    assert hub.repo("alice/broken") is None
