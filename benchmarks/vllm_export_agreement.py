"""`elical-hf export` served by a real vLLM: does the pooling runner give `AutoModelForConfidence`'s confidence?

Starts vLLM's CPU build (`build/vllm-venv`, `make vllm-venv`) twice, with `--runner pooling` (tests/vllm_server.py's
settings): on the shipped two-stage demo model (SmolLM2-135M-Instruct) exported `--form merged`, and on the base model
exported `--form base` with two classification LoRA adapters (`--form lora`: the demo model's, and a LoRA of seeded
random weights on every linear layer, since the demo model's LoRA is off). Scores `--questions` bundled questions of
each of nq and pararel through `POST /classify` (prompt token ids rendered by `export_prompt_ids`) and compares with
`AutoModelForConfidence.confidence` in float32: the largest and median absolute difference, and the answer/abstain
decisions at the demo model's saved threshold. Writes docs/results/export_agreement.json:

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


def agreement(served: list[float], ours: list[float], threshold: float | None) -> dict:
    differences = [abs(a - b) for a, b in zip(served, ours)]
    row = {"questions": len(ours), "max_abs_difference": max(differences),
           "median_abs_difference": statistics.median(differences)}
    if threshold is not None:
        row["same_decisions"] = sum((a >= threshold) == (b >= threshold) for a, b in zip(served, ours))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=32, help="Questions per dataset (nq, pararel).")
    parser.add_argument("--output", default=os.path.join(REPO, "docs", "results", "export_agreement.json"))
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO)
    os.environ.setdefault("ELICAL_HF_CPU_BF16", "0")  # our side in float32, as vLLM serves
    from common import print_machine

    from elical_hf import AutoModelForConfidence
    from elical_hf.utils.atomic import atomic_write_json
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.demo import DEMO_CALIBRATED
    from elical_hf.publishing.export import export_confidence_model, export_prompt_ids
    from tests.vllm_server import classify, exported_demo_model, random_lora_model, vllm_server

    machine = print_machine()
    questions = [row["question"] for name in ("nq", "pararel")
                 for row in load_bundled_questions(name, limit=args.questions)]
    demo = AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32")
    threshold = demo.confidence_config.decision_threshold
    ours = {"demo": demo.confidence(questions)}
    lora = random_lora_model()
    ours["random_lora"] = lora.confidence(questions)
    result = {"cpu": machine["cpu"], "flags": machine["flags"], "dtype": "float32", "threshold": threshold}
    with tempfile.TemporaryDirectory() as scratch:
        merged = exported_demo_model(os.path.join(scratch, "merged"))
        ids = export_prompt_ids(questions, merged)
        server = vllm_server(merged, "confidence", "--runner", "pooling")
        try:
            result["merged"] = agreement(classify(server.url, "confidence", ids), ours["demo"], threshold)
        finally:
            server.stop()
        base = export_confidence_model(lora, os.path.join(scratch, "base"), form="base")
        adapters = {"demo": exported_demo_model(os.path.join(scratch, "demo-lora"), form="lora"),
                    "random_lora": export_confidence_model(lora, os.path.join(scratch, "lora"), form="lora")}
        server = vllm_server(base, "base", "--runner", "pooling", "--enable-lora", "--max-lora-rank", "8",
                             "--lora-modules", *(f"{name}={folder}" for name, folder in adapters.items()))
        try:
            result["lora"] = {name: agreement(classify(server.url, name, export_prompt_ids(questions, folder)),
                                              ours[name], threshold if name == "demo" else None)
                              for name, folder in adapters.items()}
            result["lora"]["base_alone"] = sorted(set(classify(server.url, "base", ids[:4])))
        finally:
            server.stop()
    print(json.dumps(result, indent=1))
    atomic_write_json(args.output, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
