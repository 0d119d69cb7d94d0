"""`elical-hf serve`: an OpenAI-compatible server (`POST /v1/chat/completions`, `GET /v1/models`) for the gate.

`--mode gate` (the default) serves a saved confidence model: each request (one question, a single user message) is
scored before generation and answered by the unadapted base model, answered with retrieved context (`--retriever`),
or abstained with `--abstain_message` and `finish_reason: "abstain"`; the confidence, decision and threshold are in
the response's `elical` field and its `x-elical-*` headers. `--mode completion` serves any causal LM (a confidence
model's base) as plain greedy chat completions, e.g. as the LLM judge of `elical-hf judge --judge_endpoint URL`.
Requests arriving within `--batch_wait_ms` of each other are scored and decoded in one batch. Needs the `serve`
extra: pip install "elical-hf[serve]". See docs/serve.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parser import ElicalArgumentParser, check_dtype_option


MODES = ("gate", "completion")


@dataclass
class ServeArguments:
    """Options of `elical-hf serve` (also settable from `--config file.yaml`)."""

    model: str = field(metadata={"positional": True, "help": "A saved confidence model (folder or Hub repo); with "
                                 "--mode completion, any causal LM (Hub id or folder)."})
    mode: str = field(default="gate", metadata={"help": "gate: answer / retrieve / abstain per request; completion: "
                                                "plain greedy chat completions, no gating (an LLM judge)."})
    host: str = field(default="127.0.0.1", metadata={"help": "Address to listen on (0.0.0.0: every interface)."})
    port: int = field(default=8000, metadata={"help": "Port to listen on."})
    served_model_name: str | None = field(
        default=None, metadata={"help": "The model name clients send and /v1/models lists (default: MODEL)."})
    threshold: float | None = field(
        default=None, metadata={"help": "Answer at or above this confidence (default: the model's saved threshold)."})
    retrieve_threshold: float | None = field(
        default=None, metadata={"help": "Retrieve at or above this, below --threshold (default: the saved one)."})
    retriever: str | None = field(
        default=None, metadata={"help": "module:function called with each question in the retrieve band; returns "
                                "context (str) or None (the working directory is importable)."})
    abstain_message: str = field(
        default="I am not confident enough to answer this question.",
        metadata={"help": "The answer of an abstention (finish_reason 'abstain')."})
    max_tokens: int = field(default=64, metadata={"help": "Answer tokens when a request sets no max_tokens."})
    max_batch_size: int = field(default=16, metadata={"help": "Most requests scored and decoded in one batch."})
    batch_wait_ms: float = field(
        default=5.0, metadata={"help": "How long a batch's first request waits for others (milliseconds)."})
    dtype: str = field(default="auto", metadata={"help": "Weights dtype: 'auto' (the precision policy), 'float32', "
                                                 "'bfloat16' or 'float16'."})
    device: str | None = field(default=None, metadata={"help": "Where to run the model ('cuda', 'cpu', ...)."})
    log_level: str = field(default="info", metadata={"help": "uvicorn's log level (warning: no access log)."})

    def __post_init__(self) -> None:
        check_dtype_option(self.dtype)
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {MODES}, got {self.mode!r}.")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must lie in [0, 65535], got {self.port}.")
        for name in ("max_tokens", "max_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}.")
        if self.batch_wait_ms < 0:
            raise ValueError(f"--batch_wait_ms must be >= 0, got {self.batch_wait_ms}.")
        if self.mode == "completion":
            given = [name for name in ("threshold", "retrieve_threshold", "retriever") if getattr(self, name) is not None]
            if given:
                raise ValueError(f"--{given[0]} is a gate option; --mode completion does not gate.")


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ServeArguments, prog="elical-hf serve", description=__doc__)


def build_engine(options: ServeArguments):
    """The engine `options` describe, with its model loaded."""
    from elical_hf.serve.engine import CompletionEngine, GateEngine, load_entry_point

    name = options.served_model_name or options.model
    common = {"max_tokens": options.max_tokens, "batch_size": options.max_batch_size}
    if options.mode == "completion":
        from elical_hf.signals.backends import HFBackend

        backend = HFBackend(_causal_lm_of(options.model), dtype=options.dtype, device=options.device)
        return CompletionEngine(backend.model, backend.tokenizer, name, **common)
    from elical_hf import AutoModelForConfidence
    from elical_hf.auto import find_saved_model

    retriever = load_entry_point(options.retriever) if options.retriever else None  # before the model loads
    if find_saved_model(options.model) is None:
        raise ValueError(f"{options.model} is not a saved confidence model (no confidence_config.json); to serve a "
                         "plain causal LM, pass --mode completion.")
    kwargs = {"dtype": options.dtype, **({"device_map": options.device} if options.device else {})}
    model = AutoModelForConfidence.from_pretrained(options.model, **kwargs)
    return GateEngine(model, name, threshold=options.threshold, retrieve_threshold=options.retrieve_threshold,
                      retriever=retriever, abstain_message=options.abstain_message, **common)


def _causal_lm_of(model: str) -> str:
    """`model` itself, or the base model a saved confidence model names (its answers are the base model's)."""
    import os

    from elical_hf.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig

    path = os.path.join(model, CONFIDENCE_CONFIG_NAME)
    if os.path.isfile(path):
        base = ConfidenceConfig.from_json_file(path).base_model_name_or_path
        if base is None:
            raise ValueError(f"{path} names no base model to serve.")
        return base
    return model


def main(argv: list[str] | None = None) -> int:
    from elical_hf.extras import MissingExtraError, require_extra

    (options,) = make_parser().parse_with_config(argv)
    try:
        _, uvicorn = require_extra("serve", "elical-hf serve")
    except MissingExtraError as error:
        raise ValueError(str(error)) from None
    from elical_hf.serve.app import create_app

    engine = build_engine(options)
    app = create_app(engine, max_batch_size=options.max_batch_size, batch_wait_ms=options.batch_wait_ms)
    gate = f", threshold {engine.threshold:g}" if engine.mode == "gate" else ""
    print(f"elical-hf serve: {engine.model_name} ({engine.mode}{gate}) at http://{options.host}:{options.port}/v1",
          flush=True)
    uvicorn.run(app, host=options.host, port=options.port, log_level=options.log_level)
    return 0
