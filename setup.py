"""Metadata lives in setup.cfg. This file only adds `build_card_templates`, which ships the top-level `model_cards/`
templates inside the wheel.

No start-up hook (`.pth`) is built: `evaluate.load("honesty_auroc")` finds the metric modules once
`elical-hf install-metrics` has put them into evaluate's module cache (docs/architecture.md says why nothing can do
that at install time). The wheel ships each metric's script and card plus the shared `functional.py` and
`evaluate_mixin.py`, from which the runnable modules are assembled.
"""

import os

from setuptools import Command, setup
from setuptools.command.build import build


class build_card_templates(Command):
    """Ship the top-level `model_cards/` templates inside the wheel as `elical_hf/model_cards/`."""

    description = "copy model_cards/*.md into the built package"
    user_options = []

    def initialize_options(self):
        self.build_lib = None
        self.editable_mode = False  # an editable install reads the templates from the source tree

    def finalize_options(self):
        self.set_undefined_options("build", ("build_lib", "build_lib"))

    def run(self):
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_cards")
        target = os.path.join(self.build_lib, "elical_hf", "model_cards")
        self.mkpath(target)
        for name in sorted(os.listdir(source)):
            if name.endswith(".md"):
                self.copy_file(os.path.join(source, name), os.path.join(target, name))

    def get_outputs(self):
        return []


class build_with_card_templates(build):
    sub_commands = build.sub_commands + [("build_card_templates", None)]


setup(cmdclass={"build": build_with_card_templates, "build_card_templates": build_card_templates})
