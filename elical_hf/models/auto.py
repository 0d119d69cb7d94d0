"""`AutoModelForConfidence`: a transformers Auto class that builds, saves and reloads LoRA confidence models.

A saved confidence model is an adapter folder, never a backbone copy:

- `adapter_model.safetensors`: LoRA weights and the head (PEFT `modules_to_save`),
- `adapter_config.json`: the PEFT config, naming the base model,
- tokenizer files (the chat template the prompts were rendered with),
- `confidence_config.json`: prompt template, pooling, provenance; written last, so its presence marks a complete save.

What a saved model was trained on is checked against what it is loaded with in [`~elical_hf.models.provenance`]; a saved
folder is found, and its decision rule rewritten, in [`~elical_hf.models.saved_model`].
"""

from __future__ import annotations

import importlib.util
import os
from collections import OrderedDict
from typing import Any

import torch
from peft import LoraConfig, PeftConfig, PeftModel
from peft.utils import SAFETENSORS_WEIGHTS_NAME
from safetensors import SafetensorError
from transformers import AutoConfig
from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from ..utils.atomic import umask_permissions
from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig, backbone_signature, resolve_feature_layer
from ..data.encoding import load_tokenizer
from .feature_layer import blocks_with_lora, num_layers
from ..utils.files import looks_local
from .default_model import resolve_model_path
from .hub_ids import hub_id_of_local_copy
from ..utils.loading import check_file_tensors, load_model, load_pretrained
from .model_card import ConfidenceModelCardData, write_model_card
from ..settings.precision import resolve_dtype
from ..settings.prompts import chat_template_kwargs_for
from .modeling import CONFIDENCE_BACKBONES, confidence_class_for, confidence_class_name, default_lora_targets
from .provenance import base_of_saved_model, check_loaded_base, check_saved_chat_template
from .saved_model import find_saved_model


HEAD_MODULE = "confidence_head"
HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "force_download")
"""The `from_pretrained` keyword arguments that locate files on the Hub (passed to the config and tokenizer too)."""

def check_four_bit_support() -> None:
    """Raise one clear error where a 4-bit (QLoRA) backbone cannot be loaded: `ImportError` without bitsandbytes,
    `RuntimeError` without a CUDA GPU (bitsandbytes' 4-bit kernels run on CUDA)."""
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ImportError(
            "load_in_4bit (QLoRA) needs bitsandbytes and a CUDA GPU: `pip install bitsandbytes`. Without them, load the "
            "backbone in bf16 or float32 (leave load_in_4bit off)."
        )
    if not torch.cuda.is_available():
        raise RuntimeError(
            "load_in_4bit (QLoRA) needs a CUDA GPU (bitsandbytes' 4-bit kernels), and none is visible here. Leave "
            "load_in_4bit off to load the backbone in bf16 or float32."
        )


def four_bit_config(compute_dtype: torch.dtype) -> Any:
    """QLoRA's quantization: NF4 weights with double quantization, matmuls in `compute_dtype` (a
    `transformers.BitsAndBytesConfig`); raises as [`check_four_bit_support`] where that cannot run."""
    check_four_bit_support()
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute_dtype)


MODEL_FOR_CONFIDENCE_MAPPING_NAMES = OrderedDict(
    (model_type, confidence_class_name(model_type)) for model_type in CONFIDENCE_BACKBONES
)


class _ConfidenceModelMapping(_LazyAutoMapping):
    """transformers' lazy config -> model mapping, resolving model names in `elical_hf.models.modeling`."""

    def _load_attr_from_module(self, model_type: str, attr: str) -> Any:
        if MODEL_FOR_CONFIDENCE_MAPPING_NAMES.get(model_type) == attr:
            return confidence_class_for(model_type)
        return super()._load_attr_from_module(model_type, attr)


MODEL_FOR_CONFIDENCE_MAPPING = _ConfidenceModelMapping(CONFIG_MAPPING_NAMES, MODEL_FOR_CONFIDENCE_MAPPING_NAMES)


