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

    >>> store = Storage.at("/tmp/runs")                       # doctest: +SKIP
    >>> store.write_atomic(store.join("t.parquet"), lambda local: write(local))   # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import re
import shutil
import tempfile
import uuid
from typing import Callable
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from batchenum.pipeline.errors import PipelineError

__all__ = ["Storage", "StorageError", "TMP_MARK", "OLD_MARK", "is_uri", "redact"]

TMP_MARK = ".tmp-"  # in the name of every temporary file or folder; never read as a result
# A folder moved aside by the two-rename fallback of ``replace_folder``; the complete former folder.
OLD_MARK = TMP_MARK + "old-"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# The AWS variables that say where S3 is and who we are; captured on the driver for the workers.
_S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
           "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


class StorageError(PipelineError):
    """A location that cannot be used: bad URI, unreachable store, no permission."""


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

    def __init__(self, filesystem: pafs.FileSystem, root: str, display_root: str, local: bool):
        self.fs = filesystem
        self.root = root
        self.display_root = display_root
        self.local = local

    @classmethod
    def at(cls, location: str) -> "Storage":
        """The storage for a local path (relative to the current directory) or a URI."""
        if not location or not location.strip():
            raise StorageError("an empty location: give a folder path or a URI such as s3://bucket/prefix")
        if not is_uri(location) or location.startswith("file://"):
            path = location[len("file://"):] if location.startswith("file://") else location
            root = os.path.abspath(os.path.expanduser(path))
            return cls(pafs.LocalFileSystem(), root, root, local=True)
        try:
            filesystem, root = pafs.FileSystem.from_uri(location)
        except Exception as error:
            raise StorageError(f"cannot use {redact(location)}: {_plain(error)}") from None
        if isinstance(filesystem, pafs.S3FileSystem):
            filesystem = _s3_with_captured_credentials(filesystem)
        root = root.rstrip("/")
        return cls(filesystem, root, redact(location).rstrip("/"), local=False)

    def __repr__(self) -> str:  # never the credentials
        return f"Storage({self.display_root!r})"

    __str__ = __repr__

    # -------------------------------------------------------------------------------------- paths

    def join(self, *parts: str) -> str:
        """A path below the root."""
        return (os.path.join if self.local else posixpath.join)(self.root, *parts)

    def child(self, *parts: str) -> "Storage":
        """The storage of a folder below this one."""
        display = (os.path.join if self.local else posixpath.join)(self.display_root, *parts)
        return Storage(self.fs, self.join(*parts), display, self.local)

    def uri(self, path: str) -> str:
        """``path`` as people type it: a local path, or the URI with the root's scheme."""
        if self.local or not path.startswith(self.root):
            return path
        return self.display_root + path[len(self.root):]

    def relative(self, path: str) -> str:
        return path[len(self.root):].lstrip("/")

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

    def list_files(self, path: str | None = None) -> list[str]:
        """Every file below ``path`` (default: the root), recursively; [] when there is none."""
        selector = pafs.FileSelector(path or self.root, recursive=True, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except Exception as error:
            raise StorageError(f"cannot list {self.uri(path or self.root)}: {_plain(error)}") from None
        return sorted(info.path for info in infos if info.type == pafs.FileType.File)

    def list_dirs(self, path: str) -> list[str]:
        """The folders directly below ``path`` ([] when there is none)."""
        selector = pafs.FileSelector(path, recursive=False, allow_not_found=True)
        infos = self.fs.get_file_info(selector)
        return sorted(info.path for info in infos if info.type == pafs.FileType.Directory)

    def _info(self, path: str) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(path)
        except Exception as error:
            raise StorageError(f"cannot reach {self.uri(path)}: {_plain(error)}") from None

    # ------------------------------------------------------------------------------ reading/writing

    def open_input(self, path: str):
        """A random-access file (seek, read, read_at) for reading ``path``."""
        return self.fs.open_input_file(path)

    def read_bytes(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        with self.open_input(path) as handle:
            handle.seek(start)
            return handle.read(None if end is None else end - start)

    def write_atomic(self, path: str, write: Callable[[str], None]) -> None:
        """Commit a file: ``write(local_path)`` writes it in full to a local temporary path, which
        then becomes ``path`` at once (rename on a disk, one upload on an object store)."""
        if self.local:
            _write_local_atomic(path, write)
            return
        scratch = tempfile.mkdtemp(prefix="batchenum-upload-")
        try:
            local = os.path.join(scratch, "file")
            write(local)
            parent = posixpath.dirname(path)
            if parent:
                self.fs.create_dir(parent, recursive=True)
            pafs.copy_files(local, path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def write_text(self, path: str, text: str) -> None:
        def write(local: str) -> None:
            with open(local, "w", encoding="utf-8") as handle:
                handle.write(text)

        self.write_atomic(path, write)

    def delete_file(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass

    def delete_dir(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass

    def replace_folder(self, staging: str, final: str) -> None:
        """Make the complete local folder ``staging`` the folder ``final`` in one atomic step, then
        delete the former ``final``.  Readers see the whole old folder or the whole new one, never a
        mix: Linux swaps the two names at once (renameat2 RENAME_EXCHANGE); where it cannot, the old
        folder is first renamed aside (``OLD_MARK``), and a crash between the two renames is undone
        by ``restore_folder`` at the next run."""
        parent = os.path.dirname(final)
        if not os.path.exists(final):
            os.rename(staging, final)
        elif _exchange(staging, final):
            shutil.rmtree(staging)  # it now holds the former folder
        else:
            _replace_by_renames(staging, final)
        _fsync_dir(parent)

    def restore_folder(self, final: str) -> bool:
        """Put back a folder that the fallback of ``replace_folder`` moved aside, when a crash came
        before the new one took its name; whether one was put back."""
        if not self.local or os.path.exists(final):
            return False
        parent, name = os.path.split(final)
        aside = sorted(entry for entry in os.listdir(parent) if entry.startswith(name + OLD_MARK)) \
            if os.path.isdir(parent) else []
        if not aside:
            return False
        os.rename(os.path.join(parent, aside[0]), final)
        _fsync_dir(parent)
        return True

    def check_writable(self) -> None:
        """Create the root and write and delete a small file there; StorageError saying why not."""
        probe = self.join(f"{TMP_MARK}probe-{uuid.uuid4().hex[:8]}")
        try:
            if self.local and os.path.exists(self.root) and not os.path.isdir(self.root):
                raise StorageError(f"{self.display_root} exists and is not a folder")
            self.fs.create_dir(self.root, recursive=True)
            self.write_text(probe, "probe")
            self.delete_file(probe)
        except StorageError:
            raise
        except Exception as error:
            raise StorageError(f"cannot write to {self.display_root}: {_plain(error)}") from None


def _write_local_atomic(path: str, write: Callable[[str], None]) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    _fsync_dir(directory)


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
    aside = f"{final}{OLD_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
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
        options.update(access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
                       session_token=env.get("AWS_SESSION_TOKEN"))
    return pafs.S3FileSystem(**options)


def _plain(error: BaseException) -> str:
    """An error's message without anything that looks like a credential."""
    text = f"{type(error).__name__}: {error}".strip()
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text.splitlines()[0] if text else type(error).__name__
