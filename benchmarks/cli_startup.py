"""How long `elical-hf --help` and `elical-hf <command> --help` take in a fresh process, against `import torch`.

Each figure is the median wall time of `--repeats` fresh processes; the baseline, measured in the same run, is a fresh
`python -c "import torch, transformers"` (what every command imported on `--help` before the package became lazy), so
the ratio says how much of that start-up a `--help` still pays. Also reports whether torch was imported.

    python benchmarks/cli_startup.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from common import print_machine, print_table


PROBE = ("import sys, runpy; sys.argv = ['elical-hf', *sys.argv[1:]]\n"
         "try:\n    runpy.run_module('elical_hf.cli', run_name='__main__')\n"
         "except SystemExit:\n    pass\n"
         "print('TORCH' if 'torch' in sys.modules else 'NOTORCH', file=sys.stderr)")


def wall(argv: list[str], repeats: int) -> tuple[float, bool]:
    """Median seconds of `repeats` fresh processes running `argv`, and whether the last one imported torch."""
    times, torch_seen = [], False
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        torch_seen = "TORCH" in done.stderr.split()
    return statistics.median(times), torch_seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print_machine()
    from elical_hf.cli import COMMANDS

    baseline, _ = wall([sys.executable, "-c", "import torch, transformers"], args.repeats)
    rows = []
    for command in [None, *COMMANDS]:
        seconds, torch_seen = wall([sys.executable, "-c", PROBE, *([command] if command else []), "--help"],
                                   args.repeats)
        rows.append([f"elical-hf {command or ''} --help".replace("  ", " "), f"{seconds:.2f}",
                     f"{seconds / baseline:.2f}", "yes" if torch_seen else "no"])
    print(f"\nbaseline: `import torch, transformers` in a fresh process, median {baseline:.2f} s "
          f"({args.repeats} processes each)\n")
    print_table(["command", "seconds (median)", "ratio to the baseline", "imports torch"], rows)


if __name__ == "__main__":
    main()