class PeftModelForConfidence(PeftModel):
    """
    A [`~peft.PeftModel`] around a confidence model whose `save_pretrained` also writes the tokenizer and the
    [`ConfidenceConfig`], records the base model's Hub id, and never leaves a half-written folder that loads.

    Everything else (`confidence()`, `forward`, `confidence_config`, `tokenizer`) is the wrapped model's.
    """

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> None:
        save_directory = os.fspath(save_directory)
        marker = os.path.join(save_directory, CONFIDENCE_CONFIG_NAME)
        if kwargs.get("is_main_process", True):  # other processes of a distributed run only join the gathers
            os.makedirs(save_directory, exist_ok=True)
            if os.path.exists(marker):  # invalidate first: a crash below must not leave old marker + new weights
                os.remove(marker)
        inner = self.get_base_model()
        for peft_config in self.peft_config.values():
            peft_config.base_model_name_or_path = inner.confidence_config.base_model_name_or_path
        kwargs.setdefault("save_embedding_layers", False)  # embeddings stay frozen: never copy them
        super().save_pretrained(save_directory, **kwargs)
        if kwargs.get("is_main_process", True):
            if inner.tokenizer is not None:
                inner.tokenizer.save_pretrained(save_directory)
            umask_permissions(save_directory)  # adapter_model.safetensors is written 0600 by safetensors
            inner.confidence_config.save_pretrained(save_directory)

    def load_adapter(self, model_id: str | os.PathLike, adapter_name: str, *args: Any, **kwargs: Any) -> Any:
        """PEFT's `load_adapter`, once a local `adapter_model.safetensors` is found to hold exactly this adapter's
        tensors (its LoRA and head), in their shapes, all finite: one `ValueError` naming the file otherwise
        ([`~elical_hf.utils.loading.check_file_tensors`]). PEFT would leave a LoRA tensor the file lacks freshly drawn
        (with only a warning), and fail with a `KeyError` or `RuntimeError` traceback on a missing or misshapen head."""
        from peft.utils import get_peft_model_state_dict

        file = os.path.join(os.fspath(model_id), kwargs.get("subfolder") or "", SAFETENSORS_WEIGHTS_NAME)
        if adapter_name in self.peft_config and os.path.isfile(file):
            expected = get_peft_model_state_dict(self, adapter_name=adapter_name, save_embedding_layers=False)
            check_file_tensors(file, {key: tensor.shape for key, tensor in expected.items()}, owner="the adapter",
                               finite=True, advice="the confidence model loaded from it is not the one saved (PEFT "
                                                   "draws a LoRA tensor it lacks afresh). Copy the saved model again, or "
                                                   "save it again.")
        return super().load_adapter(model_id, adapter_name, *args, **kwargs)

    def create_or_update_model_card(self, output_dir: str) -> None:
        """Called by PEFT's `save_pretrained`: writes the elical-hf card (`model_cards/`), not PEFT's generic one."""
        write_model_card(self, output_dir)

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Publish this model to the Hub in one commit; see [`elical_hf.push_model`] for the arguments."""
        from ..publishing.hub import push_model

        return push_model(self, repo_id, **kwargs)

    @property
    def uses_lora(self) -> bool:
        """`False` for a model without LoRA (`ConfidenceConfig.use_lora`): only its head ever trains, on the frozen
        backbone's own hidden states."""
        config = self.get_base_model().confidence_config
        return config is None or config.use_lora

    def trainable_parts(self) -> dict[str, list[Any]]:
        """The LoRA and head parameters, by part (`"lora"`, `"head"`)."""
        parts: dict[str, list[Any]] = {"lora": [], "head": []}
        for name, parameter in self.named_parameters():
            if "lora_" in name:
                parts["lora"].append(parameter)
            elif f"{HEAD_MODULE}.modules_to_save" in name:
                parts["head"].append(parameter)
        return parts

    def set_trainable(self, lora: bool, head: bool = True) -> None:
        """Freeze or unfreeze the LoRA weights and the head; the backbone always stays frozen, and so does the LoRA of
        a model without LoRA ([`uses_lora`])."""
        parts = self.trainable_parts()
        for parameter in parts["lora"]:
            parameter.requires_grad_(lora and self.uses_lora)
        for parameter in parts["head"]:
            parameter.requires_grad_(head)


