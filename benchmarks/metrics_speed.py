"""Time `elical_hf.metrics.functional` against reference implementations (a script, not a test).

AUROC is compared with `sklearn.metrics.roc_auc_score`, ECE with a straightforward per-bin numpy loop. Each timing is
the median of `--repeats` runs on the same data; the ratio is ours / baseline (below 1 means ours is faster). Values
are checked to agree before timing.

    python benchmarks/metrics_speed.py                 # n = 1e4, 1e5, 1e6
    python benchmarks/metrics_speed.py --sizes 1000000 --repeats 9 --decimals 2

`--bootstrap_rows` (default 400, the demo's test set; 0 skips) also times the bootstrap of the paper's table metrics
(AUROC, ECE, alignment; 1,000 resamples): all resamples at once (`elical_hf.metrics.resampled`) against one metric
call per resample (`bootstrap_samples`), after checking that they agree.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import median_seconds, print_machine

from elical_hf.metrics.functional import auroc, ece


def loop_ece(confidences: np.ndarray, correct: np.ndarray, n_bins: int = 10) -> float:
    """Baseline ECE: one boolean mask per equal-width bin, 1.0 in the last bin."""
    total = 0.0
    for i in range(n_bins):
        low, high = i / n_bins, (i + 1) / n_bins
        mask = (confidences >= low) & ((confidences < high) if i < n_bins - 1 else (confidences <= high))
        if mask.any():
            total += mask.sum() / confidences.size * abs(confidences[mask].mean() - correct[mask].mean())
    return float(total)


def make_data(n: int, seed: int, decimals: int | None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    conf = rng.random(n)
    if decimals is not None:
        conf = np.round(conf, decimals)
    correct = (rng.random(n) < 0.2 + 0.6 * conf).astype(np.int64)
    return conf, correct


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--decimals", type=int, default=None, help="round confidences (creates ties); default: none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bootstrap_rows", type=int, default=400)
    args = parser.parse_args(argv)

    from sklearn.metrics import roc_auc_score

    print_machine()
    header = f"{'metric':<6} {'n':>9} {'ours (ms)':>10} {'baseline (ms)':>14} {'ours/baseline':>14}  baseline"
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        conf, correct = make_data(n, args.seed, args.decimals)
        assert abs(auroc(conf, correct) - roc_auc_score(correct, conf)) < 1e-12
        assert abs(ece(conf, correct) - loop_ece(conf, correct)) < 1e-9
        rows = [
            ("auroc", lambda: auroc(conf, correct), lambda: roc_auc_score(correct, conf), "sklearn roc_auc_score"),
            ("ece", lambda: ece(conf, correct), lambda: loop_ece(conf, correct), "numpy loop over 10 bins"),
        ]
        for name, ours, baseline, label in rows:
            t_ours = median_seconds(ours, args.repeats)
            t_base = median_seconds(baseline, args.repeats)
            print(f"{name:<6} {n:>9,} {t_ours * 1e3:>10.2f} {t_base * 1e3:>14.2f} {t_ours / t_base:>14.2f}  {label}")
    if args.bootstrap_rows:
        bootstrap_table(args)


def bootstrap_table(args: argparse.Namespace, resamples: int = 1000) -> None:
    """The three table metrics on `resamples` bootstrap resamples: vectorized vs one call per resample."""
    import warnings

    from elical_hf.metrics.functional import alignment, bootstrap_indices, bootstrap_samples
    from elical_hf.metrics.resampled import resampled_alignment, resampled_auroc, resampled_ece

    n = args.bootstrap_rows
    conf, correct = make_data(n, args.seed, 3 if args.decimals is None else args.decimals)
    rng = np.random.default_rng(args.seed)
    rows, split = bootstrap_indices(n, resamples, rng), bootstrap_indices(n, resamples, rng, calibration_fraction=0.2)

    def align(c, y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return alignment(c, y, calibration_fraction=0.2)["alignment"]

    pairs = [
        ("auroc", lambda: resampled_auroc(conf, correct, rows), lambda: bootstrap_samples(auroc, conf, correct, rows)),
        ("ece", lambda: resampled_ece(conf, correct, rows), lambda: bootstrap_samples(ece, conf, correct, rows)),
        ("alignment", lambda: resampled_alignment(conf, correct, split),
         lambda: bootstrap_samples(align, conf, correct, split)),
    ]
    print(f"\nBootstrap, {resamples} resamples of {n} rows: all at once vs one metric call per resample")
    print(f"{'bootstrap':<19} {'at once (ms)':>13} {'per resample (ms)':>18} {'ratio':>7}")
    for name, ours, baseline in pairs:
        assert np.allclose(ours(), baseline(), rtol=0, atol=1e-12, equal_nan=True)
        t_ours, t_base = median_seconds(ours, args.repeats), median_seconds(baseline, max(1, args.repeats // 3))
        print(f"bootstrap {name:<9} {t_ours * 1e3:>13.1f} {t_base * 1e3:>18.1f} {t_ours / t_base:>7.3f}")


if __name__ == "__main__":
    main()
