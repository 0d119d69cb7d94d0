"""Signal generation (greedy answer + k samples): our sampler vs Hugging Face `generate`, side by side in one run.

Three ways to produce the same signals on the same questions, model and dtype (the precision policy's):
- ours: `generate_answers` (one prefill per question shared by its greedy and k sample rows; finished rows leave
  the batch), and as rows of their own its two ways with the prompt prefix every question shares: repeated per row,
  or attended to apart (the sampler picks one: `decoding.REPEATED_PREFIX_MAX`);
- HF batched: `generate(do_sample=True, num_return_sequences=k)` plus a greedy `generate` with scores, over the same
  batches of questions;
- HF per sample: one `generate` call per sample and one greedy call per question (how LM-Polygraph samples), run on
  the first `--loop_questions` questions only.
Tokens/s counts generated tokens (up to and including EOS) of every row. The table also shows the mean sampled
length (with two standard errors) and the share of samples equal to the greedy answer for each method (the same
settings should give the same distribution), and the share of the measured fp32 matmul ceiling our sampler reaches.

    python benchmarks/sampling_speed.py                       # k = 5 and 20, 16 questions, 24 new tokens
    python benchmarks/sampling_speed.py --num_samples 5 --questions 8
    python benchmarks/sampling_speed.py --repeats 3 --profile # medians of 3 interleaved runs; where a step's time goes

`--repeats N` runs ours and HF batched `generate` N times each, interleaved, and reports the median of each and of
their per-repeat ratios. `--profile` runs our sampler once more under `torch.profiler` and splits its wall time: the
matmuls of the projections and MLP (with the LM head), attention, logits processing and sampling, cache and row
bookkeeping (cat, index, copy), other operators, and the rest, Python and allocation between operators.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from common import print_machine, print_table

import torch


def load(model_name: str):
    from elical_hf.signals import HFBackend

    backend = HFBackend(model_name)
    backend.model.eval()
    return backend.model, backend.tokenizer


def questions_for(n: int) -> list[str]:
    from elical_hf.data.questions import load_bundled_questions

    half = (n + 1) // 2
    rows = load_bundled_questions("nq", half) + load_bundled_questions("hotpotqa", n - half)
    return [row["question"] for row in rows]


def generated_length(row: torch.Tensor, eos: set[int]) -> int:
    for i, token in enumerate(row.tolist()):
        if token in eos:
            return i + 1
    return len(row)


@contextlib.contextmanager
def concatenating_cache():
    """Our sampler as it was before the KV cache had reserved room (`reserve_positions` only repeats the prompt
    cache): the same outputs, each decoding step concatenating every layer's keys and values."""
    from elical_hf.signals import decoding

    reserve = decoding.reserve_positions
    decoding.reserve_positions = lambda cache, extra, repeats=1: repeats > 1 and cache.batch_repeat_interleave(repeats)
    try:
        yield
    finally:
        decoding.reserve_positions = reserve


@contextlib.contextmanager
def repeated_prefix():
    """Our sampler with the shared prompt prefix's KV cache always repeated for every row of the batch (never attended to
    apart, `elical_hf.models.prefix_attention`)."""
    from elical_hf.models import kv_prefix

    supports = kv_prefix.supports_prefix_attention
    kv_prefix.supports_prefix_attention = lambda model: False
    try:
        yield
    finally:
        kv_prefix.supports_prefix_attention = supports


@contextlib.contextmanager
def prefix_apart():
    """Our sampler with the prompt prefix always attended to apart (`elical_hf.models.prefix_attention`), even where the
    sampler repeats a short one (bf16 on a CPU: `decoding.REPEATED_PREFIX_MAX`)."""
    from elical_hf.signals import decoding

    longest = decoding.REPEATED_PREFIX_MAX
    decoding.REPEATED_PREFIX_MAX = -1
    try:
        yield
    finally:
        decoding.REPEATED_PREFIX_MAX = longest


