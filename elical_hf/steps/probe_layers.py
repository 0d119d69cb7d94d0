"""`elical-hf probe-layers` as a step, and the pre-generation probes as methods of `elical-hf evaluate --probes`.

[`probe_layers`] cross-validates a linear probe on every layer's last-prompt-token state of a labelled pool, for the
correctness target and the label-free consistency target, and recommends a layer (`elical-hf probe-layers`).
[`probe_confidences`] trains the probes of [`~elical_hf.evaluation.probes.PROBES`] on the train records at one layer and
scores questions with them ([`~elical_hf.steps.evaluate`] with `probes`). Both read features through
[`~elical_hf.training.layer_cache.cache_layer_features`].
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .arguments import RecordArguments
from ..utils.files import check_output_extension, refuse_output_over_inputs
from ..utils.loading import unwrap_peft


__all__ = ["ProbeLayersArguments", "ProbeSettings", "feature_model", "probe_confidences", "probe_layers",
           "probe_layers_to_markdown", "probe_name"]

logger = logging.getLogger(__name__)

REPORT_NAME = "probe_layers.json"
PLOT_NAME = "auroc_vs_layer.png"


def feature_model(model: str) -> Any:
    """The confidence model whose features the probes read: a base model's frozen states (`use_lora=False`: no
    adapter changes them), or a saved confidence model as saved (its LoRA is part of its features)."""
    from ..models.auto import AutoModelForConfidence
    from ..models.saved_model import find_saved_model

    if find_saved_model(model) is not None:
        return AutoModelForConfidence.from_pretrained(model)
    return AutoModelForConfidence.from_pretrained(model, use_lora=False)


def _backbone_layers(model: Any) -> int:
    from ..models.feature_layer import num_layers

    inner = unwrap_peft(model)
    return num_layers(getattr(inner, inner.base_model_prefix))


@contextlib.contextmanager
def _cache_folder(cache_dir: str | None) -> Iterator[str]:
    """`cache_dir`, or a temporary folder removed afterwards (the features are then computed for this run only)."""
    if cache_dir is not None:
        yield cache_dir
        return
    with tempfile.TemporaryDirectory(prefix="elical-features-") as folder:
        yield folder


def probe_name(kind: str, layer: int, num_labels: int | str | None = None) -> str:
    """How reports name a probe: `SEP-L18`, `P(IK)-L18@100` (`@N`: the labels it was trained on, which puts it on
    the AUROC-against-labels curves)."""
    from ..evaluation.probes import PROBES

    name = f"{PROBES[kind].paper_name}-L{layer}"
    return f"{name}@{num_labels}" if PROBES[kind].supervised and num_labels is not None else name


@dataclass(kw_only=True)
class ProbeLayersArguments(RecordArguments):
    """Options of [`probe_layers`] (`elical-hf probe-layers`); `records` is the labelled pool."""

    model: str = field(metadata={"positional": True, "help": "A base model (its frozen features) or a saved "
                                 "confidence model."})
    layers: list[int] = field(default_factory=list, metadata={
        "help": "Layers to probe (hidden-state indices, 1 to the number of layers; negative counts from the end); "
                "all by default. The final layer is always added."})
    folds: int = field(default=5, metadata={"help": "Cross-validation folds (>= 2)."})
    split: str = field(default="train", metadata={"help": "The paper split of the pool (train, in_domain_test, ...)."})
    bootstrap: int = field(default=1000, metadata={"help": "Bootstrap resamples of the 95%% intervals (>= 1)."})
    seed: int = field(default=0, metadata={"help": "Seed of the folds and the resamples."})
    output: str | None = field(default=None, metadata={
        "help": "A folder for probe_layers.json and auroc_vs_layer.png."})
    cache_dir: str | None = field(default=None, metadata={
        "help": "The feature cache, reused by later runs (default: OUTPUT/features, or a temporary folder)."})

    def __post_init__(self) -> None:
        from ..signals.records import PAPER_SPLITS

        super().__post_init__()
        if self.split not in PAPER_SPLITS:
            raise ValueError(f"--split must be one of {PAPER_SPLITS}, got {self.split!r}.")
        if self.bootstrap < 1:
            raise ValueError(f"--bootstrap must be >= 1, got {self.bootstrap}.")


def _train_records(records: Any, split: str, allow_incomplete: bool) -> list[dict[str, Any]]:
    """The records of paper split `split`, with their training columns; a `ValueError` when there are none."""
    from ..signals.records import load_records

    rows = load_records(records, split=split, allow_incomplete=allow_incomplete).to_list()
    if not rows:
        where = records if isinstance(records, (str, os.PathLike)) else "The records"
        raise ValueError(f"{where} holds no {split} records: the probes train on them.")
    return rows


def probe_layers(args: ProbeLayersArguments, *, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """
    Which layer to read: the cross-validated AUROC of a logistic probe on each layer's last-prompt-token state, for
    the correctness target (greedy correctness) and the label-free consistency target (the stage-1 target), against
    greedy correctness, with 95% bootstrap intervals ([`~elical_hf.evaluation.probes.layer_curve`]).

    The pool is the `args.split` records of `args.records` (any records input; never a test split for a layer you
    then evaluate) with a judged greedy answer. The final layer is always probed besides `args.layers` (all when
    empty): the recommended layer is compared with it. The feature cache `args.cache_dir` defaults to
    `args.output/features`, or a temporary folder without an `output` (not an input, nor inside or around one).
    `say` is where progress lines go (default: the log).

    Returns:
        `dict`: the curve of [`~elical_hf.evaluation.probes.layer_curve`] plus `model`, `split`, `targets` and `skipped`
        (pool records without a judged greedy answer), and `paths` of what was written.
    """
    from ..utils.atomic import atomic_write_json, one_writer
    from ..training.layer_cache import cache_layer_features, resolve_layers
    from ..evaluation.plots import auroc_vs_layer_plot
    from ..evaluation.probes import check_folds, layer_curve
    from ..signals.records import JUDGE_OPTIONS, check_records_match, judged_records

    say = say or logger.info
    model, records, split, output, cache_dir, folds = (args.model, args.records, args.split, args.output,
                                                       args.cache_dir, args.folds)
    if output is not None:
        refuse_output_over_inputs(output, {"--records": records, "MODEL": model})
        check_output_extension(output, None)
    writing = one_writer(output) if output is not None else contextlib.nullcontext()
    with writing:
        pool = _train_records(records, split, args.allow_incomplete)
        judged = judged_records(pool, split, say)
        correct = [int(r["greedy_correctness"]) for r in judged]
        check_folds(correct, folds)  # before any model is loaded
        targets: dict[str, list[float]] = {"correctness": [float(c) for c in correct]}
        if all(r.get("consistency") is not None for r in judged):
            targets["consistency"] = [float(r["consistency"]) for r in judged]
        else:
            say("some records have no consistency judgement: only the correctness target is probed "
                f"(`{JUDGE_OPTIONS['consistency']}` adds the label-free one).")
        loaded = feature_model(model)
        total = _backbone_layers(loaded)
        chosen = sorted(set(resolve_layers(args.layers or None, total)) | {total})
        check_records_match(judged, loaded.confidence_config.base_model_name_or_path, str(records),
                            args.allow_other_model)
        if cache_dir is None and output is not None:
            cache_dir = os.path.join(output, "features")
        with _cache_folder(cache_dir) as folder:
            features = cache_layer_features(loaded, [r["question"] for r in judged], folder, layers=chosen,
                                            batch_size=args.batch_size)
            del loaded
            report = layer_curve(features, correct, targets, folds=folds, bootstrap=args.bootstrap, seed=args.seed)
        report.update(model=model, split=split, targets=list(targets), skipped=len(pool) - len(judged), paths={})
        if output is not None:
            os.makedirs(output, exist_ok=True)
            report["paths"] = {"report": os.path.join(output, REPORT_NAME), "plot": os.path.join(output, PLOT_NAME)}
            curves = {name: {cell["layer"]: (cell["auroc"] / 100, *(v / 100 for v in cell["auroc_ci"]))
                             for cell in cells} for name, cells in report["curves"].items()}
            auroc_vs_layer_plot(curves, report["paths"]["plot"], recommended=report["recommended_layer"],
                                title=f"Probe AUROC by layer ({model})")
            atomic_write_json(report["paths"]["report"], report)
    return report


def probe_layers_to_markdown(report: Mapping[str, Any]) -> str:
    """The curve of [`probe_layers`] as a Markdown table (one row per layer, each target's AUROC with its interval;
    the recommended and the final layer marked), then the recommendation."""
    names = list(report["curves"])
    lines = ["| layer | " + " | ".join(f"{name} AUROC [95%]" for name in names) + " |",
             "|---|" + "---:|" * len(names)]
    cells = {name: {cell["layer"]: cell for cell in report["curves"][name]} for name in names}
    for layer in report["layers"]:
        marks = [word for word, at in (("recommended", report["recommended_layer"]), ("final", report["final_layer"]))
                 if at == layer]
        shown = [f"{cells[n][layer]['auroc']:.1f} [{cells[n][layer]['auroc_ci'][0]:.1f}, "
                 f"{cells[n][layer]['auroc_ci'][1]:.1f}]" for n in names]
        lines.append(f"| {layer}{' (' + ', '.join(marks) + ')' if marks else ''} | " + " | ".join(shown) + " |")
    gap = report["recommended_minus_final"]
    lines.append("")
    lines.append(f"Recommended layer: {report['recommended_layer']}, {report['rule']}. Against the final layer "
                 f"{report['final_layer']}: {gap['auroc']:+.1f} [{gap['auroc_ci'][0]:+.1f}, {gap['auroc_ci'][1]:+.1f}] "
                 f"AUROC (paired), {report['folds']}-fold cross-validation on {report['questions']} questions "
                 f"({report['correct']} correct).")
    return "\n".join(lines)


@dataclass
class ProbeSettings:
    """The probes `evaluate` trains and scores (`elical-hf evaluate --probes`).

    Args:
        model (`str`): The model whose features they read ([`feature_model`]): the records' model.
        probes (`list[str]`): Names of [`~elical_hf.evaluation.probes.PROBES`].
        layer (`int`, *optional*, defaults to -1): The layer they read (negative from the end; -1: the final one).
        num_labels (`int`, *optional*): Correctness labels of the supervised probes, a seeded draw of the train
            records (`take_labels`, as `elical-hf train` and `calibrate_head` draw them); `None`: all.
        seed (`int`, *optional*, defaults to 42): Seed of that draw.
        cache_dir (`str`, *optional*): The feature cache; a temporary folder by default.
        split (`str`, *optional*, defaults to `"train"`): The paper split they train on.
    """

    model: str
    probes: Sequence[str] = ("sep", "dim", "pik")
    layer: int = -1
    num_labels: int | None = None
    seed: int = 42
    cache_dir: str | None = None
    split: str = "train"

    def __post_init__(self) -> None:
        from ..evaluation.probes import PROBES

        unknown = [name for name in self.probes if name not in PROBES]
        if unknown or not self.probes:
            raise ValueError(f"--probes: unknown probe(s) {unknown}; choose from {sorted(PROBES)}.")
        if self.num_labels is not None and self.num_labels < 2:
            raise ValueError(f"--num_labels must be at least 2 (or 0: all), got {self.num_labels}.")


def probe_confidences(
    settings: ProbeSettings,
    records: Any,
    questions: Sequence[str],
    *,
    batch_size: int = 16,
    allow_other_model: bool = False,
    allow_incomplete: bool = False,
    say: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """
    Train the probes of `settings` on the train records of `records` and score `questions` with them.

    Args:
        settings ([`ProbeSettings`]): Which probes, on which model's layer, with how many labels.
        records: Any records input; the probes train on its `settings.split` records (refused when they are another
            model's answers, unless `allow_other_model`).
        questions (`list[str]`): The questions to score.
        batch_size (`int`, *optional*, defaults to 16): Questions per forward pass.
        allow_incomplete (`bool`, *optional*): Read an unfinished `elical-hf sample` folder anyway.
        say (`Callable[[str], None]`, *optional*): Where progress lines go (default: the log).

    Returns:
        `dict[str, list[float]]`: [`probe_name`] -> one confidence per question.
    """
    from ..training.layer_cache import cache_layer_features, resolve_layers
    from ..evaluation.probes import PROBES, train_probe
    from ..training.recipe import take_labels
    from ..signals.records import check_records_match

    say = say or logger.info
    train = _train_records(records, settings.split, allow_incomplete)
    model = feature_model(settings.model)
    where = str(records) if isinstance(records, (str, os.PathLike)) else "the records"
    check_records_match(train, model.confidence_config.base_model_name_or_path, where, allow_other_model)
    (layer,) = resolve_layers(settings.layer, _backbone_layers(model), "--probe_layer")
    judged = [r for r in train if r.get("greedy_correctness") is not None]
    labelled = []
    if any(PROBES[name].supervised for name in settings.probes):
        if not judged:
            raise ValueError(f"--probes {', '.join(settings.probes)}: none of the {len(train)} {settings.split} "
                             "records has a judged greedy answer to train on.")
        drawn = take_labels([{"row": i, "greedy_correctness": r["greedy_correctness"]} for i, r in enumerate(judged)],
                            settings.num_labels, settings.seed)
        labelled = [judged[i] for i in drawn["row"]]
    texts = list(dict.fromkeys([*(r["question"] for r in train), *questions]))
    with _cache_folder(settings.cache_dir) as folder:
        features = cache_layer_features(model, texts, folder, layers=[layer], batch_size=batch_size)
        del model
        x, index = features[layer], {text: i for i, text in enumerate(texts)}

        def rows(chosen: Sequence[Mapping[str, Any]]) -> Any:
            return x[[index[r["question"]] for r in chosen]]

        test = x[[index[q] for q in questions]]
        out = {}
        for kind in settings.probes:
            chosen = labelled if PROBES[kind].supervised else train
            probe = train_probe(kind, chosen, rows(chosen))
            out[probe_name(kind, layer, len(chosen))] = probe.confidence(test).tolist()
            say(f"probe {probe_name(kind, layer, len(chosen))}: trained on {len(chosen)} {settings.split} records")
    return out
