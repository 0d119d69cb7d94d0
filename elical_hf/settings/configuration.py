"""`ConfidenceConfig`: everything besides weights that a confidence model needs to score a question.

It is saved as `confidence_config.json` next to the adapter. That file is written last and atomically, so it is also
the marker of a complete save: a folder without it is never loaded as a confidence model. It is read strictly
([`ConfidenceConfig.from_json_file`]): a hand-edited file with a missing or unknown field, or a value of the wrong type
or out of range, is refused with every problem on its own line, never filled in with a default.
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from ..utils.atomic import atomic_write_text
from .prompts import QA_PROMPT, check_chat_template_kwargs, prompt_template_problem, render_prompt


CONFIDENCE_CONFIG_NAME = "confidence_config.json"
POOLING_MODES = ("last_token",)
HEAD_ACTIVATIONS = ("sigmoid",)
HEAD_TYPES = ("linear", "mlp")
HEAD_INITS = ("normal", "torch_default")
CHAT_CONTEXTS = ("question", "refuse")
"""How a chat request's messages are read ([`ConfidenceConfig`]'s `chat_context`, [`chat_rule_broken`])."""


def chat_rule_broken(from_user: Sequence[bool], chat_context: str) -> str | None:
    """The rule of `chat_context` a chat request breaks, its messages told apart as the user's or not (`from_user`,
    in order): `"single"` (`"refuse"` takes one message only), `"last"` (its last message, the question, is not the
    user's), or `None`: its last message is the question. The server and the LangChain gate word the refusal."""
    if chat_context == "refuse" and len(from_user) != 1:
        return "single"
    return None if from_user and from_user[-1] else "last"
REQUIRED_FIELDS = (
    "prompt_template", "use_chat_template", "system_prompt", "add_generation_prompt", "pooling", "head_activation",
    "max_length", "base_model_name_or_path", "base_model_signature", "base_weights_source", "decision_threshold",
    "training_history",
)
"""The fields of `confidence_config.json` that every version's `save_pretrained` wrote: a file without one is refused.
The fields added later (`prompt_tail`, `chat_template_kwargs`, `head_type`, `head_init`, `feature_layer`,
`retrieve_threshold`, `risk_control`, `domain_thresholds`, `use_lora`, `chat_context`) may be missing; their defaults
are what older saves meant (`chat_context`: older versions refused a request with a system prompt or earlier turns,
which `"question"` now reads)."""
VERSION_KEY = "elical_hf_version"
MAX_CONTEXT_TOKENS = 1 << 24
"""The largest `max_length` a config may hold (16,777,216 tokens: beyond any model's context)."""
"""The one key of `confidence_config.json` that is not a field: the elical-hf version that wrote it."""
PROBE_QUESTIONS = ("Who wrote Hamlet?", "What is the capital of France, the country?")
"""Two questions that differ at the start and at the end: a prompt that renders them alike drops the question."""
_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", float: "a number", dict: "an object",
               list: "a list"}


def feature_layer_problem(feature_layer: int, num_hidden_layers: int | None) -> str | None:
    """One line when `feature_layer` names no hidden state a head can read in a backbone of `num_hidden_layers`
    decoder blocks: valid are `1` to `num_hidden_layers` and `-num_hidden_layers` to `-1` (see
    [`ConfidenceConfig.feature_layer`]); `0`, the token embeddings, is the same for every question's last token.
    With `num_hidden_layers=None` (not known yet) only `0` is refused."""
    if feature_layer != 0 and (num_hidden_layers is None or abs(feature_layer) <= num_hidden_layers):
        return None
    if num_hidden_layers is None:
        return ("`feature_layer` 0 names the token embeddings, the same for every question's last token: use 1 or "
                "more, or -1 (the final layer) and less counting from the end.")
    return (f"`feature_layer` {feature_layer} is out of range for a backbone of {num_hidden_layers} layers: use 1 to "
            f"{num_hidden_layers}, or -{num_hidden_layers} to -1 counting from the end (-1 is the final layer).")


def resolve_feature_layer(feature_layer: int | None, num_hidden_layers: int) -> int:
    """The hidden-state index `feature_layer` names in a backbone of `num_hidden_layers` blocks, from 1 to
    `num_hidden_layers` (`None`: the final layer, `num_hidden_layers`; `-k`: `num_hidden_layers + 1 - k`); one
    `ValueError` line naming the valid range otherwise ([`feature_layer_problem`])."""
    if feature_layer is None:
        return num_hidden_layers
    problem = feature_layer_problem(feature_layer, num_hidden_layers)
    if problem:
        raise ValueError(problem)
    return feature_layer if feature_layer > 0 else num_hidden_layers + 1 + feature_layer


