"""Generic record input: split a JSONL or Parquet file into slices, read one slice as records.

A record is one JSON object per line (JSONL) or one row (Parquet) with an ``id`` and a payload
field.  Nothing here knows what the payload means: readable payloads are handed over as plain
Python values, and every record that cannot be read is still accounted for with a plain reason.
A job that can validate payloads in bulk may first ask ``read_slice_arrow`` for the whole slice
as Arrow buffers, and fall back to ``read_slice`` when it declines.

The line-by-line reader (``json.loads``) is the reference: the pyarrow fast path is used only for
slices it reads exactly the same way, so that a record's verdict depends neither on the reader nor
on the records sharing its slice.  JSONL must be UTF-8 without unpaired surrogate escapes; a byte
order mark is skipped at the very start of the file only; lines nested deeper than ``MAX_DEPTH`` or
with a number longer than ``MAX_NUMBER_DIGITS`` digits are rejected.

Planning a JSONL file never parses it: newlines are counted per block (``BLOCK`` bytes), in
parallel for a large file when the caller lends a parallel map, and slices are cut from the counts;
each slice's reader then finds its exact cuts in the one byte range it reads.  ``load_slice`` reads
a slice once, with its checksum, for the readers to share.

    >>> specs = plan_slices("batch.jsonl", "grid", records_per_slice=25_000)   # doctest: +SKIP
    >>> records = read_slice(load_slice(specs[0]), "grid")                      # doctest: +SKIP
"""

from __future__ import annotations

import decimal
import hashlib
import io
import json
import re
from dataclasses import dataclass, field as dataclass_field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from numba import njit

from pipeline import faults
from pipeline.arrow import to_numpy
from pipeline.errors import InputError
from pipeline.job import PlanContext
from pipeline.jsonl_strict import read_id_and_strings
from pipeline.storage import Storage, StorageError

__all__ = [
    "RecordSlice",
    "ArrowSlice",
    "LoadedSlice",
    "load_slice",
    "plan_slices",
    "count_block_newlines",
    "BlockRange",
    "BLOCK",
    "read_slice",
    "read_slice_arrow",
    "string_list_buffers",
    "describe_input",
    "input_storage",
    "plain_reason",
    "slice_fingerprint",
    "InputError",
    "MAX_DEPTH",
    "MAX_NUMBER_DIGITS",
]

