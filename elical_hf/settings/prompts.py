"""The paper's prompts, verbatim, and the one function that turns a prompt into the text a model sees.

Every part of the library (sampling, training, inference) builds model inputs through [`render_prompt`], so the text
the confidence head was trained on and the text it is asked about at inference can never disagree.
"""

from __future__ import annotations

import json
import string
from typing import Any


QA_PROMPT = "Answer the following question.\nQuestion: {question}"
"""Free-form QA prompt (the paper's default, used for sampling answers and for the confidence head)."""

MULTIPLE_CHOICE_PROMPT = (
    "Select the correct answer to the following question based on your internal knowledge.\nQuestion: {question}"
)
"""Multiple-choice prompt (the reference code's `long_mc_qa`, what it asks MMLU with): the question is written with
its options ([`~elical_hf.settings.multiple_choice.format_question`]). Used for sampling multiple-choice questions and
for the confidence read on them."""

REFERENCE_PROMPT_TAIL = "\nAnswer: "
"""The tail that the reference code's prompt table defines for every prompt type. Its released prompt builder never
appends it to the QA prompt (only the `none` text is formatted), so elical-hf's QA prompt has no tail by default;
[`~elical_hf.ConfidenceConfig`]'s `prompt_tail` and `elical-hf convert-official --answer_tail` add it."""

CONTEXT_QA_PROMPT = "Answer the following question using the context.\nContext: {context}\nQuestion: {question}"
"""QA prompt with retrieved context: what the gate ([`~elical_hf.gate.answer_questions`]) answers with after a
`retrieve` decision (not from the paper)."""

SEMANTIC_CONSISTENCY_PROMPT = (
    "Are the following two answers to the same question semantically equivalent?\n"
    'If the two answers are semantically equivalent, answer "certain". Otherwise, answer "uncertain". '
    'Given ONLY the judgement ("certain" or "uncertain"), no other words or explanation.\n'
    "Question: {question}\nAnswer: {greedy}\n\nQuestion: {question}\nAnswer: {sample}"
)
"""LLM judge prompt: is one sampled answer equivalent to the greedy answer."""

CORRECTNESS_PROMPT = (
    "We are assessing the quality of answers to the following question: {question}.\n"
    "The expected answers to this question are: {answer}.\n"
    "Within the context of the question, dose the generated answer mean the same as any of the expected answers?\n"
    "The generated answer is: {prediction}.\n"
    'If the answer is correct, say "certain". If not, please say "uncertain". '
    "Just give your judgement without any other words."
)
"""LLM judge prompt: is an answer correct given the gold aliases (the typo "dose" is the paper's)."""

VERBAL_CONFIDENCE_PROMPT = (
    "Judge whether you can provide a correct answer for the given question. Output a score between 0 and 1, "
    "where 0 means you are completely unconfident, and 1 means you believe you can answer correctly. "
    "Just give your score without any other words.\nQuestion: {question}\nAnswer: "
)
"""Verbalized-confidence prompt (Verbal-0; Verbal-10 prepends ten demonstrations)."""

ABSTAIN_MESSAGE = "I am not confident enough to answer this question."
"""What the gate answers by default when it abstains: `elical-hf serve --abstain_message`, the LangChain gate's
`abstain_message`."""


def check_prompt_texts(texts: Any, names: Any = None) -> None:
    """Refuse a text that no tokenizer can read: one holding an unpaired surrogate (`"who \\udcff wrote"`, what
    `errors="surrogateescape"` leaves of bytes that are not UTF-8), which tokenizers reject with a `TypeError` and Arrow
    with a `UnicodeEncodeError`. One `ValueError` naming the text (`names[i]`, default `row i`) and the character.

    Args:
        texts (`Iterable[str]`): The texts (questions); other values are left to the callers' own checks.
        names (`Iterable[str]`, *optional*): How to name each text in the error, e.g. `question row 3 (id 'q3')`.
    """
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            name = f"row {row}" if names is None else list(names)[row]
            raise ValueError(
                f"The text of {name} is not valid Unicode: it holds an unpaired surrogate {text[error.start]!r} at "
                f"character {error.start} (bytes that were not UTF-8, decoded with errors='surrogateescape'?). Fix "
                "the text or drop it."
            ) from None


