"""The commit of a run's final tables, all of them or none: staged under ``_staged/<run id>/``,
streamed tables planned into parts (a large shard's file taken over, runs of small ones written
anew, a grouped table merged value by value), then named in the manifest and moved into place.

Layout under ``OUT/<job>/``:

    <table>/part-NNNNN.parquet           a table streamed from the shards: a folder of parts
    <table>.parquet                      a table the driver builds whole (the Palago counts)
    _manifest.json                       the run that wrote the tables, and every part: written last
    NOT_A_TABLE.parquet                  makes a read of the whole folder fail, not mix tables
    _shards/<table>/<shard_id>.parquet   the shard store (shard_store.py): one file per table per shard
    _staged/<run id>/...                 a run's tables before they are moved into place

Nothing is written, moved or deleted through a symbolic link in the job folder (docs/faults.md,
"What stays inside the job folder").
"""

from __future__ import annotations

import json
import os
import posixpath
import queue
import re
import stat
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.arrow import to_numpy
from batchenum.pipeline.job import Job, TableSpec
from batchenum.pipeline.names import GUARD_NAME
from batchenum.pipeline.parquet_format import (
    PART_ROWS,
    ROW_GROUP_ROWS,
    STREAMED_ORDER,
    TAKEOVER_ROWS,
    StoreError,
    check_rising,
    decode_metadata,
    encode_metadata,
    key_columns,
    parquet_options,
    partition_column,
    partition_order,
    short_reason,
    table_schema,
    to_arrow,
)
from batchenum.pipeline.shard_store import SHARDS_DIR, ShardStore, is_file_name
from batchenum.pipeline.storage import TMP_MARK, Storage, link_refused
from batchenum.pipeline.table_merge import MERGE_DIR

__all__ = [
    "GUARD_FILE",
    "MANIFEST_FILE",
    "PartTask",
    "PlannedPart",
    "RemovedShards",
    "STAGED_DIR",
    "StagedPart",
    "StagedTables",
    "complete_commit",
    "final_params",
    "manifest_problem",
    "part_groups",
    "part_plan",
    "read_manifest",
    "remove_shards",
    "write_part",
]

# The record of the tables in place, written last (docs/design.md, "The tables"); underscored, so
# that no reader of a folder takes it for data.
MANIFEST_FILE = "_manifest.json"
MANIFEST_FORMAT = 1
# A run id (``StagedTables``) and a part's name as the store's own files give them (a table's or
# shard's name: ``is_file_name``): names read from a file in the folder are used only as these, so
# none leads outside.
_RUN_ID = re.compile(r"\d{8}T\d{6}-[0-9a-f]{8}")
_PART_NAME = re.compile(r"part-\d{5}\.parquet")
STAGED_DIR = "_staged"  # a run's final tables before they are moved into place
# Not Parquet, though named so: every reader that globs or walks the whole job folder (pandas,
# pyarrow.dataset, DuckDB, polars, Ray Data) opens it and fails, where it would otherwise mix the
# job's tables into one (a folder of answers and errors read as one table: rows with null columns).
GUARD_FILE = f"{GUARD_NAME}.parquet"  # no table may take this name (pipeline/names.py)
GUARD_TEXT = (
    "This file is not a table. It is here so that reading this whole folder as one dataset fails "
    "instead of mixing several tables. Read one table: <folder>/<table>/ (a folder of parts) or "
    "<folder>/<table>.parquet; the tables and their parts are listed in _manifest.json.\n"
)


@dataclass(frozen=True)
class StagedPart:
    """A part of a streamed table, staged: its path in the job folder, rows and bytes, the shards
    whose rows it holds, and its first and last keys (None for a grouped table or a part without
    rows), which the driver checks follow one another (``StagedTables.add_parts``)."""

    path: str
    rows: int
    bytes: int
    shards: list[str]
    first: tuple | None = None
    last: tuple | None = None

    def manifest_entry(self) -> dict[str, Any]:
        """What the manifest records of the part."""
        return {"path": self.path, "rows": self.rows, "bytes": self.bytes}


