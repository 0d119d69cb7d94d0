"""`elical-hf sample`: greedy answer + k samples for each question, written as resumable record shards.

`--backend openai --endpoint URL` samples through an OpenAI-compatible server (`vllm serve`, SGLang, any whose
`/v1/completions` takes `n`) instead of loading the model: prompts are rendered here with `--model`'s chat template (the
text the Hugging Face sampler decodes from), greedy with log-probabilities and k seeded samples per question, many
requests at once (`--max_concurrency`), with retries; the records name the served model.

Only sampling: the records it writes are raw (no correctness or consistency judgement yet). Rerun the same command
after an interruption to finish the missing shards.

On N workers (GPUs or machines), run the same command on each with `--num_workers N --worker_index i` (their earlier
spellings `--num_shards` / `--shard_index` still work) and its own `--output_dir`: worker i samples the questions
whose id hashes to i, and `elical-hf merge` combines the N folders into the records one worker would have written, up
to float rounding of the log-probabilities (each worker batches other questions together; see `elical-hf merge
--help`). A worker's share is split into shards of `--shard_size` questions, the unit a rerun resumes from.
"""

from __future__ import annotations

from elical_hf.signals.settings import SamplingSettings
from elical_hf.steps.sample import SampleArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser((SampleArguments, SamplingSettings), prog="elical-hf sample", description=__doc__,
                                overrides={"output_dir": {"required": True}})


def main(argv: list[str] | None = None) -> int:
    import os

    from elical_hf.steps import sample

    options, settings = make_parser().parse_with_config(argv)
    if options.backend == "openai":
        from elical_hf.signals.openai_client import api_key_from

        api_key_from(api_key_env=options.api_key_env)  # the token is in the environment, before any work
    sampled = sample(options, settings)
    out, records, backend = options.output_dir, sampled.records, sampled.backend
    if options.num_workers > 1:
        print(f"\nWorker {options.worker_index} of {options.num_workers}: wrote {len(records)} of "
              f"{sampled.num_questions} records to {out}/shards/. When every worker is done: elical-hf merge --inputs "
              "<their folders> --output_dir <merged>")
        return 0
    print(
        f"\nWrote {len(records)} records (greedy answer + {settings.num_samples} samples, {backend.kind} backend, "
        f"{backend.name}) to {out}/shards/ (manifest: {out}/manifest.json).\nLoad them with:\n"
        f"  from elical_hf.signals import load_records; load_records({out!r})\n"
        f"  datasets.load_dataset('parquet', data_files={os.path.join(out, 'shards', '*.parquet')!r})\n"
        "They are not judged yet: fill correctness and consistency before training (`elical-hf judge`)."
    )
    return 0
