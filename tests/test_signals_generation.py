import pytest
import torch
from transformers import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from elical_hf.settings.prompts import QA_PROMPT, render_prompt
from elical_hf.signals import decoding
from elical_hf.signals import (
    SamplingSettings,
    apply_repetition_penalty,
    build_prompt_ids,
    filter_candidates,
    generate_answers,
    resolve_autocast_dtype,
    sample_seed,
)

from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer


QUESTIONS = [
    "who wrote hamlet?",
    "what is the capital of france?",
    "who was the first president?",
    "in which year did the war end and which country was the largest?",
]


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request, tokenizer):
    # A larger init scale gives peaked distributions, so greedy argmaxes are far from ties.
    return make_tiny_causal_lm(tokenizer, arch=request.param, initializer_range=0.3)


def settings(**kwargs):
    defaults = dict(num_samples=3, max_new_tokens=8, batch_size=4)
    return SamplingSettings(**{**defaults, **kwargs})


def run(model, tokenizer, questions, **kwargs):
    return generate_answers(model, tokenizer, questions, settings(**kwargs), progress=False, autocast_dtype=None)


def test_greedy_matches_hf_generate(model, tokenizer):
    results = run(model, tokenizer, QUESTIONS, max_new_tokens=12)
    for question, result in zip(QUESTIONS, results):
        text = render_prompt(tokenizer, QA_PROMPT.format(question=question))
        input_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        out = model.generate(input_ids, do_sample=False, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id)
        expected = out[0, input_ids.shape[1] :].tolist()
        if tokenizer.eos_token_id in expected:
            expected = expected[: expected.index(tokenizer.eos_token_id) + 1]
        assert result["greedy_tokens"] == tokenizer.batch_decode([[t] for t in expected])
        assert result["greedy_response"] == tokenizer.decode(expected, skip_special_tokens=True).strip()


def test_greedy_logprobs_match_full_forward(model, tokenizer):
    results = run(model, tokenizer, QUESTIONS, max_new_tokens=10)
    prompt_ids = build_prompt_ids(tokenizer, QUESTIONS, settings())
    for prompt, result in zip(prompt_ids, results):
        answer = tokenizer.convert_tokens_to_ids(result["greedy_tokens"])
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            logprobs = model(ids).logits[0].float().log_softmax(-1)
        positions = torch.arange(len(prompt) - 1, len(prompt) + len(answer) - 1)
        expected = logprobs[positions, torch.tensor(answer)]
        torch.testing.assert_close(torch.tensor(result["greedy_logprobs"]), expected, atol=1e-4, rtol=0)
        assert result["greedy_cumulative_logprobs"] == pytest.approx(expected.sum().item(), abs=1e-3)
        assert len(result["greedy_logprobs"]) == len(result["greedy_tokens"])


def assert_same_answers(result, reference):
    """Same tokens and texts exactly; log-probabilities up to the rounding of batched kernels."""
    exact = [k for k in reference if k not in ("greedy_logprobs", "greedy_cumulative_logprobs")]
    assert {k: result[k] for k in exact} == {k: reference[k] for k in exact}
    torch.testing.assert_close(result["greedy_logprobs"], reference["greedy_logprobs"], atol=1e-5, rtol=0)


def test_samples_returned_and_reproducible_across_batching(model, tokenizer):
    reference = run(model, tokenizer, QUESTIONS, batch_size=1)
    batched = run(model, tokenizer, QUESTIONS, batch_size=3)
    shuffled = run(model, tokenizer, QUESTIONS[::-1], batch_size=3)[::-1]
    for ref, other, rev in zip(reference, batched, shuffled):
        assert len(ref["sampling_response"]) == 3
        assert_same_answers(other, ref)
        assert_same_answers(rev, ref)
    assert_same_answers(run(model, tokenizer, [QUESTIONS[2]], batch_size=2)[0], reference[2])


def test_more_samples_extend_fewer(model, tokenizer):
    two, three = run(model, tokenizer, QUESTIONS, num_samples=2), run(model, tokenizer, QUESTIONS, num_samples=3)
    assert [r["sampling_response"] for r in two] == [r["sampling_response"][:2] for r in three]


