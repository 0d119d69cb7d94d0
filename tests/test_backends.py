import sys
import types

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from elical_hf.settings.prompts import render_prompt
from elical_hf.signals import HFBackend, SamplingSettings, VLLMBackend, complete_prompts, generate_answers
from elical_hf.signals.backends import GenerationBackend, make_backend, vllm_available
from elical_hf.signals.decoding import sample_seed
from elical_hf.signals.generation import build_prompt_ids


PROMPTS = ["Who wrote Hamlet?", "What is the capital of France?", "Is the answer correct? Say certain or uncertain."]
SETTINGS = SamplingSettings(num_samples=3, max_new_tokens=5, batch_size=2)


@pytest.fixture(scope="module")
def hf(tiny_llama):
    return HFBackend(tiny_llama, autocast_dtype=None)


def test_hf_backend_generate_delegates(hf, tiny_llama):
    assert isinstance(hf, GenerationBackend) and hf.kind == "hf"
    assert hf.name == tiny_llama and hf.weights_source == "local"
    expected = generate_answers(hf.model, hf.tokenizer, PROMPTS, SETTINGS, progress=False, autocast_dtype=None)
    assert hf.generate(PROMPTS, SETTINGS, progress=False) == expected
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    with pytest.raises(ValueError, match="tokenizer"):
        HFBackend(model)
    in_memory = HFBackend(model, AutoTokenizer.from_pretrained(tiny_llama), autocast_dtype=None)
    assert in_memory.name == tiny_llama and in_memory.weights_source == "in-memory"
    with pytest.raises(ValueError, match="dtype"):
        HFBackend(tiny_llama, dtype="float99")


def test_complete_matches_hf_generate(hf):
    completions = hf.complete(PROMPTS, max_new_tokens=6, batch_size=2, progress=False)
    for prompt, completion in zip(PROMPTS, completions):
        text = render_prompt(hf.tokenizer, prompt)
        input_ids = hf.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        out = hf.model.generate(input_ids, do_sample=False, max_new_tokens=6, pad_token_id=hf.tokenizer.pad_token_id)
        assert completion == hf.tokenizer.decode(out[0, input_ids.shape[1] :], skip_special_tokens=True).strip()
    assert hf.complete(PROMPTS[::-1], max_new_tokens=6, batch_size=1, progress=False) == completions[::-1]
    assert hf.complete([], progress=False) == []
    with pytest.raises(ValueError, match="max_new_tokens"):
        hf.complete(PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="row 1"):
        hf.complete(["ok", None])


def test_complete_decodes_greedy_rows_only(hf):
    rows = []
    handle = hf.model.register_forward_hook(lambda m, a, k, o: rows.append(k["input_ids"].shape[0]), with_kwargs=True)
    try:
        complete_prompts(hf.model, hf.tokenizer, PROMPTS, max_new_tokens=4, batch_size=8, progress=False)
    finally:
        handle.remove()
    assert max(rows) == len(PROMPTS)  # one row per prompt, no sample rows


def test_make_backend(tiny_llama, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ImportError, match=r'pip install "elical-hf\[vllm\]"'):
        make_backend("vllm", tiny_llama)
    with pytest.raises(ValueError, match="Unknown backend"):
        make_backend("tgi", tiny_llama)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert isinstance(make_backend("auto", tiny_llama), HFBackend)
    assert make_backend("hf", tiny_llama, dtype="bf16").model.dtype == torch.bfloat16  # the user's choice wins


# A fake `vllm` that records its calls and answers like vLLM's RequestOutput / CompletionOutput.


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class FakeLLM:
    instances: list = []

    def __init__(self, model, **kwargs):
        self.model, self.kwargs, self.calls = model, kwargs, []
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def _completion(self, token_ids, with_logprobs):
        logprobs = None
        if with_logprobs:  # the chosen token first, plus another candidate as vLLM may add
            logprobs = [
                {t: types.SimpleNamespace(logprob=-0.25 * (i + 1)), 0: types.SimpleNamespace(logprob=-9.0)}
                for i, t in enumerate(token_ids)
            ]
        return types.SimpleNamespace(
            text=self.tokenizer.decode(token_ids), token_ids=list(token_ids), cumulative_logprob=None, logprobs=logprobs
        )

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((prompts, params, use_tqdm))
        vocab = self.tokenizer.convert_tokens_to_ids
        outputs = []
        for i, (prompt, p) in enumerate(zip(prompts, params if isinstance(params, list) else [params] * len(prompts))):
            assert set(prompt) == {"prompt_token_ids"}
            words = [["Paris", "."], ["William", "Shakespeare", "<|im_end|>"], ["maybe", "Paris"]]
            choices = [[vocab(w) for w in words[(i + j) % 3]] for j in range(p.n)]
            outputs.append(
                types.SimpleNamespace(
                    prompt_token_ids=prompt["prompt_token_ids"],
                    outputs=[self._completion(ids, getattr(p, "logprobs", None) is not None) for ids in choices],
                )
            )
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = FakeLLM, FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    FakeLLM.instances = []
    return module


