"""`elical-hf serve`: the gate behind an OpenAI-compatible HTTP server (the optional `serve` extra: fastapi, uvicorn).

- [`~elical_hf.serve.schema`]: the chat-completions request schema, what is refused, the OpenAI error body;
- [`~elical_hf.serve.engine`]: what a batch of requests computes: the gate ([`~elical_hf.serve.completion`]: a plain
  completion, `--mode completion`; [`~elical_hf.serve.confidence`]: `/v1/confidence`'s scores; [`~elical_hf.serve.
  retrieval`]: the retriever, on a bounded set of threads with a timeout);
- [`~elical_hf.serve.stream`]: streamed replies (`stream: true`, the decision first) and `logprobs`;
- [`~elical_hf.serve.batching`]: the micro-batcher (requests of a few milliseconds in one call, on one thread);
- [`~elical_hf.serve.app`]: the FastAPI routes (`create_app`).

Nothing here is imported by `import elical_hf`; `elical_hf.serve.app` needs fastapi (`pip install "elical-hf[serve]"`).
See docs/serve.md.
"""

UNKNOWN_DOMAIN_CHOICES = ("refuse", "fallback")
"""What `elical-hf serve --unknown_domain` may do with a request naming a domain the model has no thresholds for:
refuse it (400 `unknown_domain`), or gate it with the server's thresholds (here, so that the command's options check it
without importing the server)."""
