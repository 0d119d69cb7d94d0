"""Training-free confidence baselines of the paper: Prob, N-Prob, Consis-Lex, Consis-Sem, Verbal-0 and Verbal-10, and
Option-Prob for multiple-choice questions ([`~elical_hf.signals.option_probability`]).

Each returns one float in [0, 1] per record (or question). [`compute_baselines`] runs several by name (see
[`BASELINES`]) and stores them in the records as `confidence_<name>`.
"""

from __future__ import annotations

import logging
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..data.questions import normalize_question
from ..settings.prompts import VERBAL_CONFIDENCE_PROMPT
from .lexical_judge import LEXICAL_SCORINGS, lexical_consistency, lexical_scores, response_text
from .llm_judge import CompletionFn, call_completion
from .option_probability import option_prob, records_needing_model


logger = logging.getLogger(__name__)

PAPER_SCORE_PATTERN = re.compile(r"\b(0?\.\d+|1(?:\.0+)?|0)\b")
"""The paper's verbal-score regex; its last match is the score (no match: 0.0)."""

_ROBUST_SCORE_PATTERN = re.compile(
    r"(?P<pct>\d+(?:\.\d+)?)\s*%"
    r"|(?P<num>\d*\.?\d+)\s*(?:/|out\s+of)\s*(?P<den>\d*\.?\d+)"
    r"|(?P<dec>\d*\.\d+|\d+)",
    re.IGNORECASE,
)
_DEMO_PROMPT = VERBAL_CONFIDENCE_PROMPT.removesuffix("\nAnswer: ")


def _check(records: Sequence[dict], what: str) -> None:
    if isinstance(records, dict) or not isinstance(records, Sequence):
        raise ValueError(f"{what} expects a list of records, got {type(records).__name__}.")


def _greedy_logprobs(records: Sequence[dict], name: str) -> list[list[float] | None]:
    """Each record's greedy token logprobs, or `None` for an empty greedy answer (its score is 0.0, and counted)."""
    _check(records, name)
    out, empty = [], 0
    for i, record in enumerate(records):
        logprobs = record.get("greedy_logprobs")
        if logprobs is not None and len(logprobs) == 1 and isinstance(logprobs[0], (list, tuple)):
            logprobs = logprobs[0]  # the official HonestyBench form `[[...]]`
        if logprobs is None and "greedy_cumulative_logprobs" not in record:
            raise ValueError(f"Record {i} has neither `greedy_logprobs` nor `greedy_cumulative_logprobs`.")
        values = [float(x) for x in logprobs] if logprobs is not None else None
        if values is not None and any(math.isnan(x) for x in values):
            raise ValueError(f"Record {i} has NaN in `greedy_logprobs`.")
        checked = values if values is not None else [float(record["greedy_cumulative_logprobs"])]
        if any(x > 1e-6 for x in checked):  # a log-probability is <= 0; a positive one is a logit or a probability
            raise ValueError(f"Record {i} (id {record.get('id')!r}) has a positive log-probability "
                             f"({max(checked)}): `greedy_logprobs` must be log-probabilities (<= 0).")
        if not response_text(record.get("greedy_response")).strip() or values == []:
            out.append(None)
            empty += 1
        else:
            out.append(values if values is not None else [float(record["greedy_cumulative_logprobs"])])
    if empty:
        logger.warning("%s: %d of %d records have an empty greedy answer; they score 0.0.", name, empty, len(out))
    return out


def prob(records: Sequence[dict]) -> list[float]:
    """Prob: `exp(sum of the greedy answer's token logprobs)` (an empty greedy answer scores 0.0).

    Uses `greedy_logprobs`, or `greedy_cumulative_logprobs` when the token list is absent.
    """
    return [0.0 if lp is None else min(1.0, math.exp(sum(lp))) for lp in _greedy_logprobs(records, "prob")]


def n_prob(records: Sequence[dict]) -> list[float]:
    """N-Prob: `exp(mean token logprob of the greedy answer)` (an empty greedy answer scores 0.0).

    Needs `greedy_logprobs` (with only the cumulative logprob the mean is unknown and the sum is used).
    """
    return [
        0.0 if lp is None else min(1.0, math.exp(sum(lp) / len(lp))) for lp in _greedy_logprobs(records, "n_prob")
    ]


