"""The FastAPI application: OpenAI-compatible routes over an engine, micro-batched, with OpenAI-style errors.

Routes: `POST /v1/chat/completions` (streamed as server-sent events with `stream: true`: [`~elical_hf.serve.stream`]),
`POST /v1/confidence` (scores only, gate mode: [`~elical_hf.serve.confidence`]), `POST /classify` (one score in
vLLM Semantic Router's `score.v1` contract), `GET /v1/models`,
`GET /v1/models/{model}`, `GET /health`. Every error is the OpenAI error JSON (`{"error": {"message", "type", "param",
"code"}}`): a bad request gets a 4xx (a body over the size limit, a body not declared JSON, malformed JSON, a schema
error, a string that is not text, empty messages, a prompt longer than the context, an unsupported option such as
`n: 2`), a request for another host a 400, an unknown route a 404, and a bug a 500 for its own request alone, on a
connection that stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from .batching import MicroBatcher
from .engine import Engine
from .schema import (ChatCompletionRequest, ConfidenceRequest, Reply, RequestError, ScoreRequest, error_body,
                     parse_request, validation_error)
from .stream import stream_response


logger = logging.getLogger(__name__)


CLIENT_CLOSED = 499
"""The status logged for a request whose client went away before its answer (nginx's "client closed request")."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""The `Host` names every server answers to (`--allowed_hosts` adds others)."""
MAX_REQUEST_BYTES = 1 << 20
"""The largest request body by default (`--max_request_bytes`): 1 MiB."""


def error_response(error: RequestError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


def internal_error(request: Request, error: Exception) -> JSONResponse:
    """The 500 of a bug, logged with its traceback."""
    logger.error("Unexpected error on %s %s", request.method, request.url.path, exc_info=error)
    return JSONResponse(error_body(f"Internal error: {type(error).__name__}: {error}", type="server_error",
                                   code="internal_error"), status_code=500)


def host_names(bound: str | None = None, allowed: Sequence[str] = ()) -> list[str]:
    """The `Host` names a server bound to the address `bound` answers to: [`LOCAL_HOSTS`], `bound` itself (unless it
    is every interface) and `allowed` (`"*"`: any; `"*.example.com"`: its subdomains)."""
    names = list(LOCAL_HOSTS)
    if bound and bound not in ("0.0.0.0", "::"):
        names.append(f"[{bound}]" if ":" in bound else bound)
    return list(dict.fromkeys(name.lower() for name in [*names, *allowed]))


def host_of(header: str) -> str:
    """The host name of a `Host` header, its port dropped (`[::1]:8000` -> `[::1]`)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0]


class HostCheck:
    """
    ASGI middleware: answer only requests whose `Host` header names one of `hosts` (see [`host_names`]), so that a
    web page whose DNS name was rebound to this server's address cannot read its answers; others get a 400
    `invalid_host`.
    """

    def __init__(self, app: Any, hosts: Sequence[str]) -> None:
        self.app, self.hosts = app, [host.lower() for host in hosts]

    def allows(self, host: str) -> bool:
        return any(pattern == "*" or host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:]))
                   for pattern in self.hosts)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = host_of(Headers(scope=scope).get("host", ""))
            if not self.allows(host):
                message = (f"The Host header {host!r} is not one this server answers to ({', '.join(self.hosts)}); "
                           f"to serve that name, start it with --allowed_hosts {host or 'NAME'}.")
                await JSONResponse(error_body(message, code="invalid_host"), status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def read_body(request: Request, limit: int) -> bytes:
    """The body of `request`, refused before it is parsed: a 413 above `limit` bytes (from its Content-Length before
    reading it, else as soon as the bytes read pass it), a 415 when it is not declared JSON (a missing Content-Type
    is read as JSON)."""
    too_large = RequestError(f"The request body is larger than this server's limit of {limit} bytes "
                             "(--max_request_bytes).", code="request_too_large", status=413)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    content_type = request.headers.get("content-type")
    if content_type is not None and not is_json(content_type):
        raise RequestError(f"The request body must be JSON, sent with Content-Type: application/json (got "
                           f"{content_type}).", code="unsupported_media_type", status=415)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def client_gone(request: Request) -> None:
    """Return when the client of `request` disconnects (its body already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(request: Request, work: Any) -> tuple[bool, Any]:
    """Await the coroutine `work` unless the client disconnects first, which cancels it: `(True, result)` or
    `(False, None)`."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(client_gone(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        return False, None
    return True, task.result()


def create_app(engine: Engine, max_batch_size: int = 16, batch_wait_ms: float = 5.0,
               allowed_hosts: Sequence[str] | None = None, max_request_bytes: int = MAX_REQUEST_BYTES) -> FastAPI:
    """
    The server's application for `engine` ([`~elical_hf.serve.engine.GateEngine`] or
    [`~elical_hf.serve.completion.CompletionEngine`]).

    Args:
        engine ([`~elical_hf.serve.engine.Engine`]): What computes the answers.
        max_batch_size (`int`, *optional*, defaults to 16): The most requests scored and decoded in one call.
        batch_wait_ms (`float`, *optional*, defaults to 5.0): How long the first request of a batch waits for others.
        allowed_hosts (`Sequence[str]`, *optional*): The `Host` names answered (see [`host_names`]); defaults to
            [`LOCAL_HOSTS`].
        max_request_bytes (`int`, *optional*, defaults to 1 MiB): The largest request body.

    Returns:
        `fastapi.FastAPI`: run it with `uvicorn.run(app, host=..., port=...)`.
    """
    if max_request_bytes < 1:
        raise ValueError(f"--max_request_bytes must be >= 1, got {max_request_bytes}.")
    batcher = MicroBatcher(engine.run, max_batch_size=max_batch_size, max_wait=batch_wait_ms / 1000,
                           key=lambda job: job.group)
    app = FastAPI(title="elical-hf", summary=f"{engine.mode} server for {engine.model_name}",
                  lifespan=_closing(batcher))
    app.add_middleware(HostCheck, hosts=list(LOCAL_HOSTS if allowed_hosts is None else allowed_hosts))
    app.state.engine, app.state.batcher = engine, batcher
    _add_error_handlers(app)
    _add_model_routes(app, engine, batcher)
    _add_answer_routes(app, engine, batcher, max_request_bytes)
    return app


def _closing(batcher: MicroBatcher) -> Any:
    """The app's lifespan: `batcher` closes when the server stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as the OpenAI error JSON: a refused request, a schema error, an unknown route, a bug."""

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(list(error.errors())))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
        message = f"{error.detail}: {request.method} {request.url.path}"
        return JSONResponse(error_body(message, param=None, code=code), status_code=error.status_code)

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> JSONResponse:
        return internal_error(request, error)


def _add_model_routes(app: FastAPI, engine: Engine, batcher: MicroBatcher) -> None:
    """`GET /health`, `GET /v1/models` and `GET /v1/models/{model}`."""
    model_card = {"id": engine.model_name, "object": "model", "created": int(time.time()), "owned_by": "elical-hf",
                  "elical": {"mode": engine.mode}}
    if engine.mode == "gate":
        model_card["elical"].update(threshold=engine.threshold, retrieve_threshold=engine.retrieve_threshold,
                                    **engine.model_info)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "mode": engine.mode, "model": engine.model_name, "batching": dict(batcher.counts)}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str) -> dict[str, Any]:
        if model != engine.model_name:
            raise RequestError(f"The model {model!r} is not served here; this server serves {engine.model_name!r}.",
                               param="model", code="model_not_found", status=404)
        return model_card


