"""Atomic writes: a reader (or a rerun after a crash) sees the old file or folder, or the complete new one, never a part.

Everything is written under a temporary name next to its target and moved into place with `os.replace`, which is
atomic on one file system. New files get the permissions of a plain `open` (0666 less the umask), not the 0600 of a
temporary file. [`atomic_write_text`] writes a text file, [`atomic_file`] lends a temporary path to any
writer (parquet, safetensors), and [`atomic_folder`] builds a whole folder before it appears.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


__all__ = [
    "atomic_file", "atomic_folder", "atomic_write_text", "cache_lock", "current_umask", "one_writer",
    "umask_permissions",
]


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
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes it 0600; a new file gets what `open` would give it
    finally:
        os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


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

    The lock is a file beside the folder (`.<name>.lock`, `filelock`), not in it, so it never makes an output folder
    look non-empty. Under `torch.distributed` only rank 0 takes it (the other ranks write nothing).
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
    (`.<name>.lock`), as for [`one_writer`]."""
    with _folder_lock(folder, timeout, lambda path: f"Another process has been writing {folder} for more than "
                      f"{timeout:.0f} s (it holds {path}); if none is running, delete {path} and retry."):
        yield


@contextmanager
def _folder_lock(folder: str | os.PathLike, timeout: float, message: Callable[[Path], str]) -> Iterator[None]:
    """Hold `filelock`'s lock `.<name>.lock` beside `folder`, waiting up to `timeout` seconds (0: not at all) for
    another holder; a `ValueError` with `message(lock path)` when it does not come free."""
    from filelock import FileLock, Timeout

    target = Path(folder).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.parent / f".{target.name}.lock"
    lock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise ValueError(message(path)) from None
    try:
        yield
    finally:
        lock.release()
