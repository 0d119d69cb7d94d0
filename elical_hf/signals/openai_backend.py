"""Sampling through any OpenAI-compatible server (`vllm serve`, SGLang, TGI, llama.cpp, a hosted API).

At HonestyBench scale (560k questions x 21 answers) people already run a serving engine that spreads one model over
GPUs and machines; [`OpenAIBackend`] drives it instead of loading the model here. It is a generation backend like
[`~elical_hf.signals.HFBackend`] (the same `generate` / `complete`, the same record schema, the same resumable
shards of [`~elical_hf.signals.sample_records`]):

- **the same prompts**: each question is rendered here by the model's own chat template
  ([`~elical_hf.signals.generation.build_prompt_ids`], with the tokenizer of `model`), and sent to
  `POST /v1/completions` as that text, so the server sees exactly what the Hugging Face sampler feeds the model (as
  token ids instead where the tokenizer would add special tokens to the text: `add_special_tokens` differs);
- **greedy answer**: `temperature=0`, `logprobs=1` (the chosen tokens' log-probabilities: Prob and N-Prob work on
  these records), the settings' `greedy_repetition_penalty`;
- **k samples**: one request with `n=k`, the settings' temperature and top-p, a per-question `seed` (from the
  settings' seed and the question text, as the other backends), and vLLM's sampling fields `top_k` and
  `repetition_penalty` in the request body (`extra_body`; sent only when they do something: vLLM honours both,
  OpenAI's own API refuses unknown fields; docs/scaling.md says what was checked);
- records name the **served model** (`model`), so `train` and `evaluate` refuse a confidence model built on another
  base.

Reproducibility: a server that honours `seed` per request (vLLM with its default V1 engine; see docs/scaling.md for
what was measured) gives the same samples on a rerun, so an interrupted `elical-hf sample --backend openai` finished
by a rerun gives the records of an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

from ..default_model import DEFAULT_MODEL, resolve_model_path
from .decoding import cut_at_stop, sample_seed
from .generation import SamplingSettings, build_prompt_ids, completion_settings
from .openai_client import BadReply, OpenAIClient


__all__ = ["OpenAIBackend", "served_model_of"]


def served_model_of(client: OpenAIClient, served_model: str | None) -> dict[str, Any]:
    """The `GET /models` entry of `served_model`, or of the server's only model when it is `None`: a `ValueError`
    when the server does not serve that name, or serves several models and none was named."""
    entries = client.models()
    names = [str(entry.get("id")) for entry in entries]
    if served_model is None:
        if len(entries) != 1:
            raise ValueError(f"The endpoint {client.url} serves {len(entries)} models ({', '.join(names) or 'none'}): "
                             "name one with --served_model.")
        return entries[0]
    for entry in entries:
        if str(entry.get("id")) == served_model:
            return entry
    raise ValueError(f"The endpoint {client.url} does not serve {served_model!r}; it serves: {', '.join(names)}.")


class OpenAIBackend:
    """
    Generation through an OpenAI-compatible server's `/v1/completions`, with prompts rendered here.

    Args:
        endpoint (`str`): The server's base URL (`http://host:port/v1`).
        model (`str`, *optional*, defaults to the embedded default): Hub id or folder whose tokenizer and chat
            template render the prompts: the model the server serves (its tokenizer only is loaded).
        served_model (`str`, *optional*): The model name the server knows (`vllm serve --served-model-name`);
            default: the server's only model. Records and manifests name it.
        revision (`str`, *optional*): Hub revision of `model`'s tokenizer.
        max_concurrency (`int`, *optional*, defaults to 32): Requests in flight at once.
        timeout (`float`, *optional*, defaults to 600): Seconds per request.
        max_retries (`int`, *optional*, defaults to 4): Retries of a failed request (429, 5xx, timeouts, bad replies).
        api_key (`str`, *optional*): Bearer token; default `OPENAI_API_KEY`.
        client ([`~elical_hf.signals.openai_client.OpenAIClient`], *optional*): A client already made (then the
            connection options above are its own).
    """

    kind = "openai"

    def __init__(self, endpoint: str, model: str = DEFAULT_MODEL, *, served_model: str | None = None,
                 revision: str | None = None, max_concurrency: int = 32, timeout: float = 600, max_retries: int = 4,
                 api_key: str | None = None, client: OpenAIClient | None = None) -> None:
        from transformers import AutoTokenizer

        self.client = client or OpenAIClient(endpoint, api_key=api_key, max_concurrency=max_concurrency,
                                             timeout=timeout, max_retries=max_retries)
        entry = served_model_of(self.client, served_model)
        self.name = str(entry["id"])
        self.served_root = entry.get("root")
        # Not the URL: the same served model behind another address (a restarted server) resumes the same run.
        self.weights_source = f"served: {self.served_root}" if self.served_root else "served"
        self._max_model_len = entry.get("max_model_len")
        path, _ = resolve_model_path(model, revision)
        self.tokenizer_source = model
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)

    def __repr__(self) -> str:
        return f"OpenAIBackend(name={self.name!r}, endpoint={self.client.url!r})"

    @property
    def context_length(self) -> int | None:
        """The server's context in tokens (vLLM's `max_model_len` in `GET /models`), when it says."""
        return self._max_model_len if isinstance(self._max_model_len, int) else None

    def _prompts(self, texts: list[str], settings: SamplingSettings) -> list[str | list[int]]:
        """What `/v1/completions` is sent: the rendered prompt text, or its token ids where the server's default
        tokenization (special tokens added) would not give the ids the Hugging Face sampler decodes from."""
        from ..prompts import render_prompt

        ids = build_prompt_ids(self.tokenizer, texts, settings)
        rendered = [render_prompt(self.tokenizer, settings.prompt_template.format(question=t),
                                  use_chat_template=settings.use_chat_template, system_prompt=settings.system_prompt,
                                  chat_template_kwargs=settings.chat_template_kwargs) for t in texts]
        with_specials = self.tokenizer(rendered, add_special_tokens=True)["input_ids"]
        return [text if list(again) == list(exact) else list(exact)
                for text, exact, again in zip(rendered, ids, with_specials)]

    def generate(self, questions: list[str], settings: SamplingSettings, progress: bool = True) -> list[dict]:
        """Greedy answer (with token log-probabilities) and k samples per question, in the record schema of
        [`~elical_hf.signals.generate_answers`]; two requests per question, all at once up to `max_concurrency`."""
        questions = list(questions)
        if not questions:
            return []
        prompts = self._prompts(questions, settings)
        stop = list(settings.stop_strings) or None
        greedy_extra = _extra(repetition_penalty=settings.greedy_repetition_penalty)
        sample_extra = _extra(top_k=settings.top_k, repetition_penalty=settings.repetition_penalty)
        k = settings.num_samples

        async def ask(client: Any, job: tuple[int, bool]) -> Any:
            index, greedy = job
            common = dict(model=self.name, prompt=prompts[index], max_tokens=settings.max_new_tokens, stop=stop)
            if greedy:
                reply = await client.completions.create(**common, n=1, temperature=0.0, logprobs=1,
                                                        extra_body=greedy_extra or None)
                return _choices(reply, 1, logprobs=True)
            reply = await client.completions.create(
                **common, n=k, temperature=settings.temperature, top_p=settings.top_p,
                seed=sample_seed(settings.seed, questions[index], 0) % (2**31), extra_body=sample_extra or None)
            return _choices(reply, k)

        jobs = [(i, greedy) for i in range(len(questions)) for greedy in (True, False)]
        replies = self.client.map(ask, jobs, what="completions", progress=progress)
        records = []
        for index in range(len(questions)):
            (best,), samples = replies[2 * index], replies[2 * index + 1]
            tokens, logprobs = _token_logprobs(best)
            records.append({
                "greedy_response": cut_at_stop(best.text or "", settings.stop_strings).strip(),
                "greedy_tokens": tokens,
                "greedy_logprobs": logprobs,
                "greedy_cumulative_logprobs": float(sum(logprobs)),
                "sampling_response": [cut_at_stop(s.text or "", settings.stop_strings).strip() for s in samples],
                "num_generated_tokens": len(tokens) + sum(_completion_tokens(self.tokenizer, s) for s in samples),
            })
        return records

    def complete(self, prompts: list[str], max_new_tokens: int = 16, batch_size: int = 16, progress: bool = True, *,
                 use_chat_template: bool = True, system_prompt: str | None = None,
                 stop_strings: list[str] | None = None, repetition_penalty: float = 1.0) -> list[str]:
        """Greedy completions of raw user prompts in the chat template, rendered here as the Hugging Face backend
        renders them (`batch_size` is the server's business: ignored)."""
        prompts = list(prompts)
        if not prompts:
            return []
        settings = completion_settings(max_new_tokens, batch_size, use_chat_template, system_prompt, stop_strings,
                                       repetition_penalty)
        sent = self._prompts(prompts, settings)
        extra = _extra(repetition_penalty=repetition_penalty)

        async def ask(client: Any, index: int) -> Any:
            reply = await client.completions.create(model=self.name, prompt=sent[index], max_tokens=max_new_tokens,
                                                    n=1, temperature=0.0, stop=settings.stop_strings or None,
                                                    extra_body=extra or None)
            return _choices(reply, 1)[0]

        choices = self.client.map(ask, range(len(prompts)), what="completions", progress=progress, unit="prompt")
        return [cut_at_stop(c.text or "", settings.stop_strings).strip() for c in choices]


def _extra(top_k: int = 0, repetition_penalty: float = 1.0) -> dict[str, Any]:
    """vLLM's sampling fields beyond OpenAI's, only when they change decoding (a server that does not take them is
    then asked for nothing it would refuse)."""
    extra: dict[str, Any] = {}
    if top_k > 0:
        extra["top_k"] = int(top_k)
    if repetition_penalty != 1.0:
        extra["repetition_penalty"] = float(repetition_penalty)
    return extra


def _choices(reply: Any, n: int, logprobs: bool = False) -> list[Any]:
    """The reply's choices in index order, or [`BadReply`] when there are not `n` of them with text (and, when asked
    for, token log-probabilities)."""
    choices = sorted(getattr(reply, "choices", None) or [], key=lambda c: getattr(c, "index", 0) or 0)
    if len(choices) != n or any(not isinstance(getattr(c, "text", None), str) for c in choices):
        raise BadReply(f"expected {n} choice(s) with text, got {str(reply)[:200]}")
    if logprobs:
        for choice in choices:
            found = getattr(choice, "logprobs", None)
            if found is None or found.token_logprobs is None or len(found.token_logprobs) != len(found.tokens or []):
                raise BadReply(f"a greedy reply without token log-probabilities: {str(choice)[:200]}")
    return choices


def _token_logprobs(choice: Any) -> tuple[list[str], list[float]]:
    """The chosen tokens and their log-probabilities (a `None` one, some servers' first token, reads as 0)."""
    found = choice.logprobs
    return [str(t) for t in found.tokens], [float(v) if v is not None else 0.0 for v in found.token_logprobs]


def _completion_tokens(tokenizer: Any, choice: Any) -> int:
    """Tokens of one sampled answer (the server reports only the reply's total in `usage`)."""
    return len(tokenizer(choice.text or "", add_special_tokens=False)["input_ids"])
