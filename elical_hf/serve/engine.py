"""What the server computes for a batch of chat requests: the checks every engine shares ([`Engine`]) and the
gate's decision and answer ([`GateEngine`]).

- [`GateEngine`] (`elical-hf serve MODEL`): each request is one question, scored before generation and answered by
  the unadapted base model, or abstained, or answered with retrieved context, exactly as `model.answer` does (it
  calls [`~elical_hf.gate.answer_questions`] once per batch). The decision travels in the response's `elical`
  field and in `x-elical-*` headers; an abstention answers with the configured message and
  `finish_reason: "abstain"`. A streamed request is told its decision and tokens as they come
  ([`~elical_hf.serve.stream`]); a `/v1/confidence` request is scored only ([`~elical_hf.serve.confidence`]).
- [`~elical_hf.serve.completion.CompletionEngine`] (`elical-hf serve MODEL --mode completion`,
  `serve/completion.py`): a plain greedy chat completion of any causal LM, the whole conversation rendered by its chat
  template (what an LLM judge needs; no gating).

Both check each request before it joins a batch ([`Engine.prepare`]: model name, messages, `max_tokens` against the
server's limit, stop strings, template variables, thresholds) and, on the worker thread, what only the tokenizer can
tell (its prompt and answer fit the context, its chat template renders, its retrieved context); a refused request
becomes a [`~elical_hf.serve.schema.RequestError`] of its own and never fails the others of its batch. The rows of
a request whose client left stop decoding ([`Job.cancelled`]), and a retriever that does not answer within its
timeout fails its own request alone.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..utils.loading import unwrap_peft
from ..settings.prompts import ABSTAIN_MESSAGE
from . import UNKNOWN_DOMAIN_CHOICES
from .confidence import CONFIDENCE_SLICE_TOKENS, MAX_CONFIDENCE_TOKENS
from .retrieval import MAX_CONCURRENT_RETRIEVALS, RetrieverPool, checked_retriever
from .schema import ChatCompletionRequest, GateOptions, Reply, RequestError, check_supported
from .stream import TokenStream, gate_headers, logprob_entries


logger = logging.getLogger(__name__)

ABSTAIN_FINISH_REASON = "abstain"
MAX_TOKENS_LIMIT = 256
"""The most answer tokens a request may ask for by default (`elical-hf serve --max_tokens_limit`): a batch decodes
until its longest answer ends, and the requests that arrive meanwhile wait for it."""
MAX_QUESTIONS = 256
"""The most questions a `/v1/confidence` request may send by default (`elical-hf serve --max_questions`)."""
RETRIEVER_TIMEOUT = 10.0
"""Seconds a retriever call may take by default (`elical-hf serve --retriever_timeout`): the model waits for it."""


@dataclasses.dataclass
class Job:
    """One checked request: its messages as `{"role", "content"}` dicts and its decoding and gate settings."""

    messages: list[dict[str, str]]
    max_tokens: int
    stop: tuple[str, ...]
    threshold: float | None = None
    retrieve_threshold: float | None = None
    repetition_penalty: float = 1.0
    chat_template_kwargs: dict[str, Any] | None = None
    top_logprobs: int | None = None
    """`logprobs` with this many `top_logprobs` per token (`None`: no `logprobs`)."""
    domain: str | None = None
    """The request's `elical.domain`: its thresholds are that domain's ([`GateEngine.domain_thresholds`])."""
    left_out: int = 0
    """The request's messages the gate left out (its system prompt and earlier turns: [`question_of`])."""
    id: str = dataclasses.field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False, compare=False)
    """Set (by the server's route) when the client left: the job's rows stop decoding."""
    listener: Callable[[tuple], None] | None = dataclasses.field(default=None, repr=False, compare=False)
    """Set (by the server's route) for a streamed request: told its decision and tokens on the worker thread
    ([`~elical_hf.serve.stream`])."""

    @property
    def group(self) -> tuple[int, str]:
        """Jobs that can share one call: the same answer length, stop strings, thresholds and penalty (the template
        variables only change each prompt's own rendering). Sortable, shortest answers first."""
        return self.max_tokens, repr((self.stop, self.threshold, self.retrieve_threshold, self.repetition_penalty))


