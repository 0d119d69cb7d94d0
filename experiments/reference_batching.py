"""What the reference code's batched pooling does to a trained head's confidences.

The paper's reference code trains (batch 16) and evaluates (batch 1024) its head on right-padded batches and reads
the final hidden state at position `[:, -1]`, so every row but the longest of a batch is read at a pad slot.
elical-hf reads each prompt's last real token. This script scores the in-domain test questions of the demo records
(`elical_hf/resources/demo/records.parquet`, judged correctness) with the shipped stage-1 model (a trained LoRA +
head on SmolLM2-135M-Instruct) both ways:

- `batch 1`: elical-hf's confidences, which are also what the reference code computes one prompt at a time;
- `reference, batch B`: the same weights, right-padded batches of B prompts, pooled at `[:, -1]`.

It prints how far the reference's batched confidences are from the batch-1 ones and the AUROC of each, as markdown
(`docs/reference.md`, "Batched pooling in the reference code", quotes the default run):

    HF_HUB_OFFLINE=1 python experiments/reference_batching.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch

from elical_hf import AutoModelForConfidence
from elical_hf.demo import DEMO_RECORDS, DEMO_STAGE1
from elical_hf.training.head_calibration import confidence_head_module
from elical_hf.metrics.functional import auroc
from elical_hf.settings.precision import precision_report
from elical_hf.signals.judging import apply_judges
from elical_hf.signals.records import read_records


def reference_batched(model, questions: list[str], batch_size: int) -> list[float]:
    """The reference computation with `model`'s weights: right padding, the hidden state at `[:, -1]`."""
    inner = model.base_model.model  # the confidence model inside the PEFT wrapper (LoRA layers injected)
    backbone, head = getattr(inner, inner.base_model_prefix), confidence_head_module(model)
    tokenizer = model.tokenizer
    tokenizer.padding_side = "right"
    texts = [model.confidence_config.format_prompt(q, tokenizer) for q in questions]
    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start : start + batch_size], padding=True, add_special_tokens=False,
                              return_tensors="pt")
            hidden = backbone(**batch).last_hidden_state[:, -1]
            out += torch.sigmoid(head(hidden.to(head.weight.dtype))).squeeze(-1).float().tolist()
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEMO_STAGE1, help="A confidence model folder (default: the shipped one).")
    parser.add_argument("--records", default=DEMO_RECORDS, help="Judged records; their in-domain test rows are used.")
    parser.add_argument("--limit", type=int, default=400, help="Most test questions.")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[16, 64], help="Reference batch sizes.")
    parser.add_argument("--output", default=None, help="Also write the result as JSON here.")
    args = parser.parse_args(argv)

    records = [r for r in read_records(args.records) if r.get("partition") == "test"][: args.limit]
    apply_judges(records, correctness="has_answer")  # the paper's rule (the demo records store the SQuAD one)
    questions = [r["question"] for r in records]
    correct = [int(bool(r["greedy_correctness"])) for r in records]
    model = AutoModelForConfidence.from_pretrained(args.model).eval()
    ours = model.confidence(questions, batch_size=1, progress=True)
    rows = [{"scoring": "batch 1 (elical-hf at any batch size; the reference at batch 1)", "auroc": auroc(ours, correct),
             "max_abs_diff": 0.0, "median_abs_diff": 0.0, "share_diff_over_0.05": 0.0}]
    for size in args.batch_sizes:
        theirs = reference_batched(model, questions, size)
        diffs = [abs(a - b) for a, b in zip(ours, theirs)]
        rows.append({"scoring": f"reference, batch {size} (right padding, `[:, -1]`)", "auroc": auroc(theirs, correct),
                     "max_abs_diff": max(diffs), "median_abs_diff": statistics.median(diffs),
                     "share_diff_over_0.05": sum(d > 0.05 for d in diffs) / len(diffs)})
    result = {"model": args.model, "questions": len(questions), "precision": precision_report(), "rows": rows}
    lines = ["| scoring | AUROC x100 | max abs diff vs batch 1 | median abs diff | rows off by > 0.05 |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['scoring']} | {100 * r['auroc']:.1f} | {r['max_abs_diff']:.3f} | {r['median_abs_diff']:.3f} | "
              f"{100 * r['share_diff_over_0.05']:.0f}% |" for r in rows]
    print(f"{len(questions)} in-domain test questions, model {os.path.basename(args.model.rstrip('/'))}")
    print("\n".join(lines))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
