"""Peak memory of building the elicitation training table from HonestyBench-sized records (560k questions, k=20).

    python benchmarks/data_scale.py                              # 560,000 records, 20 samples each (the paper's)
    python benchmarks/data_scale.py --num_records 2000 --samples 4   # a smoke run

1. Writes synthetic records in the official HonestyBench jsonl shape (wrapped `greedy_response` / `greedy_tokens` /
   `greedy_logprobs`, 0/1 correctness, k samples with their correctness and consistency judgements), spread over
   the five in-domain train sets, as `<workdir>/records/Qwen2.5-7B-Instruct/<dataset>_train.jsonl`; streamed, so
   the writer holds one batch at a time.
2. In a fresh Python process, builds the elicitation table the way `elical-hf train` gets it: `load_honestybench`
   (streamed into memory-mapped Arrow), the `question` / `consistency` / `correctness` columns, the dev split by
   question (`split_dev`), validation, and (unless `--no_tokenize`) tokenization with the embedded default model's
   tokenizer and chat template. That process's peak RSS is the figure, against the 4 GiB target.

One run; memory, not speed (the seconds printed are for orientation only). The workdir is removed afterwards
unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from common import peak_rss_mib, print_table


DATASETS = ("nq", "triviaqa", "hotpotqa", "2wikimultihopqa", "pararel")
MODEL = "Qwen2.5-7B-Instruct"
WORDS = ("who", "wrote", "the", "capital", "of", "river", "king", "born", "year", "film", "team", "city", "first")


def synthetic_record(i: int, samples: int) -> dict:
    """Record `i` in the official HonestyBench shape, with a question no other record has."""
    words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(8))
    tokens = ["The", " answer", " is", f" {i % 997}", "."]
    logprobs = [-0.05 * (j + 1) for j in range(len(tokens))]
    return {
        "question": f"{words} number {i}?",
        "answer": [f"{i % 997}", f"answer {i % 997}"],
        "greedy_response": ["".join(tokens)],
        "greedy_correctness": i % 2,
        "greedy_tokens": [tokens],
        "greedy_cumulative_logprobs": [sum(logprobs)],
        "greedy_logprobs": [logprobs],
        "sampling_response": [f"The answer is {(i + j) % 997}, I think." for j in range(samples)],
        "sampling_correctness": [int((i + j) % 3 == 0) for j in range(samples)],
        "consistency_judgement": [int((i * j) % 4 != 1) for j in range(samples)],
    }


def write_records(root: str, num_records: int, samples: int) -> int:
    """Write the records (round-robin over the datasets); returns the bytes written."""
    folder = os.path.join(root, MODEL)
    os.makedirs(folder, exist_ok=True)
    handles = [open(os.path.join(folder, f"{name}_train.jsonl"), "w", encoding="utf-8") for name in DATASETS]
    try:
        for i in range(num_records):
            handles[i % len(handles)].write(json.dumps(synthetic_record(i, samples)) + "\n")
    finally:
        for handle in handles:
            handle.close()
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))


def build_table(root: str, cache_dir: str, tokenize: bool) -> dict:
    """Step 2, in this (fresh) process: what `elical-hf train` builds; returns sizes, seconds and peak RSS."""
    from elical_hf.settings.configuration import ConfidenceConfig
    from elical_hf.data.training_table import tokenize_dataset, validate_columns
    from elical_hf.training.recipe import split_dev
    from elical_hf.signals import load_honestybench

    start = time.perf_counter()
    bench = load_honestybench(root, progress=False, cache_dir=cache_dir)
    table = bench["train"].select_columns(["question", "consistency", "correctness"])
    loaded = time.perf_counter()
    train, dev = split_dev(table, 0.1, 42, "elicitation")
    validate_columns(train, "elicitation", "consistency")
    result = {"rows": len(table), "train_rows": len(train), "dev_rows": len(dev) if dev is not None else 0,
              "load_seconds": loaded - start}
    if tokenize:
        from elical_hf.data.encoding import load_tokenizer
        from elical_hf.models.default_model import DEFAULT_MODEL, resolve_model_path

        tokenizer = load_tokenizer(resolve_model_path(DEFAULT_MODEL)[0])
        tokenized = tokenize_dataset(train, tokenizer, ConfidenceConfig(), "consistency")
        result["tokenized_rows"] = len(tokenized)
    result["seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = peak_rss_mib()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_records", type=int, default=560_000)
    parser.add_argument("--samples", type=int, default=20, help="Sampled answers per record (k).")
    parser.add_argument("--workdir", default=None, help="Where records and Arrow files go (default: a temp folder).")
    parser.add_argument("--no_tokenize", action="store_true", help="Stop before tokenization.")
    parser.add_argument("--keep", action="store_true", help="Keep the workdir.")
    parser.add_argument("--build", default=None, help=argparse.SUPPRESS)  # internal: run step 2 on this workdir
    args = parser.parse_args(argv)
    if args.build is not None:
        print(json.dumps(build_table(os.path.join(args.build, "records"), os.path.join(args.build, "arrow"),
                                     not args.no_tokenize)))
        return

    workdir = args.workdir or tempfile.mkdtemp(prefix="elical-data-scale-")
    try:
        start = time.perf_counter()
        size = write_records(os.path.join(workdir, "records"), args.num_records, args.samples)
        written = time.perf_counter() - start
        command = [sys.executable, os.path.abspath(__file__), "--build", workdir] + (["--no_tokenize"] * args.no_tokenize)
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"building the table failed:\n{done.stderr[-4000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"records: {args.num_records:,} x {args.samples} samples, {size / 2**20:,.0f} MiB of jsonl "
              f"(written in {written:.0f} s)")
        print_table(
            ["step", "rows", "seconds", "peak RSS (MiB)", "target (MiB)"],
            [["load_honestybench + columns + dev split" + (" + tokenize" if not args.no_tokenize else ""),
              f"{result['rows']:,} ({result['train_rows']:,} train, {result['dev_rows']:,} dev)",
              round(result["seconds"]), round(result["peak_rss_mib"]), 4096]],
        )
        print(json.dumps(result))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
