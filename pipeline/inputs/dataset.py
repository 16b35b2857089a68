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

A local folder is walked here, not by pyarrow (which follows a symlink loop such as ``self -> .``
for ever): links are followed, but each folder is entered once, by its (device, inode).  A file or
folder reached a second time (a loop, two links to one folder or one file, a file named by two
values under different paths) stops the batch with one message naming every such path, so every
file is read at most once.  A name that is not UTF-8 is named by its bytes.

    >>> [f.display_root for f in resolve_inputs(["parts/", "extra.jsonl"])]     # doctest: +SKIP
    ['/data/extra.jsonl', '/data/parts/part-00000.jsonl', '/data/parts/part-00001.jsonl']
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import stat
from collections.abc import Sequence

import pyarrow.fs as pafs

from batchenum.pipeline.errors import InputError, MissingInputError
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
                raise InputError(
                    f"input file {source.display_root} is named twice (by {found[source.display_root][1]} "
                    f"and by {shown}): it would be read twice; give each file once"
                )
            found[source.display_root] = (source, shown)
    _refuse_reached_twice(_same_files([found[path][0] for path in sorted(found)]))
    return [found[path][0] for path in sorted(found)]


def _same_files(sources: list[Storage]) -> dict[str, str]:
    """{path: the earlier path of the same file} for local files that one file reaches under two
    paths (links, hard links): by (device, inode), as ``cp`` and ``rsync`` tell files apart."""
    first: dict[tuple[int, int], str] = {}
    again: dict[str, str] = {}
    for source in sources:
        if not source.local:
            continue
        try:
            status = os.stat(source.root)
        except OSError:
            continue  # a missing or unreadable file gets its own message when it is described
        again_of = first.setdefault((status.st_dev, status.st_ino), source.display_root)
        if again_of != source.display_root:
            again[source.display_root] = again_of
    return again


_MAX_NAMED = 10  # paths named in one message


def _refuse_reached_twice(again: dict[str, str]) -> None:
    """InputError naming every path that reaches a file or folder already in the batch."""
    if not again:
        return
    named = [f"{path} (the same as {first})" for path, first in list(again.items())[:_MAX_NAMED]]
    more = f", and {len(again) - _MAX_NAMED:,} more" if len(again) > _MAX_NAMED else ""
    raise InputError(
        f"the input reaches {len(again):,} file{'s' if len(again) > 1 else ''} or folder"
        f"{'s' if len(again) > 1 else ''} a second time, through links (or a link loop such as "
        f"self -> .): {'; '.join(named)}{more}. Every file is read once: remove those links, or name "
        "each file or folder once"
    )


def _files_of(value: str | Storage) -> list[Storage]:
    """The files one value names, sorted and without repeats."""
    if isinstance(value, Storage):
        return [value]
    if not value or not value.strip():
        raise InputError("an empty input value: give a file, a folder or a glob")
    _check_name(value, "input")
    if is_glob(value):
        return _glob(value)
    source = _storage(value)
    info = _info(source, source.root)
    if info.type == pafs.FileType.File:
        return [source]
    if info.type == pafs.FileType.Directory:
        files = _files_below(source, source.root)
        if not files:
            raise MissingInputError(
                f"input folder {source.display_root} holds no files (names starting with "
                f"{' or '.join(SKIPPED_PREFIXES)} are skipped)"
            )
        return files
    raise MissingInputError(f"input file {source.display_root} does not exist")


def _glob(pattern: str) -> list[Storage]:
    """The files a glob matches, and the files below the folders it matches."""
    fixed, wildcard = _split_glob(pattern)
    base = _storage(fixed)
    if _info(base, base.root).type != pafs.FileType.Directory:
        raise MissingInputError(f"input {redact(pattern)} matches no file ({base.display_root} is not a folder)")
    parts = wildcard.split("/")
    matched: dict[str, Storage] = {}
    infos, again = _listing(base, base.root)
    _refuse_reached_twice(
        {
            path: first
            for path, first in again.items()
            if not _skipped(_relative(base, path)) and _may_hold(_relative(base, path).split("/"), parts)
        }
    )
    for info in infos:
        relative = _relative(base, info.path)
        if _skipped(relative) or not _matches(relative.split("/"), parts):
            continue
        if info.type == pafs.FileType.File:
            matched[info.path] = _file_storage(base, info.path)
        elif info.type == pafs.FileType.Directory:
            matched.update({source.root: source for source in _files_below(base, info.path, (infos, again))})
    if not matched:
        raise MissingInputError(
            f"input {redact(pattern)} matches no file (names starting with {' or '.join(SKIPPED_PREFIXES)} are skipped)"
        )
    return [matched[path] for path in sorted(matched)]