def prompt_template_problem(template: Any, name: str = "prompt_template") -> str | None:
    """What is wrong with a question prompt template, in one line, or `None` when nothing is.

    A template is a string whose only replacement field is a bare `{question}` (at least once): no other field, no
    attribute or index access (`{question.__class__}`, `{question[0]}`), no conversion (`{question!r}`) and no format
    spec (`{question:>3000}`); literal braces are doubled (`{{`, `}}`). It is checked as `str.format` parses it
    ([`string.Formatter.parse`]), not by formatting one question, so no field slips through.

    Args:
        template: The template, e.g. [`QA_PROMPT`].
        name (`str`, *optional*, defaults to `"prompt_template"`): How to name it in the message.
    """
    if not isinstance(template, str):
        return f"`{name}` must be a string, got {template!r}."
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:  # a single brace
        return (f"`{name}` has a stray brace ({error}): write literal braces as '{{{{' and '}}}}', got "
                f"{template!r}.")
    fields = [(field, conversion, spec) for _, field, spec, conversion in parsed if field is not None]
    others = ["{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
              for field, conversion, spec in fields if (field, conversion, spec) != ("question", None, "")]
    if others:
        return (f"`{name}` may use only the '{{question}}' field, bare (no other field, attribute, index, conversion "
                f"or format spec; write literal braces as '{{{{' and '}}}}'): found {', '.join(others)} in "
                f"{template!r}.")
    if not fields:
        return f"`{name}` must contain a '{{question}}' field, got {template!r}."
    return None


THINKING_SWITCH = "enable_thinking"
"""The chat-template variable of hybrid reasoning models (Qwen3: `enable_thinking=True` by default, so its answers
start with a `<think>...</think>` block)."""


def chat_template_kwargs_for(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    The extra variables a prompt is rendered with by `tokenizer`'s chat template.

    `chat_template_kwargs` as given (a saved [`~elical_hf.ConfidenceConfig`]'s, a sampling run's); when it is `None`,
    `{"enable_thinking": False}` for a template that reads [`THINKING_SWITCH`] (Qwen3's and other hybrid reasoning
    models': the paper's prompts ask for an answer, not for reasoning, and a reasoning block before the answer would
    be judged as part of it), and none for any other template.
    """
    if chat_template_kwargs is not None:
        return dict(chat_template_kwargs)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates
        template = " ".join(str(value) for value in template.values())
    return {THINKING_SWITCH: False} if isinstance(template, str) and THINKING_SWITCH in template else {}


def chat_template_arguments() -> frozenset[str]:
    """The names template variables may not take: `apply_chat_template`'s own arguments (`add_generation_prompt`,
    `tokenize`, ...), which elical-hf sets, and `messages`, which the template is rendered with."""
    import inspect

    from transformers import PreTrainedTokenizerBase

    parameters = inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters.values()
    named = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"}
    return frozenset(named | {"messages"})


def check_chat_template_kwargs(value: Any, name: str = "chat_template_kwargs") -> dict[str, Any] | None:
    """`value` as a dict of template variables (a JSON object given as a string is parsed), or `None`; a
    `ValueError` naming `name` for anything else, and for a variable named as one of [`chat_template_arguments`]
    (`{"add_generation_prompt": false}` would fail every prompt rendered with it)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"`{name}` must be a JSON object such as '{{\"enable_thinking\": false}}', got "
                             f"{value!r} ({error.msg}).") from None
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ValueError(f"`{name}` must be a mapping of template variable names to values, got {value!r}.")
    reserved = sorted(set(value) & chat_template_arguments())
    if reserved:
        raise ValueError(f"`{name}` may not set {', '.join(reserved)}: apply_chat_template's own arguments, which "
                         "elical-hf sets; give only the template's variables (e.g. enable_thinking).")
    return dict(value)


