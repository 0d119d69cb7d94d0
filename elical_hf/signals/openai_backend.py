"""Sampling through an OpenAI-compatible server (`vllm serve`, SGLang, any server whose `/v1/completions` takes `n`).

At HonestyBench scale (560k questions x 21 answers) people already run a serving engine that spreads one model over
GPUs and machines; [`OpenAIBackend`] drives it instead of loading the model here. It is a generation backend like
[`~elical_hf.signals.HFBackend`] (the same `generate` / `complete`, the same record schema, the same resumable
shards of [`~elical_hf.signals.sample_records`]):

- **the same prompts**: each question is rendered here by the model's own chat template
  ([`~elical_hf.signals.generation.build_prompt_ids`], with the tokenizer of `model`), and sent to
  `POST /v1/completions` as that text, so the server sees exactly what the Hugging Face sampler feeds the model (as
  token ids instead where the tokenizer would add special tokens to the text: `add_special_tokens` differs);
- **greedy answer**: `temperature=0`, `logprobs=1` (the chosen tokens' log-probabilities: Prob and N-Prob work on
  these records), the settings' `greedy_repetition_penalty`;
- **k samples**: one request with `n=k`, the settings' temperature and top-p, a per-question `seed` (from the
  settings' seed and the question text, as the other backends), and vLLM's sampling fields `top_k` and
  `repetition_penalty` in the request body (`extra_body`; sent only when they do something: vLLM honours both,
  OpenAI's own API refuses unknown fields; docs/scaling.md says what was checked);
- records name the **served model** (`model`), so `train` and `evaluate` refuse a confidence model built on another
  base;
- **replies are checked** before anything is kept: a reply from another model than the one asked for, an answer longer
  than `max_tokens` allows (its body is not even read past the size its request allows), a greedy token without a
  log-probability or with one that is not a finite number <= 0: each a `ValueError` naming the endpoint.

Reproducibility: a server that honours `seed` per request (vLLM with its default V1 engine; see docs/scaling.md for
what was measured) gives the same samples on a rerun, so an interrupted `elical-hf sample --backend openai` finished
by a rerun gives the records of an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import logging
import os
import re

from ..models.default_model import resolve_model_path
from .decoding import answer_record, cut_at_stop, sample_seed
from .generation import SamplingSettings, completion_settings, render_prompts
from .openai_client import BadReply, OpenAIClient, parsed, sampling_extras
from .records import same_model


__all__ = ["OpenAIBackend", "served_model_of"]

logger = logging.getLogger(__name__)

REPLY_OVERHEAD = 16 * 1024
"""Bytes of a completion reply besides its answers (ids, usage, finish reasons), in the bound on its size."""

_SNAPSHOT = re.compile(r"-\d{4}(-\d{2}-\d{2})?$")
"""A dated snapshot's suffix (`gpt-3.5-turbo-instruct-0914`): a reply may name the snapshot of the model asked for."""


def served_model_of(client: OpenAIClient, served_model: str | None) -> dict[str, Any]:
    """The `GET /models` entry of `served_model`, or of the server's only model when it is `None`: a `ValueError`
    when the server does not serve that name, or serves several models and none was named."""
    entries = client.models()
    names = [str(entry.get("id")) for entry in entries]
    if served_model is None:
        if len(entries) != 1:
            raise ValueError(f"The endpoint {client.url} serves {len(entries)} models ({', '.join(names) or 'none'}): "
                             "name one with --served_model.")
        return entries[0]
    for entry in entries:
        if str(entry.get("id")) == served_model:
            return entry
    raise ValueError(f"The endpoint {client.url} does not serve {served_model!r}; it serves: {', '.join(names)}.")


