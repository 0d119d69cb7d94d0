"""`elical-hf threshold`: choose a saved model's answer/abstain threshold on labelled records and store it.

By default the threshold maximises the accuracy of "answer when confidence >= t" on the records given (the rule of
the paper's alignment metric, `select_threshold`). With `--alpha` it is the lowest threshold whose error rate among
answered questions is at most alpha with probability at least 1 - delta over the draw of these records
(`risk_controlling_threshold`: Learn-Then-Test with binomial p-values); with `--max_abstention` too, its abstention
rate is also at most that bound, both together with probability 1 - delta (each risk tested at delta / 2), or the
command says that no threshold satisfies both and what the best candidates reach. alpha, delta, the number of records
and the coverage reached are stored with it as `risk_control`. Either way it is written as `decision_threshold` into
the model's `confidence_config.json` (and its generated card), where `model.answer`, `model.confidence` users and the
`confidence-estimation` pipeline read it. With `--by dataset` (or any record column naming a domain) each domain also
gets its own threshold by the same rule (`domain_thresholds`; a domain with fewer than `--min_domain_rows` rows, or
none certified, keeps the pooled one), used when a question names its domain. The rows' confidences are saved in the
folder (`calibration_confidences.json`) for `elical-hf monitor`. Choose it on a labelled split that is not the test
set you report (`train` by default: held-out labelled questions).
"""

from __future__ import annotations

import sys

from elical_hf.steps.training import ThresholdArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ThresholdArguments, prog="elical-hf threshold", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.configuration import CONFIDENCE_CONFIG_NAME
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
    elif options.max_abstention is None:
        guarantee = chosen["guarantee"]
        print(f"Guarantee: error rate among answered <= {options.alpha} with probability >= {1 - options.delta:.2f}; "
              f"here coverage {100 * guarantee['coverage']:.1f}%, error rate {guarantee['risk']:.3f} "
              f"(upper bound {guarantee['risk_upper_bound']:.3f}).")
    else:
        guarantee = chosen["guarantee"]
        print(f"Guarantee: error rate among answered <= {options.alpha} and abstention rate <= "
              f"{options.max_abstention}, together with probability >= {1 - options.delta:.2f}; here abstention "
              f"{100 * (1 - guarantee['coverage']):.1f}% (upper bound "
              f"{100 * guarantee['abstention_upper_bound']:.1f}%), error rate {guarantee['risk']:.3f} (upper bound {guarantee['risk_upper_bound']:.3f}).")
    for name, entry in chosen.get("domains", {}).items():
        if entry["decision_threshold"] is None:
            print(f"  {options.by} {name}: the pooled threshold ({entry['fallback']}).")
        else:
            print(f"  {options.by} {name}: {entry['decision_threshold']:.2f} (answers {entry['answered']} of its "
                  f"{entry['rows']} records).")
    return 0
