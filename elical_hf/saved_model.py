"""A saved confidence model folder: found here or on the Hub ([`find_saved_model`]), and its decision rule changed
in place ([`set_decision_threshold`]: `confidence_config.json`, written atomically, and its generated card).

Loading and saving a whole model is [`~elical_hf.AutoModelForConfidence`]'s; this module only reads and rewrites
the files of a folder it saved.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
from .default_model import hub_offline
from .metrics import risk_controlling_threshold, select_threshold
from .model_card import GENERATED_MARKER, write_folder_card


__all__ = ["find_saved_model", "set_decision_threshold"]


def find_saved_model(name: str, **hub_kwargs: Any) -> str | None:
    """The local folder of a saved confidence model at `name` (downloading a Hub repo), or `None`."""
    if os.path.isdir(name):
        return name if os.path.isfile(os.path.join(name, CONFIDENCE_CONFIG_NAME)) else None
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import HFValidationError

    hub_kwargs.setdefault("local_files_only", hub_offline())
    try:
        hf_hub_download(name, CONFIDENCE_CONFIG_NAME, **hub_kwargs)
    except (OSError, HFValidationError):  # not a confidence repo, or not reachable: treat as a base model
        return None
    return snapshot_download(name, **hub_kwargs)


def set_decision_threshold(
    model_dir: str,
    confidences: Sequence[float],
    correct: Sequence[int],
    *,
    alpha: float | None = None,
    delta: float = 0.1,
    source: Mapping[str, Any] | None = None,
) -> float:
    """
    Choose the answer/abstain threshold on these labelled rows (a calibration split, never the test set) and store it
    as `decision_threshold` in the saved model's `confidence_config.json` (and its generated card); returns it.

    Args:
        model_dir (`str`): A saved confidence model folder.
        confidences (`list[float]`), correct (`list[int]`): The model's confidences and 0/1 correctness of the rows.
        alpha (`float`, *optional*): With it, the threshold guarantees an error rate among answered questions of at
            most `alpha` with probability `1 - delta` ([`~elical_hf.metrics.risk_controlling_threshold`]), recorded as
            `risk_control`. Without it, the alignment rule ([`~elical_hf.metrics.select_threshold`]); an earlier
            `risk_control` record is removed.
        delta (`float`, *optional*, defaults to 0.1): The guarantee's failure probability (with `alpha`).
        source (`dict`, *optional*): Where the rows came from (e.g. `{"records": ..., "split": ...}`), kept in
            `risk_control`.

    Raises:
        `ValueError`: when `model_dir` is not a saved model, or no threshold can be certified at `alpha` (nothing is
        written then).
    """
    path = os.path.join(model_dir, CONFIDENCE_CONFIG_NAME)
    if not os.path.isfile(path):
        raise ValueError(f"{model_dir} is not a saved confidence model (no {CONFIDENCE_CONFIG_NAME}).")
    config = ConfidenceConfig.from_json_file(path)
    if alpha is None:
        threshold, record = select_threshold(confidences, correct), None
    else:
        record = {**risk_controlling_threshold(confidences, correct, alpha=alpha, delta=delta), **(source or {})}
        threshold = record.pop("threshold")
        if threshold is None:
            raise ValueError(
                f"No threshold keeps the error rate among answered questions below alpha={alpha} with probability "
                f"1 - delta = {1 - delta:.2f} on these {len(confidences)} rows: use more labelled rows, or a larger "
                "alpha or delta. Nothing was written."
            )
    config.decision_threshold = threshold
    config.risk_control = record
    if config.retrieve_threshold is not None and config.retrieve_threshold > threshold:
        config.retrieve_threshold = threshold  # the retrieve band cannot start above the answer threshold
    config.save_pretrained(model_dir)
    readme = os.path.join(model_dir, "README.md")
    if not os.path.isfile(readme) or GENERATED_MARKER in open(readme, encoding="utf-8").read():
        write_folder_card(model_dir)
    return threshold