def render_prompt(
    tokenizer: Any,
    user_text: str,
    *,
    use_chat_template: bool = True,
    system_prompt: str | None = None,
    add_generation_prompt: bool = True,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> str:
    """Wrap `user_text` in the tokenizer's chat template (when it has one and `use_chat_template` is set).

    Args:
        tokenizer ([`~transformers.PreTrainedTokenizerBase`]):
            The model's tokenizer; its `chat_template` is used when present.
        user_text (`str`):
            The filled-in prompt, e.g. `QA_PROMPT.format(question=...)`.
        use_chat_template (`bool`, *optional*, defaults to `True`):
            Whether to wrap the text in the chat template. Without a template the text is returned after the special
            tokens the tokenizer would put before it (its beginning-of-sequence token; [`special_prefix`]).
        system_prompt (`str`, *optional*):
            A system message to put first. `None` keeps the template's own default (if any).
        add_generation_prompt (`bool`, *optional*, defaults to `True`):
            Whether to append the assistant turn header, so the last token is where the model starts answering.
        chat_template_kwargs (`dict`, *optional*):
            Extra variables of the chat template (e.g. `{"enable_thinking": False}`); `None`: those of
            [`chat_template_kwargs_for`] (thinking off for a hybrid reasoning template, nothing otherwise).

    Returns:
        `str`: the text to tokenize (special tokens included; tokenize it with `add_special_tokens=False`).
    """
    if not use_chat_template or not getattr(tokenizer, "chat_template", None):
        prefix = special_prefix(tokenizer)
        return user_text if user_text.startswith(prefix) else prefix + user_text
    messages = [{"role": "user", "content": user_text}]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         **chat_template_kwargs_for(tokenizer, chat_template_kwargs))


def special_prefix(tokenizer: Any) -> str:
    """The special tokens `tokenizer` puts before a text by default (e.g. `"<bos>"`), as text; `""` when it adds none.

    Prompts are tokenized with `add_special_tokens=False`, since a chat template writes the model's special tokens into
    the text itself. A prompt without a chat template would then lose the beginning-of-sequence token the model was
    trained with (a base Gemma or Llama reads garbage without it), so [`render_prompt`] writes this prefix instead.
    Special tokens the tokenizer appends (an end-of-sequence token) are not part of a prompt and are left out.
    """
    if not callable(tokenizer):
        return ""
    probe = "Question"
    bare = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(probe, add_special_tokens=True)["input_ids"])
    start = next((i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare), 0)
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    prefix = full[:start]
    if not bare or not prefix or not all(token in special for token in prefix):
        return ""
    return "".join(tokenizer.convert_ids_to_tokens(prefix))


MIN_SHARED_PREFIX = 32
"""Shortest token prefix common to a batch of prompts that is worth running once for the whole batch (the chat
template and instruction every question prompt starts with, a few-shot block)."""


def common_prefix_length(token_ids: list[list[int]]) -> int:
    """Number of leading tokens that every sequence of `token_ids` shares (0 for an empty list)."""
    if not token_ids:
        return 0
    first, length = token_ids[0], min(len(ids) for ids in token_ids)
    for ids in token_ids[1:]:
        length = next((i for i in range(length) if ids[i] != first[i]), length)
    return length


def shared_prefix_length(token_ids: list[list[int]]) -> int:
    """Length of the prefix of `token_ids` worth running once for all of them: their common prefix, short enough
    that every sequence keeps at least one token of its own, and 0 when that is under `MIN_SHARED_PREFIX` tokens or
    there are fewer than two sequences."""
    if len(token_ids) < 2:
        return 0
    shared = min(common_prefix_length(token_ids), min(len(ids) for ids in token_ids) - 1)
    return shared if shared >= MIN_SHARED_PREFIX else 0
