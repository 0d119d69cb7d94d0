"""Import the paper's released checkpoints as confidence models that [`AutoModelForConfidence`] loads.

A release (e.g. `Shiyunee/Honest-Qwen2.5-7B-Instruct`) is a PEFT LoRA folder `lora_epoch_best/` trained on the base
model *without* its LM head (`AutoModel`), plus `vector_head_epoch_best.pt`, a pickled state_dict of the
`Linear(hidden_size, 1)` head. The reference confidence is `sigmoid(head(h))`, `h` the final hidden state of the last
prompt token with the LoRA applied. Here the backbone sits one level deeper (`LlamaForConfidence.model`), so the LoRA
keys `base_model.model.layers.*` become `base_model.model.model.layers.*`, and the head is stored as the PEFT
`modules_to_save` module `confidence_head`, next to the LoRA in `adapter_model.safetensors`.

The `.pt` head is read only with `torch.load(..., weights_only=True)` and must be exactly `{"weight": [1, H],
"bias": [1]}`; anything else (a pickled module, extra keys) is refused. So is an `adapter_model.bin` that is not a
plain tensor state_dict.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any

import torch


logger = logging.getLogger(__name__)

RELEASE_ADAPTER_DIR = "lora_epoch_best"
RELEASE_HEAD_FILE = "vector_head_epoch_best.pt"
RELEASED_BASES = {
    "Shiyunee/Honest-Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
    "Shiyunee/Honest-Qwen2.5-14B-Instruct": "Qwen/Qwen2.5-14B-Instruct",
    "Shiyunee/Honest-Llama3-8B-Instruct": "meta-llama/Meta-Llama-3-8B-Instruct",
}
"""Base model of each released checkpoint (from the authors' README)."""
_MODELING = "elical_hf.models.modeling"
_PROBES = ("Who wrote Hamlet?", "What is the capital of France?")


def _find_release(root: Path, subfolder: str | None) -> tuple[Path, Path]:
    """The adapter folder and the head file of a release layout under `root`."""
    start = root / subfolder if subfolder else root
    if (start / "adapter_config.json").is_file():
        adapter = start
    elif (start / RELEASE_ADAPTER_DIR / "adapter_config.json").is_file():
        adapter = start / RELEASE_ADAPTER_DIR
    else:
        found = sorted(p.parent for p in start.rglob("adapter_config.json"))
        if len(found) != 1:
            where = [str(p.relative_to(root)) for p in found] or "none"
            raise ValueError(
                f"{start} is not a released checkpoint layout ({RELEASE_ADAPTER_DIR}/adapter_config.json + "
                f"{RELEASE_HEAD_FILE}); adapter folders found: {where}. Pick one with `subfolder=`."
            )
        adapter = found[0]
    tag = adapter.name[len("lora_") :] if adapter.name.startswith("lora_") else None
    names = ([f"vector_head_{tag}.pt"] if tag else []) + [RELEASE_HEAD_FILE]
    for folder in (adapter, adapter.parent):
        for name in names:
            if (folder / name).is_file():
                return adapter, folder / name
    raise ValueError(f"No head file ({' or '.join(names)}) next to {adapter}.")


def _unpickler_reason(error: BaseException) -> str:
    """What the weights-only unpickler objected to, without torch's advice to retry with `weights_only=False` (which
    would run the file's code)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line for line in lines if "Unpickler error" in line), None)
    if reason is None:
        reason = next((line for line in lines if "weights_only" not in line and "will likely succeed" not in line),
                      "")
    return f"{type(error).__name__}: {reason}".rstrip(": ")


def _load_tensors(path: str | os.PathLike, expected: str) -> dict[str, torch.Tensor]:
    """`path` loaded with `weights_only=True`, refused unless it is a plain state_dict of tensors (`expected` says
    what it should be)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - whatever the unpickler objects to, the file is refused
        raise ValueError(
            f"Refusing {path}: it is not a plain state_dict of tensors (weights-only loading failed: "
            f"{_unpickler_reason(error)}). Expected {expected}; never load an untrusted pickle with code in it."
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"Refusing {path}: not a plain state_dict of tensors (expected {expected}).")
    return state


def load_head(path: str | os.PathLike, hidden_size: int) -> dict[str, torch.Tensor]:
    """Load a released head with `weights_only=True`; refuse anything but `{"weight": [1, H], "bias": [1]}`."""
    state = _load_tensors(path, "the state_dict() of a Linear(H, 1) head")
    if set(state) != {"weight", "bias"}:
        raise ValueError(f"Refusing {path}: expected a state_dict with exactly `weight` and `bias`, found "
                         f"{sorted(state)}.")
    if tuple(state["weight"].shape) != (1, hidden_size) or tuple(state["bias"].shape) != (1,):
        raise ValueError(
            f"Refusing {path}: expected weight [1, {hidden_size}] and bias [1] for this base model, found "
            f"{list(state['weight'].shape)} and {list(state['bias'].shape)}."
        )
    return {key: value.detach().to(torch.float32).contiguous() for key, value in state.items()}


def _load_adapter_weights(adapter: Path) -> dict[str, torch.Tensor]:
    if (adapter / "adapter_model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(adapter / "adapter_model.safetensors")
    path = adapter / "adapter_model.bin"
    if not path.is_file():
        raise FileNotFoundError(f"No adapter_model.safetensors (or .bin) in {adapter}.")
    return _load_tensors(path, "a LoRA adapter's state_dict")


def _map_lora_keys(released: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename the released LoRA keys (backbone = `AutoModel`) to ours (backbone under `.model`), checking shapes."""
    mapped, unmatched = {}, []
    for key, tensor in released.items():
        ours = next(
            (k for k in (key, key.replace("base_model.model.", "base_model.model.model.", 1)) if k in expected), None
        )
        if ours is None:
            unmatched.append(key)
            continue
        if tuple(expected[ours].shape) != tuple(tensor.shape):
            raise ValueError(f"LoRA weight {key} has shape {list(tensor.shape)}, not {list(expected[ours].shape)}.")
        mapped[ours] = tensor.contiguous()
    missing = sorted(k for k in expected if "lora_" in k and k not in mapped)
    if unmatched or missing:
        raise ValueError(
            "The released adapter does not fit this base model: "
            f"{len(unmatched)} unknown key(s) {unmatched[:3]}, {len(missing)} missing LoRA key(s) {missing[:3]}."
        )
    return mapped


def match_reference_tokens(tokenizer: Any, config: Any, probes: tuple[str, ...] = _PROBES) -> str | None:
    """
    Make elical-hf's inputs equal the reference code's for this tokenizer, by writing the special tokens the reference
    adds into the prompt's template.

    The reference code tokenizes the chat-templated prompt with `add_special_tokens=True`; elical-hf tokenizes it with
    `add_special_tokens=False`, since the chat template already holds the special tokens. For a tokenizer that adds
    tokens of its own (Llama 3 prepends `<|begin_of_text|>`, which its chat template also starts with), the reference
    input therefore has them twice. Prepending (appending) them to the tokenizer's chat template, or to
    `config.prompt_template` when no chat template is used, reproduces the reference input ids exactly; this is
    checked on `probes`.

    Args:
        tokenizer ([`~transformers.PreTrainedTokenizerBase`]): Changed in place (its `chat_template`).
        config ([`ConfidenceConfig`]): Changed in place (its `prompt_template`) when no chat template is used.
        probes (`tuple[str, ...]`, *optional*): Questions the result is checked on.

    Returns:
        `str | None`: which special tokens were added where (e.g. ``"`<|begin_of_text|>` in front"``), or `None`
        when the tokenizer adds none (Qwen2.5) and nothing was changed.

    Raises:
        `ValueError`: when the reference input cannot be reproduced this way.
    """
    from ..settings.prompts import special_prefix

    templated = config.use_chat_template and bool(getattr(tokenizer, "chat_template", None))
    written = "" if templated else special_prefix(tokenizer)  # the BOS render_prompt writes without a template

    def reference_text(question: str) -> str:  # the reference code's text: the prompt without that written BOS
        text = config.format_prompt(question, tokenizer)
        return text[len(written):] if written and text.startswith(written) else text

    reference = [tokenizer(reference_text(q))["input_ids"] for q in probes]
    ours = tokenizer(config.format_prompt(probes[0], tokenizer), add_special_tokens=False)["input_ids"]
    if reference[0] == ours:
        return None
    starts = [i for i in range(len(reference[0]) - len(ours) + 1) if reference[0][i : i + len(ours)] == ours]
    prefix = suffix = ""
    if starts:
        prefix = "".join(tokenizer.convert_ids_to_tokens(reference[0][: starts[0]]))
        suffix = "".join(tokenizer.convert_ids_to_tokens(reference[0][starts[0] + len(ours) :]))
        if config.use_chat_template and isinstance(getattr(tokenizer, "chat_template", None), str):
            tokenizer.chat_template = _jinja_literal(prefix) + tokenizer.chat_template + _jinja_literal(suffix)
        else:  # no chat template: the suffix goes after the prompt's tail, the prefix before its template
            config.prompt_template, config.prompt_tail = prefix + config.prompt_template, config.prompt_tail + suffix
    encoded = [tokenizer(config.format_prompt(q, tokenizer), add_special_tokens=False)["input_ids"] for q in probes]
    if not starts or encoded != reference:
        raise ValueError(
            "Cannot reproduce the reference tokenization (the tokenizer's special tokens added around the "
            "chat-templated prompt) with this tokenizer; convert with `reference_special_tokens=False` (command "
            "line: `--no_reference_special_tokens`) to keep elical-hf's tokenization."
        )
    return " and ".join(f"`{text}` {where}" for text, where in ((prefix, "in front"), (suffix, "at the end")) if text)


def _jinja_literal(text: str) -> str:
    return f"{{% raw %}}{text}{{% endraw %}}" if text else ""


def convert_official(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    base_model_name_or_path: str | None = None,
    confidence_config: Any = None,
    *,
    subfolder: str | None = None,
    revision: str | None = None,
    token: str | None = None,
    reference_special_tokens: bool = True,
) -> str:
    r"""
    Convert a released checkpoint of the paper into a confidence model folder.

    Args:
        src (`str`): The release: a local folder or a Hub model id (e.g. `"Shiyunee/Honest-Qwen2.5-7B-Instruct"`),
            holding `lora_epoch_best/` and `vector_head_epoch_best.pt` (or an adapter folder with the head next to it).
        dst (`str`): Output folder (must not exist or be empty).
        base_model_name_or_path (`str`, *optional*): The base model (Hub id or folder). Defaults to the known base of
            an official release, else to the adapter's `base_model_name_or_path`.
        confidence_config ([`ConfidenceConfig`], *optional*): The prompt the head was trained on. Defaults to the
            paper's QA prompt inside the chat template with the generation prompt, without a tail: the reference's
            prompt table defines the tail `"\nAnswer: "` for every prompt type, but its released prompt builder
            formats only the prompt text and never appends the tail, and the released heads were trained on text
            from an unreleased tool, so that is the better-supported reading. Pass
            `ConfidenceConfig(prompt_tail=REFERENCE_PROMPT_TAIL)` (command line: `--answer_tail`) for the other one;
            the choice is saved in `confidence_config.json` and named in the card. Its `feature_layer` must be left
            out (or name the final layer): the released heads read the final hidden state, recorded as the final
            layer's index.
        subfolder (`str`, *optional*): Folder of the release inside `src` when it holds several.
        revision (`str`, *optional*), token (`str`, *optional*): For a Hub `src`.
        reference_special_tokens (`bool`, *optional*, defaults to `True`): Feed the model what the reference code
            fed it. That code tokenizes the chat-templated prompt with `add_special_tokens=True`, so with a tokenizer
            that adds a BOS token (Llama 3) its inputs start with two BOS tokens (the chat template's and the
            tokenizer's); Qwen2.5's adds none. With `True` the converted model's saved chat template starts with
            that extra token (see [`match_reference_tokens`]), and its confidences are the release's. With `False`
            it keeps elical-hf's single BOS, and for such tokenizers its confidences differ from the release's.

    Returns:
        `str`: `dst`, loadable with `AutoModelForConfidence.from_pretrained(dst)`.
    """
    from transformers import AutoConfig

    from ..data.encoding import load_tokenizer
    from ..models.default_model import resolve_model_path
    from ..models.hub_ids import hub_id_of_local_copy
    from ..models.model_card import code_span
    from ..settings.configuration import ConfidenceConfig, backbone_signature, resolve_feature_layer
    from ..utils.loading import load_pretrained

    src, dst = os.fspath(src), Path(dst)
    if dst.exists() and any(dst.iterdir()):
        raise ValueError(f"{dst} is not empty; convert into a new folder.")
    root = _release_root(src, subfolder, revision, token)
    adapter, head_file = _find_release(root, subfolder)
    lora, base = _adapter_config(adapter, base_model_name_or_path or RELEASED_BASES.get(src))
    base_path, _ = resolve_model_path(base, revision=None)
    config = load_pretrained(AutoConfig.from_pretrained, base_path)
    hidden_size, layers = config.get_text_config().hidden_size, config.get_text_config().num_hidden_layers
    asked = confidence_config.feature_layer if confidence_config is not None else None
    if resolve_feature_layer(asked, layers) != layers:
        raise ValueError(f"The paper's heads read the final layer ({layers} of {base}); `feature_layer` {asked} names "
                         "another one: leave it out when converting.")
    head = load_head(head_file, hidden_size)
    if os.path.isdir(base):  # record the Hub id of a Hub cache snapshot (or embedded copy), else the absolute path
        base = (hub_id_of_local_copy(base) or (os.path.abspath(base),))[0]
    state = _converted_weights(lora, base, config, adapter, head)
    tokenizer = load_tokenizer(adapter, fallback=base_path)  # the release's own tokenizer, else the base model's
    confidence = ConfidenceConfig.from_dict((confidence_config or ConfidenceConfig()).to_dict())
    confidence.base_model_name_or_path = base
    confidence.base_model_signature = backbone_signature(config)
    confidence.feature_layer = layers  # named in confidence_config.json and the card
    tail = f"the prompt tail {confidence.prompt_tail!r}" if confidence.prompt_tail else "no prompt tail"
    source = f"{code_span(src)} ({code_span(head_file.relative_to(root))}), read with {tail}"
    added = match_reference_tokens(tokenizer, confidence) if reference_special_tokens else None
    if added:
        source += (
            f". As in the authors' code, the special tokens this tokenizer adds ({added}) are added to the "
            "chat-templated prompt, which holds its own already (for Llama 3: two BOS tokens); the saved template "
            "does the same"
        )
        logger.info("Reproducing the reference tokenization: %s added around each prompt.", added)
    _write_converted(dst, state, lora, tokenizer, confidence, source)
    logger.info("Converted %s (%s + %s) into %s.", src, adapter.name, head_file.name, dst)
    return str(dst)


def _release_root(src: str, subfolder: str | None, revision: str | None, token: str | None) -> Path:
    """The folder of the release `src`: a local folder, or its Hub snapshot (only `subfolder` of it when given)."""
    from ..models.default_model import hub_offline
    from ..models.hub_ids import validate_hub_repo_id
    from ..utils.files import looks_local

    if os.path.isdir(src):
        return Path(src)
    if looks_local(src):  # a mistyped path, not a Hub id
        raise FileNotFoundError(2, "No such release folder", src)
    from huggingface_hub import snapshot_download

    validate_hub_repo_id(src)
    patterns = [f"{subfolder.strip('/')}/*", f"{subfolder.strip('/')}/**"] if subfolder else None
    return Path(snapshot_download(src, revision=revision, token=token, local_files_only=hub_offline(),
                                  allow_patterns=patterns))


def _adapter_config(adapter: Path, base: str | None) -> tuple[Any, str]:
    """The release's `LoraConfig` and its base model (`base`, else the one the adapter names), which must be a folder
    here or a Hub id."""
    from peft import LoraConfig

    from ..models.hub_ids import is_hub_id

    lora = LoraConfig.from_pretrained(str(adapter))
    base = base or lora.base_model_name_or_path
    if not base:
        raise ValueError(f"{adapter} does not name its base model; pass `base_model_name_or_path=`.")
    if not os.path.isdir(base) and not is_hub_id(base):
        raise ValueError(
            f"{adapter} names its base model {base!r}, which is neither a folder here nor a Hub id (a path on the "
            "authors' machines?); pass `base_model_name_or_path=` (e.g. \"Qwen/Qwen2.5-7B-Instruct\")."
        )
    return lora, base


def _converted_weights(lora: Any, base: str, config: Any, adapter: Path, head: dict[str, torch.Tensor]) -> dict:
    """The adapter's weights under our module names, with the head as the `modules_to_save` module; `lora` is made
    our adapter config (its base `base`), as checked against a skeleton of the model without weights."""
    from accelerate import init_empty_weights
    from peft import get_peft_model, get_peft_model_state_dict

    from ..models.auto import HEAD_MODULE
    from ..models.modeling import confidence_class_for, confidence_class_name

    lora.base_model_name_or_path = base
    lora.task_type = None  # loaded by PeftModelForConfidence, not a task-specific PEFT class
    lora.inference_mode = True
    lora.modules_to_save = [*(m for m in lora.modules_to_save or [] if m != HEAD_MODULE), HEAD_MODULE]
    lora.auto_mapping = {"base_model_class": confidence_class_name(config.model_type), "parent_library": _MODELING}
    with init_empty_weights():  # module names and shapes only: no base weights are loaded
        skeleton = get_peft_model(confidence_class_for(config.model_type)(config), copy.deepcopy(lora))
    expected = get_peft_model_state_dict(skeleton)
    state = _map_lora_keys(_load_adapter_weights(adapter), expected)
    for name, tensor in head.items():
        state[f"base_model.model.{HEAD_MODULE}.{name}"] = tensor
    unknown = sorted(set(state) - set(expected))
    if unknown:
        raise ValueError(f"Internal key mismatch while converting: {unknown[:3]}.")
    return state


def _write_converted(dst: Path, state: dict, lora: Any, tokenizer: Any, confidence: Any, source: str) -> None:
    """Write the converted model into `dst` at once (its `confidence_config.json` last), with a card naming `source`."""
    from safetensors.torch import save_file

    from ..models.model_card import ConfidenceModelCardData, render_model_card
    from ..utils.atomic import atomic_folder

    with atomic_folder(dst) as staging:  # named like `dst`: the card names the model after its folder
        save_file(state, str(staging / "adapter_model.safetensors"), metadata={"format": "pt"})
        lora.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
        card_data = ConfidenceModelCardData(tags=["converted"], source=source)
        render_model_card(confidence, card_data, staging).save(staging / "README.md")
        confidence.save_pretrained(staging)  # last: marks the folder complete
