"""How often do the two `has_answer` rules disagree on real answers? Counted on the committed replication records.

`has_answer` (the paper's reference rule: punctuation becomes a space, DPR tokens) and `has_answer_squad` (our earlier
rule: punctuation deleted, SQuAD normalization) both judge every greedy answer and every sampled answer of the records
against their gold aliases, through `judge_correctness`. The script prints, for greedy answers and for samples, how
many answers each rule alone calls correct, a few examples of each kind of disagreement, and whether the records'
stored `greedy_correctness` (judged when they were made) equals the SQuAD rule. Pure Python, no model; `docs/judges.md`
reports the numbers of the default run:

    python experiments/judge_rule_agreement.py
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from elical_hf.signals.lexical_judge import judge_correctness
from elical_hf.signals.records import load_records


RECORDS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "results",
                       "honestybench-smollm2-135m")
RULES = ("has_answer", "has_answer_squad")


def _pairs(reference: dict, squad: dict) -> dict[str, list[tuple[bool, bool, str]]]:
    """(reference verdict, SQuAD verdict, answer) for the greedy answer and each sample of one record."""
    greedy = [(reference["greedy_correctness"], squad["greedy_correctness"], str(reference.get("greedy_response")))]
    samples = zip(reference["sampling_correctness"] or [], squad["sampling_correctness"] or [],
                  reference.get("sampling_response") or [])
    return {"greedy": greedy, "samples": [(a, b, str(text)) for a, b, text in samples]}


def count_disagreements(records: list[dict[str, Any]], examples: int = 3) -> dict[str, Any]:
    """Judge `records` with both rules (on copies) and count, per kind of answer, where they agree and differ."""
    judged = {rule: [dict(record) for record in records] for rule in RULES}
    summaries = {rule: judge_correctness(judged[rule], method=rule) for rule in RULES}
    counts = {kind: {"answers": 0, "both_correct": 0, "only_reference": 0, "only_squad": 0, "both_wrong": 0}
              for kind in ("greedy", "samples")}
    directions = ("only_reference", "only_squad")
    shown: dict[str, list[dict[str, Any]]] = {f"{kind}/{key}": [] for kind in counts for key in directions}
    stored_equal = stored_total = 0
    for original, reference, squad in zip(records, judged["has_answer"], judged["has_answer_squad"]):
        if reference["greedy_correctness"] is None or squad["greedy_correctness"] is None:
            continue  # no usable gold alias under one of the rules
        if original.get("greedy_correctness") is not None:
            stored_total += 1
            stored_equal += original["greedy_correctness"] == squad["greedy_correctness"]
        for kind, pairs in _pairs(reference, squad).items():
            for ref, sq, text in pairs:
                key = {(True, True): "both_correct", (True, False): "only_reference",
                       (False, True): "only_squad", (False, False): "both_wrong"}[(ref, sq)]
                counts[kind]["answers"] += 1
                counts[kind][key] += 1
                if key in directions and len(shown[f"{kind}/{key}"]) < examples:
                    shown[f"{kind}/{key}"].append({"answer": text[:160], "gold": list(original["answer"])[:4]})
    for values in counts.values():
        values["disagree"] = values["only_reference"] + values["only_squad"]
        values["disagree_rate"] = values["disagree"] / values["answers"] if values["answers"] else float("nan")
    return {
        "records": len(records), "judge_summaries": summaries, "counts": counts, "examples": shown,
        "stored_greedy_correctness_equals_squad": f"{stored_equal}/{stored_total}",
    }


def markdown(result: dict[str, Any]) -> str:
    lines = ["| answers | judged | both correct | only `has_answer` | only `has_answer_squad` | both wrong | disagree |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for kind, c in result["counts"].items():
        lines.append(f"| {kind} | {c['answers']} | {c['both_correct']} | {c['only_reference']} | {c['only_squad']} | "
                     f"{c['both_wrong']} | {c['disagree']} ({100 * c['disagree_rate']:.2f}%) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="A records file or folder (default: the committed records).")
    parser.add_argument("--examples", type=int, default=3, help="Disagreements shown per direction.")
    args = parser.parse_args(argv)
    records = load_records(args.records, derive=False).to_list()  # as stored: they are judged again
    result = count_disagreements(records, examples=args.examples)
    print(markdown(result))
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
