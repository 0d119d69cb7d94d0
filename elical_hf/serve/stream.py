"""Streaming (`"stream": true`) and log-probabilities (`"logprobs": true`) of a gated answer, in OpenAI's shapes.

The gate decides before the first token, so a streamed reply starts with the decision: the worker thread tells a
streamed request's events to its [`~elical_hf.serve.engine.Job`]'s `listener` as they happen,

- `("decision", gate, abstention, prompt_tokens)`: the `elical` field of the reply, known before the first answer token
  (for a retrieve decision, once its context is retrieved), with the abstain message when nothing will be answered;
- `("token", position, text, entry)`: after each decoded answer token, the answer's text that may be sent so far
  ([`TokenStream`]: never a broken character, a stop string's beginning or whitespace the final answer strips) and the
  token's `logprobs` entry (`None` for a special token such as EOS, or without `logprobs`);

and [`stream_response`] (event loop) sends them as server-sent events of `chat.completion.chunk`s: the response
headers and the first chunk carry the decision (`x-elical-*`, `elical`), then the answer's text as it is decoded, then
the `finish_reason`, the usage with `stream_options.include_usage`, and `data: [DONE]`. An abstention is one chunk
(the abstain message, `finish_reason: "abstain"`). The streamed text and log-probabilities add up to what the same
request gets unstreamed: whatever was held back is sent from the final reply. A client that leaves stops its
decoding ([`~elical_hf.serve.engine.Job.cancelled`]).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from ..signals.decoding import cut_at_stop


__all__ = ["StopPrefix", "TokenStream", "gate_headers", "logprob_entries", "logprob_entry", "stream_response"]

logger = logging.getLogger(__name__)

DONE = "data: [DONE]\n\n"


def gate_headers(gate: dict[str, Any]) -> dict[str, str]:
    """The `x-elical-*` headers of a reply whose `elical` field is `gate`."""
    headers = {"x-elical-confidence": f"{gate['confidence']:.6f}", "x-elical-decision": gate["decision"],
               "x-elical-threshold": f"{gate['threshold']:g}", "x-elical-answered": str(gate["answered"]).lower()}
    if gate["retrieve_threshold"] is not None:
        headers["x-elical-retrieve-threshold"] = f"{gate['retrieve_threshold']:g}"
    return headers


LOWEST_LOGPROB = -9999.0
"""What a log-probability of -inf (a token the model rules out) is reported as, as OpenAI does (JSON has no -inf)."""


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": max(logprob, LOWEST_LOGPROB), "bytes": list(text.encode("utf-8"))}


def logprob_entry(tokenizer: Any, token: str, logprob: float, top: Sequence[tuple[int, float]] | None,
                  top_logprobs: int) -> dict[str, Any]:
    """One token of OpenAI's `choices[0].logprobs.content`: the token as the tokenizer decodes it alone (a byte of a
    character split over several tokens decodes as U+FFFD, as vLLM reports it), its log-probability, its UTF-8
    `bytes`, and the `top_logprobs` most likely tokens at that step (`top`: `(token id, log-probability)` pairs)."""
    alternatives = [_token(tokenizer.decode([token_id]), value)
                    for token_id, value in (top or [])[:top_logprobs]]
    return {**_token(token, logprob), "top_logprobs": alternatives}


def logprob_entries(tokenizer: Any, result: dict[str, Any], top_logprobs: int,
                    special_tokens: set[str]) -> list[dict[str, Any]]:
    """The `logprobs.content` of an answered result of [`~elical_hf.gate.answer_questions`]: one entry per answer
    token but special ones (the EOS that ended it)."""
    tops = result["answer_top_logprobs"] or [None] * len(result["answer_tokens"])
    return [logprob_entry(tokenizer, token, logprob, top, top_logprobs)
            for token, logprob, top in zip(result["answer_tokens"], result["answer_logprobs"], tops)
            if token not in special_tokens]


class StopPrefix:
    """
    How long a beginning of one stop string the text streamed so far ends with: the Knuth-Morris-Pratt automaton of
    the stop string, fed the text's characters as they come (its failure function computed only as far as the text
    has matched), with its state after each character kept so that a text whose end decodes otherwise later (a
    character completed by the next token) is fed again from where the two differ. The work is linear in the characters
    fed, never in the stop string's length (trying every beginning of it at every token was quadratic).

    Args:
        stop (`str`): The stop string (non-empty).
    """

    def __init__(self, stop: str) -> None:
        self.stop, self.fail, self.fed, self.states = stop, [0], "", [0]

    def _failure(self, index: int) -> int:
        """The KMP failure function at `index`: the longest proper prefix of `stop[: index + 1]` that is also its
        suffix (computed on first use, in order)."""
        stop, fail = self.stop, self.fail
        while len(fail) <= index:
            i, k = len(fail), fail[-1]
            while k and stop[i] != stop[k]:
                k = fail[k - 1]
            fail.append(k + 1 if stop[i] == stop[k] else k)
        return fail[index]

    def held(self, text: str) -> int:
        """The length of the longest proper beginning of the stop string that `text` ends with."""
        common = len(self.fed) if text.startswith(self.fed) else next(
            (i for i, (a, b) in enumerate(zip(text, self.fed)) if a != b), min(len(text), len(self.fed)))
        del self.states[common + 1:]
        stop, state = self.stop, self.states[-1]
        for char in text[common:]:
            while state and (state == len(stop) or stop[state] != char):
                state = self._failure(state - 1)
            state += stop[state] == char
            self.states.append(state)
        self.fed = text
        return state if state < len(stop) else 0


class TokenStream:
    """
    One streamed answer on the worker thread: each decoded token (`push`) tells `listener` the answer's text that
    may be sent so far and the token's `logprobs` entry.

    The text sent is always a beginning of the final answer (the decoded tokens cut at the first stop string, stripped):
    a character whose bytes are not all decoded yet, the beginning of a stop string ([`StopPrefix`]: in time linear
    in the text, not in every prefix of every stop string) and trailing whitespace wait.

    Args:
        tokenizer: The model's tokenizer. stop (`Sequence[str]`): The request's stop strings.
        special_tokens (`set[str]`): Tokens left out of `logprobs` (EOS). top_logprobs (`int`, *optional*): The
            request's `top_logprobs` (`None`: no `logprobs`).
        listener (`Callable[[tuple], None]`): Told `("token", position, text, entry)` per token.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str], special_tokens: set[str], top_logprobs: int | None,
                 listener: Callable[[tuple], None]) -> None:
        self.tokenizer, self.stop, self.special_tokens = tokenizer, list(stop), special_tokens
        self.top_logprobs, self.listener = top_logprobs, listener
        self.prefixes = [StopPrefix(s) for s in self.stop]
        self.ids: list[int] = []
        self.entries = 0

    def sendable(self) -> str:
        """The decoded text that is surely the beginning of the final answer."""
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        cut = cut_at_stop(text, self.stop)
        if cut == text:  # no stop string yet: hold back what may begin one, and a character not decoded whole
            held = max((prefix.held(text) for prefix in self.prefixes), default=0)
            cut = text[: len(text) - held].rstrip("\ufffd")
        return cut.strip()

    def push(self, token_id: int, logprob: float, top: list[tuple[int, float]] | None) -> None:
        self.ids.append(token_id)
        token, entry = self.tokenizer.decode([token_id]), None
        if self.top_logprobs is not None and token not in self.special_tokens:
            entry = logprob_entry(self.tokenizer, token, logprob, top, self.top_logprobs)
        position = self.entries
        self.entries += entry is not None
        self.listener(("token", position, self.sendable(), entry))


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # a bug already answered (or logged): not "never retrieved"


