"""Atomic writes: a reader (or a rerun after a crash) sees the old file or folder, or the complete new one, never a
part.

Everything is written under a temporary name next to its target and moved into place with `os.replace`, which is
atomic on one file system. New files get the permissions of a plain `open` (0666 less the umask), not the 0600 of a
temporary file. [`atomic_write_text`] writes a text file, [`atomic_write_json`] a strict JSON file ([`json_text`]:
the one JSON writer), [`atomic_file`] lends a temporary path to any writer (parquet, safetensors), [`atomic_files`]
and [`atomic_write_texts`] update several files at once (all written before the first is replaced, the last one
committing the update), and [`atomic_folder`] builds a whole folder before it appears. [`stale_temporaries`] finds
what a killed writer left beside its file. [`one_writer`] and [`cache_lock`] keep concurrent processes from writing
one output at once.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


__all__ = [
    "atomic_file", "atomic_files", "atomic_folder", "atomic_write_json", "atomic_write_text", "atomic_write_texts",
    "cache_lock", "current_umask", "json_text", "one_writer", "stale_temporaries", "umask_permissions",
]

_LOCK_POLL = 0.05
"""Seconds between two tries of a held lock."""
_TEMPORARY_PREFIX = ".tmp-"
"""How the temporary files of [`atomic_file`] start (then tempfile's 8 random characters, then the target's name)."""


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[str]:
    """Lend a temporary path next to `path`; when the block ends without error, the file written there is synced to
    disk and moved to `path`. On an error `path` is untouched and the temporary file is removed.

    Example:

    ```python
    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "table.txt")
    >>> with atomic_file(target) as tmp:
    ...     with open(tmp, "w") as handle:
    ...         _ = handle.write("done")
    >>> open(target).read()
    'done'

    ```
    """
    with atomic_files([path]) as (tmp,):
        yield tmp


@contextmanager
def atomic_files(paths: Sequence[str | os.PathLike]) -> Iterator[list[str]]:
    """Lend a temporary path next to each of `paths`, for one update of several files: when the block ends without
    error, every file written there is synced to disk, then each is moved to its path, in the order given. On an
    error in the block no path is touched and the temporary files are removed.

    Each file is replaced atomically, the set in order: put last the file whose new version makes the update (a
    model's `confidence_config.json`), so that a failure or a kill before it leaves the update undone; what was moved
    before it must say which version of that file it belongs to.
    """
    temporaries: list[str] = []
    try:
        for path in paths:
            temporaries.append(_temporary(path))
        yield list(temporaries)
        for tmp in temporaries:
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
        for tmp, path in zip(temporaries, paths):
            os.replace(tmp, path)
    finally:
        for tmp in temporaries:
            if os.path.exists(tmp):
                os.remove(tmp)


def atomic_write_texts(files: Mapping[str | os.PathLike, str]) -> None:
    """Write several UTF-8 text files as one update ([`atomic_files`]: all written first, then moved into place in
    the mapping's order, the last one committing it)."""
    paths = list(files)
    with atomic_files(paths) as temporaries:
        for tmp, path in zip(temporaries, paths):
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(files[path])


def _temporary(path: str | os.PathLike) -> str:
    """A new empty file next to `path`, named `.tmp-<8 random characters><name of path>` ([`stale_temporaries`]
    finds those a killed writer left), with the permissions a plain `open` gives."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=_TEMPORARY_PREFIX, suffix=os.path.basename(path))
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes it 0600; a new file gets what `open` would give it
    finally:
        os.close(fd)
    return tmp


def stale_temporaries(path: str | os.PathLike) -> list[str]:
    """The temporary files of `path` that a killed writer left beside it ([`atomic_file`] names them
    `.tmp-<8 characters of tempfile's random names><name of path>`): only `path`'s own, by name, never those of
    another file of the folder. Remove them only while no other process may be writing `path` ([`one_writer`])."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    own = re.compile(re.escape(_TEMPORARY_PREFIX) + r"[a-z0-9_]{8}" + re.escape(name))
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(directory, entry) for entry in entries
                  if own.fullmatch(entry) and os.path.isfile(os.path.join(directory, entry)))


def current_umask() -> int:
    """The process's umask (read without changing it where Linux shows it in `/proc/self/status`)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe for that instant)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically (see [`atomic_file`])."""
    with atomic_file(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)


def json_text(value: Any, *, indent: int | None = 2, sort_keys: bool = False,
              default: Callable[[Any], Any] | None = None) -> str:
    """`value` as strict JSON (RFC 8259), the one JSON writer of elical-hf (files and the JSON the commands print):
    NaN and infinities, which `json.dumps` writes as the bare words `NaN` / `Infinity` that strict parsers (JavaScript's
    `JSON.parse`, `jq`, Go) refuse, become `null`; NumPy (and torch) numbers and arrays become plain numbers and lists.
    `default` turns any other object into something JSON can hold (as in `json.dumps`).

    Example:

    ```python
    >>> json_text({"auroc": float("nan"), "n": 3}, indent=None)
    '{"auroc": null, "n": 3}'

    ```
    """
    return json.dumps(_strict_json(value), indent=indent, sort_keys=sort_keys, allow_nan=False, default=default)


def _strict_json(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(item) for item in value]
    if not isinstance(value, (str, bytes, int)) and callable(getattr(value, "tolist", None)):  # NumPy, torch
        return _strict_json(value.tolist())
    return value


def atomic_write_json(path: str | os.PathLike, value: Any, *, sort_keys: bool = False) -> None:
    """Write `value` as strict JSON ([`json_text`], indented, ending in a newline) to `path` atomically."""
    atomic_write_text(path, json_text(value, sort_keys=sort_keys) + "\n")


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Lend an empty staging folder named like `path` (inside a hidden temporary folder next to it); when the block
    ends without error, whatever `path` held is removed and the staging folder takes its place. On an error `path` is
    untouched and the staging folder is removed.

    The staging folder has the target's name, so what names itself after its folder (a model card) reads the final
    name.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    parent = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    staging = parent / target.name
    staging.mkdir()
    try:
        yield staging
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        os.replace(staging, target)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def umask_permissions(folder: str | os.PathLike) -> None:
    """Give the files of `folder` (not below it) that a writer created 0600 (safetensors does, whatever the umask)
    the permissions a plain `open` gives: 0666 less the umask. Other modes are left alone."""
    mode = 0o666 & ~current_umask()
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False) and entry.stat().st_mode & 0o777 == 0o600 and mode != 0o600:
            os.chmod(entry.path, mode)


