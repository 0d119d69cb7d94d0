"""Generation backends: one interface over the library's own decoding loop (Hugging Face) and vLLM.

A backend has a `name` (the model id, for provenance), a `kind`, and two methods:

- `generate(questions, settings, progress=True) -> list[dict]`: the greedy answer with token log-probabilities and k
  samples per question, in the record schema of [`generate_answers`];
- `complete(prompts, max_new_tokens=16, batch_size=16, progress=True) -> list[str]`: greedy completions of raw user
  prompts wrapped in the chat template (LLM judges, verbalized confidence).

[`HFBackend`] also reads the model's distribution over the first reply token: `first_token_logprobs` (the LLM judges'
`logprob` verdict) and `next_token_logprobs` (given token ids, after question prompts: the Option-Prob baseline).

Both backends build prompts with the same [`~elical_hf.settings.prompts.render_prompt`] and hand the model the same
token ids, so a question's prompt is identical whichever backend samples it. Their samples differ (different random
streams).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..models.default_model import resolve_model_path
from ..settings.precision import precision_report, resolve_dtype
from .decoding import answer_record, context_length, cut_at_stop, sample_seed
from .generation import (
    SamplingSettings, build_prompt_ids, complete_prompts, completion_settings, first_token_logprobs, generate_answers,
    next_token_logprobs,
)


__all__ = [
    "BACKENDS", "ENDPOINT_OPTIONS", "GenerationBackend", "HFBackend", "VLLM_PARALLEL_OPTIONS", "VLLMBackend",
    "make_backend",
    "vllm_available", "vllm_request_params",
]

VLLM_INSTALL_HINT = 'pip install "elical-hf[vllm]"'


@runtime_checkable
class GenerationBackend(Protocol):
    """What [`~elical_hf.signals.sample_records`] and the judges need from a backend."""

    name: str
    kind: str

    def generate(self, questions: list[str], settings: SamplingSettings, progress: bool = True) -> list[dict]: ...

    def complete(
        self, prompts: list[str], max_new_tokens: int = 16, batch_size: int = 16, progress: bool = True
    ) -> list[str]: ...


class HFBackend:
    """
    Generation with a `transformers` causal LM through the library's own decoding loop ([`generate_answers`]).

    Args:
        model (`str` or [`~transformers.PreTrainedModel`]):
            A Hub id or folder (resolved with [`~elical_hf.models.default_model.resolve_model_path`], so the embedded
            default model works offline), or a loaded model (then `tokenizer` is required).
        tokenizer ([`~transformers.PreTrainedTokenizerBase`], *optional*):
            Its tokenizer; loaded from the same place as the model when `model` is a string.
        dtype (`str` or `torch.dtype`, *optional*, defaults to `"auto"`):
            Weights dtype when loading: `"auto"` follows the precision policy
            ([`~elical_hf.settings.precision.resolve_dtype`]: bf16 only where it is native and faster, else float32 on a
            CPU).
        device (`str`, *optional*):
            Where to put a loaded model (`"cuda"`, `"cpu"`, ...); `None` keeps it where it is.
        revision (`str`, *optional*): Hub revision.
        autocast_dtype (`torch.dtype` or `"auto"`, *optional*, defaults to `"auto"`):
            Passed to [`generate_answers`] and [`complete_prompts`].
    """

    kind = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any | None = None,
        *,
        dtype: Any = "auto",
        device: str | None = None,
        revision: str | None = None,
        autocast_dtype: Any = "auto",
    ):
        if isinstance(model, str):
            from transformers import AutoConfig, AutoModelForCausalLM

            from ..data.encoding import read_tokenizer
            from ..utils.loading import load_model, load_pretrained

            path, self.weights_source = resolve_model_path(model, revision)
            self.name = model
            model = load_model(AutoModelForCausalLM, path, config=load_pretrained(AutoConfig.from_pretrained, path),
                               dtype=resolve_dtype(dtype, device))
            tokenizer = tokenizer if tokenizer is not None else read_tokenizer(path)
        else:
            if tokenizer is None:
                raise ValueError("HFBackend needs a `tokenizer` when `model` is a loaded model.")
            self.name = getattr(model.config, "name_or_path", None) or type(model).__name__
            self.weights_source = "in-memory"
        self.model = model.to(device) if device is not None else model
        self.tokenizer = tokenizer
        self.precision = precision_report(self.model.dtype, self.model.device)
        self.autocast_dtype = autocast_dtype

    def __repr__(self) -> str:
        return f"HFBackend(name={self.name!r}, weights_source={self.weights_source!r})"

    @property
    def context_length(self) -> int | None:
        """The model's context in tokens (`max_position_embeddings`): a prompt and its answer must fit in it."""
        return context_length(self.model)

    def generate(self, questions: list[str], settings: SamplingSettings, progress: bool = True) -> list[dict]:
        """Greedy answer and k samples per question; see [`generate_answers`]."""
        return generate_answers(
            self.model, self.tokenizer, list(questions), settings, progress=progress, autocast_dtype=self.autocast_dtype
        )

    def complete(
        self,
        prompts: list[str],
        max_new_tokens: int = 16,
        batch_size: int = 16,
        progress: bool = True,
        **kwargs: Any,
    ) -> list[str]:
        """Greedy completions of raw user prompts in the chat template; see [`complete_prompts`] for `kwargs`."""
        return complete_prompts(
            self.model,
            self.tokenizer,
            list(prompts),
            max_new_tokens,
            batch_size,
            progress,
            autocast_dtype=self.autocast_dtype,
            **kwargs,
        )

    def first_token_logprobs(self, prompts: list[str], batch_size: int = 16, progress: bool = True,
                             **kwargs: Any) -> list[dict[str, float]]:
        """The likeliest first reply tokens of each prompt with their log-probabilities; see
        [`~elical_hf.signals.generation.first_token_logprobs`] (a repetition penalty, which only the generated verdict
        uses, is ignored)."""
        kwargs.pop("repetition_penalty", None)
        kwargs.pop("max_new_tokens", None)  # one token, by definition
        return first_token_logprobs(self.model, self.tokenizer, list(prompts), batch_size=batch_size,
                                    progress=progress, autocast_dtype=self.autocast_dtype, **kwargs)

    def next_token_logprobs(self, questions: list[str], token_ids: list[int], settings: SamplingSettings,
                            batch_size: int = 16, progress: bool = True) -> list[list[float]]:
        """The log-probability of each of `token_ids` as the first reply token after each question's prompt (rendered
        from `settings` as [`generate`] renders it); see [`~elical_hf.signals.generation.next_token_logprobs`]."""
        return next_token_logprobs(self.model, self.tokenizer, list(questions), token_ids, settings,
                                   batch_size=batch_size, progress=progress, autocast_dtype=self.autocast_dtype)