_PARQUET_MAGIC = b"PAR1"
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines", ".json")
# JSONL planning: newlines are counted per block of BLOCK bytes, TASK_BLOCKS blocks per counting task
# (128 MiB: 100 GB is about 800 tasks, and the driver keeps one int per block); an input of at most
# DRIVER_BYTES is counted by the driver itself, since starting tasks would cost it more.  When the
# tasks' workers are not up yet (a private local Ray, not started), counting with tasks would first
# cost Ray's start-up and the head start, while the driver counts about 1 GB/s: the driver counts
# inputs of up to STARTUP_BYTES itself then.
BLOCK = 1 << 20
TASK_BLOCKS = 128
DRIVER_BYTES = 64 << 20
STARTUP_BYTES = 4 << 30
_COUNT_READ = 1 << 24  # bytes read at a time when counting
_ARROW_BLOCK = 1 << 24  # pyarrow.json block size; a longer line makes the fast path fall back
_STRINGS = pa.list_(pa.string())  # a payload type that jsonl_strict reads itself
_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark: skipped at the very start of a JSONL file only
# Compressed files are recognised by their first bytes and refused with a message saying so.
_COMPRESSED_MAGIC = (
    (b"\x1f\x8b", "gzip", "gunzip"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
    (b"BZh", "bzip2", "bunzip2"),  # followed by a block size digit and the block magic, checked below
    (b"\xfd7zXZ\x00", "xz", "unxz"),
    (b"PK\x03\x04", "zip", "unzip"),
)
# A JSONL line is rejected when it nests arrays and objects deeper than MAX_DEPTH or holds a number
# of more than MAX_NUMBER_DIGITS digits: records never need either, and json.loads could not read
# them the same way everywhere (its recursion limit depends on the caller's stack, its integer
# limit on PYTHONINTMAXSTRDIGITS, which cannot be set below 640), while pyarrow reads both; so both
# readers refuse them up front.
MAX_DEPTH = 64
MAX_NUMBER_DIGITS = 640
_REASON_CHARS = 300  # reasons longer than this are cut (they never echo a whole record)
_BZIP2_BLOCK = re.compile(rb"[1-9](1AY&SY|\x17rE8P\x90)")  # block size, then a block or the end of stream
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclass
class RecordSlice:
    """The records of one slice, in file order; the four lists have one entry per record.

    positions:      1-based line number (JSONL) or row number (Parquet) of each record.
    ids:            the record's id as a string (integer ids converted), None if missing/invalid.
    values:         the payload field as plain Python, None when the record is unreadable.
    errors:         None when the record is readable, else a plain reason naming its position.
    position_label: "line" or "row".
    """

    positions: list[int] = dataclass_field(default_factory=list)
    ids: list[str | None] = dataclass_field(default_factory=list)
    values: list[Any] = dataclass_field(default_factory=list)
    errors: list[str | None] = dataclass_field(default_factory=list)
    position_label: str = "line"

    def __len__(self) -> int:
        return len(self.positions)

    def where(self, i: int) -> str:
        """Record i's position as text: "line N" or "row N"."""
        return f"{self.position_label} {self.positions[i]}"

    def name(self, i: int) -> str:
        """Record i's id, or its position when it has none, so that every error row is named."""
        return self.ids[i] if self.ids[i] is not None else self.where(i)

    def _add(self, position: int, id_: str | None, value: Any, error: str | None) -> None:
        self.positions.append(position)
        self.ids.append(id_)
        self.values.append(value)
        self.errors.append(error)


@dataclass
class ArrowSlice:
    """A slice that pyarrow read whole and without doubt (``read_slice_arrow``): every record is
    readable, has an id, and its payload has exactly the expected type with no null at any depth.

    positions:      int64 array, the 1-based line (JSONL) or row (Parquet) number of each record.
    ids:            each record's id, one pyarrow string Array (integer ids converted).
    values:         the payloads, one pyarrow Array of the expected type.
    position_label: "line" or "row".

    Arrow and numpy, not Python lists: a job can answer a slice without a Python object per record.
    """

    positions: np.ndarray
    ids: pa.Array
    values: Any
    position_label: str

    def __len__(self) -> int:
        return len(self.positions)


@dataclass(frozen=True)
class LoadedSlice:
    """A slice read from the input once (``load_slice``), so that its readers need not read it again.

    spec:        the slice spec from ``plan_slices``.
    data:        the slice's exact bytes (JSONL); None for Parquet, whose rows are read by column.
    fingerprint: ``slice_fingerprint`` of the slice, computed from those same bytes for JSONL.
    """

    spec: dict
    data: bytes | None
    fingerprint: str


# ---------------------------------------------------------------------------------------- planning


def plan_slices(path: str | Storage, field: str, records_per_slice: int, context: PlanContext | None = None, *,
                block: int | None = None, task_blocks: int | None = None,
                driver_bytes: int | None = None) -> list[dict]:
    """Split the file at ``path`` into JSON-serialisable slice specs, in file order.

    path:              a JSONL or Parquet file (Parquet is recognised by its suffix or magic bytes):
                       a local path, a URI (``s3://bucket/batch.jsonl``) or a Storage for one.
    field:             the payload field every record should carry (checked up front for Parquet).
    records_per_slice: lines (JSONL, blank lines included) or rows (Parquet) per slice, at least 1.
    context:           the run's ``PlanContext``: a JSONL input larger than ``driver_bytes`` has its
                       newlines counted by its ``task_map`` (larger than ``STARTUP_BYTES`` when the
                       map must first start Ray).  None, or no task map: counted in this process,
                       whatever the size.
    block, task_blocks, driver_bytes: ``BLOCK``, ``TASK_BLOCKS`` and ``DRIVER_BYTES`` unless given.

    JSONL newlines are counted per block of ``block`` bytes (by tasks of ``task_blocks`` blocks each
    for a large input), and the driver cuts the file from those counts alone: a slice spec names the
    byte range to read and how many newlines into it the slice starts and ends, and the reader finds
    the exact cuts.  The driver never parses, and for a large input never reads it.  Parquet slices
    are row ranges.  The specs cover the whole file exactly once; an empty file has none.  Raises
    InputError for a missing or unreadable file or one whose format cannot be told.
    """
    if not isinstance(records_per_slice, int) or records_per_slice < 1:
        raise ValueError(f"records_per_slice must be an integer of at least 1, not {records_per_slice!r}")
    source = input_storage(path)
    base = describe_input(source)
    if _detect_format(source) == "parquet":
        return [{**base, **rows} for rows in _plan_parquet(source, field, records_per_slice)]
    block, task_blocks, driver_bytes, startup_bytes = _plan_sizes(block, task_blocks, driver_bytes)
    blocks = BlockRange(source, base, 0, -(-base["size"] // block), block)
    counted_here = driver_bytes if context is None or context.map_ready else startup_bytes
    if context is None or context.task_map is None or base["size"] <= counted_here:
        counts = count_block_newlines(blocks)
    else:
        counts = np.concatenate([np.zeros(0, dtype=np.int64),
                                 *context.task_map(count_block_newlines, blocks.split(task_blocks))])
    ends_with_newline = base["size"] > 0 and source.read_bytes(source.root, base["size"] - 1) == b"\n"
    return [{**base, **cut} for cut in _cut_jsonl(counts, base["size"], ends_with_newline, records_per_slice, block)]


def input_storage(path: str | Storage) -> Storage:
    """The Storage of one input file; InputError for a location that cannot be used."""
    if isinstance(path, Storage):
        return path
    try:
        return Storage.at(path)
    except StorageError as error:
        raise InputError(f"input: {error}") from None


def describe_input(path: str | Storage) -> dict:
    """{"path": path or URI, "size": bytes, "mtime_ns": modification time} of an input file, for
    provenance (a changed file is not mistaken for the one already processed).  Raises InputError
    for a missing or unreadable file."""
    source = input_storage(path)
    size, mtime_ns = _stat_input(source)
    return {"path": source.display_root, "size": size, "mtime_ns": mtime_ns}


def _stat_input(source: Storage) -> tuple[int, int]:
    """(size, mtime_ns) of the input file, or an InputError saying why it cannot be used."""
    where = source.display_root
    try:
        size, mtime_ns = source.stat(source.root)
        if source.local:
            with open(source.root, "rb"):
                pass
    except FileNotFoundError:
        raise InputError(f"input file {where} does not exist") from None
    except StorageError as error:
        raise InputError(f"input {error}") from None
    except PermissionError:
        raise InputError(f"cannot read input file {where}: permission denied") from None
    except OSError as exc:
        raise InputError(f"cannot read input file {where}: {exc.strerror or exc}") from None
    return size, mtime_ns


def _detect_format(source: Storage) -> str:
    """"parquet" or "jsonl", from the suffix, else from the first bytes; InputError for a
    compressed file or UTF-16/32 text (whatever its name) or one whose format cannot be told."""
    path = source.display_root
    lower = path.lower()
    head = source.read_bytes(source.root, 0, 10)
    for magic, kind, tool in _COMPRESSED_MAGIC:
        if head.startswith(magic) and (kind != "bzip2" or _BZIP2_BLOCK.fullmatch(head[3:])):
            raise InputError(
                f"input {path} is {kind}-compressed: decompress it first (for example with {tool}) "
                "and pass the .jsonl or .parquet file"
            )
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        raise InputError(f"input {path} is UTF-16 or UTF-32 text (it starts with that byte order mark): "
                         "convert it to UTF-8, for example with iconv -t UTF-8")
    if lower.endswith(".parquet") or head[:4] == _PARQUET_MAGIC:
        return "parquet"
    if lower.endswith(_JSONL_SUFFIXES) or head.removeprefix(_BOM).lstrip()[:1] in (b"{", b""):
        return "jsonl"
    raise InputError(
        f"cannot tell the format of {path}: name it .jsonl (one JSON object per line) "
        "or .parquet"
    )


def _plan_sizes(block: int | None, task_blocks: int | None,
                driver_bytes: int | None) -> tuple[int, int, int, int]:
    """(block, task_blocks, driver_bytes, startup_bytes): the arguments given, else the test hook's,
    else the defaults.  A driver_bytes given (or the hook's) stands for startup_bytes too."""
    hook = faults.plan_sizes()
    defaults = hook or [BLOCK, TASK_BLOCKS, DRIVER_BYTES]
    if driver_bytes is None:
        driver_bytes = defaults[2]
        startup_bytes = defaults[2] if hook else STARTUP_BYTES
    else:
        startup_bytes = driver_bytes
    return block or defaults[0], task_blocks or defaults[1], driver_bytes, startup_bytes


@dataclass(frozen=True)
class BlockRange:
    """Blocks ``first`` .. ``end - 1`` of an input, block k being bytes [k * block, (k + 1) * block);
    ``described`` is the input's ``describe_input`` at planning time.  Its ``str`` names it in
    messages."""

    source: Storage
    described: dict
    first: int
    end: int
    block: int

    def split(self, blocks_per_part: int) -> list["BlockRange"]:
        return [BlockRange(self.source, self.described, first, min(first + blocks_per_part, self.end), self.block)
                for first in range(self.first, self.end, blocks_per_part)]

    def __str__(self) -> str:
        size = self.described["size"]
        return (f"blocks {self.first}..{self.end - 1} (bytes {self.first * self.block:,} to "
                f"{min(self.end * self.block, size):,}) of {self.source.display_root}")


def count_block_newlines(blocks: BlockRange) -> np.ndarray:
    """The newlines in each block of ``blocks`` (int64, one count per block), reading only those
    blocks.  Runs in a counting task or on the driver; raises InputError naming the blocks when they
    cannot be read, or when the file changed since planning began."""
    _check_unchanged(blocks.described, blocks.source)  # its message names the file and says what to do
    try:
        counts = np.zeros(blocks.end - blocks.first, dtype=np.int64)
        per_read = max(1, _COUNT_READ // blocks.block)  # a few large reads, not one per small block
        buffer = np.empty(per_read * blocks.block, dtype=np.uint8)  # reused: fresh memory per read faults
        with blocks.source.open_input(blocks.source.root) as handle:
            for first in range(blocks.first, blocks.end, per_read):
                last = min(first + per_read, blocks.end)
                data = buffer[:_read_into(handle, first * blocks.block, buffer[:(last - first) * blocks.block])]
                for k in range(first, last):
                    at = (k - first) * blocks.block
                    # numpy: 2.5x bytes.count here, and the comparison releases the GIL
                    counts[k - blocks.first] = np.count_nonzero(data[at : at + blocks.block] == 0x0A)
    except Exception as error:
        raise InputError(f"cannot count the lines of {blocks}: {type(error).__name__}: {error}") from None
    return counts


def _read_into(handle, offset: int, buffer: np.ndarray) -> int:
    """Fill ``buffer`` with the bytes at ``offset`` (fewer at the end of the file); returns how many."""
    handle.seek(offset)
    filled = 0
    while filled < len(buffer):
        got = handle.readinto(buffer[filled:])
        if not got:
            break
        filled += got
    return filled


def _cut_jsonl(counts: np.ndarray, size: int, ends_with_newline: bool, lines_per_slice: int,
               block: int) -> list[dict]:
    """Slice specs of ``lines_per_slice`` lines each, from the newlines counted in each block.

    Slice k starts after newline number k * lines_per_slice (1-based; the file's start for k = 0),
    which lies in the block where before[b] < mark <= before[b + 1]; the spec says to read from that
    block's start and pass ``skip`` newlines.  It ends after ``lines`` more newlines, read up to the
    end of the block holding the last of them, or at the end of the file for the last slice.
    """
    before = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))  # newlines before each block
    lines = int(before[-1]) + (0 if ends_with_newline or size == 0 else 1)  # a last line may lack "\n"
    slices = -(-lines // lines_per_slice)
    if not slices:
        return []
    marks = np.arange(1, slices, dtype=np.int64) * lines_per_slice  # newlines that end slices 0 .. slices-2
    mark_blocks = np.searchsorted(before, marks, side="left") - 1
    starts = [(0, 0)] + [(int(b) * block, int(m - before[b])) for b, m in zip(mark_blocks, marks)]
    ends = [min(size, (int(b) + 1) * block) for b in mark_blocks] + [size]
    return [
        {"format": "jsonl", "first_line": 1 + k * lines_per_slice, "from": start, "skip": skip, "to": end,
         "lines": lines_per_slice if k < slices - 1 else None}
        for k, ((start, skip), end) in enumerate(zip(starts, ends))
    ]


def _plan_parquet(source: Storage, field: str, rows_per_slice: int) -> list[dict]:
    """Row ranges of ``rows_per_slice`` rows each; checks that the payload column exists."""
    path = source.display_root
    parquet_file = _open_parquet(source)
    names = parquet_file.schema_arrow.names
    if field not in names:
        raise InputError(f"Parquet input {path} has no column {field!r} (its columns: {', '.join(names)})")
    for name in ("id", field):
        if names.count(name) > 1:
            raise InputError(
                f"Parquet input {path} has {names.count(name)} columns named {name!r}: "
                "keep exactly one and write the file again"
            )
    total = parquet_file.metadata.num_rows
    return [
        {"format": "parquet", "start_row": start, "end_row": min(start + rows_per_slice, total)}
        for start in range(0, total, rows_per_slice)
    ]


def _open_parquet(source: Storage):
    """A pyarrow ParquetFile, or an InputError if the file is not readable Parquet."""
    try:
        return pq.ParquetFile(source.open_input(source.root))
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise InputError(f"cannot read {source.display_root} as Parquet: {exc}") from None


# ----------------------------------------------------------------------------------------- reading


def load_slice(spec: dict, source: Storage | None = None) -> LoadedSlice:
    """Read one slice planned by ``plan_slices`` once, with its fingerprint: the readers below take
    the result instead of a spec, so that a shard reads its JSONL slice a single time.

    source: the input's Storage (carries object-store credentials to workers); default: the one
            ``spec["path"]`` names, reached with this process's environment.

    Raises InputError if the file changed since it was planned.
    """
    source = source or input_storage(spec["path"])
    if spec["format"] == "parquet":
        return LoadedSlice(spec, None, slice_fingerprint(spec, source))
    data = _slice_bytes(spec, source)
    return LoadedSlice(spec, data, _fingerprint(data))


def read_slice(spec: dict | LoadedSlice, field: str, fast_type: pa.DataType | None = None,
               source: Storage | None = None) -> RecordSlice:
    """Read the records of one slice planned by ``plan_slices``.

    spec:      one slice spec, or the slice already read (``load_slice``).
    field:     the payload field.
    fast_type: for JSONL, the pyarrow type the payload has when a record is well formed (for
               example ``pa.list_(pa.string())``).  When given, the slice is first read with
               pyarrow.json against the schema {id: string, field: fast_type}; on any doubt (a
               parse or type error, blank lines, a missing or null id or payload) the slice is
               read again line by line with ``json.loads`` so that every line is accounted for and
               payloads keep their JSON types.  None reads line by line directly.
    source:    the input's Storage (carries object-store credentials to workers); default: the
               one ``spec["path"]`` names, reached with this process's environment.

    Every non-blank line becomes exactly one record; blank lines are skipped.  Raises InputError
    if the file changed size since it was planned.
    """
    spec, data, source = _loaded(spec, source)
    if spec["format"] == "parquet":
        return _read_parquet_slice(spec, field, source)
    if fast_type is not None:
        table = _jsonl_table(data, spec["first_line"], field, fast_type)
        if table is not None:
            return RecordSlice(
                positions=list(range(spec["first_line"], spec["first_line"] + table.num_rows)),
                ids=table.column("id").to_pylist(),
                values=table.column(field).to_pylist(),
                errors=[None] * table.num_rows,
                position_label="line",
            )
    return _read_jsonl_lines(data, spec["first_line"], field)


def read_slice_arrow(spec: dict | LoadedSlice, field: str, fast_type: pa.DataType,
                     source: Storage | None = None) -> ArrowSlice | None:
    """The slice as one Arrow array of payloads when pyarrow reads every record without doubt;
    None otherwise (then ``read_slice`` accounts for every record, line by line).

    spec:      one slice spec from ``plan_slices``, or the slice already read (``load_slice``).
    field:     the payload field.
    fast_type: the pyarrow type a well-formed payload has; for JSONL the same strict reading as
               ``read_slice``'s fast path, for Parquet the column must have exactly this type.

    Lets a job validate payloads in bulk from Arrow buffers instead of Python objects.
    """
    spec, data, source = _loaded(spec, source)
    if spec["format"] == "parquet":
        table = _parquet_rows(spec, field, source)
        label, first = "row", spec["start_row"] + 1
        if "id" not in table.column_names or not table.schema.field(field).type.equals(fast_type):
            return None
    else:
        table = _jsonl_table(data, spec["first_line"], field, fast_type)
        label, first = "line", spec["first_line"]
        if table is None:
            return None
    ids, values = table.column("id").combine_chunks(), table.column(field).combine_chunks()
    if ids.null_count or _has_nulls(values) or not _is_id_type(ids.type):
        return None
    if spec["format"] == "parquet" and not (_valid(ids) and _valid(values)):  # JSONL input was checked
        return None
    return ArrowSlice(
        positions=np.arange(first, first + table.num_rows, dtype=np.int64),
        ids=ids if ids.type.equals(pa.string()) else ids.cast(pa.string()),  # as str() writes integers
        values=values,
        position_label=label,
    )


def _loaded(spec: dict | LoadedSlice, source: Storage | None) -> tuple[dict, bytes | None, Storage]:
    """(spec, JSONL bytes or None for Parquet, source) of a spec or of a slice already loaded."""
    source = source or input_storage(spec.spec["path"] if isinstance(spec, LoadedSlice) else spec["path"])
    if isinstance(spec, LoadedSlice):
        return spec.spec, spec.data, source
    return spec, None if spec["format"] == "parquet" else _slice_bytes(spec, source), source


def string_list_buffers(values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chars, string_offsets, list_offsets) of a pyarrow list<string> array without copying:
    list i holds strings ``list_offsets[i] .. list_offsets[i + 1] - 1``, and string j is the UTF-8
    bytes ``chars[string_offsets[j] : string_offsets[j + 1]]``.  Offsets are int64."""
    strings = values.values
    _, offset_buffer, chars = strings.buffers()
    if offset_buffer is None:  # no strings at all
        string_offsets = np.zeros(1, dtype=np.int64)
    else:
        width = np.int64 if pa.types.is_large_string(strings.type) else np.int32
        string_offsets = np.frombuffer(offset_buffer, dtype=width)[strings.offset : strings.offset + len(strings) + 1]
    return (
        np.frombuffer(chars, dtype=np.uint8) if chars is not None else np.zeros(0, dtype=np.uint8),
        string_offsets.astype(np.int64),
        to_numpy(values.offsets).astype(np.int64),  # (not np.asarray, which imports pandas)
    )


def _valid(array) -> bool:
    """Whether an Arrow array passes full validation (for strings: valid UTF-8, which Parquet
    does not guarantee)."""
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _has_nulls(array) -> bool:
    """Whether a pyarrow array has a null at any list depth."""
    if array.null_count:
        return True
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        # all the child values (a slice's and others'), when none of them is null; else exactly the
        # slice's (flatten imports pyarrow.compute: 0.1 s of the first shard in each process)
        return not _null_free(array.values) and _has_nulls(array.flatten())
    return False


def _null_free(array) -> bool:
    """Whether a pyarrow array has no null at any list depth, looking at whole child arrays."""
    if array.null_count:
        return False
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return _null_free(array.values)
    return True


def _is_string(arrow_type) -> bool:
    """Whether an Arrow type is a (large) string."""
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _is_id_type(arrow_type) -> bool:
    """Ids a record may carry: strings, or integers (converted to strings)."""
    return _is_string(arrow_type) or pa.types.is_integer(arrow_type)


def _slice_bytes(spec: dict, source: Storage) -> bytes:
    """The exact bytes of a JSONL slice: its planned range is read in one request, and the cuts
    found in it by counting ``skip`` and ``lines`` newlines (``_cut_slice``).  InputError if the
    file changed since planning."""
    _check_unchanged(spec, source)
    data = source.read_bytes(source.root, spec["from"], spec["to"])
    start, end = _cut_slice(data, spec)
    return data[start:end]


def _cut_slice(data: bytes, spec: dict) -> tuple[int, int]:
    """(start, end) of a slice within ``data``, the bytes [from, to) of its input: just after the
    ``skip``-th newline, and ``lines`` newlines further (or the end, for the last slice)."""
    wanted = spec["skip"] + (spec["lines"] or 0)
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 0x0A)[:wanted] if wanted else ()
    if len(newlines) < wanted:  # only when the content changed behind the same size and time
        raise InputError(f"input file {spec['path']} changed during the run (bytes {spec['from']:,} to "
                         f"{spec['to']:,} no longer hold the lines planned); run it again once it no longer changes")
    start = int(newlines[spec["skip"] - 1]) + 1 if spec["skip"] else 0
    end = int(newlines[-1]) + 1 if spec["lines"] else len(data)
    return start, end


def _check_unchanged(spec: dict, source: Storage) -> None:
    """InputError when the file's size or modification time differ from the plan's: it changed
    during the run, and slices read before and after would mix two contents."""
    if _stat_input(source) != (spec["size"], spec["mtime_ns"]):
        raise InputError(f"input file {spec['path']} changed during the run (its size or modification time "
                         "differ from when the batch was planned); run it again once it no longer changes")


def slice_fingerprint(spec: dict, source: Storage | None = None) -> str:
    """A checksum of the bytes a slice reads: the slice's byte range of a JSONL file, or the column
    chunks of the Parquet row groups that hold its rows.  Workers record it with each shard, and a
    rerun reuses a shard only when the fingerprint of its slice is unchanged, so content changed
    behind an unchanged size and modification time (cp -p, rsync -t, a restored backup) is seen."""
    source = source or input_storage(spec["path"])
    if spec["format"] == "jsonl":
        return _fingerprint(_slice_bytes(spec, source))
    digest = hashlib.sha256()
    _check_unchanged(spec, source)
    metadata = _open_parquet(source).metadata
    digest.update(f"{spec['start_row']}:{spec['end_row']}".encode())
    with source.open_input(source.root) as handle:
        for group in _overlapping_row_groups(metadata, spec["start_row"], spec["end_row"])[0]:
            for k in range(metadata.row_group(group).num_columns):
                chunk = metadata.row_group(group).column(k)
                offset = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                digest.update(handle.read_at(chunk.total_compressed_size, offset))
    return digest.hexdigest()[:32]


def _fingerprint(data: bytes) -> str:
    """SHA-256 (hardware-accelerated here: about 1.2 GB/s, 1.6x blake2b) of a JSONL slice's bytes."""
    return hashlib.sha256(data).hexdigest()[:32]


def _overlapping_row_groups(metadata, start: int, end: int) -> tuple[list[int], int | None]:
    """The row groups holding rows [start, end), and the first row of the first of them."""
    groups, group_start, first = [], 0, None
    for index in range(metadata.num_row_groups):
        group_end = group_start + metadata.row_group(index).num_rows
        if group_start < end and group_end > start:
            groups.append(index)
            first = group_start if first is None else first
        group_start = group_end
    return groups, first


def _jsonl_table(data: bytes, first_line: int, field: str, fast_type: pa.DataType) -> pa.Table | None:
    """The slice as a pyarrow Table {id, field}, or None when it could differ from the line-by-line
    reading (``_read_jsonl_lines``), which is the reference: then the caller reads line by line."""
    # pyarrow.json does not check UTF-8 outside the columns it keeps, skips a BOM at the start of
    # any block, and reads deep nesting and huge numbers that the line reader refuses: decline all.
    if not data.isascii() and not _is_utf8(data):
        return None
    if data.startswith(_BOM):
        if first_line != 1:
            return None
        data = data[len(_BOM):]
    if fast_type.equals(_STRINGS):
        table = read_id_and_strings(data, field)  # the commonest shape, compiled; None: read it as below
        if table is not None:
            return table
    line_count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    depth, digits, opening = _scan_lines(data)
    # Every line must open an object: pyarrow 26 crashes (SIGSEGV) on a block whose first line is
    # ``null``, and a line without content could hide a second object on another line.
    if line_count and ((opening[:line_count] != ord("{")).any() or depth.max() > MAX_DEPTH
                       or digits.max() > MAX_NUMBER_DIGITS):
        return None
    schema = pa.schema([("id", pa.string()), (field, fast_type)])
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(block_size=_ARROW_BLOCK),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except Exception:  # any parse or type problem: the line-by-line reader explains it per line
        return None
    # With every line opening an object, as many rows as lines means one object per line (pyarrow
    # also splits objects at a space or a carriage return, so a line can hold two, and skips blank
    # lines, which could make up for it); a null means "missing" and "null" cannot be told apart.
    # Either way, read line by line.
    if table.num_rows != line_count or table.column("id").null_count or table.column(field).null_count:
        return None
    return table


def _is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 (Python's strict decoder: no surrogates, no overlong forms)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _scan_lines(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(depth, digits, opening), one entry per ``\\n``-separated line of ``data`` (as ``data.split``):
    the deepest nesting of arrays and objects, the longest run of digits outside strings, and
    the first byte that is not JSON whitespace (space, tab, carriage return), -1 for none."""
    lines = data.count(b"\n") + 1
    depth = np.zeros(lines, dtype=np.int64)
    digits = np.zeros(lines, dtype=np.int64)
    opening = np.full(lines, -1, dtype=np.int16)
    _scan_kernel(np.frombuffer(data, dtype=np.uint8), depth, digits, opening)
    return depth, digits, opening


@njit(cache=True, nogil=True)
def _scan_kernel(data, depth, digits, opening):  # pragma: no cover - compiled
    """Fill depth[k], digits[k] (int64) and opening[k] (int16) for line k of data (uint8[n]);
    strings (between unescaped double quotes) are skipped.  Outputs have one entry per line and
    start at 0, 0 and -1."""
    n = len(data)
    line = 0
    level = 0
    run = 0
    i = 0
    while i < n:
        byte = data[i]
        i += 1
        if byte == 10:
            line += 1
            level = 0
            run = 0
            continue
        if byte == 32 or byte == 9 or byte == 13:  # JSON whitespace (not \v or \f, which bytes.strip removes)
            run = 0
            continue
        if opening[line] < 0:
            opening[line] = byte
        if byte == 34:  # a string: skip to its closing quote (or the end of the line)
            run = 0
            while i < n:
                byte = data[i]
                if byte == 34 or byte == 10:
                    break
                i += 2 if byte == 92 and data[i + 1 if i + 1 < n else i] != 10 else 1
            if i < n and data[i] == 34:
                i += 1
        elif 48 <= byte <= 57:
            run += 1
            if run > digits[line]:
                digits[line] = run
        else:
            run = 0
            if byte == 91 or byte == 123:
                level += 1
                if level > depth[line]:
                    depth[line] = level
            elif byte == 93 or byte == 125:
                level -= 1


def _read_jsonl_lines(data: bytes, first_line: int, field: str) -> RecordSlice:
    """The slice line by line with ``json.loads``: every non-blank line becomes one record.  This is
    the reference reading; the pyarrow fast path is used only where it gives the same records."""
    records = RecordSlice(position_label="line")
    depth, digits, _ = _scan_lines(data)
    for offset, raw in enumerate(data.split(b"\n")):
        if offset == 0 and first_line == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM):]  # a byte order mark at the very start of the file is allowed
        if raw.strip():
            line = first_line + offset
            records._add(line, *_parse_json_line(raw, line, field, int(depth[offset]), int(digits[offset])))
    return records


def _parse_json_line(raw: bytes, line: int, field: str, depth: int, digits: int) -> tuple[str | None, Any, str | None]:
    """(id, value, error) for one non-blank line; depth and digits as ``_scan_lines`` found them."""
    where = f"line {line}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, None, f"{where}: not valid UTF-8 (byte {exc.start + 1} of the line)"
    if text.lstrip().startswith("\ufeff"):
        return None, None, f"{where}: a byte order mark (U+FEFF) is allowed only at the very start of the file"
    if depth > MAX_DEPTH:
        return None, None, f"{where}: arrays and objects nested more than {MAX_DEPTH} deep"
    if digits > MAX_NUMBER_DIGITS:
        return None, None, f"{where}: a number of {digits:,} digits (at most {MAX_NUMBER_DIGITS:,} are read)"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        message = exc.msg.removesuffix(" at")  # "Invalid control character at": the column follows
        return None, None, f"{where}: not valid JSON: {message} at column {exc.colno}"
    except (ValueError, RecursionError):  # a lower PYTHONINTMAXSTRDIGITS, a very deep stack
        return None, None, f"{where}: not valid JSON: a number too long or nesting too deep to read"
    if _SURROGATE_ESCAPE.search(raw):
        surrogate = _lone_surrogate(obj)
        if surrogate is not None:
            return None, None, (f"{where}: a string holds the escape \\u{surrogate:04x}, half of a "
                                "surrogate pair without its other half (not a character)")
    if not isinstance(obj, dict):
        return None, None, f"{where}: not a JSON object but {_json_type_name(obj)}"
    id_, id_error = _record_id(obj.get("id"), "id" in obj, where)
    if id_error:
        return id_, None, id_error
    if field not in obj:
        return id_, None, f"{where}: no {field!r}"
    return id_, obj[field], None


def _lone_surrogate(value: Any) -> int | None:
    """The code point of the first unpaired surrogate in any string (or key) of a decoded JSON
    value, or None.  Paired escapes such as ``\\ud83d\\ude00`` are decoded to one character."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                for char in item:
                    if 0xD800 <= ord(char) <= 0xDFFF:
                        return ord(char)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _record_id(value: Any, present: bool, where: str) -> tuple[str | None, str | None]:
    """(id string, error) for an id value; integer ids become strings."""
    if not present or value is None:
        return None, f"{where}: no 'id'"
    if isinstance(value, str):
        return value, None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    return None, f"{where}: 'id' must be a string or an integer, not {_json_type_name(value)}"


def _json_type_name(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                       (list, "an array"), (dict, "an object"), ((bytes, bytearray), "binary data"),
                       (decimal.Decimal, "a decimal number")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else f"a value of type {type(value).__name__}"


def plain_reason(reason: str) -> str:
    """A reason as written to an errors table: at most a few hundred characters (a reason names
    the record and the problem, it never echoes a whole record)."""
    if len(reason) <= _REASON_CHARS:
        return reason
    return reason[: _REASON_CHARS - 30].rstrip() + f"... ({len(reason):,} characters in all)"


def _parquet_rows(spec: dict, field: str, source: Storage):
    """The rows ``[start_row, end_row)`` as a pyarrow Table of the id (if any) and payload columns,
    reading only the row groups that overlap them."""
    _check_unchanged(spec, source)
    parquet_file = _open_parquet(source)
    start, end = spec["start_row"], spec["end_row"]
    groups, first = _overlapping_row_groups(parquet_file.metadata, start, end)
    columns = [name for name in ("id", field) if name in parquet_file.schema_arrow.names]
    try:
        table = parquet_file.read_row_groups(groups, columns=columns)
    except Exception as exc:  # a damaged page or an unsupported encoding: pyarrow raises several types
        raise InputError(f"cannot read rows {start + 1}..{end} of Parquet input {spec['path']}: {exc}") from None
    return table.slice(start - (first or 0), end - start)


def _read_parquet_slice(spec: dict, field: str, source: Storage) -> RecordSlice:
    """Every row of a Parquet slice as a record; a missing or invalid id, or a string that is not
    valid UTF-8 (Parquet does not check), is the row's error."""
    table = _parquet_rows(spec, field, source)
    values, bad_values = _column_values(table.column(field))
    if "id" in table.column_names:
        raw_ids, bad_ids = _column_values(table.column("id"))
    else:
        raw_ids, bad_ids = [None] * len(values), set()
    records = RecordSlice(position_label="row")
    for offset, (raw_id, value) in enumerate(zip(raw_ids, values)):
        row = spec["start_row"] + 1 + offset
        if offset in bad_ids or offset in bad_values:
            column = "id" if offset in bad_ids else field
            records._add(row, None, None, f"row {row}: {column!r} holds text that is not valid UTF-8")
            continue
        id_, error = _record_id(raw_id, True, f"row {row}")
        records._add(row, id_, None if error else value, error)
    return records


def _column_values(column) -> tuple[list, set[int]]:
    """(the column as Python values, indices of the rows holding a string that is not valid UTF-8;
    their values are None)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    try:
        column.validate(full=True)
        return column.to_pylist(), set()
    except (pa.ArrowInvalid, UnicodeDecodeError):
        pass
    values, bad = [], set()
    for row in range(len(column)):  # the rare damaged slice: row by row, whatever the type
        try:
            values.append(column[row].as_py())
        except UnicodeDecodeError:
            values.append(None)
            bad.add(row)
    return values, bad


def accounting_summary(job: str, answered: int, rejected: int) -> str:
    """The summary line of a record batch: every record read was answered or rejected."""
    return f"{job}: read {answered + rejected}, answered {answered}, rejected {rejected}"