def domain_thresholds_problem(value: dict[str, Any]) -> str | None:
    """One line when `value` is not a [`ConfidenceConfig.domain_thresholds`] map: `by` a string, `domains` a
    non-empty object whose entries each hold a `decision_threshold` in [0, 1] or `null` (the fallback)."""
    domains = value.get("domains")
    if not isinstance(value.get("by"), str) or not isinstance(domains, dict) or not domains:
        return ("`domain_thresholds` must be an object with a string `by` and a non-empty object `domains`, got "
                f"{json.dumps(value, default=repr):.80}.")
    for name, entry in domains.items():
        threshold = entry.get("decision_threshold") if isinstance(entry, dict) else "missing"
        if threshold is None:
            continue
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            return (f"`domain_thresholds.domains[{name!r}]` must be an object whose `decision_threshold` is a number "
                    f"in [0, 1] or null, got {json.dumps(entry, default=repr):.80}.")
    return None


def backbone_signature(config: Any) -> dict[str, Any]:
    """The facts about a backbone that an adapter depends on; two bases with different signatures are not
    interchangeable."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {
        "model_type": getattr(text_config, "model_type", None),
        "hidden_size": getattr(text_config, "hidden_size", None),
        "num_hidden_layers": getattr(text_config, "num_hidden_layers", None),
        "vocab_size": getattr(text_config, "vocab_size", None),
    }


@dataclass
class ConfidenceConfig:
    r"""
    Settings of a confidence model that are not weights: how a question becomes the text the head reads, how that
    text is pooled, and where the model came from.

    Parameters:
        prompt_template (`str`, *optional*, defaults to the paper's QA prompt):
            Template with a `{question}` field. The filled-in text is wrapped in the model's chat template.
        prompt_tail (`str`, *optional*, defaults to `""`):
            Text appended to the filled-in template, before the chat template wraps it (e.g.
            [`~elical_hf.settings.prompts.REFERENCE_PROMPT_TAIL`], `"\nAnswer: "`). Part of the text the head was
            trained on, so it is saved with the model; a head scores differently with and without it.
        use_chat_template (`bool`, *optional*, defaults to `True`):
            Whether to wrap the prompt in the tokenizer's chat template (ignored when the tokenizer has none).
        system_prompt (`str`, *optional*):
            System message placed before the question; `None` keeps the chat template's default.
        add_generation_prompt (`bool`, *optional*, defaults to `True`):
            Append the assistant header, so the pooled token is where the model would start answering.
        chat_template_kwargs (`dict`, *optional*):
            Extra variables of the chat template, part of the text the head reads (and of the gate's answer prompt).
            A new model records them from its tokenizer ([`~elical_hf.settings.prompts.chat_template_kwargs_for`]):
            `{"enable_thinking": false}` for a hybrid reasoning template (Qwen3), so prompts and answers carry no
            reasoning block; `None` for other templates (and older saves: rendered the same way).
        pooling (`str`, *optional*, defaults to `"last_token"`):
            Which hidden state feeds the head. `"last_token"`: the last real token of each row, found from the
            attention mask (correct under left or right padding, and when the pad token equals EOS).
        feature_layer (`int`, *optional*):
            The layer whose hidden state (of the pooled token) the head reads: an index into transformers'
            `output_hidden_states` of the backbone, `L` = `num_hidden_layers`. `i` in `1 .. L - 1` is the residual
            stream after the first `i` decoder blocks, *without* the final norm (`hidden_states[i]`); `L` is the final
            hidden state, after the final norm (`hidden_states[L]` = `last_hidden_state`, the paper's). Negative values
            count from the end: `-1` is `L`, `-8` is `L - 7`. `0` (the token embeddings) and anything outside
            `-L .. L` are refused. Scoring and training run only the first `i` blocks, and a fresh model's LoRA
            adapts only those blocks. `None` (older saves): the final layer; a new model built by
            [`AutoModelForConfidence`] records its index (from 1 to `L`).
        head_activation (`str`, *optional*, defaults to `"sigmoid"`):
            Maps the head's logit to a confidence in [0, 1].
        head_type (`str`, *optional*, defaults to `"linear"`):
            The head on the pooled hidden state. `"linear"`: `Linear(hidden_size, 1)` (the paper's). `"mlp"`:
            `hidden_size -> hidden_size // 2 -> hidden_size // 4 -> 1` with ReLU between, the reference code's head
            for its no-LoRA ablation (`honesty_alignment/train_mlp.py`). Saved with the model; loading rebuilds it.
        head_init (`str`, *optional*, defaults to `"normal"`):
            How a fresh head's weights are drawn (a loaded head keeps its trained weights). `"normal"`: transformers'
            `_init_weights`, weights from N(0, `initializer_range`) (0.02 for most models), biases 0. `"torch_default"`:
            PyTorch's `nn.Linear` default, weights and biases uniform in +-1/sqrt(fan_in), as the reference code's head.
        chat_context (`str`, *optional*, defaults to `"question"`):
            How the gate reads a chat request (`/v1/chat/completions`, the LangChain gate): `"question"`, its last
            message, which must be the user's, is the question, scored and answered as in training (the saved prompt
            and system prompt); a system prompt or earlier turns of the request are left out of both, and the reply
            counts them (`elical.messages_left_out`); `"refuse"`, a request with more than one user message is
            refused. Training reads questions alone either way, so training and serving agree.
        max_length (`int`, *optional*):
            Longest prompt in tokens; longer prompts are truncated from the left so the end of the prompt is kept,
            with a warning that counts them. `None` (the default) means no limit here; a new model built by
            [`AutoModelForConfidence`] records its backbone's context length (`max_position_embeddings`).
        base_model_name_or_path (`str`, *optional*):
            Hub id of the frozen backbone (never a local cache path when a Hub id is known).
        base_model_signature (`dict`, *optional*):
            `model_type`, `hidden_size`, `num_hidden_layers`, `vocab_size` of the backbone; checked on load.
        base_weights_source (`str`, *optional*):
            Where the backbone weights really came from (e.g. a dequantized GGUF when the Hub was unreachable).
        decision_threshold (`float`, *optional*):
            Answer when confidence >= threshold (set by `elical-hf threshold`: the alignment rule, or a guaranteed
            error rate with `--alpha`); below it abstain, or retrieve (see `retrieve_threshold`).
        retrieve_threshold (`float`, *optional*):
            The gate's third decision ([`~elical_hf.gate.decide`]): confidences in `[retrieve_threshold,
            decision_threshold)` retrieve context before answering, lower ones abstain. `None`: never retrieve; `0.0`:
            retrieve instead of abstaining.
        risk_control (`dict`, *optional*):
            How `decision_threshold` was chosen when it carries a guarantee ([`~elical_hf.metrics.
            risk_controlling_threshold`]): `alpha`, `delta`, `n`, `coverage`, `risk`, `risk_upper_bound`, `method`,
            `sequences` (the fixed sequences delta was split over; absent in configs saved before there were several,
            whose `method` names the single sequence), `records`, `split` (and `training_rows`, the calibration rows
            the model was trained on, where `--allow_training_rows` let them in: no guarantee then); with a second
            guarantee on the abstention rate (`--max_abstention`) also `max_abstention`, `abstention`,
            `abstention_upper_bound`, `error_certified`, `abstention_certified`. The guarantee is `P(R <= alpha) >=
            1 - delta` over the draw of the `n` calibration rows, no threshold counting as success. Cleared when the
            threshold is set another way.
        domain_thresholds (`dict`, *optional*):
            One decision threshold per domain (`elical-hf threshold --by dataset`), read by
            [`~elical_hf.gate.thresholds_for`]: `by` (the record column that names the domain), `min_rows` and
            `domains`, a map from each domain seen in the calibration records to `decision_threshold` (chosen on
            that domain's rows by the same rule, `null`: the fallback, `decision_threshold` above), `rows`,
            `answered`, `risk_control` (the domain's guarantee, with `--alpha`) and `fallback` (why the domain has no
            threshold of its own, e.g. too few rows, and with `--alpha` that the pooled guarantee covers the mix of
            domains, not this domain's questions; `null` otherwise). `None`: one threshold for every question.
            Cleared when the threshold is set without `--by`.
        use_lora (`bool`, *optional*, defaults to `True`):
            `False`: no LoRA, only the head trains, on the frozen backbone's own hidden states (the gate's zero-overhead
            mode: the prefill that starts the answer also gives the confidence). PEFT needs one adapted module, so such
            a model carries a rank-1 LoRA on one projection that stays zero, frozen and switched off.
        training_history (`list[dict]`, *optional*):
            One entry per training run: stage, label column, number of examples, what was trainable.
    """

    prompt_template: str = QA_PROMPT
    prompt_tail: str = ""
    use_chat_template: bool = True
    system_prompt: str | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    pooling: str = "last_token"
    feature_layer: int | None = None
    head_activation: str = "sigmoid"
    head_type: str = "linear"
    head_init: str = "normal"
    chat_context: str = "question"
    max_length: int | None = None
    base_model_name_or_path: str | None = None
    base_model_signature: dict[str, Any] | None = None
    base_weights_source: str | None = None
    decision_threshold: float | None = None
    retrieve_threshold: float | None = None
    risk_control: dict[str, Any] | None = None
    domain_thresholds: dict[str, Any] | None = None
    use_lora: bool = True
    training_history: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.chat_template_kwargs = check_chat_template_kwargs(self.chat_template_kwargs)
        problems = self.problems(vars(self))
        if problems:
            raise ValueError("\n".join(problems))

    @classmethod
    def problems(cls, values: dict[str, Any]) -> list[str]:
        """Everything wrong with the settings `values` (field name -> value; a missing field counts as its default),
        one line per problem: the type of each field (booleans must be booleans, numbers numbers, never strings),
        then its value (ranges, choices, the template: [`~elical_hf.settings.prompts.prompt_template_problem`])."""
        hints = typing.get_type_hints(cls)
        problems, typed = [], {}  # typed: each field of the right type, with its value (or its default)
        for f in fields(cls):
            value = values[f.name] if f.name in values else (
                f.default if f.default is not MISSING else f.default_factory())
            problem = _type_problem(f.name, value, hints[f.name])
            if problem:
                problems.append(problem)
            else:
                typed[f.name] = value
        checks = [prompt_template_problem(typed["prompt_template"]) if "prompt_template" in typed else None]
        checks += [f"`{name}` must be one of {choices}, got {typed[name]!r}." for name, choices in (
            ("pooling", POOLING_MODES), ("head_activation", HEAD_ACTIVATIONS), ("head_type", HEAD_TYPES),
            ("head_init", HEAD_INITS), ("chat_context", CHAT_CONTEXTS))
            if name in typed and typed[name] not in choices]
        if typed.get("feature_layer") is not None:  # checked against the backbone's depth where the file names it
            layers = (typed.get("base_model_signature") or {}).get("num_hidden_layers")
            known = isinstance(layers, int) and not isinstance(layers, bool) and layers > 0
            checks.append(feature_layer_problem(typed["feature_layer"], layers if known else None))
        if typed.get("max_length") is not None and not 8 <= typed["max_length"] <= MAX_CONTEXT_TOKENS:
            checks.append(f"`max_length` must lie in [8, {MAX_CONTEXT_TOKENS:,}] tokens, got {typed['max_length']:,}.")
        for name in ("decision_threshold", "retrieve_threshold"):
            if typed.get(name) is not None and not 0.0 <= typed[name] <= 1.0:
                checks.append(f"`{name}` must lie in [0, 1], got {typed[name]}.")
        retrieve, decide = typed.get("retrieve_threshold"), typed.get("decision_threshold")
        if retrieve is not None and decide is not None and retrieve > decide:
            checks.append(f"`retrieve_threshold` ({retrieve}) must not exceed `decision_threshold` ({decide}).")
        if typed.get("domain_thresholds") is not None:
            checks.append(domain_thresholds_problem(typed["domain_thresholds"]))
            if "decision_threshold" in typed and typed["decision_threshold"] is None:
                checks.append("`domain_thresholds` needs a `decision_threshold`: the fallback of every other domain.")
        for i, entry in enumerate(typed.get("training_history") or []):
            if not isinstance(entry, dict) or not isinstance(entry.get("stage"), str):
                checks.append(f"`training_history[{i}]` must be an object with a string `stage`, got {entry!r}.")
        return problems + [check for check in checks if check]

    def check_renders_question(self, tokenizer: Any, where: str) -> None:
        """Refuse (one `ValueError` naming `where`) a prompt that is the same for two different questions: a chat
        template that drops the user's message would give every question the same confidence."""
        try:
            first, second = (self.format_prompt(question, tokenizer) for question in PROBE_QUESTIONS)
        except Exception as error:  # noqa: BLE001 - the template is the folder's (Jinja raises its own errors)
            raise ValueError(f"{where}: its chat template fails to render a question ({type(error).__name__}: "
                             f"{error}). Fix the chat template (chat_template.jinja), or set `use_chat_template` to "
                             "false.") from None
        if first == second:
            raise ValueError(
                f"{where}: the prompt is the same for every question ({first[:80]!r}): its chat template drops the "
                "user's message, so every question would get the same confidence. Fix the chat template "
                "(chat_template.jinja), or set `use_chat_template` to false."
            )

    @property
    def trained_stages(self) -> list[str]:
        """Stages this model went through, in order (e.g. `["elicitation", "calibration"]`)."""
        return [entry["stage"] for entry in self.training_history]

    def feature_layer_index(self, num_hidden_layers: int | None = None) -> int | None:
        """The hidden-state index the head reads, from 1 to the backbone's number of layers ([`feature_layer`]
        resolved by [`resolve_feature_layer`]) for a backbone of `num_hidden_layers` blocks (defaults to
        `base_model_signature`'s); `None` when neither says how deep the backbone is."""
        if num_hidden_layers is None:
            num_hidden_layers = (self.base_model_signature or {}).get("num_hidden_layers")
        return None if num_hidden_layers is None else resolve_feature_layer(self.feature_layer, num_hidden_layers)

    def format_prompt(self, question: str, tokenizer: Any) -> str:
        """The exact text the head reads for `question` (tokenize it with `add_special_tokens=False`)."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"Questions must be non-empty strings, got {question!r}.")
        return render_prompt(
            tokenizer,
            self._user_text(question),
            use_chat_template=self.use_chat_template,
            system_prompt=self.system_prompt,
            add_generation_prompt=self.add_generation_prompt,
            chat_template_kwargs=self.chat_template_kwargs,
        )

    def _user_text(self, question: str) -> str:
        return self.prompt_template.format(question=question.strip()) + self.prompt_tail

    def prompt_messages(self, question: str) -> list[dict[str, str]]:
        """The chat messages of the prompt [`format_prompt`] renders for `question` (the saved system prompt, if any,
        then the question in the prompt template): what a chat endpoint is asked for the answer the confidence is
        about."""
        user = [{"role": "user", "content": self._user_text(question)}]
        return user if self.system_prompt is None else [{"role": "system", "content": self.system_prompt}, *user]

    def to_dict(self) -> dict[str, Any]:
        from ..version import __version__

        return {**asdict(self), "elical_hf_version": __version__}

    def to_json_string(self) -> str:
        """The text of `confidence_config.json` ([`save_pretrained`] writes it)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write `confidence_config.json` into `save_directory` atomically."""
        os.makedirs(save_directory, exist_ok=True)
        atomic_write_text(os.path.join(save_directory, CONFIDENCE_CONFIG_NAME), self.to_json_string())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfidenceConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> ConfidenceConfig:
        """Read a saved config strictly: one `ValueError` naming the file for broken JSON, or listing every problem,
        one per line: a field of [`REQUIRED_FIELDS`] missing, an unknown field, a value of the wrong type or out of
        range ([`problems`])."""
        duplicated: list[str] = []

        def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            keys = [key for key, _ in pairs]
            duplicated.extend(sorted({key for key in keys if keys.count(key) > 1}))
            return dict(pairs)

        with open(path, encoding="utf-8") as handle:
            try:
                data = json.load(handle, object_pairs_hook=no_duplicates)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}, column "
                                 f"{error.colno}): an interrupted or hand-edited save.") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object of settings, got {json.dumps(data):.80}.")
        known = {f.name for f in fields(cls)}
        missing = [name for name in REQUIRED_FIELDS if name not in data]
        unknown = sorted(key for key in data if key not in known | {VERSION_KEY})
        problems = [f"missing field(s) {', '.join(missing)} (every saved model has them: an old or hand-written "
                    "file? save the model again)"] if missing else []
        if duplicated:
            problems.append(f"field(s) {', '.join(dict.fromkeys(duplicated))} given more than once (JSON keeps only the "
                            "last: which one was meant?)")
        if unknown:
            problems.append(f"unknown field(s) {', '.join(unknown)} (a typo, or written by a newer elical-hf?)")
        if not isinstance(data.get(VERSION_KEY, ""), str):
            problems.append(f"`{VERSION_KEY}` must be a string, got {data[VERSION_KEY]!r}.")
        problems += cls.problems(data)
        if len(problems) == 1:
            raise ValueError(f"{path}: {problems[0]}")
        if problems:
            raise ValueError(f"{path} has {len(problems)} problems:\n" + "\n".join(f"  {p}" for p in problems))
        return cls.from_dict(data)


def _type_problem(name: str, value: Any, hint: Any) -> str | None:
    """One line when `value` is not of the field type `hint` (e.g. `float | None`) as JSON writes it: `true` is no
    number and `"false"` no boolean; an integer is a number."""
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    nullable = type(None) in allowed
    expected = next(typing.get_origin(kind) or kind for kind in allowed if kind is not type(None))
    if value is None and nullable:
        return None
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected in (int, float):
        ok = isinstance(value, int if expected is int else (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, expected)
    if ok:
        return None
    shown = json.dumps(value, default=repr)  # as the file spells it: `true`, `"false"`, `512.0`
    return f"`{name}` must be {_TYPE_NAMES[expected]}{' or null' if nullable else ''}, got {shown:.80}."