class StagedTables:
    """The final tables of one run, built from the committed shards of a ``ShardStore``.

    They are written under ``_staged/<run id>/`` (no reader looks there), then the manifest naming
    every part of every table, with the run's identity, is written with state "committing", each
    table is moved into place, and the manifest is marked "committed" (``commit``).  A finish killed
    before the manifest leaves the old tables; one killed after it is completed by the next run (or
    `batchenum cleanup`) before anything else: the new tables then, never a mix that a reader going
    through the manifest could see (docs/design.md, "The tables")."""

    def __init__(self, shards: ShardStore):
        """Begin writing a run's final tables, read from ``shards``, under a new run id (``run_id``),
        which the manifest will carry."""
        self.shards = shards
        self.storage = shards.storage
        self.job = shards.job
        self.provenance = shards.provenance
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        self._parts: dict[str, list[dict[str, Any]]] = {}
        self._side_files: list[str] = []
        self._folders = set(self.job.streamed_tables)  # tables staged as folders of parts

    def table_location(self, name: str) -> str:
        """Where table ``name`` lives in the job folder: a streamed table is a folder of parts
        (``answers/part-00000.parquet``...), as is a merged one (``leaves/``), a table the driver builds
        whole one file (``creature_counts.parquet``)."""
        return f"{name}/" if name in self._folders else f"{name}.parquet"

    def _staged(self, relative: str = "") -> str:
        return _staged_path(self.storage, self.run_id, relative)

    def write_final(self, name: str, frame: Any) -> str:
        """Stage a final table built by the driver (a pandas DataFrame, or a pyarrow Table, which
        needs no pandas); returns where it will be."""
        spec = self.job.table_spec(name)
        if isinstance(frame, pa.Table):
            columns = {column: frame.column(column).combine_chunks() for column in frame.column_names}
        else:
            columns = {c: frame[c].tolist() if frame[c].dtype == object else frame[c].to_numpy() for c in frame.columns}
        table = to_arrow(spec, columns)
        if spec.partition is not None:  # one file, its rows grouped by the partition column's values
            table = table.sort_by([(column, "ascending") for column in partition_order(spec)])
        table = table.replace_schema_metadata(encode_metadata(self.provenance.final_metadata(name)))
        location = self.table_location(name)
        path = self._staged(location)
        sizes = {}

        def write(local: str) -> None:
            pq.write_table(table, local, **parquet_options(spec))
            sizes["bytes"] = os.path.getsize(local)

        self.storage.write_atomic(path, write)
        self._parts[name] = [{"path": location, "rows": table.num_rows, "bytes": sizes["bytes"]}]
        return self.storage.uri(self.storage.join(location))

    def share_parts(self, name: str, paths: list[str], rows: list[int]) -> str:
        """Stage merged table ``name`` as a folder of the parts a merge wrote (table_merge.py), in
        order, each shared without a row read here (``Storage.share``); returns where it will be."""
        self._folders.add(name)
        entries = []
        for index, (source, count) in enumerate(zip(paths, rows)):
            location = f"{name}/part-{index:05d}.parquet"
            self.storage.share(source, self._staged(location))
            entries.append({"path": location, "rows": count, "bytes": self.storage.stat(source)[0]})
        self._parts[name] = entries
        return self.storage.uri(self.storage.join(self.table_location(name)))

    def committed(self, name: str, table: Any) -> Any:
        """Table ``name`` as it stands once committed (a ``LazyTable`` over the table's own parts)."""
        from batchenum.pipeline.lazy_table import LazyTable

        paths = [self.storage.join(part["path"]) for part in self._parts[name]]
        return LazyTable(
            name, self.storage, paths, [part["rows"] for part in self._parts[name]], self.table_location(name)
        )

    def write_side_file(self, name: str, text: str) -> None:
        """Stage a text file that is published beside the tables (``Job.side_files``); it is
        moved into place with them, after the manifest names it."""
        if not _plain_name(name):
            raise StoreError(f"internal error: a side file must be a plain name in the job folder, not {name!r}")
        self.storage.write_text(self._staged(name), text)
        self._side_files.append(name)

    def value_groups(self, name: str, shard_ids: list[str]) -> list[dict[Any, list[list[int]]]]:
        """The parts of grouped table ``name``, from its shards' footers alone: consecutive values of
        the partition column (in order) grouped into parts of at least ``PART_ROWS`` rows, each as
        {value: for each shard, its row groups holding that value} (``write_values`` writes one)."""
        spec = self.job.table_spec(name)
        paths = [self.shards.shard_path(name, shard_id) for shard_id in shard_ids]
        found, rows = _row_groups_by_value(paths, partition_column(spec), self.storage)
        groups: list[dict[Any, list[list[int]]]] = [{}]
        size = 0
        for value in sorted(found):
            if size >= PART_ROWS:
                groups.append({})
                size = 0
            groups[-1][value] = found[value]
            size += rows[value]
        return groups

    def write_part(self, name: str, index: int, shard_ids: list[str]) -> StagedPart:
        """Part ``index`` of streamed table ``name`` from a run of consecutive shards, their keys
        checked to rise strictly (``PartTask``: where Ray runs it, so that the driver never reads
        the rows); returns its path, rows, bytes and first and last keys (the driver checks that the
        parts follow one another)."""
        spec = self.job.table_spec(name)
        key = key_columns(spec)
        seen: dict[str, Any] = {}

        def batches() -> Iterator[pa.Table]:
            for part in self._in_shard_order(spec, shard_ids):
                if key and part.num_rows:
                    seen.setdefault("first", tuple(part.column(k)[0].as_py() for k in key))
                    seen["last"] = tuple(part.column(k)[-1].as_py() for k in key)
                yield part

        written = self._write_part_file(spec, index, batches())  # fills ``seen`` as it writes
        return StagedPart(**written, shards=shard_ids, first=seen.get("first"), last=seen.get("last"))

    def write_values(
        self, name: str, index: int, shard_ids: list[str], values: dict[Any, list[list[int]]]
    ) -> StagedPart:
        """Part ``index`` of grouped table ``name``: each of ``values`` (from ``value_groups``) read
        from every shard's row groups holding it, merged in ``sort`` order and checked for a
        repeated key (an error naming it, never a dropped row), in row groups of ``ROW_GROUP_ROWS``
        rows or more (``PartTask``: where Ray runs it, so that the driver reads no row); holds one
        value's rows at a time."""
        spec = self.job.table_spec(name)
        paths = [self.shards.shard_path(name, shard_id) for shard_id in shard_ids]
        batches = (
            batch
            for value in sorted(values)
            for batch in _merged_batches(self._read_partition(paths, values[value], spec), spec, value)
        )
        return StagedPart(**self._write_part_file(spec, index, batches), shards=shard_ids)

    def _write_part_file(self, spec: TableSpec, index: int, tables: Iterable[pa.Table]) -> dict[str, Any]:
        """``tables`` staged as part ``index`` of ``spec``'s table in row groups of ``ROW_GROUP_ROWS``
        rows or more (a part without rows is a footer alone, the columns still declared); returns
        its path, rows and bytes."""
        schema = table_schema(spec).with_metadata(encode_metadata(self.provenance.final_metadata(spec.name)))
        location = f"{spec.name}/part-{index:05d}.parquet"
        written = {"path": location, "rows": 0}

        def write(local: str) -> None:
            with pq.ParquetWriter(local, schema, **parquet_options(spec)) as writer:
                for group in _row_groups(_prefetched(tables), ROW_GROUP_ROWS):
                    writer.write_table(group.replace_schema_metadata(schema.metadata), row_group_size=group.num_rows)
                    written["rows"] += group.num_rows
            written["bytes"] = os.path.getsize(local)

        self.storage.write_atomic(self._staged(location), write)
        return written

    def take_over(self, name: str, index: int, shard_id: str) -> StagedPart:
        """Part ``index`` of streamed table ``name``: the committed file of shard ``shard_id`` itself,
        shared into the staged table (``Storage.share``: a hard link, or a server-side copy) without a
        row read here; returns what ``write_part`` returns, its keys from the shard's footer."""
        source = self.shards.shard_path(name, shard_id)
        with self.storage.open_input(source) as handle:
            footer = pq.ParquetFile(handle).metadata
        found = decode_metadata(footer.schema.to_arrow_schema().metadata)
        if footer.num_rows and ("first_key" not in found or "last_key" not in found):
            raise self.shards.damaged_error(source, "records no key range (first_key, last_key) for its rows")
        location = f"{name}/part-{index:05d}.parquet"
        self.storage.share(source, self._staged(location))
        first, last = (tuple(json.loads(found[k])) if k in found else None for k in ("first_key", "last_key"))
        return StagedPart(location, footer.num_rows, self.storage.stat(source)[0], [shard_id], first, last)

    def add_parts(self, name: str, parts: list[StagedPart]) -> str:
        """Record the parts that ``write_part`` wrote for table ``name``, after checking that each
        part's keys come after the previous part's (together with ``write_part``'s own check: the
        key rises strictly across the whole table, no row repeated or lost); returns where it will be."""
        spec = self.job.table_spec(name)
        key = key_columns(spec)
        last = None
        for part in parts:
            if key and part.first is not None:
                if last is not None and part.first <= last:
                    shown = part.first[0] if len(key) == 1 else part.first
                    raise StoreError(
                        f"table {name!r}: {'/'.join(key)} = {shown!r} in shards {part.shards[0]}.."
                        f"{part.shards[-1]} repeats or comes out of order; no table was written "
                        "(a bug: please report it)"
                    )
                last = part.last
        self._parts[name] = [part.manifest_entry() for part in parts]
        return self.storage.uri(self.storage.join(self.table_location(name)))

    def commit(self, identity: dict[str, Any]) -> dict[str, Any]:
        """Make the staged tables (and side files) the job's, all of them or (killed before the
        manifest) none; returns the manifest.  ``identity``: the run's job, parameters, code version and input."""
        manifest = {
            "format": MANIFEST_FORMAT,
            "run_id": self.run_id,
            **identity,
            "state": "committing",
            "tables": {
                name: {
                    "path": self.table_location(name),
                    "rows": sum(p["rows"] for p in parts),
                    "bytes": sum(p["bytes"] for p in parts),
                    "parts": parts,
                }
                for name, parts in self._parts.items()
            },
        }
        if self._side_files:
            manifest["files"] = sorted(self._side_files)
        _refuse_linked_targets(self.storage, manifest)  # before the manifest names this run
        faults.maybe_kill_before_commit()
        _write_guard(self.storage)
        _write_manifest(self.storage, manifest)
        return _install(self.storage, manifest)

    def _read_partition(self, paths: list[str], groups: list[list[int]], spec: TableSpec) -> pa.Table:
        """One partition's rows from every shard, one chunk per shard, each in ``sort`` order."""
        parts = []
        for path, indices in zip(paths, groups):
            if indices:
                part = self.shards.read_shard_file(path, spec.name, row_groups=indices)
                values = to_numpy(part.column(spec.partition))
                if len(values) and not (values == values[0]).all():  # the footer's statistics pointed elsewhere
                    raise self.shards.damaged_error(
                        path, f"is damaged (row groups {indices} do not hold one {spec.partition} value)"
                    )
                parts.append(part)
        return pa.concat_tables(parts).replace_schema_metadata(None) if parts else table_schema(spec).empty_table()

    def _in_shard_order(self, spec: TableSpec, shard_ids: list[str]) -> Iterator[pa.Table]:
        """Shard files in plan order, checking that the key rises strictly across the whole table: a
        duplicate or an out-of-order key is an error naming it and the shard."""
        key = key_columns(spec)
        last = None
        for shard_id in shard_ids:
            # not pq.read_table, which imports pandas (docs/design.md, "No pandas ...")
            part = self.shards.read_shard_file(
                self.shards.shard_path(spec.name, shard_id), spec.name
            ).replace_schema_metadata(None)
            if key and part.num_rows:
                last = check_rising([part.column(k) for k in key], last, spec.name, key, shard_id)
            yield part


