"""`elical-hf judge`: add or redo the correctness and consistency judgements of HonestyBench records.

Correctness: `has_answer` (the paper's reference string match), `has_answer_squad`, `exact_match`, `f1` (lexical,
against the gold aliases) or `llm` (the paper's judge prompt).
Consistency: `lexical` (ROUGE-L F >= `--lexical_threshold`), `embedding` (all-MiniLM-L6-v2 cosine, offline) or `llm`
(the paper's semantic-equivalence prompt). LLM judges run `--judge_model` (default: the embedded SmolLM2). Records are
read from a jsonl/parquet file or a folder of them and written atomically to `--output` (format by extension).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from elical_hf.embedded import DEFAULT_MODEL

from .parser import ElicalArgumentParser


CORRECTNESS_CHOICES = ("has_answer", "has_answer_squad", "exact_match", "f1", "llm")
"""`elical_hf.signals.judges.CORRECTNESS_JUDGES` plus `llm`, spelled out so that `--help` does not import torch (a test
keeps them equal)."""
CONSISTENCY_CHOICES = ("lexical", "embedding", "llm")


@dataclass
class JudgeArguments:
    """Options of `elical-hf judge` (also settable from `--config file.yaml`)."""

    records: str = field(metadata={"help": "Records file (.jsonl/.parquet) or a folder of them."})
    output: str = field(metadata={"help": "Where to write the judged records (.jsonl or .parquet)."})
    correctness: str | None = field(
        default=None, metadata={"help": f"Correctness judge: {'|'.join(CORRECTNESS_CHOICES)}."}
    )
    consistency: str | None = field(
        default=None, metadata={"help": f"Consistency judge: {'|'.join(CONSISTENCY_CHOICES)}."}
    )
    judge_model: str = field(default=DEFAULT_MODEL, metadata={"help": "LLM judge (Hub id or folder) of `llm`."})
    strict: bool = field(default=False, metadata={"help": "LLM verdicts: None unless the reply says (un)certain."})
    f1_threshold: float = field(default=0.5, metadata={"help": "`f1` correctness: correct when token F1 >= this."})
    lexical_threshold: float = field(default=0.5, metadata={"help": "`lexical`: equivalent when ROUGE-L >= this."})
    embedding_model: str | None = field(
        default=None, metadata={"help": "Sentence-transformers folder (default: the bundled all-MiniLM-L6-v2)."}
    )
    embedding_threshold: float | None = field(
        default=None, metadata={"help": "`embedding`: equivalent when cosine >= this (default: DEFAULT_THRESHOLD)."}
    )
    batch_size: int = field(default=16, metadata={"help": "Prompts per batch of the LLM judge."})
    max_new_tokens: int = field(default=16, metadata={"help": "Longest LLM judge reply in tokens."})

    def __post_init__(self):
        if self.correctness is None and self.consistency is None:
            raise ValueError("Nothing to do: pass --correctness and/or --consistency.")
        if self.correctness is not None and self.correctness not in CORRECTNESS_CHOICES:
            raise ValueError(f"--correctness must be one of {CORRECTNESS_CHOICES}, got {self.correctness!r}.")
        if self.consistency is not None and self.consistency not in CONSISTENCY_CHOICES:
            raise ValueError(f"--consistency must be one of {CONSISTENCY_CHOICES}, got {self.consistency!r}.")
        record_format(self.output)


def record_format(path: str) -> str:
    """`"jsonl"` or `"parquet"` from a file name; `ValueError` for anything else."""
    lower = str(path).lower()
    if lower.endswith(".jsonl"):
        return "jsonl"
    if lower.endswith(".parquet"):
        return "parquet"
    raise ValueError(f"Records files must end in .jsonl or .parquet, got {path!r}.")


def load_records(path: str) -> list[dict]:
    """Normalized records from a .jsonl/.parquet file or every such file below a folder (e.g. `sample` shards)."""
    from elical_hf.signals.records import record_files
    from elical_hf.signals.records import read_records

    if not os.path.exists(path):
        raise ValueError(f"Records file {path!r} does not exist.")
    if not os.path.isdir(path):
        record_format(path)
    return [record for name in record_files(path) for record in read_records(name)]


def load_completion(model_name_or_path: str):
    """The greedy completion function of a Hugging Face causal LM (Hub id or folder): `HFBackend(...).complete`."""
    from elical_hf.signals.backends import HFBackend

    return HFBackend(model_name_or_path).complete


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(JudgeArguments, prog="elical-hf judge", description=__doc__)


def run_judges(records: list[dict], options: JudgeArguments, complete=None) -> dict[str, dict]:
    """Apply the judges `options` asks for to `records` in place; returns one summary per judge."""
    from elical_hf.signals import judge_correctness, lexical_judgement
    from elical_hf.signals.llm_judge import llm_consistency, llm_correctness

    summaries: dict[str, dict] = {}
    llm = dict(batch_size=options.batch_size, strict=options.strict, max_new_tokens=options.max_new_tokens)
    needs_llm = "llm" in (options.correctness, options.consistency)
    if needs_llm and complete is None:
        complete = load_completion(options.judge_model)
    if options.correctness == "llm":
        summaries["correctness"] = llm_correctness(records, complete, judge_model=options.judge_model, **llm)
    elif options.correctness is not None:
        summaries["correctness"] = judge_correctness(records, options.correctness, options.f1_threshold)
    if options.consistency == "llm":
        summaries["consistency"] = llm_consistency(records, complete, judge_model=options.judge_model, **llm)
    elif options.consistency == "embedding":
        from elical_hf.signals.embedding_judge import DEFAULT_THRESHOLD, EmbeddingJudge

        threshold = DEFAULT_THRESHOLD if options.embedding_threshold is None else options.embedding_threshold
        judge = EmbeddingJudge(options.embedding_model, threshold=threshold)
        summaries["consistency"] = judge.judge_records(records)
    elif options.consistency == "lexical":
        summaries["consistency"] = lexical_judgement(records, options.lexical_threshold)
    return summaries


def main(argv: list[str] | None = None, complete=None) -> int:
    from elical_hf.signals.records import save_records

    (options,) = make_parser().parse_with_config(argv)
    records = load_records(options.records)
    if not records:
        raise ValueError(f"No records in {options.records!r}.")
    summaries = run_judges(records, options, complete=complete)
    save_records(records, options.output)
    print(json.dumps({"records": len(records), "output": options.output, **summaries}, indent=2))
    return 0