def consis_lex(records: Sequence[dict], scoring: str = "rouge_score") -> list[float]:
    """Consis-Lex: mean ROUGE-L F between the greedy answer and each sample.

    `scoring="rouge_score"` (the default) reuses `consistency_lexical` when it has one score per sample, else computes
    and stores it. `scoring="reference"` scores as the paper's reference code does (the `rouge` package: sentences
    split at ".", case- and punctuation-sensitive, distinct words; [`~elical_hf.signals.lexical_judge.
    rouge_l_reference`]), each time from the answers, and stores nothing.
    """
    _check(records, "consis_lex")
    if scoring not in LEXICAL_SCORINGS:
        raise ValueError(f"Unknown lexical scoring {scoring!r}; choose one of {LEXICAL_SCORINGS}.")
    scores = []
    for i, record in enumerate(records):
        samples = record.get("sampling_response") or []
        if not len(samples):
            raise ValueError(f"Record {i} has no `sampling_response`; Consis-Lex needs sampled answers.")
        if scoring == "reference":
            lexical = lexical_scores(response_text(record.get("greedy_response")), samples, scoring)
            scores.append(float(sum(lexical) / len(lexical)))
            continue
        lexical = record.get("consistency_lexical")
        if lexical is None or len(lexical) != len(samples):
            lexical_consistency([record])
            lexical = record["consistency_lexical"]
        scores.append(float(sum(lexical) / len(lexical)))
    return scores


def consis_sem(records: Sequence[dict]) -> list[float]:
    """Consis-Sem: share of samples judged semantically equivalent to the greedy answer (`consistency_judgement`).

    Verdicts that are `None` (unparseable under a strict LLM judge) are left out of the mean; a record whose verdicts
    are all `None` scores 0.0 (and is counted in a warning).
    """
    _check(records, "consis_sem")
    lexical = sorted({str(r.get("consistency_judge")) for r in records
                      if str(r.get("consistency_judge") or "").startswith("lexical")})
    if lexical:
        raise ValueError(f"Consis-Sem needs semantic consistency verdicts, but these records were judged lexically "
                         f"({', '.join(lexical)}): that is Consis-Lex. Judge them with `elical-hf judge --consistency "
                         "embedding` (or llm) for Consis-Sem.")
    scores, unparsed = [], 0
    for i, record in enumerate(records):
        verdicts = record.get("consistency_judgement")
        if verdicts is None or not len(verdicts):
            raise ValueError(
                f"Record {i} has no `consistency_judgement`; judge consistency first, e.g. "
                "`elical-hf judge --records IN --output OUT --consistency embedding` (or lexical / llm)."
            )
        parsed = [bool(v) for v in verdicts if v is not None]
        unparsed += not parsed
        scores.append(sum(parsed) / len(parsed) if parsed else 0.0)
    if unparsed:
        logger.warning("consis_sem: %d records have no parseable verdict; their confidence is 0.0.", unparsed)
    return scores


def parse_score(text: str | None) -> float | None:
    """The paper's score parser: the last match of `\\b(0?\\.\\d+|1(?:\\.0+)?|0)\\b`, or `None` (no match).

    Example:

    ```python
    >>> parse_score("0.8"), parse_score("Confidence: 0.7"), parse_score("80%"), parse_score("0.85/1")
    (0.8, 0.7, None, 1.0)

    ```
    """
    matches = PAPER_SCORE_PATTERN.findall(text or "")
    return float(matches[-1]) if matches else None


def parse_score_robust(text: str | None) -> float | None:
    """A more forgiving score parser: the last number in the reply that reads as a value in [0, 1].

    Reads percentages (`"80%"` -> 0.8), fractions (`"8/10"`, `"4 out of 5"`, `"0.85/1"`), decimals with or without a
    leading zero and with trailing punctuation (`".5"`, `"0.8."`, `"Confidence: 0.7"`) and the integers 0 and 1.
    Candidates outside [0, 1] (`"8"`, `"1.5"`, `"120%"`, `"5/0"`) are skipped. Returns `None` when nothing reads.

    Example:

    ```python
    >>> parse_score_robust("80%"), parse_score_robust("8/10"), parse_score_robust("Score .5"), parse_score_robust("7")
    (0.8, 0.8, 0.5, None)

    ```
    """
    value = None
    for match in _ROBUST_SCORE_PATTERN.finditer(text or ""):
        if match["pct"] is not None:
            candidate = float(match["pct"]) / 100
        elif match["num"] is not None:
            den = float(match["den"])
            candidate = float(match["num"]) / den if den > 0 else -1.0
        else:
            candidate = float(match["dec"])
        if 0.0 <= candidate <= 1.0:
            value = candidate
    return value


SCORE_PARSERS: dict[str, Callable[[str | None], float | None]] = {"paper": parse_score, "robust": parse_score_robust}


def _demonstration(item: Any) -> tuple[str, float]:
    if isinstance(item, dict):
        question, confidence = item.get("question"), item.get("confidence")
    else:
        question, confidence = item
    if not question or confidence is None or not 0.0 <= float(confidence) <= 1.0:
        raise ValueError(f"A demonstration needs a question and a confidence in [0, 1], got {item!r}.")
    return str(question), float(confidence)


