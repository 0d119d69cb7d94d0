"""Hub ids: whether a name is one, whether a repo id is valid, which Hub model a local folder is a copy of, and
whether two model names name the same model.

Shared by loading (`auto.py`), the model card (`model_card.py`), converting (`convert.py`) and publishing
(`publishing/hub.py`), so that each of them names a base model the same way: by its Hub id where one is known.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path


__all__ = ["hub_id_of_local_copy", "is_hub_id", "model_identity", "same_model", "validate_hub_repo_id"]


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
    dequantized copy of an embedded default model (see [`~elical_hf.models.default_model.convert_embedded`]).

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
    snapshot = _cache_snapshot(str(folder))
    return (snapshot[0], "hub") if snapshot is not None else None


def _cache_snapshot(path: str) -> tuple[str, str] | None:
    """The Hub id and commit a Hub cache snapshot path (`.../models--<org>--<name>/snapshots/<commit>`) names,
    read from the path alone (it may be a folder on another machine: a server's `root`), else `None`."""
    parts = posixpath.normpath(path.replace("\\", "/")).split("/")
    if len(parts) < 3 or parts[-2] != "snapshots" or not parts[-3].startswith("models--"):
        return None
    hub_id = parts[-3][len("models--") :].replace("--", "/")
    return (hub_id, parts[-1]) if is_hub_id(hub_id, local_wins=False) else None


def model_identity(name: str | os.PathLike) -> str:
    """What identifies the model `name` names, for [`same_model`]: a local folder's Hub id when the folder is a copy
    of one ([`hub_id_of_local_copy`]: a Hub cache snapshot, the dequantized embedded default), else its real path
    (symlinks resolved); a name that is no folder here (a Hub id, a served model's name, a folder on another machine)
    as written, normalised (`./a/b/` is `a/b`, `\\` is `/`); a Hub cache snapshot path that is not here (a server's
    `root`) as its Hub id too."""
    text = os.fspath(name).strip().replace("\\", "/")
    if not text:
        return text
    snapshot = _cache_snapshot(text)
    if snapshot is not None and not os.path.isdir(text):
        return snapshot[0]
    if os.path.isdir(text):
        known = hub_id_of_local_copy(text)
        return known[0] if known is not None else os.path.realpath(text)
    return posixpath.normpath(text)


def same_model(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """
    Whether two model names (a record's `model`, a confidence model's base) name the same model, compared by what
    identifies each ([`model_identity`]), not by how their names end: `out/run_a/final` is not `out/run_b/final`, nor
    `meta-llama/X` `someorg/X`.

    The same model: the same folder however it is written (a relative path, a trailing separator, a symlink); a Hub
    id and a local copy of it (its cache snapshot, the embedded default's dequantized copy), ignoring case; a name
    without its owner and the Hub id it ends (`SmolLM2-135M-Instruct`, as lm-evaluation-harness and served models name
    it, and `HuggingFaceTB/SmolLM2-135M-Instruct`); a relative folder path that is not here (written from another
    working folder) and an absolute one that ends with it. Not the same: two cache snapshots of one Hub id at
    different commits (two revisions' weights); a Hub id without a commit matches any of its snapshots.
    """
    snapshots = [_cache_snapshot(os.fspath(name).strip()) for name in (a, b)]
    if None not in snapshots and snapshots[0][1] != snapshots[1][1]:
        return False
    first, second = model_identity(a), model_identity(b)
    if first == second or (not posixpath.isabs(first) and first.casefold() == second.casefold()):
        return True
    for one, other in ((first, second), (second, first)):
        if "/" not in one and other.count("/") == 1 and is_hub_id(other, local_wins=False) \
                and other.split("/")[1].casefold() == one.casefold():
            return True
        if "/" in one and not posixpath.isabs(one) and posixpath.isabs(other) and other.endswith("/" + one):
            return True
    return False
