"""Sampling and judging through a serving engine vs our Hugging Face sampler, and the paper's setting at those rates.

Starts a real vLLM (vLLM's CPU build in `build/vllm-venv`, `make vllm-venv`; tests/vllm_server.py) on the embedded
SmolLM2, or uses `--endpoint URL` (any OpenAI-compatible server serving `--served_model`), and measures on the same
bundled questions and settings (k samples, `--max_new_tokens`):

- sampling: answers/s and generated tokens/s through `OpenAIBackend` (`elical-hf sample --backend openai`) at
  `--max_concurrency`, and through `HFBackend` (our decoder, in this process);
- judging: semantic-consistency verdicts/s through the endpoint (`ChatEndpoint`), the paper's generated verdict (up to
  64 tokens, penalty 1.05) and the first-token log-probability verdict (`--judge_verdict logprob`), on the prompts of
  the records just sampled.

Each timing is the median of `--repeats` runs (the endpoint and the local sampler take turns). It then prints the
hours the paper's setting would take at these rates on this machine: sampling 560,000 questions x 21 answers = 11.76M
answers, judging 560,000 x 41 = 22.96M prompts (20 consistency + 21 correctness; identical prompts are judged once,
so this is an upper bound), and stage 1 on 560,000 questions from `--train_samples_per_s` (measure it with
`benchmarks/training_speed.py`).

    HF_HUB_OFFLINE=1 python benchmarks/endpoint_throughput.py --questions 32 --num_samples 20 --max_new_tokens 32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from common import print_machine, print_table


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER_QUESTIONS = 560_000
PAPER_ANSWERS = PAPER_QUESTIONS * 21
PAPER_JUDGE_PROMPTS = PAPER_QUESTIONS * 41


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", default=None, help="An OpenAI-compatible server (default: start vLLM here).")
    parser.add_argument("--served_model", default=None)
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--num_samples", type=int, default=20)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--max_concurrency", type=int, default=64)
    parser.add_argument("--judge_prompts", type=int, default=200, help="Consistency prompts judged per way.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train_samples_per_s", type=float, default=None,
                        help="Stage-1 training rate measured by benchmarks/training_speed.py, for the hours table.")
    parser.add_argument("--output", default=None, help="Also write the results as JSON here.")
    args = parser.parse_args(argv)

    sys.path.insert(0, REPO)
    from elical_hf import DEFAULT_MODEL
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.models.default_model import resolve_model_path
    from elical_hf.signals import HFBackend
    from elical_hf.signals.endpoint import ChatEndpoint
    from elical_hf.signals.llm_judge import consistency_prompt
    from elical_hf.signals.openai_backend import OpenAIBackend
    from elical_hf.signals.settings import SamplingSettings

    machine = print_machine()
    server = None
    if args.endpoint is None:
        from tests.vllm_server import vllm_server, why_not_here

        reason = why_not_here()
        if reason:
            print(f"No vLLM here: {reason}")
            return 1
        started = time.perf_counter()
        server = vllm_server(resolve_model_path(DEFAULT_MODEL)[0], DEFAULT_MODEL)
        print(f"vLLM started in {time.perf_counter() - started:.0f} s at {server.url}")
    url = args.endpoint or server.url
    try:
        names = ("nq", "hotpotqa", "squad", "pararel")
        per = -(-args.questions // len(names))
        questions = [r["question"] for n in names for r in load_bundled_questions(n, per)][: args.questions]
        settings = SamplingSettings(num_samples=args.num_samples, max_new_tokens=args.max_new_tokens)
        remote = OpenAIBackend(url, DEFAULT_MODEL, served_model=args.served_model or (DEFAULT_MODEL if server else None),
                               max_concurrency=args.max_concurrency)
        local = HFBackend(DEFAULT_MODEL)
        timings: dict[str, list[float]] = {"endpoint": [], "hf": []}
        tokens: dict[str, int] = {}
        records = None
        for _ in range(args.repeats):
            for name, backend in (("endpoint", remote), ("hf", local)):
                started = time.perf_counter()
                answers = backend.generate(questions, settings, progress=False)
                timings[name].append(time.perf_counter() - started)
                tokens[name] = sum(a["num_generated_tokens"] for a in answers)
                records = answers if name == "endpoint" else records
        answers_per_question = settings.num_samples + 1
        sampling = {name: {"seconds": statistics.median(values),
                           "answers_per_s": len(questions) * answers_per_question / statistics.median(values),
                           "tokens_per_s": tokens[name] / statistics.median(values)}
                    for name, values in timings.items()}

        prompts = [consistency_prompt(q, r["greedy_response"], s) for q, r in zip(questions, records)
                   for s in r["sampling_response"]][: args.judge_prompts]
        judge = ChatEndpoint(url, remote.name, max_concurrency=args.max_concurrency)
        judging: dict[str, list[float]] = {"generate": [], "logprob": []}
        for _ in range(args.repeats):
            for mode in judging:
                started = time.perf_counter()
                if mode == "generate":
                    judge.complete(prompts, max_new_tokens=64, progress=False, repetition_penalty=1.05)
                else:
                    judge.first_token_logprobs(prompts, progress=False)
                judging[mode].append(time.perf_counter() - started)
        verdicts = {mode: len(prompts) / statistics.median(values) for mode, values in judging.items()}
    finally:
        if server is not None:
            server.stop()

    print(f"\n{len(questions)} questions, k={settings.num_samples}, <= {settings.max_new_tokens} new tokens; "
          f"endpoint {url} at concurrency {args.max_concurrency}; medians of {args.repeats}")
    print_table(["sampling", "s", "answers / s", "generated tokens / s"],
                [[name, f"{v['seconds']:.1f}", f"{v['answers_per_s']:.1f}", f"{v['tokens_per_s']:.0f}"]
                 for name, v in sampling.items()])
    print_table(["judging (consistency prompts)", "verdicts / s"],
                [[f"endpoint, {mode}", f"{value:.1f}"] for mode, value in verdicts.items()])
    hours = [["sampling 11.76M answers", *(f"{PAPER_ANSWERS / v['answers_per_s'] / 3600:,.0f} h ({name})"
                                           for name, v in sampling.items())],
             *[[f"judging 22.96M prompts, {mode}", f"{PAPER_JUDGE_PROMPTS / value / 3600:,.0f} h (endpoint)", ""]
               for mode, value in verdicts.items()]]
    if args.train_samples_per_s:
        hours.append(["stage 1, 560k questions x 1 epoch",
                      f"{PAPER_QUESTIONS / args.train_samples_per_s / 3600:,.0f} h (training_speed.py rate)", ""])
    print("\nThe paper's setting at these rates, on this machine:")
    print_table(["step", "hours", ""], hours)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump({"machine": machine, "sampling": sampling, "verdicts_per_s": verdicts,
                       "questions": len(questions), "num_samples": settings.num_samples,
                       "max_new_tokens": settings.max_new_tokens, "judge_prompts": len(prompts)}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