class AutoModelForConfidence(_BaseAutoModelClass):
    r"""
    Builds a confidence model (frozen backbone + LoRA + head, linear by default) from a base causal LM, or reloads a
    saved one.

    Examples:

    ```python
    >>> from elical_hf import AutoModelForConfidence
    >>> model = AutoModelForConfidence.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")  # fresh LoRA + head
    >>> model.save_pretrained("my-confidence-model")
    >>> model = AutoModelForConfidence.from_pretrained("my-confidence-model")  # the same model back
    >>> model.confidence(["Who wrote Hamlet?"])
    ```
    """

    _model_mapping = MODEL_FOR_CONFIDENCE_MAPPING

    @classmethod
    def register(cls, config_class: type, model_class: type, exist_ok: bool = False) -> None:
        """Map a backbone config class to a confidence model class (e.g. a subclass of `ForConfidenceMixin`)."""
        if config_class in cls._model_mapping and not exist_ok:
            raise ValueError(f"{config_class.__name__} already has a confidence model; pass exist_ok=True to replace it.")
        # transformers silently ignores its own config classes unless exist_ok=True.
        super().register(config_class, model_class, exist_ok=True)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike,
        *,
        peft_config: LoraConfig | None = None,
        lora_r: int = 8,
        lora_alpha: int = 16,
        lora_dropout: float = 0.0,
        target_modules: list[str] | None = None,
        confidence_config: ConfidenceConfig | None = None,
        use_lora: bool | None = None,
        head_type: str | None = None,
        head_init: str | None = None,
        feature_layer: int | None = None,
        base_model_name_or_path: str | None = None,
        is_trainable: bool = False,
        load_in_4bit: bool = False,
        **kwargs: Any,
    ) -> PeftModelForConfidence:
        r"""
        Load a confidence model.

        Args:
            pretrained_model_name_or_path (`str` or `os.PathLike`):
                Either a base causal LM (Hub id or folder) — a fresh LoRA + head is added — or a confidence model
                saved with `save_pretrained` (folder or Hub repo with `confidence_config.json`), loaded as saved.
            peft_config ([`~peft.LoraConfig`], *optional*):
                Full LoRA config for a fresh model; overrides the `lora_*` shortcuts.
            lora_r (`int`, *optional*, defaults to 8), lora_alpha (`int`, *optional*, defaults to 16),
            lora_dropout (`float`, *optional*, defaults to 0.0):
                LoRA settings of a fresh model (the paper's).
            target_modules (`list[str]`, *optional*):
                Modules to adapt; defaults to every linear layer of the backbone.
            confidence_config ([`ConfidenceConfig`], *optional*):
                Prompt template and pooling of a fresh model.
            use_lora (`bool`, *optional*):
                `False` builds a fresh model without LoRA (recorded as `confidence_config.use_lora`): stage 1 and 2
                train only the head, on the frozen backbone's hidden states, and `model.answer` then reads the
                confidence from the prefill that starts the answer (the gate's zero-overhead mode). PEFT needs one
                adapted module, so the model carries a rank-1 LoRA on one projection that is zero, frozen and switched
                off. Defaults to `confidence_config.use_lora` (`True`).
            head_type (`str`, *optional*):
                The head of a fresh model: `"linear"` (the paper's) or `"mlp"` (the reference code's no-LoRA head);
                recorded as `confidence_config.head_type`. Defaults to `confidence_config.head_type` (`"linear"`).
            head_init (`str`, *optional*):
                How a fresh head is drawn: `"normal"` (transformers' N(0, 0.02)) or `"torch_default"` (PyTorch's
                uniform +-1/sqrt(fan_in), as the reference code's `nn.Linear`); recorded as
                `confidence_config.head_init`. Defaults to `confidence_config.head_init` (`"normal"`). A saved model
                keeps its trained head: for one, either option may only repeat what it was saved with.
            feature_layer (`int`, *optional*):
                The hidden state the head of a fresh model reads ([`ConfidenceConfig.feature_layer`]: `i` is
                `hidden_states[i]` of transformers' `output_hidden_states`, the residual stream after block `i` without
                the final norm, and `num_hidden_layers` the final, normed state; `-8` counts from the end). Recorded
                as `confidence_config.feature_layer` (its index from 1); scoring and training then run only the blocks
                up to it, and the LoRA adapts only those blocks (`layers_to_transform`; a `peft_config` that adapts a
                later block is refused). Out of range: one `ValueError` naming the valid range. Defaults to
                `confidence_config.feature_layer` (the final layer, the paper's). For a saved model it may only repeat
                the layer it was saved with.
            base_model_name_or_path (`str`, *optional*):
                For a saved model: load its adapter onto this base instead, a local folder with a copy of the model
                it was trained on. Refused when it is another Hub model, or when its architecture differs.
            is_trainable (`bool`, *optional*, defaults to `False`):
                For a saved model: keep the adapter trainable.
            load_in_4bit (`bool`, *optional*, defaults to `False`):
                Load the frozen backbone in 4 bits (QLoRA: NF4, double quantization, [`four_bit_config`]) on the
                current CUDA device, computing in `dtype`; LoRA and head stay in full precision. For 7B-class
                backbones on one GPU. Needs bitsandbytes and a CUDA GPU (a clear error otherwise).
            kwargs:
                Passed to the backbone's `from_pretrained` (`dtype`, `attn_implementation`, `revision`, ...). `dtype`
                defaults to `"auto"`, which here means the library's precision policy
                ([`~elical_hf.settings.precision.resolve_dtype`]: bf16 on GPUs that support it and on CPUs where bf16 is
                native and faster, float32 on other CPUs), not the checkpoint's dtype. No code from the folder or repo
                is ever run and only safetensors weights are read ([`~elical_hf.utils.loading.load_pretrained`]), so
                `trust_remote_code=True` and `use_safetensors=False` are refused.
        """
        name = os.fspath(pretrained_model_name_or_path)
        hub_kwargs = {key: kwargs[key] for key in HUB_KWARGS if key in kwargs}
        if load_in_4bit:
            check_four_bit_support()  # before anything is read or loaded
            kwargs["load_in_4bit"] = True
        if looks_local(name) and not os.path.exists(name):  # never looked up on the Hub (or its cache)
            raise FileNotFoundError(2, "No such model folder", name)
        saved = find_saved_model(name, **hub_kwargs)
        if saved is not None:
            return cls._from_saved(saved, base_model_name_or_path, is_trainable, head_type=head_type,
                                   head_init=head_init, feature_layer=feature_layer, **kwargs)
        if os.path.isfile(os.path.join(name, "adapter_config.json")):
            raise ValueError(
                f"{name} holds an adapter but no {CONFIDENCE_CONFIG_NAME}: it is not a complete confidence model "
                "(an interrupted save, or a plain PEFT adapter; see `elical-hf convert-official` for the paper's)."
            )
        if os.path.isdir(name) and not os.path.isfile(os.path.join(name, "config.json")):
            raise ValueError(
                f"{name} is neither a confidence model (no {CONFIDENCE_CONFIG_NAME}) nor a base model (no config.json)"
                + (": it holds only the checkpoints of an interrupted `elical-hf train` stage; rerun the same command to "
                   "resume it." if os.path.isdir(os.path.join(name, "checkpoints")) else ".")
            )
        confidence_config = confidence_config or ConfidenceConfig()
        if use_lora is not None:
            confidence_config.use_lora = use_lora
        for option, value in (("head_type", head_type), ("head_init", head_init), ("feature_layer", feature_layer)):
            if value is not None:
                setattr(confidence_config, option, value)
        confidence_config.__post_init__()  # checks the head options set here
        model = cls._load_base(name, confidence_config, **kwargs)
        # Only the blocks up to the feature layer run, so only they get a LoRA (blocks are counted from 0).
        layer = model.feature_layer_index
        below = {} if layer == num_layers(getattr(model, model.base_model_prefix)) else {
            "layers_to_transform": list(range(layer)), "layers_pattern": "layers"}
        if not confidence_config.use_lora:
            if peft_config is not None:
                raise ValueError("`peft_config` configures LoRA, but this model is built without LoRA (use_lora=False).")
            # PEFT adapts at least one module: a rank-1 LoRA on one projection, zero at init and never trained.
            peft_config = LoraConfig(r=1, lora_alpha=1, target_modules=default_lora_targets(model)[:1],
                                     modules_to_save=[HEAD_MODULE], **below)
        if peft_config is None:
            peft_config = LoraConfig(
                r=lora_r,
                lora_alpha=lora_alpha,
                lora_dropout=lora_dropout,
                bias="none",
                target_modules=target_modules or default_lora_targets(model),
                modules_to_save=[HEAD_MODULE],
                **below,
            )
        else:
            if HEAD_MODULE not in (peft_config.modules_to_save or []):
                peft_config.modules_to_save = [*(peft_config.modules_to_save or []), HEAD_MODULE]
            listed = not isinstance(peft_config.target_modules, str)  # PEFT takes layers only with listed modules
            if below and listed and peft_config.layers_to_transform is None:
                peft_config.layers_to_transform, peft_config.layers_pattern = below["layers_to_transform"], "layers"
        built = PeftModelForConfidence(model, peft_config)
        check_lora_blocks(built)
        return switch_off_unused_lora(built)

    @classmethod
    def _load_base(cls, name: str, confidence_config: ConfidenceConfig, fresh_head: bool = True, **kwargs: Any) -> Any:
        """Backbone + head (`confidence_config.head_type`) as the architecture's `XForConfidence`, with its tokenizer
        attached; the head is drawn by `confidence_config.head_init` when `fresh_head` (else trained weights follow)."""
        path, source = resolve_model_path(name, revision=kwargs.get("revision"))
        recorded = name
        if source == "local":  # a Hub cache snapshot or the dequantized embedded default: record its Hub id
            recorded, source = hub_id_of_local_copy(path) or (os.path.abspath(path), source)
        hub_kwargs = {key: kwargs[key] for key in HUB_KWARGS if key in kwargs}
        config = load_pretrained(AutoConfig.from_pretrained, path, **hub_kwargs)
        if type(config) not in cls._model_mapping:  # a decoder not listed: the generic class, or why not
            cls.register(type(config), confidence_class_for(config.model_type))
        if fresh_head:  # a new model records its layer's index (out of range: refused before any weight is read)
            confidence_config.feature_layer = resolve_feature_layer(
                confidence_config.feature_layer, config.get_text_config().num_hidden_layers)
        four_bit = kwargs.pop("load_in_4bit", False)
        if four_bit:
            kwargs.setdefault("device_map", {"": torch.cuda.current_device()})
        device_map = kwargs.get("device_map")
        device = device_map if isinstance(device_map, (str, torch.device)) and device_map != "auto" else None
        kwargs["dtype"] = resolve_dtype(kwargs.get("dtype"), "cuda" if four_bit else device)
        if four_bit:
            kwargs["quantization_config"] = four_bit_config(kwargs["dtype"])
        model = load_model(cls._model_mapping[type(config)], path, config=config, **kwargs)
        if four_bit:
            from peft import prepare_model_for_kbit_training

            # PEFT's k-bit recipe: the backbone frozen, its norms in float32; checkpointing is the Trainer's option.
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        model.reset_confidence_head(confidence_config.head_type, confidence_config.head_init if fresh_head else None)
        model.confidence_head.float()  # the head stays float32 whatever the backbone's dtype
        model.config._name_or_path = recorded  # cards and adapter configs name the Hub id, not a local cache path
        model.tokenizer = load_tokenizer(path, **hub_kwargs)
        confidence_config.base_model_name_or_path = recorded
        confidence_config.base_model_signature = backbone_signature(model.config)
        confidence_config.base_weights_source = source
        if confidence_config.max_length is None:  # a new model: its backbone's own context length
            confidence_config.max_length = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        if confidence_config.chat_template_kwargs is None:  # a new model: what its template needs (Qwen3: no thinking)
            confidence_config.chat_template_kwargs = chat_template_kwargs_for(model.tokenizer) or None
        if fresh_head:  # a saved model is checked with its own tokenizer ([`_from_saved`])
            confidence_config.check_renders_question(model.tokenizer, name)
        model.confidence_config = confidence_config
        return model

    @classmethod
    def _from_saved(
        cls, folder: str, base_model_name_or_path: str | None, is_trainable: bool, head_type: str | None = None,
        head_init: str | None = None, feature_layer: int | None = None, **kwargs: Any
    ) -> PeftModelForConfidence:
        saved_config = ConfidenceConfig.from_json_file(os.path.join(folder, CONFIDENCE_CONFIG_NAME))
        for option, value in (("head_type", head_type), ("head_init", head_init)):
            if value is not None and value != getattr(saved_config, option):
                raise ValueError(f"{folder} holds a trained model with {option}={getattr(saved_config, option)!r}; "
                                 f"{option}={value!r} applies to a fresh head only.")
        missing = [name for name in ("adapter_config.json", SAFETENSORS_WEIGHTS_NAME)
                   if not os.path.isfile(os.path.join(folder, name))]
        if missing:  # PEFT would look them up on the Hub, under the folder's path
            raise ValueError(
                f"{folder} holds {CONFIDENCE_CONFIG_NAME} but no {' and no '.join(missing)}: an incomplete copy of a "
                "saved confidence model (its adapter was not copied, or was deleted). Copy the whole folder again, or "
                "save the model again."
            )
        trained_on = saved_config.base_model_name_or_path or PeftConfig.from_pretrained(folder).base_model_name_or_path
        base = base_of_saved_model(folder, trained_on, base_model_name_or_path)
        loading_config = ConfidenceConfig.from_dict(saved_config.to_dict())
        kwargs.pop("revision", None)  # the revision of the adapter's repo, not of the base model's
        model = cls._load_base(base, loading_config, fresh_head=False, **kwargs)
        check_loaded_base(folder, saved_config, loading_config, base)
        if feature_layer is not None and resolve_feature_layer(
                feature_layer, num_layers(getattr(model, model.base_model_prefix))) != model.feature_layer_index:
            raise ValueError(f"{folder} holds a trained model that reads layer {model.feature_layer_index}; "
                             f"feature_layer={feature_layer} applies to a fresh model only.")
        # What the adapter was trained with wins; only the provenance of this load's weights is new.
        saved_config.base_weights_source = loading_config.base_weights_source
        model.confidence_config = saved_config
        base_tokenizer = model.tokenizer
        model.tokenizer = load_tokenizer(folder, fallback=base_tokenizer)  # the adapter's own, else the base's
        check_saved_chat_template(folder, saved_config, base_tokenizer, model.tokenizer, base)
        saved_config.check_renders_question(model.tokenizer, folder)
        model.model_card_data = ConfidenceModelCardData.from_folder(folder)  # evaluations etc. of the saved card
        try:
            loaded = PeftModelForConfidence.from_pretrained(model, folder, is_trainable=is_trainable)
        except SafetensorError as error:  # a truncated or corrupt weights file: say which one
            raise ValueError(
                f"{os.path.join(folder, SAFETENSORS_WEIGHTS_NAME)} is corrupt or truncated ({error}); save the model "
                "again, or download it again."
            ) from None
        check_lora_blocks(loaded)  # a hand-edited adapter_config.json could adapt blocks that never run
        return switch_off_unused_lora(loaded)