def final_params(storage: Storage, job: Job) -> str | None:
    """The parameters (JSON) recorded in the job's final tables already in place, if any: from the
    manifest, else (tables of an older batchenum) from a table file's footer."""
    manifest = read_manifest(storage)
    if manifest is not None and "params" in manifest:
        return json.dumps(manifest["params"], sort_keys=True)
    for spec in job.tables:
        path = storage.join(f"{spec.name}.parquet")
        if spec.partition is None and storage.is_file(path):
            try:
                metadata = pq.read_schema(path, filesystem=storage.fs).metadata
            except Exception:  # an unreadable table is replaced, whatever made it
                continue
            return decode_metadata(metadata).get("params")
    return None


@dataclass(frozen=True)
class PartTask:
    """One task of the finish: part ``index`` of ``table`` from ``shard_ids``; of a grouped table,
    from the row groups ``values`` names (``value_groups``)."""

    staged: StagedTables
    table: str
    index: int
    shard_ids: tuple[str, ...]
    values: dict[Any, list[list[int]]] | None = None

    def __str__(self) -> str:
        if self.values is not None:
            shown = f"{min(self.values)}..{max(self.values)}" if self.values else "none"
            return f"{self.table} part {self.index} ({self.staged.job.table_spec(self.table).partition} {shown})"
        return f"{self.table} part {self.index} (shards {self.shard_ids[0]}..{self.shard_ids[-1]})"