def test_samples_depend_on_seed_and_sample_index(model, tokenizer):
    first = run(model, tokenizer, QUESTIONS, seed=1)
    second = run(model, tokenizer, QUESTIONS, seed=2)
    assert [r["sampling_response"] for r in first] != [r["sampling_response"] for r in second]
    assert [r["greedy_response"] for r in first] == [r["greedy_response"] for r in second]
    for record in first:  # k independent streams, not one sample repeated
        assert len(set(record["sampling_response"])) > 1
    assert sample_seed(42, "q", 0) != sample_seed(42, "q", 1) != sample_seed(43, "q", 1)
    assert sample_seed(42, "q", 0) == sample_seed(42, "q", 0)


def decode_with_eos_after_even_tokens(tokenizer) -> tuple[list[dict], list[int]]:
    """Answers of a tiny model whose rows end after an even token (so they finish at different steps), and the batch
    size of each forward pass (the prefill first)."""
    model = make_tiny_causal_lm(tokenizer, initializer_range=0.3)
    eos = tokenizer.eos_token_id
    batch_sizes = []

    def force_eos_after_even_tokens(module, args, kwargs, output):
        input_ids = kwargs["input_ids"]
        batch_sizes.append(input_ids.shape[0])
        stop = (input_ids[:, -1] % 2 == 0) & (input_ids.shape[1] == 1)  # decode steps after an even token
        output.logits[stop, -1, eos] = output.logits[stop, -1].max(-1).values + 100
        return output

    model.register_forward_hook(force_eos_after_even_tokens, with_kwargs=True)
    return run(model, tokenizer, QUESTIONS, num_samples=4, max_new_tokens=12, batch_size=4), batch_sizes


def test_finished_rows_leave_the_batch(tokenizer):
    results, batch_sizes = decode_with_eos_after_even_tokens(tokenizer)
    rows = len(QUESTIONS) * 5
    prefill, decode = batch_sizes[0], batch_sizes[1:]
    assert prefill == len(QUESTIONS)
    assert decode == sorted(decode, reverse=True) and decode[-1] < rows
    # Each row costs one decode slot per token after its first: nothing is spent on finished rows.
    assert sum(decode) == sum(r["num_generated_tokens"] for r in results) - rows


def test_finished_rows_ride_along_until_they_are_a_share_of_the_batch(tokenizer, monkeypatch):
    """Where leaving (a copy of the cache) costs more than riding (bf16 on a CPU), finished rows stay in the batch,
    their tokens dropped, until they are `leave_share` of it: the same answers, fewer leavings."""
    rule = decoding.leave_share
    assert rule(torch.bfloat16, torch.device("cpu")) == decoding.LEAVE_SHARE
    assert rule(torch.float32, torch.device("cpu")) == rule(torch.bfloat16, torch.device("meta")) == 0.0
    at_once, at_once_sizes = decode_with_eos_after_even_tokens(tokenizer)
    monkeypatch.setattr(decoding, "leave_share", lambda dtype, device: 0.5)
    riding, sizes = decode_with_eos_after_even_tokens(tokenizer)
    for a, b in zip(riding, at_once):  # the same tokens; floats from batches of other sizes may round differently
        assert {k: v for k, v in a.items() if "logprob" not in k} == {k: v for k, v in b.items() if "logprob" not in k}
        assert len(a["greedy_logprobs"]) == len(a["greedy_tokens"])  # nothing logged for a row that rode along
        assert a["greedy_logprobs"] == pytest.approx(b["greedy_logprobs"], abs=1e-5)
    decode = sizes[1:]
    assert sum(decode) > sum(r["num_generated_tokens"] for r in riding) - len(QUESTIONS) * 5  # rows rode along
    drops = [(before, after) for before, after in zip(decode, decode[1:]) if after != before]
    assert drops and len(drops) < len({*at_once_sizes[1:]}) - 1
    assert all(after <= before / 2 for before, after in drops)  # half the batch had finished each time


