"""`elical-hf push`: publish a confidence model folder, HonestyBench records, a metric Space or the gate Space (a
published model's answer/abstain demo) in one commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .parser import ElicalArgumentParser, HubArguments, warn_token_on_command_line


@dataclass(kw_only=True)
class PushArguments(HubArguments):
    """Options of `elical-hf push` (also settable from `--config file.yaml`)."""

    source: str = field(metadata={"positional": True, "help": "Model folder (--kind model), records file/folder "
                                  "(honestybench), metric name or folder (metric), or a published model's Hub repo "
                                  "(gate-space)."})
    repo_id: str = field(metadata={"positional": True, "help": "Hub repository, <namespace>/<name>; created if missing."})
    kind: Literal["model", "honestybench", "metric", "gate-space"] = field(
        default="model", metadata={"help": "What to publish."})
    base_model: str | None = field(
        default=None, metadata={"help": "Hub id of the base model, when the model folder names a local path (checked "
                                    "against the backbone the adapter was trained on before anything is published)."}
    )
    private: bool = field(default=False, metadata={"help": "Create the repository as private."})
    revision: str | None = field(default=None, metadata={"help": "Branch to commit to (models and datasets)."})
    commit_message: str | None = field(default=None, metadata={"help": "Commit message."})
    include: list[str] = field(
        default_factory=list,
        metadata={"help": "Other top-level files of the model (or metric) folder to publish too, by name. Without it "
                  "a folder that holds files a model does not need (a key, notes) is refused."},
    )
    eval_results: str | None = field(
        default=None,
        metadata={"help": "An `elical-hf evaluate` report (its --output_dir or results.json) whose results to add to "
                  "the model card's and publish in .eval_results/ (the Hub's model page and benchmark leaderboards). "
                  "Without it the results the card holds (`evaluate --update_model_cards`) are published."},
    )
    eval_method: str | None = field(
        default=None, metadata={"help": "The row of --eval_results to publish (the --model name it was evaluated "
                                      "under); needed when the report has several."})
    eval_dataset_id: str | None = field(
        default=None, metadata={"help": "Hub id of the dataset the evaluated records come from (e.g. the one `push "
                                      "--kind honestybench` published), for results evaluated on local records: an "
                                      ".eval_results entry must name a Hub dataset, so without it they are left out."})

    def __post_init__(self) -> None:
        if self.include and self.kind not in ("model", "metric"):
            raise ValueError(f"--include names files of a model or metric folder, not of --kind {self.kind}.")
        evals = [name for name in ("eval_results", "eval_method", "eval_dataset_id") if getattr(self, name)]
        if evals and self.kind != "model":
            raise ValueError(f"--{evals[0]} is about a model's evaluation results, not --kind {self.kind}.")


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(PushArguments, prog="elical-hf push", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    import os

    from elical_hf.utils.atomic import json_text
    from elical_hf.publishing.eval_results import EvalResultsSource
    from elical_hf.publishing.hub import push_folder, push_gate_space, push_honestybench, push_metric_space

    (options,) = make_parser().parse_with_config(argv)
    warn_token_on_command_line(argv)
    # Without --private, `None`: a new repository gets the Hub's default visibility, an existing one keeps its own.
    common = {"private": options.private or None, "token": options.token, "commit_message": options.commit_message}
    if options.kind == "model":
        info = push_folder(options.source, options.repo_id, revision=options.revision,
                           base_model_name_or_path=options.base_model, extra_files=options.include,
                           eval_results=EvalResultsSource(options.eval_results, options.eval_method,
                                                          options.eval_dataset_id), **common)
    elif options.kind == "honestybench":
        info = push_honestybench(options.source, options.repo_id, revision=options.revision, **common)
    elif options.kind == "gate-space":
        info = push_gate_space(options.source, options.repo_id, **common)
    elif os.path.isdir(options.source):
        name = os.path.basename(os.path.normpath(options.source))
        info = push_metric_space(name, options.repo_id, folder=options.source, extra_files=options.include, **common)
    else:
        info = push_metric_space(options.source, options.repo_id, extra_files=options.include, **common)
    print(json_text({"repo_id": options.repo_id, "commit": info.oid, "commit_url": info.commit_url}))
    return 0