def write_part(task: PartTask) -> StagedPart:
    """Run one ``PartTask`` (a module-level function, for Ray's workers)."""
    if task.values is not None:
        return task.staged.write_values(task.table, task.index, list(task.shard_ids), task.values)
    return task.staged.write_part(task.table, task.index, list(task.shard_ids))


def part_groups(shard_ids: list[str], rows: dict[str, int], part_rows: int | None = None) -> list[list[str]]:
    """Consecutive shards grouped into parts of at least ``part_rows`` rows (the last may have
    fewer; a table without rows is one part)."""
    part_rows = PART_ROWS if part_rows is None else part_rows
    groups, current, size = [], [], 0
    for shard_id in shard_ids:
        current.append(shard_id)
        size += rows.get(shard_id, 0)
        if size >= part_rows:
            groups.append(current)
            current, size = [], 0
    if current or not groups:
        if groups and not size:  # trailing empty shards join the last part
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


class PlannedPart(NamedTuple):
    """One part of a streamed table, as ``part_plan`` plans it."""

    taken_over: bool  # the one shard's file becomes the part as it is (``StagedTables.take_over``)
    shards: list[str]  # the consecutive shards whose rows it holds


def part_plan(
    shard_ids: list[str], rows: dict[str, int], part_rows: int | None = None, takeover_rows: int | None = None
) -> list[PlannedPart]:
    """A streamed table's parts from its consecutive shards: a shard of at
    least ``takeover_rows`` rows is a part by itself, its file taken over; each run of smaller shards
    between them is grouped into parts of ``part_rows`` rows or more (``part_groups``), written anew,
    and dropped if it holds no row.  A table without rows is one part written anew."""
    takeover_rows = TAKEOVER_ROWS if takeover_rows is None else takeover_rows
    plan: list[PlannedPart] = []
    run: list[str] = []
    for shard_id in [*shard_ids, None]:
        if shard_id is not None and rows.get(shard_id, 0) < takeover_rows:
            run.append(shard_id)
            continue
        if sum(rows.get(s, 0) for s in run):
            plan += [PlannedPart(False, group) for group in part_groups(run, rows, part_rows)]
        run = []
        if shard_id is not None:
            plan.append(PlannedPart(True, [shard_id]))
    return plan or [PlannedPart(False, list(shard_ids))]


