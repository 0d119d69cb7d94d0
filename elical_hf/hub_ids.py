"""Hub ids: whether a name is one, whether a repo id is valid, and which Hub model a local folder is a copy of.

Shared by loading (`auto.py`), the model card (`model_card.py`), converting (`convert.py`) and publishing
(`publishing/hub.py`), so that each of them names a base model the same way: by its Hub id where one is known.
"""

from __future__ import annotations

import os
from pathlib import Path


__all__ = ["hub_id_of_local_copy", "is_hub_id", "validate_hub_repo_id"]


def validate_hub_repo_id(repo_id: str) -> str:
    """Check that `repo_id` is a Hub repository id `<namespace>/<name>`; return it, or raise a `ValueError`."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(f"Invalid Hub repo id {repo_id!r}: {error} Use `<user or organization>/<name>`.") from None
    if repo_id.count("/") != 1:
        raise ValueError(f"Invalid Hub repo id {repo_id!r}: give its namespace, as `<user or organization>/<name>`.")
    return repo_id


def is_hub_id(name: str, *, local_wins: bool = True) -> bool:
    """Whether `name` reads as a Hub model id (`<namespace>/<name>` or a canonical `<name>`), not a local path.

    With `local_wins` (the default) a name that is also an existing local path counts as a path, as `from_pretrained`
    reads it."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or os.path.isabs(name) or name.startswith((".", "~")) or (local_wins and os.path.exists(name)):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def hub_id_of_local_copy(path: str | os.PathLike) -> tuple[str, str] | None:
    """
    The Hub id whose weights a local folder holds, when the folder itself says so unambiguously.

    Two layouts do: a snapshot in the Hub cache (`.../models--<org>--<name>/snapshots/<commit>`), and elical-hf's
    dequantized copy of an embedded default model (see [`~elical_hf.default_model.convert_embedded`]).

    Returns:
        `tuple[str, str] | None`: the Hub id and where the folder's weights come from (`"hub"` or
        `"gguf:<package>/<file> (dequantized)"`), or `None` for any other folder.
    """
    from .default_model import EMBEDDED_MODELS, embedded_copy_of

    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        return None
    embedded = embedded_copy_of(folder)
    if embedded is not None:
        return embedded, EMBEDDED_MODELS[embedded].weights_source
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--"):
        hub_id = repo[len("models--") :].replace("--", "/")
        if is_hub_id(hub_id, local_wins=False):
            return hub_id, "hub"
    return None
