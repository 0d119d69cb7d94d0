"""Greedy answers with token log-probabilities and k sampled answers, one prefill per question.

[`generate_answers`] runs the library's own decoding loop (`decoding.py`; it does not call `model.generate`), built
for the signals EliCal needs: the question prompt is run through the model once, its KV cache is copied for the greedy
row and the k sample rows, and all rows of a batch decode together. Rows that finish (EOS, a stop string) leave the
batch at once. Every sample row draws from its own `torch.Generator`, seeded from the settings' seed, the question
text and the sample index, so a question's samples do not depend on which batch it lands in or on `batch_size`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..settings.precision import AUTO, resolve_dtype
from ..settings.prompts import check_prompt_texts, render_prompt
from .decoding import Decoder, check_prompt_lengths, context_length, decode_all
from .settings import SamplingSettings


def resolve_autocast_dtype(model: Any, autocast_dtype: torch.dtype | str | None = "auto") -> torch.dtype | None:
    """Resolve `autocast_dtype` to a dtype or `None` (no autocast).

    `"auto"` follows the precision policy ([`~elical_hf.settings.precision.resolve_dtype`]): a float32 model autocasts
    to the policy's dtype for its device when that is lower (bf16 on a CPU where bf16 is native and faster), and runs in
    its own dtype otherwise. An explicit dtype equal to the model's dtype also means no autocast.
    """
    if autocast_dtype == "auto":
        if model.dtype != torch.float32:
            return None
        chosen = resolve_dtype(AUTO, model.device)
        return None if chosen == torch.float32 else chosen
    if autocast_dtype is not None and not isinstance(autocast_dtype, torch.dtype):
        raise ValueError(f"`autocast_dtype` must be 'auto', None or a torch.dtype, got {autocast_dtype!r}.")
    return None if autocast_dtype == model.dtype else autocast_dtype


def render_prompts(tokenizer: Any, questions: list[str], settings: SamplingSettings) -> list[str]:
    """Each question's prompt text, rendered by [`~elical_hf.settings.prompts.render_prompt`] (special tokens included);
    a question no tokenizer can read (an unpaired surrogate) is a `ValueError` naming its row
    ([`~elical_hf.settings.prompts.check_prompt_texts`])."""
    check_prompt_texts(questions, [f"question row {i}" for i in range(len(questions))])
    return [
        render_prompt(
            tokenizer,
            settings.prompt_template.format(question=q),
            use_chat_template=settings.use_chat_template,
            system_prompt=settings.system_prompt,
            chat_template_kwargs=settings.chat_template_kwargs,
        )
        for q in questions
    ]


def build_prompt_ids(tokenizer: Any, questions: list[str], settings: SamplingSettings) -> list[list[int]]:
    """Token ids of each question's prompt ([`render_prompts`], tokenized without adding special tokens)."""
    texts = render_prompts(tokenizer, questions, settings)
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def generate_answers(
    model: Any,
    tokenizer: Any,
    questions: list[str],
    settings: SamplingSettings | None = None,
    progress: bool = True,
    autocast_dtype: torch.dtype | str | None = "auto",
) -> list[dict]:
    """Generate the greedy answer (with token log-probabilities) and k sampled answers for each question.

    Each question's prompt is prefilled once (the prefix that all prompts of a batch share, e.g. the chat template and
    instruction, once per batch); its KV cache is shared by the greedy row and the k sample rows, which decode in one
    batch. Finished rows leave the batch. Greedy decoding is the argmax of the raw logits; sampling
    applies repetition penalty, temperature, top-k and top-p (Hugging Face semantics) and draws from a per-sample
    generator, so results do not depend on batching (up to the numerics of batched kernels).

    Args:
        model ([`~transformers.PreTrainedModel`]):
            A causal LM that accepts a [`~transformers.DynamicCache`] (any decoder-only model of `transformers`).
        tokenizer ([`~transformers.PreTrainedTokenizerBase`]):
            Its tokenizer. Left padding and the pad id (EOS when the tokenizer has none) are handled here; real
            tokens are always found through the attention mask.
        questions (`list[str]`):
            The questions, filled into `settings.prompt_template`.
        settings ([`SamplingSettings`], *optional*):
            Decoding settings; defaults to the paper's (k=20, temperature 1.0, top-p 0.95, top-k 50, ...).
        progress (`bool`, *optional*, defaults to `True`):
            Show a progress bar over questions with questions/s and generated tokens/s.
        autocast_dtype (`torch.dtype` or `"auto"`, *optional*, defaults to `"auto"`):
            Autocast dtype. `"auto"`: the precision policy's dtype when it is lower than a float32 model's (bf16 on a
            CPU where bf16 is native and faster), else the model's dtype. `None`: no autocast.
            Log-probabilities are always computed in float32.

    Raises:
        `ValueError`: for questions whose prompt, with `settings.max_new_tokens` answer tokens, does not fit the
            model's context (`max_position_embeddings`), naming their rows and token counts.

    Returns:
        `list[dict]`: one dict per question, in input order, with `greedy_response` (`str`), `greedy_tokens`
        (`list[str]`, one decoded string per generated token, EOS included when emitted), `greedy_logprobs`
        (`list[float]`, log-softmax of the raw logits at each greedy token), `greedy_cumulative_logprobs` (`float`,
        their sum), `sampling_response` (`list[str]`, k answers) and `num_generated_tokens` (`int`, all k+1 rows).
        Responses are decoded without special tokens, cut at the first stop string and stripped.

    Example:

    ```python
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer
    >>> from elical_hf.signals import SamplingSettings, generate_answers
    >>> model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")  # doctest: +SKIP
    >>> settings = SamplingSettings(num_samples=4, max_new_tokens=32)
    >>> records = generate_answers(model, tokenizer, ["who wrote hamlet"], settings)  # doctest: +SKIP
    >>> records[0]["greedy_response"], len(records[0]["sampling_response"])  # doctest: +SKIP
    ('Hamlet by William Shakespeare.', 4)

    ```
    """
    settings = settings if settings is not None else SamplingSettings()
    questions = list(questions)
    if not questions:
        return []
    # The chat template and instruction that every prompt starts with are prefilled once per batch.
    decoder = Decoder(model, tokenizer, settings, resolve_autocast_dtype(model, autocast_dtype), share_prefix=True)
    prompt_ids = build_prompt_ids(tokenizer, questions, settings)
    check_prompt_lengths(prompt_ids, context_length(model), settings.max_new_tokens,
                         [f"question row {i}" for i in range(len(questions))])
    return decode_all(decoder, questions, prompt_ids, progress, "Generating answers", pack=True)


