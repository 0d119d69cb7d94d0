"""Converting the paper's released checkpoint layout (PEFT LoRA on `AutoModel` + a pickled Linear head)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from huggingface_hub import HfApi, ModelCard
from peft import LoraConfig, get_peft_model
from tokenizers import processors
from transformers import AutoModel, AutoTokenizer

from elical_hf import AutoModelForConfidence, ConfidenceConfig, convert_official
from elical_hf.cli import main as cli_main
from elical_hf.settings.prompts import QA_PROMPT
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.tiny import CHAT_TEMPLATE, make_tiny_causal_lm, make_tiny_tokenizer


pytestmark = pytest.mark.float32  # vs the authors' code to float32 rounding (bf16 twin: tests/test_bf16.py)


QUESTIONS = ["Who wrote Hamlet?", "What is the capital of France?", "Who was the first king of England?"]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def reference_prompt(tokenizer, question: str, prompt_template: str | None = None, tail: str = "") -> str:
    """The text the authors' code feeds for `question`: the QA prompt (+ tail) in the chat template, or a plain
    `prompt_template`."""
    if prompt_template is not None:
        return prompt_template.format(question=question)
    messages = [{"role": "user", "content": QA_PROMPT.format(question=question) + tail}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def build_release(base: str, folder, prompt_template: str | None = None, tail: str = ""):
    """The authors' layout, built the authors' way: get_peft_model(AutoModel) + a separate Linear(H, 1) head.

    Returns the reference confidences, computed as the authors' code does and independently of elical-hf's model
    code: the (chat-templated) prompt tokenized with the tokenizer's defaults (`add_special_tokens=True`), sigmoid of
    the head on the final hidden state of the last token. `prompt_template`: no chat template, this prompt.
    """
    torch.manual_seed(0)
    backbone = AutoModel.from_pretrained(base)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none", target_modules=TARGETS,
                      init_lora_weights=False)  # non-zero B: a misplaced LoRA would change the scores
    peft_model = get_peft_model(backbone, lora).eval()
    head = torch.nn.Linear(backbone.config.hidden_size, 1)
    peft_model.save_pretrained(folder / "lora_epoch_best")
    torch.save(head.state_dict(), folder / "vector_head_epoch_best.pt")

    tokenizer = AutoTokenizer.from_pretrained(base)
    reference, without_lora = [], []
    with torch.no_grad():
        for question in QUESTIONS:
            ids = tokenizer(reference_prompt(tokenizer, question, prompt_template, tail), return_tensors="pt")["input_ids"]
            hidden = peft_model(input_ids=ids).last_hidden_state[:, -1]
            reference.append(float(torch.sigmoid(head(hidden)).squeeze()))
            with peft_model.disable_adapter():
                hidden = peft_model(input_ids=ids).last_hidden_state[:, -1]
            without_lora.append(float(torch.sigmoid(head(hidden)).squeeze()))
    assert max(abs(a - b) for a, b in zip(reference, without_lora)) > 1e-3  # the LoRA matters
    return reference


@pytest.fixture(scope="module")
def release(tiny_llama, tmp_path_factory):
    """A release on a base whose tokenizer adds no special tokens (like Qwen2.5's): folder, reference confidences."""
    folder = tmp_path_factory.mktemp("release")
    return folder, build_release(tiny_llama, folder)


@pytest.fixture(scope="module")
def bos_base(tmp_path_factory) -> str:
    """A tiny base whose tokenizer works like Llama 3's: its chat template starts with the BOS token, and tokenizing
    with `add_special_tokens=True` prepends another."""
    tokenizer = make_tiny_tokenizer()
    tokenizer.add_special_tokens({"bos_token": "<|begin_of_text|>"})
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tokenizer.bos_token_id)]
    )
    tokenizer.chat_template = "{{ bos_token }}" + CHAT_TEMPLATE
    folder = tmp_path_factory.mktemp("bos-base")
    make_tiny_causal_lm(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    ids = tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False))["input_ids"]
    assert ids[:2] == [tokenizer.bos_token_id] * 2  # two BOS tokens, as the reference code feeds Llama 3
    return str(folder)


def test_released_keys_differ_from_ours(release):
    folder, _ = release
    from safetensors import safe_open

    with safe_open(folder / "lora_epoch_best" / "adapter_model.safetensors", "pt") as handle:
        keys = list(handle.keys())
    assert all(key.startswith("base_model.model.layers.") for key in keys)  # AutoModel: no `.model` level


