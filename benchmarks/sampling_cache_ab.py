"""Our sampler with the KV cache's reserved room vs the old concatenating cache, alternated in one process.

Each round runs `generate_answers` once with each cache on the same 16 NQ/HotpotQA questions (float32 or bf16 as the
precision policy picks), checks that both give identical answers, and prints tokens/s per round and the ratio of the
medians. Alternating rounds keeps slow drifts of a shared machine out of the ratio.

    python benchmarks/sampling_cache_ab.py               # k = 5 and 20, 3 rounds
    python benchmarks/sampling_cache_ab.py --rounds 5 --num_samples 20
"""

from __future__ import annotations

import argparse
import statistics

from common import print_machine
from sampling_speed import concatenating_cache, load, questions_for, run_ours


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_samples", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=24)
    args = parser.parse_args(argv)

    from elical_hf.models.default_model import DEFAULT_MODEL
    from elical_hf.signals import SamplingSettings
    from elical_hf.signals.decoding import auto_batch_size

    print_machine()
    model, tokenizer = load(DEFAULT_MODEL)
    questions = questions_for(args.questions)
    for k in args.num_samples:
        settings = SamplingSettings(num_samples=k, max_new_tokens=args.max_new_tokens, batch_size=auto_batch_size(k + 1))
        run_ours(model, tokenizer, questions[:2], settings)  # warm-up
        speeds: dict[str, list[float]] = {"reserved": [], "concat": []}
        for _ in range(args.rounds):
            reserved = run_ours(model, tokenizer, questions, settings)
            with concatenating_cache():
                concat = run_ours(model, tokenizer, questions, settings)
            if reserved["texts"] != concat["texts"]:
                raise SystemExit(f"k={k}: the two caches gave different answers")
            speeds["reserved"].append(reserved["tokens"] / reserved["seconds"])
            speeds["concat"].append(concat["tokens"] / concat["seconds"])
        ratio = statistics.median(speeds["reserved"]) / statistics.median(speeds["concat"])
        print(f"k={k}: reserved room {[round(v) for v in speeds['reserved']]} tokens/s, torch.cat "
              f"{[round(v) for v in speeds['concat']]} tokens/s; identical answers; median ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
