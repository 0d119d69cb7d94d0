"""Files users hand us and names that become paths: errors that say which file and line, and nothing written or
read outside the folder it belongs to.

[`text_lines`] reads a text file line by line and names the file and the line of a byte that is not UTF-8;
[`check_text_file`] checks a whole file the same way (and, for JSON lines, each line's JSON) before a loader that would
report neither reads it, [`check_json_file`] a JSON document; [`looks_local`] tells a mistyped path from a Hub id.
[`path_component`] refuses a name taken from data (a record's `model` or `dataset`) that would leave its folder once
it is part of a path, and
[`links_leaving`] lists the symbolic links in a folder that point outside it. [`refuse_output_over_inputs`] and
[`check_output_extension`] are what every command that writes checks about its output before it does any work.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any


__all__ = [
    "DATA_EXTENSIONS", "check_json_file", "check_output_extension", "check_text_file", "links_leaving", "looks_local",
    "path_component", "refuse_output_over_inputs", "text_lines",
]

_UNSAFE_CHARACTERS = re.compile(r"[/\\:*?\"<>|\x00-\x1f\x7f]")
_BLOCK = 1 << 22

DATA_EXTENSIONS = (".jsonl", ".json", ".parquet", ".csv", ".arrow", ".gz")
"""Extensions of the data files we read: a name ending in one is a file name, not a Hub id."""


def text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield `(line number, line)` of a UTF-8 text file; a `ValueError` naming the file, the line and the byte for
    the first line that is not UTF-8."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{os.fspath(path)} line {number} is not UTF-8 text (byte {raw[error.start]:#04x} at column "
                    f"{error.start + 1}); save the file as UTF-8."
                ) from None


def check_text_file(path: str | os.PathLike, json_lines: bool = False) -> None:
    """Raise one `ValueError` naming the file and the line when `path` is not UTF-8 text or, with `json_lines`, when
    a non-empty line is not JSON; return when neither is the case.

    Without `json_lines` the file is read in large blocks (fast) and searched line by line only after an error."""
    if not json_lines:
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            with open(path, "rb") as handle:
                while block := handle.read(_BLOCK):
                    decoder.decode(block)
            decoder.decode(b"", final=True)
            return
        except UnicodeDecodeError:
            pass  # find the line below
    for number, line in text_lines(path):
        if json_lines and line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{os.fspath(path)} line {number} is not valid JSON: {error.msg} (column {error.colno})."
                ) from None


def check_json_file(path: str | os.PathLike) -> None:
    """Raise one `ValueError` naming the file, the line and the column when `path` is not a UTF-8 JSON document (for
    a reader that would name neither, such as a tokenizer's); return when it is one."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        check_text_file(path)  # names the line of the first byte that is not UTF-8
        raise
    except json.JSONDecodeError as error:
        raise ValueError(f"{os.fspath(path)} is not valid JSON: {error.msg} (line {error.lineno}, column "
                         f"{error.colno}).") from None


def looks_local(source: str) -> bool:
    """Whether `source` reads as a local path rather than a Hub id: it starts with `.`, `~` or `/`, ends in a data
    file's extension ([`DATA_EXTENSIONS`]), has more than one folder part (a Hub id is `<namespace>/<name>` at
    most), or its first part is a local file or folder (`data/nope` when `data/` is here). A missing path that looks
    local is reported as missing, not looked up on the Hub."""
    name = os.fspath(source)
    first = name.replace(os.sep, "/").split("/", 1)[0]
    return (
        name.startswith((".", "~", os.sep))
        or os.path.splitext(name)[1].lower() in DATA_EXTENSIONS
        or name.count("/") > 1
        or (os.sep != "/" and os.sep in name)
        or (name != first and os.path.exists(first))
    )


def path_component(name: str, what: str) -> str:
    """Return `name` when it is safe as one component of a path; otherwise a `ValueError` naming `what` it is.

    Refused: an empty name, one starting with a dot (`.`, `..`, hidden names) or with spaces around it, and one with a
    path separator, a drive colon, a character that is not allowed in Windows file names, or a control character.

    Example:

    ```python
    >>> path_component("Qwen--Qwen2.5-7B-Instruct", "model")
    'Qwen--Qwen2.5-7B-Instruct'
    >>> path_component("../../etc", "dataset")
    Traceback (most recent call last):
    ...
    ValueError: The dataset name '../../etc' cannot be a folder or file name: it must not start with a dot, have spaces
    around it, or hold / \\ : * ? " < > | or control characters.

    ```
    """
    if not isinstance(name, str) or not name or name != name.strip() or name.startswith(".") or (
        _UNSAFE_CHARACTERS.search(name)
    ):
        raise ValueError(
            f"The {what} name {name!r} cannot be a folder or file name: it must not start with a dot, have spaces "
            'around it, or hold / \\ : * ? " < > | or control characters.'
        )
    return name


def links_leaving(folder: str | os.PathLike, recursive: bool = True) -> list[str]:
    """The symbolic links in `folder` (and, when `recursive`, below it; links to folders are not followed) whose
    targets lie outside it, as sorted paths relative to `folder`."""
    root = Path(folder).resolve()
    leaving = []
    for directory, subdirs, names in os.walk(folder):
        for name in subdirs + names:
            path = Path(directory, name)
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                leaving.append(os.path.relpath(path, folder))
        if not recursive:
            break
    return sorted(leaving)


def refuse_output_over_inputs(output: str | os.PathLike, inputs: Mapping[str, Any], option: str = "--output") -> None:
    """Refuse, before any work, an `output` that would destroy or pollute an input: one `ValueError` when the output is
    an input itself, lies inside an input folder, or holds an input (a folder output). Paths are compared once
    symbolic links are resolved (and as the same file, for hard links).

    Args:
        output (`str`): The file or folder a command writes.
        inputs (`dict`): Option -> what it was given (a path, a list of paths, or anything else: in-memory records, a
            Hub id, `None`, which are skipped), e.g. `{"--records": "runs/judged.parquet"}`. Only paths that exist
            are compared.
        option (`str`, *optional*, defaults to `"--output"`): The output's option, for the message.
    """
    target = os.path.realpath(output)
    for name, given in inputs.items():
        for source in given if isinstance(given, (list, tuple)) else [given]:
            if not isinstance(source, (str, os.PathLike)) or not os.path.exists(source):
                continue
            path = os.path.realpath(source)
            if path == target or (os.path.exists(output) and os.path.samefile(source, output)):
                raise ValueError(f"{option} {os.fspath(output)} is the {name} input itself: writing there would "
                                 "destroy it. Write the output somewhere else.")
            if os.path.commonpath([path, target]) == path:
                raise ValueError(f"{option} {os.fspath(output)} is inside the {name} folder {os.fspath(source)}: "
                                 "reading that folder again would take the output for one of its files (records would "
                                 "count every record twice). Write the output outside it.")
            if os.path.commonpath([path, target]) == target:
                raise ValueError(f"{name} {os.fspath(source)} is inside the {option} folder {os.fspath(output)}: "
                                 "writing the output could replace or mix with it. Write the output elsewhere.")


def check_output_extension(output: str | os.PathLike, extensions: Sequence[str] | None,
                           option: str = "--output") -> None:
    """Refuse, before any work, an output of the wrong kind: with `extensions` (e.g. `(".json",)`), a file name that
    ends in none of them (case-insensitive) or an existing folder; without, a folder output that is an existing
    file."""
    name = os.fspath(output)
    if extensions is None:
        if os.path.exists(name) and not os.path.isdir(name):
            raise ValueError(f"{option} {name} is a file; it must be a folder (new, or one this command wrote).")
        return
    if os.path.splitext(name)[1].lower() not in extensions:
        raise ValueError(f"{option} {name} must be a {' or '.join(extensions)} file (got "
                         f"{os.path.splitext(name)[1] or 'no extension'!r}).")
    if os.path.isdir(name):
        raise ValueError(f"{option} {name} is a folder; it must be a {' or '.join(extensions)} file.")
