"""How far the option judge can be trusted on real multiple-choice answers: against hand labels, the LLM judge and the
reference code's letter rule.

On the MMLU records of `docs/results/mmlu-smollm2-135m` (SmolLM2-135M-Instruct's greedy answers to the bundled
subset), the option judge's verdict on each greedy answer is compared with:

- **hand labels** (`tests/data/option_judge_hand_labels.jsonl`): the option each answer commits to, read by a person
  (`null`: none, or several): 60 answers the judge's rules were refined on (`seen`), and 40 more labelled before
  the judge was run on them (`held_out`, the honest estimate);
- **the LLM judge**: the paper's correctness prompt, told the gold option as `B. <its text>`, with the embedded
  SmolLM2-135M-Instruct as judge (the judge every CPU run here has), on the first `--llm_limit` answers;
- **the reference code's rule**: `has_answer` of the gold letter (`docs/reference.md`): correct when the letter is a
  word of the answer, punctuation made spaces; the letter `A` is an English article, which its tokenizer removes, so
  the reference, which does not guard an alias left empty, counts *every* answer to a question whose gold is `A` as
  correct; also shown with that guard (elical-hf's `has_answer`).

Reported per judge: rows, agreement, Cohen's kappa and the share each judges correct. Writes `--output`:

    HF_HUB_OFFLINE=1 python experiments/option_judge_agreement.py
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import experiments_common
from judge_agreement import cohen_kappa


RECORDS = os.path.join(experiments_common.RESULTS, "mmlu-smollm2-135m", "records.parquet")
HAND_LABELS = os.path.join(experiments_common.ROOT, "tests", "data", "option_judge_hand_labels.jsonl")
OUTPUT = os.path.join(experiments_common.RESULTS, "option_judge_agreement.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="Option-judged multiple-choice records.")
    parser.add_argument("--hand_labels", default=HAND_LABELS, help="jsonl of {id, choice} read by a person.")
    parser.add_argument("--llm_limit", type=int, default=300, help="Greedy answers the LLM judge reads (file order).")
    parser.add_argument("--judge_model", default=None, help="The LLM judge (default: the embedded SmolLM2).")
    parser.add_argument("--output", default=OUTPUT, help="Where the agreement JSON goes.")
    return parser.parse_args(argv)


def reference_letter_rule(answer: str, gold: str, guard: bool) -> bool:
    """The reference's `has_answer([gold], answer)`: the gold letter's tokens as a run of the answer's; an alias left
    without tokens (the article `A`) matches every answer unless `guard`."""
    from elical_hf.signals.lexical_judge import contains_run, reference_tokens

    run = reference_tokens(gold)
    if not run:
        return not guard
    return contains_run(reference_tokens(answer), run)


def compare(option: list[bool], other: list[bool]) -> dict[str, Any]:
    n = len(option)
    return {"n": n, "agreement": 100 * sum(a == b for a, b in zip(option, other)) / n,
            "kappa": cohen_kappa(option, other), "option_correct": 100 * sum(option) / n,
            "other_correct": 100 * sum(other) / n}


def hand_label_check(records: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """The option judge's `greedy_choice` against the hand labels, per set of labels (`seen`: the answers its rules
    were refined on; `held_out`: labelled before the judge was run on them): how many agree, the ids that do not."""
    with open(path, encoding="utf-8") as handle:
        labels = [json.loads(line) for line in handle if line.strip()]
    by_id = {r["id"]: r for r in records}
    missing = sorted({row["id"] for row in labels} - set(by_id))
    if missing:
        raise SystemExit(f"{path} labels ids the records lack: {missing[:5]}")
    out: dict[str, Any] = {}
    for name in dict.fromkeys(row["set"] for row in labels):
        rows = [row for row in labels if row["set"] == name]
        differ = [row["id"] for row in rows if by_id[row["id"]].get("greedy_choice") != row["choice"]]
        out[name] = {"n": len(rows), "agree": len(rows) - len(differ), "differ": differ,
                     "no_choice_by_hand": sum(row["choice"] is None for row in rows)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from elical_hf.utils.atomic import atomic_write_text, json_text
    from elical_hf.settings.multiple_choice import gold_letter
    from elical_hf.signals.judging import apply_judges
    from elical_hf.signals.records import load_records

    args = parse_args(argv)
    records = load_records(args.records, derive=False).to_list()
    option = [bool(r["greedy_correctness"]) for r in records]
    golds = [gold_letter(r) for r in records]
    answers = [r["greedy_response"] for r in records]
    result: dict[str, Any] = {"records": os.path.relpath(args.records, experiments_common.ROOT)}
    result["reference_letter_rule"] = compare(option, [reference_letter_rule(a, g, False)
                                                       for a, g in zip(answers, golds)])
    result["letter_rule_guarded"] = compare(option, [reference_letter_rule(a, g, True)
                                                     for a, g in zip(answers, golds)])
    result["gold_is_A"] = 100 * sum(g == "A" for g in golds) / len(golds)
    result["hand_labels"] = hand_label_check(records, args.hand_labels)
    subset = [{key: r[key] for key in ("id", "question", "choices", "answer", "greedy_response")}
              for r in records[: args.llm_limit]]
    apply_judges(subset, "llm", None, judge_model=args.judge_model)
    result["llm_judge"] = {"judge": subset[0]["correctness_judge"],
                           **compare(option[: len(subset)], [bool(r["greedy_correctness"]) for r in subset])}
    atomic_write_text(args.output, json_text(result))
    print(json_text(result))
    return result


if __name__ == "__main__":
    main()
