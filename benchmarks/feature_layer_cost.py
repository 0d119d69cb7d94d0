"""What stopping at a middle feature layer saves: scoring and a training step, final layer vs middle layer, one run.

Two fresh confidence models on the same base: one whose head reads the final layer (the paper's), one whose head reads
`--layer` (default: the middle of the backbone), which runs only the decoder blocks up to it and has a LoRA on those
blocks only (`elical_hf.models.feature_layer.stop_after_layer`). For each:

- score: `model.confidence(questions)` in batches of `--batch_size` (inference mode);
- train step: forward + backward of one batch of `--batch_size` questions with labels (LoRA + head trainable).

Seconds are medians over `--repeats` rounds in which the two models take turns (after one warm-up round). Peak
memory is measured on one more call of each, from a trimmed heap: on a GPU the allocated peak, on a CPU the peak
RSS (Linux's resettable high-water mark), each also shown above the memory held just before the call (weights and
all). Ratios are middle / final. A fresh LoRA is zero, so before timing the script checks that the middle model's
features equal the final model's `prompt_features(layer=...)`: the early stop reads the same state as a full pass.

    python benchmarks/feature_layer_cost.py                            # the embedded default (SmolLM2-135M), CPU
    python benchmarks/feature_layer_cost.py --model Qwen/Qwen2.5-7B-Instruct --layer 16 --device cuda
    python benchmarks/feature_layer_cost.py --tiny --repeats 1         # a random 4-layer model: the script runs
"""

from __future__ import annotations

import argparse
import tempfile

from common import interleaved_medians, print_machine, print_table
from gpu_common import load_kwargs, peak_memory, synchronize
from training_memory import rss_mib

import torch


def build_tiny_base(folder: str) -> str:
    """A random 4-layer Llama with the tests' tiny tokenizer, saved in `folder` (a checkout's `tests/tiny.py`)."""
    from tests.tiny import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    make_tiny_causal_lm(tokenizer, num_hidden_layers=4).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Base model (default: the embedded DEFAULT_MODEL).")
    parser.add_argument("--layer", type=int, default=None,
                        help="The middle feature layer (as `feature_layer`; default: half the backbone's depth).")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="A random 4-layer model instead of --model (no timing "
                        "worth reporting: it checks that the script runs).")
    args = parser.parse_args(argv)

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.data.encoding import encode_prompts, pad_batch
    from elical_hf.utils.memory import release_memory

    print_machine()
    with tempfile.TemporaryDirectory() as folder:
        name = build_tiny_base(folder) if args.tiny else args.model or DEFAULT_MODEL
        final = AutoModelForConfidence.from_pretrained(name, **load_kwargs(args.device))
        depth = final.feature_layer_index
        middle = AutoModelForConfidence.from_pretrained(name, feature_layer=args.layer or depth // 2,
                                                        **load_kwargs(args.device))
    layer = middle.feature_layer_index
    questions = [row["question"].strip() for row in load_bundled_questions("nq", args.questions)]
    dtype = final.get_input_embeddings().weight.dtype
    shown = "a random 4-layer Llama (--tiny)" if args.tiny else name
    print(f"{shown} ({dtype}, {args.device}): layer {layer} of {depth}; {len(questions)} NQ questions, batches of "
          f"{args.batch_size}.\n")
    difference = (middle.prompt_features(questions, batch_size=args.batch_size)
                  - final.prompt_features(questions, batch_size=args.batch_size, layer=layer)).abs().max().item()
    print(f"check: middle model's features vs the final model's output at layer {layer}: max |difference| "
          f"{difference:.2e}\n")

    tokenizer = final.tokenizer
    batch = pad_batch(encode_prompts(questions[: args.batch_size], tokenizer, final.confidence_config), tokenizer,
                      final.device)
    labels = torch.rand(len(batch["input_ids"]), generator=torch.Generator().manual_seed(0))

    def score(model: object) -> None:
        model.confidence(questions, batch_size=args.batch_size)
        synchronize(args.device)

    def train_step(model: object) -> None:
        model.train()
        model(**batch, labels=labels).loss.backward()
        model.zero_grad(set_to_none=True)
        synchronize(args.device)

    calls = {(task, which): (lambda fn=fn, model=model: fn(model))
             for task, fn in (("score", score), ("train step", train_step))
             for which, model in (("final", final), ("middle", middle))}
    times = interleaved_medians(calls, args.repeats)
    rows = []
    for key, call in calls.items():
        release_memory()
        synchronize(args.device)
        rest = torch.cuda.memory_allocated() / 2**20 if args.device.startswith("cuda") else rss_mib()
        with peak_memory(args.device) as peak:
            call()
        rows.append([*key, times[key], peak["mib"], peak["mib"] - rest])
    table = []
    for task in ("score", "train step"):
        (_, _, t_final, m_final, r_final), (_, _, t_middle, m_middle, r_middle) = [r for r in rows if r[0] == task]
        table.append([task, f"{t_final:.4f}", f"{t_middle:.4f}", f"{t_middle / t_final:.3f}", f"{m_final:.0f}",
                      f"{m_middle:.0f}", f"{r_final:.0f}", f"{r_middle:.0f}",
                      f"{r_middle / r_final:.3f}" if r_final > 0 else "n/a"])
    print_table(["what", f"s, layer {depth}", f"s, layer {layer}", "time ratio", "peak MiB, final", "peak MiB, middle",
                 "above rest, final", "above rest, middle", "above-rest ratio"], table)
    print(f"\nmemory: {peak['kind']}; ratios are layer {layer} / layer {depth} (blocks run: {layer} of {depth}).")


if __name__ == "__main__":
    main()
