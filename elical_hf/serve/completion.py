"""The engine of `elical-hf serve MODEL --mode completion`: plain greedy chat completions of any causal LM, no gate
(what an LLM judge behind the server needs). Requests are checked and batched as the gate's
([`~elical_hf.serve.engine`]).
"""

from __future__ import annotations

from typing import Any

from .engine import MAX_TOKENS_LIMIT, Engine, Job
from .schema import ChatCompletionRequest, Reply, RequestError


__all__ = ["CompletionEngine"]


class CompletionEngine(Engine):
    """
    Plain greedy chat completions of a causal LM, no gating: the conversation rendered by the model's chat template
    with the assistant header, decoded by the library's own loop (as [`~elical_hf.signals.complete_prompts`], so an
    LLM judge behind this server gives the verdicts it gives in-process).

    Args:
        model: A causal LM; tokenizer: its tokenizer; model_name (`str`): the served name.
        max_tokens (`int`, *optional*, defaults to 64), batch_size (`int`, *optional*, defaults to 16),
            max_tokens_limit (`int`, *optional*, defaults to 256): See [`Engine`].
    """

    mode = "completion"

    def __init__(self, model: Any, tokenizer: Any, model_name: str, *, max_tokens: int = 64,
                 batch_size: int = 16, max_tokens_limit: int = MAX_TOKENS_LIMIT) -> None:
        from ..signals.decoding import context_length

        self.model = model
        super().__init__(tokenizer, model_name, context_length(model), max_tokens, batch_size, max_tokens_limit)

    def prepare(self, request: ChatCompletionRequest) -> Job:
        from ..settings.prompts import check_chat_template_kwargs

        job = super().prepare(request)
        for name in ("stream", "logprobs"):
            if getattr(request, name):
                raise RequestError(f"`{name}` is for the gate (elical-hf serve MODEL): --mode completion answers "
                                   "whole, without log-probabilities.", param=name, code="unsupported_parameter")
        if request.elical is not None:
            raise RequestError("The `elical` gate options (thresholds) apply to a gate server; this one serves plain "
                               "completions (--mode completion) and would ignore them.", param="elical",
                               code="unsupported_parameter")
        if not getattr(self.tokenizer, "chat_template", None) and (
                len(job.messages) != 1 or job.messages[0]["role"] != "user"):
            raise RequestError("This model has no chat template: send a single user message.", param="messages",
                               code="unsupported_messages")
        try:
            check_chat_template_kwargs(job.chat_template_kwargs)
        except ValueError as error:
            raise RequestError(str(error), param="chat_template_kwargs", code="invalid_chat_template_kwargs") from None
        return job

    def render(self, job: Job) -> str:
        """The conversation in the chat template, with the request's `chat_template_kwargs` (default: thinking off
        for a hybrid reasoning template, [`~elical_hf.settings.prompts.chat_template_kwargs_for`])."""
        from ..settings.prompts import chat_template_kwargs_for

        if not getattr(self.tokenizer, "chat_template", None):
            return job.messages[0]["content"]
        return self.tokenizer.apply_chat_template(job.messages, tokenize=False, add_generation_prompt=True,
                                                  **chat_template_kwargs_for(self.tokenizer, job.chat_template_kwargs))

    def rendered(self, job: Job) -> str | RequestError:
        """[`render`], or the request's own error when its chat template fails on it (the template's
        `raise_exception`, a variable of the wrong type)."""
        try:
            return self.render(job)
        except Exception as error:  # noqa: BLE001 - the template runs on the request's content: its error alone
            return RequestError(f"The chat template failed on this conversation: {error}", param="messages",
                                code="chat_template_error")

    def run_group(self, jobs: list[Job]) -> list[Reply | RequestError]:
        from ..signals.decoding import Decoder, decode_all
        from ..signals.generation import completion_settings, resolve_autocast_dtype

        texts = [self.rendered(job) for job in jobs]
        replies: list[Reply | RequestError | None] = [text if isinstance(text, RequestError) else None
                                                       for text in texts]
        rendered = [i for i, text in enumerate(texts) if isinstance(text, str)]
        prompt_ids: dict[int, list[int]] = dict(zip(rendered, self.prompt_ids([texts[i] for i in rendered])))
        for i in rendered:
            replies[i] = self.check_fits(len(prompt_ids[i]), jobs[i].max_tokens)
        rows = [i for i, reply in enumerate(replies) if reply is None]
        if not rows:
            return replies
        settings = completion_settings(jobs[0].max_tokens, self.batch_size, stop_strings=list(jobs[0].stop),
                                       repetition_penalty=jobs[0].repetition_penalty)
        by_id = {job.id: job for job in jobs}
        decoder = Decoder(self.model, self.tokenizer, settings, resolve_autocast_dtype(self.model, "auto"),
                          greedy_only=True, share_prefix=True, cancelled=lambda key: by_id[key].cancelled.is_set())
        outputs = decode_all(decoder, [jobs[i].id for i in rows], [prompt_ids[i] for i in rows], False, "Completing")
        for i, output in zip(rows, outputs):
            tokens = output["greedy_tokens"]
            replies[i] = self.reply(jobs[i], output["greedy_response"], self.finish_reason(tokens, jobs[i]),
                                    len(prompt_ids[i]), len(tokens))
        return replies
