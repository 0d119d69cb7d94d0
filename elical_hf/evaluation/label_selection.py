"""Which questions to send for correctness labels: chosen from a stage-1 model's confidences, or at random.

Stage 2 of EliCal needs a few hundred correctness labels. [`select_for_labelling`] picks which of a pool of
questions to label, given the stage-1 (elicitation) model's confidence for each:

- `"random"`: a seeded uniform sample (what the paper does),
- `"quantile"`: stratified across confidence quantiles: the pool sorted by confidence is cut into `num_labels` strata
  of equal size and one question is drawn from each (the same distribution as random, spread evenly over the range),
- `"uniform"`: stratified across confidence *values*: ten equal-width confidence bins share the labels as equally as
  their sizes allow, so rare confidence levels (usually the high ones) get more labels than random would give them.

`experiments/label_selection.py` measures whether either stratified strategy calibrates better than random on the
committed replication records (`docs/gate.md`); [`DEFAULT_STRATEGY`] stays random unless that measurement shows a
stratified strategy beating it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


__all__ = ["DEFAULT_STRATEGY", "SELECTION_STRATEGIES", "select_for_labelling"]

SELECTION_STRATEGIES = ("random", "quantile", "uniform")
DEFAULT_STRATEGY = "random"
"""The default of `elical-hf select-labels`: random (the paper's). A stratified strategy becomes the default only once
`experiments/label_selection.py` shows it beating random; `docs/gate.md` has the measurement."""
UNIFORM_BINS = 10


def select_for_labelling(
    confidences: Sequence[float], num_labels: int, strategy: str = DEFAULT_STRATEGY, seed: int = 0
) -> list[int]:
    """
    Indices of the `num_labels` questions (of the pool whose stage-1 confidences are given) to send for labels.

    Args:
        confidences (`list[float]`): The stage-1 model's confidence for each question of the pool, in [0, 1].
        num_labels (`int`): How many to pick (at most the pool's size).
        strategy (`str`, *optional*, defaults to [`DEFAULT_STRATEGY`]): One of [`SELECTION_STRATEGIES`] (see the
            module docstring).
        seed (`int`, *optional*, defaults to 0): Seeds every random draw.

    Returns:
        `list[int]`: distinct indices into `confidences`, sorted.
    """
    scores = np.asarray(confidences, dtype=np.float64)
    if strategy not in SELECTION_STRATEGIES:
        raise ValueError(f"`strategy` must be one of {SELECTION_STRATEGIES}, got {strategy!r}.")
    if scores.ndim != 1 or not np.isfinite(scores).all():
        raise ValueError("`confidences` must be a flat list of finite numbers.")
    if not 1 <= num_labels <= scores.size:
        raise ValueError(f"`num_labels` must lie in [1, {scores.size}] (the pool's size), got {num_labels}.")
    rng = np.random.default_rng(seed)
    if strategy == "random":
        chosen = rng.choice(scores.size, size=num_labels, replace=False)
    elif strategy == "quantile":
        order = np.argsort(scores, kind="stable")
        edges = np.linspace(0, scores.size, num_labels + 1).round().astype(int)
        chosen = np.array([order[rng.integers(low, high)] for low, high in zip(edges[:-1], edges[1:])])
    else:
        bins = np.minimum((scores * UNIFORM_BINS).astype(int), UNIFORM_BINS - 1)
        members = [np.flatnonzero(bins == b) for b in range(UNIFORM_BINS)]
        quota = _equal_shares([len(m) for m in members], num_labels)
        chosen = np.concatenate([rng.choice(m, size=q, replace=False) for m, q in zip(members, quota) if q])
    return sorted(int(i) for i in chosen)


def _equal_shares(sizes: list[int], total: int) -> list[int]:
    """Split `total` over groups as equally as their `sizes` allow (water-filling: small groups are taken whole)."""
    quota = [0] * len(sizes)
    left = total
    open_groups = [i for i, size in enumerate(sizes) if size]
    while left and open_groups:
        share = max(1, left // len(open_groups))
        for i in list(open_groups):
            take = min(share, sizes[i] - quota[i], left)
            quota[i] += take
            left -= take
            if quota[i] == sizes[i]:
                open_groups.remove(i)
            if not left:
                break
    return quota
