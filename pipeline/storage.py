"""The only module that touches a file system: local folders and object stores, through pyarrow.fs.

A location is a local path or any URI that ``pyarrow.fs.FileSystem.from_uri`` understands
(``s3://``, ``gs://``, ``hdfs://``, ``file://``).  For S3 the endpoint, region and credentials come
from the standard AWS environment variables (``AWS_ENDPOINT_URL`` included, so MinIO, Ceph and other
S3-compatible servers work); the driver captures them once and the :class:`Storage` object carries
them to the workers inside Ray's object store.  They never appear in ``str()``, ``repr()``,
provenance, progress lines or error messages.

Commit semantics: on a local disk a file is written under a unique temporary name, fsynced and
renamed onto its final path; an object store has no rename, but an object appears whole or not at
all, so a file is written locally first and then uploaded once under its final key.  Either way a
killed writer never leaves a partial file under a final name.

Transient failures (a connection refused or reset, a timeout, throttling, a 5xx answer) are retried,
in two layers: pyarrow's own S3 retry strategy (the AWS SDK's standard one: exponential backoff with
jitter) absorbs short hiccups inside each request, and every operation here (commit, read, list,
delete) is retried as a whole, with exponential backoff and jitter, until the store has been
unreachable for ``Storage.timeout`` seconds (``--storage-timeout``).  Past that bound the operation
fails with ``StorageUnavailableError``, naming the store and the operation; what was committed before
stays committed.  docs/faults.md, "Storage outages".

    >>> store = Storage.at("/tmp/runs")                       # doctest: +SKIP
    >>> store.write_atomic(store.join("t.parquet"), lambda local: write(local))   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import posixpath
import random
import re
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from batchenum.pipeline.errors import PipelineError, RunStoppedError, SpokenError, literal
from batchenum.pipeline.names import TMP_MARK  # in every temporary's name, never in a declared one

__all__ = [
    "Storage",
    "StorageError",
    "StorageUnavailableError",
    "NoRoomError",
    "NotWritableError",
    "LinkRefusedError",
    "TMP_MARK",
    "OLD_MARK",
    "STORAGE_TIMEOUT",
    "is_temporary",
    "is_uri",
    "redact",
    "scratch",
    "temporary_name",
    "transient",
]

T = TypeVar("T")
LOGGER = logging.getLogger("batchenum.storage")
STORAGE_TIMEOUT = 180.0  # seconds a store may stay unreachable before the run gives up (--storage-timeout)
# pyarrow's S3 retries inside one request: a hiccup costs a second or two, not one of our rounds
_S3_ATTEMPTS = 4
_S3_CONNECT_TIMEOUT = 5.0  # seconds; the AWS SDK's 1 s is short for a busy server
# Our rounds: the first wait, the longest, and how often a long wait is reported again.
_BACKOFF_FIRST, _BACKOFF_MAX, _REPORT_EVERY = 0.5, 15.0, 30.0
# How pyarrow (the AWS SDK) words an error worth retrying: the network, throttling, the server's 5xx.
_TRANSIENT_S3 = re.compile(
    r"AWS Error (NETWORK_CONNECTION|SLOW_DOWN|THROTTLING|SERVICE_UNAVAILABLE|INTERNAL_FAILURE"
    r"|REQUEST_TIMEOUT|REQUEST_LIMIT_EXCEEDED)|HTTP status (5\d\d|429)|curlCode: \d+"
)
# Why a write cannot succeed however often it is tried: the place itself takes nothing more.
_NO_ROOM = {
    errno.ENOSPC: "no space is left on its device",
    errno.EDQUOT: "its disk quota is exceeded",
    errno.EROFS: "its file system is read-only",
    errno.EACCES: "permission to write there is denied",
    errno.EPERM: "the file system does not permit the write (an immutable file or folder?)",
}
_ERRNO_TEXT = re.compile(r"[Ee]rrno (\d+)")
_TRANSIENT_ERRNO = {
    errno.ETIMEDOUT,
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ENETDOWN,
    errno.EPIPE,
}

# A folder moved aside by the two-rename fallback of ``replace_folder``; the complete former folder.
OLD_MARK = TMP_MARK + "old-"
# The exact names the store gives its temporaries: the target's name, the mark, the writer's pid and
# eight hex digits (``temporary_name``), "old-" before the pid for a folder moved aside.  Only entries
# named so are ever removed as leftovers: never a pattern over a whole path (an --out of
# /data/proj.tmp-2024/ is a user's folder), never someone's ``notes.tmp-1``.
_TEMPORARY = re.compile(r"(?P<target>.+)" + re.escape(TMP_MARK) + r"(?P<old>old-)?\d+-[0-9a-f]{8}")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# The AWS variables that say where S3 is and who we are; captured on the driver for the workers.
_S3_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
)


class StorageError(PipelineError):
    """A location that cannot be used: bad URI, unreachable store, no permission."""


class StorageUnavailableError(StorageError, RunStoppedError):
    """A store that stayed unreachable (or kept failing transiently) for longer than its timeout."""


class NotWritableError(StorageError):
    """The output location refused the probe write before the run: full, over quota or read-only."""


class NoRoomError(SpokenError, StorageError, RunStoppedError):
    """The output location takes no more: its device is full, its quota used, it is read-only.  Its
    words for the output option are the caller's (``out=`` from Python, ``--out`` from the CLI)."""

    reason: str = ""  # why, in a few words ("no space is left on its device"); set by Storage.no_room


