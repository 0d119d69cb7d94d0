"""A served vLLM (`--backend openai`) against our Hugging Face sampler, per vLLM dtype: does it give the same greedy
answers, and does a second run give the same samples (what resuming an interrupted run relies on)?

Starts vLLM's CPU build (`build/vllm-venv`, `make vllm-venv`) on the embedded SmolLM2 with tests/vllm_server.py's
settings, `--dtype` replaced by each of `--dtypes`, samples the same bundled questions twice through `OpenAIBackend`,
and compares with `HFBackend` in float32:

    HF_HUB_OFFLINE=1 python benchmarks/vllm_served_agreement.py --dtypes float32 bfloat16
"""

from __future__ import annotations

import argparse
import os
import sys


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--num_samples", type=int, default=5)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO)
    os.environ.setdefault("ELICAL_HF_CPU_BF16", "0")  # the HF side in float32 throughout (no bf16 autocast)
    from common import print_machine, print_table

    from elical_hf import DEFAULT_MODEL
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.models.default_model import resolve_model_path
    from elical_hf.signals import HFBackend
    from elical_hf.signals.openai_backend import OpenAIBackend
    from elical_hf.signals.settings import SamplingSettings
    from tests import vllm_server

    print_machine()
    reason = vllm_server.why_not_here()
    if reason:
        print(f"No vLLM here: {reason}")
        return 1
    questions = [r["question"] for r in load_bundled_questions("nq", args.questions)]
    settings = SamplingSettings(num_samples=args.num_samples, max_new_tokens=args.max_new_tokens)
    local = HFBackend(DEFAULT_MODEL, dtype="float32").generate(questions, settings, progress=False)
    folder = resolve_model_path(DEFAULT_MODEL)[0]
    rows = []
    for dtype in args.dtypes:
        flags = list(vllm_server.VLLM_SERVER_ARGS)
        flags[flags.index("--dtype") + 1] = dtype
        server = vllm_server.vllm_server(folder, DEFAULT_MODEL, *flags)
        try:
            backend = OpenAIBackend(server.url, DEFAULT_MODEL)
            first = backend.generate(questions, settings, progress=False)
            second = backend.generate(questions, settings, progress=False)
        finally:
            server.stop()
        same = [a["greedy_response"] == b["greedy_response"] for a, b in zip(first, local)]
        gap = max((abs(x - y) for a, b, ok in zip(first, local, same) if ok
                   for x, y in zip(a["greedy_logprobs"], b["greedy_logprobs"])), default=float("nan"))
        rows.append([dtype, f"{sum(same)} / {len(same)}", f"{gap:.1e}",
                     f"{sum(a['greedy_response'] == b['greedy_response'] for a, b in zip(first, second))} / {len(same)}",
                     f"{sum(a['sampling_response'] == b['sampling_response'] for a, b in zip(first, second))} / "
                     f"{len(same)}"])
    print(f"\n{len(questions)} NQ questions, k={args.num_samples}, <= {args.max_new_tokens} new tokens; HF sampler in "
          "float32")
    print_table(["vLLM dtype", "greedy = HF sampler's", "largest log-prob gap (equal ones)",
                 "greedy = its own 2nd run", "samples = its own 2nd run"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
