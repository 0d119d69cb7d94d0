"""One client for every OpenAI-compatible server elical-hf talks to: the `openai` package's `AsyncOpenAI`.

vLLM (`vllm serve`), SGLang, TGI, llama.cpp's server, `elical-hf serve` and hosted APIs all speak the OpenAI wire
format. [`OpenAIClient`] sends many requests to one of them at once and gives the answers back in order:

- **concurrency**: at most `max_concurrency` requests in flight (an `asyncio.Semaphore`), over one pooled
  connection set, on an event loop of its own in a background thread, so it works the same from a script, a
  notebook whose loop is already running, or a thread of a server;
- **retries**: the `openai` client retries a rate limit (429), a server error (5xx), a timeout and a dropped
  connection with exponential backoff, `max_retries` times; a reply that is not what the request asked for (no
  choices, too few of them, a body that is not JSON) is retried the same way here;
- **one clear error** after that: an [`EndpointError`] (an `OSError`: `elical-hf` prints it as one line) that names
  the endpoint, what was asked and the last failure; a request the server refuses (another 4xx: an unknown model, a
  field it does not take) is a `ValueError` with the server's own message, at once, not retried.

The bearer token comes from `OPENAI_API_KEY` (never a command-line option: `ps` shows those); a local server needs
none.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar


__all__ = ["API_KEY_ENV", "BadReply", "EndpointError", "OpenAIClient", "base_url", "sampling_extras"]

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable whose value is sent as the bearer token."""

T = TypeVar("T")


class EndpointError(OSError):
    """An OpenAI-compatible endpoint stayed unreachable, slow or broken after every retry."""


class BadReply(Exception):
    """A reply that does not hold what its request asked for (retried like a server error: a cut-off or garbled body
    may come right the next time)."""


def base_url(url: str, option: str = "--endpoint") -> str:
    """An OpenAI `base_url` (`http://host:port/v1`) from it or from a full route URL (`.../v1/completions`,
    `.../v1/chat/completions`); a `ValueError` naming `option` for anything that is not an http(s) URL."""
    url = str(url).strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise ValueError(f"{option} must be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}.")
    for route in ("/chat/completions", "/completions"):
        if url.endswith(route):
            return url[: -len(route)]
    return url


def sampling_extras(top_k: int = 0, repetition_penalty: float = 1.0) -> dict[str, Any] | None:
    """vLLM's sampling fields beyond OpenAI's, as a request's `extra_body`, only when they change decoding (`None`
    otherwise: a server that does not take them is then asked for nothing it would refuse)."""
    extra: dict[str, Any] = {}
    if top_k > 0:
        extra["top_k"] = int(top_k)
    if repetition_penalty != 1.0:
        extra["repetition_penalty"] = float(repetition_penalty)
    return extra or None