class OpenAIBackend:
    """
    Generation through an OpenAI-compatible server's `/v1/completions`, with prompts rendered here.

    Args:
        endpoint (`str`): The server's base URL (`http://host:port/v1`).
        model (`str`, *optional*): Hub id or folder whose tokenizer and chat template render the prompts: the model
            the server serves (its tokenizer only is loaded). Default: what the server says it serves (vLLM's
            `root` in `GET /models`, else the served name). Another model than the server's is refused (the records
            would credit the server's answers to it) unless `allow_other_model`.
        served_model (`str`, *optional*): The model name the server knows (`vllm serve --served-model-name`);
            default: the server's only model.
        revision (`str`, *optional*): Hub revision of `model`'s tokenizer.
        max_concurrency (`int`, *optional*, defaults to 32): Requests in flight at once.
        timeout (`float`, *optional*, defaults to 600): Seconds per request.
        max_retries (`int`, *optional*, defaults to 4): Retries of a failed request (429, 5xx, timeouts, bad replies).
        api_key (`str`, *optional*): Bearer token (none by default; the ambient `OPENAI_API_KEY` is never sent).
        api_key_env (`str`, *optional*): Or the name of the environment variable holding it (`--api_key_env`).
        client ([`~elical_hf.signals.openai_client.OpenAIClient`], *optional*): A client already made (then the
            connection options above are its own).
        allow_other_model (`bool`, *optional*, defaults to `False`): Accept a `model` that is not the server's (the
            same weights under another name); a warning then says so.
    """

    kind = "openai"

    def __init__(self, endpoint: str, model: str | None = None, *, served_model: str | None = None,
                 revision: str | None = None, max_concurrency: int = 32, timeout: float = 600, max_retries: int = 4,
                 api_key: str | None = None, api_key_env: str | None = None,
                 client: OpenAIClient | None = None, allow_other_model: bool = False) -> None:
        self.client = client or OpenAIClient(endpoint, api_key=api_key, api_key_env=api_key_env,
                                             max_concurrency=max_concurrency, timeout=timeout, max_retries=max_retries)
        entry = served_model_of(self.client, served_model)
        self.served_model, self.served_root = str(entry["id"]), entry.get("root")
        served = [str(name) for name in (self.served_model, self.served_root) if name]
        if model is None:
            model, self.tokenizer = _first_tokenizer(served, revision, self.client.url)
        else:
            if not any(same_model(model, name) for name in served):
                if not allow_other_model:
                    raise ValueError(f"{self.client.url} serves {' / '.join(served)}, not {model}: its answers would "
                                     f"be credited to {model}. Check --model and --served_model, or pass "
                                     "--allow_other_model if the server's model is this one under another name.")
                logger.warning("The prompts are rendered with %s's chat template, but %s serves %s (allowed).",
                               model, self.client.url, " / ".join(served))
            self.tokenizer = _load_tokenizer(model, revision)
        self.tokenizer_source = model
        # The longest token's text: no answer of `max_tokens` tokens is longer than `max_tokens` of these.
        self._token_chars = max((len(str(token)) for token in self.tokenizer.get_vocab()), default=16)
        # The records' `model`: the model named for the prompts (a Hub id), or the served name when that is a folder.
        self.name = self.served_model if os.path.exists(model) else model
        # Not the URL: the same served model behind another address (a restarted server) resumes the same run.
        self.weights_source = f"served: {self.served_root or self.served_model}"
        self._max_model_len = entry.get("max_model_len")

    def __repr__(self) -> str:
        return f"OpenAIBackend(name={self.name!r}, served_model={self.served_model!r}, endpoint={self.client.url!r})"

    @property
    def context_length(self) -> int | None:
        """The server's context in tokens (vLLM's `max_model_len` in `GET /models`), when it says."""
        return self._max_model_len if isinstance(self._max_model_len, int) else None

    def _prompts(self, texts: list[str], settings: SamplingSettings) -> list[str | list[int]]:
        """What `/v1/completions` is sent: the rendered prompt text, or its token ids where the server's default
        tokenization (special tokens added) would not give the ids the Hugging Face sampler decodes from."""
        rendered = render_prompts(self.tokenizer, texts, settings)
        exact = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        with_specials = self.tokenizer(rendered, add_special_tokens=True)["input_ids"]
        return [text if list(again) == list(ids) else list(ids)
                for text, ids, again in zip(rendered, exact, with_specials)]

    def generate(self, questions: list[str], settings: SamplingSettings, progress: bool = True) -> list[dict]:
        """Greedy answer (with token log-probabilities) and k samples per question, in the record schema of
        [`~elical_hf.signals.generate_answers`]; two requests per question, all at once up to `max_concurrency`."""
        questions = list(questions)
        if not questions:
            return []
        prompts = self._prompts(questions, settings)
        stop = list(settings.stop_strings) or None
        greedy_extra = sampling_extras(repetition_penalty=settings.greedy_repetition_penalty)
        sample_extra = sampling_extras(top_k=settings.top_k, repetition_penalty=settings.repetition_penalty)
        k = settings.num_samples

        async def ask(client: Any, job: tuple[int, bool]) -> Any:
            index, greedy = job
            common = dict(prompt=prompts[index], max_tokens=settings.max_new_tokens, stop=stop)
            if greedy:
                return await self._answers(client, 1, **common, temperature=0.0, logprobs=1, extra_body=greedy_extra)
            return await self._answers(
                client, k, **common, temperature=settings.temperature, top_p=settings.top_p,
                seed=sample_seed(settings.seed, questions[index], 0) % (2**31), extra_body=sample_extra)

        jobs = [(i, greedy) for i in range(len(questions)) for greedy in (True, False)]
        replies = self.client.map(ask, jobs, what="completions", progress=progress)
        records = []
        for index in range(len(questions)):
            ((best,), _), (samples, sample_tokens) = replies[2 * index], replies[2 * index + 1]
            tokens, logprobs = self._token_logprobs(best)
            if sample_tokens is None:  # a server without `usage`: the samples' text, tokenized here
                sample_tokens = sum(len(self.tokenizer(s.text or "", add_special_tokens=False)["input_ids"])
                                    for s in samples)
            texts = [cut_at_stop(reply.text or "", settings.stop_strings).strip() for reply in (best, *samples)]
            records.append(answer_record(texts[0], tokens, logprobs, texts[1:], len(tokens) + sample_tokens))
        return records

    def complete(self, prompts: list[str], max_new_tokens: int = 16, batch_size: int = 16, progress: bool = True, *,
                 use_chat_template: bool = True, system_prompt: str | None = None,
                 stop_strings: list[str] | None = None, repetition_penalty: float = 1.0) -> list[str]:
        """Greedy completions of raw user prompts in the chat template, rendered here as the Hugging Face backend
        renders them (`batch_size` is the server's business: ignored)."""
        prompts = list(prompts)
        if not prompts:
            return []
        settings = completion_settings(max_new_tokens, batch_size, use_chat_template, system_prompt, stop_strings,
                                       repetition_penalty)
        sent = self._prompts(prompts, settings)
        extra = sampling_extras(repetition_penalty=repetition_penalty)

        async def ask(client: Any, index: int) -> Any:
            (choice,), _ = await self._answers(client, 1, prompt=sent[index], max_tokens=max_new_tokens,
                                               temperature=0.0, stop=settings.stop_strings or None, extra_body=extra)
            return choice

        choices = self.client.map(ask, range(len(prompts)), what="completions", progress=progress, unit="prompt")
        return [cut_at_stop(c.text or "", settings.stop_strings).strip() for c in choices]

    async def _answers(self, client: Any, n: int, **body: Any) -> tuple[list[Any], int | None]:
        """One `/completions` request for `n` answers of the served model ([`OpenAIClient.completion`]: a body past
        the size `max_tokens` allows is not read): the choices in order and the tokens they took (`usage`, when the
        server says), once the reply is found to hold what was asked: the model asked for, answers no longer than
        `max_tokens` (and with `logprobs`, a log-probability per greedy token, [`_choices`]); a `ValueError` naming
        the endpoint otherwise."""
        max_tokens = body["max_tokens"]
        reply = await self.client.completion(client, max_bytes=self._reply_bytes(max_tokens, n),
                                             model=self.served_model, n=n, **body)
        self._check_model(getattr(reply, "model", None))
        choices = _choices(reply, n, logprobs="logprobs" in body)
        used = _completion_tokens(reply)
        limit = max_tokens * (self._token_chars + 1)
        longest = max(len(choice.text) for choice in choices)
        tokens = max((len(choice.logprobs.tokens or []) for choice in choices if choice.logprobs), default=0)
        found = (f"{tokens} tokens" if tokens > max_tokens
                 else f"{used} tokens for {n} answer(s)" if used is not None and used > n * max_tokens
                 else f"an answer of {longest:,} characters" if longest > limit else None)
        if found is not None:
            raise ValueError(
                f"The {self.client.label} {self.client.url} answered a request for at most {max_tokens} token(s) with "
                f"{found} (no {max_tokens} tokens of {self.tokenizer_source} hold more than {limit:,} characters): "
                "it does not keep to `max_tokens`; check the server."
            )
        return choices, used

    def _reply_bytes(self, max_tokens: int, n: int) -> int:
        """The most bytes a reply of `n` answers of at most `max_tokens` tokens takes: each token's text (at most
        `_token_chars` characters of up to 12 bytes once JSON-escaped) three times over (the text, `logprobs.tokens`,
        `top_logprobs`) with its numbers, and [`REPLY_OVERHEAD`] besides."""
        return REPLY_OVERHEAD + n * max_tokens * 3 * (12 * self._token_chars + 64)

    def _check_model(self, named: Any) -> None:
        """Refuse a reply that names another model than the one asked for (the served name, its `root`, or a dated
        snapshot of it): its answers would be credited to the model asked for."""
        if not named:
            return
        named, asked = str(named), [str(name) for name in (self.served_model, self.served_root) if name]
        if any(same_model(named, name) or (named.startswith(name) and _SNAPSHOT.fullmatch(named[len(name):]))
               for name in asked):
            return
        raise ValueError(f"The {self.client.label} {self.client.url} answered a request for {self.served_model!r} "
                         f"with a reply from {named!r}: its answers are not that model's; check --endpoint and "
                         "--served_model.")

    def _token_logprobs(self, choice: Any) -> tuple[list[str], list[float]]:
        """The chosen tokens and their log-probabilities, each a finite number <= 0 ([`OpenAIClient.logprob`]); a
        `ValueError` for a token without one (Prob and N-Prob would read a made-up value)."""
        found = choice.logprobs
        if any(v is None for v in found.token_logprobs):
            raise ValueError(f"The {self.client.label} {self.client.url} returned a greedy answer token without its "
                             "log-probability (`logprobs`).")
        tokens = [str(t) for t in found.tokens]
        return tokens, [self.client.logprob(v, t) for t, v in zip(tokens, found.token_logprobs)]