def test_all_rows_finish_at_once(tokenizer):
    model = make_tiny_causal_lm(tokenizer)
    batch_sizes = []

    def always_eos(module, args, kwargs, output):
        batch_sizes.append(kwargs["input_ids"].shape[0])
        output.logits[:, -1, tokenizer.eos_token_id] = 1e4
        return output

    model.register_forward_hook(always_eos, with_kwargs=True)
    results = run(model, tokenizer, QUESTIONS[:2], num_samples=2)
    assert batch_sizes == [2]  # the prefill only
    assert results[0]["greedy_response"] == "" and results[0]["greedy_tokens"] == ["<|im_end|>"]
    assert results[0]["sampling_response"] == ["", ""] and results[0]["num_generated_tokens"] == 3


def test_stop_strings_cut_answers(model, tokenizer):
    plain = run(model, tokenizer, QUESTIONS, max_new_tokens=12)
    word = plain[0]["greedy_response"].split()[2]
    stopped = run(model, tokenizer, QUESTIONS, max_new_tokens=12, stop_strings=[word])
    greedy = stopped[0]["greedy_response"]
    assert word not in greedy and plain[0]["greedy_response"].startswith(greedy)
    assert len(stopped[0]["greedy_tokens"]) < len(plain[0]["greedy_tokens"])
    for before, after in zip(plain[0]["sampling_response"], stopped[0]["sampling_response"]):
        assert word not in after and before.startswith(after)


def test_bf16_autocast_runs(tokenizer, cpu_bf16):
    model = make_tiny_causal_lm(tokenizer, initializer_range=0.3)
    out = generate_answers(model, tokenizer, QUESTIONS[:2], settings(), progress=False, autocast_dtype=torch.bfloat16)
    assert len(out) == 2 and all(len(r["sampling_response"]) == 3 for r in out)
    assert all(isinstance(lp, float) for lp in out[0]["greedy_logprobs"])
    assert resolve_autocast_dtype(model, None) is None
    assert resolve_autocast_dtype(model, torch.float32) is None
    cpu_bf16(True)  # the policy autocasts a float32 model to bf16 only where bf16 is native and faster
    assert resolve_autocast_dtype(model, "auto") == torch.bfloat16
    assert resolve_autocast_dtype(model.to(torch.bfloat16), "auto") is None  # already low precision
    cpu_bf16(False)
    assert resolve_autocast_dtype(model.float(), "auto") is None
    with pytest.raises(ValueError, match="autocast_dtype"):
        resolve_autocast_dtype(model, "bf16")


def test_progress_bar_and_empty_input(model, tokenizer, capsys):
    assert generate_answers(model, tokenizer, [], settings()) == []
    generate_answers(model, tokenizer, QUESTIONS[:1], settings(), progress=True, autocast_dtype=None)
    assert "tok_s" in capsys.readouterr().err


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_samples=0), "num_samples"),
        (dict(temperature=0.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(batch_size=0), "batch_size"),
        (dict(prompt_template="no field"), "question"),
        (dict(stop_strings=[""]), "stop_strings"),
    ],
)
def test_invalid_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingSettings(**kwargs)


def test_defaults_follow_the_paper():
    s = SamplingSettings()
    paper = dict(num_samples=20, temperature=1.0, top_p=0.95, top_k=50, repetition_penalty=1.05, max_new_tokens=256)
    assert {name: getattr(s, name) for name in paper} == paper
    assert SamplingSettings(stop_strings="\n").stop_strings == ["\n"]


