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
  field it does not take) is a `ValueError` with the server's own message, at once, not retried;
- **replies are not trusted**: a completion's body is read a chunk at a time and refused once it passes the size its
  request allows ([`OpenAIClient.completion`]: never held whole), a log-probability must be one
  ([`OpenAIClient.logprob`]), a `GET /models` entry must have an `id`; each a `ValueError` naming the endpoint.

**Bearer token.** A server gets a token only when one is named for it: `api_key` (the token), or `api_key_env`, the
*name* of an environment variable holding it (`--judge_api_key_env` / `--api_key_env`: the name, never the token,
goes on a command line, which `ps` shows). The ambient `OPENAI_API_KEY`, `OPENAI_ORG_ID` and `OPENAI_PROJECT_ID` are
never sent (the `openai` package would send them to any URL); without a token the placeholder `Bearer EMPTY` is sent,
as local servers expect. A token sent over plain `http://` to a host other than this machine is warned about, once,
and every token named by a variable is said (one log line: which variable goes to which endpoint).

**Credentials in the URL.** An endpoint URL may hold `user:password@` (or a key in its query): the requests use it as
given, but everything elical-hf shows or records names the endpoint by [`redacted_url`] (messages, progress bars,
logs, judging manifests).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar


__all__ = ["BadReply", "EndpointError", "OpenAIClient", "api_key_from", "base_url", "check_request_options",
           "not_json", "parsed", "redacted_url", "sampling_extras", "without_credentials"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

LOGPROB_ROUNDING = 1e-3
"""How far above 0 a server's log-probability may lie (its rounding) before it is refused ([`OpenAIClient.logprob`])."""

NO_API_KEY = "EMPTY"
"""The bearer token sent when none is named (what local OpenAI-compatible servers expect, and ignore)."""

_WARNED_PLAIN_HTTP: set[str] = set()


class EndpointError(OSError):
    """An OpenAI-compatible endpoint stayed unreachable, slow or broken after every retry."""


class BadReply(Exception):
    """A reply that does not hold what its request asked for (retried like a server error: a cut-off or garbled body
    may come right the next time)."""


def base_url(url: str, option: str = "--endpoint") -> str:
    """An OpenAI `base_url` (`http://host:port/v1`) from it or from a full route URL (`.../v1/completions`,
    `.../v1/chat/completions`); a `ValueError` naming `option` for anything that is not a valid http(s) URL
    ([`check_url`])."""
    url = str(url).strip().rstrip("/")
    check_url(url, option)
    for route in ("/chat/completions", "/completions"):
        if url.endswith(route):
            return url[: -len(route)]
    return url


def check_url(url: str, option: str = "--endpoint") -> None:
    """Refuse, in one `ValueError` naming `option`, an endpoint URL the requests could not go to as written: not
    http(s), no host, a port that is not a number, a host that is not a valid (ASCII or IDNA) name, a space or
    backslash, a raw `/` or `@` in the user name or password (the URL then reads otherwise than meant), or a query or
    fragment (`?api_key=...`: the client appends the route after it). The message shows the URL without its
    credentials, and nothing of it at all when even the host cannot be told apart."""
    from urllib.parse import urlsplit

    from ..utils.extras import require_extra

    (httpx,) = require_extra("openai", "An OpenAI-compatible endpoint", ("httpx",))

    def refuse(why: str, shown: bool = True) -> ValueError:
        where = f" {redacted_url(url)!r}" if shown else ""
        return ValueError(f"{option}{where} is not a valid http(s) URL such as http://127.0.0.1:8000/v1: {why}.")

    if not url.lower().startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise refuse("it must be an http:// or https:// URL naming a host")
    if any(char.isspace() or char == "\\" for char in url):
        raise refuse("it holds a space or a backslash", shown=False)
    netloc, _, path = url.split("://", 1)[1].partition("/")
    if netloc.count("@") > 1 or "@" in path:
        raise refuse("write `@`, `/` and `:` in a user name or password percent-encoded (%40, %2F, %3A)", shown=False)
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise refuse("it holds a query or fragment (`?...`, `#...`), which the requests' routes would be appended to; "
                     "give a token with the API key option (the NAME of its environment variable) instead")
    try:
        port = parts.port
    except ValueError:
        raise refuse("its port is not a number from 0 to 65535", shown=False) from None
    if not parts.hostname:
        raise refuse("it names no host", shown=False)
    try:
        httpx.URL(url)
        if port is None:
            parts.hostname.encode("idna")
    except (httpx.InvalidURL, UnicodeError, ValueError):
        raise refuse("its host is not a valid host name", shown=False) from None


def redacted_url(url: str) -> str:
    """`url` as elical-hf shows and records it: without the `user:password@` part, the query and the fragment
    (where credentials go), e.g. `http://alice:s3cret@host:8000/v1?key=k` -> `http://host:8000/v1`."""
    scheme, separator, rest = str(url).strip().partition("://")
    if not separator:  # (not a URL: what it would be, without what reads as credentials)
        scheme, rest = "", scheme
    host, slash, path = rest.partition("/")
    host = re.split(r"[?#]", host.rpartition("@")[2], maxsplit=1)[0]
    return f"{scheme}{separator}{host}{slash}{re.split(r'[?#]', path, maxsplit=1)[0]}"


def without_credentials(text: str) -> str:
    """`text` with the `user:password@` part of every URL in it removed (a judge name recorded before judges were
    named by their model alone: `"m via http://alice:pw@host/v1"` -> `"m via http://host/v1"`)."""
    return re.sub(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]*@", r"\1", str(text))


def check_request_options(timeout: float | None, max_retries: int | None, timeout_option: str = "--request_timeout",
                          retries_option: str = "--max_retries") -> None:
    """Refuse a request `timeout` that is not a positive number of seconds, or `max_retries` that is not a whole
    number >= 0, in one `ValueError` naming the command-line option it came from (`None`: not given, the default)."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ValueError(f"{timeout_option} must be > 0 seconds (a request's timeout), got {timeout!r}.")
    if max_retries is not None and (isinstance(max_retries, bool) or not isinstance(max_retries, int)
                                    or max_retries < 0):
        raise ValueError(f"{retries_option} must be an integer >= 0, got {max_retries!r}.")


def api_key_from(api_key: str | None = None, api_key_env: str | None = None,
                 option: str = "--api_key_env") -> str | None:
    """The bearer token named for an endpoint: `api_key` itself, or the value of the environment variable whose name
    is `api_key_env` (a `ValueError` naming `option` when that variable is unset or empty); `None` when neither is
    given: no ambient `OPENAI_API_KEY`."""
    if api_key is not None and api_key_env is not None:
        raise ValueError(f"Give the endpoint's token once: `api_key` or {option}, not both.")
    if api_key_env is None:
        return api_key or None
    value = os.environ.get(str(api_key_env), "").strip()
    if not value:
        raise ValueError(f"{option} {api_key_env} names an environment variable that is not set (or is empty); "
                         f"export {api_key_env}=<token> first.")
    return value


def warn_plain_http(url: str, label: str) -> None:
    """Warn, once per URL, that a bearer token goes over plain `http://` to a host that is not this machine."""
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost" or host.endswith(".localhost")
    if parts.scheme != "http" or loopback or url in _WARNED_PLAIN_HTTP:
        return
    _WARNED_PLAIN_HTTP.add(url)
    logger.warning("The %s %s gets a bearer token over plain http: anyone on the network path can read it; use "
                   "https:// (or a tunnel to 127.0.0.1).", label, url)


def not_json(text: str | bytes | None) -> str:
    """What a reply that is not JSON is called in errors: the start of its text (an HTML page, a proxy's message)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    start = " ".join(str(text or "").split())[:100]
    return f"a reply that is not JSON (is the URL an OpenAI-compatible API's /v1?): {start!r}"


def parsed(reply: Any) -> Any:
    """`reply` as the `openai` client parsed it, or [`BadReply`] for a body that was not JSON (served as HTML or text,
    the client gives back the body's text instead of the reply)."""
    if isinstance(reply, (str, bytes)):
        raise BadReply(not_json(reply))
    return reply


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
        api_key (`str`, *optional*): Bearer token (none by default: a local server needs none).
        api_key_env (`str`, *optional*): Or the name of the environment variable holding it (a `ValueError` when it
            is unset). The ambient `OPENAI_API_KEY` is never sent.
        max_concurrency (`int`, *optional*, defaults to 32): Requests in flight at once.
        timeout (`float`, *optional*, defaults to 600): Seconds one request may take.
        max_retries (`int`, *optional*, defaults to 4): Retries of a failed, rate-limited, timed-out or bad reply.
        option (`str`, *optional*): The command-line option the URL came from, for messages.
        label (`str`, *optional*, defaults to `"endpoint"`): What errors call the server ("judge endpoint", ...).
        key_option (`str`, *optional*, defaults to `"--api_key_env"`): The command-line option `api_key_env` came
            from, for messages.
        timeout_option (`str`, *optional*, defaults to `"--request_timeout"`), retries_option (`str`, *optional*,
            defaults to `"--max_retries"`): The command-line options `timeout` and `max_retries` came from.

    `url` may hold credentials (`user:password@`): the requests go to it as given, while `url` the attribute, and
    every message, is its [`redacted_url`].
    """

    def __init__(self, url: str, *, api_key: str | None = None, api_key_env: str | None = None,
                 max_concurrency: int = 32, timeout: float = 600, max_retries: int = 4, option: str = "--endpoint",
                 label: str = "endpoint", key_option: str = "--api_key_env", timeout_option: str = "--request_timeout",
                 retries_option: str = "--max_retries") -> None:
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"--max_concurrency must be an integer >= 1, got {max_concurrency!r}.")
        check_request_options(timeout, max_retries, timeout_option, retries_option)
        self._base_url = base_url(url, option)
        self.url, self.label = redacted_url(self._base_url), label
        self.api_key = api_key_from(api_key, api_key_env, key_option)
        if self.api_key is not None:
            warn_plain_http(self.url, label)
        if api_key_env is not None:  # which variable goes to which endpoint: said on every run
            logger.warning("The %s %s gets the bearer token in %s.", label, self.url, api_key_env)
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, float(timeout), max_retries
        self._runner: _LoopThread | None = None
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIClient(url={self.url!r}, max_concurrency={self.max_concurrency})"

    def _start(self) -> tuple[_LoopThread, Any]:
        with self._lock:
            if self._runner is None:
                from ..utils.extras import require_extra

                (openai,) = require_extra("openai", "An OpenAI-compatible endpoint", ("openai",))
                AsyncOpenAI = openai.AsyncOpenAI
                runner = _LoopThread()

                async def make() -> Any:  # the client's connection pool belongs to the loop it is made on
                    from openai import Omit

                    # Only the token named here: not the `openai` package's ambient ones (OPENAI_API_KEY,
                    # OPENAI_ORG_ID, OPENAI_PROJECT_ID, an Authorization in OPENAI_CUSTOM_HEADERS).
                    token = self.api_key or NO_API_KEY
                    headers = {"Authorization": f"Bearer {token}", "OpenAI-Organization": Omit(),
                               "OpenAI-Project": Omit()}
                    return AsyncOpenAI(base_url=self._base_url, api_key=token, timeout=self.timeout,
                                       max_retries=self.max_retries, default_headers=headers)

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
        runner = self.__dict__.get("_runner")
        if runner is None:
            return
        if sys.is_finalizing() or not runner.thread.is_alive():
            # At interpreter exit the loop's daemon thread runs no more: waiting on it for the connections to close
            # would hang the exit forever (a client left in a reference cycle by an error is collected only then).
            return
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
            page = parsed(await client.get("/models", cast_to=object))  # (the client's page type fails on text)
            entries = page.get("data") if isinstance(page, dict) else None
            if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
                raise BadReply(f"a GET /models reply without a `data` list of models: {str(page)[:200]}")
            for entry in entries:
                if not isinstance(entry.get("id"), str) or not entry["id"].strip():
                    raise ValueError(f"The {self.label} {self.url} lists a model without an `id` in GET /models "
                                     f"({str(entry)[:200]}): not an OpenAI-compatible list of models.")
            return entries

        return runner.run(self._guard(listing, "GET /models"))

    async def completion(self, client: Any, *, max_bytes: int, **body: Any) -> Any:
        """`POST /completions` with `body`, sent by `client` (the `openai` client [`map`] hands a request: its
        retries, its errors), the reply's body read a chunk at a time. A body past `max_bytes` (a server that does
        not keep to `max_tokens`) is a `ValueError` naming the endpoint, before it is ever held whole; a body that is
        not a JSON object, or breaks off, is [`BadReply`] (retried). Returns the reply as the `openai` client parses
        it (an `openai.types.Completion`)."""
        from openai.types import Completion

        chunks, size = [], 0
        async with client.completions.with_streaming_response.create(**body) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:  # said up front: not read at all
                size = int(declared)
            else:
                try:
                    async for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            break
                        chunks.append(chunk)
                except Exception as error:  # noqa: BLE001 (the body broke off: a timeout, a dropped connection)
                    raise BadReply(f"a reply that broke off while it was read: {_cause(error)}") from None
        if size > max_bytes:
            raise ValueError(
                f"The {self.label} {self.url} answered a request for at most {body.get('max_tokens')} token(s) "
                f"({body.get('n', 1)} answer(s)) with a reply of more than {max_bytes:,} bytes: it does not keep to "
                "`max_tokens`; check the server."
            )
        data = b"".join(chunks)
        try:
            payload = json.loads(data)
        except ValueError:
            raise BadReply(not_json(data)) from None
        if not isinstance(payload, dict):
            raise BadReply(not_json(data))
        return Completion.construct(**payload)

    def logprob(self, value: Any, token: Any) -> float:
        """`value`, a log-probability the server gave `token`, as a float: a `ValueError` naming the endpoint unless
        it is a finite number <= 0 (up to [`LOGPROB_ROUNDING`] above, read as 0): a positive or huge one would become
        a probability above 1, or overflow."""
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        if not math.isfinite(number) or number > LOGPROB_ROUNDING:
            raise ValueError(f"The {self.label} {self.url} gave the token {str(token)[:40]!r} the log-probability "
                             f"{value!r}: a log-probability is a finite number <= 0; check the server.")
        return min(number, 0.0)

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
            except json.JSONDecodeError as error:  # a body served as JSON that is not
                failure = BadReply(not_json(error.doc))
            except (BadReply, openai.APIResponseValidationError) as error:
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