def finish_reason(tokens: list[str], max_tokens: int, special_tokens: set[str], stop: tuple[str, ...] = ()) -> str:
    """Why an answer of `tokens` (one decoded string per token, as the gate returns them) ended: `"stop"` (an EOS or
    another special token, a stop string) or `"length"` (cut at `max_tokens`)."""
    if len(tokens) < max_tokens or tokens[-1] in special_tokens:
        return "stop"
    return "stop" if any(s in "".join(tokens) for s in stop) else "length"


class Engine:
    """
    The part of both engines that reads requests and writes responses.

    Args:
        tokenizer: The model's tokenizer (used on the worker thread only).
        model_name (`str`): The name `/v1/models` lists; a request naming another model is refused.
        context_length (`int`, *optional*): The model's context in tokens (prompt plus answer must fit).
        max_tokens (`int`, *optional*, defaults to 64): Answer tokens when a request gives no `max_tokens`.
        batch_size (`int`, *optional*, defaults to 16): Prompts per decoding batch.
        max_tokens_limit (`int`, *optional*, defaults to 256): The most answer tokens a request may ask for (a
            request above it is refused with a 400, not cut short).
    """

    mode = "base"

    def __init__(self, tokenizer: Any, model_name: str, context_length: int | None, max_tokens: int = 64,
                 batch_size: int = 16, max_tokens_limit: int = MAX_TOKENS_LIMIT) -> None:
        if max_tokens < 1:
            raise ValueError(f"--max_tokens must be >= 1, got {max_tokens}.")
        if max_tokens > max_tokens_limit:
            raise ValueError(f"--max_tokens ({max_tokens}) must not exceed --max_tokens_limit ({max_tokens_limit}).")
        self.tokenizer, self.model_name, self.context_length = tokenizer, model_name, context_length
        self.max_tokens, self.batch_size, self.max_tokens_limit = max_tokens, batch_size, max_tokens_limit
        self.special_tokens = set(tokenizer.all_special_tokens)

    def prepare(self, request: ChatCompletionRequest) -> Job:
        """Check a parsed request (in the event loop: nothing here touches the model or the tokenizer)."""
        check_supported(request)
        if request.model not in (None, "", self.model_name):
            raise RequestError(f"The model {request.model!r} is not served here; this server serves "
                               f"{self.model_name!r} (GET /v1/models).", param="model", code="model_not_found",
                               status=404)
        messages = [{"role": m.role, "content": m.text(i)} for i, m in enumerate(request.messages)]
        max_tokens = request.max_completion_tokens or request.max_tokens or self.max_tokens
        if max_tokens > self.max_tokens_limit:
            raise RequestError(f"max_tokens={max_tokens} is more than this server's limit of {self.max_tokens_limit} "
                               "(--max_tokens_limit): ask for fewer tokens.",
                               param="max_completion_tokens" if request.max_completion_tokens else "max_tokens",
                               code="max_tokens_limit_exceeded")
        if self.context_length is not None and max_tokens >= self.context_length:
            raise RequestError(f"max_tokens={max_tokens} leaves no room for a prompt in the model's context of "
                               f"{self.context_length} tokens.", param="max_tokens", code="context_length_exceeded")
        penalty = 1.0 if request.repetition_penalty is None else request.repetition_penalty
        return Job(messages, max_tokens, request.stop_strings(), repetition_penalty=penalty,
                   chat_template_kwargs=request.chat_template_kwargs,
                   top_logprobs=(request.top_logprobs or 0) if request.logprobs else None)

    def run(self, jobs: list[Job]) -> list[Reply | RequestError]:
        """Compute jobs that share their settings ([`Job.group`]; the server's batcher runs one call per group), on
        the worker thread: a reply, or the error of that job alone, per job."""
        if len({job.group for job in jobs}) > 1:
            raise ValueError("`Engine.run` computes jobs of one group (the same max_tokens, stop strings, thresholds "
                             "and penalty); split the batch by `Job.group`.")
        return self.run_group(jobs) if jobs else []

    def run_group(self, jobs: list[Job]) -> list[Reply | RequestError]:
        raise NotImplementedError

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> RequestError | None:
        """The error for a prompt that, with `max_tokens` answer tokens, does not fit the context (else `None`)."""
        if self.context_length is None or prompt_tokens + max_tokens <= self.context_length:
            return None
        return RequestError(f"This request's prompt has {prompt_tokens} tokens (chat template included) and asks for "
                            f"max_tokens={max_tokens}: together more than the model's context of "
                            f"{self.context_length} tokens. Shorten the messages or lower max_tokens.",
                            param="messages", code="context_length_exceeded")

    def finish_reason(self, tokens: list[str], job: Job) -> str:
        return finish_reason(tokens, job.max_tokens, self.special_tokens, job.stop)

    def reply(self, job: Job, content: str, finish_reason: str, prompt_tokens: int, completion_tokens: int,
              **extra: Any) -> Reply:
        body = {
            "id": job.id, "object": "chat.completion", "created": job.created, "model": self.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason, "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            **extra,
        }
        return Reply(body)

    def prompt_ids(self, texts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]


