"""`elical-hf export` served by a real vLLM: does the pooling runner give `AutoModelForConfidence`'s confidence?

Exports the shipped two-stage demo model (SmolLM2-135M-Instruct) in float32, starts vLLM's CPU build
(`build/vllm-venv`, `make vllm-venv`) on it with `--runner pooling` (tests/vllm_server.py's settings), scores
`--questions` bundled questions of each of nq and pararel through `POST /classify` (prompt token ids rendered by
`export_prompt_ids`), and compares with `AutoModelForConfidence.confidence` in float32: the largest and median absolute
difference, and the answer/abstain decisions at the saved threshold. Writes docs/results/export_agreement.json:

    HF_HUB_OFFLINE=1 python benchmarks/vllm_export_agreement.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=32, help="Questions per dataset (nq, pararel).")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "results", "export_agreement.json"))
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO)
    os.environ.setdefault("ELICAL_HF_CPU_BF16", "0")  # our side in float32, as vLLM serves
    from common import print_machine

    from elical_hf import AutoModelForConfidence
    from elical_hf.bundled import load_bundled_questions
    from elical_hf.demo import DEMO_CALIBRATED
    from elical_hf.export import EXPORT_CONFIG_NAME, export_prompt_ids
    from tests.vllm_server import classify, exported_demo_model, vllm_server

    machine = print_machine()
    questions = [row["question"] for name in ("nq", "pararel")
                 for row in load_bundled_questions(name, limit=args.questions)]
    ours = AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32").confidence(questions)
    with tempfile.TemporaryDirectory() as scratch:
        folder = exported_demo_model(os.path.join(scratch, "export"))
        with open(os.path.join(folder, EXPORT_CONFIG_NAME), encoding="utf-8") as handle:
            threshold = json.load(handle)["confidence_config"]["decision_threshold"]
        server = vllm_server(folder, "confidence", "--runner", "pooling")
        try:
            served = classify(server.url, "confidence", export_prompt_ids(questions, folder))
        finally:
            server.stop()
    differences = [abs(a - b) for a, b in zip(served, ours)]
    result = {"cpu": machine["cpu"], "flags": machine["flags"], "questions": len(questions), "dtype": "float32", "threshold": threshold,
              "max_abs_difference": max(differences), "median_abs_difference": statistics.median(differences),
              "same_decisions": sum((a >= threshold) == (b >= threshold) for a, b in zip(served, ours))}
    print(json.dumps(result, indent=1))
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
        handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