def run_ours(model, tokenizer, questions, settings) -> dict:
    from elical_hf.signals import generate_answers

    start = time.perf_counter()
    records = generate_answers(model, tokenizer, questions, settings, progress=False)
    seconds = time.perf_counter() - start
    lengths = [len(s) for r in records for s in r["sampling_response"]]
    same = [s == r["greedy_response"] for r in records for s in r["sampling_response"]]
    return {"seconds": seconds, "tokens": sum(r["num_generated_tokens"] for r in records), "lengths": lengths,
            "same_as_greedy": statistics.mean(same),
            "texts": [[r["greedy_response"], *r["sampling_response"]] for r in records]}


def hf_batch(model, tokenizer, prompt_ids: list[list[int]], settings, num_return: int, sample: bool,
             scores: bool = True) -> torch.Tensor:
    """One left-padded `generate` call on `model`'s device: `num_return` samples per prompt, or the greedy answer
    (with its scores, as the signals need them, unless `scores=False`); the generated ids, prompt cut off."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    length = max(len(ids) for ids in prompt_ids)
    input_ids = torch.tensor([[pad] * (length - len(ids)) + ids for ids in prompt_ids], device=model.device)
    mask = torch.tensor([[0] * (length - len(ids)) + [1] * len(ids) for ids in prompt_ids], device=model.device)
    kwargs = dict(max_new_tokens=settings.max_new_tokens, pad_token_id=pad)
    if sample:
        kwargs.update(do_sample=True, num_return_sequences=num_return, temperature=settings.temperature,
                      top_p=settings.top_p, top_k=settings.top_k, repetition_penalty=settings.repetition_penalty)
    else:
        kwargs.update(do_sample=False, output_scores=scores, return_dict_in_generate=True, top_p=None, top_k=None,
                      temperature=None)
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
    sequences = out.sequences if not sample else out
    return sequences[:, length:]


def run_hf(model, tokenizer, questions, settings, per_sample: bool) -> dict:
    """HF `generate` over the same batches; `lengths` in question order (k per question)."""
    from elical_hf.signals.generation import build_prompt_ids

    eos = {tokenizer.eos_token_id, *([model.generation_config.eos_token_id] if isinstance(
        model.generation_config.eos_token_id, int) else model.generation_config.eos_token_id or [])}
    prompt_ids = build_prompt_ids(tokenizer, questions, settings)
    k, tokens, lengths, same = settings.num_samples, 0, [], []
    batch = 1 if per_sample else settings.batch_size
    torch.manual_seed(settings.seed)
    start = time.perf_counter()
    for begin in range(0, len(questions), batch):
        ids = prompt_ids[begin : begin + batch]
        greedy = hf_batch(model, tokenizer, ids, settings, 1, sample=False)
        if per_sample:
            rows = [hf_batch(model, tokenizer, ids, settings, 1, sample=True) for _ in range(k)]
            width = max(r.shape[1] for r in rows)
            samples = torch.cat([torch.nn.functional.pad(r, (0, width - r.shape[1]), value=tokenizer.eos_token_id)
                                 for r in rows])
        else:
            samples = hf_batch(model, tokenizer, ids, settings, k, sample=True)
        for q in range(len(ids)):
            g = greedy[q, : generated_length(greedy[q], eos)]
            greedy_text = tokenizer.decode(g, skip_special_tokens=True).strip()
            tokens += len(g)
            for row in samples[q * k : (q + 1) * k]:
                n = generated_length(row, eos)
                tokens += n
                text = tokenizer.decode(row[:n], skip_special_tokens=True).strip()
                lengths.append(len(text))
                same.append(text == greedy_text)
    return {"seconds": time.perf_counter() - start, "tokens": tokens, "lengths": lengths,
            "same_as_greedy": statistics.mean(same)}


def lengths_over_seeds(model, tokenizer, questions, settings, seeds: int) -> None:
    """Mean sample length (chars) of ours and of HF batched `generate` over `seeds` fresh seeds each, paired by
    question: the per-question mean over all seeds' samples, then the mean and 2 standard errors (over questions) of
    ours - HF. One seed's k samples per question share the question's answer length, so the naive standard error of
    one run's samples is too small; fresh seeds are what tells a systematic difference from draw noise."""
    from dataclasses import replace

    k = settings.num_samples
    per_question = {"ours": [[] for _ in questions], "hf": [[] for _ in questions]}
    for seed in range(1000, 1000 + seeds):
        seeded = replace(settings, seed=seed)
        ours, hf = run_ours(model, tokenizer, questions, seeded), run_hf(model, tokenizer, questions, seeded, False)
        for name, result in (("ours", ours), ("hf", hf)):
            for q in range(len(questions)):
                per_question[name][q].extend(result["lengths"][q * k : (q + 1) * k])
    means = {name: [statistics.mean(v) for v in values] for name, values in per_question.items()}
    diffs = [a - b for a, b in zip(means["ours"], means["hf"])]
    spread = 2 * statistics.stdev(diffs) / len(diffs) ** 0.5
    print(f"  sample length over {seeds} fresh seeds x {k} samples x {len(questions)} questions: ours "
          f"{statistics.mean(means['ours']):.1f} chars, HF {statistics.mean(means['hf']):.1f}; ours - HF per question "
          f"{statistics.mean(diffs):+.1f} ± {spread:.1f} (2 s.e. over questions)")


