"""The LLM judge's two ways of reading a verdict, on the same committed records: generated (the paper's: up to 64
tokens, repetition penalty 1.05, the reply parsed) vs first-token log-probabilities (`--judge_verdict logprob`: one
forward pass, P("certain") among the first reply tokens).

The semantic-consistency judge (what stage 1's target is made of) runs both ways with the same judge (default: the
embedded SmolLM2 in-process; `--judge_endpoint URL` for a server) on a seeded subset of the committed replication's
test records. Printed: the share of equal verdicts, the AUROC (x100) against greedy correctness of the consistency
target each gives (the mean verdict per question; for logprob also the mean P("certain"), the soft target), and the
time per 1,000 verdicts, alternated over `--repeats` rounds (median).

    HF_HUB_OFFLINE=1 python benchmarks/judge_verdict.py --num_records 100
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import time

from common import print_machine, print_table


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=os.path.join(REPO, "docs", "results", "honestybench-smollm2-135m"))
    parser.add_argument("--num_records", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judge_model", default=None, help="The LLM judge (default: the embedded SmolLM2).")
    parser.add_argument("--judge_endpoint", default=None, help="Judge through this OpenAI-compatible server.")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--output", default=None, help="Also write the results as JSON here.")
    args = parser.parse_args(argv)

    from elical_hf.metrics.functional import auroc
    from elical_hf.signals.judging import apply_judges, make_llm_judge
    from elical_hf.signals.records import load_records

    machine = print_machine()
    stored = [r for r in load_records(args.records, derive=False).to_list()
              if r.get("partition", "test") == "test" and r.get("sampling_response")]
    chosen = sorted(random.Random(args.seed).sample(range(len(stored)), min(args.num_records, len(stored))))
    base = [stored[i] for i in chosen]
    labels = [int(bool(r["greedy_correctness"])) for r in base]
    verdicts = sum(len(r["sampling_response"]) for r in base)
    judge = make_llm_judge(args.judge_model, args.judge_endpoint)  # loaded (or connected) once, outside the timings
    judge.complete(["Say certain."], max_new_tokens=1, progress=False)
    judged, seconds = {}, {"generate": [], "logprob": []}
    for _ in range(args.repeats):
        for mode in ("generate", "logprob"):
            records = copy.deepcopy(base)
            started = time.perf_counter()
            apply_judges(records, consistency="llm", complete=judge.complete,
                         first_token_logprobs=judge.first_token_logprobs, judge_model=judge.name,
                         batch_size=args.batch_size, judge_verdict=mode)
            seconds[mode].append(time.perf_counter() - started)
            judged[mode] = records
    hard = {mode: [[None if v is None else bool(v) for v in r["consistency_judgement"]] for r in records]
            for mode, records in judged.items()}
    pairs = [(a, b) for row_a, row_b in zip(hard["generate"], hard["logprob"]) for a, b in zip(row_a, row_b)]
    without = sum(b is None for _, b in pairs) / len(pairs)  # logprob: no verdict word among the first tokens
    decided = [(a, b) for a, b in pairs if b is not None]
    equal = sum(a == b for a, b in decided) / max(len(decided), 1)

    def mean(values):
        values = [float(v) for v in values if v is not None]
        return sum(values) / len(values) if values else 0.5

    targets = {
        "generate (verdicts)": [mean(r["consistency_judgement"]) for r in judged["generate"]],
        "logprob (verdicts)": [mean(r["consistency_judgement"]) for r in judged["logprob"]],
        "logprob (P(certain), soft)": [mean(r["consistency_probability"]) for r in judged["logprob"]],
    }
    per_1000 = {mode: 1000 * statistics.median(values) / verdicts for mode, values in seconds.items()}
    rows = []
    for name, values in targets.items():
        mode = name.split()[0]
        rows.append([name, f"{100 * auroc(values, labels):.1f}", f"{per_1000[mode]:.1f}"])
    print(f"\n{len(base)} records, {verdicts} consistency verdicts per way; logprob: no verdict word among the first "
          f"tokens for {100 * without:.1f}%; equal verdicts where it has one: {100 * equal:.1f}%; logprob is "
          f"{per_1000['generate'] / per_1000['logprob']:.1f}x faster per verdict")
    print_table(["consistency target", "AUROC vs greedy correctness", "s / 1,000 verdicts"], rows)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump({"machine": machine, "records": len(base), "verdicts": verdicts, "equal_share": equal, "no_verdict_share": without,
                       "auroc": {name: 100 * auroc(v, labels) for name, v in targets.items()},
                       "seconds_per_1000": per_1000}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
