"""The main job: wall time and peak memory of `elical-hf demo` (what `make demo` runs), on this CPU.

The demo runs in a child process; its wall time, peak RSS and its own step timings (`run.json`) are printed with the
machine header. Target: <= 10 minutes on 2 cores, whichever CPU.

    python benchmarks/demo_wall.py                      # the default demo, into a temporary folder
    ELICAL_HF_CPU_BF16=0 python benchmarks/demo_wall.py # as on a CPU without native bf16 (float32)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from common import peak_rss_mib, print_machine, print_table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo_args", nargs="*", help="extra `elical-hf demo` arguments")
    args = parser.parse_args(argv)

    print_machine()
    out = tempfile.mkdtemp(prefix="elical-demo-bench-")
    command = [sys.executable, "-m", "elical_hf.cli", "demo", "--output_dir", out, *args.demo_args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with open(os.path.join(out, "run.json"), encoding="utf-8") as handle:
        run = json.load(handle)
    rows = [[name, value] for name, value in run["timings"].items()]
    rows += [["whole demo (wall, incl. start-up)", round(seconds, 1)], ["peak RSS (MiB)", round(peak_rss_mib(True))]]
    print(f"\n{run['headline']}\n")
    print_table(["step", "seconds"], rows)
    print(f"\nTarget <= 600 s: {'met' if seconds <= 600 else 'NOT met'} ({seconds / 60:.1f} min). Output: {out}")


if __name__ == "__main__":
    main()
