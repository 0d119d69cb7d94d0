"""`POST /v1/confidence`: the gate's scores without generation, many questions per request, for a router.

A request, `{"model": NAME, "questions": [...], "domains": [...], "elical": {...}}`, gets per question its confidence,
its decision and the thresholds it was decided with (its domain's, [`~elical_hf.gate.thresholds_for`], made stricter
by the request's own `elical` thresholds under the chat requests' rule), and the reply names the model, its base
model and its revision ([`saved_model_revision`]), so that a router knows which signal it read. The requests go
through the chat requests' micro-batcher: the questions of the requests of one batch are scored in one
`model.confidence` call on the worker thread (the confidence prompt, as the chat requests' own scores).

What one request may cost the others is bounded ([`score_jobs`]): a question asked several times (in one request, or
in several of one call) is scored once; a request's distinct questions may hold at most `max_confidence_tokens`
prompt tokens; and one call of the worker scores at most `confidence_slice_tokens` prompt tokens (at least one
question) before the requests that arrived meanwhile get their turn: the rest of a large request is scored in the
next batches, after theirs ([`~elical_hf.serve.batching.UNFINISHED`]).

`POST /classify` answers vLLM Semantic Router's remote-signal contract `score.v1` (its `http_classify` backend, PR
vllm-project/semantic-router#3542): a body `{"inputs": TEXT}`, one question, answered `{"label": "confidence",
"score": CONFIDENCE}` ([`prepare_score`]); the same job, checks and batching as `/v1/confidence`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .batching import UNFINISHED
from .schema import ConfidenceRequest, Reply, RequestError, ScoreRequest


__all__ = ["CONFIDENCE_SLICE_TOKENS", "MAX_CONFIDENCE_TOKENS", "ConfidenceJob", "prepare_confidence",
           "prepare_score", "saved_model_revision", "score_jobs"]

CONFIDENCE_SLICE_TOKENS = 4096
"""The most prompt tokens one call of the worker scores by default (`elical-hf serve --confidence_slice_tokens`;
at least one question) before the other requests' turn."""
MAX_CONFIDENCE_TOKENS = 32768
"""The most prompt tokens the distinct questions of one `/v1/confidence` request may hold by default (`elical-hf
serve --max_confidence_tokens`)."""


@dataclasses.dataclass
class ConfidenceJob:
    """One checked `/v1/confidence` request: its questions, each one's thresholds and domain, and (on the worker
    thread) the prompt tokens of its distinct questions and the scores found so far."""

    questions: list[str]
    thresholds: list[tuple[float, float | None]]
    domains: list[str | None]
    id: str = dataclasses.field(default_factory=lambda: f"confidence-{uuid.uuid4().hex}")
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False, compare=False)
    lengths: dict[str, int] | None = dataclasses.field(default=None, repr=False, compare=False)
    """Each distinct question's prompt tokens (`None` until its first call)."""
    scores: dict[str, float] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    contract: str = "elical"
    """The reply's shape: `"elical"` (`/v1/confidence`'s list) or `"score.v1"` (`/classify`)."""

    @property
    def group(self) -> tuple[float, str]:
        """Scoring jobs share one call, before the chat requests of their batch (a prefill, no decoding); the rest of
        a job already partly scored runs after them."""
        return (math.inf if self.scores else 0), "confidence"

    def pending(self) -> list[str]:
        """The distinct questions not scored yet, in order."""
        return [q for q in dict.fromkeys(self.questions) if q not in self.scores]


def prepare_confidence(engine: Any, request: ConfidenceRequest) -> ConfidenceJob:
    """Check a parsed `/v1/confidence` request for `engine` (a [`~elical_hf.serve.engine.GateEngine`]), in the event
    loop: the model name, the number of questions, empty questions, the domains and the thresholds."""
    if request.model not in (None, "", engine.model_name):
        raise RequestError(f"The model {request.model!r} is not served here; this server serves "
                           f"{engine.model_name!r} (GET /v1/models).", param="model", code="model_not_found",
                           status=404)
    count = len(request.questions)
    if count > engine.max_questions:
        raise RequestError(f"At most {engine.max_questions} questions per request (--max_questions), got {count}: "
                           "send them in several requests.", param="questions", code="too_many_questions")
    for i, question in enumerate(request.questions):
        if not question.strip():
            raise RequestError(f"questions[{i}] is empty.", param=f"questions.{i}")
    domains = request.domains if request.domains is not None else [None] * count
    if len(domains) != count:
        raise RequestError(f"`domains` must hold one domain (or null) per question: {count}, got {len(domains)}.",
                           param="domains")
    default = request.elical.domain if request.elical is not None else None
    thresholds = []
    for i, domain in enumerate(domains):
        if domain == "":
            raise RequestError(f"domains[{i}] is empty (null: the request's domain).", param=f"domains.{i}")
        param = f"domains.{i}" if domain is not None else "elical.domain"
        thresholds.append(engine.request_thresholds(request.elical, domain or default, param))
    return ConfidenceJob([q.strip() for q in request.questions], thresholds,
                         [domain or default for domain in domains])


