"""The shard store of one job folder (``OUT/<job>/_shards/<table>/<shard_id>.parquet``): each shard's
tables committed as files, checked before they are reused, read back for the finish; and the run's
plan (``_plan.json``), which ``batchenum status`` reads.

A shard is committed when every table it produces has a file whose provenance (job, code version,
parameters, shard id and spec, row count) matches the run, and all of them carry the same commit id
(one per ``write_shard``): the shard's tables count together or not at all, whatever stopped a writer
between two of them.  The committed files themselves are the record of finished work, not anything
the driver remembers.  Each file is committed whole onto its deterministic path (storage.py: rename
on a disk, one upload on an object store), so a killed writer leaves at most a temporary file, which
is never read as a result.  ``OUT`` is a local folder or any pyarrow.fs URI.

Nothing is written, moved or deleted through a symbolic link in the job folder, and only entries the
store named are removed as leftovers (docs/faults.md, "What stays inside the job folder").
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.arrow import to_numpy
from batchenum.pipeline.checkpoint import CHECKPOINTS
from batchenum.pipeline.job import Job, Shard, ShardOutput, TableSpec
from batchenum.pipeline.lease import LEASE_FILE
from batchenum.pipeline.parquet_format import (
    PART_ROWS,
    ROW_GROUP_ROWS,
    SHARD_ROW_GROUP_ROWS,
    DamagedFileError,
    Provenance,
    StoreError,
    _check_rising,
    _decode_metadata,
    _encode_metadata,
    _key_columns,
    _parquet_options,
    _partition_column,
    _partition_order,
    _reason,
    _schema,
    _stats,
    read_verified,
    to_arrow,
)
from batchenum.pipeline.storage import TMP_MARK, Storage, StorageUnavailableError, is_temporary
from batchenum.pipeline.table_commit import (
    _NAME,
    MANIFEST_FORMAT,
    _install,
    _merged_batches,
    _plain_name,
    _prefetched,
    _refuse_linked_targets,
    _row_groups,
    _row_groups_by_value,
    _staged_path,
    _write_guard,
    _write_manifest,
    read_manifest,
)

__all__ = ["NOT_TOGETHER", "OTHER_PARAMETERS", "PLAN_FILE", "SHARDS_DIR", "ShardStore", "plan_problem"]

# How check_shard's answer starts when a shard was committed by a run with other parameters: not
# damage, just another run's work.
OTHER_PARAMETERS = "committed with other parameters"
# How check_shard's answer starts when a shard's tables carry different commits: a writer stopped
# between two of them (killed, a full or read-only folder); not damage, an unfinished commit.
NOT_TOGETHER = "its tables were not committed together"
PLAN_FILE = "_plan.json"
# The lease's own scratch file (lease.py, ``_create_exclusively``), left by a writer killed there.
_LEASE_SCRATCH = re.compile(re.escape(LEASE_FILE + TMP_MARK) + "[0-9a-f]{32}")
SHARDS_DIR = "_shards"  # the shard store: committed shard files, outside every table's folder


def plan_problem(plan: Any) -> str | None:
    """Why ``plan`` (the parsed ``_plan.json``) is not a plan a run of ours wrote, or None."""
    if not isinstance(plan, dict):
        return f"it holds a JSON {type(plan).__name__}, not an object"
    for key in ("shards", "tables"):
        value = plan.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) and _NAME.fullmatch(item) for item in value):
            return f"its {key} are not a list of plain names"
    for key in ("started_at",):
        value = plan.get(key)
        if value is not None and (
            not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1e11
        ):
            return f"its {key} is {json.dumps(value)[:40]}"
    if "shards" not in plan:
        return "it has no shards"
    return None


class ShardStore:
    """Committed shard files and final tables of one job under ``<out>/<job>`` (any Storage)."""

    def __init__(self, out: Storage, job: Job, provenance: Provenance):
        self.storage = out.child(job.name)
        self.job = job
        self.provenance = provenance

    @property
    def where(self) -> str:
        """The job folder as people type it (a path or a URI)."""
        return self.storage.display_root

    # ------------------------------------------------------------------------------------ shards

    def shard_path(self, table: str, shard_id: str) -> str:
        return self.storage.join(SHARDS_DIR, table, f"{shard_id}.parquet")

    def write_shard(self, shard: Shard, outputs: ShardOutput, stats: dict[str, Any] | None = None) -> dict[str, int]:
        """Commit one shard's outputs; returns rows per table.  ``stats`` (where and how long it ran,
        records read) is recorded beside the provenance, not checked by it.  Every table's file
        records the same new commit id: until the last of them is in place the shard's files carry two
        ids and the shard counts as not committed (``check_shard``), so a failure between two tables
        never leaves a shard that is half old, half new."""
        rows = {}
        # one id in every table's footer: the shard counts only when all of them carry the same one
        extra = {"stats": json.dumps(stats or {}, sort_keys=True), "commit": uuid.uuid4().hex}
        for number, (name, columns) in enumerate(outputs.items()):
            if number:
                faults.between_shard_tables(shard.id)
            spec = self.job.table_spec(name)
            table = to_arrow(spec, columns)
            keys = self._key_range(spec, table, shard.id) if name in self.job.streamed_tables else {}
            meta = _encode_metadata({**self.provenance.shard_metadata(shard, name, table.num_rows), **extra, **keys})
            table = table.replace_schema_metadata(meta)
            if spec.partition is None:
                self._write_parquet(table, spec, self.shard_path(name, shard.id))
            else:
                self._write_grouped(table, spec, self.shard_path(name, shard.id))
            rows[name] = table.num_rows
        return rows

    @staticmethod
    def _key_range(spec: TableSpec, table: pa.Table, shard_id: str) -> dict[str, str]:
        """A streamed table's first and last keys, recorded in the shard's footer after checking that
        the key rises strictly through the shard (so that the finish can take the file over as a
        part, checking the order across parts from footers alone); nothing for a grouped table or
        one without rows."""
        key = _key_columns(spec)
        if spec.partition is not None or not key or not table.num_rows:
            return {}
        last = _check_rising([table.column(k) for k in key], None, spec.name, key, shard_id)
        first = tuple(table.column(k)[0].as_py() for k in key)
        return {"first_key": json.dumps(first), "last_key": json.dumps(last)}

    def check_shard(self, shard: Shard, tables: Iterable[str], full: bool = True) -> str | None:
        """None when every table of the shard is committed with matching provenance; otherwise
        why not ("missing" when it simply was never written).  ``full`` reads every page and checks
        its checksum (before reusing a shard); otherwise only the footer is read (a shard this run
        has just committed, whose pages the merge reads, and checks, anyway)."""
        return self._inspect(shard, tables, full)[0]

    def committed_footers(self, shard: Shard, tables: Iterable[str]) -> tuple[str | None, dict[str, int], dict]:
        """``check_shard(shard, tables, full=False)`` with what the same footer reads also tell: the
        rows of each table and the stats the shard recorded (one read per file, not three)."""
        return self._inspect(shard, tables, full=False)

    def _inspect(self, shard: Shard, tables: Iterable[str], full: bool) -> tuple[str | None, dict[str, int], dict]:
        """(problem or None, {table: rows}, the stats recorded with the first table)."""
        rows: dict[str, int] = {}
        stats = None
        commits: dict[str, str | None] = {}
        for name in tables:
            path = self.shard_path(name, shard.id)
            self.storage.refuse_links(path)
            kind = self.storage.kind(path)
            if kind == "missing":
                return "missing", {}, {}
            if kind != "file":  # not ours to delete: it may hold someone's files
                raise StoreError(
                    f"{self.storage.uri(path)} is a {kind} where a shard file belongs (batchenum never "
                    "makes one there): move it away and run the same command again"
                )
            problem, rows[name], found = self._check_file(path, shard, name, full)
            if problem:
                problem = (
                    problem if problem.startswith(OTHER_PARAMETERS) else f"{self.storage.relative(path)}: {problem}"
                )
                return problem, {}, {}
            if stats is None:
                stats = _stats(found)
                if stats is None:
                    return f"{self.storage.relative(path)}: its recorded stats are unreadable", {}, {}
            commits[name] = found.get("commit")
        if len(set(commits.values())) > 1 or None in commits.values():
            shown = ", ".join(f"{name} {commit or 'none'}" for name, commit in commits.items())
            return f"{NOT_TOGETHER} (commits {shown}): a writer stopped between them", {}, {}
        return None, rows, stats or {}

    def write_plan(self, shards: list[Shard], run: dict[str, Any]) -> None:
        """Record the plan when a run starts (``_plan.json``), so that ``batchenum status`` knows the
        total while the run is in progress, from anywhere that reaches the folder."""
        record = {
            "job": self.provenance.job,
            "version": self.provenance.version,
            "params": self.provenance.params,
            "shards": [shard.id for shard in shards],
            "tables": list(self.job.shard_tables or [t.name for t in self.job.tables]),
            **run,
        }
        path = self.storage.join(PLAN_FILE)
        if self.storage.exists(path) and not self.storage.is_file(path):
            raise StoreError(
                f"{self.storage.uri(path)} is a folder where the run's plan belongs (batchenum never "
                "makes one there): move it away and run the same command again"
            )
        self.storage.write_text(path, json.dumps(record, sort_keys=True) + "\n")

    def final_params(self) -> str | None:
        """The parameters (JSON) recorded in the job's final tables already in place, if any: from the
        manifest, else (tables of an older batchenum) from a table file's footer."""
        manifest = read_manifest(self.storage)
        if manifest is not None and "params" in manifest:
            return json.dumps(manifest["params"], sort_keys=True)
        for spec in self.job.tables:
            path = self.storage.join(f"{spec.name}.parquet")
            if spec.partition is None and self.storage.is_file(path):
                try:
                    metadata = pq.read_schema(path, filesystem=self.storage.fs).metadata
                except Exception:  # an unreadable table is replaced, whatever made it
                    continue
                return _decode_metadata(metadata).get("params")
        return None

    def _check_file(self, path: str, shard: Shard, name: str, full: bool = True) -> tuple[str | None, int, dict]:
        """(problem or None, rows, the decoded metadata) of one committed shard file."""
        spec = self.job.table_spec(name)
        try:
            with self.storage.open_input(path) as handle:
                if full:
                    table = read_verified(handle)
                    schema, rows = table.schema, table.num_rows
                    problem = _grouping_problem(handle, table, spec)
                    if problem:
                        return problem, 0, {}
                else:
                    footer = pq.ParquetFile(handle).metadata
                    schema, rows = footer.schema.to_arrow_schema(), footer.num_rows
                    if rows != sum(footer.row_group(k).num_rows for k in range(footer.num_row_groups)):
                        return "damaged (its footer's row counts disagree)", 0, {}
        except DamagedFileError as error:
            return str(error).removeprefix("a Parquet file is "), 0, {}
        except StorageUnavailableError:  # the store, not the file
            raise
        except Exception as error:  # any failure to read means the file cannot be trusted
            return f"unreadable ({type(error).__name__}: {_reason(error)})", 0, {}
        found = _decode_metadata(schema.metadata)
        return self._provenance_problem(found, schema, rows, shard, name), rows, found

    def _provenance_problem(self, found: dict, schema: pa.Schema, rows: int, shard: Shard, name: str) -> str | None:
        expected = self.provenance.shard_metadata(shard, name, rows)
        if found.get("job") == expected["job"] and found.get("params") != expected["params"]:
            return f"{OTHER_PARAMETERS} ({found.get('params')})"
        for key in ("job", "code", "params", "table", "shard", "shard_spec"):
            if found.get(key) != expected[key]:
                return f"provenance does not match ({key}: found {found.get(key)!r}, expected {expected[key]!r})"
        if found.get("rows") != str(rows):
            return f"row count {rows} does not match the {found.get('rows')} recorded"
        spec = self.job.table_spec(name)
        if schema.remove_metadata() != _schema(spec):
            return "columns do not match the table's declaration"
        return None

    def shard_stats(self, table: str, shard_id: str) -> dict[str, Any]:
        """What a committed shard recorded about its run (node, seconds, records read)."""
        metadata = pq.read_schema(self.shard_path(table, shard_id), filesystem=self.storage.fs).metadata
        return _stats(_decode_metadata(metadata)) or {}

    def read_shard_tables(self, shard: Shard) -> dict[str, pa.Table]:
        """Every committed table of one shard (for a job that redoes only some of its records)."""
        tables = self.job.shard_tables or [spec.name for spec in self.job.tables]
        return {
            name: self._read_shard_file(self.shard_path(name, shard.id), name).replace_schema_metadata(None)
            for name in tables
        }

    def recorded_stats(self, shard: Shard) -> dict[str, Any]:
        """The stats of a committed shard's first table ({} when it cannot be read)."""
        try:
            return self.shard_stats(
                self.job.shard_tables[0] if self.job.shard_tables else self.job.tables[0].name, shard.id
            )
        except Exception:  # damaged or gone since it was checked: it is then computed again
            return {}

    def _read_shard_file(self, path: str, name: str, row_groups: list[int] | None = None) -> pa.Table:
        """A committed shard file read for the finish, every check of ``read_verified`` made; a
        damaged or vanished file is one StoreError naming it, raised before any table is written."""
        try:
            self.storage.refuse_links(path)
            with self.storage.open_input(path) as handle:
                return read_verified(
                    handle, _schema(self.job.table_spec(name)), row_groups=row_groups, where=self.storage.uri(path)
                )
        except DamagedFileError as error:
            raise self._damaged(path, str(error).removeprefix(f"{self.storage.uri(path)} ")) from None
        except (OSError, pa.ArrowException) as error:  # gone or unreachable since it was checked
            raise self._damaged(path, f"cannot be read: {_reason(error)}") from None

    def _damaged(self, path: str, why: str) -> StoreError:
        return DamagedFileError(
            f"shard file {self.storage.uri(path)} {why}; no table was written. Run the same command "
            "again: it checks every committed shard, recomputes this one and reuses the rest"
        )

    def remove_temporaries(self) -> int:
        """Put back a folder table that a crash left moved aside (``Storage.restore_folder``), then
        delete the temporary files and folders of killed writers; returns how many.  Only entries
        named as the store names its temporaries (``is_temporary``), in the folders where it writes
        them (the job folder, ``_shards/<table>/``, ``_checkpoints/``), each checked to be a regular
        file (a real folder for one moved aside) reached without a link: never a pattern over a whole
        path, never anything through a link (LinkRefusedError naming it)."""
        for name in self.job.streamed_tables:
            self.storage.restore_folder(self.storage.join(name))
        leftovers = [
            path
            for folder in self._writing_folders()
            for path in self._entries(folder)
            if self._is_leftover(folder, posixpath.basename(path.replace(os.sep, "/")))
        ]
        for path in leftovers:
            if self.storage.kind(path) == "folder":
                self.storage.delete_dir(path)  # a folder table moved aside, its successor in place
            else:
                self.storage.delete_file(path)
        return len(leftovers)

    def _writing_folders(self) -> list[str]:
        """The folders where the store writes files under temporary names (``_staged`` is removed
        whole by ``complete_commit``)."""
        shards = self.storage.join(SHARDS_DIR)
        tables = [self.storage.join(SHARDS_DIR, name) for name in self._entries(shards, folders=True)]
        return [self.storage.root, shards, *tables, self.storage.join(CHECKPOINTS)]

    def _entries(self, folder: str, folders: bool = False) -> list[str]:
        """The paths directly in ``folder`` (only its subfolders' names with ``folders``), [] when
        it does not exist; LinkRefusedError when ``folder`` is a link or reached through one."""
        self.storage.refuse_links(folder)
        if self.storage.local:
            if self.storage.kind(folder) != "folder":
                return []
            with os.scandir(folder) as found:
                return sorted(
                    entry.name if folders else entry.path
                    for entry in found
                    if not folders or entry.is_dir(follow_symlinks=False)
                )
        if folders:
            return [posixpath.basename(path) for path in self.storage.list_dirs(folder)]
        return self.storage.list_files(folder, recursive=False)

    def _is_leftover(self, folder: str, name: str) -> bool:
        """Whether entry ``name`` of ``folder`` is a temporary the store or the lease names so."""
        return is_temporary(name) or (folder == self.storage.root and _LEASE_SCRATCH.fullmatch(name) is not None)

    def read_shards(self, name: str, shard_ids: list[str]) -> pa.Table:
        """Concatenate one table's committed shard files, in the given shard order.  Every file must
        be there: a missing one is an error, never skipped."""
        spec = self.job.table_spec(name)
        parts = [
            self._read_shard_file(self.shard_path(name, shard_id), name).replace_schema_metadata(None)
            for shard_id in shard_ids
        ]
        if not parts:
            return _schema(spec).empty_table()
        return pa.concat_tables(parts)

    # ------------------------------------------------------------------------------ final tables
    #
    # A run's final tables are written under _staged/<run id>/ (no reader looks there), then the
    # manifest naming every part of every table, with the run's identity, is written with state
    # "committing", each table is moved into place, and the manifest is marked "committed".  A
    # finish killed before the manifest leaves the old tables; one killed after it is completed by
    # the next run (or `batchenum cleanup`) before anything else: the new tables then, never a mix
    # that a reader going through the manifest could see (docs/design.md, "The tables").

    def table_location(self, name: str) -> str:
        """Where table ``name`` lives in the job folder: a streamed table is a folder of parts
        (``answers/part-00000.parquet``...), a table the driver builds whole one file (``creature_counts.parquet``)."""
        return f"{name}/" if name in self.job.streamed_tables else f"{name}.parquet"

    def start_tables(self) -> str:
        """Begin writing a run's final tables; returns the run id the manifest will carry."""
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        self._parts: dict[str, list[dict[str, Any]]] = {}
        self._side_files: list[str] = []
        return self.run_id

    def _staged(self, relative: str = "") -> str:
        return _staged_path(self.storage, self.run_id, relative)

    def write_final(self, name: str, frame: Any) -> str:
        """Stage a final table built by the driver (a pandas DataFrame); returns where it will be."""
        spec = self.job.table_spec(name)
        table = to_arrow(
            spec, {c: frame[c].tolist() if frame[c].dtype == object else frame[c].to_numpy() for c in frame.columns}
        )
        if spec.partition is not None:  # one file, its rows grouped by the partition column's values
            table = table.sort_by([(column, "ascending") for column in _partition_order(spec)])
        table = table.replace_schema_metadata(_encode_metadata(self.provenance.final_metadata(name)))
        location = self.table_location(name)
        path = self._staged(location)
        sizes = {}

        def write(local: str) -> None:
            pq.write_table(table, local, **_parquet_options(spec))
            sizes["bytes"] = os.path.getsize(local)

        self.storage.write_atomic(path, write)
        self._parts[name] = [{"path": location, "rows": table.num_rows, "bytes": sizes["bytes"]}]
        return self.storage.uri(self.storage.join(location))

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
        paths = [self.shard_path(name, shard_id) for shard_id in shard_ids]
        found, rows = _row_groups_by_value(paths, _partition_column(spec), self.storage)
        groups: list[dict[Any, list[list[int]]]] = [{}]
        size = 0
        for value in sorted(found):
            if size >= PART_ROWS:
                groups.append({})
                size = 0
            groups[-1][value] = found[value]
            size += rows[value]
        return groups

    def write_part(self, name: str, index: int, shard_ids: list[str]) -> dict[str, Any]:
        """Part ``index`` of streamed table ``name`` from a run of consecutive shards, their keys
        checked to rise strictly (``PartTask``: where Ray runs it, so that the driver never reads
        the rows); returns its path, rows, bytes and first and last keys (the driver checks that the
        parts follow one another)."""
        spec = self.job.table_spec(name)
        key = _key_columns(spec)
        seen: dict[str, Any] = {}

        def batches() -> Iterator[pa.Table]:
            for part in self._in_shard_order(spec, shard_ids):
                if key and part.num_rows:
                    seen.setdefault("first", tuple(part.column(k)[0].as_py() for k in key))
                    seen["last"] = tuple(part.column(k)[-1].as_py() for k in key)
                yield part

        return {
            **self._write_part_file(spec, index, batches()),
            "first": seen.get("first"),
            "last": seen.get("last"),
            "shards": shard_ids,
        }

    def write_values(
        self, name: str, index: int, shard_ids: list[str], values: dict[Any, list[list[int]]]
    ) -> dict[str, Any]:
        """Part ``index`` of grouped table ``name``: each of ``values`` (from ``value_groups``) read
        from every shard's row groups holding it, merged in ``sort`` order and checked for a
        repeated key (an error naming it, never a dropped row), in row groups of ``ROW_GROUP_ROWS``
        rows or more (``PartTask``: where Ray runs it, so that the driver reads no row); holds one
        value's rows at a time."""
        spec = self.job.table_spec(name)
        paths = [self.shard_path(name, shard_id) for shard_id in shard_ids]
        batches = (
            batch
            for value in sorted(values)
            for batch in _merged_batches(self._read_partition(paths, values[value], spec), spec, value)
        )
        return {**self._write_part_file(spec, index, batches), "first": None, "last": None, "shards": shard_ids}

    def _write_part_file(self, spec: TableSpec, index: int, tables: Iterable[pa.Table]) -> dict[str, Any]:
        """``tables`` staged as part ``index`` of ``spec``'s table in row groups of ``ROW_GROUP_ROWS``
        rows or more (a part without rows is a footer alone, the columns still declared); returns
        its path, rows and bytes."""
        schema = _schema(spec).with_metadata(_encode_metadata(self.provenance.final_metadata(spec.name)))
        location = f"{spec.name}/part-{index:05d}.parquet"
        written = {"path": location, "rows": 0}

        def write(local: str) -> None:
            with pq.ParquetWriter(local, schema, **_parquet_options(spec)) as writer:
                for group in _row_groups(_prefetched(tables), ROW_GROUP_ROWS):
                    writer.write_table(group.replace_schema_metadata(schema.metadata), row_group_size=group.num_rows)
                    written["rows"] += group.num_rows
            written["bytes"] = os.path.getsize(local)

        self.storage.write_atomic(self._staged(location), write)
        return written

    def take_over(self, name: str, index: int, shard_id: str) -> dict[str, Any]:
        """Part ``index`` of streamed table ``name``: the committed file of shard ``shard_id`` itself,
        shared into the staged table (``Storage.share``: a hard link, or a server-side copy) without a
        row read here; returns what ``write_part`` returns, its keys from the shard's footer."""
        source = self.shard_path(name, shard_id)
        with self.storage.open_input(source) as handle:
            footer = pq.ParquetFile(handle).metadata
        found = _decode_metadata(footer.schema.to_arrow_schema().metadata)
        if footer.num_rows and ("first_key" not in found or "last_key" not in found):
            raise self._damaged(source, "records no key range (first_key, last_key) for its rows")
        location = f"{name}/part-{index:05d}.parquet"
        self.storage.share(source, self._staged(location))
        first, last = (tuple(json.loads(found[k])) if k in found else None for k in ("first_key", "last_key"))
        return {
            "path": location,
            "rows": footer.num_rows,
            "bytes": self.storage.stat(source)[0],
            "first": first,
            "last": last,
            "shards": [shard_id],
        }

    def add_parts(self, name: str, parts: list[dict[str, Any]]) -> str:
        """Record the parts that ``write_part`` wrote for table ``name``, after checking that each
        part's keys come after the previous part's (together with ``write_part``'s own check: the
        key rises strictly across the whole table, no row repeated or lost); returns where it will be."""
        spec = self.job.table_spec(name)
        key = _key_columns(spec)
        last = None
        for part in parts:
            if key and part["first"] is not None:
                if last is not None and part["first"] <= last:
                    shown = part["first"][0] if len(key) == 1 else part["first"]
                    raise StoreError(
                        f"table {name!r}: {'/'.join(key)} = {shown!r} in shards {part['shards'][0]}.."
                        f"{part['shards'][-1]} repeats or comes out of order; no table was written "
                        "(a bug: please report it)"
                    )
                last = part["last"]
        self._parts[name] = [{k: part[k] for k in ("path", "rows", "bytes")} for part in parts]
        return self.storage.uri(self.storage.join(self.table_location(name)))

    def commit_tables(self, identity: dict[str, Any]) -> dict[str, Any]:
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
                part = self._read_shard_file(path, spec.name, row_groups=indices)
                values = to_numpy(part.column(spec.partition))
                if len(values) and not (values == values[0]).all():  # the footer's statistics pointed elsewhere
                    raise self._damaged(
                        path, f"is damaged (row groups {indices} do not hold one {spec.partition} value)"
                    )
                parts.append(part)
        return pa.concat_tables(parts).replace_schema_metadata(None) if parts else _schema(spec).empty_table()

    def _in_shard_order(self, spec: TableSpec, shard_ids: list[str]) -> Iterator[pa.Table]:
        """Shard files in plan order, checking that the key rises strictly across the whole table: a
        duplicate or an out-of-order key is an error naming it and the shard."""
        key = _key_columns(spec)
        last = None
        for shard_id in shard_ids:
            # not pq.read_table, which imports pandas (docs/design.md, "No pandas ...")
            part = self._read_shard_file(self.shard_path(spec.name, shard_id), spec.name).replace_schema_metadata(None)
            if key and part.num_rows:
                last = _check_rising([part.column(k) for k in key], last, spec.name, key, shard_id)
            yield part

    def _write_grouped(self, table: pa.Table, spec: TableSpec, path: str) -> None:
        """A shard of a partitioned table: one row group per value of the partition column, its rows
        in ``sort`` order, so that the finish reads each shard's rows once (row-group statistics
        point at them) and merges sorted runs instead of sorting."""
        table = table.sort_by([(column, "ascending") for column in _partition_order(spec)])
        values = table.column(spec.partition).to_numpy()
        bounds = [0, *(int(i) + 1 for i in (values[1:] != values[:-1]).nonzero()[0]), len(values)]

        def write(local: str) -> None:
            # lz4: these files are read once, by the finish, which reads them faster than zstd files
            # for more bytes (docs/design.md, "The finish reads ahead")
            with pq.ParquetWriter(local, table.schema, **_parquet_options(spec, compression="lz4")) as writer:
                for start, stop in zip(bounds, bounds[1:]):
                    writer.write_table(table.slice(start, stop - start))
                if not len(values):
                    writer.write_table(table)

        self.storage.write_atomic(path, write)

    def _write_parquet(self, table: pa.Table, spec: TableSpec, path: str) -> None:
        self.storage.write_atomic(
            path,
            lambda local: pq.write_table(table, local, row_group_size=SHARD_ROW_GROUP_ROWS, **_parquet_options(spec)),
        )


def _grouping_problem(handle: Any, table: pa.Table, spec: TableSpec) -> str | None:
    """For a shard of a partitioned table: whether each row group's statistics (which the finish
    follows, and which no checksum covers) name the one partition value its rows hold."""
    if spec.partition is None:
        return None
    metadata = pq.ParquetFile(handle).metadata
    index = table.schema.get_field_index(spec.partition)
    values = to_numpy(table.column(spec.partition))
    start = 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        mine = values[start : start + rows]
        start += rows
        if not rows:
            continue
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max or not (stats.min == stats.max and (mine == stats.min).all()):
            return f"damaged (row group {group}'s statistics do not match its {spec.partition} values)"
    return None
