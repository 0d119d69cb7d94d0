"""The README's command chain runs as written: sample -> judge -> diagnose -> baselines -> train -> evaluate ->
threshold, on the embedded SmolLM2 and a handful of bundled questions, so the chain cannot break silently again.

Sizes are shrunk by options only where the README's defaults are large (200 + 100 questions, 256 new tokens, the
recipe's epochs); every command and every path is the README's own. The Python snippets of "Use it", "Gate
answers" and the metrics run as written too ("Use it" is given its four row variables, the only names it leaves to
the reader)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
SHRINK = [  # (README text, what the test runs instead): sizes only
    ("bundled:nq:200,squad:100", "bundled:pararel:10,nq:6"),
    ("--num_samples 5", "--num_samples 3 --max_new_tokens 12"),
    ("--num_labels 100", "--num_labels 100 --num_train_epochs 1 --per_device_train_batch_size 8"),
]


def readme_block(title: str) -> list[str]:
    """The `elical-hf` lines of the first bash block under `## title`, comments removed."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("elical-hf ")]


def run(line: str, cwd: Path) -> str:
    for written, shrunk in SHRINK:
        line = line.replace(written, shrunk)
    argv = shlex.split(line)
    executable = str(Path(sys.executable).with_name("elical-hf"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([executable, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, f"`{line}` failed:\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_signals_block_runs_as_written(tmp_path):
    lines = readme_block("Signals, judges, baselines and evaluation")
    commands = [line.split()[1] for line in lines]
    assert commands == ["sample", "judge", "diagnose", "baselines", "train", "evaluate", "threshold"]
    sample, judge = lines[0], lines[1]
    # The held-out test and dev records the block names: other questions, sampled and judged the same way.
    for name, questions in (("test", "bundled:hotpotqa:6,2wikimultihopqa:6"), ("dev", "bundled:pararel:14,nq:6")):
        run(sample.replace("bundled:nq:200,squad:100", questions).replace("runs/sampled", f"runs/{name}-sampled"),
            tmp_path)
        run(judge.replace("runs/sampled", f"runs/{name}-sampled").replace("runs/judged", f"runs/{name}-judged"),
            tmp_path)
    outputs = {line.split()[1]: run(line, tmp_path) for line in lines}
    assert (tmp_path / "runs" / "judged.parquet").is_file() and (tmp_path / "runs" / "scored.parquet").is_file()
    assert "| overall |" in outputs["diagnose"]
    for folder in ("elicitation", "elical", "cal-only"):
        assert (tmp_path / "out" / folder / "confidence_config.json").is_file()
    assert (tmp_path / "runs" / "report" / "results.json").is_file()
    assert "decision_threshold" in outputs["threshold"]


def readme_python(title: str) -> list[str]:
    """Every python block under `## title` (up to the next `## ` heading)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_evaluate_snippet_runs_as_written():
    (snippet,) = readme_python("Signals, judges, baselines and evaluation")
    namespace: dict = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    # the snippet's last line is an expression: evaluate it again to check the value it shows
    value = eval(snippet.strip().splitlines()[-1], namespace)
    assert value["auroc"] == 1.0


@pytest.mark.slow
def test_the_use_it_and_gate_snippets_run_as_written(tmp_path, monkeypatch):
    """`Use it` trains both stages through `ConfidenceTrainer` on real bundled questions (its four row variables are
    the only names the README leaves to the reader); `Gate answers` answers on the shipped stage-1 adapter."""
    from elical_hf.bundled import load_bundled_questions

    monkeypatch.chdir(tmp_path)
    questions = load_bundled_questions("pararel", limit=12)
    rows = [{"question": q["question"], "consistency": i % 5 / 4, "correctness": i % 3 / 2, "greedy_correctness": i % 2}
            for i, q in enumerate(questions)]
    (use_it,) = readme_python("Use it")
    namespace = {"unlabelled_rows": rows[:8], "dev_rows": rows[8:], "labelled_rows": rows[:8],
                 "labelled_dev_rows": rows[8:]}
    exec(compile(use_it, "README.md", "exec"), namespace)
    for folder in ("elicitation", "elical"):
        assert (tmp_path / "out" / folder / "confidence_config.json").is_file()
    (confidence,) = eval(use_it.strip().splitlines()[-1].split("  #")[0], namespace)
    assert 0.0 <= confidence <= 1.0

    (gate,) = readme_python("Gate answers")
    printed: list[tuple] = []
    exec(compile(gate, "README.md", "exec"), {"print": lambda *values: printed.append(values)})
    assert len(printed) == 2, printed
    for decision, confidence, answer in printed:
        assert decision in ("answer", "retrieve", "abstain") and 0.0 <= confidence <= 1.0
        assert (answer is None) == (decision == "abstain") or decision == "retrieve"
    # the Hamlet question has notes: answered (from the notes when in the retrieve band); Ulm has none to retrieve
    assert printed[0][0] != "abstain" and isinstance(printed[0][2], str) and printed[0][2].strip()
