"""What a chat request's system prompt would do to the confidence, if the gate let it into the confidence prompt: the
measurement behind the gate's chat policy (`docs/serve.md`, "Chat-shaped requests").

The shipped two-stage demo model (SmolLM2-135M-Instruct) scores the 1,000 in-domain test questions of its committed
records (`resources/demo/records.parquet`) three ways: as trained (the saved prompt, no system message), and with two
typical system prompts put into the chat template before the question. The answers (and their correctness) stay the
records' own, so the AUROC differences are the confidence's sensitivity to the system prompt alone. The in-domain
average AUROC x100 (per dataset, weighted by its questions, as `evaluate_table` averages) with paired 95% bootstrap
intervals (`evaluation.paired_differences`, 1,000 resamples). Writes docs/results/system_prompt.json (with the
per-question confidences, from which the AUROCs recompute):

    HF_HUB_OFFLINE=1 python experiments/system_prompt_effect.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_PROMPTS = {
    "helpful": "You are a helpful assistant.",
    "concise": "You are a knowledgeable assistant. Answer the user's question accurately and concisely, in one "
               "sentence.",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "results", "system_prompt.json"))
    args = parser.parse_args(argv)
    from elical_hf import AutoModelForConfidence
    from elical_hf.utils.atomic import atomic_write_json
    from elical_hf.demo import DEMO_CALIBRATED, DEMO_RECORDS
    from elical_hf.evaluation.tables import evaluate_table, paired_differences
    from elical_hf.signals.records import load_records

    rows = [r for r in load_records(DEMO_RECORDS).to_list() if r["partition"] == "test"]
    questions = [r["question"] for r in rows]
    correct = [int(r["greedy_correctness"]) for r in rows]
    datasets, splits = [r["dataset"] for r in rows], ["in_domain_test"] * len(rows)
    model = AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32").get_base_model()
    trained = model.confidence_config
    confidences = {"as trained": model.confidence(questions, progress=True)}
    for name, system_prompt in SYSTEM_PROMPTS.items():
        model.confidence_config = dataclasses.replace(trained, system_prompt=system_prompt)
        confidences[name] = model.confidence(questions, progress=True)
    model.confidence_config = trained
    if any(confidences[name] == confidences["as trained"] for name in SYSTEM_PROMPTS):
        raise RuntimeError("A system prompt left every confidence unchanged: it was not in the prompts.")
    table = evaluate_table(correct, datasets, splits, confidences, bootstrap=args.bootstrap, seed=0)
    differences = paired_differences(correct, datasets, splits, confidences,
                                     [(name, "as trained") for name in SYSTEM_PROMPTS], bootstrap=args.bootstrap)
    result = {"model": "the shipped two-stage demo model (SmolLM2-135M-Instruct)", "questions": len(rows),
              "system_prompts": SYSTEM_PROMPTS, "auroc": {name: table[name]["in-domain avg"]["auroc"] for name in table},
              "differences": {pair: {"auroc": value["in-domain avg"]["auroc"],
                                     "auroc_ci": value["in-domain avg"]["auroc_ci"]}
                              for pair, value in differences.items()},
              "confidences": {name: [round(c, 6) for c in values] for name, values in confidences.items()}}
    print(json.dumps({key: value for key, value in result.items() if key != "confidences"}, indent=1))
    atomic_write_json(args.output, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
