"""Gradio widget of the `honesty_ece` metric, loaded from the file next to this one (works in a Space and locally)."""

from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget


launch_gradio_widget(evaluate.load(str(Path(__file__).with_name("honesty_ece.py"))))
