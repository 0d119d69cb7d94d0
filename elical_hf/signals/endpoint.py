"""Completions from any OpenAI-compatible chat endpoint: the LLM judge can run elsewhere.

The paper judges with a 32B model that users will not load next to their own; [`ChatEndpoint`] sends each judge
prompt to `POST {url}/chat/completions` instead (a hosted API, a vLLM server, or `elical-hf serve MODEL --mode
completion`) as a single user message with `temperature: 0`, the same request the local judge answers
([`~elical_hf.signals.complete_prompts`]: the prompt in the judge's chat template, greedy, with the judge's
repetition penalty). Its `complete` is a completion function ([`~elical_hf.signals.llm_judge`]) for
`judge_with_llm` / `apply_judges(judge_endpoint=...)` / `elical-hf judge --judge_endpoint URL`; its
`first_token_logprobs` reads the verdict from the first reply token's log-probabilities instead
(`--judge_verdict logprob`: one token per prompt instead of up to 64).

Requests go through [`~elical_hf.signals.openai_client.OpenAIClient`] (the `openai` package's `AsyncOpenAI`):
`max_concurrency` in flight at once; a rate limit (429), a server error (5xx), a timeout, a dropped connection or a
reply without a message is retried with exponential backoff, `max_retries` times (`--judge_max_retries`; each request
waits at most `timeout` seconds, `--judge_timeout`), and then ends in one
[`~elical_hf.signals.openai_client.EndpointError`] (an `OSError`) naming the endpoint; a refused request (another
4xx) raises a `ValueError` with the endpoint's own message. The endpoint gets a bearer token only when one is named for
it (`api_key`, or `api_key_env`: `--judge_api_key_env NAME`), never the ambient `OPENAI_API_KEY`.

The judge is named by what it is, its model (`name`, what judged records store as `correctness_judge` /
`consistency_judge`): never by the URL, which may hold credentials and changes when a server restarts on another
port or host (a resumed run keeps one judge name). Messages name the endpoint without its credentials
([`~elical_hf.signals.openai_client.redacted_url`]).
"""

from __future__ import annotations

from typing import Any

from .openai_client import BadReply, OpenAIClient, base_url, parsed, sampling_extras


__all__ = ["ChatEndpoint", "TOP_LOGPROBS", "chat_completions_url"]

TOP_LOGPROBS = 20
"""Alternatives read at the first reply token by `first_token_logprobs` (OpenAI's largest `top_logprobs`)."""


def chat_completions_url(url: str) -> str:
    """`.../v1` (an OpenAI `base_url`) or the full `.../chat/completions` URL -> the full URL (checked)."""
    return base_url(url, "--judge_endpoint") + "/chat/completions"


class ChatEndpoint:
    """
    Greedy completions of raw user prompts from an OpenAI-compatible chat endpoint.

    Args:
        url (`str`): The endpoint's base URL (`http://host:port/v1`, as an OpenAI client's `base_url`).
        model (`str`): The model name sent with each request.
        api_key (`str`, *optional*): Bearer token (none by default: a local server needs none; the ambient
            `OPENAI_API_KEY` is never sent).
        api_key_env (`str`, *optional*): Or the name of the environment variable holding it (`--judge_api_key_env`).
        timeout (`float`, *optional*, defaults to 300): Seconds per request (`--judge_timeout`).
        max_retries (`int`, *optional*, defaults to 4): Retries of a rate-limited, failed, dropped or unreadable
            request (`--judge_max_retries`).
        max_concurrency (`int`, *optional*): Requests in flight at once; default: the `batch_size` of each call.
    """

    kind = "endpoint"

    def __init__(self, url: str, model: str, *, api_key: str | None = None, api_key_env: str | None = None,
                 timeout: float = 300, max_retries: int = 4, max_concurrency: int | None = None) -> None:
        self.client = OpenAIClient(url, api_key=api_key, api_key_env=api_key_env, timeout=timeout,
                                   max_retries=max_retries, max_concurrency=max_concurrency or 16,
                                   option="--judge_endpoint", label="judge endpoint",
                                   key_option="--judge_api_key_env", timeout_option="--judge_timeout",
                                   retries_option="--judge_max_retries")
        self.max_concurrency = max_concurrency
        self.url, self.model = self.client.url + "/chat/completions", model  # (without credentials)
        self.name = model

    def __repr__(self) -> str:
        return f"ChatEndpoint(url={self.url!r}, model={self.model!r})"

    def _concurrency(self, batch_size: int) -> None:
        self.client.max_concurrency = self.max_concurrency or max(1, int(batch_size))

    def _body(self, prompt: str, max_tokens: int, repetition_penalty: float) -> dict[str, Any]:
        # (vLLM and `elical-hf serve` take a penalty; OpenAI's own API refuses the field)
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "temperature": 0.0, "n": 1, "extra_body": sampling_extras(repetition_penalty=repetition_penalty)}

    def complete(self, prompts: list[str], max_new_tokens: int = 16, batch_size: int = 16, progress: bool = True,
                 repetition_penalty: float = 1.0) -> list[str]:
        """One greedy reply per prompt, in order; `batch_size` requests in flight at a time (unless the endpoint
        was made with `max_concurrency`). A `repetition_penalty` other than 1.0 is sent as the request's
        `repetition_penalty` (vLLM and `elical-hf serve --mode completion` apply it; OpenAI's own API refuses the
        field: judge there with `--judge_repetition_penalty 1.0`)."""
        self._concurrency(batch_size)

        async def ask(client: Any, prompt: str) -> str:
            reply = await client.chat.completions.create(**self._body(prompt, max_new_tokens, repetition_penalty))
            return _message(reply).content or ""

        return self.client.map(ask, list(prompts), what="judge prompts", progress=progress, unit="prompt")

    def first_token_logprobs(self, prompts: list[str], batch_size: int = 16, progress: bool = True,
                             repetition_penalty: float = 1.0) -> list[dict[str, float]]:
        """For each prompt, the log-probabilities of the [`TOP_LOGPROBS`] likeliest first reply tokens (token text
        -> log-probability): one generated token per prompt (`max_tokens=1`, `logprobs`, `top_logprobs`). The model's
        own distribution, as the local judge reads it: a `repetition_penalty` (of generated verdicts) is not sent."""
        self._concurrency(batch_size)

        async def ask(client: Any, prompt: str) -> dict[str, float]:
            body = self._body(prompt, 1, 1.0)
            reply = await client.chat.completions.create(**body, logprobs=True, top_logprobs=TOP_LOGPROBS)
            _message(reply)  # (BadReply for a body that is not JSON, or without choices)
            content = getattr(getattr(reply.choices[0], "logprobs", None), "content", None)
            if not content:
                raise BadReply(f"a reply without token log-probabilities: {str(reply)[:200]}")
            first = content[0]
            found = {str(alt.token): self.client.logprob(alt.logprob, alt.token) for alt in (first.top_logprobs or [])}
            found.setdefault(str(first.token), self.client.logprob(first.logprob, first.token))
            return found

        return self.client.map(ask, list(prompts), what="judge prompts", progress=progress, unit="prompt")


def _message(reply: Any) -> Any:
    """`choices[0].message` of a chat reply, or [`BadReply`]."""
    choices = getattr(parsed(reply), "choices", None)
    message = getattr(choices[0], "message", None) if choices else None
    if message is None:
        raise BadReply(f"a reply without choices[0].message: {str(reply)[:200]}")
    return message