def flop_share(model, tokenizer, questions, settings, result, gflops: float) -> float:
    """Achieved share of the measured matmul ceiling of the model's dtype: 2 x matmul parameters per processed token
    (prefill + decode)."""
    from elical_hf.signals.generation import build_prompt_ids

    lm_head = model.get_output_embeddings().weight.numel()
    body = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    prefill = sum(len(ids) for ids in build_prompt_ids(tokenizer, questions, settings))
    flops = 2 * body * (prefill + result["tokens"]) + 2 * lm_head * result["tokens"]  # the LM head: new tokens only
    return flops / result["seconds"] / 1e9 / gflops


def interleaved(model, tokenizer, questions, settings, repeats: int) -> tuple[dict, dict, list[float]]:
    """Ours and HF batched `generate`, `repeats` times each in turn: each with its median seconds, and the ratios of
    their speeds per repeat."""
    ours, hf = [], []
    for _ in range(repeats):
        ours.append(run_ours(model, tokenizer, questions, settings))
        hf.append(run_hf(model, tokenizer, questions, settings, per_sample=False))
    ratios = [(a["tokens"] / a["seconds"]) / (b["tokens"] / b["seconds"]) for a, b in zip(ours, hf)]

    def median_run(runs: list[dict]) -> dict:
        return {**runs[0], "seconds": statistics.median(r["seconds"] for r in runs)}

    return median_run(ours), median_run(hf), ratios


PROFILE_GROUPS = {
    "matmuls (projections, MLP, LM head)": ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul",
                                             "aten::_mkldnn", "mkldnn"),
    "attention": ("scaled_dot_product", "attention", "aten::_flash", "aten::baddbmm"),
    "logits processing and sampling": ("softmax", "topk", "sort", "cumsum", "searchsorted", "aten::rand", "argmax",
                                       "gather", "masked_fill", "multinomial", "aten::div", "log_softmax"),
    "cache and row bookkeeping": ("aten::cat", "aten::index", "aten::copy_", "aten::repeat", "aten::slice",
                                  "index_select", "aten::clone", "aten::contiguous", "aten::narrow"),
}


