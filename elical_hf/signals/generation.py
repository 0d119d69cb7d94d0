"""Greedy answers with token log-probabilities and k sampled answers, one prefill per question.

[`generate_answers`] runs the library's own decoding loop (`decoding.py`; it does not call `model.generate`), built
for the signals EliCal needs: the question prompt is run through the model once, its KV cache is copied for the greedy
row and the k sample rows, and all rows of a batch decode together. Rows that finish (EOS, a stop string) leave the
batch at once. Every sample row draws from its own `torch.Generator`, seeded from the settings' seed, the question
text and the sample index, so a question's samples do not depend on which batch it lands in or on `batch_size`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..precision import AUTO, resolve_dtype
from ..prompts import QA_PROMPT, render_prompt
from .decoding import Decoder, check_prompt_lengths, context_length, decode_all


@dataclass
class SamplingSettings:
    r"""
    How [`generate_answers`] decodes: the paper's sampling recipe by default.

    Parameters:
        > Samples

        num_samples (`int`, *optional*, defaults to `20`):
            Number k of sampled answers per question (the paper shows k in {2, 5, 10, 20} all work). Must be >= 1.
        temperature (`float`, *optional*, defaults to `1.0`):
            Sampling temperature (> 0). The greedy answer always uses temperature 0.
        top_p (`float`, *optional*, defaults to `0.95`):
            Nucleus sampling: keep the smallest set of tokens whose probability sums to at least `top_p` (always at
            least one token). `1.0` disables it.
        top_k (`int`, *optional*, defaults to `50`):
            Keep only the `top_k` most likely tokens (ties with the k-th kept). `0` disables it.
        repetition_penalty (`float`, *optional*, defaults to `1.05`):
            Hugging Face repetition penalty over the prompt and the generated tokens, applied to sample rows only.
        max_new_tokens (`int`, *optional*, defaults to `256`):
            Most tokens generated per answer.

        > Batching and randomness

        batch_size (`int`, *optional*):
            Questions per batch; a batch decodes `batch_size * (num_samples + 1)` rows. `None` (the default) picks it
            for the machine ([`~elical_hf.signals.decoding.auto_batch_size`]: about 64 rows per CPU thread, 512
            rows on a GPU).
        seed (`int`, *optional*, defaults to `42`):
            Base seed; each sample row is seeded from (`seed`, SHA-256 of the question, sample index).

        > Prompt

        prompt_template (`str`, *optional*, defaults to `QA_PROMPT`):
            Template with a `{question}` field, filled with `str.format`.
        use_chat_template (`bool`, *optional*, defaults to `True`):
            Wrap the prompt in the tokenizer's chat template (see [`~elical_hf.prompts.render_prompt`]).
        system_prompt (`str`, *optional*):
            System message; `None` keeps the template's default.
        stop_strings (`list[str]`, *optional*, defaults to `[]`):
            A row stops as soon as its text contains one of these; the answer is cut at the first one.
    """

    num_samples: int = field(default=20, metadata={"help": "Number k of sampled answers per question (>= 1)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (> 0)."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling threshold in (0, 1]; 1 disables."})
    top_k: int = field(default=50, metadata={"help": "Top-k filter (>= 0); 0 disables."})
    repetition_penalty: float = field(default=1.05, metadata={"help": "Repetition penalty (> 0) for samples."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens generated per answer (>= 1)."})
    batch_size: int | None = field(
        default=None, metadata={"help": "Questions per batch (>= 1); default: chosen for the machine (~64 rows per CPU thread)."}
    )
    seed: int = field(default=42, metadata={"help": "Base seed of the per-sample generators."})
    prompt_template: str = field(default=QA_PROMPT, metadata={"help": "Prompt with a `{question}` field."})
    use_chat_template: bool = field(default=True, metadata={"help": "Wrap the prompt in the chat template."})
    system_prompt: str | None = field(default=None, metadata={"help": "System message (None: template default)."})
    stop_strings: list[str] = field(default_factory=list, metadata={"help": "Strings that end an answer."})

    def __post_init__(self):
        checks = [
            ("num_samples", self.num_samples >= 1, "must be >= 1"),
            ("temperature", self.temperature > 0, "must be > 0 (the greedy answer already uses temperature 0)"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("top_k", self.top_k >= 0, "must be >= 0 (0 disables top-k)"),
            ("repetition_penalty", self.repetition_penalty > 0, "must be > 0 (1.0 disables it)"),
            ("max_new_tokens", self.max_new_tokens >= 1, "must be >= 1"),
            ("batch_size", self.batch_size is None or self.batch_size >= 1, "must be >= 1 (or None: automatic)"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"`{name}` {rule}, got {getattr(self, name)!r}.")
        if "{question}" not in self.prompt_template:
            raise ValueError("`prompt_template` must contain a `{question}` field.")
        if isinstance(self.stop_strings, str):
            self.stop_strings = [self.stop_strings]
        self.stop_strings = list(self.stop_strings)
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            raise ValueError(f"`stop_strings` must be non-empty strings, got {self.stop_strings!r}.")


def resolve_autocast_dtype(model: Any, autocast_dtype: torch.dtype | str | None = "auto") -> torch.dtype | None:
    """Resolve `autocast_dtype` to a dtype or `None` (no autocast).

    `"auto"` follows the precision policy ([`~elical_hf.precision.resolve_dtype`]): a float32 model autocasts to the
    policy's dtype for its device when that is lower (bf16 on a CPU where bf16 is native and faster), and runs in its
    own dtype otherwise. An explicit dtype equal to the model's dtype also means no autocast.
    """
    if autocast_dtype == "auto":
        if model.dtype != torch.float32:
            return None
        chosen = resolve_dtype(AUTO, model.device)
        return None if chosen == torch.float32 else chosen
    if autocast_dtype is not None and not isinstance(autocast_dtype, torch.dtype):
        raise ValueError(f"`autocast_dtype` must be 'auto', None or a torch.dtype, got {autocast_dtype!r}.")
    return None if autocast_dtype == model.dtype else autocast_dtype


def build_prompt_ids(tokenizer: Any, questions: list[str], settings: SamplingSettings) -> list[list[int]]:
    """Token ids of each question's prompt, rendered by [`~elical_hf.prompts.render_prompt`]."""
    texts = [
        render_prompt(
            tokenizer,
            settings.prompt_template.format(question=q),
            use_chat_template=settings.use_chat_template,
            system_prompt=settings.system_prompt,
        )
        for q in questions
    ]
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
    return decode_all(decoder, questions, prompt_ids, progress, "Generating answers")