def completion_settings(
    max_new_tokens: int = 16,
    batch_size: int = 16,
    use_chat_template: bool = True,
    system_prompt: str | None = None,
    stop_strings: list[str] | None = None,
    repetition_penalty: float = 1.0,
) -> SamplingSettings:
    """Settings of a greedy completion of raw prompts (shared by every backend's `complete`); `repetition_penalty`
    is the greedy rows' (`SamplingSettings.greedy_repetition_penalty`)."""
    return SamplingSettings(
        num_samples=1,  # unused: completions decode greedy rows only
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        prompt_template="{question}",
        use_chat_template=use_chat_template,
        system_prompt=system_prompt,
        stop_strings=list(stop_strings or []),
        greedy_repetition_penalty=repetition_penalty,
    )


def complete_prompts(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    max_new_tokens: int = 16,
    batch_size: int = 16,
    progress: bool = True,
    *,
    use_chat_template: bool = True,
    system_prompt: str | None = None,
    stop_strings: list[str] | None = None,
    repetition_penalty: float = 1.0,
    autocast_dtype: torch.dtype | str | None = "auto",
    share_prefix: bool = True,
) -> list[str]:
    """Greedy completions of raw user prompts, each wrapped in the chat template (LLM judges, verbalized confidence).

    The loop of [`generate_answers`] with the greedy row only (one prefill per prompt, argmax of the logits,
    finished rows leave the batch). `prompts` are filled-in user messages (e.g. `CORRECTNESS_PROMPT.format(...)`);
    `max_new_tokens`, `batch_size`, `use_chat_template`, `system_prompt`, `stop_strings` and `autocast_dtype` mean
    what they mean in [`SamplingSettings`] and [`generate_answers`]; `repetition_penalty` is
    `SamplingSettings.greedy_repetition_penalty` (1.0: the plain argmax). With `share_prefix`, the token prefix that all
    prompts of a batch share (at least `MIN_SHARED_PREFIX` tokens, e.g. Verbal-10's ten demonstrations) is prefilled
    once per batch instead of once per prompt: the same positions and attention, so the same completions up to
    floating-point rounding, for a fraction of the prefill.

    Returns:
        `list[str]`: one completion per prompt, in input order, decoded without special tokens and stripped.
    """
    prompts = list(prompts)
    for row, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise ValueError(f"`prompts` must hold strings; row {row} holds {type(prompt).__name__}.")
    settings = completion_settings(max_new_tokens, batch_size, use_chat_template, system_prompt, stop_strings,
                                   repetition_penalty)
    if not prompts:
        return []
    decoder = Decoder(
        model, tokenizer, settings, resolve_autocast_dtype(model, autocast_dtype), greedy_only=True,
        share_prefix=share_prefix,
    )
    prompt_ids = build_prompt_ids(tokenizer, prompts, settings)
    check_prompt_lengths(prompt_ids, context_length(model), max_new_tokens,
                         [f"prompt row {i}" for i in range(len(prompts))])
    outputs = decode_all(decoder, prompts, prompt_ids, progress, "Completing prompts", pack=True)
    return [r["greedy_response"] for r in outputs]