def test_converted_model_matches_the_reference(release, tmp_path):
    folder, reference = release
    out = convert_official(folder, tmp_path / "converted")
    model = AutoModelForConfidence.from_pretrained(out)
    scores = model.confidence(QUESTIONS)
    assert max(abs(a - b) for a, b in zip(scores, reference)) < 1e-6
    assert len(set(round(s, 6) for s in scores)) == len(scores)
    adapter = json.loads((tmp_path / "converted" / "adapter_config.json").read_text())
    assert adapter["modules_to_save"] == ["confidence_head"] and adapter["task_type"] is None
    card = ModelCard.load(tmp_path / "converted" / "README.md")
    assert card.data.library_name == "elical-hf" and "convert-official" in card.text


def test_the_prompt_tail_is_a_saved_choice_that_changes_the_scores(tiny_llama, tmp_path):
    from elical_hf.settings.prompts import REFERENCE_PROMPT_TAIL

    release = tmp_path / "release"
    release.mkdir()
    reference = build_release(tiny_llama, release, tail=REFERENCE_PROMPT_TAIL)  # trained on the tailed text
    plain = AutoModelForConfidence.from_pretrained(convert_official(release, tmp_path / "plain"))
    tailed = AutoModelForConfidence.from_pretrained(
        convert_official(release, tmp_path / "tailed", confidence_config=ConfidenceConfig(prompt_tail=REFERENCE_PROMPT_TAIL))
    )
    assert max_diff(tailed.confidence(QUESTIONS), reference) < 1e-6
    assert max_diff(plain.confidence(QUESTIONS), reference) > 1e-3  # the tail is part of what the head reads
    saved = json.loads((tmp_path / "tailed" / "confidence_config.json").read_text())
    assert saved["prompt_tail"] == "\nAnswer: "
    assert json.loads((tmp_path / "plain" / "confidence_config.json").read_text())["prompt_tail"] == ""
    assert "read with the prompt tail" in (tmp_path / "tailed" / "README.md").read_text()
    assert "read with no prompt tail" in (tmp_path / "plain" / "README.md").read_text()
    text = tailed.confidence_config.format_prompt("Who?", tailed.tokenizer)
    assert "Question: Who?\nAnswer: " in text and text.index("Answer: ") < text.index("assistant")


def test_batched_reference_pooling_differs_from_batch_one_and_the_converted_model_does_not(release, tiny_llama,
                                                                                         tmp_path):
    """The reference code reads `[:, -1]` of right-padded batches: every row but the longest is pooled at a pad
    slot. The converted model pools the last real token, so its batched scores are the reference's batch-1 ones."""
    from peft import PeftModel

    folder, batch_one = release
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokenizer.padding_side = "right"
    backbone = PeftModel.from_pretrained(AutoModel.from_pretrained(tiny_llama), folder / "lora_epoch_best").eval()
    head = torch.nn.Linear(backbone.config.hidden_size, 1)
    head.load_state_dict(torch.load(folder / "vector_head_epoch_best.pt", weights_only=True))
    texts = [reference_prompt(tokenizer, q) for q in QUESTIONS]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    lengths = batch["attention_mask"].sum(-1)
    assert len(set(lengths.tolist())) > 1  # the rows really have different lengths
    with torch.no_grad():
        hidden = backbone(**batch).last_hidden_state[:, -1]
        batched = torch.sigmoid(head(hidden)).squeeze(-1).tolist()
    longest = int(lengths.argmax())
    assert abs(batched[longest] - batch_one[longest]) < 1e-5  # the longest row has no pad slot
    others = [i for i in range(len(QUESTIONS)) if i != longest]
    assert min(abs(batched[i] - batch_one[i]) for i in others) > 1e-4  # the others were read at a pad slot
    model = AutoModelForConfidence.from_pretrained(convert_official(folder, tmp_path / "converted"))
    assert max_diff(model.confidence(QUESTIONS, batch_size=len(QUESTIONS)), batch_one) < 1e-6


