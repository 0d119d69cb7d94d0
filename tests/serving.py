"""Start `elical-hf serve` as a real process on a free local port, for tests that drive it over HTTP.

[`ServerProcess`] is the library's (`elical_hf.serve.process`) with the tests' environment (offline, one OpenMP
thread, float32). [`gated_model`] saves a tiny confidence model with a decision threshold between the confidences of
the given questions, so that some are answered and some abstained.
"""

from __future__ import annotations

import torch

from elical_hf.serve import process as serve_process


TEST_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ELICAL_HF_CPU_BF16": "0"}
"""The server processes of tests: offline, one OpenMP thread, float32 (as tests pinned to float32)."""


class ServerProcess(serve_process.ServerProcess):
    """[`elical_hf.serve.process.ServerProcess`] with the tests' environment and quiet logs."""

    def __init__(self, model: str, *args: str, cwd: str | None = None, env: dict[str, str] | None = None):
        super().__init__(model, "--log_level", "warning", *args, cwd=cwd, env={**TEST_ENV, **(env or {})})


def cut(confidences: list[float], k: int) -> float:
    """A threshold that lets exactly the `k` highest of `confidences` through (halfway to the next one)."""
    ranked = sorted(confidences, reverse=True)
    return (ranked[k - 1] + ranked[k]) / 2


def gated_model(base: str, folder, questions: list[str], answered: int, seed: int = 0) -> list[float]:
    """Save into `folder` a float32 confidence model on `base` (LoRA and head moved off their init) whose decision
    threshold lets exactly the `answered` most confident of `questions` through. Returns their confidences."""
    from elical_hf import AutoModelForConfidence

    model = AutoModelForConfidence.from_pretrained(base, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad or "lora_" in name:
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    confidences = model.confidence(questions)
    ranked = sorted(confidences, reverse=True)
    assert min(a - b for a, b in zip(ranked, ranked[1:])) > 1e-4, "confidences too close to set a threshold between"
    model.confidence_config.decision_threshold = cut(confidences, answered)
    model.save_pretrained(folder)
    return confidences