def vllm_available() -> bool:
    """Whether `vllm` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def vllm_request_params(sampling_params: Any, questions: list[str], settings: SamplingSettings) -> tuple[Any, list[Any]]:
    """The vLLM requests of [`VLLMBackend.generate`]: one greedy `SamplingParams` (temperature 0, `logprobs=0`: the
    chosen tokens' log-probabilities, the settings' `greedy_repetition_penalty`) for every question, and one sampling
    `SamplingParams` per question (`n=k`, the settings' temperature, top-p, top-k, repetition penalty and stop strings,
    seeded from the settings' seed and the question text, so a question's samples do not depend on the other questions
    or on the worker that samples it).

    Args:
        sampling_params (`type`): `vllm.SamplingParams` (or a stand-in with the same keyword arguments).
        questions (`list[str]`): The questions.
        settings ([`SamplingSettings`]): Decoding settings.

    Returns:
        `tuple`: the greedy parameters and the list of per-question sampling parameters.
    """
    stop = list(settings.stop_strings) or None
    greedy = sampling_params(n=1, temperature=0.0, max_tokens=settings.max_new_tokens, logprobs=0, stop=stop,
                             repetition_penalty=settings.greedy_repetition_penalty)
    sampling = [
        sampling_params(
            n=settings.num_samples,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=settings.top_k if settings.top_k > 0 else -1,
            repetition_penalty=settings.repetition_penalty,
            max_tokens=settings.max_new_tokens,
            seed=sample_seed(settings.seed, question, 0) % (2**31),
            stop=stop,
        )
        for question in questions
    ]
    return greedy, sampling


def _import_vllm():
    try:
        import vllm
    except ImportError as error:
        raise ImportError(f"The vLLM backend needs vLLM (and a CUDA GPU): {VLLM_INSTALL_HINT}") from error
    return vllm


class VLLMBackend:
    """
    Generation with vLLM: the same prompts (token ids rendered by the model's chat template) and the same record
    schema as [`HFBackend`].

    The greedy answer uses temperature 0 with `logprobs=0` (the chosen tokens' log-probabilities); the k samples are
    one request with `n=k` and the settings' temperature, top-p, top-k, repetition penalty and stop strings, seeded
    per question from the settings' seed (so a question's samples do not depend on the other questions).

    Args:
        model (`str`): A Hub id or folder (resolved with [`~elical_hf.models.default_model.resolve_model_path`]).
        revision (`str`, *optional*): Hub revision.
        dtype (`str`, *optional*): vLLM's `dtype` (e.g. `"bfloat16"`; default `"auto"`).
        tensor_parallel_size (`int`, *optional*): GPUs one model replica is split over (`vllm.LLM`'s own option,
            for models that do not fit one GPU).
        data_parallel_size (`int`, *optional*): `vllm.LLM`'s data-parallel replicas. Across GPUs or machines,
            running one worker per GPU with `sample_records(num_workers=N, worker_index=i)` (`elical-hf sample
            --num_workers N --worker_index i`) does the same without vLLM's multi-process launch.
        llm_kwargs: Other arguments of `vllm.LLM` (`gpu_memory_utilization`, `max_model_len`, ...).

    Raises:
        `ImportError`: when vLLM is not installed.
    """

    kind = "vllm"

    def __init__(
        self,
        model: str,
        *,
        revision: str | None = None,
        dtype: Any = None,
        tensor_parallel_size: int | None = None,
        data_parallel_size: int | None = None,
        **llm_kwargs: Any,
    ):
        self._vllm = _import_vllm()
        path, self.weights_source = resolve_model_path(model, revision)
        if dtype is not None:
            llm_kwargs["dtype"] = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
        for name, size in (("tensor_parallel_size", tensor_parallel_size), ("data_parallel_size", data_parallel_size)):
            if size is not None:
                if not isinstance(size, int) or size < 1:
                    raise ValueError(f"`{name}` must be an integer >= 1, got {size!r}.")
                llm_kwargs[name] = size
        self.name = model
        self.llm = self._vllm.LLM(model=path, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def __repr__(self) -> str:
        return f"VLLMBackend(name={self.name!r}, weights_source={self.weights_source!r})"

    @property
    def context_length(self) -> int | None:
        """vLLM's `max_model_len` for this model: a prompt and its answer must fit in it."""
        model_config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        return getattr(model_config, "max_model_len", None)

    def _run(self, prompt_ids: list[list[int]], params: Any, progress: bool) -> list[Any]:
        prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
        return self.llm.generate(prompts, params, use_tqdm=progress)

    def _decode(self, token_ids: Sequence[int], stop_strings: list[str]) -> str:
        text = self.tokenizer.decode(list(token_ids), skip_special_tokens=True)
        return cut_at_stop(text, stop_strings).strip()

    def generate(self, questions: list[str], settings: SamplingSettings, progress: bool = True) -> list[dict]:
        """Greedy answer (with token log-probabilities) and k samples per question, as [`generate_answers`]."""
        questions = list(questions)
        if not questions:
            return []
        prompt_ids = build_prompt_ids(self.tokenizer, questions, settings)
        greedy, sampling = vllm_request_params(self._vllm.SamplingParams, questions, settings)
        greedy_outputs = self._run(prompt_ids, greedy, progress)
        sample_outputs = self._run(prompt_ids, sampling, progress)
        records = []
        for greedy_request, sample_request in zip(greedy_outputs, sample_outputs):
            best = greedy_request.outputs[0]
            token_ids = list(best.token_ids)
            logprobs = [float(step[token].logprob) for token, step in zip(token_ids, best.logprobs or [])]
            samples = list(sample_request.outputs)
            records.append(answer_record(
                self._decode(token_ids, settings.stop_strings), self.tokenizer.batch_decode([[t] for t in token_ids]),
                logprobs, [self._decode(s.token_ids, settings.stop_strings) for s in samples],
                len(token_ids) + sum(len(s.token_ids) for s in samples),
            ))
        return records

    def complete(
        self,
        prompts: list[str],
        max_new_tokens: int = 16,
        batch_size: int = 16,
        progress: bool = True,
        *,
        use_chat_template: bool = True,
        system_prompt: str | None = None,
        stop_strings: list[str] | None = None,
        repetition_penalty: float = 1.0,
    ) -> list[str]:
        """Greedy completions of raw user prompts in the chat template (`batch_size` is vLLM's business: ignored);
        `repetition_penalty` as in [`complete_prompts`]."""
        prompts = list(prompts)
        settings = completion_settings(max_new_tokens, batch_size, use_chat_template, system_prompt, stop_strings,
                                       repetition_penalty)
        if not prompts:
            return []
        params = self._vllm.SamplingParams(
            n=1, temperature=0.0, max_tokens=max_new_tokens, stop=settings.stop_strings or None,
            repetition_penalty=settings.greedy_repetition_penalty,
        )
        outputs = self._run(build_prompt_ids(self.tokenizer, prompts, settings), params, progress)
        return [self._decode(out.outputs[0].token_ids, settings.stop_strings) for out in outputs]


def _openai_backend(model: str, **kwargs: Any) -> Any:
    from .openai_backend import OpenAIBackend

    endpoint = kwargs.pop("endpoint", None)
    if not endpoint:
        raise ValueError("The 'openai' backend samples through a server: pass its URL (--endpoint "
                         "http://127.0.0.1:8000/v1).")
    return OpenAIBackend(endpoint, model, **kwargs)


BACKENDS = {"hf": HFBackend, "vllm": VLLMBackend, "openai": _openai_backend}
"""The generation backends by kind: the library's own decoder, vLLM in-process, and any OpenAI-compatible server
([`~elical_hf.signals.openai_backend.OpenAIBackend`])."""

VLLM_PARALLEL_OPTIONS = ("tensor_parallel_size", "data_parallel_size")
"""Options that only the vLLM backend takes."""

ENDPOINT_OPTIONS = ("endpoint", "served_model", "max_concurrency", "timeout", "max_retries", "api_key_env",
                    "allow_other_model")
"""Options that only the OpenAI-compatible backend takes."""

_LOCAL_OPTIONS = ("dtype", "device", "autocast_dtype")


def make_backend(kind: str, model: str, **kwargs: Any) -> Any:
    """Build a backend by kind: `"hf"`, `"vllm"`, `"openai"` (a server at `endpoint=`), or `"auto"` (vLLM when it is
    importable and a CUDA GPU is present, else Hugging Face). `kwargs` go to the backend's constructor (`dtype` works
    for both local backends); options of another backend left at `None` are dropped.

    Raises:
        `ValueError`: for an unknown `kind`, or options of another backend ([`VLLM_PARALLEL_OPTIONS`],
        [`ENDPOINT_OPTIONS`]). `ImportError`: for `"vllm"` without vLLM installed.
    """
    if kind == "auto":
        import torch

        kind = "vllm" if vllm_available() and torch.cuda.is_available() else "hf"
    if kind not in BACKENDS:
        raise ValueError(f"Unknown backend {kind!r}; choose one of {sorted(BACKENDS) + ['auto']}.")
    foreign = {"hf": VLLM_PARALLEL_OPTIONS + ENDPOINT_OPTIONS, "vllm": ENDPOINT_OPTIONS,
               "openai": VLLM_PARALLEL_OPTIONS}[kind]
    given = [name for name in foreign if kwargs.get(name) is not None]
    if given:
        owner = "vLLM" if given[0] in VLLM_PARALLEL_OPTIONS else "'openai' (OpenAI-compatible server)"
        advice = {"hf": "the 'hf' backend runs on one device (split the questions over workers with --num_workers "
                        "instead)",
                  "vllm": "the vLLM backend loads the model in this process",
                  "openai": "the server decides how the model is spread (vllm serve --tensor-parallel-size ...)"}[kind]
        raise ValueError(f"{', '.join(given)}: options of the {owner} backend; {advice}.")
    kwargs = {name: value for name, value in kwargs.items() if name not in foreign}
    if kind == "openai":
        if kwargs.get("dtype") not in (None, "auto"):
            raise ValueError(f"dtype {kwargs['dtype']!r}: the server decides the dtype (vllm serve --dtype ...).")
        kwargs = {name: value for name, value in kwargs.items() if name not in _LOCAL_OPTIONS and value is not None}
    return BACKENDS[kind](model, **kwargs)
