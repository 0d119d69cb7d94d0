"""What the answer/abstain gate costs on top of plain greedy generation, measured side by side in one run.

- plain greedy: the base causal LM answers every question (`complete_prompts`, the sampler's decoding loop and
  answer prompt, greedy only, shared-prefix prefill);
- zero-overhead gate: `model.answer(...)` of a model without LoRA (`use_lora=False`): one prefill gives the
  confidence and the KV cache the answer decodes from;
- LoRA gate: `model.answer(...)` of a LoRA + head model (the shipped stage-1 adapter by default): a prefill with the
  LoRA for the confidence, then the base model's own prefill and decoding.
Every gate call uses threshold 0, so every question is answered and the gate's cost is all that differs (a real
threshold abstains on some questions, which then cost only their prefill). Seconds are medians over `--repeats`
rounds in which the methods take turns (after one warm-up round); the ratio is each method's time over plain
greedy's (targets: <= 1.05 zero-overhead, <= one extra prefill with LoRA; the extra prefill's own time is printed as
"prefill only").

    python benchmarks/gate_overhead.py                       # 32 NQ questions, 32 new tokens, 5 repeats
    python benchmarks/gate_overhead.py --questions 64 --max_new_tokens 64 --repeats 7
"""

from __future__ import annotations

import argparse
import os

from common import interleaved_medians, print_machine, print_table


STAGE1 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "elical_hf", "resources", "demo",
                      "stage1-smollm2-135m-instruct")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=None, help="Questions per batch (default: all of them).")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default=None, help="Base model (default: the embedded DEFAULT_MODEL).")
    parser.add_argument("--stage1", default=STAGE1, help="A saved LoRA + head model on that base.")
    args = parser.parse_args(argv)

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.settings.prompts import QA_PROMPT
    from elical_hf.signals import HFBackend, complete_prompts

    print_machine()
    name = args.model or DEFAULT_MODEL
    questions = [row["question"].strip() for row in load_bundled_questions("nq", args.questions)]
    batch = args.batch_size or len(questions)
    zero = AutoModelForConfidence.from_pretrained(name, use_lora=False)
    lora = AutoModelForConfidence.from_pretrained(args.stage1)
    backend = HFBackend(name)  # the causal LM itself, for plain greedy generation
    plain, tokenizer = backend.model, backend.tokenizer
    dtype = zero.get_input_embeddings().weight.dtype
    if plain.dtype != dtype:
        raise SystemExit(f"The causal LM loaded in {plain.dtype}, the confidence models in {dtype}: not comparable.")
    print(f"{name} ({dtype}); {len(questions)} NQ questions, batches of {batch}, at most {args.max_new_tokens} new "
          f"tokens; LoRA model: {args.stage1}.\n")

    prompts = [QA_PROMPT.format(question=q) for q in questions]
    options = {"threshold": 0.0, "max_new_tokens": args.max_new_tokens, "batch_size": batch}

    def greedy() -> list[str]:
        return complete_prompts(plain, tokenizer, prompts, args.max_new_tokens, batch, progress=False,
                                autocast_dtype=None)

    answers = greedy()
    for model in (zero, lora):  # the gate answers exactly what plain greedy answers
        gated = [r["answer"] for r in model.answer(questions, **options)]
        if gated != answers:
            raise SystemExit(f"{sum(a != b for a, b in zip(gated, answers))} gated answers differ from plain greedy.")
    times = interleaved_medians({  # the methods take turns in each round: drift in the machine's speed hits all
        "plain greedy generation": greedy,
        "zero-overhead gate (no LoRA)": lambda: zero.answer(questions, **options),
        "LoRA gate (LoRA + head)": lambda: lora.answer(questions, **options),
        "prefill only (LoRA confidence)": lambda: lora.confidence(questions, batch_size=batch),
    }, args.repeats)
    base = times["plain greedy generation"]
    print_table(["method", "seconds / question", "x plain greedy"],
                [[method, round(seconds / len(questions), 4), round(seconds / base, 3)] for method, seconds in times.items()])
    extra = (times["LoRA gate (LoRA + head)"] - base) / times["prefill only (LoRA confidence)"]
    print(f"\nzero-overhead gate: {times['zero-overhead gate (no LoRA)'] / base:.3f}x plain greedy (target <= 1.05); "
          f"LoRA gate: plain greedy + {extra:.2f} confidence prefills (target <= 1).")


if __name__ == "__main__":
    main()
