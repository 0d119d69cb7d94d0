"""Metadata lives in setup.cfg. This file only adds `build_pth`, which puts `elical_hf_evaluate.pth` in every wheel.

That start-up hook makes `evaluate.load("honesty_auroc")` work offline right after installation; its content comes from
`elical_hf/metrics/registration.py` (stdlib only, loaded here by path without importing the package). Nothing else of the
metrics is built here: the wheel ships each metric's script and card plus the shared `functional.py` and
`evaluate_mixin.py`, and the hook assembles the runnable modules from them in evaluate's cache.
"""

import importlib.util
import os

from setuptools import Command, setup
from setuptools.command.build import build


def _registration():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elical_hf", "metrics", "registration.py")
    spec = importlib.util.spec_from_file_location("_elical_hf_registration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class build_pth(Command):
    """Write the `.pth` start-up hook at the wheel root (site-packages once installed)."""

    description = "write elical_hf's evaluate start-up hook (.pth) into the wheel"
    user_options = []

    def initialize_options(self):
        self.build_lib = None
        self.editable_mode = False  # set by setuptools' editable_wheel

    def finalize_options(self):
        self.set_undefined_options("build", ("build_lib", "build_lib"))

    def run(self):
        registration = _registration()
        targets = [self.build_lib]
        if self.editable_mode:
            # An editable wheel ships what lies in its unpacked folder (the `install` command's install_lib), not
            # build_lib, so the hook goes there as well: `pip install -e .` gets it too.
            targets.append(self.get_finalized_command("install").install_lib)
        for folder in targets:
            self.mkpath(folder)
            with open(os.path.join(folder, registration.PTH_FILENAME), "w", encoding="utf-8") as handle:
                handle.write(registration.pth_content())

    def get_outputs(self):
        return [os.path.join(self.build_lib, _registration().PTH_FILENAME)]


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


class build_with_pth(build):
    sub_commands = build.sub_commands + [("build_pth", None), ("build_card_templates", None)]


setup(cmdclass={"build": build_with_pth, "build_pth": build_pth, "build_card_templates": build_card_templates})
