"""`elical-hf probe-layers`: which layer's state knows whether the answer will be right? Choose `--feature_layer`.

From the labelled pool (the `--split` records, train by default, with a judged greedy answer), a logistic probe on
each layer's last-prompt-token state is cross-validated (`--folds`) for the correctness target and for the label-free
consistency target; prints their AUROC by layer with 95% bootstrap intervals and the recommended layer (the best
correctness AUROC), and with `--output DIR` writes `probe_layers.json` and the plot `auroc_vs_layer.png` there. The
features are cached (`--cache_dir`, default `DIR/features`), one float16 file per layer (docs/probes.md).
"""

from __future__ import annotations

from elical_hf.steps.probe_layers import ProbeLayersArguments

from .parser import ElicalArgumentParser


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ProbeLayersArguments, prog="elical-hf probe-layers", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.steps import probe_layers, probe_layers_to_markdown

    (options,) = make_parser().parse_with_config(argv)
    report = probe_layers(options, say=print)
    print(probe_layers_to_markdown(report))
    for kind, path in report["paths"].items():
        print(f"{kind}: {path}")
    return 0
