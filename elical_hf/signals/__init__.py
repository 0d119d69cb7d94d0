"""Signals: answers sampled from the model and the judgements EliCal learns from (HonestyBench record schema).

Every name below loads its module on first use (`elical_hf.utils.lazy`): the judges and record readers need no torch.
"""

from typing import TYPE_CHECKING

from ..utils.lazy import lazy_attributes


_LAZY = {
    "BACKENDS": ".backends",
    "BASELINES": ".baselines",
    "CORRECTNESS_JUDGES": ".lexical_judge",
    "ChatEndpoint": ".endpoint",
    "DATASET_ALIASES": ".records",
    "EmbeddingJudge": ".embedding_judge",
    "HFBackend": ".backends",
    "PAPER_SPLITS": ".records",
    "RECORD_FEATURES": ".records",
    "SamplingSettings": ".settings",
    "TIMING_FIELDS": ".runner",
    "VLLMBackend": ".backends",
    "apply_judges": ".judging",
    "apply_repetition_penalty": ".decoding",
    "build_prompt_ids": ".generation",
    "canonical_dataset": ".records",
    "complete_prompts": ".generation",
    "compute_baselines": ".baselines",
    "exact_match": ".lexical_judge",
    "filter_candidates": ".decoding",
    "generate_answers": ".generation",
    "has_answer": ".lexical_judge",
    "has_answer_squad": ".lexical_judge",
    "judge_correctness": ".lexical_judge",
    "judge_records": ".judge_runner",
    "judge_with_llm": ".llm_judge",
    "lexical_consistency": ".lexical_judge",
    "lexical_judgement": ".lexical_judge",
    "llm_consistency": ".llm_judge",
    "llm_correctness": ".llm_judge",
    "load_honestybench": ".honestybench",
    "load_records": ".records",
    "make_backend": ".backends",
    "merge_judged": ".judge_runner",
    "merge_samples": ".runner",
    "next_token_logprobs": ".generation",
    "normalize_answer": ".lexical_judge",
    "normalize_record": ".records",
    "option_confidence": ".option_probability",
    "option_distribution": ".option_probability",
    "option_prob": ".option_probability",
    "parse_record_path": ".records",
    "parse_verdict": ".llm_judge",
    "read_lm_eval_records": ".records",
    "read_records": ".records",
    "reference_tokens": ".lexical_judge",
    "resolve_autocast_dtype": ".generation",
    "rouge_l": ".lexical_judge",
    "sample_records": ".runner",
    "sample_seed": ".decoding",
    "save_records": ".records",
    "select_demonstrations": ".baselines",
    "token_f1": ".lexical_judge",
    "training_columns": ".records",
    "verbal": ".baselines",
    "vllm_available": ".backends",
    "worker_of": ".shards",
}

__all__ = sorted(_LAZY)

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