class LinkRefusedError(StorageError, RunStoppedError):
    """A symbolic link where batchenum keeps its own files and folders: nothing is written, moved or
    deleted through it, and nothing read through it is served."""


def temporary_name(path: str) -> str:
    """The name a file being written to ``path`` has until it is complete (``is_temporary``)."""
    return f"{path}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"


def is_temporary(name: str, old: bool | None = None) -> bool:
    """Whether the entry name ``name`` (not a path) is one ``temporary_name`` (or the fallback of
    ``replace_folder``) made; ``old``: only a folder moved aside (True), only a file being written
    (False)."""
    found = _TEMPORARY.fullmatch(name)
    return found is not None and (old is None or bool(found.group("old")) == old)


def temporary_target(name: str) -> str | None:
    """The name of the entry that temporary ``name`` was to become, or None when it is no temporary."""
    found = _TEMPORARY.fullmatch(name)
    return found.group("target") if found else None


def _no_room(error: BaseException) -> str | None:
    """Why ``error`` says the place takes no more writes (full, read-only, ...), or None.  pyarrow
    words the errno into its message without setting ``errno``."""
    if not isinstance(error, OSError):
        return None
    code = error.errno
    if code is None:
        found = _ERRNO_TEXT.search(str(error))
        if found is None:
            return None
        code = int(found.group(1))
    return _NO_ROOM.get(code)


