"""`elical-hf push`: publish a confidence model folder, HonestyBench records or a metric Space in one commit."""

from __future__ import annotations

import argparse
import json
import sys


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elical-hf push", description=__doc__)
    parser.add_argument("source", help="Model folder (--kind model), records file/folder (honestybench) or metric "
                        "name or folder (metric).")
    parser.add_argument("repo_id", help="Hub repository, <namespace>/<name>; created if missing.")
    parser.add_argument("--kind", choices=("model", "honestybench", "metric"), default="model",
                        help="What to publish (default: model).")
    parser.add_argument("--base_model", default=None,
                        help="Hub id of the base model, when the model folder names a local path.")
    parser.add_argument("--private", action="store_true", default=None, help="Create the repository as private.")
    parser.add_argument("--token", default=None, help="Hub token (default: the logged-in one).")
    parser.add_argument("--revision", default=None, help="Branch to commit to (models and datasets).")
    parser.add_argument("--commit_message", default=None, help="Commit message.")
    return parser


def main(argv: list[str] | None = None) -> int:
    import os

    from elical_hf.hub import push_folder, push_honestybench, push_metric_space

    options = make_parser().parse_args(argv)
    common = {"private": options.private, "token": options.token, "commit_message": options.commit_message}
    try:
        if options.kind == "model":
            info = push_folder(options.source, options.repo_id, revision=options.revision,
                               base_model_name_or_path=options.base_model, **common)
        elif options.kind == "honestybench":
            info = push_honestybench(options.source, options.repo_id, revision=options.revision, **common)
        elif os.path.isdir(options.source):
            name = os.path.basename(os.path.normpath(options.source))
            info = push_metric_space(name, options.repo_id, folder=options.source, **common)
        else:
            info = push_metric_space(options.source, options.repo_id, **common)
    except (ValueError, OSError) as error:
        print(f"elical-hf push: error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"repo_id": options.repo_id, "commit": info.oid, "commit_url": info.commit_url}, indent=2))
    return 0