def question_of(messages: list[dict[str, str]], chat_context: str) -> tuple[list[dict[str, str]], int]:
    """The question a chat request asks the gate, as `([its user message], messages left out)`, by the model's
    `chat_context` ([`~elical_hf.settings.configuration.ConfidenceConfig`]): `"question"`, the last message, which must
    be the user's (a system prompt and earlier turns are left out: the confidence was trained on questions alone, and
    the answer it is about is the answer to the question as trained); `"refuse"`, a single user message only. A
    `RequestError` (400 `unsupported_messages`) otherwise."""
    from ..settings.configuration import chat_rule_broken

    roles = [m["role"] for m in messages]
    broken = chat_rule_broken([role == "user" for role in roles], chat_context)
    if broken == "single":
        raise RequestError(f"This model's gate scores one question: send a single user message, got {roles} (its "
                           "chat_context is 'refuse').", param="messages", code="unsupported_messages")
    if broken == "last":
        raise RequestError(f"The gate scores the question the last message asks: it must be the user's, got {roles}.",
                           param="messages", code="unsupported_messages")
    return messages[-1:], len(messages) - 1


class GateEngine(Engine):
    """
    Answer, retrieve or abstain per request, with a confidence model ([`~elical_hf.gate.answer_questions`]).

    A request is one question: its last message, the user's ([`question_of`]: a system prompt and earlier turns are
    left out of what is scored and answered, as the model's `chat_context` says, and counted in the reply).

    Args:
        model ([`PeftModelForConfidence`]): A saved confidence model loaded with [`AutoModelForConfidence`].
        model_name (`str`): The served name.
        threshold (`float`, *optional*), retrieve_threshold (`float`, *optional*): The gate's thresholds, defaulting
            to the model's saved ones; a request may raise them (`"elical": {"threshold": ...}`).
        retriever (`Callable[[str], str | None]`, *optional*): Context for questions in the retrieve band.
        abstain_message (`str`, *optional*): The content of an abstention.
        max_tokens (`int`, *optional*, defaults to 64), batch_size (`int`, *optional*, defaults to 16),
            max_tokens_limit (`int`, *optional*, defaults to 256): See [`Engine`].
        retriever_timeout (`float`, *optional*, defaults to 10): Seconds a retriever call may take; a request whose
            retrieval takes longer gets a 504 (`retriever_timeout`), the others of its batch are answered.
        max_concurrent_retrievals (`int`, *optional*, defaults to 4): The most retriever calls at once (the questions
            of a batch in the retrieve band are retrieved for side by side); also the most threads that calls past
            their timeout can hold ([`~elical_hf.serve.retrieval.RetrieverPool`]).
        allow_request_thresholds (`bool`, *optional*, defaults to `False`): Let a request set any thresholds; by
            default a request may only make the gate stricter (a threshold at or above the server's, or its domain's,
            a retrieve threshold at or above the band).
        allow_lower_domain_thresholds (`bool`, *optional*, defaults to `False`): Let a domain's saved thresholds lie
            below `threshold` / `retrieve_threshold`; by default those given here are a floor for every domain.
        unknown_domain (`str`, *optional*, defaults to `"refuse"`): A domain the model has no thresholds for:
            `"refuse"` it (400 `unknown_domain`), or gate its questions with the server's thresholds (`"fallback"`).
        max_questions (`int`, *optional*, defaults to 256), confidence_slice_tokens (`int`, *optional*, defaults to
            4096), max_confidence_tokens (`int`, *optional*, defaults to 32768): The limits of `/v1/confidence`
            ([`~elical_hf.serve.confidence`]): questions per request, prompt tokens scored in one call of the worker
            before the other requests' turn, and prompt tokens per request (its distinct questions).
        model_info (`dict`, *optional*): What `/v1/models` and `/v1/confidence` say about the model (its base model,
            its revision: [`~elical_hf.serve.confidence.saved_model_revision`]); never a local path.

    The thresholds of a request that names its domain (`"elical": {"domain": "nq"}`) are the model's saved ones for
    that domain ([`~elical_hf.gate.thresholds_for`]), raised to `threshold` / `retrieve_threshold` where those are
    given and lie above (the operator's floor); a domain without saved thresholds of its own is gated as any question
    (`threshold`, by default the saved fallback).
    """

    mode = "gate"

    def __init__(self, model: Any, model_name: str, *, threshold: float | None = None,
                 retrieve_threshold: float | None = None, retriever: Callable[[str], str | None] | None = None,
                 abstain_message: str = ABSTAIN_MESSAGE, max_tokens: int = 64, batch_size: int = 16,
                 max_tokens_limit: int = MAX_TOKENS_LIMIT, retriever_timeout: float = RETRIEVER_TIMEOUT,
                 max_concurrent_retrievals: int = MAX_CONCURRENT_RETRIEVALS, allow_request_thresholds: bool = False,
                 allow_lower_domain_thresholds: bool = False, unknown_domain: str = "refuse",
                 max_questions: int = MAX_QUESTIONS, confidence_slice_tokens: int = CONFIDENCE_SLICE_TOKENS,
                 max_confidence_tokens: int = MAX_CONFIDENCE_TOKENS, model_info: dict[str, Any] | None = None) -> None:
        from ..gate import check_thresholds
        from ..signals.decoding import context_length

        if not retriever_timeout > 0:
            raise ValueError(f"--retriever_timeout must be > 0 seconds, got {retriever_timeout}.")
        for name, value in (("max_questions", max_questions), ("confidence_slice_tokens", confidence_slice_tokens),
                            ("max_confidence_tokens", max_confidence_tokens),
                            ("max_concurrent_retrievals", max_concurrent_retrievals)):
            if value < 1:
                raise ValueError(f"--{name} must be >= 1, got {value}.")
        if unknown_domain not in UNKNOWN_DOMAIN_CHOICES:
            raise ValueError(f"--unknown_domain must be one of {UNKNOWN_DOMAIN_CHOICES}, got {unknown_domain!r}.")
        self.retriever_timeout, self.allow_request_thresholds = retriever_timeout, allow_request_thresholds
        self.allow_lower_domain_thresholds, self.unknown_domain = allow_lower_domain_thresholds, unknown_domain
        self.max_questions, self.confidence_slice_tokens = max_questions, confidence_slice_tokens
        self.max_confidence_tokens, self.max_concurrent_retrievals = max_confidence_tokens, max_concurrent_retrievals
        self.floor = (threshold, retrieve_threshold)
        """The operator's own thresholds (`None`: not given): no domain's saved ones go below them."""

        self.model = model
        self.inner = unwrap_peft(model)
        self.config = self.inner.confidence_config
        if self.config is None or self.inner.tokenizer is None:
            raise ValueError("`elical-hf serve` needs a saved confidence model (confidence_config.json); to serve a "
                             "plain causal LM, pass --mode completion.")
        threshold = self.config.decision_threshold if threshold is None else threshold
        if threshold is None:
            raise ValueError("This model has no decision threshold: set one with `elical-hf threshold MODEL --records "
                             "...`, or pass --threshold.")
        retrieve_threshold = self.config.retrieve_threshold if retrieve_threshold is None else retrieve_threshold
        self.threshold, self.retrieve_threshold = check_thresholds(threshold, retrieve_threshold)
        if self.retrieve_threshold is not None and retriever is None:
            logger.warning("The retrieve band [%s, %s) is set but no --retriever is: its questions abstain.",
                           self.retrieve_threshold, self.threshold)
        self.retriever, self.abstain_message = retriever, abstain_message
        self.retriever_pool = RetrieverPool(max_concurrent_retrievals) if retriever is not None else None
        self.model_info = dict(model_info or {})
        super().__init__(self.inner.tokenizer, model_name, context_length(self.inner), max_tokens, batch_size,
                         max_tokens_limit)

    def prepare(self, request: ChatCompletionRequest) -> Job:
        job = super().prepare(request)
        job.messages, job.left_out = question_of(job.messages, self.config.chat_context)
        if not job.messages[0]["content"].strip():
            raise RequestError("The question (the user message) is empty.", param=f"messages.{job.left_out}.content")
        if job.repetition_penalty != 1.0:
            raise RequestError("The gate answers with the plain greedy answer its confidence is about: "
                               "`repetition_penalty` is only for --mode completion.", param="repetition_penalty",
                               code="unsupported_parameter")
        if job.chat_template_kwargs is not None:
            raise RequestError("The gate renders prompts with the model's own chat_template_kwargs (those its "
                               "confidence was trained with); `chat_template_kwargs` is only for --mode completion.",
                               param="chat_template_kwargs", code="unsupported_parameter")
        options = request.elical
        job.domain = options.domain if options else None
        job.threshold, job.retrieve_threshold = self.request_thresholds(options, job.domain)
        return job

    def domain_thresholds(self, domain: str | None, param: str = "elical.domain") -> tuple[float, float | None]:
        """The thresholds a question of `domain` is gated with before a request's own: the domain's saved ones
        ([`~elical_hf.gate.thresholds_for`]) raised to the operator's [`floor`] (unless
        `allow_lower_domain_thresholds`), else the server's (`domain=None`, a domain the model has no thresholds of
        its own for, or with `unknown_domain="fallback"` one it does not name); a `RequestError` (`unknown_domain`,
        naming `param`) for a domain it refuses."""
        from ..gate import thresholds_for

        server = (self.threshold, self.retrieve_threshold)
        try:  # a domain's own thresholds, even where they equal the saved fallback that --threshold replaced
            threshold, band = thresholds_for(self.config, domain, fallback=server)
        except ValueError as error:
            if self.unknown_domain == "fallback":
                return server
            raise RequestError(str(error).replace("`", ""), param=param, code="unknown_domain") from None
        floor, floor_band = self.floor
        if self.allow_lower_domain_thresholds:
            return threshold, band
        threshold = threshold if floor is None else max(threshold, floor)
        band = band if band is None or floor_band is None else max(band, floor_band)
        return threshold, (None if band is None else min(band, threshold))

    def request_thresholds(self, options: GateOptions | None, domain: str | None,
                           domain_param: str = "elical.domain") -> tuple[float, float | None]:
        """The thresholds of a request's question of `domain`, with the request's own `options` (which may only make
        the gate stricter, without `allow_request_thresholds`): a `RequestError` naming the field otherwise."""
        from ..gate import check_thresholds

        threshold, band = self.domain_thresholds(domain, domain_param)
        if options and not self.allow_request_thresholds:
            self._check_stricter(options, threshold, band, f" questions of the domain {domain!r}" if domain else "")
        if options and options.threshold is not None:
            threshold = options.threshold
        if options and options.retrieve_threshold is not None:
            retrieve = options.retrieve_threshold
        elif band is not None and band <= threshold:
            retrieve = band
        else:  # no band, or a request threshold at or below the server's band: nothing lies between the two
            retrieve = None
        try:
            return check_thresholds(threshold, retrieve)
        except ValueError as error:
            raise RequestError(str(error).replace("`", ""), param="elical") from None

    @staticmethod
    def _check_stricter(options: GateOptions, threshold: float, band: float | None, which: str) -> None:
        """Refuse request thresholds below the operator's (`threshold`, `band`: the server's or the domain's) without
        `allow_request_thresholds`: a lower `threshold` answers more questions, a lower `retrieve_threshold`
        retrieves for more. Raising `threshold` above a saved band sends the questions between the two thresholds
        to retrieval instead of answering them: a stricter answer, with the operator's retriever, as the band is
        defined (`docs/serve.md`)."""
        advice = "The operator lets requests set any with --allow_request_thresholds."
        if options.threshold is not None and options.threshold < threshold:
            raise RequestError(f"This server answers{which} at or above confidence {threshold:g}; a request may only "
                               f"raise the threshold (got {options.threshold:g}). {advice}", param="elical.threshold",
                               code="threshold_not_allowed")
        retrieve = options.retrieve_threshold
        if retrieve is not None and (band is None or retrieve < band):
            band_text = (f"retrieves for no{which or ' question'}" if band is None else
                         f"retrieves{which and ' for' + which} at or above confidence {band:g}")
            raise RequestError(f"This server {band_text}; a request may only raise the "
                               f"retrieve threshold (got {retrieve:g}). {advice}", param="elical.retrieve_threshold",
                               code="threshold_not_allowed")

    def _settings(self, job: Job) -> Any:
        from ..signals import SamplingSettings

        return SamplingSettings(num_samples=1, max_new_tokens=job.max_tokens, batch_size=self.batch_size,
                                stop_strings=list(job.stop), chat_template_kwargs=self.config.chat_template_kwargs)

    def confidence_prompt_lengths(self, questions: list[str]) -> list[int]:
        """The tokens of each question's confidence prompt (on the worker thread: it tokenizes)."""
        return [len(ids) for ids in self.prompt_ids([self.config.format_prompt(q, self.tokenizer) for q in questions])]

    def confidence_prompt_error(self, questions: list[str], param: Callable[[int], str],
                                lengths: list[int] | None = None) -> list[RequestError | None]:
        """Per question, the error of a confidence prompt longer than the model's `max_length` (or, without one, its
        context) (`param(i)`: the field of question `i`), else `None`; `lengths`: the prompts' tokens when known."""
        limit, what = ((self.config.max_length, "max_length") if self.config.max_length is not None else
                       (self.context_length, "context"))
        if limit is None:
            return [None] * len(questions)
        lengths = self.confidence_prompt_lengths(questions) if lengths is None else lengths
        return [None if length <= limit else
                RequestError(f"The question's confidence prompt has {length} tokens, more than the model's {what} "
                             f"of {limit}: shorten the question.", param=param(i), code="context_length_exceeded")
                for i, length in enumerate(lengths)]

    def run_group(self, jobs: list[Any]) -> list[Reply | RequestError]:
        from ..gate import answer_questions
        from ..signals.generation import build_prompt_ids

        if not isinstance(jobs[0], Job):  # /v1/confidence: scores only
            from .confidence import score_jobs

            return score_jobs(self, jobs)
        settings = self._settings(jobs[0])
        questions = [job.messages[0]["content"].strip() for job in jobs]
        prompt_ids = build_prompt_ids(self.tokenizer, questions, settings)
        too_long = self.confidence_prompt_error(questions, lambda i: "messages")
        replies: list[Reply | RequestError | None] = [self.check_fits(len(ids), job.max_tokens) or error
                                                       for ids, job, error in zip(prompt_ids, jobs, too_long)]
        rows = [i for i, reply in enumerate(replies) if reply is None]
        if not rows:
            return replies
        errors: dict[str, RequestError] = {}
        def gone(question: str) -> bool:  # every client that asked it left
            return all(jobs[i].cancelled.is_set() for i in rows if questions[i] == question)

        streams = {row: TokenStream(self.tokenizer, jobs[i].stop, self.special_tokens, jobs[i].top_logprobs,
                                    jobs[i].listener) for row, i in enumerate(rows) if jobs[i].listener is not None}

        def on_decision(row: int, result: dict[str, Any]) -> None:  # a streamed request's first event
            job = jobs[rows[row]]
            if row in streams and result["question"] not in errors:  # a failed retrieval is its error instead
                gate = self._gate(job, result, len(jobs))
                job.listener(("decision", gate, None if gate["answered"] else self.abstain_message,
                              len(prompt_ids[rows[row]])))

        retrieve = checked_retriever(self, settings, errors, gone) if self.retriever is not None else None
        asked = [jobs[i].top_logprobs for i in rows if jobs[i].top_logprobs is not None]
        results = answer_questions(self.model, [questions[i] for i in rows], threshold=jobs[0].threshold,
                                   retrieve_threshold=jobs[0].retrieve_threshold, retrieve=retrieve,
                                   max_concurrent_retrievals=self.max_concurrent_retrievals,
                                   settings=settings, cancelled=lambda row: jobs[rows[row]].cancelled.is_set(),
                                   top_logprobs=max(asked, default=0), on_decision=on_decision if streams else None,
                                   on_token=(lambda row, *token: row in streams and streams[row].push(*token))
                                   if streams else None)
        for i, result in zip(rows, results):
            replies[i] = errors.get(questions[i]) or self._reply(jobs[i], result, len(prompt_ids[i]), len(jobs))
        return replies

    @staticmethod
    def _gate(job: Job, result: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """The `elical` field of a reply: known as soon as the decision is (a retrieve decision: with its context)."""
        return {"confidence": result["confidence"], "decision": result["decision"], "threshold": job.threshold,
                "retrieve_threshold": job.retrieve_threshold, "domain": job.domain,
                "answered": result["decision"] == "answer" or bool(result["context"]),
                "context": result["context"], "batch_size": batch_size, "messages_left_out": job.left_out}

    def _reply(self, job: Job, result: dict[str, Any], prompt_tokens: int, batch_size: int) -> Reply:
        gate = self._gate(job, result, batch_size)
        if result["answer"] is None:
            reply = self.reply(job, self.abstain_message, ABSTAIN_FINISH_REASON, prompt_tokens, 0, elical=gate)
        else:
            tokens = result["answer_tokens"]
            reply = self.reply(job, result["answer"], self.finish_reason(tokens, job), prompt_tokens, len(tokens),
                               elical=gate)
            if job.top_logprobs is not None:
                reply.body["choices"][0]["logprobs"] = {
                    "content": logprob_entries(self.tokenizer, result, job.top_logprobs, self.special_tokens)}
        reply.headers = gate_headers(gate)
        return reply
