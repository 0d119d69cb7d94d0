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

    def __post_init__(self) -> None:
        if self.include and self.kind not in ("model", "metric"):
            raise ValueError(f"--include names files of a model or metric folder, not of --kind {self.kind}.")


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(PushArguments, prog="elical-hf push", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    import os

    from elical_hf.atomic import json_text
    from elical_hf.publishing.hub import push_folder, push_gate_space, push_honestybench, push_metric_space

    (options,) = make_parser().parse_with_config(argv)
    warn_token_on_command_line(argv)
    # Without --private, `None`: a new repository gets the Hub's default visibility, an existing one keeps its own.
    common = {"private": options.private or None, "token": options.token, "commit_message": options.commit_message}
    if options.kind == "model":
        info = push_folder(options.source, options.repo_id, revision=options.revision,
                           base_model_name_or_path=options.base_model, extra_files=options.include, **common)
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