def complete_commit(storage: Storage) -> str | None:
    """Finish the commit of a run killed while moving its tables into place, then delete staged
    tables no manifest names; returns the run id whose commit was completed, or None."""
    manifest = read_manifest(storage)
    completed = None
    storage.refuse_links(storage.join(STAGED_DIR))
    if manifest is not None and manifest.get("state") == "committing":
        _refuse_linked_targets(storage, manifest)
        _install(storage, manifest)
        completed = manifest["run_id"]
    storage.delete_dir(storage.join(STAGED_DIR))  # every run's staging: one run at a time holds the folder
    return completed


class RemovedShards(NamedTuple):
    """What ``remove_shards`` removed."""

    files: int
    bytes: int  # freed: on a disk, not those a table's part still holds by a hard link


def remove_shards(storage: Storage) -> RemovedShards:
    """Delete the shard store of a job folder whose tables are committed (completing an interrupted
    commit first), and the files of a merge an interruption left (``_merge/``); returns the files removed and bytes freed, counted as each file is removed.  The caller holds the folder's lease.
    A link anywhere in the shard store (LinkRefusedError naming it) removes nothing.  A rerun then
    finds no committed shard and computes every one again: never a stale table."""
    complete_commit(storage)
    manifest = read_manifest(storage)
    if manifest is None:
        raise StoreError(
            f"{storage.display_root} has no committed tables ({MANIFEST_FILE}): its shards are the only "
            "record of the work done, so they are kept. Run the job to the end first"
        )
    removed = [_remove_tree(storage, storage.join(folder)) for folder in (SHARDS_DIR, MERGE_DIR)]
    return RemovedShards(sum(files for files, _ in removed), sum(freed for _, freed in removed))


def _remove_tree(storage: Storage, folder: str) -> tuple[int, int]:
    """Delete a folder of the store (the shard store, or a merge an interruption left); returns the
    files removed and bytes freed."""
    storage.refuse_links(folder)
    if not storage.local:
        files = storage.list_files(folder)
        sizes = [storage.stat(path)[0] for path in files]
        for path in files:
            storage.delete_file(path)
        storage.delete_dir(folder)
        return len(files), sum(sizes)
    return _remove_local_tree(folder)


