"""A saved confidence model folder: found here or on the Hub ([`find_saved_model`]), and its decision rule changed
in place ([`set_decision_threshold`]: `confidence_config.json`, its generated card and the calibration rows'
confidences `elical-hf monitor` compares with, [`REFERENCE_NAME`], written as one update).

Loading and saving a whole model is [`~elical_hf.AutoModelForConfidence`]'s; this module only reads and rewrites
the files of a folder it saved.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..utils.atomic import atomic_write_texts, json_text, one_writer
from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from .default_model import hub_offline
from ..metrics import risk_controlling_threshold, select_threshold, selective_risk
from .model_card import GENERATED_MARKER, folder_card_text


__all__ = [
    "QUESTIONS_KEY", "REFERENCE_NAME", "config_fingerprint", "find_saved_model", "question_digests", "reference_data",
    "digest_members", "set_decision_threshold", "trained_question_overlap",
]

REFERENCE_NAME = "calibration_confidences.json"
"""The file in a model folder holding the confidences of the rows its threshold was chosen on (the reference of
`elical-hf monitor`, [`~elical_hf.evaluation.drift`])."""


QUESTIONS_KEY = "questions_sha256"
"""The key of a `training_history` entry that records the questions the run trained on ([`question_digests`])."""
_DIGEST_BYTES = 6


def _digest(question: str) -> bytes:
    from ..data.questions import normalize_question

    return hashlib.sha256(normalize_question(question).encode("utf-8")).digest()[:_DIGEST_BYTES]


def question_digests(questions: Iterable[str]) -> str:
    """The questions a training run fitted on, as its `training_history` entry keeps them ([`QUESTIONS_KEY`]): the
    first 48 bits of the SHA-256 of each distinct question (lowercased, whitespace collapsed:
    [`~elical_hf.data.questions.normalize_question`]), sorted and concatenated, in base64: 8 characters a question, the
    same for the same questions in any order. Two different questions share a digest with probability about
    `2^-48` (checking 40,000 calibration rows against 560,000 training questions: about 1e-4 false matches)."""
    return base64.b64encode(b"".join(sorted({_digest(q) for q in questions}))).decode("ascii")


def trained_question_overlap(config: ConfidenceConfig, questions: Sequence[str]) -> tuple[int, list[str]]:
    """How many of `questions` (rows, repeats counted) a model's training runs fitted on, by the digests its
    `training_history` entries record ([`question_digests`]), and the stages of the entries that record none (saved
    before elical-hf recorded them, or trained on pre-tokenised rows): for those the check could not be made."""
    seen: set[bytes] = set()
    unrecorded = []
    for entry in config.training_history:
        if not isinstance(entry.get(QUESTIONS_KEY), str):
            unrecorded.append(str(entry.get("stage", "?")))
            continue
        seen |= _digest_set(entry[QUESTIONS_KEY])
    return sum(_digest(q) in seen for q in questions), unrecorded


def _digest_set(encoded: str) -> set[bytes]:
    """The question digests of one [`question_digests`] text."""
    raw = base64.b64decode(encoded)
    return {raw[i : i + _DIGEST_BYTES] for i in range(0, len(raw), _DIGEST_BYTES)}


def digest_members(encoded: str, questions: Sequence[str]) -> list[bool]:
    """For each of `questions`, whether it is among the questions of `encoded` (a [`question_digests`] text): the
    rows a threshold was chosen on, as `elical-hf threshold` keeps them under [`QUESTIONS_KEY`] in
    [`REFERENCE_NAME`]."""
    members = _digest_set(encoded)
    return [_digest(q) in members for q in questions]


def config_fingerprint(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a saved reference belongs to, from the content of `confidence_config.json`: its `decision_threshold` and
    a SHA-256 of its `training_history` (so a copy or a Hub snapshot of the folder has the same)."""
    history = json.dumps(config.get("training_history") or [], sort_keys=True)
    return {"decision_threshold": config.get("decision_threshold"),
            "training_history_sha256": hashlib.sha256(history.encode("utf-8")).hexdigest()}


