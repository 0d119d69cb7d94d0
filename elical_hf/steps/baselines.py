"""`elical-hf baselines` as a step: records in, records with the training-free baselines' confidences out
([`~elical_hf.signals.compute_baselines`]), one `confidence_<name>` column each, written atomically to `output` when
given."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .arguments import LexicalScoringArguments, RecordArguments, only
from ..models.default_model import DEFAULT_MODEL
from ..utils.files import check_output_extension, refuse_output_over_inputs
from .judge import Filled, fillable_records


__all__ = ["BaselinesArguments", "score_baselines"]


@dataclass(kw_only=True)
class BaselinesArguments(only(RecordArguments, "records", "allow_incomplete", "batch_size"), LexicalScoringArguments):
    """Options of [`score_baselines`] (`elical-hf baselines`, also settable from `--config file.yaml`); `--batch_size`
    is the verbal baselines' prompts per batch. In Python, `records` and `train_records` may also hold records in
    memory, and `output` may be `None` (the records are only given back)."""

    output: str | None = field(default=None,
                               metadata={"help": "Where to write the records with `confidence_<name>` columns."})
    which: str = field(
        default="prob,n_prob,consis_lex,consis_sem",
        metadata={"help": "Comma-separated baselines: prob,n_prob,consis_lex,consis_sem,verbal0,verbal10,option_prob "
                  "(multiple-choice records).", "comma_separated": True},
    )
    train_records: str | None = field(
        default=None, metadata={"help": "Judged TRAIN records, the source of Verbal-10's demonstrations."}
    )
    model: str = field(default=DEFAULT_MODEL,
                       metadata={"help": "Answering model (Hub id or folder) of verbal0/10 and option_prob."})
    parser: str = field(default="paper", metadata={"help": "Verbal score parser: 'paper' (its regex) or 'robust'."})
    seed: int = field(default=42, metadata={"help": "Seed of the demonstration draw."})

    def __post_init__(self) -> None:
        from ..signals.baselines import BASELINES, SCORE_PARSERS
        from ..signals.records import record_format

        super().__post_init__()
        self.names = [name.strip() for name in self.which.split(",") if name.strip()]
        unknown = [name for name in self.names if name not in BASELINES]
        if not self.names or unknown:
            raise ValueError(f"--which must list baselines from {sorted(BASELINES)}, got {self.which!r}.")
        if self.parser not in SCORE_PARSERS:
            raise ValueError(f"--parser must be one of {sorted(SCORE_PARSERS)}, got {self.parser!r}.")
        if "verbal10" in self.names and not self.train_records:
            raise ValueError("verbal10 needs --train_records: demonstrations come from train records, never test.")
        if self.output is not None:
            record_format(self.output)


def score_baselines(args: BaselinesArguments, *, complete: Any = None, backend: Any = None) -> Filled:
    """
    The training-free baselines `args.which` ([`~elical_hf.signals.compute_baselines`], with `args.parser`,
    `args.seed`, `args.batch_size` and `args.lexical_scoring`) of the records of `args.records` (any records input,
    [`~elical_hf.signals.records.load_records`]), stored in each as `confidence_<name>`; with both labels, their
    AUROC (x100). Verbal-10 draws its demonstrations from `args.train_records` (judged TRAIN records, never test
    records). With `args.output`, the records are also written there (atomically; not inside the `records` folder).

    Args:
        args ([`BaselinesArguments`]): The records, the baselines and their settings, the output.
        complete (`Callable`, *optional*): The answering model's completion function (Verbal-0/10); by default
            `backend`'s.
        backend ([`~elical_hf.signals.HFBackend`], *optional*): The answering model, loaded (Option-Prob's
            next-token log-probabilities, and Verbal-0/10's completions without `complete`); by default
            `args.model`, loaded only when a baseline asked for runs it (not for Option-Prob of records that carry
            `option_probabilities`).

    Returns:
        [`Filled`]: the records, the report (`mean`, `auroc`, `verbal`, or why AUROC was skipped) and the scores.
    """
    from ..metrics.functional import auroc
    from ..signals.baselines import BASELINES, compute_baselines
    from ..signals.records import RECORD_EXTENSIONS, load_records, save_records

    output, train_records = args.output, args.train_records
    if output is not None:
        refuse_output_over_inputs(output, {"--records": args.records, "--train_records": train_records,
                                           "--model": args.model})
        check_output_extension(output, RECORD_EXTENSIONS)
    rows = fillable_records(args.records, args.allow_incomplete)
    train = None
    if train_records is not None:
        train = load_records(train_records, derive=False, allow_incomplete=args.allow_incomplete).to_list()
    running = [BASELINES[name] for name in args.names if BASELINES[name].needs_model_for(rows)]
    if backend is None and any(b.model_input == "backend" or complete is None for b in running):
        from ..signals.backends import HFBackend

        backend = HFBackend(args.model)
    verbal: dict = {}
    scores = compute_baselines(rows, complete=complete, train_records=train, which=args.names, backend=backend,
                               seed=args.seed, parser=args.parser, batch_size=args.batch_size, summary=verbal,
                               lexical_scoring=args.lexical_scoring)
    labels = [r.get("greedy_correctness") for r in rows]
    report: dict[str, Any] = {"mean": {}, "auroc": {}, "verbal": verbal}
    if any(label is None for label in labels):
        report["auroc_skipped"] = (f"{sum(label is None for label in labels)} of {len(labels)} records have no greedy "
                                   "correctness (`elical-hf judge --correctness has_answer`)")
    elif len(set(map(bool, labels))) < 2:
        report["auroc_skipped"] = (f"every greedy answer is {'correct' if bool(labels[0]) else 'wrong'}: AUROC needs "
                                   "both correct and wrong answers")
    for name, values in scores.items():
        report["mean"][name] = sum(values) / len(values)
        if "auroc_skipped" not in report:
            report["auroc"][name] = 100 * auroc(values, [int(bool(label)) for label in labels])
    if output is not None:
        save_records(rows, output)
    return Filled(rows, report, scores)