def select_demonstrations(train_records: Sequence[dict], n: int = 10, seed: int = 42) -> list[dict[str, Any]]:
    """Draw `n` Verbal-10 demonstrations from TRAIN records (never from the records being scored).

    A demonstration's confidence is the share of its samples judged correct (`sampling_correctness`); records without
    correctness verdicts are not eligible, and each normalized question is drawn at most once.

    Returns:
        `list[dict]`: `{"question": str, "confidence": float}` in draw order.
    """
    _check(train_records, "select_demonstrations")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    eligible, seen = [], set()
    for record in train_records:
        verdicts = [v for v in record.get("sampling_correctness") or [] if v is not None]
        key = normalize_question(record.get("question") or "")
        if verdicts and key and key not in seen:
            seen.add(key)
            eligible.append({"question": record["question"], "confidence": sum(map(bool, verdicts)) / len(verdicts)})
    if len(eligible) < n:
        raise ValueError(
            f"Only {len(eligible)} train records have a question and `sampling_correctness`; {n} demonstrations needed."
        )
    return random.Random(seed).sample(eligible, n)


def verbal_prompt(question: str, demonstrations: Sequence[Any] | None = None) -> str:
    """The Verbal-0 prompt, preceded (Verbal-10) by the demonstrations as the reference code writes them: each is the
    prompt without its `Answer: ` tail, a newline, the confidence (rounded to 2 decimals) and a newline."""
    prefix = ""
    for item in demonstrations or []:
        demo_question, confidence = _demonstration(item)
        prefix += _DEMO_PROMPT.format(question=demo_question) + f"\n{round(confidence, 2)}\n"
    return prefix + VERBAL_CONFIDENCE_PROMPT.format(question=question)


def verbal(
    questions: Sequence[str],
    complete: CompletionFn,
    demonstrations: Sequence[Any] | None = None,
    parser: str = "paper",
    batch_size: int = 16,
    progress: bool = True,
    max_new_tokens: int = 16,
) -> tuple[list[float], dict[str, Any]]:
    """Verbal-0 (no demonstrations) or Verbal-10 (with them): the model states its confidence before answering.

    Args:
        questions (`list[str]`):
            The questions to score.
        complete (`Callable[[list[str]], list[str]]`):
            The answering model's completion function (see [`~elical_hf.signals.llm_judge`]).
        demonstrations (`list`, *optional*):
            `{"question", "confidence"}` dicts or `(question, confidence)` pairs from TRAIN data, e.g. from
            [`select_demonstrations`]. A demonstration whose question is also scored raises `ValueError`.
        parser (`str`, *optional*, defaults to `"paper"`):
            `"paper"` ([`parse_score`]) or `"robust"` ([`parse_score_robust`]). Unparsed replies score 0.0.
        batch_size, progress, max_new_tokens:
            Passed to `complete` when it accepts them.

    Returns:
        `tuple[list[float], dict]`: the scores, and a summary with `n`, `parser`, `parse_failures` and
        `parse_failure_rate` (replies the chosen parser cannot read), and the failure rates of both parsers
        (`paper_parse_failure_rate`, `robust_parse_failure_rate`).
    """
    if parser not in SCORE_PARSERS:
        raise ValueError(f"Unknown score parser {parser!r}; choose one of {sorted(SCORE_PARSERS)}.")
    questions = [str(q) for q in questions]
    demos = [_demonstration(item) for item in demonstrations or []]
    scored = {normalize_question(q) for q in questions}
    leaked = [q for q, _ in demos if normalize_question(q) in scored]
    if leaked:
        raise ValueError(
            f"{len(leaked)} demonstration question(s) are also being scored (e.g. {leaked[0]!r}); draw demonstrations "
            "from train records only."
        )
    prompts = [verbal_prompt(q, demos) for q in questions]
    replies = call_completion(
        complete, prompts, batch_size=batch_size, progress=progress, max_new_tokens=max_new_tokens
    )
    parsed = {name: [fn(r) for r in replies] for name, fn in SCORE_PARSERS.items()}
    scores = [0.0 if v is None else v for v in parsed[parser]]
    n = len(replies)
    failures = {name: sum(v is None for v in values) for name, values in parsed.items()}
    summary = {
        "n": n,
        "parser": parser,
        "demonstrations": len(demos),
        "parse_failures": failures[parser],
        "parse_failure_rate": failures[parser] / n if n else 0.0,
        **{f"{name}_parse_failure_rate": (count / n if n else 0.0) for name, count in failures.items()},
    }
    return scores, summary


