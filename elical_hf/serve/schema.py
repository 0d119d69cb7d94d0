"""The OpenAI chat-completions wire format the server speaks: the request schema, its checks, and the error body.

Only what the server does is accepted: a request asking for something it does not do (several choices, tools, a JSON
response format; a field of another server that would change the answer, `logit_bias`, `min_tokens`, `ignore_eos`, ...:
[`NOT_APPLIED`]; a gate setting misplaced under `extra_body` or spelt `Elical`) is refused with a 400 rather than
answered as if it had been done. Fields of the OpenAI API that do
not change a greedy answer (`user`, `seed`, `temperature`, `top_p`, ...) are accepted and ignored: answers are always
greedy, the answer the confidence is about. Numbers and flags are
strict (`"max_tokens": true` or `"3"` is refused, not read as 1 or 3), and every string of a request must be text
(no lone surrogate), so that nothing a request holds can fail later, inside a batch shared with other requests.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError


class RequestError(Exception):
    """
    A request the server refuses: answered with [`error_body`] and `status` (a 4xx), never a traceback.

    Args:
        message (`str`): What is wrong, in one sentence a client can act on.
        param (`str`, *optional*): The request field at fault (`"messages"`, `"max_tokens"`, ...).
        code (`str`, *optional*): A machine-readable code (`"context_length_exceeded"`, `"model_not_found"`, ...).
        status (`int`, *optional*, defaults to 400): The HTTP status.
        type (`str`, *optional*, defaults to `"invalid_request_error"`): The OpenAI error type.
    """

    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400,
                 type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.type = message, param, code, status, type

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


@dataclasses.dataclass
class Reply:
    """A response body (`chat.completion`, or `/v1/confidence`'s list) and its extra headers."""

    body: dict[str, Any]
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """The OpenAI error JSON: `{"error": {"message", "type", "param", "code"}}`."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class ContentPart(BaseModel):
    """One part of a message's content; only text parts are understood."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self, index: int) -> str:
        """The message's text (text parts joined); a `RequestError` for other parts."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise RequestError(f"messages[{index}]: only text content is supported, got a {part.type!r} part.",
                                   param=f"messages.{index}.content", code="unsupported_content")
        return "".join(part.text for part in self.content)


class GateOptions(BaseModel):
    """Per-request gate settings (the `elical` field; `extra_body={"elical": {...}}` with the openai client)."""

    model_config = ConfigDict(extra="forbid")

    threshold: StrictFloat | None = Field(default=None, description="Answer at or above this confidence.")
    retrieve_threshold: StrictFloat | None = Field(default=None,
                                                   description="Retrieve at or above this (below threshold).")
    domain: StrictStr | None = Field(default=None, min_length=1,
                                     description="The question's domain: gated with that domain's saved thresholds.")


class StreamOptions(BaseModel):
    """`stream_options` of a streamed request."""

    model_config = ConfigDict(extra="allow")

    include_usage: StrictBool | None = False


MAX_TOP_LOGPROBS = 20
"""The most `top_logprobs` a request may ask for (OpenAI's limit)."""
MAX_STOP_STRINGS = 4
"""The most `stop` strings a request may send (OpenAI's limit)."""
MAX_STOP_LENGTH = 1000
"""The longest `stop` string, in characters: every decoding step of a request looks for its stop strings."""


class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions`. Unknown fields are ignored (clients send many); see [`check_supported`]."""

    model_config = ConfigDict(extra="allow")

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    n: StrictInt | None = 1
    logprobs: StrictBool | None = False
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    temperature: StrictFloat | None = None
    top_p: StrictFloat | None = None
    repetition_penalty: StrictFloat | None = Field(default=None, gt=0)
    chat_template_kwargs: dict[str, Any] | None = None
    elical: GateOptions | None = None

    def stop_strings(self) -> tuple[str, ...]:
        """The request's stop strings, bounded: at most [`MAX_STOP_STRINGS`] (OpenAI's limit), each non-empty and at
        most [`MAX_STOP_LENGTH`] characters long (a `RequestError` naming the string otherwise)."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if any(not stop for stop in stops):
            raise RequestError("`stop` strings must be non-empty.", param="stop")
        if len(stops) > MAX_STOP_STRINGS:
            raise RequestError(f"At most {MAX_STOP_STRINGS} `stop` strings, got {len(stops)}.", param="stop")
        for i, stop in enumerate(stops):
            if len(stop) > MAX_STOP_LENGTH:
                name, param = ("the stop string", "stop") if isinstance(self.stop, str) else (f"stop[{i}]", f"stop.{i}")
                raise RequestError(f"`stop` strings may be at most {MAX_STOP_LENGTH} characters long; {name} has "
                                   f"{len(stop)}.", param=param)
        return tuple(stops)


class ConfidenceRequest(BaseModel):
    """`POST /v1/confidence`: scores only, no generation. Unknown fields are refused (a misspelt `questions` would
    otherwise be a request for nothing)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    questions: list[StrictStr] = Field(min_length=1, description="The questions to score.")
    domains: list[StrictStr | None] | None = Field(default=None, description="Each question's domain (`null`: the "
                                                   "request's `elical.domain`, else none).")
    elical: GateOptions | None = None


class ScoreRequest(BaseModel):
    """`POST /classify`, vLLM Semantic Router's `score.v1` remote signal: `{"inputs": TEXT}`, one question."""

    model_config = ConfigDict(extra="forbid")

    inputs: StrictStr = Field(description="The question to score.")


UNSUPPORTED: dict[str, str] = {
    "tools": "tool calls", "tool_choice": "tool calls", "functions": "function calls", "function_call": "function calls",
    "audio": "audio output", "prediction": "predicted outputs",
}
"""Request fields the server refuses whenever they are set (to anything but null)."""

NOT_APPLIED: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0), "logit_bias": ({},), "stop_token_ids": ([],),
    "stop_sequences": ([],), "min_tokens": (0,), "ignore_eos": (False,), "max_new_tokens": (), "min_new_tokens": (0,),
    "length_penalty": (1, 1.0), "no_repeat_ngram_size": (0,), "bad_words": ([],), "allowed_token_ids": (),
    "best_of": (1,), "use_beam_search": (False,), "guided_json": (), "guided_regex": (), "guided_choice": (),
    "guided_grammar": (), "structured_outputs": (), "include_stop_str_in_output": (False,),
}
"""Request fields of the OpenAI API and of other servers (vLLM, TGI) that would change the answer, which this server
does not apply, with the values that change nothing: set (not null) to any other value, they are refused with a 400
naming the field, rather than silently ignored."""


def check_supported(request: ChatCompletionRequest) -> None:
    """Refuse, with a `RequestError`, what the server would otherwise pretend to do."""
    if request.n not in (None, 1):
        raise RequestError(f"Only n=1 is supported, got n={request.n}: the answer is the greedy one, the answer the "
                           "confidence is about (n greedy answers would be n copies of it).", param="n",
                           code="unsupported_parameter")
    if request.top_logprobs is not None and not request.logprobs:
        raise RequestError("`top_logprobs` needs `logprobs: true`.", param="top_logprobs")
    if request.stream_options is not None and not request.stream:
        raise RequestError("`stream_options` is only for `stream: true`.", param="stream_options")
    extra = request.model_extra or {}
    for name, what in UNSUPPORTED.items():
        if extra.get(name) not in (None, [], {}):
            raise RequestError(f"`{name}`: {what} are not supported by this server.", param=name,
                               code="unsupported_parameter")
    for name, neutral in NOT_APPLIED.items():
        value = extra.get(name)
        if value is not None and not any(value == same and type(value) is type(same) for same in neutral):
            hint = " (use `max_tokens`)" if name == "max_new_tokens" else ""
            raise RequestError(f"`{name}` is not applied by this server, and it would change the answer: leave it out"
                               f"{hint}.", param=name, code="unsupported_parameter")
    refuse_misplaced_fields(extra, ChatCompletionRequest.model_fields)
    response_format = extra.get("response_format")
    if response_format not in (None, {"type": "text"}, "text"):
        raise RequestError("Only the text `response_format` is supported.", param="response_format",
                           code="unsupported_parameter")


def refuse_misplaced_fields(extra: dict[str, Any], fields: Any) -> None:
    """Refuse, with a `RequestError`, a request field that is one of the server's `fields` under another spelling
    (`Elical`, `Max_Tokens`), or `extra_body` (the openai client's argument, whose contents it sends at the top level):
    ignoring it would drop what it asks for, a stricter gate threshold say."""
    if "extra_body" in extra:
        raise RequestError("`extra_body` is the openai client's argument, not a request field: the client sends its "
                           "contents at the top level (`extra_body={\"elical\": {...}}` sends `\"elical\"`); send "
                           "them so.", param="extra_body", code="unsupported_parameter")
    known = {name.lower().replace("-", "_"): name for name in fields}
    for name in extra:
        meant = known.get(str(name).lower().replace("-", "_"))
        if meant is not None:
            raise RequestError(f"`{name}` is not a request field; did you mean `{meant}`? (field names are "
                               "case-sensitive).", param=name, code="unsupported_parameter")


def check_text(data: Any) -> None:
    """Refuse, with a `RequestError` naming the field (`messages.0.content`, `stop.1`), a string anywhere in a parsed
    JSON body (keys too) that is not text: one holding a lone surrogate (`"\\udcff"` in the JSON), which no tokenizer
    reads ([`~elical_hf.settings.prompts.check_prompt_texts`] says which character)."""
    from ..settings.prompts import check_prompt_texts

    pending: list[tuple[str, Any]] = [("", data)]
    while pending:  # iterative: a deeply nested body cannot exhaust the stack
        path, value = pending.pop()
        if isinstance(value, dict):
            pending.extend((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
            texts = [(key, f"a key of `{path}`" if path else "a key of the request body", path) for key in value]
        elif isinstance(value, list):
            pending.extend((f"{path}.{i}" if path else str(i), item) for i, item in enumerate(value))
            texts = []
        else:
            texts = [(value, f"`{path}`", path)] if isinstance(value, str) else []
        for text, name, param in texts:
            try:
                check_prompt_texts([text], [name])
            except ValueError as error:
                raise RequestError(str(error), param=param or None, code="invalid_text") from None


def parse_request(body: bytes, schema: type[BaseModel] = ChatCompletionRequest) -> Any:
    """The request (a `schema`, by default a chat completion) a JSON body holds: a `RequestError` for a body that is
    not JSON, holds a string that is not text ([`check_text`]) or is not a valid request ([`validation_error`])."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError (not UTF-8), too deep
        reason = error.msg if isinstance(error, json.JSONDecodeError) else f"{type(error).__name__}: {error}"
        raise RequestError(f"The request body is not valid JSON: {reason}.", code="invalid_json") from None
    check_text(data)
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        raise validation_error(list(error.errors())) from None


def validation_error(errors: list[dict[str, Any]]) -> RequestError:
    """The first of pydantic's validation errors of the request body, as a `RequestError` naming the field."""
    if not errors:
        return RequestError("The request body is not a valid chat-completions request.")
    error = errors[0]
    location = [str(part) for part in error.get("loc", ()) if part != "body"]
    param = ".".join(location) or None
    if error.get("type") == "json_invalid":
        return RequestError(f"The request body is not valid JSON: {error.get('msg')}.", code="invalid_json")
    where = f"`{param}`: " if param else "The request body: "
    return RequestError(f"{where}{error.get('msg', 'invalid value')}.", param=param, code=error.get("type"))
