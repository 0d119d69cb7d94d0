"""`elical-hf serve`: an OpenAI-compatible server (`POST /v1/chat/completions`, `POST /v1/confidence`, `GET /v1/models`)
for the gate.

`--mode gate` (the default) serves a saved confidence model: each request (one question: its last message, the user's;
a system prompt and earlier turns are left out, as the model's `chat_context` says, and counted in the reply) is
scored before generation and answered by the unadapted base model, answered with retrieved context (`--retriever`),
or abstained with `--abstain_message` and `finish_reason: "abstain"`; the confidence, decision and threshold are in
the response's `elical` field and its `x-elical-*` headers. `--mode completion` serves any causal LM (a confidence
model's base) as plain greedy chat completions, e.g. as the LLM judge of `elical-hf judge --judge_endpoint URL`.
Requests arriving within `--batch_wait_ms` of each other are scored and decoded in one batch. A request may ask for
at most `--max_tokens_limit` tokens and send at most `--max_request_bytes`; a retriever call may take at most
`--retriever_timeout` seconds, at most `--max_concurrent_retrievals` at once; only the `Host` names of this machine
(and `--allowed_hosts`) are answered. `--threshold` is a floor for every domain a request names (unless
`--allow_lower_domain_thresholds`), and `--unknown_domain` says what becomes of a domain the model does not name.
Needs the `serve` extra: pip install "elical-hf[serve]". `stream: true` streams the answer after the decision,
`logprobs: true` returns its tokens' log-probabilities, and `POST /v1/confidence` scores up to `--max_questions`
questions (of at most `--max_confidence_tokens` prompt tokens, scored `--confidence_slice_tokens` at a time between the
other requests) without answering them (a router's signal). With `--confidence_endpoint` and `--generation_endpoint`,
MODEL is the folder `elical-hf export` wrote and the gate runs on engines you already run (vLLM's pooling runner
serving the export for the confidence, any OpenAI-compatible chat endpoint for the answers), loading no weights.
See docs/serve.md.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from elical_hf.steps.arguments import ModelArguments, only
from elical_hf.settings.prompts import ABSTAIN_MESSAGE
from elical_hf.serve import UNKNOWN_DOMAIN_CHOICES

from .parser import ElicalArgumentParser


MODES = ("gate", "completion")


@dataclass(kw_only=True)
class ServeArguments(only(ModelArguments, "dtype")):
    """Options of `elical-hf serve` (also settable from `--config file.yaml`)."""

    model: str = field(metadata={"positional": True, "help": "A saved confidence model (folder or Hub repo); with "
                                 "--mode completion, any causal LM (Hub id or folder)."})
    mode: str = field(default="gate", metadata={"help": "gate: answer / retrieve / abstain per request; completion: "
                                                "plain greedy chat completions, no gating (an LLM judge)."})
    host: str = field(default="127.0.0.1", metadata={"help": "Address to listen on (0.0.0.0: every interface)."})
    port: int = field(default=8000, metadata={"help": "Port to listen on."})
    served_model_name: str | None = field(
        default=None, metadata={"help": "The model name clients send and /v1/models lists (default: MODEL's Hub id, "
                                "or a local folder's own name; never its path)."})
    allowed_hosts: list[str] = field(
        default_factory=list, metadata={"help": "Host names clients may reach the server by, besides localhost, "
                                        "127.0.0.1, [::1] and --host ('*': any; '*.example.com': its subdomains); "
                                        "other Host headers get a 400 (DNS rebinding)."})
    threshold: float | None = field(
        default=None, metadata={"help": "Answer at or above this confidence (default: the model's saved threshold)."})
    retrieve_threshold: float | None = field(
        default=None, metadata={"help": "Retrieve at or above this, below --threshold (default: the saved one)."})
    retriever: str | None = field(
        default=None, metadata={"help": "module:function called with each question in the retrieve band; returns "
                                "context (str) or None (the working directory is importable). Command line only: a --config "
                                "file may not name code to run.",
                                "command_line_only": True})
    abstain_message: str = field(
        default=ABSTAIN_MESSAGE,
        metadata={"help": "The answer of an abstention (finish_reason 'abstain')."})
    allow_request_thresholds: bool = field(
        default=False, metadata={"help": "Let a request set any thresholds ('elical': {'threshold': ...}); by "
                                 "default a request may only raise them."})
    allow_lower_domain_thresholds: bool = field(
        default=False, metadata={"help": "Let the thresholds the model saved for a domain ('elical': {'domain': "
                                 "...}) lie below --threshold / --retrieve_threshold; by default those are a floor "
                                 "for every domain."})
    unknown_domain: str = field(
        default="refuse", metadata={"help": "A request naming a domain the model has no thresholds for: refuse it "
                                    "(400 unknown_domain), or fallback (gate it with the server's thresholds)."})
    retriever_timeout: float = field(
        default=10.0, metadata={"help": "Seconds a --retriever call may take; its request then gets a 504 (the "
                                "model waits meanwhile)."})
    max_concurrent_retrievals: int = field(
        default=4, metadata={"help": "The most --retriever calls at once (a batch's questions in the retrieve band "
                             "are retrieved for side by side, so the retriever must be thread-safe; 1: one after "
                             "another); also the most threads calls past --retriever_timeout can hold."})
    max_tokens: int = field(default=64, metadata={"help": "Answer tokens when a request sets no max_tokens."})
    max_tokens_limit: int = field(
        default=256, metadata={"help": "The most answer tokens a request may ask for (more is refused with a 400): "
                               "a batch decodes until its longest answer ends, and later requests wait for it."})
    max_request_bytes: int = field(
        default=1 << 20, metadata={"help": "The largest request body, in bytes (a larger one gets a 413 before it is "
                                   "read)."})
    max_questions: int = field(
        default=256, metadata={"help": "The most questions one POST /v1/confidence request may send (more is refused "
                               "with a 400)."})
    max_confidence_tokens: int = field(
        default=32768, metadata={"help": "The most prompt tokens the distinct questions of one POST /v1/confidence "
                                 "request may hold (more is refused with a 400)."})
    confidence_slice_tokens: int = field(
        default=4096, metadata={"help": "The most prompt tokens of /v1/confidence questions scored in one go (at "
                                "least one question): a larger request is scored in slices, other requests in "
                                "between."})
    max_batch_size: int = field(default=16, metadata={"help": "Most requests scored and decoded in one batch."})
    batch_wait_ms: float = field(
        default=5.0, metadata={"help": "How long a batch's first request waits for others (milliseconds)."})
    confidence_endpoint: str | None = field(
        default=None, metadata={"help": "The gate on engines: an engine serving MODEL, the folder `elical-hf export` "
                                "wrote (vllm serve OUT --runner pooling), at http://host:port/v1, scores the "
                                "questions; with --generation_endpoint. This server then loads no weights."})
    confidence_model: str | None = field(
        default=None, metadata={"help": "The name the confidence engine serves the export under (an adapter's name "
                                "with --form lora; default: its only model)."})
    generation_endpoint: str | None = field(
        default=None, metadata={"help": "Any OpenAI-compatible chat endpoint (vLLM, SGLang, TGI, llama.cpp's server) "
                                "serving MODEL's base model: it answers the questions the gate lets through."})
    generation_model: str | None = field(
        default=None, metadata={"help": "The name the generation endpoint serves the base model under (default: its "
                                "only model)."})
    upstream_timeout: float = field(default=600, metadata={"help": "Seconds per request to either endpoint."})
    upstream_max_retries: int = field(
        default=4, metadata={"help": "Retries of a failed request to either endpoint (429, 5xx, timeouts, dropped "
                             "connections), with exponential backoff."})
    upstream_api_key_env: str | None = field(
        default=None, metadata={"help": "The environment variable holding the endpoints' bearer token (none is sent "
                                "without it)."})
    device: str | None = field(default=None, metadata={"help": "Where to run the model ('cuda', 'cpu', ...)."})
    log_level: str = field(default="info", metadata={"help": "uvicorn's log level (warning: no access log)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {MODES}, got {self.mode!r}.")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must lie in [0, 65535], got {self.port}.")
        for name in ("max_tokens", "max_batch_size", "max_tokens_limit", "max_request_bytes", "max_questions",
                     "max_confidence_tokens", "confidence_slice_tokens", "max_concurrent_retrievals"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}.")
        if self.max_tokens > self.max_tokens_limit:
            raise ValueError(f"--max_tokens ({self.max_tokens}) must not exceed --max_tokens_limit "
                             f"({self.max_tokens_limit}).")
        if self.batch_wait_ms < 0:
            raise ValueError(f"--batch_wait_ms must be >= 0, got {self.batch_wait_ms}.")
        if not self.retriever_timeout > 0:
            raise ValueError(f"--retriever_timeout must be > 0 seconds, got {self.retriever_timeout}.")
        if self.unknown_domain not in UNKNOWN_DOMAIN_CHOICES:
            raise ValueError(f"--unknown_domain must be one of {UNKNOWN_DOMAIN_CHOICES}, got {self.unknown_domain!r}.")
        upstream = [name for name in ("confidence_endpoint", "generation_endpoint") if getattr(self, name)]
        if len(upstream) == 1:
            missing = ({"confidence_endpoint", "generation_endpoint"} - set(upstream)).pop()
            raise ValueError(f"--{upstream[0]} needs --{missing}: the gate on engines takes both (the confidence and "
                             "the answers).")
        if upstream and self.mode == "completion":
            raise ValueError("--confidence_endpoint / --generation_endpoint are for --mode gate.")
        if self.mode == "completion":
            given = [name for name in ("threshold", "retrieve_threshold", "retriever") if getattr(self, name) is not None]
            given += [name for name in ("allow_request_thresholds", "allow_lower_domain_thresholds")
                      if getattr(self, name)]
            if given:
                raise ValueError(f"--{given[0]} is a gate option; --mode completion does not gate.")


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ServeArguments, prog="elical-hf serve", description=__doc__)


def build_engine(options: ServeArguments):
    """The engine `options` describe, with its model loaded."""
    from elical_hf.serve.completion import CompletionEngine
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.retrieval import load_entry_point

    from elical_hf.settings.prompts import check_prompt_texts

    name = options.served_model_name or default_served_name(options.model)
    # every reply carries them: one that is not text (bytes that were not UTF-8 on the command line) would fail them all
    check_prompt_texts([name, options.abstain_message], ["the served model name", "--abstain_message"])
    common = {"max_tokens": options.max_tokens, "batch_size": options.max_batch_size,
              "max_tokens_limit": options.max_tokens_limit}
    if options.mode == "completion":
        from elical_hf.signals.backends import HFBackend

        backend = HFBackend(_causal_lm_of(options.model), dtype=options.dtype, device=options.device)
        return CompletionEngine(backend.model, backend.tokenizer, name, **common)
    from elical_hf import AutoModelForConfidence
    from elical_hf.models.saved_model import find_saved_model

    retriever = load_entry_point(options.retriever) if options.retriever else None  # before the model loads
    gate = {"threshold": options.threshold, "retrieve_threshold": options.retrieve_threshold, "retriever": retriever,
            "abstain_message": options.abstain_message, "retriever_timeout": options.retriever_timeout,
            "max_concurrent_retrievals": options.max_concurrent_retrievals,
            "allow_request_thresholds": options.allow_request_thresholds,
            "allow_lower_domain_thresholds": options.allow_lower_domain_thresholds,
            "unknown_domain": options.unknown_domain, "max_questions": options.max_questions,
            "max_confidence_tokens": options.max_confidence_tokens,
            "confidence_slice_tokens": options.confidence_slice_tokens, **common}
    if options.confidence_endpoint:
        from elical_hf.serve.confidence import saved_model_revision
        from elical_hf.serve.upstream import UpstreamGateEngine
        from elical_hf.signals.openai_client import api_key_from

        engine = UpstreamGateEngine(
            options.model, name, confidence_endpoint=options.confidence_endpoint,
            generation_endpoint=options.generation_endpoint, confidence_model=options.confidence_model,
            generation_model=options.generation_model, timeout=options.upstream_timeout,
            max_retries=options.upstream_max_retries,
            api_key=api_key_from(api_key_env=options.upstream_api_key_env, option="--upstream_api_key_env"), **gate)
        base = engine.config.base_model_name_or_path
        engine.model_info = {"base_model": default_served_name(base) if base else None,
                             **saved_model_revision(options.model)}
        return engine
    folder = find_saved_model(options.model)
    if folder is None:
        raise ValueError(f"{options.model} is not a saved confidence model (no confidence_config.json); to serve a "
                         "plain causal LM, pass --mode completion.")
    kwargs = {"dtype": options.dtype, **({"device_map": options.device} if options.device else {})}
    model = AutoModelForConfidence.from_pretrained(options.model, **kwargs)
    return GateEngine(model, name, model_info=model_info(model, folder), **gate)


def model_info(model, folder: str) -> dict:
    """What `/v1/models` and `/v1/confidence` say about the served confidence model: its base model (named as a
    served model is, never by its path) and its revision ([`~elical_hf.serve.confidence.saved_model_revision`])."""
    from elical_hf.utils.loading import unwrap_peft
    from elical_hf.serve.confidence import saved_model_revision

    base = unwrap_peft(model).confidence_config.base_model_name_or_path
    return {"base_model": default_served_name(base) if base else None, **saved_model_revision(folder)}


def default_served_name(model: str) -> str:
    """The name `model` is served under without --served_model_name: a Hub id as it is; a local folder by the Hub id
    it is a copy of (a Hub cache snapshot), else by its own name: never its path, which would tell every client
    where the model lies on this machine."""
    from elical_hf.models.hub_ids import hub_id_of_local_copy

    if not os.path.isdir(model):
        return model
    copy = hub_id_of_local_copy(model)
    return copy[0] if copy is not None else os.path.basename(os.path.abspath(model))


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` as uvicorn binds one (`SO_REUSEADDR`), for uvicorn to listen on: taken before
    the model loads, so that a busy port is one error line (a `ValueError`) rather than uvicorn's, minutes later."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ValueError(f"Cannot listen on {host}:{port}: {error} (another server on that port? choose another with "
                         "--port).") from None
    return sock


def _causal_lm_of(model: str) -> str:
    """`model` itself, or the base model a saved confidence model names (its answers are the base model's)."""
    import os

    from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig

    path = os.path.join(model, CONFIDENCE_CONFIG_NAME)
    if os.path.isfile(path):
        base = ConfidenceConfig.from_json_file(path).base_model_name_or_path
        if base is None:
            raise ValueError(f"{path} names no base model to serve.")
        return base
    return model


def main(argv: list[str] | None = None) -> int:
    from elical_hf.utils.extras import MissingExtraError, require_extra

    (options,) = make_parser().parse_with_config(argv)
    try:
        _, uvicorn = require_extra("serve", "elical-hf serve")
    except MissingExtraError as error:
        raise ValueError(str(error)) from None
    from elical_hf.serve.app import create_app, host_names

    hosts = host_names(options.host, options.allowed_hosts)
    with listen_socket(options.host, options.port) as sock:
        engine = build_engine(options)
        app = create_app(engine, max_batch_size=options.max_batch_size, batch_wait_ms=options.batch_wait_ms,
                         allowed_hosts=hosts, max_request_bytes=options.max_request_bytes)
        gate = f", threshold {engine.threshold:g}" if engine.mode == "gate" else ""
        port = sock.getsockname()[1]
        print(f"elical-hf serve: {engine.model_name} ({engine.mode}{gate}) at http://{options.host}:{port}/v1, "
              f"answering Host {', '.join(hosts)}", flush=True)
        if options.host in ("0.0.0.0", "::") and not options.allowed_hosts:
            print(f"elical-hf serve: listening on every interface, but only requests to {', '.join(hosts)} are "
                  "answered: name the others with --allowed_hosts.", flush=True)
        uvicorn.Server(uvicorn.Config(app, log_level=options.log_level)).run(sockets=[sock])
    return 0
