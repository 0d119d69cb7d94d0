"""Signals: answers sampled from the model and the judgements EliCal learns from (HonestyBench record schema)."""

from .generation import (
    SamplingSettings,
    apply_repetition_penalty,
    build_prompt_ids,
    cpu_supports_bf16,
    filter_candidates,
    generate_answers,
    resolve_autocast_dtype,
    sample_seed,
)
from .judges import (
    CORRECTNESS_JUDGES,
    exact_match,
    has_answer,
    judge_correctness,
    lexical_consistency,
    normalize_answer,
    rouge_l,
    token_f1,
)


__all__ = [
    "CORRECTNESS_JUDGES",
    "SamplingSettings",
    "apply_repetition_penalty",
    "build_prompt_ids",
    "cpu_supports_bf16",
    "exact_match",
    "filter_candidates",
    "generate_answers",
    "has_answer",
    "judge_correctness",
    "lexical_consistency",
    "normalize_answer",
    "resolve_autocast_dtype",
    "rouge_l",
    "sample_seed",
    "token_f1",
]
