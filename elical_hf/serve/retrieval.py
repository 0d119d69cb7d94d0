"""The gate server's retriever (`elical-hf serve --retriever module:function`): loaded by name, called on a bounded
set of threads with a timeout ([`RetrieverPool`]), its failures kept per question so that they fail their own request
alone."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

from .schema import RequestError


__all__ = ["MAX_CONCURRENT_RETRIEVALS", "RetrieverPool", "RetrieverTimeout", "checked_retriever", "load_entry_point"]

logger = logging.getLogger(__name__)

MAX_CONCURRENT_RETRIEVALS = 4
"""The most retriever calls at once by default (`elical-hf serve --max_concurrent_retrievals`)."""


class RetrieverTimeout(Exception):
    """A retriever call given up after its timeout (not a `TimeoutError` the retriever raised itself: that is its
    failure); its message says why when it never started."""


class RetrieverPool:
    """
    At most `size` threads that run the retriever's calls, each call waited for at most its timeout.

    Python cannot stop a thread, so a call that does not return in time is given up (its request gets a 504) but keeps
    its thread until it returns. The threads are a fixed set rather than one per call, so hung calls never hold more
    than `size` of them: a call that finds them all busy waits in the queue within its own timeout, and is dropped
    unrun when that passes (its 504 says why). The threads start as they are needed and are daemons: a hung call
    cannot hold up the server's exit.

    Args:
        size (`int`): The most threads, hence the most calls at once.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"--max_concurrent_retrievals must be >= 1, got {size}.")
        self.size, self.threads = size, 0
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.queued = self.free = 0

    def call(self, function: Callable[[Any], Any], argument: Any, timeout: float) -> Any:
        """`function(argument)` on one of the threads, or a [`RetrieverTimeout`] when it has not returned after
        `timeout` seconds (counted from now: a wait for a free thread included)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self.lock:
            self.queued += 1
            if self.queued > self.free and self.threads < self.size:
                self.threads, self.free = self.threads + 1, self.free + 1
                threading.Thread(target=self._work, name=f"elical-retriever-{self.threads}", daemon=True).start()
        self.tasks.put((future, function, argument))
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if not future.cancel():  # it runs, and goes on on its thread
                raise RetrieverTimeout(f"The retriever did not answer within {timeout:g} s.") from None
            raise RetrieverTimeout(f"The retriever did not answer within {timeout:g} s: all {self.size} retriever "
                                   "threads are still busy with calls that did not return "
                                   "(--max_concurrent_retrievals).") from None

    def _work(self) -> None:
        while True:
            future, function, argument = self.tasks.get()
            with self.lock:
                self.queued, self.free = self.queued - 1, self.free - 1
            try:
                if future.set_running_or_notify_cancel():  # not given up while it waited
                    try:
                        future.set_result(function(argument))
                    except BaseException as error:  # noqa: BLE001 - handed to the caller
                        future.set_exception(error)
            finally:
                with self.lock:
                    self.free += 1


def load_entry_point(spec: str) -> Callable[[str], str | None]:
    """The callable `module:function` names (the working directory importable, as uvicorn does); a `ValueError`
    saying what is wrong otherwise."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--retriever must be `module:function`, got {spec!r}.")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--retriever {spec}: cannot import {module_name!r} ({error}).") from None
    target = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValueError(f"--retriever {spec}: {module_name!r} has no {attribute!r}.")
    if not callable(target):
        raise ValueError(f"--retriever {spec} is not callable (a {type(target).__name__}).")
    return target


def checked_retriever(engine: Any, settings: Any, errors: dict[str, RequestError],
                      gone: Callable[[str], bool]) -> Callable[[str], str | None]:
    """The retriever of `engine` (a [`~elical_hf.serve.engine.GateEngine`]), called on its [`RetrieverPool`] with a
    timeout (not at all for a question whose clients all left, `gone`; from several threads at once), with its
    failures (an exception, a timeout, a context that is not text or too long for the model) kept per question in
    `errors` (answered with a 502 or 504) instead of failing the batch."""
    from ..settings.prompts import CONTEXT_QA_PROMPT, check_prompt_texts
    from ..signals.generation import build_prompt_ids

    def retrieve(question: str) -> str | None:
        if gone(question):
            return None
        try:
            context = engine.retriever_pool.call(engine.retriever, question, engine.retriever_timeout)
        except RetrieverTimeout as error:
            logger.warning("On %r: %s", question, error)
            errors[question] = RequestError(str(error), code="retriever_timeout", status=504, type="server_error")
            return None
        except Exception as error:  # noqa: BLE001 - the retriever is the user's code: report it, keep serving
            logger.exception("The retriever failed on %r", question)
            errors[question] = RequestError(f"The retriever failed: {type(error).__name__}: {error}",
                                            code="retriever_failed", status=502, type="server_error")
            return None
        if context is not None and not isinstance(context, str):
            errors[question] = RequestError(f"The retriever returned a {type(context).__name__}, not a string "
                                            "or None.", code="retriever_failed", status=502, type="server_error")
            return None
        if context:
            try:
                check_prompt_texts([context], ["the retrieved context"])
            except ValueError as error:
                errors[question] = RequestError(f"The retriever failed: {error}", code="retriever_failed",
                                                status=502, type="server_error")
                return None
            prompt = CONTEXT_QA_PROMPT.format(context=context, question=question)  # as the gate renders it
            ids = build_prompt_ids(engine.tokenizer, [prompt], dataclasses.replace(settings,
                                                                                 prompt_template="{question}"))
            if engine.check_fits(len(ids[0]), settings.max_new_tokens) is not None:
                errors[question] = RequestError("The retrieved context does not fit the model's context of "
                                                f"{engine.context_length} tokens.", code="context_length_exceeded",
                                                status=502, type="server_error")
                return None
        return context

    return retrieve