@pytest.mark.parametrize("top_k, top_p", [(50, 0.95), (0, 0.9), (5, 1.0), (0, 1.0), (3, 0.5), (8, 0.9), (299, 1.0)])
def test_filters_match_transformers_processors(top_k, top_p):
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 300, generator=generator) * 3
    scores[0, :10] = scores[0].max() + 1  # ten tied top tokens: ties at the top-k boundary are all kept
    input_ids = torch.randint(0, 300, (6, 40), generator=generator)  # with repeats
    input_ids[0, :3] = torch.tensor([0, 11, 0])  # a tied top-k token, penalized

    ours = apply_repetition_penalty(scores, input_ids, 1.3) / 0.7
    values, ids = filter_candidates(ours, top_k, top_p)
    ours_full = torch.full_like(scores, float("-inf")).scatter_(1, ids, values)

    expected = RepetitionPenaltyLogitsProcessor(1.3)(input_ids, scores.clone())
    expected = TemperatureLogitsWarper(0.7)(input_ids, expected)
    if top_k:
        expected = TopKLogitsWarper(top_k)(input_ids, expected)
    if top_p < 1.0:
        expected = TopPLogitsWarper(top_p)(input_ids, expected)
    torch.testing.assert_close(ours_full[1:], expected[1:])
    # Row 0: which of several equal tokens top-p drops depends on sort order; the kept values must agree.
    torch.testing.assert_close(ours_full[0].sort().values, expected[0].sort().values)
    assert torch.equal(values[:, 0], expected.max(-1).values)  # the best token always survives


def test_top_k_keeps_many_ties():
    scores = torch.zeros(2, 100)
    scores[0, 10:50] = 1.0  # 40 tokens tied at the top, far more than top_k
    scores[1] = torch.arange(100.0)
    values, ids = filter_candidates(scores, top_k=5, top_p=1.0)
    ours = torch.full_like(scores, float("-inf")).scatter_(1, ids, values)
    torch.testing.assert_close(ours, TopKLogitsWarper(5)(None, scores.clone()))
    assert torch.isfinite(ours[0]).sum() == 40 and torch.isfinite(ours[1]).sum() == 5


def test_shared_prefix_gives_the_same_completions(model, tokenizer):
    from elical_hf.signals import complete_prompts
    from elical_hf.settings.prompts import MIN_SHARED_PREFIX, common_prefix_length
    from elical_hf.signals.generation import build_prompt_ids, completion_settings

    demos = " ".join(f"question {i} who wrote hamlet ? 0.{i}" for i in range(12))  # a long shared few-shot prefix
    prompts = [f"{demos} {q}" for q in QUESTIONS + ["war", "the capital of france in the first war ?"]]
    ids = build_prompt_ids(tokenizer, prompts, completion_settings())
    assert common_prefix_length(ids) >= MIN_SHARED_PREFIX  # the prefix path is really taken
    kwargs = dict(max_new_tokens=10, batch_size=3, progress=False, autocast_dtype=None)
    shared = complete_prompts(model, tokenizer, prompts, share_prefix=True, **kwargs)
    plain = complete_prompts(model, tokenizer, prompts, share_prefix=False, **kwargs)
    assert shared == plain
    # and each equals transformers' own greedy decoding of the full prompt
    for prompt, completion in zip(prompts[:2], shared):
        text = render_prompt(tokenizer, prompt)
        input_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        out = model.generate(input_ids, do_sample=False, max_new_tokens=10, pad_token_id=tokenizer.pad_token_id)
        assert completion == tokenizer.decode(out[0, input_ids.shape[1] :], skip_special_tokens=True).strip()


def test_automatic_batch_size_follows_the_machine(monkeypatch):
    from elical_hf.signals.decoding import GPU_ROWS, ROWS_PER_CPU_THREAD, auto_batch_size

    assert SamplingSettings().batch_size is None  # automatic by default
    with pytest.raises(ValueError, match="batch_size"):
        SamplingSettings(batch_size=0)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert auto_batch_size(6) == round(2 * ROWS_PER_CPU_THREAD / 6) and auto_batch_size(21) == 6
    assert auto_batch_size(10_000) == 1
    monkeypatch.setattr(torch, "get_num_threads", lambda: 64)
    assert auto_batch_size(1) == 1024  # capped
    assert auto_batch_size(21, "cuda") == round(GPU_ROWS / 21)