def transient(error: BaseException) -> bool:
    """Whether ``error`` is one that waiting may cure: a connection refused, reset or timed out,
    throttling, a server error (5xx).  Anything else (no such key, no permission, a full disk) is not."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNO:
        return True
    return isinstance(error, OSError) and bool(_TRANSIENT_S3.search(str(error)))


def is_uri(location: str) -> bool:
    """Whether ``location`` names a file system by scheme (``s3://...``) rather than a local path."""
    return bool(_SCHEME.match(location))


def redact(location: str) -> str:
    """The location without any user or password it might carry (``s3://key:secret@bucket``)."""
    if not is_uri(location):
        return location
    parts = urlsplit(location)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Storage:
    """A folder (or object-store prefix) and the file system it lives on.

    Paths handed to and returned by the methods are file-system paths (``bucket/run/x`` on S3, an
    absolute path on a local disk); ``uri(path)`` turns one into the form people type.
    """

    def __init__(
        self, filesystem: pafs.FileSystem, root: str, display_root: str, local: bool, timeout: float = STORAGE_TIMEOUT
    ):
        self.fs = filesystem
        self.root = root
        self.display_root = display_root
        self.local = local
        self.timeout = timeout  # seconds an operation keeps retrying transient failures
        # The folder the user chose (``at``'s): it and what is above it may be links; what batchenum
        # makes below it (a job folder, ``_inputs``) may not, whichever child storage writes there.
        self.top = root
        # Called with this storage before every commit (write_atomic); raises to refuse it.  The
        # lease puts its fence here (lease.py), so a run that lost its folder commits nothing.
        self.guard: Callable[[Storage], None] | None = None

    @classmethod
    def at(cls, location: str, timeout: float = STORAGE_TIMEOUT) -> Storage:
        """The storage for a local path (relative to the current directory) or a URI; ``timeout``:
        how long an operation may keep retrying transient failures (seconds)."""
        if not location or not location.strip():
            raise StorageError("an empty location: give a folder path or a URI such as s3://bucket/prefix")
        if not timeout > 0:
            raise StorageError(f"a storage timeout of {timeout} s: give a positive number of seconds")
        if not is_uri(location) or location.startswith("file://"):
            path = location[len("file://") :] if location.startswith("file://") else location
            root = os.path.abspath(os.path.expanduser(path))
            return cls(pafs.LocalFileSystem(), root, root, local=True, timeout=timeout)
        try:
            filesystem, root = pafs.FileSystem.from_uri(location)
        except Exception as error:
            raise StorageError(f"cannot use {redact(location)}: {_plain(error)}") from None
        if isinstance(filesystem, pafs.S3FileSystem):
            filesystem = _s3_retrying(_s3_with_captured_credentials(filesystem))
        root = root.rstrip("/")
        return cls(filesystem, root, redact(location).rstrip("/"), local=False, timeout=timeout)

    def __setstate__(self, state: dict) -> None:
        """Unpickled in a Ray worker: pyarrow pickles an S3 file system without its retry strategy,
        so it is given back here."""
        self.__dict__.update(state)
        if isinstance(self.fs, pafs.S3FileSystem):
            self.fs = _s3_retrying(self.fs)

    def __repr__(self) -> str:  # never the credentials
        return f"Storage({self.display_root!r})"

    __str__ = __repr__

    # -------------------------------------------------------------------------------------- paths

    def join(self, *parts: str) -> str:
        """A path below the root."""
        return (os.path.join if self.local else posixpath.join)(self.root, *parts)

    def child(self, *parts: str) -> Storage:
        """The storage of a folder below this one."""
        display = (os.path.join if self.local else posixpath.join)(self.display_root, *parts)
        child = Storage(self.fs, self.join(*parts), display, self.local, self.timeout)
        child.guard, child.top = self.guard, self.top
        return child

    def copy(self, **changes: Any) -> Storage:
        """The same storage with other ``timeout`` or ``guard``."""
        twin = Storage(self.fs, self.root, self.display_root, self.local, changes.get("timeout", self.timeout))
        twin.guard, twin.top = changes.get("guard", self.guard), self.top
        return twin

    def uri(self, path: str) -> str:
        """``path`` as people type it: a local path, or the URI with the root's scheme."""
        if self.local or not path.startswith(self.root):
            return path
        return self.display_root + path[len(self.root) :]

    def relative(self, path: str) -> str:
        return path[len(self.root) :].lstrip("/")

    def refuse_links(self, path: str) -> None:
        """On a local disk: LinkRefusedError naming the first symbolic link on the way from ``top``
        (the folder the user chose, which may be a link) down to ``path``, ``path`` itself included:
        a job folder below ``--out`` is checked too; StorageError when ``path`` is not below the
        root.  Every write, move and delete here checks first, so that nothing outside the folder is
        reached through a link planted in it or put in its place.  Nothing to check on an object
        store, which has no links."""
        if not self.local:
            return
        inside = os.path.relpath(path, self.root)
        if inside == ".." or inside.startswith(".." + os.sep) or os.path.isabs(inside):
            raise StorageError(
                f"{path} is outside {self.display_root}: batchenum writes and deletes only below it "
                "(a bug: please report it)"
            )
        relative = os.path.relpath(path, self.top)
        if relative == ".":
            return
        current = self.top
        for name in relative.split(os.sep):
            current = os.path.join(current, name)
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return
            if stat.S_ISLNK(mode):
                raise link_refused(current)

    def kind(self, path: str) -> str:
        """What ``path`` is, links not followed: "file", "folder", "link", "other" or "missing"."""
        if not self.local:
            found = self._info(path).type
            return {pafs.FileType.File: "file", pafs.FileType.Directory: "folder"}.get(found, "missing")
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return "missing"
        if stat.S_ISLNK(mode):
            return "link"
        return "file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else "other"

    # ------------------------------------------------------------------------------------- queries

    def exists(self, path: str) -> bool:
        return self._info(path).type != pafs.FileType.NotFound

    def is_file(self, path: str) -> bool:
        return self._info(path).type == pafs.FileType.File

    def stat(self, path: str) -> tuple[int, int]:
        """(size in bytes, modification time in ns) of a file; StorageError when it is not one."""
        info = self._info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"{self.uri(path)} does not exist")
        if info.type != pafs.FileType.File:
            raise StorageError(f"{self.uri(path)} is not a regular file")
        return info.size, int(info.mtime_ns or 0)

    def list_files(self, path: str | None = None, recursive: bool = True) -> list[str]:
        """Every file below ``path`` (default: the root), recursively unless told; [] when there is
        none."""
        where = path or self.root
        selector = pafs.FileSelector(where, recursive=recursive, allow_not_found=True)
        try:
            infos = self.retrying("listing", where, lambda: self.fs.get_file_info(selector))
        except StorageError:
            raise
        except Exception as error:
            raise StorageError(f"cannot list {self.uri(where)}: {_plain(error)}") from None
        return sorted(info.path for info in infos if info.type == pafs.FileType.File)

    def list_dirs(self, path: str) -> list[str]:
        """The folders directly below ``path`` ([] when there is none)."""
        selector = pafs.FileSelector(path, recursive=False, allow_not_found=True)
        infos = self.retrying("listing", path, lambda: self.fs.get_file_info(selector))
        return sorted(info.path for info in infos if info.type == pafs.FileType.Directory)

    def _info(self, path: str) -> pafs.FileInfo:
        try:
            return self.retrying("looking up", path, lambda: self.fs.get_file_info(path))
        except StorageError:
            raise
        except Exception as error:
            raise StorageError(f"cannot reach {self.uri(path)}: {_plain(error)}") from None

    # ------------------------------------------------------------------------------------- retries

    def retrying(self, operation: str, path: str, call: Callable[[], T]) -> T:
        """``call()``, retried while it fails transiently (``transient``) with exponential backoff
        and full jitter, for at most ``timeout`` seconds from the first failure; then
        StorageUnavailableError naming the store, the operation and the path.  Waits longer than a
        first round are reported on the ``batchenum.storage`` logger (a Ray worker's reach the
        driver's terminal with Ray's forwarded output)."""
        failed_at, rounds, reported = None, 0, 0.0
        while True:
            try:
                result = call()
            except Exception as error:
                if not transient(error):
                    raise
                now = time.monotonic()
                failed_at = now if failed_at is None else failed_at
                waited = now - failed_at
                if waited >= self.timeout:
                    raise self._unavailable(operation, path, waited, error) from None
                if rounds and now - reported >= _REPORT_EVERY or rounds == 1:
                    reported = now
                    LOGGER.warning(
                        f"waiting for storage: {operation} {self.uri(path)} failed ({_plain(error)}); "
                        f"retrying for up to {self.timeout - waited:.0f} s more (--storage-timeout)"
                    )
                delay = random.uniform(0, min(_BACKOFF_MAX, _BACKOFF_FIRST * 2**rounds))
                time.sleep(min(delay, self.timeout - waited))
                rounds += 1
                continue
            if rounds > 1 and failed_at is not None:
                LOGGER.warning(
                    f"storage is back: {operation} {self.uri(path)} succeeded after "
                    f"{time.monotonic() - failed_at:.0f} s"
                )
            return result

    def _unavailable(self, operation: str, path: str, waited: float, error: BaseException) -> StorageUnavailableError:
        return StorageUnavailableError(
            f"storage {self.display_root} did not answer for {waited:.0f} s (--storage-timeout {self.timeout:g}) "
            f"while {operation} {self.uri(path)}: {_plain(error).rstrip('.')}. Every shard committed before is kept there: "
            "run the same command again once the store answers, and it reuses them"
        )

    # ------------------------------------------------------------------------------ reading/writing

    def open_input(self, path: str):
        """A random-access file (seek, read, read_at) for reading ``path``; on an object store each
        read is retried like any other operation (``RetryingInput``)."""
        handle = self.retrying("opening", path, lambda: self.fs.open_input_file(path))
        return handle if self.local else RetryingInput(self, path, handle)

    def read_bytes(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        def read() -> bytes:
            with self.fs.open_input_file(path) as handle:
                handle.seek(start)
                return handle.read(None if end is None else end - start)

        return self.retrying("reading", path, read)

    def write_atomic(self, path: str, write: Callable[[str], object]) -> None:
        """Commit a file: ``write(local_path)`` writes it in full to a local temporary path (what it
        returns is ignored), which then becomes ``path`` at once (rename on a disk, one upload on an
        object store), once ``guard`` allows it.  NoRoomError when the place is full or read-only."""
        self.refuse_links(path)
        try:
            self._write_atomic(path, write)
        except OSError as error:
            raise self.no_room(path, error) or error from None

    def no_room(self, path: str, error: BaseException) -> NoRoomError | None:
        """The one message for a write into this place that failed because it takes no more (full,
        read-only), naming it, the file and what to do; None for any other failure."""
        reason = _no_room(error)
        if reason is None:
            return None
        full = NoRoomError(
            "{out}: "
            + literal(
                f"{self.display_root} takes no more ({reason}), so {self.uri(path)} could not be "
                "written. Every shard committed before is kept (`batchenum status` counts them) and every "
                "table that was there before is whole and unchanged. Free some space (or make the place "
                "writable, or give "
            )
            + "{out=} another place), then run the same command again: it reuses the committed shards"
        )
        full.reason = reason
        return full

    def _write_atomic(self, path: str, write: Callable[[str], object]) -> None:
        if self.local:
            _write_local_atomic(path, write, self._check_guard)
            return
        with scratch("upload") as folder:
            local = os.path.join(folder, "file")
            write(local)
            self._check_guard()
            self.retrying("uploading", path, lambda: self._upload(local, path))

    def _check_guard(self) -> None:
        if self.guard is not None:
            self.guard(self)

    def _upload(self, local: str, path: str) -> None:
        """One upload, closed explicitly and then checked: ``pafs.copy_files`` lets the stream's
        destructor close it, and a failed last part is then only logged ("Error ignored when
        destroying file"), never raised, so a shard could go missing unnoticed."""
        parent = posixpath.dirname(path)
        if parent:
            self.fs.create_dir(parent, recursive=True)
        size = os.path.getsize(local)
        with open(local, "rb") as source:
            sink = self.fs.open_output_stream(path)
            sink.upload(source)
            sink.close()
        landed = self.fs.get_file_info(path).size
        if landed != size:  # treated as a dropped connection: the upload is made again
            raise ConnectionError(f"{self.uri(path)} holds {landed} bytes after an upload of {size}")

    def write_text(self, path: str, text: str) -> None:
        def write(local: str) -> None:
            with open(local, "w", encoding="utf-8") as handle:
                handle.write(text)

        self.write_atomic(path, write)

    def move(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target`` (on an object store a server-side copy, then a delete):
        a commit like ``write_atomic``, so the lease's fence is checked first and transient
        failures are retried (moving again is safe while ``source`` exists).  Neither name may be
        reached through a link, nor be one."""
        self.refuse_links(source)
        self.refuse_links(target)
        self._check_guard()

        def move() -> None:
            gone = self.fs.get_file_info(source).type == pafs.FileType.NotFound
            if not (gone and self.fs.get_file_info(target).type != pafs.FileType.NotFound):  # not moved already
                self.fs.move(source, target)

        self.retrying("moving", source, move)

    def share(self, source: str, target: str) -> None:
        """Make ``target`` a new file holding ``source``'s bytes without reading them here: a hard
        link on a disk (both names then hold one copy), a server-side copy on an object store; a
        plain copy only on a disk that cannot link.  A commit like ``write_atomic``: the lease's
        fence is checked first, transient failures are retried."""
        self.refuse_links(source)
        self.refuse_links(target)
        self._check_guard()
        if not self.local:
            self.retrying("copying", source, lambda: self.fs.copy_file(source, target))
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(source, target)
        except FileExistsError:  # a retried finish: the name already holds these bytes or stale ones
            os.unlink(target)
            os.link(source, target)
        except OSError as error:  # another device, a file system without hard links, too many links
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise self.no_room(target, error) or error from None
            self.write_atomic(target, lambda local: shutil.copyfile(source, local))

    def delete_file(self, path: str) -> None:
        """Delete file ``path`` if it is there: on a disk only a regular file below the root,
        reached without a link (LinkRefusedError naming the link otherwise)."""
        self.refuse_links(path)
        if self.local:
            if self.kind(path) not in ("file", "missing"):
                raise StorageError(
                    f"{path} is not a file, where batchenum keeps one of its files: move it away "
                    "and run the same command again"
                )
            _unlink_if_there(path)
            return
        try:
            self.retrying("deleting", path, lambda: self.fs.delete_file(path))
        except FileNotFoundError:
            pass

    def delete_dir(self, path: str) -> None:
        """Delete folder ``path`` and everything in it, if it is there: on a disk only a real folder
        below the root, reached without a link; links inside it are removed, never followed
        (``shutil.rmtree`` works from open folders there)."""
        self.refuse_links(path)
        if self.local:
            found = self.kind(path)
            if found == "missing":
                return
            if found != "folder":
                raise StorageError(
                    f"{path} is not a folder, where batchenum keeps one of its folders: move it away "
                    "and run the same command again"
                )
            shutil.rmtree(path)
            return
        try:
            self.retrying("deleting", path, lambda: self.fs.delete_dir(path))
        except FileNotFoundError:
            pass

    def replace_folder(self, staging: str, final: str) -> None:
        """Make the complete local folder ``staging`` the folder ``final`` in one atomic step, then
        delete the former ``final``.  Readers see the whole old folder or the whole new one, never a
        mix: Linux swaps the two names at once (renameat2 RENAME_EXCHANGE); where it cannot, the old
        folder is first renamed aside (``OLD_MARK``), and a crash between the two renames is undone
        by ``restore_folder`` at the next run."""
        self.refuse_links(staging)
        self.refuse_links(final)
        self._check_guard()
        parent = os.path.dirname(final)
        try:
            if not os.path.exists(final):
                os.rename(staging, final)
            elif _exchange(staging, final):
                shutil.rmtree(staging)  # it now holds the former folder
            else:
                _replace_by_renames(staging, final)
            _fsync_dir(parent)
        except OSError as error:
            raise self.no_room(final, error) or error from None

    def restore_folder(self, final: str) -> bool:
        """Put back a folder that the fallback of ``replace_folder`` moved aside, when a crash came
        before the new one took its name; whether one was put back."""
        if not self.local or self.kind(final) != "missing":
            return False
        self.refuse_links(final)
        parent, name = os.path.split(final)
        aside = (
            sorted(
                entry
                for entry in os.listdir(parent)
                if is_temporary(entry, old=True) and temporary_target(entry) == name
            )
            if self.kind(parent) == "folder"
            else []
        )
        if not aside:
            return False
        self.refuse_links(os.path.join(parent, aside[0]))
        os.rename(os.path.join(parent, aside[0]), final)
        _fsync_dir(parent)
        return True

    def check_writable(self) -> None:
        """Create the root and write and delete a small file there; StorageError saying why not."""
        probe = self.join(f"{TMP_MARK}probe-{uuid.uuid4().hex[:8]}")
        try:
            if self.local and os.path.exists(self.root) and not os.path.isdir(self.root):
                raise StorageError(f"{self.display_root} exists and is not a folder")
            self.retrying("creating", self.root, lambda: self.fs.create_dir(self.root, recursive=True))
            self.write_text(probe, "probe")
            self.delete_file(probe)
        except NoRoomError as error:
            raise NotWritableError(
                f"cannot write to {self.display_root}: {error.reason}. Free some space, or make it writable"
            ) from None
        except StorageError:
            raise
        except Exception as error:
            reason = _no_room(error)
            if reason:
                raise NotWritableError(
                    f"cannot write to {self.display_root}: {reason} ({_plain(error)}). Free some "
                    "space, or make it writable"
                ) from None
            raise StorageError(f"cannot write to {self.display_root}: {_plain(error)}") from None


_SWEPT: set[tuple[str, str]] = set()  # (kind, folder) whose stale scratch this process removed
# A scratch folder younger than this is never swept: between its creation and its lock, its maker
# does not hold the lock yet.
_SCRATCH_GRACE_SECONDS = 60


@contextlib.contextmanager
def scratch(kind: str, root: str | None = None) -> Iterator[str]:
    """A new temporary folder ``batchenum-<kind>-<pid>-XXXXXXXX`` in ``root`` (default: the system's
    temporary folder), locked while in use (``flock`` on the folder itself) and removed afterwards.
    A killed run cannot remove its own, so the first use in a process removes those whose lock can
    be taken: the kernel releases a lock with the last process holding it, in whatever PID namespace
    (a container sharing /tmp sees other pids, so a pid alone cannot tell a live run from a dead
    one)."""
    root = root or tempfile.gettempdir()
    if (kind, root) not in _SWEPT:
        _SWEPT.add((kind, root))
        _remove_stale_scratch(kind, root)
    path = tempfile.mkdtemp(prefix=f"batchenum-{kind}-{os.getpid()}-", dir=root)
    handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(handle)


def _remove_stale_scratch(kind: str, root: str) -> None:
    """Remove the scratch folders of ``kind`` in ``root`` that no process holds: not locked, older
    than ``_SCRATCH_GRACE_SECONDS``, and (for those of older versions, made without a lock) whose
    pid is gone here.  Names without a pid are left alone; so is anything reached through a link."""
    pattern = re.compile(rf"batchenum-{re.escape(kind)}-(\d+)-\w+")
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        found = pattern.fullmatch(name)
        if found and not _alive(int(found.group(1))):
            _remove_if_unheld(os.path.join(root, name))


def _remove_if_unheld(path: str) -> None:
    try:
        handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # gone, a link, not a folder
        return
    try:
        if time.time() - os.fstat(handle).st_mtime < _SCRATCH_GRACE_SECONDS:
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a live run's, in this PID namespace or another
            return
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(handle)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (in this pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


class RetryingInput:
    """A file being read from an object store, whose reads survive a dropped connection: a read that
    fails transiently is retried (``Storage.retrying``) on a freshly opened file at the same
    position.  pyarrow reads it as a Python file (``pq.ParquetFile(handle)``)."""

    def __init__(self, storage: Storage, path: str, handle: Any):
        self._storage = storage
        self._path = path
        self._handle = handle
        self._position = 0
        self.closed = False

    def _reading(self, read: Callable[[Any], T]) -> T:
        def attempt() -> T:
            try:
                return read(self._handle)
            except Exception as error:
                if transient(error):  # the connection is gone: the next round opens the file anew
                    self._handle = _reopened(self._storage, self._path, self._handle)
                raise

        return self._storage.retrying("reading", self._path, attempt)

    def read(self, size: int | None = -1) -> bytes:
        position = self._position

        def read(handle: Any) -> bytes:
            handle.seek(position)
            return handle.read(None if size is None or size < 0 else size)

        data = self._reading(read)
        self._position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        position = self._position

        def read(handle: Any) -> int:
            handle.seek(position)
            return handle.readinto(buffer)

        got = self._reading(read)
        self._position += got
        return got

    def read_at(self, size: int, offset: int) -> bytes:
        return self._reading(lambda handle: handle.read_at(size, offset))

    def readall(self) -> bytes:
        return self.read()

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: self.size()}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def size(self) -> int:
        return self._reading(lambda handle: handle.size())

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True
        self._handle.close()

    def __enter__(self) -> RetryingInput:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _reopened(storage: Storage, path: str, handle: Any) -> Any:
    """A fresh handle on ``path`` in place of ``handle``; the old one if opening fails too (the
    next round tries again)."""
    try:
        fresh = storage.fs.open_input_file(path)
    except Exception:
        return handle
    try:
        handle.close()
    except Exception:
        pass
    return fresh


def _write_local_atomic(path: str, write: Callable[[str], object], before_rename: Callable[[], None]) -> None:
    """``before_rename`` is the guard: it is asked again when a folder vanished under the write, so
    that a job folder deleted during a run is named as such (the lease's ``files_lost``), not as
    the FileNotFoundError of whichever file the run was writing at that moment."""
    directory = os.path.dirname(path)
    tmp = temporary_name(path)
    try:
        os.makedirs(directory, exist_ok=True)
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        before_rename()
        os.replace(tmp, path)
        _fsync_dir(directory)
    except FileNotFoundError:
        before_rename()
        raise
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def link_refused(path: str) -> LinkRefusedError:
    """The one message for a symbolic link found where batchenum keeps its own files."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return LinkRefusedError(
        f"{path} is a symbolic link{target}, where batchenum keeps its own files and folders: it writes, moves "
        "and deletes nothing through a link, and reads no result through one. Remove the link (or put a real "
        "folder or file there), then run the same command again"
    )


def _unlink_if_there(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(directory: str) -> None:
    """Make the renames in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_by_renames(staging: str, final: str) -> None:
    """The old folder renamed aside, the new one onto its name, the old one deleted: between the
    two renames ``final`` is absent, and ``Storage.restore_folder`` undoes a crash there."""
    aside = f"{final}{OLD_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"  # is_temporary(old=True)
    os.rename(final, aside)
    os.rename(staging, final)
    shutil.rmtree(aside)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(first: str, second: str) -> bool:
    """Swap two existing paths atomically with Linux's renameat2(RENAME_EXCHANGE), called from libc
    (Python has no binding); False where the C library or the file system does not offer it."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc older than glibc 2.28
        return False
    renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # an old kernel, or a file system without it
        return False
    raise OSError(code, os.strerror(code), f"{first} <-> {second}")


def _s3_with_captured_credentials(filesystem: pafs.S3FileSystem) -> pafs.S3FileSystem:
    """The same S3 file system, built with the driver's AWS variables spelled out, so that it
    pickles with them and a worker without those variables reaches the same store as the driver.
    Without variables (instance roles, web identity) the default credential chain applies."""
    env = {name: os.environ[name] for name in _S3_ENV if os.environ.get(name)}
    if not env:
        return filesystem
    options = {"region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or filesystem.region}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_override"] = endpoint
    if "AWS_ACCESS_KEY_ID" in env and "AWS_SECRET_ACCESS_KEY" in env:
        options.update(
            access_key=env["AWS_ACCESS_KEY_ID"],
            secret_key=env["AWS_SECRET_ACCESS_KEY"],
            session_token=env.get("AWS_SESSION_TOKEN"),
        )
    return pafs.S3FileSystem(**options)


def _s3_retrying(filesystem: pafs.S3FileSystem) -> pafs.S3FileSystem:
    """The same S3 file system with pyarrow's standard retry strategy (exponential backoff with
    jitter, ``_S3_ATTEMPTS`` attempts per request) and a connect timeout; what ``from_uri`` or an
    unpickling built is kept (its ``__reduce__`` arguments), blanks left to their defaults."""
    options = dict(filesystem.__reduce__()[1][0])
    proxy = options.pop("proxy_options", None) or {}
    if proxy.get("host"):
        options["proxy_options"] = proxy
    options = {key: value for key, value in options.items() if value not in ("", None)}
    if not options.get("connect_timeout") or options["connect_timeout"] < 0:
        options["connect_timeout"] = _S3_CONNECT_TIMEOUT
    return pafs.S3FileSystem(**options, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=_S3_ATTEMPTS))


def _plain(error: BaseException) -> str:
    """An error's message without anything that looks like a credential."""
    text = f"{type(error).__name__}: {error}".strip()
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text.splitlines()[0] if text else type(error).__name__
