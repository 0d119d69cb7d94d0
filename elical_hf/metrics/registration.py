"""Make `evaluate.load("honesty_auroc")` work offline, from any directory, right after `pip install elical-hf`.

`evaluate.load(name)` first asks the Hub for `evaluate-metric/<name>` and, when that fails (offline, or no such
canonical metric), falls back to its module cache, taking the most recently modified
`$HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--<name>/<64-hex hash>/<name>.py`. This module fills that
cache, in the layout evaluate itself uses for a downloaded module, with modules it assembles there: the metric's own
script `elical_hf/metrics/<name>/<name>.py` plus the [`SHARED_FILES`] of `elical_hf/metrics/` (`functional.py` and
`evaluate_mixin.py`, the single sources; no module folder holds a copy). It reads them from the installed package each
time, so an editable install's edits are in the next process that imports evaluate. (evaluate then logs "Using the
latest cached version of the module ..." on each load by name; that message is expected.)

Wheels cannot run code at install time, so the wheel ships a one-line `elical_hf_evaluate.pth` in `site-packages`
(see `setup.py` and [`pth_content`]). At interpreter start-up it only puts a one-shot finder at the front of
`sys.meta_path` (no file is read; docs/architecture.md has the measured cost). On `import evaluate` that finder loads
this file *by path* (importing `elical_hf` would pull in torch), and right after `evaluate` has been imported it calls
[`install_evaluate_modules`] with evaluate's own `config.HF_MODULES_CACHE`, so a cache chosen with `HF_HOME` or
`HF_MODULES_CACHE` (even one set in `os.environ` by the script before importing evaluate) is the one filled. Our copy
is also made the newest one, so the installed version wins over copies left by other installs or earlier edits. Set
`ELICAL_HF_NO_EVALUATE_HOOK=1` to switch the hook off; call [`install_evaluate_modules`] yourself where `.pth` files
are not processed (`python -S`).

This file must only import the standard library: it runs before anything else is importable.
"""

from __future__ import annotations

import contextlib
import os
import sys


__all__ = [
    "METRIC_MODULES", "PTH_FILENAME", "SHARED_FILES", "find_evaluate_spec", "install_evaluate_modules",
    "install_import_hook", "install_lock", "metric_module_path", "metric_source_folder", "module_sources",
    "pth_content",
]

METRIC_MODULES: tuple[str, ...] = ("honesty_alignment", "honesty_auroc", "honesty_ece")
"""Names of the evaluate metric modules shipped in `elical_hf/metrics/<name>/<name>.py`."""

PTH_FILENAME = "elical_hf_evaluate.pth"
"""Start-up hook written into `site-packages`; sorts after setuptools' `__editable__.*.pth` on purpose."""

SHARED_FILES: tuple[str, ...] = ("functional.py", "evaluate_mixin.py")
"""Files of `elical_hf/metrics/` that every assembled module carries next to its `<name>.py` (each script imports them
directly: evaluate copies only a script's own relative imports)."""

DISABLE_ENV = "ELICAL_HF_NO_EVALUATE_HOOK"
_NAMESPACE = "evaluate-metric"
_DYNAMIC_MODULES = "evaluate_modules"  # evaluate.config.MODULE_NAME_FOR_DYNAMIC_MODULES
_HERE = os.path.dirname(os.path.abspath(__file__))


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
    return os.path.join(_HERE, name)


def module_sources(name: str) -> dict[str, str]:
    """What a runnable module `name` is made of: file name in the assembled folder -> source path in the package.

    Args:
        name (`str`): One of [`METRIC_MODULES`].

    Returns:
        `dict[str, str]`: `<name>.py` (from the metric's folder) first, then the [`SHARED_FILES`].
    """
    sources = {f"{name}.py": os.path.join(metric_source_folder(name), f"{name}.py")}
    sources.update((shared, os.path.join(_HERE, shared)) for shared in SHARED_FILES)
    return sources


def metric_module_path(name: str, modules_cache: str | None = None) -> str:
    """Path of a runnable copy of the metric module `name`, for `evaluate.load(metric_module_path(name))`.

    The copy is the one [`install_evaluate_modules`] assembles in evaluate's module cache (written if missing), so
    this works without the start-up hook too.

    Args:
        name (`str`): One of [`METRIC_MODULES`].
        modules_cache (`str`, *optional*, defaults to `None`): As for [`install_evaluate_modules`].

    Returns:
        `str`: Absolute path of the assembled `<name>.py`.
    """
    metric_source_folder(name)  # refuses an unknown name before anything is written
    return install_evaluate_modules(modules_cache, names=(name,))[0]


def _default_modules_cache() -> str:
    """evaluate's `config.HF_MODULES_CACHE`: taken from evaluate when imported, else recomputed from the environment."""
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


