"""Do my numbers change in bf16? float32 vs bfloat16 side by side on the real model and the committed test records.

One run, the same questions in both dtypes (weights loaded in each dtype explicitly, whatever the policy picks here):
- sampling (greedy + k samples, paper settings): the share of identical greedy answers, of identical greedy
  correctness (gold-alias `has_answer`), the share equal to the committed float32 records, and tokens/s of each;
- the shipped stage-1 model (Eli-Only) and a head calibrated on the same labels in each dtype (as the demo does, from
  cached features): max / mean |confidence(bf16) - confidence(fp32)|, in-domain AUROC of each against the committed
  greedy correctness, and the paired bootstrap interval of AUROC(bf16) - AUROC(fp32).

On a CPU without native bf16, the bf16 half is emulated and several times slower (the table says so in its speed
row); the agreement figures are what they are on any CPU.

    python benchmarks/precision_agreement.py                      # 32 sampled questions, 400 scored, 100 labels
    python benchmarks/precision_agreement.py --sample_questions 8 --test_questions 40 --num_labels 40
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import warnings

from common import print_machine, print_table

import torch


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
IN_DOMAIN = "in-domain avg"


def sample_both(model_name: str, records: list[dict], num_samples: int, max_new_tokens: int) -> dict[str, dict]:
    from elical_hf.signals import HFBackend, SamplingSettings, generate_answers

    settings = SamplingSettings(num_samples=num_samples, max_new_tokens=max_new_tokens)
    questions = [r["question"] for r in records]
    out = {}
    for name, dtype in DTYPES.items():
        backend = HFBackend(model_name, dtype=dtype, autocast_dtype=None)
        generate_answers(backend.model, backend.tokenizer, questions[:2], settings, progress=False)  # warm-up
        start = time.perf_counter()
        results = generate_answers(backend.model, backend.tokenizer, questions, settings, progress=False)
        seconds = time.perf_counter() - start
        out[name] = {"results": results, "tokens_s": sum(r["num_generated_tokens"] for r in results) / seconds}
        del backend
    return out


def confidences_both(stage1: str, test: list[dict], labels: list[dict], epochs: int, learning_rate: float,
                     seed: int) -> dict[str, dict[str, list[float]]]:
    """Eli-Only and a head calibrated on `labels` (cached features, as the demo), in each dtype."""
    from transformers import set_seed

    from elical_hf import AutoModelForConfidence, calibrate_head
    from elical_hf.training.head_calibration import head_confidences

    test_q = [r["question"] for r in test]
    questions = list(dict.fromkeys(test_q + [r["question"] for r in labels]))
    out = {}
    for name, dtype in DTYPES.items():
        set_seed(seed)
        model = AutoModelForConfidence.from_pretrained(stage1, dtype=dtype)
        start = time.perf_counter()
        cache = dict(zip(questions, model.prompt_features(questions, batch_size=32, progress=False)))
        feature_seconds = time.perf_counter() - start

        eli_only = head_confidences(model, cache, test_q)
        calibrate_head(model, labels, dev_fraction=0.0, seed=seed, features=cache, num_train_epochs=epochs,
                       learning_rate=learning_rate)
        out[name] = {"Eli-Only": eli_only, "EliCal (head)": head_confidences(model, cache, test_q),
                     "feature_seconds": feature_seconds}
        del model, cache
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    parser.add_argument("--stage1_model", default=None, help="default: the shipped stage-1 adapter")
    parser.add_argument("--records", default=None, help="default: the demo's committed judged records")
    parser.add_argument("--sample_questions", type=int, default=32)
    parser.add_argument("--num_samples", type=int, default=4)
    parser.add_argument("--max_new_tokens", type=int, default=24)
    parser.add_argument("--test_questions", type=int, default=400)
    parser.add_argument("--num_labels", type=int, default=100)
    parser.add_argument("--head_epochs", type=int, default=50)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", default=None, help="also write the machine and the table's figures as JSON here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="The alignment threshold")  # small datasets at --test_questions < 100

    from elical_hf.models.default_model import DEFAULT_MODEL
    from elical_hf.demo import DEMO_RECORDS, DEMO_STAGE1
    from elical_hf.evaluation.tables import evaluate_table, paired_differences
    from elical_hf.signals import load_records, training_columns
    from elical_hf.signals.lexical_judge import has_answer

    machine = print_machine()
    model_name, stage1 = args.model or DEFAULT_MODEL, args.stage1_model or DEMO_STAGE1
    records = load_records(args.records or DEMO_RECORDS, derive=False, splits=True).to_list()
    test = [r for r in records if r["paper_split"] == "in_domain_test"]
    train = [r for r in records if r["paper_split"] == "train"]
    rng = random.Random(args.seed)
    rng.shuffle(test)
    test = sorted(test[: args.test_questions], key=lambda r: r["dataset"])
    labels = [{"question": r["question"], **training_columns(r)} for r in rng.sample(train, args.num_labels)]
    sampled = test[:: max(1, len(test) // args.sample_questions)][: args.sample_questions]
    print(f"{model_name}; {len(sampled)} questions sampled (greedy + {args.num_samples} samples, "
          f"{args.max_new_tokens} new tokens), {len(test)} in-domain test questions scored, {args.num_labels} labels; "
          f"stage 1: {stage1}.\n")

    runs = sample_both(model_name, sampled, args.num_samples, args.max_new_tokens)
    fp32, bf16 = (runs[name]["results"] for name in DTYPES)
    same = [a["greedy_response"] == b["greedy_response"] for a, b in zip(fp32, bf16)]
    correct = {name: [has_answer(r["greedy_response"], rec["answer"]) for r, rec in zip(runs[name]["results"], sampled)]
               for name in DTYPES}
    committed = {name: statistics.mean(r["greedy_response"] == rec["greedy_response"]
                                       for r, rec in zip(runs[name]["results"], sampled)) for name in DTYPES}

    scored = confidences_both(stage1, test, labels, args.head_epochs, args.learning_rate, args.seed)
    truth = [int(bool(r["greedy_correctness"])) for r in test]
    datasets, splits = [r["dataset"] for r in test], ["in_domain_test"] * len(test)
    rows = [
        ["greedy answers identical (fp32 vs bf16)", "", "", f"{statistics.mean(same):.1%}"],
        ["greedy correctness identical", "", "", f"{statistics.mean(a == b for a, b in zip(*correct.values())):.1%}"],
        ["greedy correct (has_answer)", f"{statistics.mean(correct['float32']):.1%}",
         f"{statistics.mean(correct['bfloat16']):.1%}", ""],
        ["greedy = committed records", f"{committed['float32']:.1%}", f"{committed['bfloat16']:.1%}", ""],
        ["sampler tokens/s", round(runs["float32"]["tokens_s"], 1), round(runs["bfloat16"]["tokens_s"], 1),
         f"bf16 / fp32 {runs['bfloat16']['tokens_s'] / runs['float32']['tokens_s']:.2f}x"],
        ["prompt features s", round(scored["float32"]["feature_seconds"], 1),
         round(scored["bfloat16"]["feature_seconds"], 1),
         f"bf16 / fp32 {scored['float32']['feature_seconds'] / scored['bfloat16']['feature_seconds']:.2f}x speed"],
    ]
    figures = {"machine": machine, "greedy_identical": statistics.mean(same),
               "greedy_correctness_identical": statistics.mean(a == b for a, b in zip(*correct.values())),
               "tokens_per_second": {name: runs[name]["tokens_s"] for name in DTYPES}, "methods": {}}
    for method in ("Eli-Only", "EliCal (head)"):
        a, b = scored["float32"][method], scored["bfloat16"][method]
        deltas = [abs(x - y) for x, y in zip(a, b)]
        table = evaluate_table(truth, datasets, splits, {"fp32": a, "bf16": b})
        diff = paired_differences(truth, datasets, splits, {"bf16": b, "fp32": a}, [("bf16", "fp32")],
                                  bootstrap=args.bootstrap, seed=args.seed)["bf16 − fp32"][IN_DOMAIN]
        low, high = diff["auroc_ci"]
        figures["methods"][method] = {"max_abs_delta": max(deltas), "mean_abs_delta": statistics.mean(deltas),
                                      "auroc": {"float32": table["fp32"][IN_DOMAIN]["auroc"],
                                                "bfloat16": table["bf16"][IN_DOMAIN]["auroc"]},
                                      "auroc_difference": diff["auroc"], "auroc_difference_ci": [low, high]}
        rows.append([f"{method}: max / mean abs Δ confidence", "", "",
                     f"{max(deltas):.4f} / {statistics.mean(deltas):.4f}"])
        rows.append([f"{method}: in-domain AUROC", round(table["fp32"][IN_DOMAIN]["auroc"], 2),
                     round(table["bf16"][IN_DOMAIN]["auroc"], 2), f"{diff['auroc']:+.2f} [{low:+.2f}, {high:+.2f}]"])
    print(f"Machine: {machine['cpu']}, flags {' '.join(machine['flags'])}; the policy picks {machine['policy_dtype']} "
          f"here.\n")
    print_table(["", "float32", "bfloat16", "bf16 vs fp32"], rows)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
