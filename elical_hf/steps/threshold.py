"""`elical-hf threshold` as a step: a saved model and labelled records in, its answer/abstain threshold out, written
into the model folder ([`~elical_hf.models.saved_model.set_decision_threshold`])."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .arguments import RecordArguments


__all__ = ["HELD_OUT_SPLIT", "ThresholdArguments", "threshold"]

logger = logging.getLogger(__name__)


HELD_OUT_SPLIT = "in_domain_test"
"""The default calibration split of `elical-hf threshold`: the in-domain datasets' dev/test files (the paper's
in-domain test split), never trained on; `train` rows are the ones a model is fitted on."""


@dataclass(kw_only=True)
class ThresholdArguments(RecordArguments):
    """Options of [`threshold`] (`elical-hf threshold`)."""

    model: str = field(metadata={"positional": True, "help": "A saved confidence model folder (gets "
                                 "decision_threshold); `--model FOLDER` is accepted too."})
    split: str = field(
        default=HELD_OUT_SPLIT,
        metadata={"help": "Which paper split of the records to choose it on. Default in_domain_test: the datasets' own "
                  "dev/test files, the labelled rows a model never trains on (the paper chooses its alignment "
                  "threshold on them too); report its decisions on other rows (ood_test, or a part not used here). "
                  "The rows are checked against the questions the model records it trained on (stage 1 included)."},
    )
    allow_training_rows: bool = field(
        default=False,
        metadata={"help": "Use calibration rows the model was trained on (refused otherwise): the guarantee then "
                  "does not hold, since it needs rows the model never saw."},
    )
    alpha: float | None = field(
        default=None,
        metadata={"help": "Guarantee an error rate among answered questions of at most ALPHA (with probability "
                  "1 - DELTA); without it, the alignment rule."},
    )
    delta: float = field(default=0.1, metadata={"help": "Allowed probability that the --alpha guarantee fails."})
    max_abstention: float | None = field(
        default=None,
        metadata={"help": "With --alpha, also guarantee an abstention rate (share of questions not answered) of at "
                  "most MAX_ABSTENTION; both hold together with probability 1 - DELTA (each tested at DELTA / 2)."},
    )
    by: str | None = field(
        default=None,
        metadata={"help": "A record column naming each question's domain (e.g. `dataset`): one threshold per domain, "
                  "by the same rule, saved beside the pooled one (the fallback); `model.answer(..., domain=)`, the "
                  "pipeline and the server use it."},
    )
    min_domain_rows: int = field(
        default=30, metadata={"help": "With --by: a domain with fewer labelled rows gets the pooled threshold."}
    )
    allow_pooled_fallback: bool = field(
        default=False,
        metadata={"help": "With --by and --alpha: let domains under --min_domain_rows fall back to the pooled "
                  "threshold (refused otherwise: the pooled guarantee bounds the error rate over the mix of domains, "
                  "not among one domain's questions)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.alpha is not None and not 0.0 < self.alpha < 1.0:  # before any file or model is read
            raise ValueError(f"--alpha must lie in (0, 1) (an error rate among answered questions), got {self.alpha}.")
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"--delta must lie in (0, 1) (the probability the guarantee fails), got {self.delta}.")
        if self.max_abstention is not None and self.alpha is None:
            raise ValueError("--max_abstention needs --alpha: the two guarantees are chosen together (e.g. --alpha 0.1 "
                             "--max_abstention 0.4).")
        if self.max_abstention is not None and not 0.0 < self.max_abstention < 1.0:
            raise ValueError(f"--max_abstention must lie in (0, 1) (a share of questions not answered), got "
                             f"{self.max_abstention}.")
        if self.min_domain_rows < 5:
            raise ValueError(f"--min_domain_rows must be at least 5, got {self.min_domain_rows}.")


def threshold(args: ThresholdArguments, *, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """
    Choose a saved model's answer/abstain threshold on labelled records and write it into the model folder
    ([`~elical_hf.models.saved_model.set_decision_threshold`]): the alignment rule, or with `args.alpha` the lowest
    threshold whose error rate among answered questions is at most `alpha` (and with `args.max_abstention` whose
    abstention rate is at most that) with probability `1 - delta`; with `args.by` also one per domain. The rows'
    confidences are saved as the reference of `elical-hf monitor` ([`~elical_hf.evaluation.drift.load_reference`]), in
    the same update as the threshold: a failure leaves the model as it was.

    `args.model` is a saved, trained confidence model folder (a base model, or one never trained, is refused before
    anything is scored); the records of `args.records` of the paper's split `args.split` (default
    [`HELD_OUT_SPLIT`]) with a judged greedy answer are used (at least 5). Rows whose question the model records
    having trained on ([`~elical_hf.models.saved_model.trained_question_overlap`], every stage) are refused in one line
    unless `args.allow_training_rows` (then counted as `training_rows` in `risk_control`); a model that records no
    training questions gets a warning that the check could not be made. Choose it on a split that is not the test set
    you report.

    Returns:
        `dict`: `threshold`, `rows` (records used), `answered` (of them), `training_rows` (of them trained on, or
        `None` when the model records nothing to check), and `accuracy` (the alignment rule's, in percent) or
        `guarantee` (`coverage`, `risk`, `risk_upper_bound`, `n`, `sequences`, `min_answered` (the fewest rows a
        certifiable threshold answers), `power` ([`~elical_hf.metrics.risk_control.certification_power`]),
        `rows_for_power` (rows for 80% power when `power` is below it, `None` if no size up to `2^POWER_DOUBLINGS` n
        reaches it, absent otherwise), and with `max_abstention` `abstention_upper_bound`); with `by`, `domains` (the
        saved map's entries).
    """
    from ..models.auto import AutoModelForConfidence
    from ..settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
    from ..utils.files import refuse_output_over_inputs
    from ..evaluation.drift import first_rows
    from ..models.saved_model import QUESTIONS_KEY, REFERENCE_NAME, question_digests, set_decision_threshold
    from ..metrics import selective_risk
    from ..signals.records import JUDGE_OPTIONS, check_records_match, load_records
    from .evaluate import check_trained_model, model_confidences

    say = say or logger.info
    model, records, split, alpha = args.model, args.records, args.split, args.alpha
    for name in (CONFIDENCE_CONFIG_NAME, REFERENCE_NAME, "README.md"):  # what it writes into the model folder
        refuse_output_over_inputs(os.path.join(model, name), {"--records": records}, "The model file")
    loaded = load_records(records, splits=True, allow_incomplete=args.allow_incomplete)
    parts = loaded["paper_split"] if len(loaded) else []
    if split not in parts:
        raise ValueError(f"{records} has no {split!r} records (found {list(dict.fromkeys(parts))}).")
    if args.by is not None and args.by not in loaded.column_names:
        raise ValueError(f"--by {args.by}: the records have no such column (they have "
                         f"{', '.join(loaded.column_names)}).")
    chosen = loaded.select([i for i, part in enumerate(parts) if part == split])
    rows = [r for r in chosen if r["greedy_correctness"] is not None]
    if len(rows) < 5:
        raise ValueError(f"Need at least 5 judged {split!r} records to choose a threshold, found {len(rows)} (judge "
                         f"them: `{JUDGE_OPTIONS['greedy_correctness']}`).")
    domains = None
    if args.by is not None:
        missing = [i for i, r in enumerate(rows) if r[args.by] is None or str(r[args.by]).strip() == ""]
        if missing:
            raise ValueError(f"--by {args.by}: {len(missing)} of the {len(rows)} {split!r} records name no {args.by} "
                             f"(the first is {rows[missing[0]]['question']!r}).")
        domains = [str(r[args.by]) for r in rows]
    check_trained_model(model, model)  # before it is loaded and scores anything
    if split.endswith("test"):
        say(f"warning: choosing the threshold on {split!r}: do not report results on these records")
    confidence_model = AutoModelForConfidence.from_pretrained(model)
    check_records_match(rows, confidence_model.confidence_config.base_model_name_or_path, str(records),
                        args.allow_other_model)
    trained = _check_training_rows(confidence_model.confidence_config, model, rows, split, args.allow_training_rows,
                                   say)
    confidences = model_confidences(confidence_model, rows, batch_size=args.batch_size)  # MC rows: the MC prompt
    correct = [int(r["greedy_correctness"]) for r in rows]
    source = {"records": str(records), "split": split, **({"training_rows": trained} if trained else {})}
    chosen_threshold = set_decision_threshold(model, confidences, correct, alpha=alpha, delta=args.delta,
                                              max_abstention=args.max_abstention, source=source, domains=domains,
                                              by=args.by or "dataset", min_domain_rows=args.min_domain_rows,
                                              reference={**source, "by": args.by, "domains": domains,
                                                         "question_ids": first_rows([r["question"] for r in rows]),
                                                         QUESTIONS_KEY: question_digests(r["question"] for r in rows)},
                                              allow_pooled_fallback=args.allow_pooled_fallback)
    out: dict[str, Any] = {"threshold": chosen_threshold, "rows": len(rows), "training_rows": trained,
                           "answered": sum(c >= chosen_threshold for c in confidences)}
    config = ConfidenceConfig.from_json_file(os.path.join(model, CONFIDENCE_CONFIG_NAME))
    if alpha is None:
        right = sum((c >= chosen_threshold) == bool(y) for c, y in zip(confidences, correct))
        out["accuracy"] = 100 * right / len(rows)
    else:
        record = config.risk_control
        measured = selective_risk(confidences, correct, chosen_threshold)
        out["guarantee"] = {"coverage": measured["coverage"], "risk": measured["risk"],
                            "risk_upper_bound": record["risk_upper_bound"],
                            **_power(confidences, correct, alpha, args.delta, args.max_abstention)}
        if args.max_abstention is not None:
            out["guarantee"]["abstention_upper_bound"] = record["abstention_upper_bound"]
    if config.domain_thresholds is not None:
        out["domains"] = config.domain_thresholds["domains"]
    return out


def _check_training_rows(config: Any, model: str, rows: list[dict[str, Any]], split: str, allow: bool,
                         say: Callable[[str], None]) -> int | None:
    """How many calibration `rows` the model records having trained on; refused (one `ValueError`) unless `allow`.
    `None`, with a warning, when no training run of the model records its questions."""
    from ..models.saved_model import trained_question_overlap

    overlap, unrecorded = trained_question_overlap(config, [r["question"] for r in rows])
    if unrecorded:
        say(f"warning: {model} records no training questions for its {', '.join(unrecorded)} run(s) (saved before "
            f"elical-hf recorded them, or trained on tokenised rows): the {split!r} rows could not be checked against "
            "its training data, and the guarantee needs rows it never saw")
    if overlap and not allow:
        raise ValueError(f"{overlap} of the {len(rows)} {split!r} calibration rows are questions {model} was "
                         "trained on (by the questions its training history records, stage 1 included): the guarantee "
                         "needs rows it never saw. Choose a held-out --split, or pass --allow_training_rows to use them anyway "
                         "(the guarantee then does not hold).")
    if overlap:
        say(f"warning: {overlap} of the {len(rows)} {split!r} rows were trained on (--allow_training_rows): the "
            "guarantee does not hold for this threshold")
    return None if len(unrecorded) == len(config.training_history) else overlap


def _power(confidences: list[float], correct: list[int], alpha: float, delta: float,
           max_abstention: float | None) -> dict[str, Any]:
    """The calibration size and what it can certify: `n`, `sequences`, `min_answered`, `power`, `rows_for_power`."""
    from ..metrics.risk_control import certification_power, fixed_sequences, rows_for_power

    n = len(confidences)
    tested = fixed_sequences(n, alpha, delta if max_abstention is None else delta / 2)
    out = {"n": n, "sequences": len(tested), "min_answered": tested[0][0],
           "power": certification_power(confidences, correct, alpha, delta, max_abstention)}
    if out["power"] < 0.8:
        out["rows_for_power"] = rows_for_power(confidences, correct, alpha, delta, max_abstention)
    return out