INSTALL_LOCK_NAME = ".elical-install.lock"
"""The lock file [`install_lock`] takes in `<cache>/evaluate_modules/metrics/` (evaluate ignores it)."""


@contextlib.contextmanager
def install_lock(folder: str, timeout: float = 60.0):
    """Hold the install lock of the metrics folder of evaluate's module cache for the block: processes installing at
    once take turns (a POSIX `flock` on [`INSTALL_LOCK_NAME`], waited for up to `timeout` seconds).

    Where `fcntl` is missing (Windows), or the lock does not come free in time (a hung holder), the block runs without
    it: each module folder still appears complete or not at all (see [`install_evaluate_modules`]), so readers never
    see a part of one; an import must not wait forever on another process.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    import time

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, INSTALL_LOCK_NAME), "a") as handle:
        deadline, locked = time.monotonic() + timeout, False
        while not locked:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        try:
            yield
        finally:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _is_complete(folder: str, files: dict[str, bytes]) -> bool:
    return all(os.path.isfile(os.path.join(folder, name)) and os.path.getsize(os.path.join(folder, name)) == len(data)
               for name, data in files.items())


def _write_folder(folder: str, files: dict[str, bytes]) -> None:
    """Write `files` into a hidden staging folder beside `folder`, then move it into place: `folder` appears with all
    of them or not at all. An incomplete `folder` (an install killed before this version) is replaced."""
    import secrets
    import shutil

    parent = os.path.dirname(folder)
    staging = os.path.join(parent, f".tmp-elical-{secrets.token_hex(8)}")
    os.mkdir(staging)  # the umask's permissions, as evaluate's own folders
    try:
        for name, data in files.items():
            with open(os.path.join(staging, name), "wb") as handle:
                handle.write(data)
        if os.path.isdir(folder):  # incomplete: moved out of the way first (a rename is atomic, a removal is not)
            old = os.path.join(parent, f".old-elical-{secrets.token_hex(8)}")
            os.replace(folder, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(staging, folder)
        except OSError:
            if not _is_complete(folder, files):  # another installer's complete copy won the race: keep it
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def install_evaluate_modules(modules_cache: str | None = None, names: tuple[str, ...] = METRIC_MODULES) -> list[str]:
    """Assemble the metric modules in evaluate's module cache ([`module_sources`]: the metric's script and the
    [`SHARED_FILES`], read from the package now), so that `evaluate.load(name)` finds them offline.

    Idempotent and safe to run concurrently: installers take turns ([`install_lock`]), each module folder is built
    in a hidden staging folder and moved into place (a reader, e.g. `evaluate.load` in another process, sees it
    complete or not at all), and existing complete copies are kept. The folder name is the SHA-256 of the assembled
    files (64 hex digits, as evaluate's own cache entries), so an edited source gets a folder of its own, made the
    newest one.

    Args:
        modules_cache (`str`, *optional*, defaults to `None`): evaluate's `HF_MODULES_CACHE`; `None` uses the value of
            the imported `evaluate.config`, else `$HF_MODULES_CACHE`, else `$HF_HOME/modules`.
        names (`tuple[str, ...]`, *optional*, defaults to `METRIC_MODULES`): Modules to install.

    Returns:
        `list[str]`: Paths of the cached `<name>.py` files, one per name; `evaluate.load(path)` works on each.
    """
    import hashlib
    import json

    cache = os.path.abspath(os.path.expanduser(str(modules_cache or _default_modules_cache())))
    _ensure_init(cache)
    dynamic = os.path.join(cache, _DYNAMIC_MODULES)
    _ensure_init(dynamic)
    metrics = os.path.join(dynamic, "metrics")
    _ensure_init(metrics)
    installed = []
    with install_lock(metrics):
        for name in names:
            sources = module_sources(name)
            contents = {}
            for target, src in sources.items():
                with open(src, "rb") as handle:
                    contents[target] = handle.read()
            digest = hashlib.sha256(b"\0".join(t.encode() + b"\0" + data for t, data in contents.items())).hexdigest()
            name_dir = os.path.join(metrics, f"{_NAMESPACE}--{name}")
            target_dir = os.path.join(name_dir, digest)
            _ensure_init(name_dir)
            script = os.path.join(target_dir, f"{name}.py")
            # The same record evaluate writes next to a downloaded module.
            record = {"original file path": sources[f"{name}.py"], "local file path": script}
            required = {**contents, "__init__.py": b""}
            if not (_is_complete(target_dir, required) and os.path.isfile(os.path.join(target_dir, f"{name}.json"))):
                _write_folder(target_dir, {**required, f"{name}.json": json.dumps(record).encode("utf-8")})
            _make_newest(name_dir, digest, f"{name}.py")
            installed.append(script)
    return installed


class _EvaluateImportHook:
    """One-shot `sys.meta_path` finder: lets `evaluate` import normally, then runs [`install_evaluate_modules`]."""

    elical_hf_evaluate_hook = True  # recognised by `install_import_hook`, whichever copy of this file defined it

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "evaluate":
            return None
        try:
            return find_evaluate_spec(fullname, path, target)
        except Exception:  # never break `import evaluate`: the import system then finds it as if we were not here
            _remove_hooks()
            return None


def find_evaluate_spec(fullname: str = "evaluate", path=None, target=None):
    """What a hook finder answers for `import evaluate`: evaluate's own spec, from the other finders, whose loader runs
    [`install_evaluate_modules`] right after evaluate's code. Removes every hook first: they act once.

    Called by [`install_import_hook`]'s finder and by the finder that the `.pth` line installs at start-up (which
    loads this file only then, at `import evaluate`).
    """
    _remove_hooks()
    spec = None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(fullname, path, target) if find is not None else None
        if spec is not None:
            break
    loader = getattr(spec, "loader", None)
    if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
        return spec
    exec_module = loader.exec_module

    def exec_then_install(module):
        try:
            exec_module(module)
        finally:
            try:
                del loader.exec_module
            except AttributeError:
                pass
        _install_quietly()

    try:
        loader.exec_module = exec_then_install  # instance attribute: only this spec's loader is affected
    except (AttributeError, TypeError):
        pass
    return spec


def _remove_hooks() -> None:
    # Rebind rather than edit in place: the import system may be iterating over the current list right now.
    sys.meta_path = [f for f in sys.meta_path if not getattr(f, "elical_hf_evaluate_hook", False)]


def _install_quietly() -> None:
    try:
        install_evaluate_modules()
    except Exception as err:  # never break `import evaluate`
        import logging

        logging.getLogger("elical_hf.metrics").warning(
            "elical-hf could not copy its evaluate metric modules into the evaluate module cache (%s); "
            "evaluate.load('honesty_auroc') may fail offline. Point HF_MODULES_CACHE at a writable folder, or load "
            "by path: evaluate.load(elical_hf.metrics.registration.metric_module_path('honesty_auroc', "
            "modules_cache=<a writable folder>)).", err
        )


def install_import_hook() -> None:
    """Arrange for [`install_evaluate_modules`] to run right after `evaluate` is imported (at once if it already is).

    Idempotent; does nothing when the environment variable `ELICAL_HF_NO_EVALUATE_HOOK` is set to a non-empty value.
    """
    if os.environ.get(DISABLE_ENV):
        return
    if "evaluate" in sys.modules:
        _install_quietly()
        return
    if not any(getattr(f, "elical_hf_evaluate_hook", False) for f in sys.meta_path):
        sys.meta_path.insert(0, _EvaluateImportHook())  # ahead of the path finder that would find evaluate


def pth_content() -> str:
    """The single line of `elical_hf_evaluate.pth`: a finder that does nothing until `import evaluate`.

    At start-up the line only puts a small finder at the front of `sys.meta_path` (it reads no file: this module is
    not even located). On `import evaluate`, and only then, the finder locates the installed `elical_hf` without
    importing it (that would pull in torch), loads this file by path and returns [`find_evaluate_spec`]. Every
    exception is swallowed, `BaseException` included (a broken or replaced copy of this file may raise anything): the
    line must never stop, or print into, interpreter start-up, and `import evaluate` then proceeds as if the hook
    were not there.
    """
    code = (
        "try:\n"
        " import os\n"
        f" if not os.environ.get({DISABLE_ENV!r}) and not any("
        "getattr(f, 'elical_hf_evaluate_hook', False) for f in sys.meta_path):\n"
        "  class ElicalHfEvaluateHook:\n"
        "   elical_hf_evaluate_hook = True\n"
        "   def find_spec(self, name, path=None, target=None):\n"
        "    if name != 'evaluate':\n"
        "     return None\n"
        "    import os, sys\n"  # the names of the .pth's namespace may be gone by now
        "    try:\n"
        "     from importlib.machinery import SourceFileLoader\n"
        "     s = None\n"
        "     for f in sys.meta_path:\n"
        "      s = f.find_spec('elical_hf', None) if f is not self and hasattr(f, 'find_spec') else None\n"
        "      if s is not None:\n"
        "       break\n"
        "     p = os.path.join(s.submodule_search_locations[0], 'metrics', 'registration.py')\n"
        "     m = type(sys)('elical_hf_evaluate_hook')\n"
        "     m.__file__ = p\n"
        "     SourceFileLoader(m.__name__, p).exec_module(m)\n"
        "     return m.find_evaluate_spec(name, path, target)\n"
        "    except BaseException:\n"
        "     sys.meta_path = [f for f in sys.meta_path if f is not self]\n"
        "     return None\n"
        "  sys.meta_path.insert(0, ElicalHfEvaluateHook())\n"
        "except BaseException:\n"
        " pass\n"
    )
    return f"import sys; exec({code!r})\n"