def prepare_score(engine: Any, request: ScoreRequest) -> ConfidenceJob:
    """Check a parsed `/classify` request (`score.v1`): its one question, as `/v1/confidence` checks it."""
    job = prepare_confidence(engine, ConfidenceRequest(questions=[request.inputs]))
    job.contract = "score.v1"
    return job


def _measure(engine: Any, job: ConfidenceJob) -> RequestError | None:
    """Tokenize the distinct questions of `job` into its `lengths`: the error of a question too long for the model,
    or of a request holding more than `engine.max_confidence_tokens` prompt tokens, else `None`."""
    distinct = list(dict.fromkeys(job.questions))
    lengths = engine.confidence_prompt_lengths(distinct)
    first = {question: i for i, question in reversed(list(enumerate(job.questions)))}
    errors = engine.confidence_prompt_error(distinct, lambda i: f"questions.{first[distinct[i]]}", lengths)
    error = next((error for error in errors if error is not None), None)
    if error is None and sum(lengths) > engine.max_confidence_tokens:
        error = RequestError(f"This request's questions hold {sum(lengths)} prompt tokens in all (chat template "
                             f"included), more than this server's limit of {engine.max_confidence_tokens} per request "
                             "(--max_confidence_tokens): send them in several requests.", param="questions",
                             code="too_many_tokens")
    job.lengths = dict(zip(distinct, lengths))
    return error


def _reply(engine: Any, job: ConfidenceJob, batch_size: int) -> Reply:
    from ..gate import decide

    if job.contract == "score.v1":
        return Reply({"label": "confidence", "score": job.scores[job.questions[0]]})
    data = [{"object": "confidence", "index": i, "confidence": job.scores[question],
             "decision": decide(job.scores[question], threshold, band), "threshold": threshold,
             "retrieve_threshold": band, "domain": domain}
            for i, (question, (threshold, band), domain) in enumerate(zip(job.questions, job.thresholds, job.domains))]
    return Reply({"object": "list", "id": job.id, "created": job.created, "model": engine.model_name, "data": data,
                  "elical": {**engine.model_info, "batch_size": batch_size}})


def score_jobs(engine: Any, jobs: list[ConfidenceJob]) -> list[Any]:
    """
    One call of the worker for `/v1/confidence` jobs: score their distinct questions not scored yet, in order, up to
    `engine.confidence_slice_tokens` prompt tokens (at least one question; a question shared by several jobs once).

    Returns:
        Per job, its reply when all its questions are scored, [`~elical_hf.serve.batching.UNFINISHED`] when some are
        left (the batcher runs it again with a later batch, after the requests that arrived meanwhile), or its error
        (a question too long for the model, too many tokens in all: that job alone; a client that left).
    """
    results: list[Any] = [None] * len(jobs)
    for j, job in enumerate(jobs):
        if job.lengths is None and not job.cancelled.is_set():
            results[j] = _measure(engine, job)
    live = [j for j, result in enumerate(results) if result is None and not jobs[j].cancelled.is_set()]
    lengths = {question: length for j in live for question, length in jobs[j].lengths.items()}
    chosen, tokens = {}, 0
    for question in dict.fromkeys(q for j in live for q in jobs[j].pending()):
        if chosen and tokens + lengths[question] > engine.confidence_slice_tokens:
            break
        chosen[question], tokens = None, tokens + lengths[question]
    if chosen:
        scored = dict(zip(chosen, engine.inner.confidence(list(chosen), batch_size=engine.batch_size)))
        for j in live:
            jobs[j].scores.update((q, scored[q]) for q in jobs[j].pending() if q in scored)
    for j in live:
        results[j] = UNFINISHED if jobs[j].pending() else _reply(engine, jobs[j], len(live))
    return [result if result is not None else RequestError("The client left.", status=499) for result in results]


def saved_model_revision(folder: str) -> dict[str, Any]:
    """
    What tells one version of the saved confidence model in `folder` from another.

    Returns:
        `dict`: `revision`, the Hub commit of a Hub cache snapshot (`None` for another folder), and `sha256`, the
        digest of the folder's files (names and contents: the adapter, the head, `confidence_config.json` with its
        thresholds), which changes whenever any of them does.
    """
    path = Path(folder).resolve()
    revision = path.name if path.parent.name == "snapshots" else None
    digest = hashlib.sha256()
    for file in sorted(item for item in path.iterdir() if item.is_file()):
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return {"revision": revision, "sha256": digest.hexdigest()}