def reference_data(confidences: Sequence[float], source: Mapping[str, Any],
                   saved_for: Mapping[str, Any] | None) -> dict[str, Any]:
    """The content of [`REFERENCE_NAME`]: the calibration rows' `confidences`, `source` (where the rows came from)
    and `saved_for`, the [`config_fingerprint`] of the `confidence_config.json` they belong to."""
    return {**source, "saved_for": saved_for, "confidences": [float(c) for c in confidences]}


def find_saved_model(name: str, **hub_kwargs: Any) -> str | None:
    """The local folder of a saved confidence model at `name` (downloading a Hub repo), or `None`."""
    if os.path.isdir(name):
        return name if os.path.isfile(os.path.join(name, CONFIDENCE_CONFIG_NAME)) else None
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import HFValidationError

    hub_kwargs.setdefault("local_files_only", hub_offline())
    try:
        hf_hub_download(name, CONFIDENCE_CONFIG_NAME, **hub_kwargs)
    except (OSError, HFValidationError):  # not a confidence repo, or not reachable: treat as a base model
        return None
    return snapshot_download(name, **hub_kwargs)


def set_decision_threshold(
    model_dir: str,
    confidences: Sequence[float],
    correct: Sequence[int],
    *,
    alpha: float | None = None,
    delta: float = 0.1,
    max_abstention: float | None = None,
    source: Mapping[str, Any] | None = None,
    domains: Sequence[str] | None = None,
    by: str = "dataset",
    min_domain_rows: int = 30,
    reference: Mapping[str, Any] | None = None,
    allow_pooled_fallback: bool = False,
) -> float:
    """
    Choose the answer/abstain threshold on these labelled rows (a calibration split, never the test set) and store it
    as `decision_threshold` in the saved model's `confidence_config.json` (and its generated card); returns it.

    Every file is written in one update ([`~elical_hf.utils.atomic.atomic_write_texts`]): each is rendered first, then
    the reference and the card are moved into place and `confidence_config.json` last. A failure (or a kill) before that
    last move leaves the model's threshold as it was; a reference moved before it names the threshold it belongs to
    (`saved_for`), so `elical-hf monitor` refuses it rather than compare with it. The folder's
    one-writer lock ([`~elical_hf.utils.atomic.one_writer`]) is held from reading the config to the last move: a second
    run on the same folder meanwhile is refused in one `ValueError`, never interleaved.

    Args:
        model_dir (`str`): A saved confidence model folder.
        confidences (`list[float]`), correct (`list[int]`): The model's confidences and 0/1 correctness of the rows.
        alpha (`float`, *optional*): With it, the threshold guarantees an error rate among answered questions of at
            most `alpha` with probability `1 - delta` ([`~elical_hf.metrics.risk_controlling_threshold`]), recorded as
            `risk_control`. Without it, the alignment rule ([`~elical_hf.metrics.select_threshold`]); an earlier
            `risk_control` record is removed.
        delta (`float`, *optional*, defaults to 0.1): The guarantee's failure probability (with `alpha`).
        max_abstention (`float`, *optional*): With `alpha`, also guarantee an abstention rate of at most this (both
            together with probability `1 - delta`).
        source (`dict`, *optional*): Where the rows came from (e.g. `{"records": ..., "split": ...}`), kept in
            `risk_control`.
        domains (`list[str]`, *optional*): Each row's domain (its `by` column): one threshold per domain, chosen on
            its rows by the same rule, is saved as `domain_thresholds`, beside the pooled threshold (all rows), which
            is the fallback of a domain with fewer than `min_domain_rows` rows. With `alpha`, a domain with enough rows
            that certify no threshold is refused (the pooled threshold is no guarantee for it), and so is a domain on
            the fallback unless `allow_pooled_fallback`: the pooled guarantee bounds the error rate over the mix of
            domains, not among one domain's questions. Without `domains` an earlier map is removed.
        by (`str`, *optional*, defaults to `"dataset"`), min_domain_rows (`int`, *optional*, defaults to 30): With
            `domains`: the column they come from, and the fewest rows a domain needs for a threshold of its own.
        reference (`dict`, *optional*): With it, the rows' `confidences` are also saved as the reference of
            `elical-hf monitor` ([`REFERENCE_NAME`], [`reference_data`]), with this (where the rows came from), in the
            same update.
        allow_pooled_fallback (`bool`, *optional*, defaults to `False`): With `alpha` and `domains`, let a domain with
            fewer than `min_domain_rows` rows fall back to the pooled threshold (its `fallback` says what that means).

    Raises:
        `ValueError`: when `model_dir` is not a saved model, or no threshold can be certified on all the rows or on a
        domain's rows (nothing is written then; the message says what the best candidates reach).
    """
    path = os.path.join(model_dir, CONFIDENCE_CONFIG_NAME)
    if not os.path.isfile(path):
        raise ValueError(f"{model_dir} is not a saved confidence model (no {CONFIDENCE_CONFIG_NAME}).")
    if domains is not None and len(domains) != len(confidences):
        raise ValueError(f"Got {len(domains)} domains for {len(confidences)} rows: give one per row.")
    with one_writer(model_dir):  # two runs on one model never interleave their reads and writes
        config = ConfidenceConfig.from_json_file(path)
        threshold, record, problem = _choose(confidences, correct, alpha, delta, max_abstention)
        if threshold is None:
            more = ", max_abstention" if max_abstention is not None else ""
            raise ValueError(f"{problem[0].upper()}{problem[1:]}: use more labelled rows, or a larger alpha{more} "
                             "or delta. Nothing was written.")
        config.decision_threshold = threshold
        config.risk_control = None if record is None else {**record, **(source or {})}
        config.domain_thresholds = None
        if domains is not None:
            config.domain_thresholds = _domain_thresholds(confidences, correct, domains, by, min_domain_rows, alpha,
                                                          delta, max_abstention, allow_pooled_fallback)
        if config.retrieve_threshold is not None and config.retrieve_threshold > threshold:
            config.retrieve_threshold = threshold  # the retrieve band cannot start above the answer threshold
        text = config.to_json_string()
        files: dict[str, str] = {}
        if reference is not None:
            files[os.path.join(model_dir, REFERENCE_NAME)] = json_text(
                reference_data(confidences, reference, config_fingerprint(json.loads(text)))) + "\n"
        readme = os.path.join(model_dir, "README.md")
        if not os.path.isfile(readme) or GENERATED_MARKER in open(readme, encoding="utf-8").read():
            files[readme] = folder_card_text(model_dir, config=config)
        files[path] = text  # last: the update is made when the threshold is
        atomic_write_texts(files)
    return threshold