def _remove_local_tree(root: str) -> tuple[int, int]:
    """Delete a local folder of files and folders; refuses before removing anything when an entry is
    a link or neither a file nor a folder.  Returns (files removed, bytes freed): a file another name
    still holds by a hard link frees nothing."""
    if not os.path.lexists(root):
        return 0, 0
    files, folders = [], []
    for folder, dirs, names in os.walk(root, followlinks=False):
        folders.append(folder)
        for name in dirs + names:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise link_refused(path)
            if stat.S_ISREG(mode):
                files.append(path)
            elif not stat.S_ISDIR(mode):
                raise StoreError(
                    f"{path} is neither a file nor a folder, in the shard store: move it away and run "
                    "the same command again"
                )
    removed = freed = 0
    for path in files:
        found = os.lstat(path)
        os.unlink(path)
        removed += 1
        freed += found.st_size if found.st_nlink == 1 else 0
    for folder in reversed(folders):
        os.rmdir(folder)
    return removed, freed


def read_manifest(storage: Storage) -> dict[str, Any] | None:
    """The job folder's manifest (None when no run committed tables here); StoreError when damaged."""
    path = storage.join(MANIFEST_FILE)
    if not storage.exists(path):
        return None
    try:
        manifest = json.loads(storage.read_bytes(path))
    except (ValueError, UnicodeDecodeError, OSError) as error:
        raise StoreError(
            f"{storage.uri(path)} is damaged ({short_reason(error)}): delete it and run the same "
            "command again to write the tables anew"
        ) from None
    problem = manifest_problem(manifest)
    if problem:
        raise StoreError(
            f"{storage.uri(path)} is damaged ({problem}): delete it and run the same "
            "command again to write the tables anew"
        )
    return manifest


def _staged_path(storage: Storage, run_id: str, relative: str = "") -> str:
    """Where run ``run_id`` stages ``relative`` (a table's file or folder, a side file), or its whole
    staging folder."""
    return storage.join(STAGED_DIR, run_id, *([relative.rstrip("/")] if relative else []))


def _install(storage: Storage, manifest: dict[str, Any]) -> dict[str, Any]:
    """Move each staged table into place (a table already moved is skipped: this also finishes an
    interrupted commit), then mark the manifest committed."""
    for number, (name, table) in enumerate(sorted(manifest["tables"].items())):
        if number:
            faults.maybe_kill_between_tables()
        location = table["path"]
        staged = _staged_path(storage, manifest["run_id"], location)
        if not storage.exists(staged):  # moved into place before an interruption
            continue
        if location.endswith("/"):
            _install_folder(
                storage,
                staged,
                storage.join(location.rstrip("/")),
                {posixpath.basename(part["path"]) for part in table["parts"]},
            )
            storage.delete_file(storage.join(f"{name}.parquet"))  # the table as an older batchenum wrote it
        else:
            storage.move(staged, storage.join(location))
    for name in manifest.get("files", []):  # the side files (a Markdown rendering), after the tables
        staged = _staged_path(storage, manifest["run_id"], name)
        if storage.exists(staged):
            storage.move(staged, storage.join(name))
    storage.delete_dir(storage.join(STAGED_DIR))  # (one run at a time holds the folder)
    manifest = {**manifest, "state": "committed", "committed_at": round(time.time(), 3)}
    _write_manifest(storage, manifest)
    return manifest


def _install_folder(storage: Storage, staged: str, final: str, names: set[str]) -> None:
    """A folder table put in place: on a local disk by one atomic swap of folders; on an object
    store part by part (a server-side copy each), then the former parts the table lacks deleted."""
    if storage.local:
        storage.replace_folder(staged, final)
        return
    for path in storage.list_files(staged):
        storage.move(path, posixpath.join(final, posixpath.basename(path)))
    for path in storage.list_files(final):
        if posixpath.basename(path) not in names:
            storage.delete_file(path)
    storage.delete_dir(staged)


