"""Figures for confidence reports: reliability diagrams, risk-coverage curves and AUROC against the number of labels.

Every function writes one PNG and returns its path; given `path=None` it writes nothing and returns the matplotlib
`Figure` instead (to inspect what is drawn, or save it in another format). Figures are drawn on matplotlib's Agg canvas
directly (no `pyplot`), so importing or calling this module never changes the process-wide matplotlib backend. The
numbers come from [`elical_hf.metrics.functional`], so a plot always shows what the metrics report.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..utils.atomic import atomic_file
from ..metrics.functional import aurc, ece, reliability_bins, risk_coverage_curve


__all__ = ["auroc_vs_labels_plot", "auroc_vs_layer_grid", "auroc_vs_layer_plot", "confidence_drift_plot",
           "reliability_diagram", "risk_coverage_plot"]

_ACCURACY_COLOR = "#1f77b4"
_GAP_COLOR = "#d62728"


def _figure(width: float, height: float):
    from ..utils.extras import require_extra

    require_extra("plots", "Plotting")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def _png_path(path: str | os.PathLike | None) -> str | None:
    if path is None:
        return None
    path = os.fspath(path)
    if not path.lower().endswith(".png"):
        raise ValueError(f"path must end with .png (figures are written as PNG), got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    return path


def _save(fig, path: str | None) -> Any:
    """Write `fig` to `path` atomically (a reader sees the old PNG or the new one); without `path`, return it."""
    if path is None:
        return fig
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    return path


def _validated(method: str, confidences: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    from ..metrics import check_inputs

    try:
        return check_inputs(confidences, correct)
    except ValueError as err:
        raise ValueError(f"{method!r}: {err}") from None


def _methods(confidences, correct) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Normalise the one-method and several-methods forms of `(confidences, correct)`."""
    if not isinstance(confidences, Mapping):
        if isinstance(correct, Mapping):
            raise ValueError("correct is a dict but confidences is not: pass a dict of confidences per method too")
        return {"": _validated("confidences", confidences, correct)}
    if not confidences:
        raise ValueError("confidences is an empty dict: give at least one method")
    if isinstance(correct, Mapping):
        if set(correct) != set(confidences):
            raise ValueError(
                f"correct and confidences must have the same methods, got {sorted(correct)} and {sorted(confidences)}"
            )
        return {m: _validated(m, confidences[m], correct[m]) for m in confidences}
    return {m: _validated(m, confidences[m], correct) for m in confidences}