def _last_token_logprobs(
    model: Any, tokenizer: Any, prompt_ids: list[list[int]], batch_size: int, progress: bool,
    autocast_dtype: torch.dtype | str | None, desc: str,
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Yield `(rows, logprobs)` over `prompt_ids` in batches of `batch_size`: the rows (indices into `prompt_ids`)
    of a batch and the float32 log-softmax of the model's logits at each one's last prompt token (`[rows, vocab]`).

    One forward pass per batch, left-padded, positions counted from each prompt's first token, so a prompt's numbers
    do not depend on its batch (up to float rounding); prompts of similar lengths share a batch."""
    from contextlib import nullcontext

    from tqdm.auto import tqdm

    dtype = resolve_autocast_dtype(model, autocast_dtype)
    device = model.device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    order = sorted(range(len(prompt_ids)), key=lambda i: -len(prompt_ids[i]))
    for start in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", disable=not progress):
        rows = order[start : start + batch_size]
        width = max(len(prompt_ids[i]) for i in rows)
        ids = torch.tensor([[pad] * (width - len(prompt_ids[i])) + prompt_ids[i] for i in rows], device=device)
        mask = torch.tensor([[0] * (width - len(prompt_ids[i])) + [1] * len(prompt_ids[i]) for i in rows],
                            device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()
        with torch.no_grad(), autocast:
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits
        yield rows, torch.log_softmax(logits[:, -1].float(), dim=-1)


def first_token_logprobs(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    top_logprobs: int = 20,
    batch_size: int = 16,
    progress: bool = True,
    *,
    use_chat_template: bool = True,
    system_prompt: str | None = None,
    autocast_dtype: torch.dtype | str | None = "auto",
) -> list[dict[str, float]]:
    """The log-probabilities of the `top_logprobs` likeliest first reply tokens of each prompt (rendered as
    [`complete_prompts`] renders it): token text -> log-probability, what an OpenAI-compatible server returns for
    `max_tokens=1, logprobs=True, top_logprobs=...` (the model's own distribution, without repetition penalty).

    One forward pass per batch of `batch_size` prompts, left-padded, positions counted from each prompt's first
    token, so a prompt's numbers do not depend on its batch (up to float rounding)."""
    prompts = list(prompts)
    settings = completion_settings(1, batch_size, use_chat_template, system_prompt)
    prompt_ids = build_prompt_ids(tokenizer, prompts, settings)
    check_prompt_lengths(prompt_ids, context_length(model), 1, [f"prompt {i}" for i in range(len(prompts))])
    found: list[dict[str, float] | None] = [None] * len(prompts)
    for rows, logprobs in _last_token_logprobs(model, tokenizer, prompt_ids, batch_size, progress, autocast_dtype,
                                               "First-token log-probabilities"):
        values, tokens = logprobs.topk(min(top_logprobs, logprobs.shape[-1]), dim=-1)
        for row, top_values, top_tokens in zip(rows, values.tolist(), tokens.tolist()):
            texts = tokenizer.batch_decode([[t] for t in top_tokens])
            entry: dict[str, float] = {}
            for text, value in zip(texts, top_values):
                entry.setdefault(text, value)
            found[row] = entry
    return [entry or {} for entry in found]


def next_token_logprobs(
    model: Any,
    tokenizer: Any,
    questions: list[str],
    token_ids: list[int],
    settings: SamplingSettings,
    batch_size: int = 16,
    progress: bool = True,
    autocast_dtype: torch.dtype | str | None = "auto",
) -> list[list[float]]:
    """
    The log-probability of each of `token_ids` as the first reply token after each question's prompt, the prompt
    rendered from `settings` exactly as [`generate_answers`] renders it ([`build_prompt_ids`]: its `prompt_template`,
    chat template with the generation prompt, system prompt and template variables).

    One forward pass per batch of `batch_size` prompts (left-padded, positions from each prompt's first token, so a
    prompt's numbers do not depend on its batch up to float rounding); the log-softmax is over the whole vocabulary,
    in float32, of the model's own logits (no repetition penalty, no temperature).

    Args:
        model ([`~transformers.PreTrainedModel`]): A causal LM.
        tokenizer ([`~transformers.PreTrainedTokenizerBase`]): Its tokenizer.
        questions (`list[str]`): The questions, filled into `settings.prompt_template`.
        token_ids (`list[int]`): The vocabulary ids to read.
        settings ([`SamplingSettings`]): How the prompts are rendered (only its prompt fields are used).
        batch_size (`int`, *optional*, defaults to 16): Prompts per forward pass.
        progress (`bool`, *optional*, defaults to `True`): Progress bar over batches.
        autocast_dtype (`torch.dtype` or `"auto"`, *optional*, defaults to `"auto"`): As in [`generate_answers`].

    Returns:
        `list[list[float]]`: one row per question, in input order, one log-probability per id of `token_ids`.
    """
    questions, token_ids = list(questions), [int(t) for t in token_ids]
    prompt_ids = build_prompt_ids(tokenizer, questions, settings)
    check_prompt_lengths(prompt_ids, context_length(model), 1,
                         [f"question row {i}" for i in range(len(questions))])
    found: list[list[float]] = [[] for _ in questions]
    wanted = torch.tensor(token_ids, dtype=torch.long, device=model.device)
    for rows, logprobs in _last_token_logprobs(model, tokenizer, prompt_ids, batch_size, progress, autocast_dtype,
                                               "Next-token log-probabilities"):
        outside = [t for t in token_ids if not 0 <= t < logprobs.shape[-1]]
        if outside:
            raise ValueError(f"Token ids {outside[:5]} are outside the model's {logprobs.shape[-1]} output ids.")
        for row, values in zip(rows, logprobs.index_select(-1, wanted).tolist()):
            found[row] = values
    return found
