"""The main job: wall time and peak memory of `elical-hf demo` (what `make demo` runs), on this CPU.

The demo runs in a child process; its wall time, peak RSS and its own step timings (`run.json`) are printed with the
machine header, with the resident memory of the child and of every process it starts read from `/proc` every 0.2 s,
added up: its highest value in each step, and
a plot of it over time (`rss.png` in the output folder). Targets: <= 3 minutes and <= 1.5 GB peak on 2 cores,
whichever CPU.

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
import threading
import time

from common import peak_rss_mib, print_machine, print_table


def rss_mib(pid: int) -> float | None:
    """Resident memory of a running process in MiB (Linux `/proc`; `None` once it is gone or elsewhere)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def tree_rss_mib(pid: int) -> float | None:
    """Resident memory of a process and every process below it (the demo runs its live step in a spawned one), in
    MiB; shared pages count once per process, so this can only over-state the machine's use."""
    own = rss_mib(pid)
    if own is None:
        return None
    children = []
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="utf-8") as handle:
                children += [int(c) for c in handle.read().split()]
        except OSError:
            continue
    return own + sum(tree_rss_mib(c) or 0.0 for c in children)


def step_peaks(trace: list[tuple[float, float]], timings: dict[str, float], wall: float, seconds: float
               ) -> tuple[list[tuple[str, float, float]], dict[str, float]]:
    """Split the RSS trace by the demo's steps. The demo times its steps from its own start, which the child reaches
    after start-up: that start is placed at `wall - seconds` (the run ends when `run.json` is written)."""
    bounds, end = [("start-up", 0.0, wall - seconds)], wall - seconds
    for name, length in timings.items():
        bounds.append((name, end, end + length))
        end += length
    bounds.append(("reports", end, wall))
    peaks = {name: max((m for t, m in trace if low <= t < high), default=float("nan")) for name, low, high in bounds}
    return bounds, peaks


def plot_trace(trace: list[tuple[float, float]], bounds: list[tuple[str, float, float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 3.5))
    axes.plot([t for t, _ in trace], [m for _, m in trace], lw=1)
    for index, (name, low, high) in enumerate(bounds):
        axes.axvspan(low, high, alpha=0.08 if index % 2 else 0.0, color="gray")
        axes.text((low + high) / 2, axes.get_ylim()[1], name, ha="center", va="bottom", fontsize=7, rotation=15)
    axes.axhline(1536, color="red", lw=0.8, ls="--", label="1.5 GB target")
    axes.set(xlabel="seconds", ylabel="RSS (MiB)")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo_args", nargs="*", help="extra `elical-hf demo` arguments")
    args = parser.parse_args(argv)

    print_machine()
    out = tempfile.mkdtemp(prefix="elical-demo-bench-")
    command = [sys.executable, "-m", "elical_hf.cli", "demo", "--output_dir", out, *args.demo_args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    trace: list[tuple[float, float]] = []

    def poll() -> None:
        while child.poll() is None:
            mib = tree_rss_mib(child.pid)
            if mib is not None:
                trace.append((time.perf_counter() - start, mib))
            time.sleep(0.2)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    if child.wait() != 0:
        raise SystemExit(f"the demo failed (exit status {child.returncode})")
    seconds = time.perf_counter() - start
    watcher.join()
    with open(os.path.join(out, "run.json"), encoding="utf-8") as handle:
        run = json.load(handle)
    bounds, peaks = step_peaks(trace, run["timings"], seconds, run["seconds"])
    rows = [[name, run["timings"].get(name, round(high - low, 1)), round(peaks[name])] for name, low, high in bounds]
    peak = max([peak_rss_mib(True), *(m for _, m in trace)])
    rows.append(["whole demo (wall, incl. start-up)", round(seconds, 1), round(peak)])
    print(f"\n{run['headline']}\n")
    print_table(["step", "seconds", "highest RSS of the demo's processes together (MiB; last row: with the largest "
                 "one's ru_maxrss)"], rows)
    if trace:
        plot_trace(trace, bounds, os.path.join(out, "rss.png"))
    print(f"\nTargets: <= 180 s: {'met' if seconds <= 180 else 'NOT met'} ({seconds:.0f} s); peak <= 1536 MiB: "
          f"{'met' if peak <= 1536 else 'NOT met'}. Output and rss.png: {out}")


if __name__ == "__main__":
    main()