def _choose(confidences: Sequence[float], correct: Sequence[int], alpha: float | None, delta: float,
            max_abstention: float | None) -> tuple[float | None, dict[str, Any] | None, str]:
    """The threshold of the rule (the alignment rule, or the guarantee with `alpha`), its `risk_control` record, and
    when nothing is certified (`None`) a phrase saying what the best candidates reach."""
    if alpha is None:
        return select_threshold(confidences, correct), None, ""
    record = risk_controlling_threshold(confidences, correct, alpha=alpha, delta=delta, max_abstention=max_abstention)
    threshold = record.pop("threshold")
    if threshold is not None:
        return threshold, record, ""
    rows = f"with probability 1 - delta = {1 - delta:.2f} on these {len(confidences)} rows"
    power = _power_phrase(confidences, correct, alpha, delta, max_abstention)
    if max_abstention is None:
        return None, record, (f"no threshold keeps the error rate among answered questions below alpha={alpha} {rows} "
                              f"({power})")
    low, high = record["error_certified"], record["abstention_certified"]
    if low is None:
        best = [f"the error rate alone is certified at no threshold (at delta / 2 = {delta / 2:g})"]
    else:
        abstained = 1 - selective_risk(confidences, correct, low)["coverage"]
        best = [f"the lowest threshold certified for the error rate, {low:.2f}, abstains on {100 * abstained:.1f}%"]
    if high is None:
        best.append("the abstention rate is certified at no threshold")
    else:
        risk = selective_risk(confidences, correct, high)["risk"]
        best.append(f"the highest certified for the abstention rate, {high:.2f}, has an error rate of {risk:.3f} "
                    "among answered")
    return None, record, (f"no threshold keeps both the error rate among answered questions <= {alpha} and the "
                          f"abstention rate <= {max_abstention} {rows} ({'; '.join(best)}; {power})")


