"""Cost of one confidence at inference: the EliCal head vs the sampling baselines, side by side in one run.

- head: `model.confidence(questions)`, one forward pass over the question prompt (LoRA + head; a fresh model costs
  exactly what a trained one does);
- N-Prob: the greedy answer with its token log-probabilities (`complete_prompts` on the same prompt);
- Consis-Lex: greedy + k samples, then ROUGE-L between the greedy answer and each sample;
- Consis-Sem: greedy + k samples, then the all-MiniLM-L6-v2 embedding judge on each (greedy, sample) pair.
Seconds per question are medians over `--repeats` runs for the head and single runs for the sampling methods (they
take minutes); the ratio is each method's cost over the head's.

    python benchmarks/confidence_cost.py                   # 8 questions, k = 20, 32 new tokens
    python benchmarks/confidence_cost.py --questions 16 --num_samples 20 --max_new_tokens 64
"""

from __future__ import annotations

import argparse
import time

from common import median_seconds, print_machine, print_table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--num_samples", type=int, default=20)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.settings.prompts import QA_PROMPT
    from elical_hf.signals import (
        EmbeddingJudge, HFBackend, SamplingSettings, complete_prompts, generate_answers, lexical_consistency,
    )

    print_machine()
    questions = [row["question"] for row in load_bundled_questions("nq", args.questions)]
    model = AutoModelForConfidence.from_pretrained(DEFAULT_MODEL)
    print(f"{DEFAULT_MODEL} ({model.get_input_embeddings().weight.dtype}); {len(questions)} NQ questions; "
          f"k={args.num_samples}, at most {args.max_new_tokens} new tokens.\n")
    head = median_seconds(lambda: model.confidence(questions, batch_size=len(questions)), args.repeats)

    backend = HFBackend(DEFAULT_MODEL)  # the causal LM itself samples the baselines' answers
    base, tokenizer = backend.model, backend.tokenizer
    settings = SamplingSettings(num_samples=args.num_samples, max_new_tokens=args.max_new_tokens,
                                batch_size=len(questions))
    prompts = [QA_PROMPT.format(question=q) for q in questions]
    start = time.perf_counter()
    complete_prompts(base, tokenizer, prompts, args.max_new_tokens, len(questions), progress=False, share_prefix=False)
    greedy = time.perf_counter() - start

    start = time.perf_counter()
    records = generate_answers(base, tokenizer, questions, settings, progress=False)
    sampling = time.perf_counter() - start
    judge = EmbeddingJudge()
    judge.similarities(["warm up"], [["warm up"]])
    start = time.perf_counter()
    judge.judge_records([dict(r) for r in records], progress=False)
    embedding = time.perf_counter() - start
    start = time.perf_counter()
    lexical_consistency([dict(r) for r in records])
    rouge = time.perf_counter() - start

    n = len(questions)
    costs = [("EliCal head (one prefill)", head), ("N-Prob (greedy decode)", greedy),
             (f"Consis-Lex (k={args.num_samples} samples + ROUGE-L)", sampling + rouge),
             (f"Consis-Sem (k={args.num_samples} samples + embedding judge)", sampling + embedding)]
    print_table(["method", "seconds / question", "x head"],
                [[name, round(seconds / n, 4), round(seconds / head, 1)] for name, seconds in costs])


if __name__ == "__main__":
    main()
