"""`POST /v1/confidence`: the gate's scores without generation, many questions per request, for a router.

A request, `{"model": NAME, "questions": [...], "domains": [...], "elical": {...}}`, gets per question its confidence,
its decision and the thresholds it was decided with (its domain's, [`~elical_hf.gate.thresholds_for`], made stricter
by the request's own `elical` thresholds under the chat requests' rule), and the reply names the model, its base
model and its revision ([`saved_model_revision`]), so that a router knows which signal it read. The requests go
through the chat requests' micro-batcher: the questions of the requests of one batch are scored in one
`model.confidence` call on the worker thread (the confidence prompt, as the chat requests' own scores).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .schema import ConfidenceRequest, Reply, RequestError


__all__ = ["ConfidenceJob", "prepare_confidence", "saved_model_revision", "score_jobs"]


@dataclasses.dataclass
class ConfidenceJob:
    """One checked `/v1/confidence` request: its questions, each one's thresholds and domain."""

    questions: list[str]
    thresholds: list[tuple[float, float | None]]
    domains: list[str | None]
    id: str = dataclasses.field(default_factory=lambda: f"confidence-{uuid.uuid4().hex}")
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def group(self) -> tuple[int, str]:
        """Scoring jobs share one call, before the chat requests of their batch (a prefill, no decoding)."""
        return 0, "confidence"


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


def score_jobs(engine: Any, jobs: list[ConfidenceJob]) -> list[Reply | RequestError]:
    """The replies of `/v1/confidence` jobs (on the worker thread): their questions scored in one call; a job with a
    question too long for the model gets that error alone."""
    from ..gate import decide

    replies: list[Reply | RequestError | None] = [None] * len(jobs)
    for j, job in enumerate(jobs):
        errors = engine.confidence_prompt_error(job.questions, lambda i: f"questions.{i}")
        replies[j] = next((error for error in errors if error is not None), None)
    live = [j for j, reply in enumerate(replies) if reply is None and not jobs[j].cancelled.is_set()]
    questions = [question for j in live for question in jobs[j].questions]
    confidences = iter(engine.inner.confidence(questions, batch_size=engine.batch_size) if questions else [])
    for j in live:
        job = jobs[j]
        data = []
        for i, ((threshold, band), domain) in enumerate(zip(job.thresholds, job.domains)):
            confidence = next(confidences)
            data.append({"object": "confidence", "index": i, "confidence": confidence,
                         "decision": decide(confidence, threshold, band), "threshold": threshold,
                         "retrieve_threshold": band, "domain": domain})
        replies[j] = Reply({"object": "list", "id": job.id, "created": job.created, "model": engine.model_name,
                            "data": data, "elical": {**engine.model_info, "batch_size": len(live)}})
    return [reply if reply is not None else RequestError("The client left.", status=499) for reply in replies]


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
