"""The answer/abstain/retrieve gate: decide from the confidence, before the first token, and answer when it says so.

[`answer_questions`] (also `model.answer(...)`) scores each question, applies the saved policy ([`decide`]:
`decision_threshold` and `retrieve_threshold` of the model's [`ConfidenceConfig`]) and generates the greedy answer
of the **unadapted** base model for the questions it answers: the LoRA is switched off for generation (as PEFT's
`disable_adapter()` does), so the answers are exactly the base model's, gated. The answer prompt is the library's
sampler's ([`~elical_hf.signals.SamplingSettings`]' default: the paper's QA prompt in the chat template), decoded by
the sampler's own loop ([`~elical_hf.signals.decoding.Decoder`]). A `retrieve` callback lets a RAG system fetch
context for the questions in the retrieve band; they are then answered with
[`~elical_hf.settings.prompts.CONTEXT_QA_PROMPT`].

Two modes, chosen by the model:

- **LoRA + head** (the EliCal default): one prefill with the LoRA gives the confidence, then the answer's own prefill
  and decoding run on the base model: one extra prefill per question.
- **Zero overhead** (a model built with `use_lora=False`: the head reads the frozen backbone's hidden state): the
  answer prompt's prefill gives both the confidence (the head on the last prompt token's hidden state at the feature
  layer, which the prefill computes anyway; only that state per row is kept) and the KV cache the answer decodes from;
  abstained questions stop right after it.
  This needs the confidence prompt and the answer prompt to be the same tokens, which they are by default (both are
  `QA_PROMPT` in the chat template with the assistant header); where they differ (another template, a truncated
  prompt), those questions are scored with a separate pass and a warning says so.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from .data.encoding import encode_prompts
from .models.feature_layer import last_position_states
from .models.kv_prefix import cache_kwarg
from .utils.loading import unwrap_peft
from .settings.prompts import CONTEXT_QA_PROMPT
from .signals.decoding import Decoder, check_prompt_lengths, context_length, decode_all
from .signals.generation import SamplingSettings, build_prompt_ids


__all__ = ["DECISIONS", "BaseLanguageModel", "answer_questions", "base_model_only", "decide", "one_call_per_model",
           "thresholds_for", "thresholds_per_question"]

logger = logging.getLogger(__name__)

DECISIONS = ("answer", "retrieve", "abstain")


def check_threshold(value: Any, name: str = "threshold") -> float:
    """`value` as a float in [0, 1]; one clear `ValueError` for anything else (a string, NaN, a bool, 2, -1)."""
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"`{name}` must be a number in [0, 1], got {value!r} ({type(value).__name__}).")
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must lie in [0, 1], got {value!r}.")
    return float(value)


def check_thresholds(threshold: Any, retrieve_threshold: Any = None) -> tuple[float, float | None]:
    """Both thresholds validated ([`check_threshold`]), and the retrieve band below the answer threshold."""
    threshold = check_threshold(threshold)
    if retrieve_threshold is None:
        return threshold, None
    retrieve_threshold = check_threshold(retrieve_threshold, "retrieve_threshold")
    if retrieve_threshold > threshold:
        raise ValueError(f"`retrieve_threshold` ({retrieve_threshold}) must not exceed `threshold` ({threshold}): "
                         "questions retrieve below the answer threshold and abstain below the retrieve threshold.")
    return threshold, retrieve_threshold


def thresholds_for(config: Any, domain: str | None = None,
                   fallback: tuple[float | None, float | None] | None = None) -> tuple[float | None, float | None]:
    """
    The saved `(decision_threshold, retrieve_threshold)` a question of `domain` is gated with: the domain's own
    decision threshold when the model saved one for it (`elical-hf threshold --by dataset`:
    [`ConfidenceConfig.domain_thresholds`]), else the fallback (also for a domain the map sends to the fallback, e.g.
    one with too few calibration rows): `fallback` when given (a server's `--threshold`), else the model's single
    ones. The retrieve threshold of a domain's own is the model's, lowered to the domain's decision threshold when
    above it. `domain=None` always gets the fallback.

    Raises:
        `ValueError`: for a domain the map does not name (listing those it does), a domain given to a model without
        a map, or a domain that is not a string.
    """
    if fallback is None:
        fallback = (config.decision_threshold, config.retrieve_threshold)
    if domain is None:
        return fallback
    if not isinstance(domain, str):
        raise ValueError(f"A domain must be a string (or None), got {domain!r} ({type(domain).__name__}).")
    table = config.domain_thresholds
    if table is None:
        raise ValueError(f"This model has no per-domain thresholds, so domain {domain!r} names none: set them with "
                         "`elical-hf threshold MODEL --records R --by dataset`, or leave the domain out for its one "
                         "threshold.")
    entry = table["domains"].get(domain)
    if entry is None:
        known = sorted(table["domains"])
        shown = ", ".join(map(repr, known[:20])) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        raise ValueError(f"Unknown domain {domain!r}: this model has thresholds for the {table['by']!r} values "
                         f"{shown}; leave the domain out for its pooled threshold.")
    threshold = entry.get("decision_threshold")
    if threshold is None:
        return fallback
    retrieve = config.retrieve_threshold
    return threshold, (None if retrieve is None else min(retrieve, threshold))


def thresholds_per_question(
    config: Any,
    count: int,
    domain: str | Sequence[str | None] | None = None,
    threshold: float | None = None,
    retrieve_threshold: float | None = None,
) -> list[tuple[float, float | None]]:
    """
    The validated `(threshold, retrieve_threshold)` of each of `count` questions ([`check_thresholds`]): the saved
    ones of each question's domain ([`thresholds_for`]), with `threshold` / `retrieve_threshold`, when given,
    overriding them for every question.

    Args:
        domain (`str` or `list`, *optional*): One domain for every question, or one per question (`None` items: the
            model's pooled threshold).

    Raises:
        `ValueError`: a list of domains of another length than the questions, an unknown domain, or no threshold
        at all (the model has none and none is given).
    """
    if domain is None or isinstance(domain, str):
        domains: list[str | None] = [domain] * count
    elif isinstance(domain, Sequence) and len(domain) == count:
        domains = list(domain)
    else:
        size = f"{len(domain)} domains" if isinstance(domain, Sequence) else repr(domain)
        raise ValueError(f"`domain` must be one domain or one per question ({count}), got {size}.")
    rules: dict[str | None, tuple[float, float | None]] = {}
    for name in dict.fromkeys(domains):
        saved, saved_retrieve = thresholds_for(config, name)
        chosen = saved if threshold is None else threshold
        if chosen is None:
            raise ValueError("This model has no decision threshold: set one with `elical-hf threshold MODEL "
                             "--records ...` (optionally `--alpha 0.1 --delta 0.1` for a guaranteed error rate), or "
                             "pass `threshold=`.")
        rules[name] = check_thresholds(chosen, saved_retrieve if retrieve_threshold is None else retrieve_threshold)
    return [rules[name] for name in domains]


def decide(confidence: float, decision_threshold: float, retrieve_threshold: float | None = None) -> str:
    """The gate's policy: `"answer"` when `confidence >= decision_threshold`; else `"retrieve"` when a
    `retrieve_threshold` is set and `confidence >= retrieve_threshold`; else `"abstain"`."""
    if confidence >= decision_threshold:
        return "answer"
    if retrieve_threshold is not None and confidence >= retrieve_threshold:
        return "retrieve"
    return "abstain"


@contextlib.contextmanager
def base_model_only(model: nn.Module) -> Iterator[None]:
    """Switch off every PEFT adapter layer (LoRA) inside `model` for the block, and restore each layer's previous
    state after it: the backbone then computes exactly the base model. Unlike PEFT's `disable_adapter()`, saved
    module copies (the confidence head) are left alone."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
    states = [layer.disable_adapters for layer in layers]
    try:
        for layer in layers:
            layer.enable_adapters(False)
        yield
    finally:
        for layer, disabled in zip(layers, states):
            layer.enable_adapters(not disabled)


_LM_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _output_embeddings(model: Any) -> torch.Tensor:
    """The LM head's weight for a confidence model, whose class drops the head when loading: the input embeddings
    when the checkpoint ties them, else `lm_head.weight` read from the base checkpoint (once per model)."""
    if model in _LM_HEADS:
        return _LM_HEADS[model]
    embeddings = model.get_input_embeddings().weight
    if getattr(model.config.get_text_config(), "tie_word_embeddings", False):
        weight = embeddings
    else:
        from .models.lm_head import read_lm_head

        weight = read_lm_head(model.config).to(embeddings.device, embeddings.dtype)
    _LM_HEADS[model] = weight
    return weight


class BaseLanguageModel(nn.Module):
    """
    A confidence model's backbone with its LM head: the causal LM the gate's answers are decoded from. It calls the
    backbone as it is (switch the LoRA off with [`base_model_only`]) and keeps the last position's hidden state at
    the model's feature layer from its latest call (`last_feature_state`, read by a hook while every block runs:
    [`~elical_hf.models.feature_layer.last_position_states`]), which is the confidence head's input right after a
    left-padded prefill.

    Args:
        model ([`ForConfidenceMixin`]): The confidence model (not its PEFT wrapper).
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.backbone = getattr(model, model.base_model_prefix)
        self.cache_kwarg = cache_kwarg(self.backbone)
        self.config = model.config
        self.generation_config = _generation_config(model)
        self.lm_head_weight = _output_embeddings(model)
        self.feature_layer = model.feature_layer_index
        self.last_feature_state: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.lm_head_weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head_weight.dtype

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Any = None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
    ) -> Any:
        from transformers.modeling_outputs import CausalLMOutputWithPast

        with last_position_states(self.backbone, self.feature_layer) as states:
            hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                   use_cache=use_cache, **{self.cache_kwarg: cache}).last_hidden_state
        self.last_feature_state = states[-1]
        kept = hidden[:, -logits_to_keep:] if logits_to_keep else hidden
        return CausalLMOutputWithPast(logits=nn.functional.linear(kept, self.lm_head_weight))


def _generation_config(model: Any) -> Any:
    """The base checkpoint's `generation_config.json` (its EOS tokens), else one derived from the model config."""
    from transformers import GenerationConfig

    from .models.default_model import resolve_model_path

    try:
        return GenerationConfig.from_pretrained(resolve_model_path(model.config._name_or_path)[0])
    except (OSError, ValueError):  # no generation_config.json (or the base is unreachable)
        return GenerationConfig.from_model_config(model.config)


_MODEL_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MODEL_LOCKS_GUARD = threading.Lock()


def one_call_per_model(function: Callable[..., Any]) -> Callable[..., Any]:
    """Make calls of `function(model, ...)` on one model take turns, from any thread: the gate switches the model's
    adapter off to answer with the base model and keeps the feature state of its prefill on the model, so two calls at
    once would each answer, and score, with the other's state. Re-entrant (a retriever may call the gate again)."""

    @functools.wraps(function)
    def locked(model: Any, *args: Any, **kwargs: Any) -> Any:
        inner = unwrap_peft(model)
        with _MODEL_LOCKS_GUARD:
            lock = _MODEL_LOCKS.get(inner)
            if lock is None:
                lock = _MODEL_LOCKS[inner] = threading.RLock()
        with lock:
            return function(model, *args, **kwargs)

    return locked


@one_call_per_model
def answer_questions(
    model: Any,
    questions: Sequence[str] | str,
    *,
    threshold: float | None = None,
    retrieve_threshold: float | None = None,
    retrieve: Callable[[str], str | None] | None = None,
    settings: SamplingSettings | None = None,
    max_new_tokens: int = 64,
    batch_size: int = 16,
    progress: bool = False,
    cancelled: Callable[[int], bool] | None = None,
    domain: str | Sequence[str | None] | None = None,
    top_logprobs: int = 0,
    on_decision: Callable[[int, dict[str, Any]], None] | None = None,
    on_token: Callable[[int, int, float, list[tuple[int, float]] | None], None] | None = None,
    max_concurrent_retrievals: int = 1,
) -> list[dict[str, Any]]:
    """
    Decide for each question whether to answer, retrieve or abstain, and answer it with the base model when the
    decision says so (see the module docstring for the two modes).

    Args:
        model ([`PeftModelForConfidence`] or [`ForConfidenceMixin`]): A confidence model from
            [`AutoModelForConfidence`].
        questions (`list[str]` or `str`): Raw questions.
        threshold (`float`, *optional*): Answer at or above it; defaults to the saved `decision_threshold` (of each
            question's `domain`).
        retrieve_threshold (`float`, *optional*): Retrieve at or above it (and below `threshold`); defaults to the
            saved `retrieve_threshold` (`None`: never retrieve).
        domain (`str` or `list[str | None]`, *optional*): The questions' domain, or one per question: each is gated
            with its domain's saved thresholds ([`thresholds_for`]; `elical-hf threshold --by dataset`). `None`:
            the model's pooled thresholds.
        retrieve (`Callable[[str], str | None]`, *optional*): Called with each question in the retrieve band; returns
            context to answer with (`None`: nothing found, no answer). Without it, those questions get no answer.
        max_concurrent_retrievals (`int`, *optional*, defaults to 1): Call `retrieve` for up to this many questions
            at once, each on a thread of its own (it must then be safe to call from several threads, and not call the
            gate again); 1 calls it on this thread, one question after another.
        settings ([`~elical_hf.signals.SamplingSettings`], *optional*): The answer prompt and stop strings; defaults to
            the sampler's own (the paper's QA prompt), with `max_new_tokens` and `batch_size`. Its
            `chat_template_kwargs`, when `None`, are the model's (`confidence_config.chat_template_kwargs`).
        max_new_tokens (`int`, *optional*, defaults to 64), batch_size (`int`, *optional*, defaults to 16): Used
            when `settings` is not given.
        progress (`bool`, *optional*, defaults to `False`): Show progress bars.
        cancelled (`Callable[[int], bool]`, *optional*): Called with a question's row during decoding: `True` stops
            decoding its answer there (a server's client left; the answer is what was decoded so far).
        top_logprobs (`int`, *optional*, defaults to 0): Also keep, per answer token, the `top_logprobs` most likely
            tokens of the distribution the greedy pick was made from (`answer_top_logprobs`).
        on_decision (`Callable[[int, dict], None]`, *optional*): Called with a question's row and its result as soon
            as its decision is known, before its first answer token (a retrieve decision after its retrieval, with its
            `context`): what a server streams first.
        on_token (`Callable[[int, int, float, list | None], None]`, *optional*): Called with a question's row, each
            answer token id as it is decoded, its log-probability and its `top_logprobs` pairs (`None` without).

    Returns:
        `list[dict]`: per question, in input order: `question`, `confidence` (`float`), `decision` (`"answer"`,
        `"retrieve"` or `"abstain"`), `answer` (the greedy answer, `None` when not answered), `answer_tokens` (its
        tokens, one decoded string each, EOS included when emitted), `answer_logprobs` (each token's log-probability
        under the base model, from the distribution its greedy pick was made from), `answer_top_logprobs` (per token,
        `(token id, log-probability)` pairs of the `top_logprobs` most likely tokens; `None` without) and `context`
        (what `retrieve` returned, else `None`).

    The answers are decoded in the model's own dtype (no autocast), like its confidences.
    """
    inner = unwrap_peft(model)
    config, tokenizer = inner.confidence_config, inner.tokenizer
    if config is None or tokenizer is None:
        raise ValueError("`answer` needs a confidence model loaded with AutoModelForConfidence (config and tokenizer).")
    questions = [questions] if isinstance(questions, str) else list(questions)
    for row, question in enumerate(questions):
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"Questions must be non-empty strings; row {row} is {question!r}.")
    questions = [question.strip() for question in questions]
    rules = thresholds_per_question(config, len(questions), domain, threshold, retrieve_threshold)
    if retrieve is not None and not callable(retrieve):
        raise ValueError(f"`retrieve` must be a callable question -> context (str or None), got {retrieve!r}.")
    if isinstance(max_concurrent_retrievals, bool) or not isinstance(max_concurrent_retrievals, int) or \
            max_concurrent_retrievals < 1:
        raise ValueError(f"`max_concurrent_retrievals` must be an integer >= 1, got {max_concurrent_retrievals!r}.")
    if settings is None:
        settings = SamplingSettings(num_samples=1, max_new_tokens=max_new_tokens, batch_size=batch_size)
    if settings.chat_template_kwargs is None:  # the answer prompt rendered as the confidence prompt (Qwen3: no thinking)
        settings = dataclasses.replace(settings, chat_template_kwargs=config.chat_template_kwargs)
    results = [{"question": q, "confidence": None, "decision": None, "answer": None, "answer_tokens": None,
                "answer_logprobs": None, "answer_top_logprobs": None, "context": None} for q in questions]
    if not questions:
        return results
    language_model = BaseLanguageModel(inner)
    prompt_ids = build_prompt_ids(tokenizer, questions, settings)
    check_prompt_lengths(prompt_ids, context_length(inner), settings.max_new_tokens,
                         [f"question row {i}" for i in range(len(questions))])

    def set_decision(index: int, confidence: float) -> None:
        results[index].update(confidence=confidence, decision=decide(confidence, *rules[index]))
        if on_decision is not None and (results[index]["decision"] != "retrieve" or retrieve is None):
            on_decision(index, results[index])  # a retrieve decision is told with its context

    def decoder(on_prefill: Callable[[list[str]], list[bool]] | None = None) -> Decoder:
        stop = (lambda key: cancelled(int(key))) if cancelled is not None else None  # the keys are row numbers
        told = (lambda key, *token: on_token(int(key), *token)) if on_token is not None else None
        return Decoder(language_model, tokenizer, settings, None, greedy_only=True, share_prefix=True,
                       on_prefill=on_prefill, cancelled=stop, top_logprobs=top_logprobs, on_token=told)

    keys = [str(i) for i in range(len(questions))]  # the decoder's keys: row numbers (greedy rows draw no seeds)
    fused = _fused_rows(config, tokenizer, questions, prompt_ids) if not config.use_lora else set()
    separate = [i for i in range(len(questions)) if i not in fused]
    if separate:
        for i, confidence in zip(separate, inner.confidence([questions[i] for i in separate], batch_size=batch_size)):
            set_decision(i, confidence)

    def on_prefill(batch_keys: list[str]) -> list[bool]:
        """After a batch's prefill: score its fused rows from the hidden states it computed; say which rows to answer
        (the other rows' decisions were taken beforehand)."""
        rows = [int(key) for key in batch_keys]
        if any(i in fused for i in rows):
            head = inner.confidence_head
            hidden = language_model.last_feature_state.to(inner.confidence_head_dtype)
            for i, confidence in zip(rows, torch.sigmoid(head(hidden).squeeze(-1).float()).tolist()):
                if i in fused:
                    set_decision(i, confidence)
        return [results[i]["decision"] == "answer" for i in rows]

    with base_model_only(inner), torch.inference_mode():
        order = sorted(fused | {i for i in separate if results[i]["decision"] == "answer"})
        outputs = decode_all(decoder(on_prefill), [keys[i] for i in order], [prompt_ids[i] for i in order], progress,
                             "Answering")
        for i, output in zip(order, outputs):
            if results[i]["decision"] == "answer":
                results[i].update(_answer_fields(output))
        if retrieve is not None:
            _answer_with_context(results, retrieve, decoder(), tokenizer, settings, progress, on_decision,
                                 max_concurrent_retrievals)
    return results


def _fused_rows(config: Any, tokenizer: Any, questions: list[str], prompt_ids: list[list[int]]) -> set[int]:
    """Rows whose confidence prompt is token for token the answer prompt, so one prefill serves both."""
    same = {i for i, (a, b) in enumerate(zip(prompt_ids, encode_prompts(questions, tokenizer, config))) if a == b}
    if len(same) < len(questions):
        logger.warning("%d of %d questions: the confidence prompt differs from the answer prompt (template or "
                       "truncation), so they are scored with a separate prefill.", len(questions) - len(same),
                       len(questions))
    return same


def _answer_fields(output: dict[str, Any]) -> dict[str, Any]:
    """The answer fields of a result, from the decoder's output for its prompt."""
    return {"answer": output["greedy_response"], "answer_tokens": output["greedy_tokens"],
            "answer_logprobs": output["greedy_logprobs"], "answer_top_logprobs": output.get("greedy_top_logprobs")}


def _contexts(questions: dict[int, str], retrieve: Callable[[str], str | None],
              workers: int) -> Iterator[tuple[int, str | None]]:
    """`(row, context)` for each of `questions` (`{row: question}`), as the `retrieve` calls return: on this thread one
    after another (`workers=1`), else up to `workers` calls at once. A context that is not a string or `None` raises."""

    def fetch(row: int) -> tuple[int, str | None]:
        context = retrieve(questions[row])
        if context is not None and not isinstance(context, str):
            raise ValueError(f"`retrieve` must return a string or None; for {questions[row]!r} it returned "
                             f"{context!r} ({type(context).__name__}).")
        return row, context

    if workers == 1 or len(questions) <= 1:
        yield from map(fetch, questions)
        return
    pool = concurrent.futures.ThreadPoolExecutor(min(workers, len(questions)), thread_name_prefix="elical-retrieve")
    try:
        for future in concurrent.futures.as_completed([pool.submit(fetch, row) for row in questions]):
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _answer_with_context(
    results: list[dict[str, Any]], retrieve: Callable[[str], str | None], decoder: Decoder, tokenizer: Any,
    settings: SamplingSettings, progress: bool, on_decision: Callable[[int, dict[str, Any]], None] | None = None,
    max_concurrent_retrievals: int = 1,
) -> None:
    """Fetch context for the retrieve decisions (up to `max_concurrent_retrievals` at once) and answer them with it
    (in place), telling `on_decision` each decision with its context as it comes."""
    rows = [i for i, r in enumerate(results) if r["decision"] == "retrieve"]
    for i, context in _contexts({i: results[i]["question"] for i in rows}, retrieve, max_concurrent_retrievals):
        results[i]["context"] = context
        if on_decision is not None:
            on_decision(i, results[i])
    rows = [i for i in rows if results[i]["context"]]
    if not rows:
        return
    prompts = [CONTEXT_QA_PROMPT.format(context=results[i]["context"], question=results[i]["question"]) for i in rows]
    filled = dataclasses.replace(settings, prompt_template="{question}")
    prompt_ids = build_prompt_ids(tokenizer, prompts, filled)
    check_prompt_lengths(prompt_ids, context_length(decoder.model), settings.max_new_tokens,
                         [f"question row {i} with its retrieved context" for i in rows])
    outputs = decode_all(decoder, [str(i) for i in rows], prompt_ids, progress, "Answering with context")
    for i, output in zip(rows, outputs):
        results[i].update(_answer_fields(output))
