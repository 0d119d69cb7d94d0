"""`elical-hf install-metrics`: put the `honesty_auroc`, `honesty_ece` and `honesty_alignment` evaluate modules into
evaluate's module cache, so that `evaluate.load("honesty_auroc")` finds them by name, offline, in every later process.

Run it once after installing elical-hf (`make install` does), and again after upgrading it or editing the metrics of an
editable install: evaluate loads the newest copy, and this makes the installed version the newest. A wheel cannot run
code when it is installed and evaluate has no plugins, so nothing fills the cache by itself (docs/architecture.md).
Without it, load a module by path: `evaluate.load(elical_hf.metric_module_path("honesty_auroc"))`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parser import ElicalArgumentParser


@dataclass
class InstallMetricsArguments:
    """Options of `elical-hf install-metrics` (also settable from `--config file.yaml`)."""

    modules_cache: str | None = field(
        default=None, metadata={"help": "evaluate's module cache to fill. Default: the one evaluate uses, "
                                "$HF_MODULES_CACHE, else $HF_HOME/modules (~/.cache/huggingface/modules)."})


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(InstallMetricsArguments, prog="elical-hf install-metrics", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    import os

    from elical_hf.publishing.metric_modules import install_metrics

    (options,) = make_parser().parse_with_config(argv)
    for path in install_metrics(options.modules_cache):
        print(f"{os.path.basename(path)[: -len('.py')]}: {path}")
    print('evaluate.load("<name>") now finds them offline, by name.')
    return 0