class _LoopThread:
    """An asyncio event loop running in a daemon thread: coroutines are submitted to it from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="elical-openai-client", daemon=True)
        self.thread.start()

    def run(self, coroutine: Awaitable[T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:  # a KeyboardInterrupt here too: no request goes on in the background
            future.cancel()
            raise

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


class OpenAIClient:
    """
    Concurrent requests to one OpenAI-compatible server, with retries and one clear error.

    Args:
        url (`str`): The server's base URL (`http://host:port/v1`, an OpenAI client's `base_url`), or a full route.
        api_key (`str`, *optional*): Bearer token; defaults to `OPENAI_API_KEY` (none for a local server).
        max_concurrency (`int`, *optional*, defaults to 32): Requests in flight at once.
        timeout (`float`, *optional*, defaults to 600): Seconds one request may take.
        max_retries (`int`, *optional*, defaults to 4): Retries of a failed, rate-limited, timed-out or bad reply.
        option (`str`, *optional*): The command-line option the URL came from, for messages.
        label (`str`, *optional*, defaults to `"endpoint"`): What errors call the server ("judge endpoint", ...).
    """

    def __init__(self, url: str, *, api_key: str | None = None, max_concurrency: int = 32, timeout: float = 600,
                 max_retries: int = 4, option: str = "--endpoint", label: str = "endpoint") -> None:
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"--max_concurrency must be an integer >= 1, got {max_concurrency!r}.")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"--max_retries must be an integer >= 0, got {max_retries!r}.")
        if not timeout or timeout <= 0:
            raise ValueError(f"The request timeout (--request_timeout) must be > 0 seconds, got {timeout!r}.")
        self.url, self.label = base_url(url, option), label
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, float(timeout), max_retries
        self._runner: _LoopThread | None = None
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIClient(url={self.url!r}, max_concurrency={self.max_concurrency})"

    def _start(self) -> tuple[_LoopThread, Any]:
        with self._lock:
            if self._runner is None:
                try:
                    from openai import AsyncOpenAI
                except ImportError as error:
                    raise ImportError("Talking to an OpenAI-compatible server needs the `openai` package: "
                                      "pip install openai") from error
                runner = _LoopThread()

                async def make() -> Any:  # the client's connection pool belongs to the loop it is made on
                    return AsyncOpenAI(base_url=self.url, api_key=self.api_key or "EMPTY", timeout=self.timeout,
                                       max_retries=self.max_retries)

                self._client = runner.run(make())
                self._runner = runner
            return self._runner, self._client

    def close(self) -> None:
        """Close the connections and stop the event loop (a later request starts them again)."""
        with self._lock:
            runner, client, self._runner, self._client = self._runner, self._client, None, None
        if runner is None:
            return
        if threading.current_thread() is runner.thread:  # (collected on its own loop): only stop the loop
            runner.loop.call_soon(runner.loop.stop)
            return
        try:
            runner.run(client.close())
        finally:
            runner.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def models(self) -> list[dict[str, Any]]:
        """The server's `GET /models` entries (`id`; vLLM adds `root`, the weights' path or Hub id, and
        `max_model_len`), as dicts."""
        runner, client = self._start()

        async def listing() -> list[dict[str, Any]]:
            page = await client.models.list()
            return [entry.model_dump() for entry in page.data]

        return runner.run(self._guard(listing, "GET /models"))

    def map(self, request: Callable[[Any, T], Awaitable[Any]], items: Sequence[T], *, what: str,
            progress: bool = False, unit: str = "request") -> list[Any]:
        """`request(client, item)` for every item, at most `max_concurrency` at once; the results in item order.

        `request` returns the parsed result of one reply and raises [`BadReply`] when the reply does not hold what
        was asked for (retried), or a `ValueError` when retrying cannot help (not retried). `what` names the requests
        in errors ("completions", ...). The first request that fails for good cancels the others and raises its
        error."""
        from tqdm.auto import tqdm

        items = list(items)
        if not items:
            return []
        runner, client = self._start()
        bar = tqdm(total=len(items), desc=f"{what} ({self.url})", unit=unit, disable=not progress)

        async def run_all() -> list[Any]:
            semaphore = asyncio.Semaphore(self.max_concurrency)

            async def one(item: T) -> Any:
                async with semaphore:
                    result = await self._guard(lambda: request(client, item), what)
                bar.update(1)
                return result

            tasks = [asyncio.ensure_future(one(item)) for item in items]
            try:
                return await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

        try:
            return runner.run(run_all())
        finally:
            bar.close()

    async def _guard(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """One request: the `openai` client's own retries, ours for a bad reply, then one clear error."""
        import openai

        failure: BaseException | None = None
        tries = f"failed {self.max_retries + 1} times"
        for attempt in range(self.max_retries + 1):
            try:
                return await call()
            except openai.APIStatusError as error:
                if error.status_code not in (408, 409, 429) and error.status_code < 500:
                    raise ValueError(f"The {self.label} {self.url} refused a request ({error.status_code}): "
                                     f"{_server_message(error)}") from None
                raise EndpointError(f"The {self.label} {self.url} {tries} ({what}): {error.status_code} "
                                    f"{_server_message(error)}") from None
            except (openai.APIConnectionError, openai.APITimeoutError) as error:  # retried by the client already
                reason = f"timed out ({self.timeout:g} s a request)" if isinstance(error, openai.APITimeoutError) \
                    else "cannot be reached"
                raise EndpointError(f"The {self.label} {self.url} {reason}: {tries} ({what}): "
                                    f"{_cause(error)}") from None
            except (BadReply, openai.APIResponseValidationError, json.JSONDecodeError) as error:
                failure = error
            if attempt < self.max_retries:
                await asyncio.sleep(min(8.0, 0.25 * 2**attempt))
        raise EndpointError(f"The {self.label} {self.url} {tries} ({what}) with replies elical-hf cannot read: "
                            f"{failure}")


def _server_message(error: Any) -> str:
    """The `error.message` of an OpenAI-style error body, else the body's start."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return " ".join(str(message).split())[:300]
    return " ".join(str(getattr(error, "message", error)).split())[:300]


def _cause(error: BaseException) -> str:
    cause = error.__cause__ or error.__context__
    return " ".join(str(cause or error).split())[:200] or type(error).__name__
