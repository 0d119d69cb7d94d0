"""Signals: answers sampled from the model and the judgements EliCal learns from (HonestyBench record schema).

Every name below loads its module on first use (`elical_hf.utils.lazy`): the judges and record readers need no torch.
"""

from typing import TYPE_CHECKING

from ..utils.lazy import lazy_attributes


_LAZY = {
    ".backends": ("BACKENDS", "HFBackend", "VLLMBackend", "make_backend", "vllm_available"),
    ".baselines": ("BASELINES", "compute_baselines", "select_demonstrations", "verbal"),
    ".decoding": ("apply_repetition_penalty", "filter_candidates", "sample_seed"),
    ".embedding_judge": ("EmbeddingJudge",),
    ".endpoint": ("ChatEndpoint",),
    ".generation": ("build_prompt_ids", "complete_prompts", "generate_answers", "next_token_logprobs",
        "resolve_autocast_dtype"),
    ".honestybench": ("load_honestybench",),
    ".judge_runner": ("judge_records", "merge_judged"),
    ".judging": ("apply_judges",),
    ".lexical_judge": ("CORRECTNESS_JUDGES", "exact_match", "has_answer", "has_answer_squad", "judge_correctness",
        "lexical_consistency", "lexical_judgement", "normalize_answer", "reference_tokens", "rouge_l", "token_f1"),
    ".llm_judge": ("judge_with_llm", "llm_consistency", "llm_correctness", "parse_verdict"),
    ".option_probability": ("option_confidence", "option_distribution", "option_prob"),
    ".records": ("DATASET_ALIASES", "PAPER_SPLITS", "RECORD_FEATURES", "canonical_dataset", "load_records",
        "normalize_record", "parse_record_path", "read_lm_eval_records", "read_records", "save_records",
        "training_columns"),
    ".runner": ("TIMING_FIELDS", "merge_samples", "sample_records"),
    ".settings": ("SamplingSettings",),
    ".shards": ("worker_of",),
}

__all__ = sorted(name for names in _LAZY.values() for name in names)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)


if TYPE_CHECKING:
    from .backends import BACKENDS, HFBackend, VLLMBackend, make_backend, vllm_available
    from .baselines import BASELINES, compute_baselines, select_demonstrations, verbal
    from .embedding_judge import EmbeddingJudge
    from .endpoint import ChatEndpoint
    from .decoding import apply_repetition_penalty, filter_candidates, sample_seed
    from .generation import (
        build_prompt_ids, complete_prompts, generate_answers, next_token_logprobs, resolve_autocast_dtype,
    )
    from .lexical_judge import (
        CORRECTNESS_JUDGES, exact_match, has_answer, has_answer_squad, judge_correctness, lexical_consistency,
        lexical_judgement, normalize_answer, reference_tokens, rouge_l, token_f1,
    )
    from .honestybench import load_honestybench
    from .judge_runner import judge_records, merge_judged
    from .judging import apply_judges
    from .llm_judge import judge_with_llm, llm_consistency, llm_correctness, parse_verdict
    from .option_probability import option_confidence, option_distribution, option_prob
    from .records import (
        DATASET_ALIASES, PAPER_SPLITS, RECORD_FEATURES, canonical_dataset, load_records, normalize_record,
        parse_record_path, read_lm_eval_records, read_records, save_records, training_columns,
    )
    from .runner import TIMING_FIELDS, merge_samples, sample_records
    from .shards import worker_of
    from .settings import SamplingSettings