def test_vllm_backend_records_have_the_hf_schema(fake_vllm, hf, tiny_llama):
    backend = make_backend("vllm", tiny_llama, dtype="bfloat16", gpu_memory_utilization=0.5)
    assert isinstance(backend, VLLMBackend) and backend.kind == "vllm" and backend.name == tiny_llama
    llm = FakeLLM.instances[0]
    assert llm.model == tiny_llama and llm.kwargs == {"dtype": "bfloat16", "gpu_memory_utilization": 0.5}
    settings = SamplingSettings(num_samples=2, max_new_tokens=7, top_k=0, stop_strings=["."])
    records = backend.generate(PROMPTS[:2], settings, progress=False)
    expected = hf.generate(PROMPTS[:2], settings, progress=False)
    assert [set(r) for r in records] == [set(r) for r in expected]
    for record, reference in zip(records, expected):
        for key, value in reference.items():
            assert type(record[key]) is type(value), key
    assert records[0]["greedy_response"] == "Paris"  # cut at the stop string
    assert records[1]["greedy_tokens"] == ["William", "Shakespeare", "<|im_end|>"]
    assert records[1]["greedy_response"] == "William Shakespeare"
    assert records[1]["greedy_logprobs"] == [-0.25, -0.5, -0.75] and records[1]["greedy_cumulative_logprobs"] == -1.5
    assert records[0]["sampling_response"] == ["Paris", "William Shakespeare"]
    assert records[0]["num_generated_tokens"] == 2 + 2 + 3

    (greedy_prompts, greedy, _), (sample_prompts, sampling, tqdm_flag) = llm.calls
    ids = build_prompt_ids(hf.tokenizer, PROMPTS[:2], settings)  # the HF backend's exact prompt tokens
    assert [p["prompt_token_ids"] for p in greedy_prompts] == ids == [p["prompt_token_ids"] for p in sample_prompts]
    assert (greedy.n, greedy.temperature, greedy.logprobs, greedy.max_tokens, greedy.stop) == (1, 0.0, 0, 7, ["."])
    assert tqdm_flag is False and len(sampling) == 2
    first = sampling[0]
    assert (first.n, first.temperature, first.top_p, first.top_k) == (2, 1.0, 0.95, -1)
    assert (first.repetition_penalty, first.max_tokens, first.stop) == (1.05, 7, ["."])
    assert first.seed == sample_seed(settings.seed, PROMPTS[0], 0) % 2**31 != sampling[1].seed


def test_vllm_backend_complete(fake_vllm, hf, tiny_llama):
    backend = VLLMBackend(tiny_llama)
    assert backend.complete(PROMPTS[:2], max_new_tokens=3, progress=False) == ["Paris .", "William Shakespeare"]
    prompts, params, _ = FakeLLM.instances[0].calls[0]
    texts = [render_prompt(hf.tokenizer, p) for p in PROMPTS[:2]]
    rendered = hf.tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert [p["prompt_token_ids"] for p in prompts] == rendered
    assert (params.n, params.temperature, params.max_tokens) == (1, 0.0, 3)
    assert backend.complete([], progress=False) == [] and backend.generate([], SETTINGS) == []


def test_vllm_availability_probe(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert vllm_available() is False


def test_vllm_parallel_options_reach_vllm_and_are_refused_by_hf(fake_vllm, tiny_llama):
    make_backend("vllm", tiny_llama, tensor_parallel_size=2, data_parallel_size=3)
    assert FakeLLM.instances[0].kwargs == {"tensor_parallel_size": 2, "data_parallel_size": 3}
    with pytest.raises(ValueError, match="tensor_parallel_size.*options of the vLLM backend"):
        make_backend("hf", tiny_llama, tensor_parallel_size=2)
    with pytest.raises(ValueError, match="`data_parallel_size` must be an integer >= 1"):
        VLLMBackend(tiny_llama, data_parallel_size=0)


def test_vllm_requests_are_valid_for_the_real_sampling_params():
    """The request building of the vLLM backend against vLLM's own `SamplingParams` (where vLLM imports)."""
    vllm = pytest.importorskip("vllm")
    from elical_hf.signals.backends import vllm_request_params

    settings = SamplingSettings(num_samples=3, max_new_tokens=5, top_k=0, stop_strings=["\n"])
    greedy, sampling = vllm_request_params(vllm.SamplingParams, PROMPTS[:2], settings)
    assert isinstance(greedy, vllm.SamplingParams) and all(isinstance(p, vllm.SamplingParams) for p in sampling)
    assert (greedy.n, greedy.temperature, greedy.logprobs, greedy.max_tokens) == (1, 0.0, 0, 5)
    first = sampling[0]
    assert (first.n, first.temperature, first.top_p, first.max_tokens, first.stop) == (3, 1.0, 0.95, 5, ["\n"])
    assert first.top_k in (-1, 0)  # vLLM's "no top-k" (some versions store 0)
    assert first.seed == sample_seed(settings.seed, PROMPTS[0], 0) % 2**31 != sampling[1].seed
