"""The LLM judges decode as the paper's reference code does (`infer_scripts/run_infer_consistency.sh:129-138,184-193`:
up to 64 new tokens, repetition penalty 1.05), so a long reply keeps its verdict."""

from __future__ import annotations

import json

import pytest

from elical_hf.signals.judging import apply_judges
from elical_hf.signals.llm_judge import (
    JUDGE_MAX_NEW_TOKENS,
    JUDGE_REPETITION_PENALTY,
    call_completion,
    judge_with_llm,
    parse_verdict,
)


REASONED = ("The expected answer is Paris, while the generated answer names London as the capital city of the "
            "country, which is a different city altogether, so the two do not mean the same thing. Uncertain")
"""A chatty judge reply whose verdict comes after 36 words of reasoning (and has no negative word before it)."""


class WordCapped:
    """A completion function that answers every prompt with `reply`, cut at `max_new_tokens` words (one word, one
    token), and records the decoding options it was called with."""

    def __init__(self, reply: str = REASONED):
        self.reply, self.calls = reply, []

    def __call__(self, prompts, max_new_tokens=16, batch_size=16, progress=True, repetition_penalty=1.0):
        self.calls.append({"max_new_tokens": max_new_tokens, "repetition_penalty": repetition_penalty})
        return [" ".join(self.reply.split()[:max_new_tokens]) for _ in prompts]


def _records() -> list[dict]:
    return [{"question": "What is the capital of France?", "answer": ["Paris"], "greedy_response": ["London"],
             "sampling_response": ["London", "Paris"]}]


def test_a_long_reply_keeps_its_verdict_under_the_reference_decoding():
    assert len(REASONED.split()) > 16 and parse_verdict(REASONED) is False
    complete = WordCapped()
    records = _records()
    judge_with_llm(records, complete, "correctness", progress=False)
    assert complete.calls == [{"max_new_tokens": JUDGE_MAX_NEW_TOKENS, "repetition_penalty": JUDGE_REPETITION_PENALTY}]
    assert (JUDGE_MAX_NEW_TOKENS, JUDGE_REPETITION_PENALTY) == (64, 1.05)
    assert records[0]["greedy_correctness"] is False  # "Uncertain" was read
    # the old cap of 16 tokens cut the reply before its verdict: the same answer was silently judged correct
    cut = _records()
    judge_with_llm(cut, WordCapped(), "correctness", progress=False, max_new_tokens=16)
    assert cut[0]["greedy_correctness"] is True
    strict = _records()
    judge_with_llm(strict, WordCapped(), "correctness", progress=False, max_new_tokens=16, strict=True)
    assert strict[0]["greedy_correctness"] is None  # the strict parser at least says it found no verdict


def test_the_decoding_options_reach_only_completion_functions_that_take_them():
    seen = []

    def plain(prompts):
        seen.append(len(prompts))
        return ["certain"] * len(prompts)

    assert call_completion(plain, ["a", "b"], max_new_tokens=64, repetition_penalty=1.05) == ["certain"] * 2
    complete = WordCapped("certain")
    records = _records()
    apply_judges(records, consistency="llm", complete=complete, judge_repetition_penalty=1.0, max_new_tokens=8)
    assert complete.calls == [{"max_new_tokens": 8, "repetition_penalty": 1.0}]
    assert records[0]["consistency_judgement"] == [True, True]


def test_the_judge_command_defaults_to_the_reference_decoding(tmp_path):
    from elical_hf.cli import judge as judge_cli

    source, out = tmp_path / "records.jsonl", tmp_path / "judged.jsonl"
    source.write_text(json.dumps({**_records()[0], "id": "1", "dataset": "nq"}) + "\n")
    complete = WordCapped()
    assert judge_cli.main(["--records", str(source), "--output", str(out), "--correctness", "llm"], complete) == 0
    assert complete.calls == [{"max_new_tokens": 64, "repetition_penalty": 1.05}]
    assert json.loads(out.read_text())["greedy_correctness"] is False
    again = WordCapped()
    assert judge_cli.main(["--records", str(source), "--output", str(out), "--correctness", "llm",
                           "--max_new_tokens", "16", "--judge_repetition_penalty", "1.0"], again) == 0
    assert again.calls == [{"max_new_tokens": 16, "repetition_penalty": 1.0}]
    with pytest.raises(ValueError, match="judge_repetition_penalty"):
        judge_cli.JudgeArguments(records=str(source), output=str(out), correctness="llm", judge_repetition_penalty=0)
