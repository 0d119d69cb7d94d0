"""How well does the embedding consistency judge agree with the lexical and the LLM judge? Chooses its threshold.

Generates real records (greedy answer + k samples) with SmolLM2-135M-Instruct on bundled real questions, judges every
(greedy, sample) pair three ways -- lexical (ROUGE-L F >= 0.5), LLM (the paper's semantic-equivalence prompt with
SmolLM2 itself as judge) and embedding (all-MiniLM-L6-v2 cosine) -- and reports, for each embedding threshold, the
accuracy and Cohen's kappa of the embedding judge against the other two. Writes `agreement.json` to `--output_dir`
and prints a Markdown table. Generated records and LLM verdicts are cached in `--output_dir`, so a rerun with the
same settings only recomputes the agreement. `docs/judges.md` reports the numbers of the default run:

    HF_HUB_OFFLINE=1 python experiments/judge_agreement.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import Counter

from elical_hf.utils.atomic import atomic_write_text
from elical_hf.data.questions import IN_DOMAIN, OUT_OF_DOMAIN, load_bundled_questions
from elical_hf.models.default_model import DEFAULT_MODEL
from elical_hf.signals.lexical_judge import normalize_answer


PROBES = [
    ("Paris", "It is Paris."),
    ("Paris", "Paris, France"),
    ("Paris", "London"),
    ("The capital of France is Paris.", "The capital of France is Lyon."),
    ("1945", "It ended in 1945."),
    ("1945", "1944"),
    ("William Shakespeare wrote Hamlet.", "Hamlet was written by Shakespeare."),
    ("Shakespeare", "Charles Dickens"),
]
"""Hand-made (greedy, sample) pairs whose cosines are reported next to the table, as a sanity check."""


def cohen_kappa(a: list[bool], b: list[bool]) -> float:
    """Cohen's kappa of two binary raters (NaN when chance agreement is 1, i.e. both always say the same thing)."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return float("nan") if chance >= 1 else (observed - chance) / (1 - chance)


def accuracy(a: list[bool], b: list[bool]) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/judge-agreement", help="Cache and results folder.")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="Answering model, also the LLM judge.")
    parser.add_argument("--per_dataset", type=int, default=22, help="Questions from each of the 7 bundled datasets.")
    parser.add_argument("--num_samples", type=int, default=4, help="Sampled answers per question (k).")
    parser.add_argument("--max_new_tokens", type=int, default=24, help="Longest answer in tokens.")
    parser.add_argument("--judge_max_new_tokens", type=int, default=16, help="Longest LLM judge reply in tokens.")
    parser.add_argument("--batch_size", type=int, default=16, help="Prompts per batch of the LLM judge.")
    parser.add_argument("--chunk_size", type=int, default=64, help="LLM judge prompts between two cache saves.")
    parser.add_argument("--lexical_threshold", type=float, default=0.5, help="Lexical judge: ROUGE-L F >= this.")
    parser.add_argument("--thresholds", default="0.5,0.55,0.6,0.65,0.7,0.75,0.8,0.85,0.9,0.95",
                        help="Comma-separated embedding thresholds to compare.")
    parser.add_argument("--seed", type=int, default=42, help="Sampling seed.")
    return parser.parse_args(argv)


