"""The gate on engines against the engines alone, on one machine in one run: what `elical-hf serve --confidence_endpoint
--generation_endpoint` adds to a chat request over calling the generation engine directly, and `/v1/confidence`'s
questions/s through vLLM's pooling runner against the in-process scorer.

Starts vLLM's CPU build (`build/vllm-venv`) twice (tests/vllm_server.py's settings, float32): the pooling runner on
the shipped demo model's export, the generate runner on its base model (the embedded SmolLM2-135M-Instruct). Then, with
threshold 0 (every question answered, so the gate's own cost is all that differs), one client sends `--questions`
bundled NQ questions one after another, in turns: directly to the generation engine (the same messages the gate
sends) and through the gate; per-request latency p50 / p95 over `--rounds` rounds. `/v1/confidence`: the same
questions in one request, through the gate on engines and through the in-process gate (`elical-hf serve` of the demo
model), medians of `--rounds`:

    HF_HUB_OFFLINE=1 python benchmarks/upstream_gate.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max_tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO)
    os.environ.setdefault("ELICAL_HF_CPU_BF16", "0")  # the in-process scorer in float32, as vLLM serves
    from common import print_machine, print_table

    from elical_hf import DEFAULT_MODEL, AutoModelForConfidence
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.models.default_model import resolve_model_path
    from elical_hf.demo import DEMO_CALIBRATED
    from elical_hf.settings.prompts import QA_PROMPT
    from elical_hf.serve.app import create_app
    from elical_hf.serve.engine import GateEngine
    from elical_hf.serve.upstream import UpstreamGateEngine
    from tests.serving import running
    from tests.vllm_server import exported_demo_model, vllm_server

    print_machine()
    questions = [row["question"] for row in load_bundled_questions("nq", limit=args.questions)]
    local = GateEngine(AutoModelForConfidence.from_pretrained(DEMO_CALIBRATED, dtype="float32"), "gate", threshold=0.0)
    with tempfile.TemporaryDirectory() as scratch:
        export = exported_demo_model(os.path.join(scratch, "export"))
        scorer = vllm_server(export, "confidence", "--runner", "pooling")
        generator = vllm_server(resolve_model_path(DEFAULT_MODEL)[0], "base")
        try:
            remote = UpstreamGateEngine(export, "gate", confidence_endpoint=scorer.url,
                                        generation_endpoint=generator.url, threshold=0.0, max_tokens=args.max_tokens)
            with running(create_app(remote)) as gate_port, running(create_app(local)) as local_port:
                gate = f"http://127.0.0.1:{gate_port}/v1"
                direct_times, gate_times = [], []
                for _ in range(args.rounds):
                    for question in questions:
                        messages = [{"role": "user", "content": QA_PROMPT.format(question=question)}]
                        direct_times.append(timed(lambda: post(f"{generator.url}/chat/completions", {
                            "model": "base", "messages": messages, "max_tokens": args.max_tokens, "temperature": 0})))
                        gate_times.append(timed(lambda: post(f"{gate}/chat/completions", {
                            "messages": [{"role": "user", "content": question}], "max_tokens": args.max_tokens})))
                scoring = {name: statistics.median(timed(lambda: post(f"{url}/confidence", {"questions": questions}))
                                                   for _ in range(args.rounds))
                           for name, url in (("on engines", gate), ("in-process", f"http://127.0.0.1:{local_port}/v1"))}
        finally:
            generator.stop()
            scorer.stop()

    def quantile(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]

    print(f"\nChat requests, one client, {args.questions} NQ questions x {args.rounds} rounds, max_tokens "
          f"{args.max_tokens}, threshold 0 (all answered):")
    print_table(["path", "p50 s", "p95 s"],
                [[name, round(statistics.median(t), 3), round(quantile(t, 0.95), 3)]
                 for name, t in (("generation engine directly", direct_times), ("through the gate", gate_times))])
    print(f"\nPOST /v1/confidence, {args.questions} questions in one request (medians of {args.rounds}):")
    print_table(["gate", "seconds", "questions/s"],
                [[name, round(seconds, 3), round(args.questions / seconds, 1)] for name, seconds in scoring.items()])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