def _power_phrase(confidences: Sequence[float], correct: Sequence[int], alpha: float, delta: float,
                  max_abstention: float | None) -> str:
    """What a larger calibration set would do ([`~elical_hf.metrics.risk_control.rows_for_power`]), as a phrase."""
    from ..metrics.risk_control import POWER_DOUBLINGS, rows_for_power

    needed = rows_for_power(confidences, correct, alpha, delta, max_abstention)
    if needed is None:
        return (f"even {2 ** POWER_DOUBLINGS * len(confidences):,} rows like these would certify one in fewer than 80% of draws: the "
                "model's error rate at its confidences may not allow it")
    return f"about {needed:,} rows like these would certify one in 80% of draws"


POOLED_FALLBACK_NOTE = ("the pooled guarantee bounds the error rate over the mix of domains, not among this domain's "
                        "questions")
"""Why a domain on the pooled fallback has no guarantee of its own (in its `fallback` reason, with `alpha`)."""


def _domain_thresholds(confidences: Sequence[float], correct: Sequence[int], domains: Sequence[str], by: str,
                       min_rows: int, alpha: float | None, delta: float, max_abstention: float | None,
                       allow_pooled_fallback: bool = False) -> dict[str, Any]:
    """The [`~elical_hf.ConfidenceConfig.domain_thresholds`] map: each domain's threshold by the rule, or `null`
    (the pooled fallback) for a domain with too few rows; a `ValueError` when a domain's rows certify nothing, or
    (with `alpha`, unless `allow_pooled_fallback`) when a domain would fall back."""
    entries: dict[str, Any] = {}
    uncertified: list[str] = []
    counts = Counter(domains)
    names = sorted(counts)
    small = {name: counts[name] for name in names if counts[name] < min_rows}
    if alpha is not None and small and not allow_pooled_fallback:
        listed = ", ".join(f"{name} ({rows} rows)" for name, rows in small.items())
        raise ValueError(f"{by} {listed}: fewer than --min_domain_rows {min_rows} rows, so the pooled threshold would "
                         f"gate them, and {POOLED_FALLBACK_NOTE} (a domain calibrated unlike the pool can exceed alpha "
                         "by far). Label more rows for them, lower --min_domain_rows, or pass --allow_pooled_fallback "
                         "to accept it. Nothing was written.")
    for name in names:
        rows = [i for i, domain in enumerate(domains) if domain == name]
        entry: dict[str, Any] = {"decision_threshold": None, "rows": len(rows), "answered": None,
                                 "risk_control": None, "fallback": None}
        if len(rows) < min_rows:
            entry["fallback"] = f"{len(rows)} rows, fewer than {min_rows}"
            if alpha is not None:
                entry["fallback"] += f": {POOLED_FALLBACK_NOTE}"
        else:
            conf, right = [confidences[i] for i in rows], [correct[i] for i in rows]
            threshold, record, problem = _choose(conf, right, alpha, delta, max_abstention)
            if threshold is None:
                uncertified.append(f"{name} ({problem})")
            else:
                record = None if record is None else {k: v for k, v in record.items() if k != "method"}
                entry.update(decision_threshold=threshold, answered=sum(c >= threshold for c in conf),
                             risk_control=record)
        entries[name] = entry
    if uncertified:  # the pooled threshold is no guarantee for a domain whose own rows certify nothing: never implied
        raise ValueError(f"No threshold is certified for {by} {'; '.join(uncertified)}. Give those domains more "
                         "labelled rows, a larger alpha or delta, or --min_domain_rows above their row counts with "
                         "--allow_pooled_fallback to gate them knowingly with the pooled threshold (which carries no "
                         "guarantee for their questions alone). Nothing was written.")
    return {"by": by, "min_rows": min_rows, "domains": entries}