def load_cache(path: str, key: dict):
    """The value stored in `path` when it was computed with the same settings (`key`), else `None`."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
        if stored.get("key") == key:
            return stored["value"]
    return None


def save_cache(path: str, key: dict, value) -> None:
    atomic_write_text(path, json.dumps({"key": key, "value": value}))


def main(argv: list[str] | None = None) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from elical_hf.models.default_model import resolve_model_path
    from elical_hf.utils.loading import load_pretrained
    from elical_hf.signals import HFBackend, SamplingSettings, generate_answers, lexical_consistency
    from elical_hf.signals.embedding_judge import EmbeddingJudge
    from elical_hf.signals.llm_judge import consistency_prompt, llm_consistency, parse_verdict

    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    start = time.perf_counter()
    loaded: dict = {}

    def model_and_tokenizer():
        if not loaded:
            path, source = resolve_model_path(args.model)
            loaded.update(model=load_pretrained(AutoModelForCausalLM.from_pretrained, path, weights=True),
                          tokenizer=load_pretrained(AutoTokenizer.from_pretrained, path))
            loaded["source"] = source
        return loaded["model"], loaded["tokenizer"]

    questions = [q for name in IN_DOMAIN + OUT_OF_DOMAIN for q in load_bundled_questions(name, args.per_dataset)]

    def generate():
        model, tokenizer = model_and_tokenizer()
        settings = SamplingSettings(num_samples=args.num_samples, max_new_tokens=args.max_new_tokens, seed=args.seed)
        answers = generate_answers(model, tokenizer, [q["question"] for q in questions], settings)
        return [{**q, **a} for q, a in zip(questions, answers)]

    gen_key = {k: getattr(args, k) for k in ("model", "per_dataset", "num_samples", "max_new_tokens", "seed")}
    records_path = os.path.join(args.output_dir, "records.json")
    records = load_cache(records_path, gen_key)
    if records is None:
        records = generate()
        save_cache(records_path, gen_key, records)

    pairs = [(r["question"], r["greedy_response"], s) for r in records for s in r["sampling_response"]]

    # The LLM judge: `llm_consistency` with SmolLM2 as judge. Its completion function answers from a cache of
    # replies (prompt -> reply), saved after every chunk of prompts so an interrupted run resumes where it stopped.
    llm_key = {**gen_key, **{k: getattr(args, k) for k in ("judge_max_new_tokens", "batch_size", "chunk_size")}}
    replies_path = os.path.join(args.output_dir, "llm_replies.json")
    cache = load_cache(replies_path, llm_key) or {}

    def complete(prompts: list[str], **options) -> list[str]:
        missing = [p for p in dict.fromkeys(prompts) if p not in cache]
        if missing:
            model, tokenizer = model_and_tokenizer()
            backend = HFBackend(model, tokenizer)
        for begin in range(0, len(missing), args.chunk_size):
            chunk = missing[begin : begin + args.chunk_size]
            print(f"LLM judge: {len(cache)} of {len(cache) + len(missing) - begin} prompts done")
            cache.update(zip(chunk, backend.complete(chunk, **options)))
            save_cache(replies_path, llm_key, cache)
        return [cache[p] for p in prompts]

    judged = [dict(r) for r in records]
    llm_summary = llm_consistency(
        judged, complete, batch_size=args.batch_size, max_new_tokens=args.judge_max_new_tokens, judge_model=args.model
    )
    replies = [cache[consistency_prompt(q, g, s)] for q, g, s in pairs]

    lexical_consistency(records)
    rouge = [x for r in records for x in r["consistency_lexical"]]
    lexical = [x >= args.lexical_threshold for x in rouge]
    llm = [bool(v) for r in judged for v in r["consistency_judgement"]]
    llm_strict = [parse_verdict(x, strict=True) for x in replies]
    embedder = EmbeddingJudge()
    cosines = [x for row in embedder.similarities(
        [r["greedy_response"] for r in records], [r["sampling_response"] for r in records]) for x in row]
    distinct = [normalize_answer(g) != normalize_answer(s) for _, g, s in pairs]  # not trivially equal
    probe_scores = embedder.similarities([a for a, _ in PROBES], [[b] for _, b in PROBES])

    rows = []
    for threshold in [float(t) for t in args.thresholds.split(",")]:
        emb = [c >= threshold for c in cosines]
        emb_d, lex_d = [e for e, d in zip(emb, distinct) if d], [x for x, d in zip(lexical, distinct) if d]
        rows.append({
            "threshold": threshold,
            "positive_rate": sum(emb) / len(emb),
            "acc_lexical": accuracy(emb, lexical),
            "kappa_lexical": cohen_kappa(emb, lexical),
            "kappa_lexical_distinct": cohen_kappa(emb_d, lex_d) if emb_d else float("nan"),
            "acc_llm": accuracy(emb, llm),
            "kappa_llm": cohen_kappa(emb, llm),
        })
    best = max(rows, key=lambda row: (-1 if math.isnan(row["kappa_lexical"]) else row["kappa_lexical"]))
    parsed = [(v, x) for v, x in zip(llm_strict, lexical) if v is not None]
    result = {
        "settings": vars(args),
        "weights_source": loaded.get("source", "cached records"),
        "questions": len(records),
        "pairs": len(pairs),
        "distinct_pairs": sum(distinct),
        "lexical_positive_rate": sum(lexical) / len(lexical),
        "llm": {
            "positive_rate": sum(llm) / len(llm),
            "summary": llm_summary,
            "strict_unparseable": sum(v is None for v in llm_strict),
            "acc_lexical": accuracy(llm, lexical),
            "kappa_lexical": cohen_kappa(llm, lexical),
            "strict_kappa_lexical_on_parsed": cohen_kappa(*map(list, zip(*parsed))) if parsed else float("nan"),
            "most_common_replies": Counter(replies).most_common(8),
        },
        "table": rows,
        "probes": [[a, b, round(row[0], 3)] for (a, b), row in zip(PROBES, probe_scores)],
        "chosen_threshold": best["threshold"],
        "rule": "threshold with the highest Cohen's kappa against the lexical judge",
        "seconds": round(time.perf_counter() - start, 1),
    }
    with open(os.path.join(args.output_dir, "agreement.json"), "w", encoding="utf-8") as handle:
        json.dump(_finite(result), handle, indent=2)
    print(markdown(result))
    return result


def _finite(value):
    """`value` with NaN floats replaced by `None` (strict JSON)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def markdown(result: dict) -> str:
    def f(x: float) -> str:
        return "n/a" if x is None or math.isnan(x) else f"{x:.3f}"

    lines = [
        f"{result['questions']} questions, {result['pairs']} (greedy, sample) pairs "
        f"({result['distinct_pairs']} not identical after normalization). Lexical judge positive rate "
        f"{f(result['lexical_positive_rate'])}; LLM judge positive rate {f(result['llm']['positive_rate'])}, "
        f"kappa vs lexical {f(result['llm']['kappa_lexical'])}, replies never saying certain/uncertain "
        f"{result['llm']['summary']['never_certain']}/{result['pairs']}.",
        "",
        "| threshold | embedding positive rate | acc vs lexical | kappa vs lexical | kappa vs lexical (non-identical) "
        "| acc vs LLM | kappa vs LLM |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["table"]:
        mark = " **(chosen)**" if row["threshold"] == result["chosen_threshold"] else ""
        lines.append(
            f"| {row['threshold']:.2f}{mark} | {f(row['positive_rate'])} | {f(row['acc_lexical'])} | "
            f"{f(row['kappa_lexical'])} | {f(row['kappa_lexical_distinct'])} | {f(row['acc_llm'])} | "
            f"{f(row['kappa_llm'])} |"
        )
    lines += ["", "| greedy | sample | cosine |", "|---|---|---:|"]
    lines += [f"| {a} | {b} | {cosine:.3f} |" for a, b, cosine in result["probes"]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