def _respond(request: Request, result: Any) -> Response:
    """The response to a job's result: its reply, or its error."""
    if isinstance(result, RequestError):
        return error_response(result)
    if isinstance(result, Exception):
        return internal_error(request, result)
    assert isinstance(result, Reply)
    return JSONResponse(result.body, headers=result.headers)


def _add_answer_routes(app: FastAPI, engine: Engine, batcher: MicroBatcher, max_request_bytes: int) -> None:
    """`POST /v1/chat/completions`, `POST /v1/confidence` and `POST /classify`: requests answered in batches."""

    async def answer(request: Request, schema: Any, prepare: Any) -> Response:
        """Check the request's body (a `schema`; `prepare`: the parsed body -> its job) before it joins a batch, and
        answer it; a failure of its own inside the batch is its own error (caught here: a bug re-raised to the server
        would reset the connection)."""
        try:
            parsed = parse_request(await read_body(request, max_request_bytes), schema)
            job = prepare(parsed)
            if getattr(parsed, "stream", False):
                usage = parsed.stream_options is not None and bool(parsed.stream_options.include_usage)
                response = await stream_response(job, batcher.submit(job), engine.model_name, usage,
                                                  client_gone(request), functools.partial(_respond, request))
                return Response(status_code=CLIENT_CLOSED) if response is None else response
            answered, result = await unless_client_leaves(request, batcher.submit(job))
        except ClientDisconnect:  # gone before sending its whole body
            return Response(status_code=CLIENT_CLOSED)
        except RequestError as error:
            return error_response(error)
        except Exception as error:  # noqa: BLE001 - this request's failure alone, answered as a 500
            return internal_error(request, error)
        if not answered:  # nobody to answer: the job was dropped from its batch, or its decoding stops
            job.cancelled.set()
            return Response(status_code=CLIENT_CLOSED)
        return _respond(request, result)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        """A chat completion (the body: [`~elical_hf.serve.schema.ChatCompletionRequest`] as JSON); streamed with
        `stream: true`."""
        return await answer(request, ChatCompletionRequest, engine.prepare)

    async def scores(request: Request, schema: Any, prepare: Any) -> Response:
        """A scoring request (no generation), in gate mode only."""
        if engine.mode != "gate":
            return error_response(RequestError(f"{request.url.path} scores questions with a confidence model: this "
                                               "server serves plain completions (--mode completion).",
                                               code="unsupported_endpoint", status=404))
        return await answer(request, schema, functools.partial(prepare, engine))

    @app.post("/v1/confidence")
    async def confidence(request: Request) -> Response:
        """Confidences and decisions of many questions, no generation (the body:
        [`~elical_hf.serve.schema.ConfidenceRequest`] as JSON); gate mode only."""
        from .confidence import prepare_confidence

        return await scores(request, ConfidenceRequest, prepare_confidence)

    @app.post("/classify")
    async def classify(request: Request) -> Response:
        """One question's confidence in vLLM Semantic Router's `score.v1` contract (the body: `{"inputs": TEXT}`;
        the reply `{"label": "confidence", "score": C}`); gate mode only."""
        from .confidence import prepare_score

        return await scores(request, ScoreRequest, prepare_score)
