"""The benchmark scripts run (their timings are reported in docs/benchmarks.md, never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


@pytest.mark.parametrize("script", ["confidence_cost", "sampling_speed", "sampling_cache_ab", "training_speed",
                                    "metrics_speed", "demo_wall", "data_scale", "gate_overhead", "precision_agreement",
                                    "serve_load", "cli_startup", "gpu_check", "judge_verdict",
                                    "endpoint_throughput", "vllm_in_process", "vllm_served_agreement"])
def test_every_benchmark_has_a_working_help(script):
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, f"{script}.py"), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_metrics_benchmark_prints_the_machine_and_its_table():
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "metrics_speed.py"), "--sizes", "2000",
                           "--repeats", "1", "--bootstrap_rows", "60"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Machine: cpu=") and "policy_dtype=" in lines[0] and "fp32_gflops=" in lines[0]
    rows = [line.split() for line in lines if line.startswith(("auroc", "ece"))]
    assert [row[:2] for row in rows] == [["auroc", "2,000"], ["ece", "2,000"]]
    assert all(float(row[4]) > 0 for row in rows)  # ours / baseline ratios
    resampled = [line.split() for line in lines if line.startswith("bootstrap ")]
    assert [row[1] for row in resampled[1:]] == ["auroc", "ece", "alignment"]  # after the header line
    assert all(float(row[-1]) > 0 for row in resampled[1:])


def test_data_scale_benchmark_builds_the_table_in_a_fresh_process(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "data_scale.py"), "--num_records", "300",
                           "--samples", "3", "--no_tokenize", "--workdir", str(tmp_path / "w")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "records: 300 x 3 samples" in done.stdout
    result = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == 300 and result["train_rows"] + result["dev_rows"] == 300 and result["peak_rss_mib"] > 0
    assert not (tmp_path / "w").exists()  # removed unless --keep


def test_gate_overhead_benchmark_checks_answers_and_prints_ratios(tiny_llama, tmp_path):
    from elical_hf import AutoModelForConfidence

    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "stage1")
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "gate_overhead.py"), "--model", tiny_llama,
                           "--stage1", str(tmp_path / "stage1"), "--questions", "3", "--max_new_tokens", "3",
                           "--repeats", "1"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Machine: cpu=")
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in lines if line.startswith("| ")}
    assert float(rows["plain greedy generation"]) == 1.0
    assert float(rows["zero-overhead gate (no LoRA)"]) > 0 and float(rows["LoRA gate (LoRA + head)"]) > 0
    summary = lines[-1]
    assert summary.startswith("zero-overhead gate: ") and "confidence prefills (target <= 1)" in summary


def test_precision_agreement_benchmark_prints_both_dtypes_side_by_side(tiny_llama, tmp_path):
    """fp32 vs bf16 on a tiny model and the demo's committed records: the table has every row, and the head's
    confidences in the two dtypes differ by bf16 rounding only (a confidence model is never far off in bf16)."""
    from elical_hf import AutoModelForConfidence

    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "stage1")
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "precision_agreement.py"), "--model", tiny_llama,
                           "--stage1_model", str(tmp_path / "stage1"), "--sample_questions", "3", "--num_samples", "2",
                           "--max_new_tokens", "3", "--test_questions", "40", "--num_labels", "20", "--head_epochs",
                           "2", "--bootstrap", "20"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]] for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("|  |")}
    assert {"greedy answers identical (fp32 vs bf16)", "sampler tokens/s", "Eli-Only: in-domain AUROC",
            "EliCal (head): max / mean abs Δ confidence"} <= set(rows)
    assert 0 <= float(rows["greedy answers identical (fp32 vs bf16)"][2].rstrip("%")) <= 100
    largest, mean = (float(x) for x in rows["Eli-Only: max / mean abs Δ confidence"][2].split(" / "))
    assert 0 <= mean <= largest < 0.05


def test_serve_load_benchmark_drives_both_servers_and_prints_ratios(tiny_llama, tmp_path):
    """A smoke run (2 requests per round): both servers start, answer, and every cell and ratio is printed."""
    from elical_hf import AutoModelForConfidence

    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "gate")
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "serve_load.py"), "--model", str(tmp_path / "gate"),
                           "--concurrency", "1", "2", "--requests", "2", "--warmup", "1", "--max_tokens", "2"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Machine: cpu=") and lines[1].startswith("CPU (lscpu): ")
    cells = {(row[1].strip(), row[2].strip()): float(row[3]) for row in (line.split("|") for line in lines)
             if len(row) > 3 and row[2].strip().isdigit()}
    assert set(cells) == {(server, clients) for server in ("batched", "one at a time") for clients in ("1", "2")}
    assert all(rps > 0 for rps in cells.values())
    assert lines[-1].startswith("batched / one at a time: 1 clients: ") and "2 clients: " in lines[-1]


def test_serve_load_long_scenario_compares_short_latency_with_and_without_the_limit(tiny_llama, tmp_path):
    """A smoke run of `--scenario long` (a 20-token client beside short ones, limit 8): both servers answer, and the
    table and the comparison line are printed."""
    from elical_hf import AutoModelForConfidence

    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "gate")
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "serve_load.py"), "--model", str(tmp_path / "gate"),
                           "--scenario", "long", "--long_tokens", "20", "--max_tokens_limit", "8", "--short_clients",
                           "1", "--short_requests", "2", "--warmup", "1", "--long_head_start", "0.3"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    rows = {row[1].strip(): row[2:6] for row in (line.split("|") for line in done.stdout.splitlines())
            if len(row) > 5 and row[1].strip() in ("limit 8", "no limit")}
    assert [int(rows[name][0]) for name in ("limit 8", "no limit")] == [8, 20]
    assert all(float(rows[name][1]) > 0 and float(rows[name][3]) >= 1 for name in rows)
    last = [line for line in done.stdout.splitlines() if line.strip()][-1]  # scenarios end with a blank line
    assert last.startswith("short requests beside a long one, median latency: ")


@pytest.mark.slow
def test_cli_startup_benchmark_says_which_helps_import_torch():
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "cli_startup.py"), "--repeats", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if "elical-hf" in line}
    assert {"elical-hf --help", "elical-hf train --help", "elical-hf serve --help"} <= set(rows)
    assert all(line.rstrip(" |").endswith("no") for line in rows.values()), rows  # no --help imports torch


def test_demo_wall_splits_the_memory_trace_by_step(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from demo_wall import rss_mib, step_peaks

    # the demo's own clock starts 2 s into the child's life (start-up), its two steps take 3 s and 4 s, 1 s of reports
    trace = [(0.5, 300.0), (1.9, 900.0), (2.5, 1000.0), (4.9, 1400.0), (5.1, 1200.0), (8.5, 1300.0), (9.5, 800.0)]
    bounds, peaks = step_peaks(trace, {"sampling": 3.0, "training": 4.0}, wall=10.0, seconds=8.0)
    assert [name for name, _, _ in bounds] == ["start-up", "sampling", "training", "reports"]
    assert peaks == {"start-up": 900.0, "sampling": 1400.0, "training": 1300.0, "reports": 800.0}
    assert rss_mib(os.getpid()) > 10 and rss_mib(2**22 + 12345) is None


def test_gpu_check_passes_every_device_check_and_measures_every_speed_row_on_a_cpu(tmp_path, monkeypatch):
    """The GPU machine's one command in its CPU form (tiny shapes, a 60 s budget; about 10 s on 2 cores, one torch
    thread: two threads on cores other jobs share run 2-3x slower): every device check passes, every speed row has a
    positive figure, and the table on stdout says the same."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    from gpu_check import GATE_ROWS, SAMPLER_ROWS, SCORING_ROWS, TRAINING_ROWS

    output = tmp_path / "check.json"
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "gpu_check.py"), "--device", "cpu", "--shape",
                           "tiny", "--budget_s", "60", "--output", str(output)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    report = json.loads(output.read_text())
    assert report["device"] == "cpu" and report["shape"] == "tiny" and report["versions"]["torch"] != "missing"
    checks = {row["name"]: row for row in report["rows"] if row["part"] == "device check"}
    assert len(checks) == 5 and all(row["status"] == "PASS" for row in checks.values()), checks
    speeds = {row["name"]: row for row in report["rows"] if row["part"] == "speed"}
    assert list(speeds) == [*SAMPLER_ROWS, *GATE_ROWS, *SCORING_ROWS, *TRAINING_ROWS]
    assert all(row["value"] is not None and row["value"] > 0 for row in speeds.values()), speeds
    assert all(speeds[name]["peak_memory_mib"] > 0 for name in TRAINING_ROWS)
    assert report["setup"]["parameters"] > 0 and report["setup"]["dtype"] in ("float32", "bfloat16")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Device: ") and "transformers " in lines[0] and "peft " in lines[0]
    table = [line for line in lines if line.startswith("| device check |") or line.startswith("| speed |")]
    assert len(table) == len(report["rows"]) and sum(" | PASS | " in line for line in table) == 5


