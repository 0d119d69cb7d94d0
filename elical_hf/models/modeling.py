"""Confidence models: a causal LM backbone (no LM head) plus `Linear(hidden, 1)` + sigmoid on the last prompt token
(or a small MLP head, `ConfidenceConfig.head_type="mlp"`; [`build_confidence_head`]).

One generic implementation, [`ForConfidenceMixin`], serves every architecture: `LlamaForConfidence`,
`Qwen2ForConfidence`, ... are two-line subclasses built on first use from the architecture's `PreTrainedModel`
(exactly how transformers builds `LlamaForSequenceClassification` from `GenericForSequenceClassification`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from transformers import AutoModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.utils import ModelOutput

from ..settings.configuration import ConfidenceConfig, resolve_feature_layer
from .feature_layer import idle_adapters_off, num_layers, stop_after_layer
from .kv_prefix import cache_kwarg, position_ids_from_attention_mask, prefill_shared_prefix
from ..settings.prompts import shared_prefix_length


# model_type -> name of the architecture's `PreTrainedModel` in `transformers`.
CONFIDENCE_BACKBONES: dict[str, str] = {
    "llama": "LlamaPreTrainedModel",
    "mistral": "MistralPreTrainedModel",
    "qwen2": "Qwen2PreTrainedModel",
    "qwen3": "Qwen3PreTrainedModel",
    "gemma": "GemmaPreTrainedModel",
    "gemma2": "Gemma2PreTrainedModel",
    "gemma3_text": "Gemma3PreTrainedModel",
    "phi3": "Phi3PreTrainedModel",
    "olmo2": "Olmo2PreTrainedModel",
    "granite": "GranitePreTrainedModel",
}


# Padded prompt tokens (past the shared prefix) per scoring pass: on a 2-core CPU a pass of 32 prompts padded to 98
# new tokens ran 3-4x slower per token than passes of ~800 tokens (activations past the cache); docs/benchmarks.md.
PROMPT_BATCH_TOKENS = 768

UNKNOWN_CONFIDENCE_CONFIG = (
    "This confidence model has no confidence_config: it was built by the architecture class's `from_pretrained` (as "
    "`peft.AutoPeftModel.from_pretrained` does), which does not read the saved folder's confidence_config.json, so "
    "the prompt template it was trained with is unknown and its confidences would be meaningless. Load it with "
    "`elical_hf.AutoModelForConfidence.from_pretrained(folder)`, or set `confidence_config = "
    "ConfidenceConfig.from_json_file(<folder>/confidence_config.json)` (and `tokenizer`) on the inner model "
    "(`get_base_model()`)."
)


@dataclass
class ConfidenceModelOutput(ModelOutput):
    """
    Output of a confidence model.

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `labels` are given):
            Mean squared error between `confidence` and `labels` (summed and divided by `num_items_in_batch` when the
            Trainer passes it, so gradient accumulation is exact).
        confidence (`torch.FloatTensor` of shape `(batch_size,)`):
            Probability, in [0, 1], that the model answers the question correctly.
        logits (`torch.FloatTensor` of shape `(batch_size,)`):
            The head's output before the sigmoid.
    """

    loss: torch.FloatTensor | None = None
    confidence: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None


def last_token_indices(attention_mask: torch.Tensor) -> torch.LongTensor:
    """Index of the last real (mask == 1) token of each row; works for left and right padding alike."""
    mask = attention_mask.bool()
    if not bool(mask.any(dim=-1).all()):
        raise ValueError("Every row needs at least one token with attention_mask == 1.")
    positions = torch.arange(1, mask.shape[-1] + 1, device=mask.device)
    return (mask * positions).argmax(dim=-1)


def build_confidence_head(hidden_size: int, head_type: str = "linear") -> nn.Module:
    """The head that maps a pooled hidden state to one logit: `"linear"`, `Linear(hidden_size, 1)`, or `"mlp"`,
    `hidden_size -> hidden_size // 2 -> hidden_size // 4 -> 1` with ReLU between (the reference code's no-LoRA head).
    Its weights are PyTorch's default draw; [`initialize_confidence_head`] draws them otherwise."""
    if head_type == "linear":
        return nn.Linear(hidden_size, 1)
    if head_type == "mlp":
        if hidden_size < 4:
            raise ValueError(f"An MLP head needs hidden_size >= 4, got {hidden_size}.")
        return nn.Sequential(nn.Linear(hidden_size, hidden_size // 2), nn.ReLU(),
                             nn.Linear(hidden_size // 2, hidden_size // 4), nn.ReLU(), nn.Linear(hidden_size // 4, 1))
    raise ValueError(f"Unknown head_type {head_type!r}; expected 'linear' or 'mlp'.")


def initialize_confidence_head(head: nn.Module, head_init: str, std: float = 0.02) -> None:
    """Draw a fresh head's weights in place: `"normal"`, every `Linear`'s weight from N(0, `std`) and bias 0 (what
    transformers' `_init_weights` does); `"torch_default"`, `nn.Linear.reset_parameters` (uniform in
    +-1/sqrt(fan_in), weights and biases)."""
    for module in head.modules():
        if isinstance(module, nn.Linear):
            if head_init == "torch_default":
                module.reset_parameters()
            elif head_init == "normal":
                nn.init.normal_(module.weight, mean=0.0, std=std)
                nn.init.zeros_(module.bias)
            else:
                raise ValueError(f"Unknown head_init {head_init!r}; expected 'normal' or 'torch_default'.")


class ForConfidenceMixin:
    """
    Generic confidence model. Combined with an architecture's `PreTrainedModel` it loads the backbone weights of any
    causal-LM checkpoint of that architecture (the LM head is dropped) and adds a freshly initialised head.

    Attributes:
        confidence_config ([`ConfidenceConfig`]): prompt template, pooling and provenance. `None` (unknown: scoring
            refuses) after the class's own `from_pretrained`, until a loader sets it: [`AutoModelForConfidence`] does.
        tokenizer: the tokenizer used by [`~ForConfidenceMixin.confidence`] when none is passed.
    """

    base_model_prefix = "model"
    accepts_loss_kwargs = True
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\.", r"\.lm_head\."]
    _keys_to_ignore_on_load_missing = [r"confidence_head\."]  # a fresh head is expected when loading a base LM
    _tied_weights_keys: dict[str, str] = {}

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        setattr(self, self.base_model_prefix, AutoModel.from_config(config))
        self.confidence_head = build_confidence_head(config.get_text_config().hidden_size)
        self.confidence_config = ConfidenceConfig()
        self.tokenizer = None
        self.post_init()

    @property
    def feature_layer_index(self) -> int:
        """The hidden state the head reads, from 1 to the backbone's `num_hidden_layers` (the final layer, after the
        final norm): `confidence_config.feature_layer` resolved ([`~elical_hf.settings.configuration.ConfidenceConfig.
        feature_layer`]); the final layer while the config is unknown."""
        layers = num_layers(getattr(self, self.base_model_prefix))
        return layers if self.confidence_config is None else self.confidence_config.feature_layer_index(layers)

    @property
    def confidence_head_dtype(self) -> torch.dtype:
        """The dtype of the head's weights (float32 for models built by [`AutoModelForConfidence`])."""
        return next(self.confidence_head.parameters()).dtype

    def reset_confidence_head(self, head_type: str = "linear", head_init: str | None = "normal") -> None:
        """Give the model the head `head_type` ([`build_confidence_head`]), drawn by `head_init`
        ([`initialize_confidence_head`]); `head_init=None` for a head whose trained weights are loaded next. The
        linear head transformers initialised on load is kept as it is for `"linear"` + `"normal"` (its draw is that)."""
        if head_type == "linear" and isinstance(self.confidence_head, nn.Linear):
            if head_init not in (None, "normal"):
                initialize_confidence_head(self.confidence_head, head_init)
            return
        place, text_config = next(self.confidence_head.parameters()), self.config.get_text_config()
        head = build_confidence_head(text_config.hidden_size, head_type)
        if head_init is not None:
            initialize_confidence_head(head, head_init, getattr(text_config, "initializer_range", 0.02))
        self.confidence_head = head.to(device=place.device, dtype=place.dtype)

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """transformers' `from_pretrained`, with `confidence_config` left unknown (`None`): the backbone checkpoint
        does not say which template a saved adapter was trained with (see [`UNKNOWN_CONFIDENCE_CONFIG`])."""
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).confidence_config = None  # tuple: output_loading_info
        return loaded

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        **kwargs: Any,
    ) -> ConfidenceModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids of the rendered question prompts (left or right padded).
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding. Defaults to all ones.
            labels (`torch.Tensor` of shape `(batch_size,)`, *optional*):
                Targets in [0, 1] (consistency in elicitation, share of correct samples in calibration).
            position_ids (`torch.LongTensor`, *optional*):
                Defaults to positions counted over real tokens only.
            num_items_in_batch (`int` or `torch.Tensor`, *optional*):
                Number of labelled rows in the whole accumulated batch; when given the loss is the sum of squared
                errors divided by it.
        """
        pooled = self.pooled_hidden_state(input_ids, attention_mask, position_ids, inputs_embeds, **kwargs)
        logits = self.confidence_head(pooled.to(self.confidence_head_dtype)).squeeze(-1).float()
        confidence = torch.sigmoid(logits)

        loss = None
        if labels is not None:
            squared_error = (confidence - labels.to(confidence.device, torch.float32)) ** 2
            if num_items_in_batch is not None:
                loss = squared_error.sum() / num_items_in_batch
            else:
                loss = squared_error.mean()
        return ConfidenceModelOutput(loss=loss, confidence=confidence, logits=logits)

    share_prompt_prefix = True
    """Run the token prefix that every row of a batch shares (the chat template and instruction of the question
    prompt) once per batch and share its KV cache, in training as in scoring; see [`pooled_hidden_state`]."""

    def pooled_hidden_state(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        layer: int | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """Hidden state of the last real prompt token of each row at the feature layer, shape `(batch_size,
        hidden_size)`: what the confidence head reads. Arguments as in `forward`, and `layer`: another hidden state to
        read, indexed as [`~elical_hf.settings.configuration.ConfidenceConfig.feature_layer`] (`hidden_states[layer]` of
        transformers' `output_hidden_states`; negative counts from the end); `None`, the model's
        ([`feature_layer_index`]). Only the decoder blocks up to that layer run
        ([`~elical_hf.models.feature_layer.stop_after_layer`]).

        When the rows' real tokens start with the same `MIN_SHARED_PREFIX` or more tokens (every question prompt
        starts with the chat template and the instruction), that prefix runs once for the batch and its KV cache is
        shared by all rows (gradients flow through it): the same positions and attention as a full forward pass,
        equal up to floating-point rounding, for about half the tokens of a typical question prompt. Not used with
        `inputs_embeds`, explicit `position_ids`, extra backbone arguments or gradient checkpointing."""
        reference = input_ids if input_ids is not None else inputs_embeds
        if attention_mask is None:
            attention_mask = torch.ones(reference.shape[:2], dtype=torch.long, device=reference.device)
        kwargs.pop("use_cache", None)
        backbone = getattr(self, self.base_model_prefix)
        layer = self.feature_layer_index if layer is None else resolve_feature_layer(layer, num_layers(backbone))
        with stop_after_layer(backbone, layer):
            return self._pooled(backbone, input_ids, attention_mask, position_ids, inputs_embeds, **kwargs)

    def _pooled(
        self, backbone: Any, input_ids: torch.LongTensor | None, attention_mask: torch.Tensor,
        position_ids: torch.LongTensor | None, inputs_embeds: torch.Tensor | None, **kwargs: Any,
    ) -> torch.Tensor:
        """[`pooled_hidden_state`] at whatever the backbone computes as its last hidden state."""
        plain = inputs_embeds is not None or position_ids is not None or kwargs or input_ids.shape[0] < 2
        if self.share_prompt_prefix and not plain and not getattr(backbone, "gradient_checkpointing", False):
            sequences = [row[mask].tolist() for row, mask in zip(input_ids, attention_mask.bool())]
            shared = shared_prefix_length(sequences)
            if shared:
                return self._pooled_with_shared_prefix(backbone, sequences, shared)
        if position_ids is None:
            position_ids = position_ids_from_attention_mask(attention_mask)
        backbone_output = backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=False,
            **kwargs,
        )
        hidden = backbone_output.last_hidden_state
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return hidden[rows, last_token_indices(attention_mask).to(hidden.device)]

    def _pooled_with_shared_prefix(self, backbone: Any, sequences: list[list[int]], shared: int) -> torch.Tensor:
        """The prefix `sequences[0][:shared]` once, its cache repeated for every row, then each row's rest
        (right-padded; pad slots are masked, so their id does not matter): [`~elical_hf.models.kv_prefix.
        prefill_shared_prefix`]."""
        name = cache_kwarg(backbone)

        def run(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, cache: Any) -> Any:
            return backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=True, **{name: cache}).last_hidden_state

        prefill = prefill_shared_prefix(run, sequences, shared, self.config, self.device, padding_side="right")
        hidden, mask = prefill.output, prefill.attention_mask[:, shared:]
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return hidden[rows, last_token_indices(mask).to(hidden.device)]

    @torch.inference_mode()
    def confidence(
        self,
        questions: Sequence[str] | str,
        batch_size: int = 16,
        tokenizer: Any | None = None,
        progress: bool = False,
        prompt_template: str | None = None,
    ) -> list[float]:
        """
        Confidence, before answering, that the model answers each question correctly.

        The questions are rendered with the saved [`ConfidenceConfig`] (the same template used in training).

        Args:
            questions (`list[str]` or `str`):
                Raw questions (the template adds the instruction and chat markup).
            batch_size (`int`, *optional*, defaults to 16):
                At most this many questions per forward pass (fewer for long prompts: a pass holds at most
                `PROMPT_BATCH_TOKENS` padded tokens past the shared prompt prefix).
            tokenizer (*optional*):
                Defaults to the tokenizer loaded with the model.
            progress (`bool`, *optional*, defaults to `False`):
                Show a progress bar.
            prompt_template (`str`, *optional*):
                Read the questions with this prompt instead of the saved one, the rest of the saved prompt settings
                (chat template, system prompt, tail) kept: e.g. [`~elical_hf.settings.prompts.MULTIPLE_CHOICE_PROMPT`]
                for multiple-choice questions, as the paper reads MMLU with a model trained on free-form questions.

        Returns:
            `list[float]`: one confidence in [0, 1] per question, in input order.
        """
        def head(pooled: torch.Tensor) -> torch.Tensor:
            logits = self.confidence_head(pooled.to(self.confidence_head_dtype)).squeeze(-1).float()
            return torch.sigmoid(logits)

        outputs = self._map_prompts(questions, head, batch_size, tokenizer, progress, prompt_template=prompt_template)
        return torch.cat(outputs).tolist() if outputs else []

    def answer(self, questions: Sequence[str] | str, **kwargs: Any) -> list[dict[str, Any]]:
        """
        Decide for each question, before answering, whether to answer, retrieve or abstain (the saved
        `decision_threshold` / `retrieve_threshold`, or those of the question's `domain`), and answer with the
        *unadapted* base model when it says so.

        Arguments as in [`~elical_hf.gate.answer_questions`] (`threshold`, `retrieve_threshold`, `domain`: one domain
        or one per question, `retrieve`, `settings`, `max_new_tokens`, `batch_size`, `progress`).

        Returns:
            `list[dict]`: per question `question`, `confidence`, `decision`, `answer` (or `None`) and `context`.
        """
        from ..gate import answer_questions

        return answer_questions(self, questions, **kwargs)

    @torch.no_grad()  # not inference_mode: the features are meant to enter autograd as a head's inputs
    def prompt_features(
        self,
        questions: Sequence[str] | str,
        batch_size: int = 16,
        tokenizer: Any | None = None,
        progress: bool = False,
        layer: int | None = None,
        prompt_template: str | None = None,
    ) -> torch.Tensor:
        """
        What the confidence head reads for each question: the hidden state of the last prompt token at the feature
        layer, as a float32 tensor of shape `(len(questions), hidden_size)` on the CPU. With a frozen backbone these
        features do not change while only the head trains, which [`~elical_hf.training.head_calibration.calibrate_head`]
        uses.

        Arguments as in [`~ForConfidenceMixin.confidence`], and `layer`: another hidden state to read (as in
        [`pooled_hidden_state`]: an index of transformers' `output_hidden_states`, negative from the end; only the
        blocks up to it run); `None`, the model's own ([`feature_layer_index`]).
        """
        outputs = self._map_prompts(questions, lambda pooled: pooled.float().cpu(), batch_size, tokenizer, progress,
                                    layer, prompt_template)
        return torch.cat(outputs) if outputs else torch.zeros(0, self.config.get_text_config().hidden_size)

    def _map_prompts(
        self, questions: Sequence[str] | str, fn: Any, batch_size: int, tokenizer: Any | None, progress: bool,
        layer: int | None = None, prompt_template: str | None = None,
    ) -> list[torch.Tensor]:
        """Render (with `prompt_template` in place of the saved one, when given), tokenize and batch `questions`
        (longest first), apply `fn` to each batch's pooled hidden states at `layer` (eval mode); `[]` for no
        questions, else one tensor of `fn`'s rows in input order, in a list."""
        from tqdm.auto import tqdm

        from ..data.encoding import encode_prompts, length_batches, pad_batch

        if self.confidence_config is None:
            raise ValueError(UNKNOWN_CONFIDENCE_CONFIG)
        if isinstance(questions, str):
            questions = [questions]
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
        if layer is not None:  # refused before any question is encoded
            resolve_feature_layer(layer, num_layers(getattr(self, self.base_model_prefix)))
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        if tokenizer is None:
            raise ValueError("No tokenizer: pass `tokenizer=` or load the model with `AutoModelForConfidence`.")
        if not questions:
            return []
        config = self.confidence_config
        if prompt_template is not None:
            config = replace(config, prompt_template=prompt_template)
        encoded = encode_prompts(list(questions), tokenizer, config)
        # Prompts of similar length batch together (little padding), within a token budget; the outputs come back
        # in input order.
        shared = shared_prefix_length(encoded) if self.share_prompt_prefix else 0
        batches = length_batches([len(ids) for ids in encoded], batch_size, PROMPT_BATCH_TOKENS, shared)
        was_training = self.training
        self.eval()
        try:
            with idle_adapters_off(self):  # a fresh model's zero LoRA: the same outputs without its branch
                outputs = [
                    fn(self.pooled_hidden_state(**pad_batch([encoded[i] for i in batch], tokenizer, self.device),
                                                layer=layer))
                    for batch in tqdm(batches, desc="Scoring", unit="batch", disable=not progress)
                ]
        finally:
            self.train(was_training)
        stacked = torch.cat(outputs)
        order = torch.tensor([i for batch in batches for i in batch])
        return [stacked[order.argsort().to(stacked.device)]]  # back to input order

_CLASSES: dict[str, type] = {}


def _pretrained_class(model_type: str) -> type:
    """The architecture's `PreTrainedModel` class in transformers: the listed one ([`CONFIDENCE_BACKBONES`]), else the
    one its causal LM derives from (any decoder transformers knows). A `ValueError` saying why for a model type
    without a causal LM, or whose backbone is not the `model` attribute the generic code reads (GPT-2's
    `transformer.h`)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if model_type in CONFIDENCE_BACKBONES:
        return getattr(transformers, CONFIDENCE_BACKBONES[model_type])
    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if causal is None or not hasattr(transformers, causal):
        raise ValueError(f"elical-hf has no confidence model for backbone type {model_type!r}: transformers "
                         f"{transformers.__version__} has no causal LM for it. Add one with "
                         "`AutoModelForConfidence.register(YourConfig, YourForConfidence)`.")
    pretrained = next(base for base in getattr(transformers, causal).__mro__ if base.__name__.endswith(
        "PreTrainedModel") and base is not transformers.PreTrainedModel)
    if pretrained.base_model_prefix != "model":
        raise ValueError(f"Backbone type {model_type!r} keeps its decoder at `{pretrained.base_model_prefix}`, not at "
                         "`model` (with `layers` and a final `norm`), which the confidence head and the feature "
                         "layer read: not supported. Register a class of your own with "
                         "`AutoModelForConfidence.register(YourConfig, YourForConfidence)`.")
    return pretrained


def confidence_class_name(model_type: str) -> str:
    """`"llama"` -> `"LlamaForConfidence"`; `"gemma3_text"` -> `"Gemma3ForConfidence"`; an unlisted decoder by its
    `PreTrainedModel` (`"qwen3_moe"` -> `"Qwen3MoeForConfidence"`)."""
    name = CONFIDENCE_BACKBONES.get(model_type) or _pretrained_class(model_type).__name__
    return name.replace("PreTrainedModel", "ForConfidence")


def confidence_class_for(model_type: str) -> type:
    """The confidence model class for a backbone `model_type`, built on first use: for the listed backbones
    ([`CONFIDENCE_BACKBONES`], tested), and for any other decoder transformers has a causal LM for whose backbone sits
    at `model` ([`_pretrained_class`]; refused, saying why, otherwise)."""
    if model_type not in _CLASSES:
        pretrained_class = _pretrained_class(model_type)
        name = pretrained_class.__name__.replace("PreTrainedModel", "ForConfidence")
        namespace = {"__module__": __name__, "__qualname__": name, "config_class": CONFIG_MAPPING[model_type]}
        _CLASSES[model_type] = type(name, (ForConfidenceMixin, pretrained_class), namespace)
    return _CLASSES[model_type]


def __getattr__(name: str) -> type:
    # `from elical_hf.models.modeling import LlamaForConfidence` (and unpickling) work without importing every
    # architecture.
    for model_type in CONFIDENCE_BACKBONES:
        if confidence_class_name(model_type) == name:
            return confidence_class_for(model_type)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_lora_targets(model: nn.Module) -> list[str]:
    """Names of every `nn.Linear` inside the backbone (q/k/v/o/gate/up/down proj, or `qkv_proj`/`gate_up_proj` ...)."""
    backbone = getattr(model, model.base_model_prefix)
    names = {name.rsplit(".", 1)[-1] for name, module in backbone.named_modules() if isinstance(module, nn.Linear)}
    if not names:
        raise ValueError(f"Found no linear layers to adapt in {type(backbone).__name__}.")
    return sorted(names)


__all__ = [
    "CONFIDENCE_BACKBONES",
    "ConfidenceModelOutput",
    "ForConfidenceMixin",
    "UNKNOWN_CONFIDENCE_CONFIG",
    "build_confidence_head",
    "confidence_class_for",
    "default_lora_targets",
    "initialize_confidence_head",
    "last_token_indices",
]