def profile_ours(model, tokenizer, questions, settings) -> None:
    """Our sampler once under `torch.profiler`: the wall time split by operator group (self CPU time of each
    operator, a group by the first name fragment it matches), the rest being Python and allocation between them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        run_ours(model, tokenizer, questions, settings)
        wall = time.perf_counter() - start
    groups = dict.fromkeys([*PROFILE_GROUPS, "other operators"], 0.0)
    for event in prof.key_averages():
        name = event.key
        group = next((g for g, parts in PROFILE_GROUPS.items() if any(p in name for p in parts)), "other operators")
        groups[group] += event.self_cpu_time_total / 1e6
    # the profiler's own overhead inflates the wall time a little: shares are of the profiled run
    rows = [[group, round(seconds, 2), f"{seconds / wall:.0%}"] for group, seconds in groups.items()]
    rest = wall - sum(groups.values())
    rows.append(["Python and allocation between operators (the rest)", round(rest, 2), f"{rest / wall:.0%}"])
    print(f"k={settings.num_samples}: where our sampler's time goes ({wall:.1f} s profiled, batches of "
          f"{settings.batch_size} questions):")
    print_table(["part", "seconds", "share"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    parser.add_argument("--num_samples", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--loop_questions", type=int, default=4)
    parser.add_argument("--max_new_tokens", type=int, default=24)
    parser.add_argument("--batch_size", type=int, default=None, help="questions per batch; default: automatic")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs of ours and HF batched (medians)")
    parser.add_argument("--profile", action="store_true", help="profile one run of our sampler (torch.profiler)")
    parser.add_argument("--length_seeds", type=int, default=0,
                        help="also compare sample lengths, ours vs HF batched, over this many fresh seeds (paired by "
                             "question); 0: skip")
    args = parser.parse_args(argv)

    from elical_hf.models.default_model import DEFAULT_MODEL
    from elical_hf.signals import SamplingSettings
    from elical_hf.signals.decoding import auto_batch_size

    machine = print_machine()
    model, tokenizer = load(args.model or DEFAULT_MODEL)
    print(f"Model {args.model or DEFAULT_MODEL} in {model.dtype}; {args.questions} NQ/HotpotQA questions, "
          f"{args.max_new_tokens} new tokens; paper sampling settings; the same batches for ours and HF batched.\n")
    questions = questions_for(args.questions)
    rows = []
    for k in args.num_samples:
        batch = args.batch_size or auto_batch_size(k + 1)
        settings = SamplingSettings(num_samples=k, max_new_tokens=args.max_new_tokens, batch_size=batch)
        run_ours(model, tokenizer, questions[:2], settings)  # warm-up
        ours, batched, ratios = interleaved(model, tokenizer, questions, settings, args.repeats)
        if args.repeats > 1:
            print(f"k={k}: ours / HF batched over {args.repeats} interleaved runs: "
                  f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}x "
                  f"(the table's rows use the median seconds of each)")
        if args.profile:
            profile_ours(model, tokenizer, questions, settings)
        with repeated_prefix():
            repeated = run_ours(model, tokenizer, questions, settings)
        with prefix_apart():
            apart = run_ours(model, tokenizer, questions, settings)
        with concatenating_cache():
            concat = run_ours(model, tokenizer, questions, settings)
        results = {"ours": ours, "repeated": repeated, "apart": apart, "concat": concat, "hf": batched}
        if args.loop_questions:
            results["loop"] = run_hf(model, tokenizer, questions[: args.loop_questions], settings, per_sample=True)
        speed = {name: r["tokens"] / r["seconds"] for name, r in results.items()}
        ceiling_dtype = "bf16" if model.dtype == torch.bfloat16 else "fp32"
        ceiling = machine[f"{ceiling_dtype}_gflops"]
        share = flop_share(model, tokenizer, questions, settings, ours, ceiling)
        labels = {"ours": "ours (generate_answers)",
                  "repeated": "ours, prompt prefix's KV cache repeated per row",
                  "apart": "ours, prompt prefix attended to apart (cascade attention)",
                  "concat": "ours, KV cache grown by torch.cat (before both)",
                  "hf": "HF generate(num_return_sequences=k) + greedy",
                  "loop": f"HF per-sample generate loop ({args.loop_questions} q)"}
        for name, result in results.items():
            label = labels[name]
            lengths = result["lengths"]
            spread = 2 * statistics.stdev(lengths) / len(lengths) ** 0.5
            rows.append([k, label, round(speed[name], 1), round(speed["ours"] / speed[name], 2),
                         f"{statistics.mean(lengths):.1f} ± {spread:.1f}", round(result["same_as_greedy"], 3)])
        print(f"k={k}: identical answers with the prefix repeated: {ours['texts'] == repeated['texts']}, apart: "
              f"{ours['texts'] == apart['texts']}, with the "
              f"cache grown by torch.cat: {ours['texts'] == concat['texts']}.")
        print(f"k={k}, batches of {batch} questions: our sampler reaches {share:.1%} of the measured {ceiling_dtype} "
              f"matmul ceiling ({ceiling} GFLOP/s).")
        if args.length_seeds:
            lengths_over_seeds(model, tokenizer, questions, settings, args.length_seeds)
    print()
    print_table(["k", "method", "tokens/s", "ours / this", "sample chars (mean ± 2 s.e.)", "samples = greedy"], rows)


if __name__ == "__main__":
    main()
