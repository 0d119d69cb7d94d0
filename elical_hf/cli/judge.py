"""`elical-hf judge`: add or redo the correctness and consistency judgements of HonestyBench records.

Correctness: `has_answer` (the paper's reference string match), `has_answer_squad`, `exact_match`, `f1` (lexical,
against the gold aliases), `llm` (the paper's judge prompt) or `option` (multiple-choice records: the option the
answer commits to against the gold letter).
Consistency: `lexical` (ROUGE-L F >= `--lexical_threshold`), `embedding` (all-MiniLM-L6-v2 cosine, offline), `llm`
(the paper's semantic-equivalence prompt) or `option` (multiple choice: the greedy answer's option). LLM judges run
`--judge_model` (default: the embedded SmolLM2), or any OpenAI-compatible endpoint with `--judge_endpoint URL` (e.g.
`elical-hf serve MODEL --mode completion`). Records are read from a jsonl/parquet file or a folder of them.

Judging is resumable, like `elical-hf sample`: records are judged `--shard_size` at a time into shards with a
manifest (the judge settings, a fingerprint of the records). Killed at any point, the same command run again judges
only the missing shards and ends with the output of an uninterrupted run; a rerun with other records or settings is
refused, naming the differences. `--output` is a folder (no extension: `manifest.json` and `shards/`, read by every
command as records) or a `.jsonl` / `.parquet` file, written atomically when every shard is done (the shards wait
meanwhile in the hidden folder `.<name>.judge-parts` beside it).

On N workers run the same command with `--num_workers N --worker_index i` (by default from `SLURM_ARRAY_TASK_COUNT` /
`SLURM_ARRAY_TASK_ID` in a Slurm job array; their earlier spellings `--num_shards` / `--shard_index` still work) and a
folder `--output` each: worker i judges the records whose id hashes to i, in shards of `--shard_size` (the unit a
rerun resumes from), and `elical-hf merge` combines the N folders into one worker's.
"""

from __future__ import annotations

import dataclasses

from elical_hf.steps.judge import JudgeArguments

from .parser import ElicalArgumentParser, slurm_array_task


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(JudgeArguments, prog="elical-hf judge", description=__doc__,
                                overrides={"output": {"required": True}})


def slurm_workers(options: JudgeArguments) -> tuple[JudgeArguments, list[str]]:
    """`options` with `num_workers` / `worker_index` where not given: this Slurm array task's (its index only when the
    workers are the array's tasks), else 1 and 0; and the options taken from the array (to say so)."""
    count, index = slurm_array_task()
    num_workers = options.num_workers if options.num_workers is not None else count or 1
    slurm_index = options.worker_index is None and index is not None and num_workers == count
    taken = [option for option, from_array in (("--num_workers", options.num_workers is None and count),
                                               ("--worker_index", slurm_index)) if from_array]
    worker_index = index if slurm_index else options.worker_index or 0
    try:
        return dataclasses.replace(options, num_workers=num_workers, worker_index=worker_index), taken
    except ValueError as error:
        if not taken:
            raise
        raise ValueError(f"{error} ({' and '.join(taken)} from SLURM_ARRAY_TASK_*: pass --num_workers 1 to judge "
                         "every record in this task)") from None


def main(argv: list[str] | None = None, complete=None) -> int:
    import sys

    from elical_hf.utils.atomic import json_text
    from elical_hf.steps import judge

    (options,) = make_parser().parse_with_config(argv)
    options, taken = slurm_workers(options)  # the environment, read here
    if options.judge_endpoint is not None:
        from elical_hf.signals.openai_client import api_key_from

        api_key_from(api_key_env=options.judge_api_key_env, option="--judge_api_key_env")  # set, before any work
    if taken:
        print(f"elical-hf judge: judging as worker {options.worker_index} of {options.num_workers} "
              f"({' and '.join(taken)} from SLURM_ARRAY_TASK_*; --num_workers 1 judges every record).", file=sys.stderr)
    judged = judge(options, complete=complete)
    print(json_text({"records": len(judged.records), "output": options.output, **judged.report}))
    if options.num_workers > 1:
        print(f"Worker {options.worker_index} of {options.num_workers}: when every worker is done, elical-hf merge "
              "--inputs <their folders> --output_dir <merged>", file=sys.stderr)
    return 0
