"""Which files an input names: a file, a folder, a glob, or several of them, on a disk or any
``pyarrow.fs`` URI (``s3://bucket/parts/``).

``resolve_inputs`` lists folders and expands globs through ``pyarrow.fs`` (one code path for a disk
and an object store; Python's ``glob`` knows only the local disk) and returns one ``Storage`` per
file, sorted by path, so that a batch has a stable order whatever order the values came in.  It
reads no file's contents: listings only.

In a folder, and in what a glob matches, names starting with ``.`` or ``_`` are skipped (at any
depth below the folder or the glob's fixed part), as ``pyarrow.dataset``, Spark and Hive skip them:
``_SUCCESS`` markers, ``.crc`` checksums, ``_temporary/`` folders.  A file named on its own is never
skipped.

    >>> [f.display_root for f in resolve_inputs(["parts/", "extra.jsonl"])]     # doctest: +SKIP
    ['/data/extra.jsonl', '/data/parts/part-00000.jsonl', '/data/parts/part-00001.jsonl']
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from typing import Sequence

import pyarrow.fs as pafs

from batchenum.pipeline.errors import InputError
from batchenum.pipeline.storage import Storage, StorageError, is_uri, redact

__all__ = ["resolve_inputs", "input_values", "is_glob", "SKIPPED_PREFIXES"]

SKIPPED_PREFIXES = (".", "_")  # as pyarrow.dataset's default selector_ignore_prefixes
_GLOB_CHARS = ("*", "?", "[")


def is_glob(value: str) -> bool:
    """Whether an input value is a glob pattern (``*``, ``?`` or ``[``; ``**`` spans folders)."""
    return any(char in value for char in _GLOB_CHARS)


def input_values(inputs: str | Storage | Sequence[str | Storage]) -> list[str | Storage]:
    """The input values as a list (one value may be given alone); InputError for none."""
    values = [inputs] if isinstance(inputs, (str, Storage)) else list(inputs)
    if not values:
        raise InputError("no input given: name a file, a folder or a glob (--input batch.jsonl)")
    for value in values:
        if not isinstance(value, (str, Storage)):
            raise InputError(f"an input must be a path or a URI, not {type(value).__name__}")
    return values


def resolve_inputs(inputs: str | Storage | Sequence[str | Storage]) -> list[Storage]:
    """One Storage per input file, sorted by path.

    inputs: a value or a list of them; each a file, a folder (every file below it, recursively), a
            glob (``parts/*.jsonl``, ``runs/**/part-*.jsonl.gz``), as a local path or a URI, or a
            ``Storage`` of one file (taken as it is).

    Raises InputError naming the value for a value that matches no file, and naming the file and
    both values for a file that two values name (it would be read twice).
    """
    found: dict[str, tuple[Storage, str]] = {}
    for value in input_values(inputs):
        shown = value.display_root if isinstance(value, Storage) else redact(value)
        for source in _files_of(value):
            if source.display_root in found:
                raise InputError(f"input file {source.display_root} is named twice (by {found[source.display_root][1]} "
                                 f"and by {shown}): it would be read twice; give each file once")
            found[source.display_root] = (source, shown)
    return [found[path][0] for path in sorted(found)]


def _files_of(value: str | Storage) -> list[Storage]:
    """The files one value names, sorted and without repeats."""
    if isinstance(value, Storage):
        return [value]
    if not value or not value.strip():
        raise InputError("an empty input value: give a file, a folder or a glob")
    if is_glob(value):
        return _glob(value)
    source = _storage(value)
    info = _info(source, source.root)
    if info.type == pafs.FileType.File:
        return [source]
    if info.type == pafs.FileType.Directory:
        files = _files_below(source, source.root)
        if not files:
            raise InputError(f"input folder {source.display_root} holds no files (names starting with "
                             f"{' or '.join(SKIPPED_PREFIXES)} are skipped)")
        return files
    raise InputError(f"input file {source.display_root} does not exist")


def _glob(pattern: str) -> list[Storage]:
    """The files a glob matches, and the files below the folders it matches."""
    fixed, wildcard = _split_glob(pattern)
    base = _storage(fixed)
    if _info(base, base.root).type != pafs.FileType.Directory:
        raise InputError(f"input {redact(pattern)} matches no file ({base.display_root} is not a folder)")
    parts = wildcard.split("/")
    matched: dict[str, Storage] = {}
    for info in _listing(base, base.root):
        relative = _relative(base, info.path)
        if _skipped(relative) or not _matches(relative.split("/"), parts):
            continue
        if info.type == pafs.FileType.File:
            matched[info.path] = _file_storage(base, info.path)
        elif info.type == pafs.FileType.Directory:
            matched.update({source.root: source for source in _files_below(base, info.path)})
    if not matched:
        raise InputError(f"input {redact(pattern)} matches no file (names starting with "
                         f"{' or '.join(SKIPPED_PREFIXES)} are skipped)")
    return [matched[path] for path in sorted(matched)]


def _split_glob(pattern: str) -> tuple[str, str]:
    """(the folder before the first component with a wildcard, the rest), split at a ``/``."""
    scheme_end = pattern.find("://") + 3 if is_uri(pattern) else 0
    first = min(pattern.find(char) for char in _GLOB_CHARS if char in pattern)
    cut = pattern.rfind("/", scheme_end, first)
    if cut < 0:  # a pattern in the current folder (local only: a URI always has a bucket or host)
        return (pattern[:scheme_end] if scheme_end else "."), pattern[scheme_end:]
    return pattern[:cut] or "/", pattern[cut + 1:]


def _matches(parts: list[str], pattern: list[str]) -> bool:
    """Whether path components match glob components; ``**`` matches any number of them."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return _matches(parts, pattern[1:]) or (bool(parts) and _matches(parts[1:], pattern))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:])


def _files_below(base: Storage, folder: str) -> list[Storage]:
    """Every file below ``folder``, recursively, sorted, skipping hidden and ``_`` names."""
    return [_file_storage(base, info.path) for info in _listing(base, folder)
            if info.type == pafs.FileType.File and not _skipped(_relative_to(folder, info.path))]


def _listing(base: Storage, folder: str) -> list[pafs.FileInfo]:
    try:
        infos = base.fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    except Exception as error:
        raise InputError(f"cannot list input folder {base.uri(folder)}: {error}") from None
    return sorted(infos, key=lambda info: info.path)


def _skipped(relative: str) -> bool:
    return any(part.startswith(SKIPPED_PREFIXES) for part in relative.split("/"))


def _relative(base: Storage, path: str) -> str:
    return _relative_to(base.root, path)


def _relative_to(folder: str, path: str) -> str:
    return path[len(folder):].lstrip("/").replace(os.sep, "/")


def _file_storage(base: Storage, path: str) -> Storage:
    """The Storage of one listed file, sharing its folder's file system (and credentials)."""
    display = path if base.local else base.display_root + "/" + posixpath.relpath(path, base.root)
    return Storage(base.fs, path, display, base.local)


def _storage(value: str) -> Storage:
    try:
        return Storage.at(value)
    except StorageError as error:
        raise InputError(f"input: {error}") from None


def _info(source: Storage, path: str) -> pafs.FileInfo:
    try:
        return source.fs.get_file_info(path)
    except Exception as error:
        raise InputError(f"cannot reach input {source.uri(path)}: {error}") from None
