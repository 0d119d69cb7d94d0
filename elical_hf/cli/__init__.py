"""`elical-hf` command line: one module per subcommand, each with `make_parser()` and `main(argv)`.

Errors: [`main`] is the one handler of every command. A user error, an exception of [`USER_ERRORS`] (a bad argument,
a missing, unreadable or malformed file, bad data in it, a failed download or upload), prints one line,
`elical-hf <command>: error: <message>`, on stderr and exits 2 (as argparse does for a bad flag). Anything else is a
bug and keeps its traceback. Library code therefore raises `ValueError` with a message that says what is wrong and
where (file, line, row, option), and lets `OSError`s about files carry their file name. Set `ELICAL_HF_TRACEBACK=1`
to see the traceback of a user error too.
"""

from __future__ import annotations

import importlib
import os
import sys

from elical_hf.utils.extras import MissingExtraError


COMMANDS = {
    "demo": ("elical_hf.cli.demo", "Run the whole method offline on the embedded default model and real questions."),
    "push": ("elical_hf.cli.push", "Publish a model, HonestyBench records or a metric Space to the Hub in one commit."),
    "install-metrics": ("elical_hf.cli.install_metrics", "Make evaluate.load(\"honesty_auroc\") (and _ece, _alignment) "
                        "work offline."),
    "convert-official": ("elical_hf.cli.convert", "Convert a released checkpoint of the paper to a confidence model."),
    "train": ("elical_hf.cli.train", "Train stage 1 (elicitation), stage 2 (calibration) and Cal-Only."),
    "judge": ("elical_hf.cli.judge", "Add or redo correctness / consistency judgements (lexical, embedding, LLM)."),
    "baselines": ("elical_hf.cli.baselines", "Training-free confidences: Prob, N-Prob, Consis-Lex/Sem, Verbal-0/10, "
                  "Option-Prob."),
    "evaluate": ("elical_hf.cli.evaluate", "Score test records with models and baselines: the paper's table and plots."),
    "threshold": ("elical_hf.cli.threshold", "Choose a model's answer/abstain threshold on labelled records and save it."),
    "monitor": ("elical_hf.cli.monitor", "Do new questions' confidences still look like the calibration set's? (KS test)"),
    "diagnose": ("elical_hf.cli.diagnose", "Will elicitation help? Consistency vs correctness on the labels you have."),
    "probe-layers": ("elical_hf.cli.probe_layers", "Which layer knows? Probe AUROC by layer, and the layer to read."),
    "select-labels": ("elical_hf.cli.select_labels", "Choose which questions to send for correctness labels (stage 2)."),
    "sample": ("elical_hf.cli.sample", "Sample a greedy answer and k answers per question (resumable record shards)."),
    "merge": ("elical_hf.cli.merge", "Combine the folders of the N workers of one `sample --num_workers N` run."),
    "export": ("elical_hf.cli.export", "Write a confidence model as a one-label sequence classifier engines serve."),
    "serve": ("elical_hf.cli.serve", "Serve the gate (or plain completions) as an OpenAI-compatible HTTP server."),
}

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, MissingExtraError)
"""What the command line reports as a user error (one line, exit 2): `ValueError` is what elical-hf raises for bad
arguments, files and data (`UnicodeDecodeError` and `json.JSONDecodeError` are among them, so readers name the file);
`OSError` covers missing or unreadable files and failed Hub transfers (`HubPublishError`); `MissingExtraError` an
optional extra not installed (the line says which `pip install "elical-hf[...]"`). Every other exception is a
bug: its traceback is shown."""

TRACEBACK_ENV = "ELICAL_HF_TRACEBACK"
"""Set to `1` to get the traceback of a user error as well."""

USER_ERROR_EXIT = 2

HELP_FLAGS = {"-h", "--help"}
"""`elical-hf <command> --help` prints the help of the command's `make_help_parser()` (else `make_parser()`) and
exits before its `main` runs."""


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
        from elical_hf.version import __version__

        print(f"elical-hf {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        print(f"elical-hf: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    command = argv[0]
    try:
        module = importlib.import_module(COMMANDS[command][0])
        if HELP_FLAGS & set(argv[1:]):  # the command's parser alone answers: nothing its run needs (torch) is imported
            getattr(module, "make_help_parser", module.make_parser)().parse_args(["--help"])
        status = int(module.main(argv[1:]) or 0)
    except USER_ERRORS as error:
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        print(f"elical-hf {command}: error: {user_message(error)}", file=sys.stderr)
        return USER_ERROR_EXIT
    from elical_hf.utils.distributed import end_process_group

    end_process_group()  # after the command's objects are gone (see there)
    return status


def user_message(error: BaseException) -> str:
    """The one line a user error prints: its message (an `OSError`'s strerror and file name), on one line."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.strerror}: {error.filename}"
    else:
        text = str(error) or type(error).__name__
    if isinstance(error, (FileNotFoundError, PermissionError)) or type(error) in (ValueError, OSError):
        return " ".join(text.split())
    return " ".join(f"{type(error).__name__}: {text}".split())


if __name__ == "__main__":
    sys.exit(main())
