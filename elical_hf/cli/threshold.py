"""`elical-hf threshold`: choose a saved model's answer/abstain threshold on labelled records and store it.

By default the threshold maximises the accuracy of "answer when confidence >= t" on the records given (the rule of
the paper's alignment metric, `select_threshold`). With `--alpha` it is the lowest threshold certified by
Learn-Then-Test (`risk_controlling_threshold`: binomial p-values, a few fixed sequences sharing delta), so that over
the draw of calibration sets like these P(error rate among answered <= alpha) >= 1 - delta, writing no threshold
counting as meeting it: a property of the procedure, not a promise about the one threshold written. The command prints
the calibration size, the fewest rows a certifiable threshold answers at it, and how often calibration sets like this
one would certify a threshold at all (a bootstrap of the rows), with a warning and the rows needed when that is below
80%. With `--max_abstention` too, its abstention rate is also at most that bound, both together with probability
1 - delta (each risk tested at delta / 2), or the command says that no threshold satisfies both and what the best
candidates reach. alpha, delta, the number of records and the coverage reached are stored with it as `risk_control`.
Either way it is written as `decision_threshold` into the model's `confidence_config.json` (and its generated card),
where `model.answer`, `model.confidence` users and the `confidence-estimation` pipeline read it. With `--by dataset`
(or any record column naming a domain) each domain also gets its own threshold by the same rule (`domain_thresholds`;
a domain with fewer than `--min_domain_rows` rows keeps the pooled one, which under `--alpha` needs
`--allow_pooled_fallback`: the pooled guarantee is over the mix of domains, not one domain's questions). The rows'
confidences are saved in the folder (`calibration_confidences.json`) for `elical-hf monitor`.

The rows must be held out from training: `--split` defaults to `in_domain_test` (the in-domain datasets' dev/test
files, which the paper also chooses its alignment threshold on; `train` holds the rows models are fitted on), and rows
whose question the model records having trained on (any stage) are refused unless `--allow_training_rows`.
"""

from __future__ import annotations

import sys
from typing import Any

from elical_hf.steps.threshold import ThresholdArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ThresholdArguments, prog="elical-hf threshold", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME
    from elical_hf.steps import threshold

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--model" in argv[:-1]:  # the earlier spelling, `--model FOLDER`
        at = argv.index("--model")
        argv = [argv[at + 1], *argv[:at], *argv[at + 2 :]]
    (options,) = make_parser().parse_with_config(argv)
    chosen = threshold(options, say=print)
    print(f"decision_threshold = {chosen['threshold']:.2f} written to {options.model}/{CONFIDENCE_CONFIG_NAME} "
          f"(on {chosen['rows']} {options.split} records: answers {chosen['answered']} of them).")
    if options.alpha is None:
        print(f"The alignment rule: answer/abstain decisions {chosen['accuracy']:.1f}% right on these records.")
    else:
        _print_guarantee(options, chosen["guarantee"])
    for name, entry in chosen.get("domains", {}).items():
        if entry["decision_threshold"] is None:
            print(f"  {options.by} {name}: the pooled threshold ({entry['fallback']}).")
        else:
            print(f"  {options.by} {name}: {entry['decision_threshold']:.2f} (answers {entry['answered']} of its "
                  f"{entry['rows']} records).")
    return 0


def _print_guarantee(options: ThresholdArguments, guarantee: dict[str, Any]) -> None:
    """What the guarantee says, at this calibration size, and how often it certifies anything."""
    from elical_hf.metrics.risk_control import POWER_DOUBLINGS

    n, alpha, level = guarantee["n"], options.alpha, f"{1 - options.delta:.2f}"
    bound = f"error rate among answered <= {alpha}"
    if options.max_abstention is not None:
        bound += f" and abstention rate <= {options.max_abstention}, together"
    print(f"Guarantee: {bound} with probability >= {level} over the draw of calibration sets of n = {n} rows like "
          "these, writing no threshold counting as meeting it: a property of the procedure, not a promise about this "
          "one threshold.")
    here = f"Here: coverage {100 * guarantee['coverage']:.1f}%, error rate {guarantee['risk']:.3f} (upper bound "
    here += f"{guarantee['risk_upper_bound']:.3f})"
    if options.max_abstention is not None:
        here += (f", abstention {100 * (1 - guarantee['coverage']):.1f}% (upper bound "
                 f"{100 * guarantee['abstention_upper_bound']:.1f}%)")
    print(f"{here}; at n = {n} a threshold is certifiable only if it answers at least {guarantee['min_answered']} "
          f"rows ({guarantee['sequences']} fixed sequence(s)).")
    power = guarantee["power"]
    if power >= 0.8:
        print(f"Power: {100 * power:.0f}% of calibration sets like this one (a bootstrap of these rows) certify a "
              "threshold at these bounds.")
        return
    needed = guarantee["rows_for_power"]
    more = (f"about {needed:,} rows would make it 80%" if needed is not None else
            f"even {2 ** POWER_DOUBLINGS * n:,} rows would not make it 80%")
    print(f"warning: low power: only {100 * power:.0f}% of calibration sets like this one (a bootstrap of these "
          f"{n} rows) certify a threshold at these bounds, so one written at this size is often a lucky draw; {more}: "
          "label more rows, or loosen --alpha.")

