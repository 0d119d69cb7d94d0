"""`elical-hf monitor`: do new questions still look like the ones the model's threshold was chosen on?

Scores new, unlabelled questions (`--questions`) with a saved model and compares their confidences with the
calibration rows' by the two-sample Kolmogorov-Smirnov test (`elical_hf.evaluation.drift.confidence_drift`), each
distinct question once on each side: the statistic, its p-value, its power against a shift of every confidence
(`--shift`) and a plain verdict; with `--checks_per_period K`, what K scheduled checks risk together and the level that
keeps them at the one given (Bonferroni). The calibration confidences are those `elical-hf threshold` saved in the model
folder (`calibration_confidences.json`), or `--reference` records scored again. A risk-controlled threshold's guarantee
assumes new questions are drawn like the calibration rows; when the test says they are not, choose the threshold
again on fresh labelled rows like the new questions (docs/gate.md). Exits 1 when it finds drift (as `diff` exits 1
when files differ), 0 otherwise.
"""

from __future__ import annotations

from elical_hf.evaluation.drift import POWER_DRAWS
from elical_hf.steps.monitor import MonitorArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(MonitorArguments, prog="elical-hf monitor", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.steps import monitor

    (options,) = make_parser().parse_with_config(argv)
    result = monitor(options, say=print)
    print(f"KS statistic {result['statistic']:.3f}, p-value {result['p_value']:.3g} (new: {result['rows_new']} rows, "
          f"{result['n_new']} distinct questions scored; calibration: {result['rows_reference']} rows, "
          f"{result['n_reference']} distinct questions; mean confidence {result['mean_new']:.3f} vs "
          f"{result['mean_reference']:.3f}).")
    print(f"Power: at these sizes the test detects a shift of {result['shift']} in every confidence with probability "
          f"{result['power']:.2f} ({POWER_DRAWS} seeded simulations; --shift sets the shift).")
    if result["threshold"] is not None:
        print(f"At the decision threshold {result['threshold']}: answers {100 * result['answered_new']:.1f}% of the "
              f"new questions, {100 * result['answered_reference']:.1f}% of the calibration rows.")
    print(result["verdict"][0].upper() + result["verdict"][1:] + ".")
    if result["schedule"] is not None:
        schedule, level = result["schedule"], result["significance"]
        print(f"Schedule: {schedule['checks_per_period']} checks per period at {level} raise a false alarm in up "
              f"to {100 * schedule['false_alarm']:.0f}% of periods when nothing changed (1 - (1 - {level})^"
              f"{schedule['checks_per_period']} for independent checks); for at most {level} per period run each at "
              f"--significance {schedule['bonferroni']:.2g} (Bonferroni).")
    return 1 if result["drift"] else 0