def test_a_head_that_is_not_a_plain_state_dict_is_refused(release, tmp_path):
    folder, _ = release
    cases = {
        "module": torch.nn.Linear(32, 1),  # a pickled nn.Module
        "extra": {"weight": torch.zeros(1, 32), "bias": torch.zeros(1), "scale": torch.ones(1)},
        "shape": {"weight": torch.zeros(1, 16), "bias": torch.zeros(1)},
    }
    messages = {"module": "not a plain state_dict", "extra": "exactly `weight` and `bias`", "shape": r"\[1, 32\]"}
    for name, content in cases.items():
        bad = tmp_path / name
        shutil.copytree(folder, bad)
        torch.save(content, bad / "vector_head_epoch_best.pt")
        with pytest.raises(ValueError, match=messages[name]):
            convert_official(bad, tmp_path / f"out-{name}")
        assert not (tmp_path / f"out-{name}").exists()


def test_tokenizers_that_add_a_bos_token_reproduce_the_reference(bos_base, tmp_path, capsys):
    folder = tmp_path / "release"
    reference = build_release(bos_base, folder)
    out = convert_official(folder, tmp_path / "converted", bos_base)
    assert max_diff(AutoModelForConfidence.from_pretrained(out).confidence(QUESTIONS), reference) < 1e-6
    card = ModelCard.load(tmp_path / "converted" / "README.md")
    assert "`<|begin_of_text|>` in front" in card.text and "two BOS tokens" in card.text

    # elical-hf's own tokenization (one BOS): other confidences, as documented.
    assert cli_main(["convert-official", str(folder), str(tmp_path / "single"), "--base_model", bos_base,
                     "--no_reference_special_tokens"]) == 0
    single = AutoModelForConfidence.from_pretrained(capsys.readouterr().out.strip())
    assert max_diff(single.confidence(QUESTIONS), reference) > 1e-4

    # Without a chat template the reference input is BOS + the prompt; the saved prompt template holds the BOS.
    plain = tmp_path / "plain-release"
    reference = build_release(bos_base, plain, prompt_template=QA_PROMPT)
    settings = ConfidenceConfig(use_chat_template=False)
    out = convert_official(plain, tmp_path / "plain", bos_base, settings)
    assert max_diff(AutoModelForConfidence.from_pretrained(out).confidence(QUESTIONS), reference) < 1e-6


def test_an_unreachable_base_path_is_reported(release, tmp_path):
    folder, _ = release
    moved = tmp_path / "authors-machine"
    shutil.copytree(folder, moved)
    config_path = moved / "lora_epoch_best" / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = "/mnt/models/Qwen2.5-7B-Instruct"
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="neither a folder here nor a Hub id"):
        convert_official(moved, tmp_path / "out")


class _Exploit:
    """Unpickling this (without `weights_only`) would create a file: proof that code ran."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_head_with_code_in_its_pickle_is_refused_without_running_it(release, tmp_path):
    folder, _ = release
    bad, ran = tmp_path / "exploit", tmp_path / "code-ran"
    shutil.copytree(folder, bad)
    torch.save({"weight": torch.zeros(1, 32), "bias": _Exploit(ran)}, bad / "vector_head_epoch_best.pt")
    with pytest.raises(ValueError, match="not a plain state_dict"):
        convert_official(bad, tmp_path / "out")
    assert not ran.exists() and not (tmp_path / "out").exists()


def test_pickled_adapter_bin_is_refused(release, tmp_path):
    folder, _ = release
    bad = tmp_path / "bin"
    shutil.copytree(folder, bad)
    (bad / "lora_epoch_best" / "adapter_model.safetensors").unlink()
    torch.save({"weights": torch.nn.Linear(2, 2)}, bad / "lora_epoch_best" / "adapter_model.bin")
    with pytest.raises(ValueError, match="not a plain state_dict"):
        convert_official(bad, tmp_path / "out")


def test_convert_from_the_hub_and_cli(hub, release, tmp_path, tiny_llama, capsys):
    folder, reference = release
    HfApi().create_repo("authors/Honest-Tiny")
    HfApi().upload_folder(folder_path=folder, repo_id="authors/Honest-Tiny")
    assert cli_main(["convert-official", "authors/Honest-Tiny", str(tmp_path / "out"), "--base_model", tiny_llama]) == 0
    scores = AutoModelForConfidence.from_pretrained(capsys.readouterr().out.strip()).confidence(QUESTIONS)
    assert max(abs(a - b) for a, b in zip(scores, reference)) < 1e-6
    assert cli_main(["convert-official", "authors/Honest-Tiny", str(tmp_path / "out")]) == 2  # not empty
    assert "not empty" in capsys.readouterr().err
