"""The in-process vLLM backend (`--backend vllm`, `VLLMBackend`) on a CPU, against our Hugging Face sampler.

vLLM's CPU build pins transformers < 5.20 and elical-hf asks for >= 5.23, so this runs in the vLLM venv with
elical-hf installed there by hand, without its pins (docs/scaling.md says why the pin stays):

    build/vllm-venv/bin/pip install -c <(printf 'transformers==5.19.0\\ntorch==2.13.0+cpu\\n') peft accelerate \\
        datasets evaluate jinja2 safetensors gguf pyyaml regex rouge-score 'sentence-transformers>=5.2,<7' \\
        matplotlib tqdm 'huggingface-hub>=1.0' && build/vllm-venv/bin/pip install --no-deps -e .
    VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 build/vllm-venv/bin/python benchmarks/vllm_in_process.py

Prints vLLM's start-up and sampling seconds, whether a second run samples the same, and how many greedy answers
equal the HF sampler's (both float32), with the largest log-probability difference among those.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--num_samples", type=int, default=5)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ.setdefault("ELICAL_HF_CPU_BF16", "0")  # the HF side in float32, as vLLM here
    from elical_hf import DEFAULT_MODEL
    from elical_hf.data.questions import load_bundled_questions
    from elical_hf.models.default_model import resolve_model_path
    from elical_hf.signals.backends import HFBackend, VLLMBackend
    from elical_hf.signals.settings import SamplingSettings

    questions = [r["question"] for r in load_bundled_questions("nq", args.questions)]
    settings = SamplingSettings(num_samples=args.num_samples, max_new_tokens=args.max_new_tokens)
    started = time.perf_counter()
    backend = VLLMBackend(resolve_model_path(DEFAULT_MODEL)[0], dtype="float32", max_model_len=1024,
                          enable_chunked_prefill=False, max_num_batched_tokens=4096)
    start_s = time.perf_counter() - started
    started = time.perf_counter()
    first = backend.generate(questions, settings, progress=False)
    sample_s = time.perf_counter() - started
    again = backend.generate(questions, settings, progress=False)
    local = HFBackend(DEFAULT_MODEL, dtype="float32").generate(questions, settings, progress=False)
    equal = [a["greedy_response"] == b["greedy_response"] for a, b in zip(first, local)]
    gap = max((abs(x - y) for a, b, same in zip(first, local, equal) if same
               for x, y in zip(a["greedy_logprobs"], b["greedy_logprobs"])), default=float("nan"))
    print(f"vLLM start-up {start_s:.0f} s; {len(questions)} questions x (1 + {args.num_samples}) answers in "
          f"{sample_s:.1f} s; a second run samples the same for {sum(a == b for a, b in zip(first, again))} of "
          f"{len(questions)}; greedy answers equal to the HF sampler's: {sum(equal)} of {len(equal)} (largest "
          f"log-probability difference among them {gap:.1e})")
    return 0


if __name__ == "__main__":  # vLLM's engine starts in a spawned process, which imports this file again
    raise SystemExit(main())