class _Chunks:
    """The `chat.completion.chunk` bodies of one streamed reply."""

    def __init__(self, job: Any, model_name: str, include_usage: bool) -> None:
        self.job, self.model_name, self.include_usage = job, model_name, include_usage

    def choice(self, delta: dict[str, Any], finish_reason: str | None = None, logprobs: Any = None,
               **extra: Any) -> str:
        body = {"id": self.job.id, "object": "chat.completion.chunk", "created": self.job.created,
                "model": self.model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}],
                **extra}
        if self.include_usage:
            body["usage"] = None
        return _event(body)

    def end(self, prompt_tokens: int, completion_tokens: int) -> str:
        """The last events: the usage chunk (with `include_usage`) and `[DONE]`."""
        if not self.include_usage:
            return DONE
        return _event({"id": self.job.id, "object": "chat.completion.chunk", "created": self.job.created,
                       "model": self.model_name, "choices": [],
                       "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens}}) + DONE


async def stream_response(job: Any, work: Coroutine, model_name: str, include_usage: bool,
                          client_gone: Coroutine, respond: Callable[[Any], Any]) -> Any:
    """
    The response to a streamed request: wait for its decision (or its result, or its client leaving) and return a
    `StreamingResponse` whose headers carry the decision.

    Args:
        job ([`~elical_hf.serve.engine.Job`]): The checked request; its `listener` is set here.
        work (`Coroutine`): What computes its result (the batcher's `submit(job)`).
        model_name (`str`): The served name. include_usage (`bool`): `stream_options.include_usage`.
        client_gone (`Coroutine`): Returns when the client disconnects.
        respond (`Callable`): The plain response to a result that comes before any decision (its error).

    Returns:
        The response, or `None` when the client left before the decision (its job is cancelled).
    """
    from fastapi.responses import StreamingResponse

    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    job.listener = lambda event: loop.call_soon_threadsafe(events.put_nowait, event)
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieve)
    first, gone = asyncio.ensure_future(events.get()), asyncio.ensure_future(client_gone)
    try:
        await asyncio.wait({task, first, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if first.done():
        _, gate, abstention, prompt_tokens = first.result()
    else:
        first.cancel()
        if not task.done():  # the client left
            job.cancelled.set()
            task.cancel()
            return None
        result = task.exception() or task.result()
        if isinstance(result, BaseException) or "elical" not in result.body:  # refused, or failed, before deciding
            return respond(result)
        gate, usage = result.body["elical"], result.body["usage"]
        abstention = None if gate["answered"] else result.body["choices"][0]["message"]["content"]
        prompt_tokens = usage["prompt_tokens"]
    chunks = _Chunks(job, model_name, include_usage)
    return StreamingResponse(_answer(job, task, events, chunks, gate, abstention, prompt_tokens),
                             media_type="text/event-stream", headers=gate_headers(gate))


def _error_event(error: BaseException) -> str:
    """OpenAI's error event for a request that fails after its decision was sent (the openai client raises it)."""
    from .schema import RequestError, error_body

    if isinstance(error, RequestError):
        return _event(error.body())
    logger.error("Unexpected error in a streamed request", exc_info=error)
    return _event(error_body(f"Internal error: {type(error).__name__}: {error}", type="server_error",
                             code="internal_error"))


async def _answer(job: Any, task: asyncio.Future, events: asyncio.Queue, chunks: _Chunks, gate: dict[str, Any],
                  abstention: str | None, prompt_tokens: int) -> AsyncIterator[str]:
    """The events of one streamed reply after its decision (see the module docstring)."""
    finished = False
    try:
        if abstention is not None:
            yield chunks.choice({"role": "assistant", "content": abstention}, "abstain", elical=gate)
            yield chunks.end(prompt_tokens, 0)
            finished = True
            return
        yield chunks.choice({"role": "assistant", "content": ""}, elical=gate)
        sent, entries, entries_sent = "", [], 0
        while not events.empty() or not task.done():
            getter = asyncio.ensure_future(events.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            event = getter.result()
            if event[0] != "token":  # a batch run again after a failure tells its decision again
                continue
            _, position, text, entry = event
            if entry is not None and position == len(entries):  # a run again repeats the earlier tokens
                entries.append(entry)
            if len(text) > len(sent) and text.startswith(sent):
                logprobs = {"content": entries[entries_sent:]} if job.top_logprobs is not None else None
                yield chunks.choice({"content": text[len(sent):]}, logprobs=logprobs)
                sent, entries_sent = text, len(entries)
        result = task.exception() or task.result()
        if isinstance(result, BaseException):
            yield _error_event(result)
            yield DONE
            finished = True
            return
        choice, usage = result.body["choices"][0], result.body["usage"]
        content, logprobs = choice["message"]["content"], choice["logprobs"]
        if not content.startswith(sent):
            logger.warning("The text streamed for %s is not the beginning of its answer: %r, %r.", job.id, sent,
                           content)
        rest = content[len(sent):] if content.startswith(sent) else ""
        if rest or (logprobs is not None and len(logprobs["content"]) > entries_sent):
            yield chunks.choice({"content": rest},
                                logprobs=None if logprobs is None else {"content": logprobs["content"][entries_sent:]})
        yield chunks.choice({}, choice["finish_reason"])
        yield chunks.end(usage["prompt_tokens"], usage["completion_tokens"])
        finished = True
    finally:
        if not finished:  # the client left mid-stream: its rows stop decoding
            job.cancelled.set()
            task.cancel()