def test_gpu_check_reports_a_failing_check_instead_of_stopping(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from gpu_device_checks import run_check

    def broken() -> str:
        assert 1 + 1 == 3, "arithmetic is off"
        return "never"

    row = run_check("arithmetic", broken)
    assert row["status"] == "FAIL" and row["detail"] == "AssertionError: arithmetic is off"
    assert run_check("fine", lambda: "ok")["status"] == "PASS"


def test_interleaved_medians_stops_at_its_budget(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    import time

    from common import interleaved_medians

    calls = []
    medians = interleaved_medians({"a": lambda: (calls.append("a"), time.sleep(0.05))}, repeats=20, warmup=0,
                                  budget_s=0.12)
    assert 1 <= len(calls) <= 3 and medians["a"] >= 0.05
    calls.clear()
    interleaved_medians({"a": lambda: calls.append("a")}, repeats=4, warmup=1)
    assert len(calls) == 5  # without a budget: the warm-up round and every repeat


def test_judge_verdict_compares_the_two_verdicts_on_records(tiny_llama, tmp_path):
    from elical_hf.signals.records import save_records
    from tests.test_cli_judge import make_records

    records = [{**r, "greedy_correctness": i % 2 == 0} for i, r in enumerate(make_records())]
    save_records(records, tmp_path / "records.jsonl")
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "judge_verdict.py"), "--records",
                           str(tmp_path / "records.jsonl"), "--judge_model", tiny_llama, "--num_records", "4",
                           "--output", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert 0 <= result["equal_share"] <= 1 and result["verdicts"] > 0
    assert set(result["auroc"]) == {"generate (verdicts)", "logprob (verdicts)", "logprob (P(certain), soft)"}
    assert all(seconds > 0 for seconds in result["seconds_per_1000"].values())


@pytest.mark.slow
def test_serve_load_streaming_and_confidence_scenarios_print_their_tables(tiny_llama, tmp_path):
    """A smoke run of `--scenario stream confidence`: streamed requests are timed to their decision, first token and
    end (in that order), and /v1/confidence requests give questions/s, at each concurrency."""
    from elical_hf import AutoModelForConfidence

    AutoModelForConfidence.from_pretrained(tiny_llama).save_pretrained(tmp_path / "gate")
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "serve_load.py"), "--model", str(tmp_path / "gate"),
                           "--scenario", "stream", "confidence", "--concurrency", "1", "2", "--requests", "2",
                           "--warmup", "1", "--max_tokens", "3", "--questions_per_request", "3"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in done.stdout.splitlines()
            if line.startswith("|") and line.split("|")[1].strip().isdigit()]
    streaming, confidence = [row for row in rows if len(row) == 5], [row for row in rows if len(row) == 3]
    assert [row[0] for row in streaming] == [row[0] for row in confidence] == ["1", "2"]
    for _, decision, first_p50, first_p90, end in streaming:
        assert 0 < float(decision) <= float(first_p50) <= float(end) and float(first_p50) <= float(first_p90)
    assert all(float(row[1]) > 0 for row in confidence)
