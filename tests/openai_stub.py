"""A small OpenAI-compatible server for tests: `/v1/models`, `/v1/completions` and `/v1/chat/completions` answered
by a real (tiny) causal LM through the library's own decoder, with faults on demand.

It answers as an engine such as vLLM does: the prompt text is tokenized as sent (`add_special_tokens=True`; a list
of token ids is taken as is), the greedy reply (`temperature=0`) with its tokens' log-probabilities (`logprobs`),
`n` samples drawn from the request's `seed` (the same seed, the same samples), `stop` strings cut, `top_logprobs` of
the first chat reply token. [`StubServer.faults`] makes the next requests fail: an HTTP status (`503`, `429`, ...),
`"garbage"` (a 200 whose body is not JSON), `"empty"` (a 200 without choices), `"slow"` (longer than the client's
timeout), `"drop"` (the connection closed without a reply) or a function, which gets the reply and returns the one
sent instead. [`StubServer.listing`], when set, is the `GET /models` list served instead of the served names. Every
request body is kept in `requests`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from elical_hf.signals.backends import HFBackend
from elical_hf.signals.generation import SamplingSettings, generate_answers


class StubServer:
    """Serve `model` (a folder) as `served_name` on 127.0.0.1 (a free port) until [`stop`]; a context manager."""

    def __init__(self, model: str, served_name: str = "stub-model", *, extra_models: tuple[str, ...] = (),
                 slow_seconds: float = 3.0, honour_seed: bool = True) -> None:
        self.backend = HFBackend(model, dtype=torch.float32)
        self.served_name, self.extra_models = served_name, extra_models
        self.slow_seconds, self.honour_seed = slow_seconds, honour_seed
        self.faults: list[Any] = []
        self.listing: list[dict[str, Any]] | None = None
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.calls = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    names = [stub.served_name, *stub.extra_models]
                    listing = stub.listing if stub.listing is not None else [
                        {"id": name, "object": "model", "root": model, "max_model_len": 2048} for name in names]
                    self._send(200, {"object": "list", "data": listing})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with stub.lock:
                    stub.requests.append(body)
                    fault = stub.faults.pop(0) if stub.faults else None
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault == "slow":
                    time.sleep(stub.slow_seconds)
                if isinstance(fault, int):
                    self._send(fault, {"error": {"message": f"injected {fault}"}})
                    return
                if fault == "garbage":
                    data = b"<html>502 bad gateway</html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if body.get("model") != stub.served_name:
                    self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
                    return
                reply = stub.answer(body, chat=self.path.rstrip("/").endswith("/chat/completions"))
                if fault == "empty":
                    reply["choices"] = []
                if callable(fault):
                    reply = fault(reply)
                self._send(200, reply)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # a client that stopped reading (a reply too long)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> StubServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, body: dict[str, Any], chat: bool) -> dict[str, Any]:
        """The reply to a (chat) completions request, from the model."""
        tokenizer = self.backend.tokenizer
        if chat:
            prompt = tokenizer.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
        else:
            prompt = body["prompt"]
        text = prompt if isinstance(prompt, str) else tokenizer.decode(prompt)
        stop = body.get("stop") or []
        n, temperature = int(body.get("n") or 1), float(body.get("temperature", 1.0))
        seed = body.get("seed") if self.honour_seed else None
        if temperature == 0:  # the greedy row decodes beside one sample row, which is dropped: a fixed seed keeps the
            seed = 0  # batch it decodes in, and so its floats (its log-probabilities), the same on every request
        settings = SamplingSettings(
            num_samples=n, temperature=temperature if temperature > 0 else 1.0, top_p=float(body.get("top_p", 1.0)),
            top_k=int(body.get("top_k", 0)), repetition_penalty=float(body.get("repetition_penalty", 1.0)),
            greedy_repetition_penalty=float(body.get("repetition_penalty", 1.0)),
            max_new_tokens=int(body.get("max_tokens") or 16), prompt_template="{question}", use_chat_template=False,
            stop_strings=[stop] if isinstance(stop, str) else list(stop),
            seed=int(seed) if seed is not None else int(time.time_ns() % 2**31))
        with self.lock:
            self.calls += 1
            (answer,) = generate_answers(self.backend.model, tokenizer, [text], settings, progress=False)
        if temperature == 0:
            texts = [answer["greedy_response"]]
        else:
            texts = answer["sampling_response"][:n]
        choices = []
        for index, reply in enumerate(texts):
            choice: dict[str, Any] = {"index": index, "finish_reason": "stop"}
            if chat:
                choice["message"] = {"role": "assistant", "content": reply}
                if body.get("logprobs"):
                    top = self._first_token_top(text, int(body.get("top_logprobs") or 1))
                    first = max(top, key=top.get)
                    choice["logprobs"] = {"content": [{"token": first, "logprob": top[first], "top_logprobs": [
                        {"token": token, "logprob": value} for token, value in top.items()]}]}
            else:
                choice["text"] = reply
                if body.get("logprobs") is not None and temperature == 0:
                    choice["logprobs"] = {"tokens": answer["greedy_tokens"],
                                          "token_logprobs": answer["greedy_logprobs"], "text_offset": None,
                                          "top_logprobs": None}
            choices.append(choice)
        return {"id": f"stub-{self.calls}", "object": "chat.completion" if chat else "text_completion",
                "created": 0, "model": self.served_name, "choices": choices,
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def _first_token_top(self, text: str, count: int) -> dict[str, float]:
        tokenizer, model = self.backend.tokenizer, self.backend.model
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), dim=-1)
        values, tokens = logprobs.topk(count)
        found: dict[str, float] = {}
        for token, value in zip(tokenizer.batch_decode([[t] for t in tokens.tolist()]), values.tolist()):
            found.setdefault(token, value)
        return found
