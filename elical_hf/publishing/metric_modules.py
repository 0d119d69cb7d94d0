"""The three `evaluate` metric modules as evaluate loads them: what each is made of, and putting them into evaluate's
module cache so that `evaluate.load("honesty_auroc")` finds them by name, offline ([`install_metrics`], the command
`elical-hf install-metrics`).

A module is its script `elical_hf/metrics/<name>/<name>.py` plus the [`SHARED_FILES`] of `elical_hf/metrics/`
(`functional.py` and `evaluate_mixin.py`, the single sources; no module folder holds a copy), put side by side
([`module_sources`]): evaluate copies only a script's own relative imports. [`install_metrics`] writes them in the
layout evaluate itself uses for a module it downloaded,
`$HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--<name>/<64-hex hash>/<name>.py`, which is where
`evaluate.load(name)` looks when the Hub cannot answer (offline, or no such canonical metric): it takes the most
recently modified copy there (and logs "Using the latest cached version of the module ..."; that message is expected).

Nothing runs at start-up or at import: a wheel cannot run code when it is installed, and evaluate reads no plugins,
so the cache is filled when you ask (docs/architecture.md, "The evaluate metric modules").
"""

from __future__ import annotations

import hashlib
import os
import sys

from ..utils.atomic import atomic_folder, cache_lock, json_text


__all__ = [
    "METRICS_FOLDER", "METRIC_MODULES", "SHARED_FILES", "default_modules_cache", "install_metrics",
    "metric_module_path", "metric_source_folder", "module_sources",
]

METRIC_MODULES: tuple[str, ...] = ("honesty_alignment", "honesty_auroc", "honesty_ece")
"""Names of the evaluate metric modules shipped in `elical_hf/metrics/<name>/<name>.py`."""

SHARED_FILES: tuple[str, ...] = ("functional.py", "evaluate_mixin.py")
"""Files of `elical_hf/metrics/` that every module carries next to its `<name>.py` (each script imports them
directly)."""

METRICS_FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "metrics")
"""`elical_hf/metrics/`: where the scripts and the shared files are read from, each time a module is assembled."""

INSTALL_TIMEOUT = 60.0
"""Seconds an install waits for another process's install into the same cache (each takes milliseconds)."""

_NAMESPACE = "evaluate-metric"  # evaluate's namespace of canonical metrics, where `evaluate.load(name)` looks
_DYNAMIC_MODULES = "evaluate_modules"  # evaluate.config.MODULE_NAME_FOR_DYNAMIC_MODULES


def metric_source_folder(name: str) -> str:
    """The checked-in folder of the metric module `name`: its script `<name>.py` and its card `README.md` only.

    Not loadable by itself (the shared files are missing); see [`metric_module_path`] for a runnable copy.

    Args:
        name (`str`): One of [`METRIC_MODULES`].

    Returns:
        `str`: Absolute path of `elical_hf/metrics/<name>/`.
    """
    if name not in METRIC_MODULES:
        raise ValueError(f"Unknown elical-hf metric module {name!r}; expected one of {METRIC_MODULES}")
    return os.path.join(METRICS_FOLDER, name)


def module_sources(name: str) -> dict[str, str]:
    """What a runnable module `name` is made of: file name in the assembled folder -> source path in the package.

    Args:
        name (`str`): One of [`METRIC_MODULES`].

    Returns:
        `dict[str, str]`: `<name>.py` (from the metric's folder) first, then the [`SHARED_FILES`].
    """
    sources = {f"{name}.py": os.path.join(metric_source_folder(name), f"{name}.py")}
    sources.update((shared, os.path.join(METRICS_FOLDER, shared)) for shared in SHARED_FILES)
    return sources


def default_modules_cache() -> str:
    """evaluate's `config.HF_MODULES_CACHE`: taken from evaluate when it is imported, else computed from the
    environment as evaluate computes it (`$HF_MODULES_CACHE`, else `$HF_HOME/modules`, else
    `$XDG_CACHE_HOME/huggingface/modules`), without importing evaluate."""
    config = getattr(sys.modules.get("evaluate"), "config", None)
    if config is not None and getattr(config, "HF_MODULES_CACHE", None):
        return str(config.HF_MODULES_CACHE)
    if os.environ.get("HF_MODULES_CACHE"):
        return os.environ["HF_MODULES_CACHE"]
    hf_home = os.environ.get("HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"))
    return os.path.join(os.path.expanduser(hf_home), "modules")


