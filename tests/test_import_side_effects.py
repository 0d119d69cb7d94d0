"""Importing elical_hf changes nothing outside the package; `register_pipeline()` only adds its task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


SCRIPT = """
    import json, logging, os, sys, warnings
    import torch, transformers, transformers.pipelines, peft, huggingface_hub, datasets
    from transformers.models.auto import configuration_auto, modeling_auto
    from transformers.pipelines import PIPELINE_REGISTRY

    PACKAGES = {"transformers", "peft", "torch", "huggingface_hub", "datasets", "evaluate", "accelerate", "tokenizers",
                "safetensors", "numpy", "matplotlib", "logging", "warnings", "os", "sys"}
    MISSING = object()

    def modules():
        return {name: module for name, module in list(sys.modules.items())
                if module is not None and name.split(".")[0] in PACKAGES}

    def state():
        auto_mappings = {name: dict(getattr(modeling_auto, name)._extra_content) for name in dir(modeling_auto)
                         if name.startswith("MODEL_") and name.endswith("_MAPPING")}
        return {
            "tasks": sorted(PIPELINE_REGISTRY.supported_tasks),
            "configs": sorted(configuration_auto.CONFIG_MAPPING._extra_content),
            "auto_models": {name: len(extra) for name, extra in auto_mappings.items()},
            "environ": dict(os.environ),
            "sys_path": list(sys.path),
            "meta_path": [type(finder).__name__ for finder in sys.meta_path],
            "warning_filters": [repr(f) for f in warnings.filters],
            "loggers": {name: [logging.getLogger(name).level, len(logging.getLogger(name).handlers)]
                        for name in ("", "transformers", "peft", "datasets", "huggingface_hub", "torch")},
            "torch": [str(torch.get_default_dtype()), torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()],
        }

    def replaced(before):
        return sorted(f"{name}.{key}" for name, attrs in before.items() for key, value in attrs.items()
                      if vars(sys.modules[name]).get(key, MISSING) is not value)

    original_auto_config = transformers.pipelines.AutoConfig
    snapshot = {name: dict(vars(module)) for name, module in modules().items()}
    before = state()
    import elical_hf
    after_import = state()
    replaced_by_import = replaced(snapshot)
    same_auto_config = transformers.pipelines.AutoConfig is original_auto_config is transformers.AutoConfig
    snapshot = {name: dict(vars(module)) for name, module in modules().items()}
    elical_hf.register_pipeline()
    after_register = state()
    print(json.dumps({
        "before": before, "after_import": after_import, "after_register": after_register,
        "replaced_by_import": replaced_by_import, "replaced_by_register": replaced(snapshot),
        "same_auto_config": same_auto_config,
    }))
"""


def test_import_changes_nothing_outside_the_package(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["same_auto_config"]
    assert out["replaced_by_import"] == []  # no attribute of transformers, torch, peft, ... rebound
    assert out["after_import"] == out["before"]  # registries, environment, paths, warnings, loggers, torch settings
    # register_pipeline() adds the task, and nothing else
    assert set(out["after_register"]["tasks"]) - set(out["before"]["tasks"]) == {"confidence-estimation"}
    assert {**out["after_register"], "tasks": out["before"]["tasks"]} == out["before"]
    assert out["replaced_by_register"] == []
