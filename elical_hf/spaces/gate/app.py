"""The answer/abstain gate as a Gradio app: type a question, see the confidence, the decision and the answer.

`elical-hf push MODEL SPACE_REPO --kind gate-space` publishes this file as a Space, with a `gate.json` that names the
confidence model (a Hub repo, or the folder `model/` uploaded beside it). Locally: `ELICAL_GATE_MODEL=out/elical
python app.py` (`GRADIO_SERVER_PORT` sets the port). The threshold slider starts at the model's saved
`decision_threshold`; `model.answer` scores the question before any token and answers with the base model only when
the confidence reaches the threshold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gradio as gr


HERE = Path(__file__).resolve().parent
MAX_NEW_TOKENS = int(os.environ.get("ELICAL_GATE_MAX_NEW_TOKENS", "64"))
ABSTAINED = "(abstained: the model is not confident enough to answer)"


def model_name() -> str:
    """`ELICAL_GATE_MODEL`, else the `model` of `gate.json` (a folder name is relative to this file)."""
    name = os.environ.get("ELICAL_GATE_MODEL")
    if name:
        return name
    settings = json.loads((HERE / "gate.json").read_text(encoding="utf-8"))
    local = HERE / settings["model"]
    return str(local) if local.is_dir() else settings["model"]


def ask(model: Any, question: str, threshold: float) -> tuple[str, str, str]:
    """The confidence (3 decimals), the decision and the answer (or why there is none) for one question."""
    if not question or not question.strip():
        return "", "", "Type a question first."
    result = model.answer([question], threshold=float(threshold), max_new_tokens=MAX_NEW_TOKENS)[0]
    return f"{result['confidence']:.3f}", result["decision"], result["answer"] or ABSTAINED


def build_app(model: Any) -> gr.Blocks:
    threshold = model.confidence_config.decision_threshold
    with gr.Blocks(title="EliCal gate") as app:
        gr.Markdown("## Answer or abstain\nThe confidence is computed from the question alone, before the first "
                    "token; the base model answers only when it reaches the threshold.")
        question = gr.Textbox(label="Question", elem_id="question", placeholder="Who wrote Hamlet?")
        slider = gr.Slider(0.0, 1.0, value=0.5 if threshold is None else threshold, step=0.001, label="Threshold",
                           elem_id="threshold")
        button = gr.Button("Ask", elem_id="ask", variant="primary")
        with gr.Row():
            confidence = gr.Textbox(label="Confidence", elem_id="confidence", interactive=False)
            decision = gr.Textbox(label="Decision", elem_id="decision", interactive=False)
        answer = gr.Textbox(label="Answer", elem_id="answer", interactive=False)
        outputs = [confidence, decision, answer]
        button.click(lambda q, t: ask(model, q, t), [question, slider], outputs)
        question.submit(lambda q, t: ask(model, q, t), [question, slider], outputs)
    return app


if __name__ == "__main__":
    from elical_hf import AutoModelForConfidence

    build_app(AutoModelForConfidence.from_pretrained(model_name())).launch()
