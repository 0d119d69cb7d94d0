"""`SamplingSettings`: how the sampler decodes (the paper's recipe by default), and the options of `elical-hf sample`.

No torch here: `elical-hf sample --help` and anything that only describes a sampling run (manifests, `merge`) read
these settings without loading the decoder ([`~elical_hf.signals.generation`]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..settings.prompts import QA_PROMPT, check_chat_template_kwargs, prompt_template_problem


__all__ = ["SamplingSettings"]


@dataclass
class SamplingSettings:
    r"""
    How [`~elical_hf.signals.generate_answers`] decodes: the paper's sampling recipe by default.

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
        greedy_repetition_penalty (`float`, *optional*, defaults to `1.0`):
            The same penalty for the greedy answer: its next token is the argmax of the penalized logits, as
            `generate(do_sample=False, repetition_penalty=...)` picks it (its logged log-probabilities stay the
            model's own). `1.0` (the default) is the plain argmax. The paper's reference code passes 1.05 to its greedy
            decoding too (`infer_scripts/run_infer_consistency.sh:54-56`): `1.05` reproduces it (`docs/reference.md`).
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
            Wrap the prompt in the tokenizer's chat template (see [`~elical_hf.settings.prompts.render_prompt`]).
        system_prompt (`str`, *optional*):
            System message; `None` keeps the template's default.
        chat_template_kwargs (`dict` or `str`, *optional*):
            Extra variables of the chat template (a JSON object on the command line, e.g. `'{"enable_thinking":
            true}'`). `None` (the default): thinking off for a hybrid reasoning template such as Qwen3's, nothing for
            other templates ([`~elical_hf.settings.prompts.chat_template_kwargs_for`]).
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
    chat_template_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "Chat template variables as a JSON object, e.g. '{\"enable_thinking\": true}'; default: "
                  "thinking off for a hybrid reasoning template (Qwen3), nothing otherwise."},
    )
    greedy_repetition_penalty: float = field(
        default=1.0,
        metadata={"help": "Repetition penalty (> 0) of the greedy answer; 1.0 (default) is the plain argmax, 1.05 the "
                  "paper's reference code."},
    )

    def __post_init__(self):
        checks = [
            ("num_samples", self.num_samples >= 1, "must be >= 1"),
            ("temperature", self.temperature > 0, "must be > 0 (the greedy answer already uses temperature 0)"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("top_k", self.top_k >= 0, "must be >= 0 (0 disables top-k)"),
            ("repetition_penalty", self.repetition_penalty > 0, "must be > 0 (1.0 disables it)"),
            ("greedy_repetition_penalty", self.greedy_repetition_penalty > 0, "must be > 0 (1.0 disables it)"),
            ("max_new_tokens", self.max_new_tokens >= 1, "must be >= 1"),
            ("batch_size", self.batch_size is None or self.batch_size >= 1, "must be >= 1 (or None: automatic)"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"`{name}` {rule}, got {getattr(self, name)!r}.")
        problem = prompt_template_problem(self.prompt_template)
        if problem:
            raise ValueError(problem)
        self.chat_template_kwargs = check_chat_template_kwargs(self.chat_template_kwargs, "--chat_template_kwargs")
        if isinstance(self.stop_strings, str):
            self.stop_strings = [self.stop_strings]
        self.stop_strings = list(self.stop_strings)
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            raise ValueError(f"`stop_strings` must be non-empty strings, got {self.stop_strings!r}.")
