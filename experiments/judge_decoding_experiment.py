"""How many LLM-judge verdicts change between our old judge decoding and the reference's?

The LLM correctness judge used to decode at most 16 new tokens without a repetition penalty; the reference decodes up
to 64 with penalty 1.05 (`infer_scripts/run_infer_consistency.sh:129-138,184-193`), today's default. A reply cut at 16
tokens can lose its verdict. This script judges the same records both ways with the same judge model (default: the
embedded SmolLM2, greedy) and counts, answer by answer (the greedy answer and every sample), the verdicts that differ.

Records: a seeded random subset of the committed replication's test records (`--num_records`, default 100: about 600
judged answers per decoding; every record takes ~6 judge calls). Writes `docs/results/llm_judge_decoding.json`:

    HF_HUB_OFFLINE=1 python experiments/judge_decoding_experiment.py --num_records 100
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "results")
DECODINGS = {"old (16 tokens, no penalty)": {"max_new_tokens": 16, "judge_repetition_penalty": 1.0},
             "reference (64 tokens, penalty 1.05)": {"max_new_tokens": 64, "judge_repetition_penalty": 1.05}}


def verdicts(record: dict) -> list:
    """The record's correctness verdicts: its greedy answer's, then each sample's."""
    return [record.get("greedy_correctness"), *list(record.get("sampling_correctness") or [])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=os.path.join(RESULTS, "honestybench-smollm2-135m"))
    parser.add_argument("--num_records", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judge_model", default=None, help="The LLM judge (default: the embedded SmolLM2).")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--output", default=os.path.join(RESULTS, "llm_judge_decoding.json"))
    args = parser.parse_args(argv)

    from elical_hf.utils.atomic import atomic_write_text
    from elical_hf.signals.judging import apply_judges
    from elical_hf.signals.records import load_records

    stored = [r for r in load_records(args.records, derive=False, split=["in_domain_test", "ood_test"]).to_list()]
    chosen = sorted(random.Random(args.seed).sample(range(len(stored)), min(args.num_records, len(stored))))
    judged, seconds = {}, {}
    for name, decoding in DECODINGS.items():
        records = [dict(stored[i]) for i in chosen]
        started = time.perf_counter()
        apply_judges(records, correctness="llm", judge_model=args.judge_model, batch_size=args.batch_size, **decoding)
        seconds[name] = round(time.perf_counter() - started, 1)
        judged[name] = [verdicts(r) for r in records]
    old, new = (judged[name] for name in DECODINGS)
    pairs = [(a, b) for row_a, row_b in zip(old, new) for a, b in zip(row_a, row_b)]
    greedy = [(row_a[0], row_b[0]) for row_a, row_b in zip(old, new)]
    result = {
        "records": os.path.relpath(args.records, REPO), "num_records": len(chosen), "seed": args.seed,
        "judge_model": args.judge_model or "the embedded SmolLM2-135M-Instruct", "decodings": DECODINGS,
        "seconds": seconds,
        "answers_judged": len(pairs),
        "verdicts_changed": sum(a != b for a, b in pairs),
        "greedy_verdicts_changed": sum(a != b for a, b in greedy),
        "correct_share": {name: sum(bool(v) for row in rows for v in row) / max(len(pairs), 1)
                          for name, rows in judged.items()},
        "changed": {"0 -> 1": sum(not a and bool(b) for a, b in pairs), "1 -> 0": sum(bool(a) and not b for a, b in pairs)},
    }
    atomic_write_text(args.output, json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "decodings"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
