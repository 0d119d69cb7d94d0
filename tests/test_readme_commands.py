"""The README's commands and snippets run as written, and so do the ones its detail moved to (`docs/cli.md`,
`docs/usage.md`): the command chain sample -> judge -> diagnose -> baselines -> train -> evaluate -> threshold of
`docs/cli.md`, on the embedded SmolLM2 and a handful of bundled questions, so the chain cannot break silently again;
every `elical-hf` line of the README is a line of that chain.

Sizes are shrunk by options only where the defaults are large (200 + 100 questions, 256 new tokens, the recipe's
epochs); every command and every path is the page's own. The Python snippets run as written too: the README's
quickstart (printing what the README shows), "Train in Python" and "Gate answers" of `docs/usage.md` ("Train in
Python" is given its four row variables, the only names it leaves to the reader) and the metrics of `docs/cli.md`."""

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


README, CLI_PAGE, USAGE_PAGE = "README.md", "docs/cli.md", "docs/usage.md"
CHAIN = "Signals, judges, baselines and evaluation"
"""The section of `docs/cli.md` whose command chain runs here."""


def section(page: str, title: str) -> str:
    """The text under `## title` of `page` (up to the next `## ` heading)."""
    return (ROOT / page).read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def commands(text: str) -> list[str]:
    """The `elical-hf` lines of every bash block of `text`, comments removed."""
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith("elical-hf ")]