def completion_settings(
    max_new_tokens: int = 16,
    batch_size: int = 16,
    use_chat_template: bool = True,
    system_prompt: str | None = None,
    stop_strings: list[str] | None = None,
) -> SamplingSettings:
    """Settings of a greedy completion of raw prompts (shared by every backend's `complete`)."""
    return SamplingSettings(
        num_samples=1,  # unused: completions decode greedy rows only
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        prompt_template="{question}",
        use_chat_template=use_chat_template,
        system_prompt=system_prompt,
        stop_strings=list(stop_strings or []),
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
    autocast_dtype: torch.dtype | str | None = "auto",
    share_prefix: bool = True,
) -> list[str]:
    """Greedy completions of raw user prompts, each wrapped in the chat template (LLM judges, verbalized confidence).

    The loop of [`generate_answers`] with the greedy row only (one prefill per prompt, argmax of the raw logits,
    finished rows leave the batch). `prompts` are filled-in user messages (e.g. `CORRECTNESS_PROMPT.format(...)`);
    `max_new_tokens`, `batch_size`, `use_chat_template`, `system_prompt`, `stop_strings` and `autocast_dtype` mean
    what they mean in [`SamplingSettings`] and [`generate_answers`]. With `share_prefix`, the token prefix that all
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
    settings = completion_settings(max_new_tokens, batch_size, use_chat_template, system_prompt, stop_strings)
    if not prompts:
        return []
    decoder = Decoder(
        model, tokenizer, settings, resolve_autocast_dtype(model, autocast_dtype), greedy_only=True,
        share_prefix=share_prefix,
    )
    prompt_ids = build_prompt_ids(tokenizer, prompts, settings)
    check_prompt_lengths(prompt_ids, context_length(model), max_new_tokens,
                         [f"prompt row {i}" for i in range(len(prompts))])
    return [r["greedy_response"] for r in decode_all(decoder, prompts, prompt_ids, progress, "Completing prompts")]
