"""The gate in front of engines you already run: the confidence from an engine serving `elical-hf export`'s classifier
(vLLM's pooling runner, `POST /classify`), the answers from any OpenAI-compatible chat endpoint (vLLM, SGLang, TGI,
llama.cpp's server). This server then holds no model weights: the export folder's tokenizer and
`elical_confidence.json` render the confidence prompts and hold the thresholds.

Everything a request gets is the in-process gate's ([`~elical_hf.serve.engine.GateEngine`]): the same checks,
thresholds (per domain, the operator's floor), `elical` field and `x-elical-*` headers, `/v1/confidence` and
`/classify`. The questions of a micro-batch are scored in one `/classify` call; the answered ones are asked of the
generation endpoint side by side (greedy: `temperature` 0, the answer the confidence is about), streamed through after
the decision when the client streams. Either upstream failing, timing out (`--request_timeout`, after
`--max_retries` retries with backoff, as the sampling client does: the same `openai` client), answering for another
model or with what is not a reply is that request's OpenAI-shaped error (502 `upstream_error`), naming which upstream.
The gate itself is stateless: run replicas behind any load balancer.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

from .engine import ABSTAIN_FINISH_REASON, GateEngine, Job
from .schema import Reply, RequestError
from .stream import gate_headers


__all__ = ["RemoteConfidence", "UpstreamGateEngine"]


def _clients(endpoint: str, *, timeout: float, max_retries: int, api_key: str | None) -> tuple[Any, Any]:
    """Two `openai` clients of one engine: at its OpenAI routes (`.../v1`) and at its root (vLLM's `/classify`)."""
    from ..utils.extras import require_extra
    from ..signals.openai_client import base_url

    (openai,) = require_extra("openai", "An upstream engine", ("openai",))
    url = base_url(endpoint)
    root = url[: -len("/v1")] if url.endswith("/v1") else url
    options = {"api_key": api_key or "EMPTY", "timeout": timeout, "max_retries": max_retries}
    return openai.OpenAI(base_url=url, **options), openai.OpenAI(base_url=root, **options)


def _upstream_error(which: str, url: str, error: BaseException | str) -> RequestError:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return RequestError(f"The {which} endpoint {url} failed: {text}", type="upstream_error",
                        code="upstream_error", status=502)


def _served_model(client: Any, named: str | None, which: str) -> str:
    """`named`, or the only model the endpoint lists; a `ValueError` at start-up otherwise."""
    if named is not None:
        return named
    try:
        names = [model.id for model in client.models.list()]
    except Exception as error:  # noqa: BLE001 - an unreachable endpoint at start-up: one line
        raise ValueError(str(_upstream_error(which, str(client.base_url), error).message)) from None
    if len(names) != 1:
        raise ValueError(f"The {which} endpoint {client.base_url} serves {len(names)} models ({', '.join(names)}): "
                         f"name one with --{which}_model.")
    return names[0]


class RemoteConfidence:
    """
    What the gate reads of a confidence model, from an engine serving its export: `confidence(questions)` through
    `POST /classify` on the prompts the export's config renders, and the `confidence_config`, `tokenizer` and
    `config` (its context) the checks use.

    Args:
        export_dir (`str`): A folder `elical-hf export` wrote (`--form merged` or `--form lora`).
        endpoint (`str`): The engine's URL (`http://host:port/v1`). served_model (`str`, *optional*): The name it
            serves the export under (an adapter's name with `--form lora`); default its only model.
        timeout (`float`), max_retries (`int`), api_key (`str`, *optional*): Of each request.
    """

    def __init__(self, export_dir: str, endpoint: str, served_model: str | None = None, *, timeout: float = 600,
                 max_retries: int = 4, api_key: str | None = None) -> None:
        from ..publishing.export import load_export

        self.confidence_config, self.tokenizer, form = load_export(export_dir)
        if form == "base":
            raise ValueError(f"{export_dir} is a base classifier (--form base), no confidence model: pass the export "
                             "of the model (--form merged or lora).")
        self.config = SimpleNamespace(max_position_embeddings=self.confidence_config.max_length)
        models, self.client = _clients(endpoint, timeout=timeout, max_retries=max_retries, api_key=api_key)
        self.url = str(self.client.base_url).rstrip("/") + "/classify"
        self.served_model = _served_model(models, served_model, "confidence")

    def confidence(self, questions: list[str], batch_size: int = 16, **_: Any) -> list[float]:
        """One confidence per question, in order, from one `/classify` call; a `RequestError` (502) naming the
        endpoint for a failure or a reply that is not one probability per question."""
        import httpx

        from ..data.encoding import encode_prompts

        if not questions:
            return []
        ids = encode_prompts(list(questions), self.tokenizer, self.confidence_config)
        try:
            reply = self.client.post("/classify", body={"model": self.served_model, "input": ids},
                                     cast_to=httpx.Response).json()
            rows = sorted(reply["data"], key=lambda row: row["index"])
            scores = [float(row["probs"][0]) for row in rows]
        except Exception as error:  # noqa: BLE001 - a failed call or an unreadable reply: this batch's error
            raise _upstream_error("confidence", self.url, error) from None
        if len(scores) != len(questions) or not all(math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores):
            raise _upstream_error("confidence", self.url, f"its reply holds {len(scores)} scores for {len(questions)} "
                                  "prompts, or one outside [0, 1] (does it serve the export with --runner pooling?)")
        return scores


class UpstreamGateEngine(GateEngine):
    """
    The gate ([`GateEngine`]) with its confidence from [`RemoteConfidence`] and its answers from an OpenAI-compatible
    chat endpoint (see the module docstring).

    Args:
        export_dir (`str`), model_name (`str`): The export folder and the name this server serves.
        confidence_endpoint (`str`), generation_endpoint (`str`): The engines' URLs (`http://host:port/v1`).
        confidence_model (`str`, *optional*), generation_model (`str`, *optional*): Their served names (default:
            each endpoint's only model).
        timeout (`float`, *optional*, defaults to 600), max_retries (`int`, *optional*, defaults to 4), api_key
            (`str`, *optional*): Of every upstream request.
        gate_options: [`GateEngine`]'s (thresholds, domains, limits); no `retriever` yet.
    """

    def __init__(self, export_dir: str, model_name: str, *, confidence_endpoint: str, generation_endpoint: str,
                 confidence_model: str | None = None, generation_model: str | None = None, timeout: float = 600,
                 max_retries: int = 4, api_key: str | None = None, **gate_options: Any) -> None:
        scorer = RemoteConfidence(export_dir, confidence_endpoint, confidence_model, timeout=timeout,
                                  max_retries=max_retries, api_key=api_key)
        if not scorer.confidence_config.use_chat_template:
            raise ValueError(f"{export_dir} was trained without a chat template: its answers need plain completions, "
                             "which the gate on engines does not send yet; serve it in-process.")
        if gate_options.get("retriever") is not None:
            raise ValueError("--retriever is not supported with --generation_endpoint yet: the retrieve band's "
                             "questions abstain.")
        scorer = RemoteConfidence(export_dir, confidence_endpoint, confidence_model, timeout=timeout,
                                  max_retries=max_retries, api_key=api_key)
        super().__init__(scorer, model_name, **gate_options)
        self.generator, _ = _clients(generation_endpoint, timeout=timeout, max_retries=max_retries, api_key=api_key)
        self.generation_url = str(self.generator.base_url).rstrip("/") + "/chat/completions"
        self.generation_model = _served_model(self.generator, generation_model, "generation")

    def prepare(self, request: Any) -> Job:
        if request.logprobs:
            raise RequestError("`logprobs` is not supported through --generation_endpoint yet.", param="logprobs",
                               code="unsupported_parameter")
        return super().prepare(request)

    def run_group(self, jobs: list[Any]) -> list[Reply | RequestError]:
        if not isinstance(jobs[0], Job):  # /v1/confidence and /classify: scores only
            from .confidence import score_jobs

            return score_jobs(self, jobs)
        questions = [job.messages[0]["content"].strip() for job in jobs]
        replies: list[Any] = self.confidence_prompt_error(questions, lambda i: "messages")
        rows = [i for i, reply in enumerate(replies) if reply is None and not jobs[i].cancelled.is_set()]
        try:
            scores = self.inner.confidence([questions[i] for i in rows])
        except RequestError as error:
            return [reply or error for reply in replies]
        with ThreadPoolExecutor(max_workers=max(1, len(rows))) as pool:
            answered = pool.map(lambda item: self._answer(jobs[item[0]], item[1], len(jobs)), zip(rows, scores))
            for i, reply in zip(rows, answered):
                replies[i] = reply
        return [reply or RequestError("The client left.", status=499) for reply in replies]

    def _answer(self, job: Job, confidence: float, batch_size: int) -> Reply | RequestError:
        """One request after its score: its decision (told to a streaming client at once), then the generation
        endpoint's answer streamed through, or the abstention."""
        from ..gate import decide

        decision = decide(confidence, job.threshold, job.retrieve_threshold)
        gate = self._gate(job, {"confidence": confidence, "decision": decision, "context": None}, batch_size)
        if job.listener is not None:
            job.listener(("decision", gate, None if gate["answered"] else self.abstain_message, 0))
        if not gate["answered"]:  # abstain, or the retrieve band without a retriever
            reply = self.reply(job, self.abstain_message, ABSTAIN_FINISH_REASON, 0, 0, elical=gate)
        else:
            try:
                text, finish, usage = self._generate(job)
            except RequestError as error:
                return error
            reply = self.reply(job, text, finish, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
                               elical=gate)
        reply.headers = gate_headers(gate)
        return reply

    def _generate(self, job: Job) -> tuple[str, str, dict[str, int]]:
        """The generation endpoint's greedy answer to `job`'s question asked as the confidence read it (the saved
        prompt template, system prompt and chat-template arguments: the answer the confidence is about), streamed
        (each piece told to a streaming client); its finish reason and usage; a `RequestError` (502) naming the
        endpoint otherwise."""
        text, finish, usage, position = "", "stop", {}, 0
        messages = self.config.prompt_messages(job.messages[0]["content"])
        kwargs = self.config.chat_template_kwargs
        extra = {"chat_template_kwargs": kwargs} if kwargs else None
        try:
            stream = self.generator.chat.completions.create(
                model=self.generation_model, messages=messages, max_tokens=job.max_tokens, temperature=0,
                stop=list(job.stop) or None, stream=True, stream_options={"include_usage": True}, extra_body=extra)
            for chunk in stream:
                if job.cancelled.is_set():
                    stream.close()
                    break
                if chunk.model and chunk.model != self.generation_model:
                    raise ValueError(f"it answered for {chunk.model!r}, not {self.generation_model!r}")
                if chunk.usage is not None:
                    usage = {"prompt_tokens": chunk.usage.prompt_tokens,
                             "completion_tokens": chunk.usage.completion_tokens}
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
                if job.listener is not None and text.strip():
                    job.listener(("token", position, text.strip(), None))
                    position += 1
        except Exception as error:  # noqa: BLE001 - a failed call, another model, a reply that is not one
            raise _upstream_error("generation", self.generation_url, error) from None
        return text.strip(), finish, usage
