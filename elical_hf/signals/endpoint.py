"""Completions from any OpenAI-compatible chat endpoint: the LLM judge can run elsewhere.

The paper judges with a 32B model that users will not load next to their own; [`ChatEndpoint`] sends each judge
prompt to `POST {url}/chat/completions` instead (a hosted API, a vLLM server, or `elical-hf serve MODEL --mode
completion`) as a single user message with `temperature: 0`, the same request the local judge answers
([`~elical_hf.signals.complete_prompts`]: the prompt in the judge's chat template, greedy, with the judge's
repetition penalty). Its `complete` is a
completion function ([`~elical_hf.signals.llm_judge`]) for `judge_with_llm` / `apply_judges(judge_endpoint=...)` /
`elical-hf judge --judge_endpoint URL`.

Prompts go out `batch_size` at a time, concurrently; a rate limit (429), a server error (5xx) or a dropped connection
is retried with exponential backoff, `max_retries` times. A refused request (another 4xx) raises a `ValueError` with
the endpoint's own message; an endpoint that stays unreachable, an `OSError`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any


API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable whose value is sent as the bearer token (never a command-line option: `ps` shows those)."""
RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


def chat_completions_url(url: str) -> str:
    """`.../v1` (an OpenAI `base_url`) or the full `.../chat/completions` URL -> the full URL."""
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--judge_endpoint must be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}.")
    return url if url.endswith("/chat/completions") else f"{url}/chat/completions"


class ChatEndpoint:
    """
    Greedy completions of raw user prompts from an OpenAI-compatible chat endpoint.

    Args:
        url (`str`): The endpoint's base URL (`http://host:port/v1`, as an OpenAI client's `base_url`).
        model (`str`): The model name sent with each request.
        api_key (`str`, *optional*): Bearer token; defaults to the `OPENAI_API_KEY` environment variable (none for
            a local server).
        timeout (`float`, *optional*, defaults to 300): Seconds per request.
        max_retries (`int`, *optional*, defaults to 4): Retries of a rate-limited, failed or dropped request.
    """

    kind = "endpoint"

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout: float = 300,
                 max_retries: int = 4) -> None:
        self.url, self.model = chat_completions_url(url), model
        self.name = f"{model} via {url.rstrip('/')}"
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self.timeout, self.max_retries = timeout, max_retries

    def __repr__(self) -> str:
        return f"ChatEndpoint(url={self.url!r}, model={self.model!r})"

    def complete(self, prompts: list[str], max_new_tokens: int = 16, batch_size: int = 16, progress: bool = True,
                 repetition_penalty: float = 1.0) -> list[str]:
        """One greedy reply per prompt, in order; `batch_size` requests in flight at a time. A `repetition_penalty`
        other than 1.0 is sent as the request's `repetition_penalty` (vLLM and `elical-hf serve --mode completion`
        apply it; OpenAI's own API refuses the field: judge there with `--judge_repetition_penalty 1.0`)."""
        from tqdm.auto import tqdm

        prompts = list(prompts)
        if not prompts:
            return []
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, batch_size)) as pool:
            replies = pool.map(lambda prompt: self._ask(prompt, max_new_tokens, repetition_penalty), prompts)
            return list(tqdm(replies, total=len(prompts), desc="Judging (endpoint)", unit="prompt",
                             disable=not progress))

    def _ask(self, prompt: str, max_new_tokens: int, repetition_penalty: float) -> str:
        request_body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                        "max_tokens": max_new_tokens, "temperature": 0.0, "n": 1}
        if repetition_penalty != 1.0:
            request_body["repetition_penalty"] = repetition_penalty
        body = json.dumps(request_body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(self.url, data=body, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return _reply_text(json.loads(response.read()), self.url)
            except urllib.error.HTTPError as error:
                if error.code not in RETRIED_STATUSES:
                    raise ValueError(f"The judge endpoint {self.url} refused a request ({error.code}): "
                                     f"{_error_message(error)}") from None
                failure: Exception = error
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                failure = error
            if attempt < self.max_retries:
                time.sleep(min(30.0, 0.5 * 2**attempt))
        reason = getattr(failure, "reason", None) or failure
        raise OSError(f"The judge endpoint {self.url} failed {self.max_retries + 1} times: {reason}")


def _reply_text(body: Any, url: str) -> str:
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"The judge endpoint {url} answered without choices[0].message.content: "
                         f"{json.dumps(body)[:200]}") from None
    return content or ""


def _error_message(error: urllib.error.HTTPError) -> str:
    """The `error.message` of an OpenAI-style error body, else the body's start."""
    text = error.read().decode("utf-8", "replace")
    try:
        return json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return text[:200] or str(error.reason)
