"""The gate server's retriever (`elical-hf serve --retriever module:function`): loaded by name, called with a timeout,
its failures kept per question so that they fail their own request alone."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .schema import RequestError


__all__ = ["call_with_timeout", "checked_retriever", "load_entry_point"]

logger = logging.getLogger(__name__)


def call_with_timeout(function: Callable[[Any], Any], argument: Any, timeout: float) -> Any:
    """`function(argument)`, or a `TimeoutError` when it has not returned after `timeout` seconds (it then goes on, on
    a daemon thread that cannot hold up the server's exit)."""
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["value"] = function(argument)
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome["error"] = error

    thread = threading.Thread(target=call, name="elical-serve-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


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
    """The retriever of `engine` (a [`~elical_hf.serve.engine.GateEngine`]), called with a timeout (not at all for a
    question whose clients all left, `gone`), with its failures (an exception, a timeout, a context that is not text
    or too long for the model) kept per question in `errors` (answered with a 502 or 504) instead of failing the
    batch."""
    from ..prompts import CONTEXT_QA_PROMPT, check_prompt_texts
    from ..signals.generation import build_prompt_ids

    def retrieve(question: str) -> str | None:
        if gone(question):
            return None
        try:
            context = call_with_timeout(engine.retriever, question, engine.retriever_timeout)
        except TimeoutError:
            logger.warning("The retriever did not answer within %g s on %r.", engine.retriever_timeout, question)
            errors[question] = RequestError(f"The retriever did not answer within {engine.retriever_timeout:g} s.",
                                            code="retriever_timeout", status=504, type="server_error")
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
