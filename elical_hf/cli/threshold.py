"""`elical-hf threshold`: choose a saved model's answer/abstain threshold on labelled records and store it.

By default the threshold maximises the accuracy of "answer when confidence >= t" on the records given (the rule of
the paper's alignment metric, `select_threshold`). With `--alpha` it is the lowest threshold whose error rate among
answered questions is at most alpha with probability at least 1 - delta over the draw of these records
(`risk_controlling_threshold`: Learn-Then-Test with binomial p-values); alpha, delta, the number of records and the
coverage reached are stored with it as `risk_control`. Either way it is written as `decision_threshold` into the
model's `confidence_config.json` (and its generated card), where `model.answer`, `model.confidence` users and the
`confidence-estimation` pipeline read it. Choose it on a labelled split that is not the test set you report
(`train` by default: held-out labelled questions).
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
    else:
        guarantee = chosen["guarantee"]
        print(f"Guarantee: error rate among answered <= {options.alpha} with probability >= {1 - options.delta:.2f}; "
              f"here coverage {100 * guarantee['coverage']:.1f}%, error rate {guarantee['risk']:.3f} "
              f"(upper bound {guarantee['risk_upper_bound']:.3f}).")
    return 0
