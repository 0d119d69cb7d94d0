"""What one LoRA training micro-batch holds in CPU memory, and what returning freed heap to the OS changes.

On the demo's model (SmolLM2-135M, the precision policy's dtype) and its live stage-1 questions, this prints the
process's resident memory after loading, after a first no-grad forward (the weights touched), and for one
forward + backward of 1, 2, 4 and 8 rows, each started from a trimmed heap (`elical_hf.utils.memory.release_memory`): the
highest RSS during it (a thread reads `/proc/self/status` every 10 ms) and that rise over the trimmed start. Then it
trains 4 optimizer steps of 4 x 4 accumulated rows (the demo's live stage 1) four times, alternately without and with
a trim after each micro-batch (tried for `ConfidenceTrainer`, not kept), and prints each run's highest RSS and
seconds.

    python benchmarks/training_memory.py
"""

from __future__ import annotations

import threading
import time

from common import print_machine, print_table

import torch


def rss_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as handle:
        return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:"))


class Peak:
    """The highest RSS since the last `reset`, read by a background thread."""

    def __init__(self) -> None:
        self.value = rss_mib()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            self.value = max(self.value, rss_mib())
            time.sleep(0.01)

    def reset(self) -> float:
        time.sleep(0.05)
        value, self.value = self.value, rss_mib()
        return value


def main() -> None:
    from elical_hf.models.auto import AutoModelForConfidence
    from elical_hf.demo import DemoSettings, demo_partitions
    from elical_hf.utils.memory import release_memory

    print_machine()
    peak = Peak()
    settings = DemoSettings()
    questions = [r["question"] for r in demo_partitions(settings.records, settings)["stage1"]]
    model = AutoModelForConfidence.from_pretrained(settings.model_name_or_path)
    tokenizer = model.tokenizer  # loaded with the model

    def batch(start: int, rows: int) -> dict[str, torch.Tensor]:
        texts = [model.confidence_config.format_prompt(q, tokenizer) for q in questions[start : start + rows]]
        return dict(tokenizer(texts, add_special_tokens=False, return_tensors="pt", padding=True))

    table = [["loaded", round(rss_mib()), ""]]
    with torch.no_grad():
        model(**batch(0, 4))
    release_memory()
    base = rss_mib()
    table.append(["after a no-grad forward (weights touched), trimmed", round(base), ""])
    model.train()
    for rows in (1, 2, 4, 8):
        release_memory()
        start = rss_mib()
        peak.reset()
        model(**batch(0, rows), labels=torch.full((rows,), 0.5)).loss.backward()
        model.zero_grad(set_to_none=True)
        high = peak.reset()
        table.append([f"forward + backward, {rows} row(s)", round(high), f"+{high - start:.0f}"])
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for trim in (False, True, False, True):  # alternated: the machine's drift hits both
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        release_memory()
        peak.reset()
        begin = time.perf_counter()
        for step in range(4):
            for micro in range(4):
                model(**batch(16 * step + 4 * micro, 4), labels=torch.full((4,), 0.5)).loss.backward()
                if trim:
                    release_memory(collect=False)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        runs[trim].append((peak.reset(), time.perf_counter() - begin))
    for trim, results in runs.items():
        label = "4 steps of 4 x 4 rows, " + ("a trim after each micro-batch" if trim else "no trim")
        highs, seconds = [round(h) for h, _ in results], [f"{s:.1f}" for _, s in results]
        table.append([f"{label} (2 runs)", " / ".join(map(str, highs)), " / ".join(seconds) + " s"])
    print_table(["what", "highest RSS (MiB)", "rise / time"], table)


if __name__ == "__main__":
    main()