def _ensure_init(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    init = os.path.join(folder, "__init__.py")
    if not os.path.exists(init):
        open(init, "a").close()


def _make_newest(name_dir: str, ours: str, script: str) -> None:
    """Give `ours/<script>` a strictly larger mtime than any other cached version (evaluate picks the newest)."""
    others = []
    for entry in os.listdir(name_dir):
        candidate = os.path.join(name_dir, entry, script)
        if entry != ours and len(entry) == 64 and os.path.isfile(candidate):
            others.append(os.stat(candidate).st_mtime_ns)
    target = os.path.join(name_dir, ours, script)
    mtime = os.stat(target).st_mtime_ns
    if others and mtime <= max(others):
        newer = max(others) + 1_000_000_000
        os.utime(target, ns=(newer, newer))


def _is_complete(folder: str, files: dict[str, bytes]) -> bool:
    return all(os.path.isfile(os.path.join(folder, name)) and os.path.getsize(os.path.join(folder, name)) == len(data)
               for name, data in files.items())


def install_metrics(modules_cache: str | os.PathLike | None = None,
                    names: tuple[str, ...] = METRIC_MODULES) -> list[str]:
    r"""
    Put the metric modules into evaluate's module cache, so that `evaluate.load("honesty_auroc")` (and
    `"honesty_ece"`, `"honesty_alignment"`) finds them by name, offline, in every later process. The command line's
    `elical-hf install-metrics` calls it.

    Each module is assembled from the package's files as they are now ([`module_sources`]), into a folder named by
    the SHA-256 of them (64 hex digits, as evaluate's own cache entries), whose script is then made the newest copy
    of that metric in the cache (evaluate loads the newest): run it again after upgrading elical-hf or editing its
    metrics, and that version is the one loaded. Idempotent and safe to run in several processes at once: they take
    turns ([`~elical_hf.utils.atomic.cache_lock`]), each folder appears complete or not at all
    ([`~elical_hf.utils.atomic.atomic_folder`]), and a complete existing copy is kept.

    Args:
        modules_cache (`str` or `os.PathLike`, *optional*, defaults to `None`): evaluate's `HF_MODULES_CACHE`;
            `None` is the one evaluate uses ([`default_modules_cache`]).
        names (`tuple[str, ...]`, *optional*, defaults to `METRIC_MODULES`): The modules to install.

    Returns:
        `list[str]`: Paths of the cached `<name>.py` files, one per name; `evaluate.load(path)` works on each too.

    Example:

    ```python
    import evaluate
    from elical_hf import install_metrics

    install_metrics()  # once; `elical-hf install-metrics` does the same
    evaluate.load("honesty_auroc").compute(predictions=[0.9, 0.2, 0.7], references=[1, 0, 0])  # {'auroc': 1.0, ...}
    ```
    """
    for name in names:
        metric_source_folder(name)  # refuses an unknown name before anything is written
    cache = os.path.abspath(os.path.expanduser(os.fspath(modules_cache or default_modules_cache())))
    metrics = os.path.join(cache, _DYNAMIC_MODULES, "metrics")
    for folder in (cache, os.path.dirname(metrics), metrics):  # importable packages, as evaluate makes them
        _ensure_init(folder)
    installed = []
    with cache_lock(metrics, timeout=INSTALL_TIMEOUT):
        for name in names:
            sources = module_sources(name)
            contents = {}
            for target, source in sources.items():
                with open(source, "rb") as handle:
                    contents[target] = handle.read()
            digest = hashlib.sha256(b"\0".join(t.encode() + b"\0" + data for t, data in contents.items())).hexdigest()
            name_dir = os.path.join(metrics, f"{_NAMESPACE}--{name}")
            _ensure_init(name_dir)
            target_dir = os.path.join(name_dir, digest)
            script = os.path.join(target_dir, f"{name}.py")
            # The record evaluate writes next to a module it copied.
            record = {"original file path": sources[f"{name}.py"], "local file path": script}
            required = {**contents, "__init__.py": b""}
            if not (_is_complete(target_dir, required) and os.path.isfile(script[: -len(".py")] + ".json")):
                with atomic_folder(target_dir) as staging:  # an incomplete folder (a killed old install) is replaced
                    for file_name, data in {**required, f"{name}.json": json_text(record).encode("utf-8")}.items():
                        (staging / file_name).write_bytes(data)
            _make_newest(name_dir, digest, f"{name}.py")
            installed.append(script)
    return installed


def metric_module_path(name: str, modules_cache: str | os.PathLike | None = None) -> str:
    """Path of a runnable copy of the metric module `name`, for `evaluate.load(metric_module_path(name))`: the copy
    [`install_metrics`] keeps in evaluate's module cache (written if missing).

    Args:
        name (`str`): One of [`METRIC_MODULES`].
        modules_cache (`str` or `os.PathLike`, *optional*, defaults to `None`): As for [`install_metrics`].

    Returns:
        `str`: Absolute path of the assembled `<name>.py`.
    """
    return install_metrics(modules_cache, names=(name,))[0]