@dataclass(frozen=True)
class Baseline:
    """A registered baseline: its function, the paper's name (how reports and tables label it), and what it needs
    beyond the records.

    Args:
        needs_model (`bool`): Whether it runs the answering model.
        demonstrations (`int`): Demonstrations drawn from train records (Verbal-10).
        model_input (`str`): What it takes of the model: `"complete"`, a completion function (Verbal-0/10), or
            `"backend"`, a loaded [`~elical_hf.signals.HFBackend`] (Option-Prob's next-token log-probabilities).
        model_needed (`Callable`, *optional*): Which records still need the model (a falsy result: none, the records
            carry what it would compute); `None`: every record set does.
    """

    fn: Callable[..., Any]
    paper_name: str
    needs_model: bool = False
    demonstrations: int = 0
    model_input: str = "complete"
    model_needed: Callable[[Sequence[dict]], Any] | None = None

    def needs_model_for(self, records: Sequence[dict]) -> bool:
        """Whether scoring `records` runs the answering model (a `ValueError` for records this baseline refuses)."""
        return self.needs_model and (self.model_needed is None or bool(self.model_needed(records)))


BASELINES: dict[str, Baseline] = {
    "prob": Baseline(prob, "Prob"),
    "n_prob": Baseline(n_prob, "N-Prob"),
    "consis_lex": Baseline(consis_lex, "Consis-Lex"),
    "consis_sem": Baseline(consis_sem, "Consis-Sem"),
    "verbal0": Baseline(verbal, "Verbal-0", needs_model=True),
    "verbal10": Baseline(verbal, "Verbal-10", needs_model=True, demonstrations=10),
    "option_prob": Baseline(option_prob, "Option-Prob", needs_model=True, model_input="backend",
                            model_needed=records_needing_model),
}
"""Baselines by name; `compute_baselines(which=...)` takes these names."""


def compute_baselines(
    records: list[dict],
    complete: CompletionFn | None = None,
    train_records: Sequence[dict] | None = None,
    which: Sequence[str] = ("prob", "n_prob", "consis_lex", "consis_sem"),
    backend: Any = None,
    seed: int = 42,
    parser: str = "paper",
    batch_size: int = 16,
    progress: bool = True,
    summary: dict | None = None,
    lexical_scoring: str = "rouge_score",
) -> dict[str, list[float]]:
    """Compute the baselines in `which` and store each as `confidence_<name>` in the records (in place).

    Args:
        records (`list[dict]`):
            HonestyBench records to score.
        complete (`Callable`, *optional*):
            The answering model's completion function; needed by `verbal0` and `verbal10` (default: `backend`'s).
        train_records (`list[dict]`, *optional*):
            Judged TRAIN records; `verbal10` draws its 10 demonstrations from them with [`select_demonstrations`].
        which (`list[str]`, *optional*):
            Names from [`BASELINES`].
        backend ([`~elical_hf.signals.HFBackend`], *optional*):
            The answering model, loaded; needed by `option_prob` for records without `option_probabilities`.
        seed (`int`, *optional*, defaults to `42`):
            Seed of the demonstration draw.
        parser, batch_size, progress:
            As in [`verbal`] (`batch_size` and `progress` also [`~elical_hf.signals.option_probability.option_prob`]'s).
        summary (`dict`, *optional*):
            When given, receives the verbal baselines' summaries (parse-failure rates) under their names.
        lexical_scoring (`str`, *optional*, defaults to `"rouge_score"`):
            Consis-Lex's ROUGE-L: `"rouge_score"` or `"reference"` (the reference code's `rouge` package; see
            [`consis_lex`]).

    Returns:
        `dict[str, list[float]]`: baseline name -> one confidence in [0, 1] per record.
    """
    _check(records, "compute_baselines")
    unknown = [name for name in which if name not in BASELINES]
    if unknown:
        raise ValueError(f"Unknown baseline(s) {unknown}; choose from {sorted(BASELINES)}.")
    results: dict[str, list[float]] = {}
    for name in which:
        baseline = BASELINES[name]
        if not baseline.needs_model:
            options = {"scoring": lexical_scoring} if name == "consis_lex" else {}
            results[name] = baseline.fn(records, **options)
            continue
        if baseline.model_input == "backend":
            results[name] = baseline.fn(records, backend, batch_size=batch_size, progress=progress)
            continue
        complete = complete if complete is not None or backend is None else backend.complete
        if complete is None:
            raise ValueError(f"{name} needs the answering model: pass `complete` (the CLI's `--model`).")
        demos = None
        if baseline.demonstrations:
            if not train_records:
                raise ValueError(f"{name} needs `train_records` to draw its demonstrations from (never test records).")
            demos = select_demonstrations(train_records, baseline.demonstrations, seed=seed)
        questions = [str(r.get("question", "")) for r in records]
        results[name], info = verbal(
            questions, complete, demos, parser=parser, batch_size=batch_size, progress=progress
        )
        if summary is not None:
            summary[name] = info
    for name, scores in results.items():
        for record, score in zip(records, scores):
            record[f"confidence_{name}"] = float(score)
    return results