def test_shared_prefix_length_rule():
    from elical_hf.settings.prompts import MIN_SHARED_PREFIX, shared_prefix_length

    long = list(range(MIN_SHARED_PREFIX + 5))
    assert shared_prefix_length([long + [1], long + [2]]) == len(long)
    assert shared_prefix_length([long, long + [7]]) == len(long) - 1  # every row keeps a token of its own
    assert shared_prefix_length([long[: MIN_SHARED_PREFIX - 1] + [1], long[: MIN_SHARED_PREFIX - 1] + [2]]) == 0
    assert shared_prefix_length([long + [1]]) == 0 and shared_prefix_length([]) == 0


@pytest.mark.parametrize("top_k, top_p, temperature, penalty", [(50, 0.95, 1.0, 1.05), (5, 0.8, 0.7, 1.3)])
def test_each_step_samples_from_the_distribution_transformers_generate_uses(model, tokenizer, monkeypatch, top_k,
                                                                             top_p, temperature, penalty):
    """The whole sampling path (prefill, cache copied to the sample rows, positions, repetition penalty over prompt
    and generated tokens, temperature, top-k, top-p) gives, at every step, the distribution `generate(do_sample=True)`
    samples from: our decoder is forced along each of transformers' sampled sequences and its candidate probabilities
    are compared with transformers' processed scores at that step (float32: they agree to float rounding)."""
    from elical_hf.signals import decoding

    question = QUESTIONS[3]
    ids = torch.tensor([build_prompt_ids(tokenizer, [question], settings())[0]])
    torch.manual_seed(0)
    out = model.generate(ids, do_sample=True, num_return_sequences=4, max_new_tokens=8, top_k=top_k, top_p=top_p,
                         temperature=temperature, repetition_penalty=penalty, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
    eos, compared = tokenizer.eos_token_id, 0
    for row in range(4):
        sequence = out.sequences[row, ids.shape[1]:].tolist()
        steps = sequence.index(eos) + 1 if eos in sequence else len(sequence)
        forced, seen = iter(sequence[:steps]), []

        def follow(values, candidate_ids, generators, forced=forced, seen=seen):
            probs = torch.zeros(values.shape[0], out.scores[0].shape[-1], dtype=torch.float64)
            probs.scatter_(1, candidate_ids, values.softmax(-1).double())
            seen.append(probs[0])
            return torch.tensor([next(forced)])

        monkeypatch.setattr(decoding, "_sample", follow)
        run(model, tokenizer, [question], num_samples=1, max_new_tokens=steps, top_k=top_k, top_p=top_p,
            temperature=temperature, repetition_penalty=penalty)
        assert len(seen) == steps
        for step, ours in enumerate(seen):
            expected = out.scores[step][row].double().softmax(-1)
            torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0, msg=f"sequence {row}, step {step}")
            compared += 1
    assert compared >= 8


@pytest.mark.float32
def test_separate_prefix_attention_samples_what_the_repeated_prefix_samples(model, tokenizer, monkeypatch):
    """Sample rows (k per question) attend to one unrepeated prefix cache and give the answers, samples and
    log-probabilities of the prefix cache repeated for every row; the second batch reuses the first's prefix."""
    import elical_hf.models.kv_prefix as kv_prefix
    import elical_hf.models.prefix_attention as prefix_attention
    import elical_hf.signals.decoding as decoding
    from elical_hf.signals import generate_answers

    calls, reused = [], []
    prefill = decoding.prefill_shared_prefix
    monkeypatch.setattr(decoding, "prefill_shared_prefix", lambda *args, **kwargs: reused.append(
        kwargs["prefix"] is not None) or prefill(*args, **kwargs))
    attention = prefix_attention.shared_prefix_attention
    monkeypatch.setitem(prefix_attention.AttentionInterface._global_mapping, prefix_attention.ATTENTION_NAME,
                        lambda module, query, *args, **kwargs: calls.append(query.shape) or attention(
                            module, query, *args, **kwargs))
    settings = SamplingSettings(num_samples=3, max_new_tokens=6, batch_size=2, seed=5,
                                system_prompt=" ".join(["answer briefly and well"] * 12))  # a long shared prefix
    questions = QUESTIONS + ["war"]  # the last batch holds one prompt: it still attends to the shared prefix
    separate = generate_answers(model, tokenizer, questions, settings, progress=False, autocast_dtype=None)
    assert calls[0][0] == 2 and max(shape[0] for shape in calls) == 2 * 4  # prompts prefill, then 1 + 3 rows each
    assert reused == [False, True, True]  # one prefix run for all three batches
    monkeypatch.setattr(kv_prefix, "supports_prefix_attention", lambda model: False)
    repeated = generate_answers(model, tokenizer, questions, settings, progress=False, autocast_dtype=None)
    for ours, theirs in zip(separate, repeated):
        assert ours["greedy_response"] == theirs["greedy_response"]
        assert ours["sampling_response"] == theirs["sampling_response"]
        assert ours["greedy_logprobs"] == pytest.approx(theirs["greedy_logprobs"], abs=1e-5)


