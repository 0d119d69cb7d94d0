"""The FastAPI application: OpenAI-compatible routes over an engine, micro-batched, with OpenAI-style errors.

Routes: `POST /v1/chat/completions`, `GET /v1/models`, `GET /v1/models/{model}`, `GET /health`. Every error is the
OpenAI error JSON (`{"error": {"message", "type", "param", "code"}}`): a bad request gets a 4xx (a schema error,
malformed JSON, empty messages, a prompt longer than the context, an unsupported option such as `stream: true`), an
unknown route a 404, and a bug a 500 that leaves the server running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from .batching import MicroBatcher
from .engine import Engine, Reply
from .schema import ChatCompletionRequest, RequestError, error_body, validation_error


logger = logging.getLogger(__name__)


CLIENT_CLOSED = 499
"""The status logged for a request whose client went away before its answer (nginx's "client closed request")."""


def error_response(error: RequestError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


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


def create_app(engine: Engine, max_batch_size: int = 16, batch_wait_ms: float = 5.0) -> FastAPI:
    """
    The server's application for `engine` ([`~elical_hf.serve.engine.GateEngine`] or
    [`~elical_hf.serve.engine.CompletionEngine`]).

    Args:
        engine ([`~elical_hf.serve.engine.Engine`]): What computes the answers.
        max_batch_size (`int`, *optional*, defaults to 16): The most requests scored and decoded in one call.
        batch_wait_ms (`float`, *optional*, defaults to 5.0): How long the first request of a batch waits for others.

    Returns:
        `fastapi.FastAPI`: run it with `uvicorn.run(app, host=..., port=...)`.
    """
    batcher = MicroBatcher(engine.run, max_batch_size=max_batch_size, max_wait=batch_wait_ms / 1000)
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()

    app = FastAPI(title="elical-hf", summary=f"{engine.mode} server for {engine.model_name}", lifespan=lifespan)
    app.state.engine, app.state.batcher = engine, batcher
    model_card = {"id": engine.model_name, "object": "model", "created": created, "owned_by": "elical-hf",
                  "elical": {"mode": engine.mode}}
    if engine.mode == "gate":
        model_card["elical"].update(threshold=engine.threshold, retrieve_threshold=engine.retrieve_threshold)

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
        logger.exception("Unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(f"Internal error: {type(error).__name__}: {error}", type="server_error",
                                       code="internal_error"), status_code=500)

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

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        answered, result = await unless_client_leaves(request, batcher.submit(engine.prepare(body)))
        if not answered:  # nobody to answer: the job was dropped from its batch, or its result discarded
            return Response(status_code=CLIENT_CLOSED)
        if isinstance(result, RequestError):
            return error_response(result)
        assert isinstance(result, Reply)
        return JSONResponse(result.body, headers=result.headers)

    return app