def check_lora_blocks(model: PeftModelForConfidence) -> None:
    """Refuse (one `ValueError`) a model with a LoRA on a decoder block past its feature layer: that block never runs
    when the model scores or trains ([`~elical_hf.models.modeling.ForConfidenceMixin.pooled_hidden_state`])."""
    inner = model.get_base_model()
    layer, backbone = inner.feature_layer_index, getattr(inner, inner.base_model_prefix)
    if layer < num_layers(backbone):
        past = [index for index in blocks_with_lora(backbone) if index >= layer]
        if past:
            raise ValueError(
                f"The LoRA adapts decoder block(s) {', '.join(map(str, past))} (from 0), past feature layer {layer}: "
                f"they never run when scoring. Adapt only blocks 0..{layer - 1} (`layers_to_transform` with a list of "
                "`target_modules`), or leave `peft_config` out."
            )


def check_feature_layer(name: str, feature_layer: int | None, **hub_kwargs: Any) -> int:
    """The index (from 1) `feature_layer` names in the base model `name`, read from its config alone (no weights);
    one `ValueError` line naming the valid range when it is out of range: a check to run before any work."""
    path, _ = resolve_model_path(name, revision=hub_kwargs.get("revision"))
    config = load_pretrained(AutoConfig.from_pretrained, path, **hub_kwargs)
    return resolve_feature_layer(feature_layer, config.get_text_config().num_hidden_layers)


def switch_off_unused_lora(model: PeftModelForConfidence) -> PeftModelForConfidence:
    """For a model without LoRA ([`PeftModelForConfidence.uses_lora`]): freeze its placeholder LoRA and switch its
    layers off, so the backbone computes exactly the base model (and no LoRA branch runs). Returns `model`."""
    if not model.uses_lora:
        from peft.tuners.lora import LoraLayer

        for module in model.modules():
            if isinstance(module, LoraLayer):
                module.enable_adapters(False)
        model.set_trainable(lora=False, head=any(p.requires_grad for p in model.trainable_parts()["head"]))
    return model
