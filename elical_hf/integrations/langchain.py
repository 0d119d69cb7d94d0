"""The answer/abstain/retrieve gate as a LangChain `Runnable`, in-process (`pip install "elical-hf[langchain]"`).

```python
>>> from langchain_core.output_parsers import StrOutputParser
>>> from elical_hf.integrations.langchain import ConfidenceGate
>>> gate = ConfidenceGate("out/elical", retriever=vector_store.as_retriever(), abstain=big_chat_model)  # doctest: +SKIP
>>> (gate | StrOutputParser()).invoke("Who wrote Hamlet?")  # doctest: +SKIP
'William Shakespeare'
```

Each question is scored before any token is generated ([`~elical_hf.gate.answer_questions`], what `model.answer`
does), then

- **answer**: the unadapted base model's greedy answer;
- **retrieve** (the retrieve band): `retriever` (any LangChain retriever, or a Runnable from the question to documents)
  is called with the question; the documents' `page_content`, joined by blank lines, is the context the question is
  answered with (no documents: no answer, so it is treated as an abstention). It may also return one document or a
  string (the context itself); anything else fails that question ([`context_of`]);
- **abstain**: the question goes to `abstain` when one is given (a larger chat model, a hand-off to a human, any
  Runnable taking the question), else the reply is `abstain_message`.

The output is an `AIMessage` whose `response_metadata` holds `finish_reason` (`"stop"`, `"length"` or `"abstain"`; a
reply routed to `abstain` has that model's, [`finish_reason_of`]) and `elical`: the `confidence`, `decision`,
`threshold`, `retrieve_threshold`, `domain`, `context`, `answered` (by the base model) and `routed` (sent to
`abstain`). `batch` scores and decodes all its questions in one `model.answer` call, and fails
per item: an input that is not a question, a retriever or `abstain` that fails on a question, is that item's error
(`batch(..., return_exceptions=True)` returns it in its place; without, the first one is raised); when the batched call
itself fails, each question is answered on its own, so that only the questions at fault fail. Inputs: a question
string, a dict with a `question` (or `input`) key, one `HumanMessage`, or a prompt value / message list holding a
single human message. A question is gated with the thresholds the model saved for its domain
([`~elical_hf.gate.thresholds_for`], `elical-hf threshold --by dataset`): the gate's `domain=`, or a dict input's own
`domain` key (`None`: the pooled thresholds); an unknown domain is refused (the gate's at construction, an input's as
that item's error).

One model answers one call at a time: `abatch`, `ainvoke` and `astream` run each input on a thread of their own, and
`model.answer` makes the calls on one model (from any number of gates, or any other caller) take turns
([`~elical_hf.gate.one_call_per_model`]).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..settings.configuration import chat_rule_broken
from ..utils.extras import require_extra
from ..utils.loading import unwrap_peft
from ..settings.prompts import ABSTAIN_MESSAGE


require_extra("langchain", "elical_hf.integrations.langchain")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_core.prompt_values import PromptValue  # noqa: E402
from langchain_core.runnables import Runnable, RunnableConfig  # noqa: E402


__all__ = ["ConfidenceGate", "context_of", "domain_of", "finish_reason_of", "question_of"]


def question_of(value: Any, chat_context: str = "question") -> str:
    """The question an input of [`ConfidenceGate`] asks; a `ValueError` saying why for anything else. A message list
    asks its last message, a human one, as the model's `chat_context` says (`"question"`: a system prompt and earlier
    turns are left out, as `elical-hf serve` does; `"refuse"`: a single human message only)."""
    if isinstance(value, dict):
        key = next((k for k in ("question", "input") if k in value), None)
        if key is None:
            raise ValueError(f"A dict input needs a 'question' (or 'input') key, got the keys {sorted(value)}.")
        value = value[key]
    if isinstance(value, PromptValue):
        value = value.to_messages()
    if isinstance(value, BaseMessage):
        value = [value]
    if isinstance(value, (list, tuple)):
        kinds = [type(m).__name__ for m in value]
        broken = chat_rule_broken([isinstance(m, HumanMessage) for m in value], chat_context)
        if broken == "single":
            raise ValueError(f"This model's gate scores one question: give a single human message, got {kinds} (its "
                             "chat_context is 'refuse').")
        if broken == "last":
            raise ValueError(f"The gate scores the question the last message asks: it must be a human message, got "
                             f"{kinds}.")
        value = value[-1].content
        if isinstance(value, list):  # content blocks: text only
            if any(not isinstance(part, str) and not (isinstance(part, dict) and part.get("type") == "text")
                   for part in value):
                raise ValueError("The gate reads text only; the human message has other content blocks.")
            value = "".join(part if isinstance(part, str) else part.get("text", "") for part in value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"The gate needs a non-empty question, got {value!r}.")
    return value.strip()


def domain_of(value: Any, default: str | None = None) -> str | None:
    """The domain of an input of [`ConfidenceGate`]: a dict input's `domain` key when it has one (`None` included: the
    pooled thresholds), else `default` (the gate's `domain=`)."""
    if isinstance(value, dict) and "domain" in value:
        return value["domain"]
    return default


def context_of(documents: Any, question: str) -> str | None:
    """The context a retriever's output gives `question`: a string as it is, the `page_content` of one document, or
    those of a list of documents (or strings) joined by blank lines; `None` for nothing (no documents, blank text). A
    `ValueError` for anything else (not iterated: a string would be read one character at a time)."""
    if documents is None:
        return None
    if isinstance(documents, str) or _is_document(documents):
        documents = [documents]
    if isinstance(documents, (list, tuple)):
        others = sorted({type(d).__name__ for d in documents if not isinstance(d, str) and not _is_document(d)})
        found = f"a {type(documents).__name__} holding {', '.join(others)}" if others else None
    else:
        found = f"a value of type {type(documents).__name__}"
    if found is not None:
        raise ValueError(f"The retriever must return documents, one document or a string; for {question!r} it "
                         f"returned {found}.")
    texts = [d if isinstance(d, str) else d.page_content for d in documents]
    context = "\n\n".join(text for text in texts if text.strip()) or None
    if context is not None:
        from ..settings.prompts import check_prompt_texts

        check_prompt_texts([context], [f"the context the retriever returned for {question!r}"])
    return context


STOP_REASONS = {"stop_reason": {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"},
                "done_reason": {"length": "length", "stop": "stop"}}
"""How chat models that report no OpenAI `finish_reason` say why they stopped (Anthropic's `stop_reason`, Ollama's
`done_reason`), read as OpenAI's."""


def finish_reason_of(metadata: dict[str, Any]) -> str:
    """The `finish_reason` of a chat model's reply (its `response_metadata`): its own, else its [`STOP_REASONS`] read
    as OpenAI's, else `"stop"` (a reply that says nothing ended as replies do)."""
    if metadata.get("finish_reason"):
        return metadata["finish_reason"]
    for key, reasons in STOP_REASONS.items():
        if metadata.get(key) in reasons:
            return reasons[metadata[key]]
    return "stop"


def _is_document(value: Any) -> bool:
    return isinstance(getattr(value, "page_content", None), str)


class ConfidenceGate(Runnable):
    """
    Route each question by its confidence: answer with the base model, retrieve context first, or abstain.

    Args:
        model ([`PeftModelForConfidence`] or `str`): A confidence model, or the folder / Hub repo of a saved one.
        retriever (`Runnable`, *optional*): A LangChain retriever (`str -> list[Document]`; one document or a string
            is taken too) for the retrieve band.
        abstain (`Runnable`, *optional*): Where abstained questions go (called with the question); its output (a
            message or a string) is the reply. Without it the reply is `abstain_message`.
        threshold (`float`, *optional*), retrieve_threshold (`float`, *optional*): The gate's thresholds (defaults:
            the model's saved ones, those of the question's domain).
        domain (`str`, *optional*): The questions' domain: they are gated with the thresholds the model saved for it
            ([`~elical_hf.gate.thresholds_for`]); a dict input's `domain` key overrides it. `None`: the pooled ones.
        abstain_message (`str`, *optional*): The reply of an abstention without `abstain`.
        max_new_tokens (`int`, *optional*, defaults to 64), batch_size (`int`, *optional*, defaults to 16): Of the
            answers.
    """

    def __init__(self, model: Any, *, retriever: Runnable | None = None, abstain: Runnable | None = None,
                 threshold: float | None = None, retrieve_threshold: float | None = None,
                 abstain_message: str = ABSTAIN_MESSAGE, max_new_tokens: int = 64, batch_size: int = 16,
                 domain: str | None = None) -> None:
        from ..gate import check_threshold, check_thresholds, thresholds_for

        if threshold is not None:  # out of [0, 1]: one line now, rather than every question abstained
            check_thresholds(threshold, retrieve_threshold)
        elif retrieve_threshold is not None:
            check_threshold(retrieve_threshold, "retrieve_threshold")
        if isinstance(model, str):
            from ..models.auto import AutoModelForConfidence

            model = AutoModelForConfidence.from_pretrained(model)
        for name, value in (("retriever", retriever), ("abstain", abstain)):
            if value is not None and not isinstance(value, Runnable):
                raise ValueError(f"`{name}` must be a LangChain Runnable, got a {type(value).__name__}.")
        self.model, self.retriever, self.abstain = model, retriever, abstain
        self.inner = unwrap_peft(model)
        thresholds_for(self.inner.confidence_config, domain)  # an unknown domain: one line, before any question
        self.threshold, self.retrieve_threshold, self.domain = threshold, retrieve_threshold, domain
        self.abstain_message, self.max_new_tokens, self.batch_size = abstain_message, max_new_tokens, batch_size

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AIMessage:
        return self.batch([input], config)[0]

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> list[AIMessage]:
        if not inputs:
            return []
        return self._batch_with_config(self._gate, list(inputs), config, return_exceptions=return_exceptions,
                                       run_type="chain")

    def _gate(self, inputs: list[Any], run_manager: list[Any]) -> list[AIMessage | Exception]:
        run_managers = run_manager  # one per input (LangChain passes them under this name)
        replies: list[AIMessage | Exception | None] = [None] * len(inputs)
        questions: dict[int, str] = {}
        domains: dict[int, str | None] = {}
        from ..gate import thresholds_for
        from ..settings.prompts import check_prompt_texts

        for i, value in enumerate(inputs):
            try:
                questions[i] = question_of(value, self.inner.confidence_config.chat_context)
                check_prompt_texts([questions[i]], [f"input {i}" if len(inputs) > 1 else "the question"])
                domains[i] = domain_of(value, self.domain)
                thresholds_for(self.inner.confidence_config, domains[i])
            except ValueError as error:  # that input's error only
                questions.pop(i, None)
                replies[i] = error
        rows = list(questions)
        try:
            self._answer(rows, questions, domains, run_managers, replies)
        except Exception as error:  # noqa: BLE001 - put in the place of the questions at fault only
            if len(rows) == 1:
                replies[rows[0]] = error
            else:  # one question at a time, to find them
                for i in rows:
                    try:
                        self._answer([i], questions, domains, run_managers, replies)
                    except Exception as failure:  # noqa: BLE001 - that question's error, in its place
                        replies[i] = failure
        unanswered = [i for i in rows if isinstance(replies[i], AIMessage)
                      and replies[i].response_metadata["finish_reason"] == "abstain"]
        if self.abstain is not None and unanswered:
            routed = self.abstain.batch([questions[i] for i in unanswered],
                                        [{"callbacks": run_managers[i].get_child()} for i in unanswered],
                                        return_exceptions=True)
            for i, output in zip(unanswered, routed):
                gate = {**replies[i].response_metadata["elical"], "routed": True}
                if isinstance(output, Exception):
                    replies[i] = output
                elif isinstance(output, BaseMessage):
                    replies[i] = AIMessage(output.content, response_metadata={
                        **output.response_metadata, "finish_reason": finish_reason_of(output.response_metadata),
                        "elical": gate})
                else:
                    replies[i] = AIMessage(str(output), response_metadata={"finish_reason": "stop", "elical": gate})
        return replies

    def _answer(self, rows: list[int], questions: dict[int, str], domains: dict[int, str | None],
                run_managers: list[Any], replies: list[AIMessage | Exception | None]) -> None:
        """One `model.answer` call for the questions of `rows`, each gated with its domain's thresholds: their replies
        (an abstention where not answered), or the retriever's error for a question it failed on, into `replies`."""
        from ..gate import thresholds_per_question
        from ..serve.engine import finish_reason

        if not rows:
            return
        failures: dict[str, Exception] = {}
        retrieve = None
        if self.retriever is not None:
            retrieve = self._retrieve({questions[i]: run_managers[i] for i in rows}, failures)
        row_domains = [domains[i] for i in rows]
        results = self.model.answer([questions[i] for i in rows], threshold=self.threshold,
                                    retrieve_threshold=self.retrieve_threshold, retrieve=retrieve,
                                    max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                                    domain=row_domains)
        rules = thresholds_per_question(self.inner.confidence_config, len(rows), row_domains, self.threshold,
                                        self.retrieve_threshold)
        specials = set(self.inner.tokenizer.all_special_tokens)
        for i, result, (threshold, retrieve_threshold) in zip(rows, results, rules):
            if questions[i] in failures:
                replies[i] = failures[questions[i]]
                continue
            gate = {"confidence": result["confidence"], "decision": result["decision"], "threshold": threshold,
                    "retrieve_threshold": retrieve_threshold, "domain": domains[i], "context": result["context"],
                    "answered": result["answer"] is not None, "routed": False}
            if result["answer"] is None:
                replies[i] = AIMessage(self.abstain_message, response_metadata={"finish_reason": "abstain",
                                                                                 "elical": gate})
            else:
                reason = finish_reason(result["answer_tokens"], self.max_new_tokens, specials)
                replies[i] = AIMessage(result["answer"], response_metadata={"finish_reason": reason, "elical": gate})

    def _retrieve(self, managers: dict[str, Any], failures: dict[str, Exception]) -> Callable[[str], str | None]:
        """The `retrieve` callback of `model.answer`: the retriever's context for a question, its failure kept in
        `failures` for that question alone (no context, then)."""

        def retrieve(question: str) -> str | None:
            manager = managers.get(question)
            config = {"callbacks": manager.get_child()} if manager is not None else None
            try:
                return context_of(self.retriever.invoke(question, config=config), question)
            except Exception as error:  # noqa: BLE001 - the user's retriever: that question's error
                failures[question] = error
                return None

        return retrieve
