"""Signals: answers sampled from the model and the judgements EliCal learns from (HonestyBench record schema)."""

from .backends import BACKENDS, HFBackend, VLLMBackend, make_backend, vllm_available
from .baselines import BASELINES, compute_baselines, select_demonstrations, verbal
from .embedding_judge import EmbeddingJudge
from .decoding import apply_repetition_penalty, filter_candidates, sample_seed
from .generation import (
    SamplingSettings,
    build_prompt_ids,
    complete_prompts,
    generate_answers,
    resolve_autocast_dtype,
)
from .lexical_judge import (
    CORRECTNESS_JUDGES,
    exact_match,
    has_answer,
    has_answer_squad,
    judge_correctness,
    lexical_consistency,
    lexical_judgement,
    normalize_answer,
    reference_tokens,
    rouge_l,
    token_f1,
)
from .honestybench import DATASET_ALIASES, PAPER_SPLITS, canonical_dataset, load_honestybench, parse_record_path
from .judging import apply_judges
from .llm_judge import judge_with_llm, llm_consistency, llm_correctness, parse_verdict
from .records import RECORD_FEATURES, load_records, normalize_record, read_records, save_records, training_columns
from .runner import TIMING_FIELDS, merge_samples, sample_records, worker_of


__all__ = [
    "BACKENDS",
    "CORRECTNESS_JUDGES",
    "DATASET_ALIASES",
    "HFBackend",
    "PAPER_SPLITS",
    "RECORD_FEATURES",
    "SamplingSettings",
    "TIMING_FIELDS",
    "VLLMBackend",
    "apply_judges",
    "apply_repetition_penalty",
    "build_prompt_ids",
    "canonical_dataset",
    "complete_prompts",
    "exact_match",
    "filter_candidates",
    "generate_answers",
    "has_answer",
    "has_answer_squad",
    "judge_correctness",
    "judge_with_llm",
    "lexical_consistency",
    "lexical_judgement",
    "load_honestybench",
    "load_records",
    "make_backend",
    "normalize_answer",
    "normalize_record",
    "parse_record_path",
    "read_records",
    "reference_tokens",
    "resolve_autocast_dtype",
    "rouge_l",
    "merge_samples",
    "sample_records",
    "sample_seed",
    "save_records",
    "token_f1",
    "training_columns",
    "vllm_available",
    "worker_of",
    "BASELINES",
    "EmbeddingJudge",
    "compute_baselines",
    "llm_consistency",
    "llm_correctness",
    "parse_verdict",
    "select_demonstrations",
    "verbal",
]
