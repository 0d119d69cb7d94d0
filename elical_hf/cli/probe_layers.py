"""`elical-hf probe-layers`: which layer's state knows whether the answer will be right? Choose `--feature_layer`.

From the labelled pool (the `--split` records, train by default, with a judged greedy answer), a logistic probe on
each layer's last-prompt-token state is cross-validated (`--folds`) for the correctness target and for the label-free
consistency target; prints their AUROC by layer with 95% bootstrap intervals and the recommended layer (the best
correctness AUROC), and with `--output DIR` writes `probe_layers.json` and the plot `auroc_vs_layer.png` there. The
features are cached (`--cache_dir`, default `DIR/features`), one float16 file per layer (docs/probes.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parser import ElicalArgumentParser
from .records_command import allow_incomplete_field


@dataclass
class ProbeLayersArguments:
    """Options of `elical-hf probe-layers` (also settable from `--config file.yaml`)."""

    model: str = field(metadata={"positional": True, "help": "A base model (its frozen features) or a saved "
                                 "confidence model."})
    records: str = field(metadata={"help": "Judged records (a file or folder) with greedy correctness."})
    layers: list[int] = field(default_factory=list, metadata={
        "help": "Layers to probe (hidden-state indices, 1 to the number of layers; negative counts from the end); "
                "all by default. The final layer is always added."})
    folds: int = field(default=5, metadata={"help": "Cross-validation folds (>= 2)."})
    split: str = field(default="train", metadata={"help": "The paper split of the pool (train, in_domain_test, ...)."})
    bootstrap: int = field(default=1000, metadata={"help": "Bootstrap resamples of the 95%% intervals (>= 1)."})
    seed: int = field(default=0, metadata={"help": "Seed of the folds and the resamples."})
    batch_size: int = field(default=16, metadata={"help": "Questions per forward pass."})
    output: str | None = field(default=None, metadata={
        "help": "A folder for probe_layers.json and auroc_vs_layer.png."})
    cache_dir: str | None = field(default=None, metadata={
        "help": "The feature cache, reused by later runs (default: OUTPUT/features, or a temporary folder)."})
    allow_other_model: bool = field(default=False, metadata={"help": "Probe records of another model than MODEL."})
    allow_incomplete: bool = allow_incomplete_field()


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ProbeLayersArguments, prog="elical-hf probe-layers", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    import dataclasses

    from elical_hf.steps import probe_layers, probe_layers_to_markdown

    (options,) = make_parser().parse_with_config(argv)
    settings = dataclasses.asdict(options)
    report = probe_layers(**{**settings, "layers": settings["layers"] or None}, say=print)
    print(probe_layers_to_markdown(report))
    for kind, path in report["paths"].items():
        print(f"{kind}: {path}")
    return 0