def reliability_diagram(
    confidences: ArrayLike | Mapping[str, ArrayLike],
    correct: ArrayLike | Mapping[str, ArrayLike],
    path: str | os.PathLike | None,
    n_bins: int = 10,
    title: str | None = None,
) -> Any:
    """Draw a reliability diagram: accuracy per confidence bin against the diagonal, with a histogram of bin counts.

    Each panel shows, per equal-width bin, a bar for the accuracy, a hatched bar for the gap between accuracy and the
    mean confidence of the bin, the diagonal of perfect calibration, and the ECE in the legend; below it, the number
    of predictions per bin. Bins come from [`reliability_bins`], the ECE from [`ece`], with the same `n_bins`.

    Args:
        confidences (`ArrayLike` or `Mapping[str, ArrayLike]`): Confidences in [0, 1], or a dict method -> confidences
            to draw several methods side by side (in the dict's order).
        correct (`ArrayLike` or `Mapping[str, ArrayLike]`): 0/1 correctness labels; one array shared by every method,
            or a dict with the same keys as `confidences`.
        path (`str`, `os.PathLike` or `None`): Where to write the PNG (must end with `.png`; folders are created);
            `None` writes nothing and returns the `Figure`.
        n_bins (`int`, *optional*, defaults to `10`): Number of equal-width bins.
        title (`str`, *optional*, defaults to `None`): Figure title.

    Returns:
        `str`: `path`; the `matplotlib.figure.Figure` when `path` is `None`.

    Raises:
        `ValueError`: on invalid inputs (as [`ece`] reports them, prefixed by the method), an empty dict, different
            method names in `confidences` and `correct`, or a path without `.png`.
    """
    methods = _methods(confidences, correct)
    path = _png_path(path)
    fig = _figure(4.2 * len(methods), 5.2)
    grid = fig.add_gridspec(2, len(methods), height_ratios=(3, 1), hspace=0.08, wspace=0.25)
    for col, (method, (conf, y)) in enumerate(methods.items()):
        bins = reliability_bins(conf, y, n_bins=n_bins)
        score = ece(conf, y, n_bins=n_bins)
        lower, upper, count = bins["bin_lower"], bins["bin_upper"], bins["count"]
        centers, width = (lower + upper) / 2, (upper - lower)
        full = count > 0
        acc = np.where(full, bins["accuracy"], 0.0)
        mean_conf = np.where(full, bins["mean_confidence"], 0.0)

        top = fig.add_subplot(grid[0, col])
        top.bar(centers, acc, width=width, color=_ACCURACY_COLOR, edgecolor="black", linewidth=0.6, label="Accuracy")
        top.bar(
            centers[full], (mean_conf - acc)[full], bottom=acc[full], width=width[full], facecolor="none",
            edgecolor=_GAP_COLOR, hatch="//", linewidth=0.8, label="Gap to mean confidence",
        )  # drawn from the accuracy to the mean confidence: above the bar if overconfident, inside it if not
        top.plot([0, 1], [0, 1], linestyle="--", color="gray", linewidth=1, label="Perfect calibration")
        top.plot([], [], " ", label=f"ECE = {score:.3f}")  # legend-only entry
        top.set(xlim=(0, 1), ylim=(0, 1), title=method or None)
        top.tick_params(labelbottom=False)  # not set_xticklabels: the x axis is shared with the histogram
        top.legend(loc="upper left", fontsize=8, framealpha=0.9)
        if col == 0:
            top.set_ylabel("Accuracy")

        bottom = fig.add_subplot(grid[1, col], sharex=top)
        bottom.bar(centers, count, width=width, color="gray", edgecolor="black", linewidth=0.6)
        bottom.set(xlim=(0, 1), xlabel="Confidence")
        if col == 0:
            bottom.set_ylabel("Count")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def risk_coverage_plot(curves: Mapping[str, tuple[ArrayLike, ArrayLike]], path: str | os.PathLike | None) -> Any:
    """Draw the selective risk (error rate of the answers kept) against coverage, one line per method.

    Curves come from [`risk_coverage_curve`]; the legend gives each method's AURC (lower is better) and a dotted line
    marks each method's error rate at full coverage, which a random ranking would keep at every coverage.

    Args:
        curves (`Mapping[str, tuple[ArrayLike, ArrayLike]]`): Method -> `(confidences, correct)`.
        path (`str`, `os.PathLike` or `None`): Where to write the PNG (must end with `.png`; folders are created);
            `None` writes nothing and returns the `Figure`.

    Returns:
        `str`: `path`; the `matplotlib.figure.Figure` when `path` is `None`.
    """
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError("curves must be a non-empty dict: method -> (confidences, correct)")
    data = {}
    for method, pair in curves.items():
        if not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"{method!r}: expected a (confidences, correct) pair, got {type(pair).__name__}")
        data[method] = _validated(method, *pair)
    path = _png_path(path)
    fig = _figure(6.0, 4.2)
    ax = fig.add_subplot()
    for method, (conf, y) in data.items():
        coverage, risk = risk_coverage_curve(conf, y)
        (line,) = ax.plot(coverage, risk, linewidth=1.6, label=f"{method} (AURC = {aurc(conf, y):.3f})")
        ax.axhline(1 - y.mean(), color=line.get_color(), linestyle=":", linewidth=1)
    ax.plot([], [], linestyle=":", color="gray", label="Random ranking (overall error rate)")  # legend-only entry
    ax.set(xlim=(0, 1), ylim=(0, None), xlabel="Coverage (share of answers kept)", ylabel="Risk (error rate kept)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _point(method: str, n_labels, value) -> tuple[float, float, float]:
    """`value` as (auroc, low, high); low/high are nan without an interval."""
    if isinstance(value, Mapping):
        point = value.get("auroc")
        low = value.get("auroc_ci_low", value.get("low", math.nan))
        high = value.get("auroc_ci_high", value.get("high", math.nan))
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 3:
            raise ValueError(f"{method!r}, {n_labels} labels: a tuple must be (auroc, ci_low, ci_high), got {value!r}")
        point, low, high = value
    else:
        point, low, high = value, math.nan, math.nan
    try:
        point, low, high = float(point), float(low), float(high)
    except (TypeError, ValueError):
        raise ValueError(f"{method!r}, {n_labels} labels: AUROC values must be numbers, got {value!r}") from None
    for v in (point, low, high):
        if not math.isnan(v) and not 0.0 <= v <= 1.0:
            raise ValueError(f"{method!r}, {n_labels} labels: AUROC values must lie in [0, 1], got {value!r}")
    if math.isnan(low) != math.isnan(high) or low > high:  # a percentile interval may exclude the point: allowed
        raise ValueError(f"{method!r}, {n_labels} labels: need both ci_low <= ci_high or neither, got {value!r}")
    return point, low, high


def auroc_vs_labels_plot(
    results: Mapping[str, Mapping[float, float | tuple[float, float, float] | Mapping[str, float]]],
    path: str | os.PathLike | None,
    baselines: Mapping[str, float] | None = None,
    title: str | None = None,
) -> Any:
    """Draw AUROC against the number of correctness labels (log x axis), one line per method.

    Args:
        results (`Mapping[str, Mapping[float, ...]]`): Method -> {number of labels -> AUROC}. An AUROC is a float,
            an `(auroc, ci_low, ci_high)` tuple, or a dict such as the output of the `honesty_auroc` metric
            (`auroc`, `auroc_ci_low`, `auroc_ci_high`) or of `bootstrap_ci` plus `auroc`; intervals are drawn as
            error bars. Values are raw AUROCs in [0, 1], plotted x 100 as in the paper.
        path (`str`, `os.PathLike` or `None`): Where to write the PNG (must end with `.png`; folders are created);
            `None` writes nothing and returns the `Figure`.
        baselines (`Mapping[str, float]`, *optional*, defaults to `None`): Label-free methods (e.g. Consis-Sem) ->
            AUROC, drawn as horizontal dashed lines.
        title (`str`, *optional*, defaults to `None`): Axes title.

    Returns:
        `str`: `path`; the `matplotlib.figure.Figure` when `path` is `None`.
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty dict: method -> {n_labels: auroc}")
    series = {}
    for method, by_n in results.items():
        if not isinstance(by_n, Mapping) or not by_n:
            raise ValueError(f"{method!r}: expected a non-empty dict n_labels -> auroc, got {by_n!r}")
        points = []
        for n, value in by_n.items():
            if isinstance(n, bool) or not isinstance(n, (int, float, np.integer, np.floating)) or not n > 0:
                raise ValueError(f"{method!r}: numbers of labels must be positive numbers (log axis), got {n!r}")
            points.append((float(n), *_point(method, n, value)))
        series[method] = np.array(sorted(points))
    for name, value in (baselines or {}).items():
        if not isinstance(value, (int, float, np.floating)) or not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"baseline {name!r}: AUROC must be a number in [0, 1], got {value!r}")
    path = _png_path(path)
    fig = _figure(6.0, 4.2)
    ax = fig.add_subplot()
    for method, pts in series.items():
        n, point, low, high = pts.T * np.array([[1], [100], [100], [100]])
        has_ci = ~np.isnan(low)
        (line,) = ax.plot(n, point, marker="o", linewidth=1.6, label=method)
        if has_ci.any():  # interval bars with caps (not `errorbar`: the point may lie outside a bootstrap interval)
            color = line.get_color()
            ax.vlines(n[has_ci], low[has_ci], high[has_ci], color=color, linewidth=1.2)
            ax.scatter(np.r_[n[has_ci], n[has_ci]], np.r_[low[has_ci], high[has_ci]], marker="_", s=60, color=color)
    for name, value in (baselines or {}).items():
        ax.axhline(100 * float(value), linestyle="--", linewidth=1, color="gray")
        ax.annotate(name, (1.0, 100 * float(value)), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                    textcoords="offset points", ha="right", fontsize=8, color="dimgray")
    ax.set_xscale("log")
    ax.set(xlabel="Correctness labels used", ylabel="AUROC x 100", title=title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _layer_series(curves: Any) -> dict[str, np.ndarray]:
    """`curves` (name -> {layer -> AUROC}) validated, as name -> rows of (layer, auroc, low, high) sorted by layer."""
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError("curves must be a non-empty dict: target -> {layer: auroc}")
    series = {}
    for name, by_layer in curves.items():
        if not isinstance(by_layer, Mapping) or not by_layer:
            raise ValueError(f"{name!r}: expected a non-empty dict layer -> auroc, got {by_layer!r}")
        points = []
        for layer, value in by_layer.items():
            if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
                raise ValueError(f"{name!r}: layers must be integers, got {layer!r}")
            points.append((float(layer), *_point(name, layer, value)))
        series[name] = np.array(sorted(points))
    return series


def _draw_layer_curves(ax: Any, series: Mapping[str, np.ndarray], marked: int | None, marked_label: str,
                       title: str | None) -> None:
    """One axes of AUROC (x 100) against layer: a line per series, shaded intervals, chance and a marked layer."""
    for name, pts in series.items():
        layer, point, low, high = pts.T * np.array([[1], [100], [100], [100]])
        (line,) = ax.plot(layer, point, marker="o", markersize=3, linewidth=1.6, label=name)
        has_ci = ~np.isnan(low)
        if has_ci.any():
            ax.fill_between(layer[has_ci], low[has_ci], high[has_ci], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.axhline(50, linestyle=":", linewidth=1, color="gray", label="Chance")
    if marked is not None:
        ax.axvline(marked, linestyle="--", linewidth=1, color="black", label=f"{marked_label} ({marked})")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers
    ax.set(xlabel="Layer (hidden state read)", ylabel="AUROC x 100", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def auroc_vs_layer_plot(
    curves: Mapping[str, Mapping[int, float | tuple[float, float, float] | Mapping[str, float]]],
    path: str | os.PathLike | None,
    recommended: int | None = None,
    title: str | None = None,
) -> Any:
    """Draw AUROC against the layer a probe reads, one line per target, with shaded 95% intervals.

    Args:
        curves (`Mapping[str, Mapping[int, ...]]`): Target (e.g. `"correctness"`, `"consistency"`) -> {layer ->
            AUROC}, an AUROC given as in [`auroc_vs_labels_plot`] (raw, in [0, 1]; plotted x 100).
        path (`str`, `os.PathLike` or `None`): Where to write the PNG (must end with `.png`; folders are created);
            `None` writes nothing and returns the `Figure`.
        recommended (`int`, *optional*): A layer marked with a dashed vertical line.
        title (`str`, *optional*): Axes title.

    Returns:
        `str`: `path`; the `matplotlib.figure.Figure` when `path` is `None`.
    """
    series = _layer_series(curves)
    path = _png_path(path)
    fig = _figure(6.0, 4.2)
    _draw_layer_curves(fig.add_subplot(), series, recommended, "Recommended layer", title)
    return _save(fig, path)


def auroc_vs_layer_grid(
    panels: Mapping[str, Mapping[str, Mapping[int, float | tuple[float, float, float] | Mapping[str, float]]]],
    path: str | os.PathLike | None,
    columns: int = 2,
    marked: int | None = None,
    marked_label: str = "Layer",
    title: str | None = None,
) -> Any:
    """Several [`auroc_vs_layer_plot`] axes in one figure (e.g. a row per label budget, in domain and OOD side by side).

    Args:
        panels (`Mapping[str, Mapping[str, Mapping[int, ...]]]`): Panel title -> curves as [`auroc_vs_layer_plot`]
            takes them (name -> {layer -> AUROC in [0, 1]}); panels fill the grid row by row.
        path (`str`, `os.PathLike` or `None`): Where to write the PNG (must end with `.png`); `None` returns the
            `Figure`.
        columns (`int`, *optional*, defaults to 2): Panels per row.
        marked (`int`, *optional*), marked_label (`str`, *optional*): A layer marked in every panel (e.g. the final).
        title (`str`, *optional*): The figure's title.

    Returns:
        `str`: `path`; the `matplotlib.figure.Figure` when `path` is `None`.
    """
    if not isinstance(panels, Mapping) or not panels:
        raise ValueError("panels must be a non-empty dict: panel title -> {name: {layer: auroc}}")
    if columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    series = {name: _layer_series(curves) for name, curves in panels.items()}
    path = _png_path(path)
    columns = min(columns, len(series))
    rows = math.ceil(len(series) / columns)
    fig = _figure(6.0 * columns, 4.2 * rows)
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, (name, panel) in zip(axes.flat, series.items()):
        _draw_layer_curves(ax, panel, marked, marked_label, name)
    for ax in list(axes.flat)[len(series):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def confidence_drift_plot(
    reference: ArrayLike, new: ArrayLike, path: str | os.PathLike | None, threshold: float | None = None,
    p_value: float | None = None,
) -> Any:
    """Draw the empirical CDFs of the calibration rows' confidences and of new questions' (what
    [`~elical_hf.evaluation.drift.confidence_drift`] compares: the KS statistic is the largest vertical gap between the
    two).

    Args:
        reference (`ArrayLike`), new (`ArrayLike`): The two samples of confidences, in [0, 1].
        path (`str`, `os.PathLike` or `None`): Where to write the PNG (must end with `.png`); `None` returns the
            `Figure`.
        threshold (`float`, *optional*): The decision threshold, drawn as a vertical line (left of it: abstained).
        p_value (`float`, *optional*): The test's p-value, shown in the title.

    Returns:
        `str`: `path`; the `matplotlib.figure.Figure` when `path` is `None`.
    """
    samples = {}
    for name, values in (("calibration", reference), ("new questions", new)):
        values = np.sort(np.asarray(values, dtype=np.float64).ravel())
        if values.size == 0 or not np.isfinite(values).all() or values.min() < 0 or values.max() > 1:
            raise ValueError(f"{name}: confidences must be a non-empty array of numbers in [0, 1]")
        samples[name] = values
    path = _png_path(path)
    fig = _figure(6.0, 4.2)
    ax = fig.add_subplot()
    for name, values in samples.items():
        ax.step(np.concatenate([[0.0], values, [1.0]]), np.concatenate([[0.0], np.arange(1, values.size + 1) /
                values.size, [1.0]]), where="post", linewidth=1.6, label=f"{name} (n = {values.size})")
    if threshold is not None:
        ax.axvline(threshold, color="gray", linestyle="--", linewidth=1, label=f"decision threshold {threshold:g}")
    title = "Confidences: calibration set vs new questions"
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="Confidence", ylabel="Share of questions at or below",
           title=title if p_value is None else f"{title} (KS p = {p_value:.2g})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)