def _split_glob(pattern: str) -> tuple[str, str]:
    """(the folder before the first component with a wildcard, the rest), split at a ``/``."""
    scheme_end = pattern.find("://") + 3 if is_uri(pattern) else 0
    first = min(pattern.find(char) for char in _GLOB_CHARS if char in pattern)
    cut = pattern.rfind("/", scheme_end, first)
    if cut < 0:  # a pattern in the current folder (local only: a URI always has a bucket or host)
        return (pattern[:scheme_end] if scheme_end else "."), pattern[scheme_end:]
    return pattern[:cut] or "/", pattern[cut + 1 :]


def _matches(parts: list[str], pattern: list[str]) -> bool:
    """Whether path components match glob components; ``**`` matches any number of them."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return _matches(parts, pattern[1:]) or (bool(parts) and _matches(parts[1:], pattern))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:])


def _may_hold(parts: list[str], pattern: list[str]) -> bool:
    """Whether a folder at path components ``parts`` matches glob components ``pattern``, or could
    hold a path that does."""
    if not parts or (pattern and pattern[0] == "**"):
        return True
    return bool(pattern) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _may_hold(parts[1:], pattern[1:])


def _files_below(
    base: Storage, folder: str, listed: tuple[list[pafs.FileInfo], dict[str, str]] | None = None
) -> list[Storage]:
    """Every file below ``folder``, recursively, sorted, skipping hidden and ``_`` names.  ``listed``:
    a listing (``_listing``) of a folder holding ``folder``, to take instead of listing again.
    InputError naming the paths below ``folder`` that reach a folder a second time."""
    infos, again = listed or _listing(base, folder)
    below = [info for info in infos if _is_below(folder, info.path) and not _skipped(_relative_to(folder, info.path))]
    _refuse_reached_twice(
        {
            path: first
            for path, first in again.items()
            if _is_below(folder, path) and not _skipped(_relative_to(folder, path))
        }
    )
    return [_file_storage(base, info.path) for info in below if info.type == pafs.FileType.File]


def _is_below(folder: str, path: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def _listing(base: Storage, folder: str) -> tuple[list[pafs.FileInfo], dict[str, str]]:
    """(everything below ``folder``, sorted by path; {path of a link to a folder already entered:
    that folder's first path}).  A local folder is walked here (``_walk``); pyarrow lists the others."""
    if base.local:
        return _walk(folder)
    try:
        infos = base.fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    except Exception as error:
        raise InputError(f"cannot list input folder {base.uri(folder)}: {error}") from None
    return sorted(infos, key=lambda info: info.path), {}


def _walk(folder: str) -> tuple[list[pafs.FileInfo], dict[str, str]]:
    """Every file and folder below a local ``folder`` (links followed), each folder entered once:
    a folder reached again (a loop such as ``self -> .``, or a second link to it) is listed in the
    second value and not entered, so the walk ends whatever the links.  Names starting with ``.``
    or ``_`` are not entered (they are skipped anyway); other names must be UTF-8."""
    try:
        entered = {_key(os.stat(folder)): folder}
    except OSError as error:
        raise InputError(f"cannot list input folder {folder}: {error.strerror or error}") from None
    infos: list[pafs.FileInfo] = []
    again: dict[str, str] = {}
    stack = [folder]
    while stack:
        folders = []
        for entry in _entries(stack.pop()):
            if entry.name.startswith(SKIPPED_PREFIXES):
                continue
            _check_name(entry.path, f"input folder {folder}")
            try:
                status = os.stat(entry.path)  # follows links; a dangling one is no file, as for pyarrow
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode):
                infos.append(pafs.FileInfo(entry.path, pafs.FileType.File))
            elif stat.S_ISDIR(status.st_mode):
                first = entered.setdefault(_key(status), entry.path)
                if first != entry.path:
                    again[entry.path] = first
                    continue
                infos.append(pafs.FileInfo(entry.path, pafs.FileType.Directory))
                folders.append(entry.path)
        stack += reversed(folders)  # depth first, in name order
    return sorted(infos, key=lambda info: info.path), again


def _key(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _entries(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        raise InputError(f"cannot list input folder {folder}: {error.strerror or error}") from None


def _check_name(path: str, where: str) -> None:
    """InputError naming ``path`` by its bytes when it is not UTF-8 (Python holds such bytes as
    lone surrogates, which no file system call below accepts)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(
            f"{where}: {os.fsencode(path)!r} is a name that is not UTF-8; rename it to UTF-8 (for "
            "example with convmv -f latin1 -t utf8 --notest), or move it out of the batch"
        ) from None


def _skipped(relative: str) -> bool:
    return any(part.startswith(SKIPPED_PREFIXES) for part in relative.split("/"))


def _relative(base: Storage, path: str) -> str:
    return _relative_to(base.root, path)


def _relative_to(folder: str, path: str) -> str:
    return path[len(folder) :].lstrip("/").replace(os.sep, "/")


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