def _bos_tokenizer(append_eos: bool = False):
    """A template-less word-level tokenizer whose default tokenization puts `<bos>` first (as Gemma's and Llama's do)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<bos>": 1, "<eos>": 2, "Question": 3, ":": 4, "Paris": 5, "?": 6, "Answer": 7}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    single = "<bos> $A <eos>" if append_eos else "<bos> $A"
    backend.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[("<bos>", 1), ("<eos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>")


@pytest.mark.parametrize("append_eos", [False, True])
def test_prompt_without_chat_template_keeps_the_tokenizers_bos(append_eos):
    """Prompts are tokenized with add_special_tokens=False; without a chat template the rendered text must carry the
    beginning-of-sequence token the tokenizer would add (a base Gemma answers '????' without it), never an appended
    end-of-sequence token, and never twice."""
    from elical_hf.settings.prompts import special_prefix

    tokenizer = _bos_tokenizer(append_eos)
    assert special_prefix(tokenizer) == "<bos>"
    text = render_prompt(tokenizer, "Question : Paris ?")
    assert text == "<bos>Question : Paris ?"
    assert render_prompt(tokenizer, text) == text
    settings = SamplingSettings(prompt_template="Question : {question} Answer")
    ids = build_prompt_ids(tokenizer, ["Paris ?"], settings)[0]
    assert ids[0] == 1 and ids.count(1) == 1 and 2 not in ids
    # a tokenizer that adds nothing (the tiny ChatML one, used without its template) is left alone
    plain = make_tiny_tokenizer()
    assert special_prefix(plain) == ""
    assert render_prompt(plain, "Question : Paris ?", use_chat_template=False) == "Question : Paris ?"


@pytest.mark.parametrize("words, apart", [(6, False), (20, True)])
def test_bf16_on_a_cpu_repeats_a_short_prefix_and_keeps_a_long_one_apart(model, tokenizer, monkeypatch, words, apart):
    """In bfloat16 on a CPU a shared prefix of at most REPEATED_PREFIX_MAX tokens is repeated per row (faster there
    than the cascade's softmax); a longer one is attended to apart. In float32 every shared prefix stays apart."""
    import elical_hf.signals.decoding as decoding
    from elical_hf.settings.prompts import shared_prefix_length
    from elical_hf.signals import generate_answers
    from elical_hf.signals.generation import build_prompt_ids

    separate = []
    prefill = decoding.prefill_shared_prefix
    monkeypatch.setattr(decoding, "prefill_shared_prefix", lambda *args, **kwargs: separate.append(
        kwargs["prefix_model"] is not None) or prefill(*args, **kwargs))
    settings = SamplingSettings(num_samples=2, max_new_tokens=3, batch_size=2, seed=5,
                                system_prompt=" ".join(["answer briefly and well"] * words))
    shared = shared_prefix_length(build_prompt_ids(tokenizer, QUESTIONS[:2], settings))
    assert (shared > decoding.REPEATED_PREFIX_MAX) == apart and shared > 0
    generate_answers(model, tokenizer, QUESTIONS[:2], settings, progress=False, autocast_dtype=torch.bfloat16)
    generate_answers(model, tokenizer, QUESTIONS[:2], settings, progress=False, autocast_dtype=None)
    assert separate == [apart, model.dtype == torch.float32]