@contextmanager
def one_writer(folder: str | os.PathLike) -> Iterator[None]:
    """Hold the one-writer lock of an output `folder` for the block; a second process asking for it gets one
    `ValueError` at once, so two runs never write into (or clean up) the same folder.

    The lock is a file beside the folder (`.<name>.lock`), not in it, so it never makes an output folder look
    non-empty; it is removed when the block ends ([`_folder_lock`]). Under `torch.distributed` only rank 0 takes it
    (the other ranks write nothing).
    """
    if os.environ.get("RANK", "0") != "0":
        yield
        return
    with _folder_lock(folder, 0, lambda path: f"Another process is writing to {folder} (it holds {path}): wait for "
                      "it to finish, or choose another output folder."):
        yield


@contextmanager
def cache_lock(folder: str | os.PathLike, timeout: float = 1800.0) -> Iterator[None]:
    """Hold the lock of a cache `folder` that is written once and then read by every process (a converted model):
    a second process waits for the first (up to `timeout` seconds, then one `ValueError`), and should then find the
    folder complete and reuse it. Every process takes it, whatever its rank; the lock file sits beside the folder
    (`.<name>.lock`) while it is held, as for [`one_writer`]."""
    with _folder_lock(folder, timeout, lambda path: f"Another process has been writing {folder} for more than "
                      f"{timeout:.0f} s (it holds {path}): wait for it to finish, or stop it and retry."):
        yield


@contextmanager
def _folder_lock(folder: str | os.PathLike, timeout: float, message: Callable[[Path], str]) -> Iterator[None]:
    """Hold the lock `.<name>.lock` beside `folder`, waiting up to `timeout` seconds (0: not at all) for another
    holder; a `ValueError` with `message(lock path)` when it does not come free.

    The lock is an exclusive `flock` on the file, which the holder deletes before it lets go, so no lock file is left
    behind. A waiter that wins the lock of a file its holder has just deleted sees that the path no longer names that
    file and tries again on the path's new file: two processes never hold the lock of one path at once. (Without
    `fcntl`, on Windows, `filelock`'s lock, which removes its file on release there.)"""
    target = Path(folder).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.parent / f".{target.name}.lock"
    try:
        import fcntl
    except ImportError:  # Windows
        from filelock import FileLock, Timeout

        lock = FileLock(str(path), timeout=timeout)
        try:
            lock.acquire()
        except Timeout:
            raise ValueError(message(path)) from None
        try:
            yield
        finally:
            lock.release()
        return
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EAGAIN, errno.EACCES):  # some file systems say EACCES when it is held
                raise
            if time.monotonic() >= deadline:
                raise ValueError(message(path)) from None
            time.sleep(_LOCK_POLL)
            continue
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(current, os.fstat(fd)):
            break
        os.close(fd)  # the file of a holder that has let go since we opened it: try the path's new file
    try:
        yield
    finally:
        try:
            os.unlink(path)  # while still holding it (see above)
        finally:
            os.close(fd)  # lets go of the lock