def run(line: str, cwd: Path) -> str:
    for written, shrunk in SHRINK:
        line = line.replace(written, shrunk)
    argv = shlex.split(line)
    executable = str(Path(sys.executable).with_name("elical-hf"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([executable, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, f"`{line}` failed:\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_readme_command_is_one_the_chain_runs():
    readme = (ROOT / README).read_text(encoding="utf-8")
    assert re.search(r"```bash\nmake demo +#[^\n]*\nmake test +#", readme), "the two set-up commands come first"
    chain = commands(section(CLI_PAGE, CHAIN))
    lines = commands(readme)
    assert len(lines) >= 3
    for line in lines:
        assert line in chain, f"the README's `{line}` is not a line of {CLI_PAGE}'s chain, which this file runs"


@pytest.mark.slow
def test_the_signals_block_runs_as_written(tmp_path):
    lines = commands(section(CLI_PAGE, CHAIN))
    names = [line.split()[1] for line in lines]
    assert names == ["sample", "judge", "diagnose", "baselines", "train", "evaluate", "threshold"]
    sample, judge = lines[0], lines[1]
    # The held-out test and dev records the block names: other questions, sampled and judged the same way.
    # (bundled limits take each set's first rows: the dev questions share no dataset with the trained-on pararel and nq,
    # which `threshold` would refuse, nor with the test questions)
    held_out = (("test", "bundled:squad:6,webquestions:6"), ("dev", "bundled:hotpotqa:14,2wikimultihopqa:6"))
    for name, questions in held_out:
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


MULTIPLE_CHOICE = "Multiple choice (MMLU)"


@pytest.mark.slow
def test_the_multiple_choice_block_runs_as_written(tmp_path):
    """sample -> judge (the option judge) -> baselines (Option-Prob) -> evaluate on 40 bundled MMLU questions. The
    block's `out/elical` is the model the next section trains; the shipped calibrated demo model stands in for it."""
    import json
    import shutil

    from elical_hf.demo import DEMO_CALIBRATED

    lines = commands(section(CLI_PAGE, MULTIPLE_CHOICE))
    assert [line.split()[1] for line in lines] == ["sample", "judge", "baselines", "evaluate"]
    shutil.copytree(DEMO_CALIBRATED, tmp_path / "out" / "elical")
    for line in lines:
        run(line, tmp_path)
    from elical_hf.signals.records import load_records

    records = load_records(tmp_path / "runs" / "mmlu-scored.parquet").to_list()
    assert len(records) == 40 and len({r["subject"] for r in records}) == 40
    assert all(r["correctness_judge"] == r["consistency_judge"] == "option" for r in records)
    assert all(abs(sum(r["option_probabilities"]) - 1) < 1e-6 for r in records)
    results = json.loads((tmp_path / "runs" / "mmlu-report" / "results.json").read_text())
    table = results.get("table", results)
    for method in ("EliCal", "Prob", "Consis-Sem", "Option-Prob"):
        assert table[method]["mmlu"]["n"] == 40, method


def python_blocks(page: str, title: str) -> list[str]:
    """Every python block under `## title` of `page`."""
    return re.findall(r"```python\n(.*?)```", section(page, title), re.S)


def test_the_evaluate_snippet_runs_as_written():
    (snippet,) = python_blocks(CLI_PAGE, CHAIN)
    namespace: dict = {}
    exec(compile(snippet, CLI_PAGE, "exec"), namespace)
    # the snippet's last line is an expression: evaluate it again to check the value it shows
    value = eval(snippet.strip().splitlines()[-1], namespace)
    assert value["auroc"] == 1.0


@pytest.mark.slow
def test_the_train_in_python_snippet_runs_as_written(tmp_path, monkeypatch):
    """"Train in Python" trains both stages through `ConfidenceTrainer` on real bundled questions (its four row
    variables are the only names the page leaves to the reader)."""
    from elical_hf.data.questions import load_bundled_questions

    monkeypatch.chdir(tmp_path)
    questions = load_bundled_questions("pararel", limit=12)
    rows = [{"question": q["question"], "consistency": i % 5 / 4, "correctness": i % 3 / 2, "greedy_correctness": i % 2}
            for i, q in enumerate(questions)]
    (train,) = python_blocks(USAGE_PAGE, "Train in Python")
    namespace = {"unlabelled_rows": rows[:8], "dev_rows": rows[8:], "labelled_rows": rows[:8],
                 "labelled_dev_rows": rows[8:]}
    exec(compile(train, USAGE_PAGE, "exec"), namespace)
    for folder in ("elicitation", "elical"):
        assert (tmp_path / "out" / folder / "confidence_config.json").is_file()
    (confidence,) = eval(train.strip().splitlines()[-1].split("  #")[0], namespace)
    assert 0.0 <= confidence <= 1.0


def shown_output(page: str, title: str) -> list[list[str]]:
    """The lines of the `text` block that follows the python block under `## title` (what the page says it printed),
    each split into its whitespace-separated fields (the answer, from the third field on, kept whole)."""
    text = re.search(r"```python\n.*?```\s*```text\n(.*?)```", section(page, title), re.S).group(1)
    return [line.split(maxsplit=2) for line in text.strip().splitlines()]


def run_printing(snippet: str, page: str) -> list[list[str]]:
    """Run `snippet`; what it printed, one list of fields per line (as [`shown_output`] splits the page's)."""
    printed: list[str] = []
    exec(compile(snippet, page, "exec"), {"print": lambda *values: printed.append(" ".join(map(str, values)))})
    return [line.split(maxsplit=2) for line in printed]


def same_output(printed: list[list[str]], shown: list[list[str]], confidence_field: int) -> None:
    """The decisions and answers as shown; each confidence within 0.03 of the shown one (float32 and bfloat16, and
    batches of other sizes, move the second decimal)."""
    assert len(printed) == len(shown), printed
    for got, expected in zip(printed, shown):
        assert abs(float(got[confidence_field]) - float(expected[confidence_field])) <= 0.03, (got, expected)
        assert got[:confidence_field] + got[confidence_field + 1:] == \
            expected[:confidence_field] + expected[confidence_field + 1:], (got, expected)


@pytest.mark.slow
def test_the_quickstart_and_the_gate_snippet_print_what_the_pages_show():
    """The README's quickstart and the "Gate answers" snippet of `docs/usage.md` run as written on the shipped
    calibrated model and print what the pages show (decisions and answers exactly, confidences to 0.03)."""
    (quickstart,) = python_blocks(README, "Quickstart")
    same_output(run_printing(quickstart, README), shown_output(README, "Quickstart"), confidence_field=0)
    (gate,) = python_blocks(USAGE_PAGE, "Gate answers")
    same_output(run_printing(gate, USAGE_PAGE), shown_output(USAGE_PAGE, "Gate answers"), confidence_field=1)


@pytest.mark.slow
def test_what_the_quickstart_says_the_model_would_have_answered():
    """The README's claims about the abstentions: asked anyway, the model says Sydney and invents a mayor of Ulm; it
    also abstains on the Berlin Wall question, which it would answer right."""
    from elical_hf import AutoModelForConfidence
    from elical_hf.demo import DEMO_CALIBRATED

    model = AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED)
    threshold = model.confidence_config.decision_threshold
    questions = ["What is the capital of Australia?", "Who was the third mayor of Ulm?",
                 "In which year did the Berlin Wall fall?"]
    australia, ulm, berlin = model.answer(questions, threshold=0.0, max_new_tokens=24)
    assert "The capital of Australia is Sydney." in australia["answer"] and australia["confidence"] < threshold
    assert "third mayor of Ulm" in ulm["answer"] and ulm["confidence"] < threshold
    quoted = re.search(r'"In which\s+year did the Berlin Wall fall\?": (\d\.\d\d)', section(README, "Quickstart"))
    assert "1989" in berlin["answer"] and abs(berlin["confidence"] - float(quoted.group(1))) <= 0.03
    assert berlin["confidence"] < threshold


def test_the_quickstart_quotes_the_shipped_models_threshold_and_card():
    from elical_hf.settings.configuration import ConfidenceConfig
    from elical_hf.demo import DEMO_CALIBRATED

    text = " ".join(section(README, "Quickstart").split())
    config = ConfidenceConfig.from_json_file(os.path.join(DEMO_CALIBRATED, "confidence_config.json"))
    assert f"The threshold ({config.decision_threshold:.2f})" in text
    card = " ".join(open(os.path.join(DEMO_CALIBRATED, "README.md"), encoding="utf-8").read().split())
    questions, answered, correct = (int(x) for x in re.search(
        r"on the replication's (\d+) dev questions .*? at the threshold (\d+) answered, (\d+) of them", card).groups())
    assert f"chosen on {questions} held-out questions, where the model answered {answered}" in text
    assert answered == correct and f"{answered}, all correctly" in text
