"""`elical-hf` command line: one module per subcommand, each with `make_parser()` and `main(argv)`."""

from __future__ import annotations

import importlib
import sys


COMMANDS = {
    "demo": ("elical_hf.cli.demo", "Run the whole method offline on the embedded default model and real questions."),
    "push": ("elical_hf.cli.push", "Publish a model, HonestyBench records or a metric Space to the Hub in one commit."),
    "convert-official": ("elical_hf.cli.convert", "Convert a released checkpoint of the paper to a confidence model."),
    "train": ("elical_hf.cli.train", "Train stage 1 (elicitation), stage 2 (calibration) and Cal-Only."),
    "judge": ("elical_hf.cli.judge", "Add or redo correctness / consistency judgements (lexical, embedding, LLM)."),
    "baselines": ("elical_hf.cli.baselines", "Training-free confidences: Prob, N-Prob, Consis-Lex/Sem, Verbal-0/10."),
    "evaluate": ("elical_hf.cli.evaluate", "Score test records with models and baselines: the paper's table and plots."),
    "threshold": ("elical_hf.cli.threshold", "Choose a model's answer/abstain threshold on labelled records and save it."),
    "select-labels": ("elical_hf.cli.select_labels", "Choose which questions to send for correctness labels (stage 2)."),
    "sample": ("elical_hf.cli.sample", "Sample a greedy answer and k answers per question (resumable record shards)."),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: elical-hf <command> [options]   (elical-hf <command> --help for its options)", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from elical_hf import __version__

        print(f"elical-hf {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        print(f"elical-hf: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