def _load_tokenizer(model: str, revision: str | None) -> Any:
    """`model`'s tokenizer (resolved as every model is: the embedded default offline), no remote code."""
    from ..data.encoding import read_tokenizer

    return read_tokenizer(resolve_model_path(model, revision)[0])


def _first_tokenizer(names: list[str], revision: str | None, url: str) -> tuple[str, Any]:
    """The first of the served model's names (its served name, then vLLM's `root`) whose tokenizer loads here."""
    for name in names:
        try:
            return name, _load_tokenizer(name, revision)
        except (OSError, ValueError):
            continue
    raise ValueError(f"No tokenizer here for what {url} serves ({' / '.join(names)}): pass --model with the served "
                     "model's Hub id or folder (its chat template renders the prompts).")


def _choices(reply: Any, n: int, logprobs: bool = False) -> list[Any]:
    """The reply's choices in index order: [`BadReply`] (retried) for a reply without choices or text, and a
    `ValueError` (not retried) for a server that gives another number of choices than `n`: it does not take `n`."""
    choices = sorted(getattr(parsed(reply), "choices", None) or [], key=lambda c: getattr(c, "index", 0) or 0)
    if not choices or any(not isinstance(getattr(c, "text", None), str) for c in choices):
        raise BadReply(f"expected {n} choice(s) with text, got {str(reply)[:200]}")
    if len(choices) != n:
        raise ValueError(f"The server answered a request for n={n} answers with {len(choices)}: it does not support "
                         "`n` (several answers per request), which --backend openai needs for the k samples.")
    if logprobs:
        for choice in choices:
            found = getattr(choice, "logprobs", None)
            if found is None or found.token_logprobs is None or len(found.token_logprobs) != len(found.tokens or []):
                raise BadReply(f"a greedy reply without token log-probabilities: {str(choice)[:200]}")
    return choices


def _completion_tokens(reply: Any) -> int | None:
    """Tokens the reply generated, all its choices together (`usage.completion_tokens`), when the server says."""
    value = getattr(getattr(reply, "usage", None), "completion_tokens", None)
    return value if isinstance(value, int) and value >= 0 else None