def _write_manifest(storage: Storage, manifest: dict[str, Any]) -> None:
    storage.write_text(storage.join(MANIFEST_FILE), json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _write_guard(storage: Storage) -> None:
    """The file that makes a read of the whole job folder fail loudly instead of mixing tables."""
    path = storage.join(GUARD_FILE)
    if not storage.is_file(path):
        storage.write_text(path, GUARD_TEXT)


def _row_groups_by_value(paths: list[str], column: str, storage: Storage) -> tuple[dict[Any, list[list[int]]], dict]:
    """{value of ``column``: for each shard file, the indices of its row groups holding that value},
    and {value: rows}, from the footers' statistics (``_write_grouped`` writes one row group per value)."""
    found: dict[Any, list[list[int]]] = {}
    rows: dict[Any, int] = {}
    for k, path in enumerate(paths):
        with storage.open_input(path) as handle:
            metadata = pq.ParquetFile(handle).metadata
        index = metadata.schema.to_arrow_schema().get_field_index(column)
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(index).statistics
            if metadata.row_group(group).num_rows == 0:
                continue
            if stats is None or not stats.has_min_max or stats.min != stats.max:
                raise StoreError(f"{storage.uri(path)}: row group {group} does not hold one {column} value")
            found.setdefault(stats.min, [[] for _ in paths])[k].append(group)
            rows[stats.min] = rows.get(stats.min, 0) + metadata.row_group(group).num_rows
    return found, rows


# Rows gathered and written at a time, one row group each: the sorted partition is never held twice.
_BATCH_ROWS = 1 << 17


def _merged_batches(body: pa.Table, spec: TableSpec, value: Any) -> Iterable[pa.Table]:
    """One partition's rows (one chunk per shard, each in ``sort`` order) in ``sort`` order, the
    partition column kept (a real column of the final table, the same type in every reader),
    ``_BATCH_ROWS`` at a time; keys checked unique as they go."""
    import pyarrow.compute as pc

    order = partition_order(spec)[1:]
    by_key = len(spec.key) == 1 and tuple(order[:1]) == spec.key
    if spec.key and not by_key:
        _check_unique(body, spec, value)
    if not body.num_rows:
        yield body
        return
    indices = pc.sort_indices(body, [(column, "ascending") for column in order]).to_numpy() if order else None
    last = None
    for start in range(0, body.num_rows, _BATCH_ROWS):
        if indices is not None:
            batch = _gather(body, indices[start : start + _BATCH_ROWS])
        else:
            batch = body.slice(start, _BATCH_ROWS)
        if by_key:
            last = _check_sorted_unique(batch.column(spec.key[0]), last, spec, value)
        yield batch


def _row_groups(tables: Iterable[pa.Table], rows: int) -> Iterator[pa.Table]:
    """``tables`` regrouped into tables of at least ``rows`` rows (the last may have fewer), each
    written as one row group: small shards make no small row groups."""
    pending, size = [], 0
    for table in tables:
        if not table.num_rows:
            continue
        pending.append(table)
        size += table.num_rows
        if size >= rows:
            yield pa.concat_tables(pending)
            pending, size = [], 0
    if pending:
        yield pa.concat_tables(pending)


def manifest_problem(manifest: Any) -> str | None:
    """Why ``manifest`` (the parsed ``_manifest.json``) is not one a run of ours wrote, or None."""
    if not isinstance(manifest, dict):
        return f"it holds a JSON {type(manifest).__name__}, not an object"
    if manifest.get("state") not in ("committing", "committed") or not isinstance(manifest.get("run_id"), str):
        return "it has no state or run id"
    if not _RUN_ID.fullmatch(manifest["run_id"]):
        return f"its run id {json.dumps(manifest['run_id'])[:60]} is not one batchenum makes"
    tables = manifest.get("tables")
    if not isinstance(tables, dict):
        return "its tables are not an object"
    for name, table in tables.items():
        problem = _table_entry_problem(name, table)
        if problem:
            return f"table {json.dumps(name)[:60]}: {problem}"
    files = manifest.get("files", [])
    if not (isinstance(files, list) and all(isinstance(name, str) and _plain_name(name) for name in files)):
        return "its side files are not a list of plain file names"
    return None


def _table_entry_problem(name: str, table: Any) -> str | None:
    """Why a manifest's entry for table ``name`` is not one a run of ours wrote: its path must be the
    table's own (``name/`` or ``name.parquet``) and its parts ``name/part-NNNNN.parquet`` (or the
    file itself), so that no name read from the manifest leads outside the table."""
    if not (
        isinstance(table, dict)
        and isinstance(table.get("path"), str)
        and isinstance(table.get("parts"), list)
        and all(isinstance(p, dict) and isinstance(p.get("path"), str) for p in table["parts"])
    ):
        return "not described by a path and its parts"
    if not is_file_name(name) or table["path"] not in (f"{name}/", f"{name}.parquet"):
        return f"its path {json.dumps(table['path'])[:60]} is not the table's own ({name}/ or {name}.parquet)"
    for part in table["parts"]:
        folder, _, file = part["path"].partition("/")
        own = (
            (folder == name and _PART_NAME.fullmatch(file))
            if table["path"].endswith("/")
            else part["path"] == table["path"]
        )
        if not own:
            return f"its part {json.dumps(part['path'])[:60]} is not in the table"
    return None


def _refuse_linked_targets(storage: Storage, manifest: dict[str, Any]) -> None:
    """LinkRefusedError naming the first place the commit of ``manifest`` would move into that is a
    link or reached through one: its staged tables and files, and the tables and files they replace."""
    names = [table["path"].rstrip("/") for table in manifest["tables"].values()] + list(manifest.get("files", []))
    for name in names:
        storage.refuse_links(_staged_path(storage, manifest["run_id"], name))
        storage.refuse_links(storage.join(name))


def _plain_name(name: str) -> bool:
    """Whether ``name`` can be a side file: a file directly in the job folder, none of ours."""
    return (
        bool(name)
        and posixpath.basename(name) == name
        and name not in (".", "..")
        and TMP_MARK not in name
        and not name.startswith("_")
    )


def _prefetched(items: Iterable, depth: int = 2) -> Iterator:
    """``items`` computed in a background thread, at most ``depth`` ahead of the consumer.  Arrow
    releases the GIL, so reading and merging the next batches overlaps compressing and writing this
    one (docs/design.md, "The finish reads ahead").  An exception in ``items``
    reaches the consumer; a consumer that stops early stops the thread."""
    ahead: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    threading.Thread(target=_produce, args=(items, ahead, stop), name="batchenum-merge", daemon=True).start()
    try:
        while True:
            item, error = ahead.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()


_END = object()  # what _produce puts last, with the error that ended it or None


def _produce(items: Iterable, ahead: queue.Queue, stop: threading.Event) -> None:
    """Put each of ``items`` on ``ahead`` (paired with None), then ``_END``, until ``stop`` is set."""
    try:
        for item in items:
            _put(ahead, stop, (item, None))
            if stop.is_set():
                return
        _put(ahead, stop, (_END, None))
    except BaseException as error:  # handed to the consumer
        _put(ahead, stop, (_END, error))


def _put(ahead: queue.Queue, stop: threading.Event, item: Any) -> None:
    """``ahead.put(item)``, giving up once ``stop`` is set (the consumer stopped reading)."""
    while not stop.is_set():
        try:
            ahead.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _gather(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """``table.take(indices)`` that copies only the rows the indices reach: from each chunk, the
    range between the smallest and largest index in it (a few rows per chunk when the chunks are
    sorted runs being merged).  A take over the whole chunked table concatenates all of it first,
    much slower on a large partition (docs/benchmarks.md#the-finish-merging-and-checking-keys)."""
    starts = np.cumsum([0, *(len(chunk) for chunk in table.column(0).chunks)])
    chunk = np.searchsorted(starts, indices, side="right") - 1
    pieces, local, size = [], np.empty_like(indices), 0
    for k in np.unique(chunk):
        mine = chunk == k
        low, high = int(indices[mine].min()), int(indices[mine].max())
        pieces.append(table.slice(low, high - low + 1))
        local[mine] = indices[mine] - low + size
        size += high - low + 1
    return pa.concat_tables(pieces).take(local)


def _check_unique(table: pa.Table, spec: TableSpec, partition_value: Any) -> None:
    """StoreError naming a key that appears twice in a partition (by counting values)."""
    import pyarrow.compute as pc

    counts = pc.value_counts(
        table.column(spec.key[0])
        if len(spec.key) == 1
        else pc.binary_join_element_wise(*[pc.cast(table.column(k), pa.string()) for k in spec.key], "\x1f")
    )
    repeated = counts.filter(pc.greater(counts.field("counts"), 1)).to_pylist()
    if repeated:
        raise _repeated(spec, partition_value, repeated[0]["values"])


def _check_sorted_unique(keys: pa.ChunkedArray, last: Any, spec: TableSpec, partition_value: Any) -> Any:
    """The last of a run of sorted keys, after checking that none equals its neighbour or ``last``
    (the previous run's last): far cheaper than counting values
    (docs/benchmarks.md#the-finish-merging-and-checking-keys)."""
    import pyarrow.compute as pc

    keys = keys.combine_chunks()
    if not len(keys):
        return last
    if last is not None and keys[0].as_py() == last:
        raise _repeated(spec, partition_value, last)
    same = pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    if pc.any(same).as_py():
        raise _repeated(spec, partition_value, keys[int(pc.index(same, True).as_py()) + 1].as_py())
    return keys[-1].as_py()


def _repeated(spec: TableSpec, partition_value: Any, key: Any) -> StoreError:
    return StoreError(
        f"table {spec.name!r}, {spec.partition} = {partition_value}: {'/'.join(spec.key)} "
        f"{key!r} appears more than once; no row is dropped silently, so no table was "
        f"written{STREAMED_ORDER}"
    )
