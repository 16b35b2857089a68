"""Planning: split a batch of JSONL or Parquet files into slices, and read one slice's bytes once.

A batch is one or more files (``dataset.resolve_inputs``: a file, a folder, a glob, or several), all
of one format, planned in sorted path order; every slice is a piece of one file.  Planning a JSONL
file never parses it: newlines are counted per block (``BLOCK`` bytes), in parallel for a large
batch when the caller lends a parallel map, and slices are cut from the counts; each slice's reader
then finds its exact cuts in the one byte range it reads (``load_slice``).  A gzip or zstd JSONL
file cannot be cut by byte range: it is one slice, decompressed by pyarrow's codec where it is read.
Parquet slices are row ranges.  ``slice_fingerprint`` is the checksum of the bytes a slice reads.

    >>> specs = plan_slices("batch.jsonl", "grid", records_per_slice=25_000)   # doctest: +SKIP
    >>> specs = plan_slices(["parts/", "s3://b/more/*.jsonl.gz"], "grid", 25_000)   # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.frames import frame_neutral
from batchenum.pipeline.inputs.dataset import resolve_inputs
from batchenum.pipeline.inputs.lines import CHUNK, MAX_LINE_BYTES, Cut, cut_lines
from batchenum.pipeline.job import PlanContext, TaskMap
from batchenum.pipeline.storage import Storage, StorageError

__all__ = [
    "plan_slices",
    "SliceSize",
    "count_block_newlines",
    "BlockRange",
    "BLOCK",
    "input_storage",
    "describe_input",
    "detect_format",
    "load_slice",
    "LoadedSlice",
    "slice_fingerprint",
    "slice_identity",
    "open_parquet",
    "check_unchanged",
    "overlapping_row_groups",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_DECOMPRESSED_LINES",
    "MAX_SLICE_BYTES",
    "MAX_ROW_GROUP_BYTES",
    "MAX_RECORD_BYTES",
    "decoded_bytes",
    "check_row_groups",
]


_PARQUET_MAGIC = b"PAR1"
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines", ".json")
# JSONL planning: newlines are counted per block of BLOCK bytes, TASK_BLOCKS blocks per counting task
# (few tasks for a huge input, and the driver keeps one int per block); an input of at most
# DRIVER_BYTES is counted by the driver itself, since starting tasks would cost it more.  When the
# tasks' workers are not up yet (a private local Ray, not started), counting with tasks would first
# cost Ray's start-up and the head start, while the driver counts fast: the driver counts inputs of
# up to STARTUP_BYTES itself then (figures: docs/benchmarks.md#planning-and-reading-record-inputs).
BLOCK = 1 << 20
TASK_BLOCKS = 128
DRIVER_BYTES = 64 << 20
STARTUP_BYTES = 4 << 30
_COUNT_READ = 1 << 24  # bytes read at a time when counting
_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark (a JSONL file may start with one)
# Compressed files are recognised by their first bytes: gzip and zstd JSONL are read, the rest refused.
_COMPRESSED_MAGIC = (
    (b"\x1f\x8b", "gzip", "gunzip"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
    (b"BZh", "bzip2", "bunzip2"),  # followed by a block size digit and the block magic, checked below
    (b"\xfd7zXZ\x00", "xz", "unxz"),
    (b"PK\x03\x04", "zip", "unzip"),
)
# A compressed JSONL file is one slice, decompressed whole by its worker: at most this many bytes and
# lines (blank ones included) of it are read, beyond which the file is refused (docs/batch_input.md).
MAX_DECOMPRESSED_BYTES = 256 << 20
MAX_DECOMPRESSED_LINES = 4 << 20
# A Parquet file is read a row group at a time, whole: a row group of several rows may decompress to
# at most MAX_ROW_GROUP_BYTES (the same as a compressed JSONL file), beyond which the file is
# refused; a record at most MAX_RECORD_BYTES decoded (the same as a JSONL line), beyond which it is
# rejected, unread when its row group holds it alone (parquet.py).
MAX_ROW_GROUP_BYTES = 256 << 20
MAX_RECORD_BYTES = MAX_LINE_BYTES
# Compressed JSONL read through pyarrow's codecs, recognised by suffix (and checked by magic bytes).
_CODEC_SUFFIXES = ((".gz", "gzip"), (".zst", "zstd"), (".zstd", "zstd"))
_BZIP2_BLOCK = re.compile(rb"[1-9](1AY&SY|\x17rE8P\x90)")  # block size, then a block or the end of stream


@dataclass(frozen=True)
class LoadedSlice:
    """A slice read from the input once (``load_slice``), so that its readers need not read it again.

    spec:        the slice spec from ``plan_slices``.
    data:        the slice's exact bytes (JSONL); None for Parquet, whose rows are read by column.
    fingerprint: ``slice_fingerprint`` of the slice, computed from those same bytes for JSONL.
    oversized:   JSONL lines dropped for being longer than ``MAX_LINE_BYTES``: {offset of the line
                 within the slice: its length in bytes}; each is an empty line in ``data``.
    """

    spec: dict
    data: bytes | None
    fingerprint: str
    oversized: dict[int, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- planning


# "auto" slicing (SliceSize): SLICES_PER_CPU slices per CPU of the run.  Whatever the records per
# slice (auto or given), no slice reads more than MAX_SLICE_BYTES of a plain JSONL file (cut short
# there, at a block boundary) or about that much of a Parquet file (by its average row): a shard
# holds its slice's bytes and answers in memory.
SLICES_PER_CPU = 4
MAX_SLICE_BYTES = 128 << 20


@dataclass(frozen=True)
class SliceSize:
    """Records per slice chosen from the batch ("auto"): at least ``SLICES_PER_CPU`` slices for each
    of ``cpus`` CPUs (fewer than twice that), each as large as that allows, so that a large batch's shards write
    files a reader wants (the finish then takes them over instead of rewriting them), yet at least
    ``minimum`` records and at most about ``MAX_SLICE_BYTES`` of input.  The size is ``minimum``
    times a power of two: a small change in the batch (one file edited) leaves it, and so every
    other file's shards, unchanged; a run on another number of CPUs may slice otherwise."""

    minimum: int
    cpus: int

    def records(self, total_records: int, total_bytes: int) -> int:
        wanted = -(-total_records // (SLICES_PER_CPU * max(1, self.cpus)))
        size = self.minimum
        while size * 2 <= wanted:
            size *= 2
        most = MAX_SLICE_BYTES * total_records // max(1, total_bytes)  # records in MAX_SLICE_BYTES of input
        while size > self.minimum and size > most:
            size //= 2
        return size


def plan_slices(
    inputs: str | Storage | Sequence[str | Storage],
    field: str,
    records_per_slice: int | SliceSize,
    context: PlanContext | None = None,
    *,
    block: int | None = None,
    task_blocks: int | None = None,
    driver_bytes: int | None = None,
) -> list[dict]:
    """Split a batch into JSON-serialisable slice specs: file by file in sorted path order, each
    file's slices in file order.

    inputs:            a file, a folder, a glob, or a list of them (``dataset.resolve_inputs``), as
                       local paths or URIs (``s3://bucket/parts/``), or Storages of single files.
                       Every file is JSONL (plain, ``.gz`` or ``.zst``) or every file is Parquet
                       (recognised by its suffix or magic bytes).
    field:             the payload field every record should carry (checked up front for Parquet).
    records_per_slice: lines (JSONL, blank lines included) or rows (Parquet) per slice, at least 1,
                       or a ``SliceSize`` that picks it from the batch's records and bytes (those of
                       compressed JSONL files, one slice each, left out).
    context:           the run's ``PlanContext``: when the plain JSONL files hold more than
                       ``driver_bytes`` in all, their newlines are counted by its ``task_map``
                       (more than ``STARTUP_BYTES`` when the map must first start Ray).  None, or no
                       task map: counted in this process, whatever the size.
    block, task_blocks, driver_bytes: ``BLOCK``, ``TASK_BLOCKS`` and ``DRIVER_BYTES`` unless given.

    JSONL newlines are counted per block of ``block`` bytes (by tasks of at most ``task_blocks``
    blocks of one file each for a large batch), and the driver cuts each file from those counts
    alone: a slice spec names the file, the byte range to read and how many newlines into it the
    slice starts and ends, and the reader finds the exact cuts.  The driver never parses, and for a
    large batch never reads it.  A compressed JSONL file is one slice (``compression`` in its spec).
    Parquet slices are row ranges.  The specs cover every file exactly once; empty files have none.
    Raises InputError for a value that matches nothing, a file named twice, a missing or unreadable
    file, one whose format cannot be told, and JSONL mixed with Parquet (naming a file of each).
    """
    if not isinstance(records_per_slice, SliceSize) and (
        not isinstance(records_per_slice, int) or records_per_slice < 1
    ):
        raise ValueError(f"records_per_slice must be an integer of at least 1, not {records_per_slice!r}")
    files = _planned_files(resolve_inputs(inputs))
    if _one_format(files) == "parquet":
        opened = [(file, *_parquet_rows(file.source, field)) for file in files]
        per_slice = _per_slice(records_per_slice, sum(rows for _, rows, _ in opened), sum(size for *_, size in opened))
        return [
            {**file.described, **rows}
            for file, total, size in opened
            for rows in _cut_rows(total, min(per_slice, _rows_within(MAX_SLICE_BYTES, total, size)))
        ]
    block, task_blocks, driver_bytes, startup_bytes = _plan_sizes(block, task_blocks, driver_bytes)
    plain = [file for file in files if file.compression is None]
    counts = _count_newlines(plain, context, block, task_blocks, driver_bytes, startup_bytes)
    lines = {
        file.source.root: _lines(counts[file.source.root], file.described["size"], file.ends_with_newline)
        for file in plain
    }
    per_slice = _per_slice(records_per_slice, sum(lines.values()), sum(file.described["size"] for file in plain))
    specs = []
    for file in files:
        if file.compression is not None:
            specs += _whole_file(file)
            continue
        specs += [
            {**file.described, **cut}
            for cut in _cut_jsonl(
                counts[file.source.root], file.described["size"], file.ends_with_newline, per_slice, block
            )
        ]
    return specs


def _per_slice(records_per_slice: int | SliceSize, total_records: int, total_bytes: int) -> int:
    if isinstance(records_per_slice, SliceSize):
        return records_per_slice.records(total_records, total_bytes)
    return records_per_slice


@dataclass(frozen=True)
class _PlannedFile:
    """One input file while a batch is planned: its Storage, ``describe_input``, format, codec, and
    for plain JSONL whether its last byte is a newline (else its last line lacks one)."""

    source: Storage
    described: dict
    format: str
    compression: str | None
    ends_with_newline: bool = False


_PLAN_THREADS = 16  # files described at once: on object storage each costs a few round trips


def _planned_files(sources: list[Storage]) -> list[_PlannedFile]:
    """Each file described (size, time, format, last byte), in order; several at once, since on
    object storage each is a few requests' latency and no work."""
    if len(sources) == 1:
        return [_planned_file(sources[0])]
    with ThreadPoolExecutor(min(_PLAN_THREADS, len(sources)), thread_name_prefix="plan") as pool:
        return list(pool.map(_planned_file, sources))


def _planned_file(source: Storage) -> _PlannedFile:
    described = describe_input(source)
    kind, compression = detect_format(source)
    size = described["size"]
    plain_jsonl = kind == "jsonl" and compression is None and size > 0
    ends_with_newline = plain_jsonl and source.read_bytes(source.root, size - 1) == b"\n"
    return _PlannedFile(source, described, kind, compression, ends_with_newline)


def _one_format(files: list[_PlannedFile]) -> str | None:
    """The batch's one format; InputError naming a file of each when JSONL and Parquet are mixed."""
    first: dict[str, str] = {}  # a file of each format
    for file in files:
        first.setdefault(file.format, file.source.display_root)
    if len(first) > 1:
        raise InputError(
            f"the input mixes JSONL ({first['jsonl']}) and Parquet ({first['parquet']}): a batch is "
            "all JSONL or all Parquet; run each format as its own batch (its own --out)"
        )
    return next(iter(first), None)


def _count_newlines(
    files: list[_PlannedFile],
    context: PlanContext | None,
    block: int,
    task_blocks: int,
    driver_bytes: int,
    startup_bytes: int,
) -> dict[str, np.ndarray]:
    """The newlines per block of each plain JSONL file, by its path: counted here, or by the
    context's task map (tasks of at most ``task_blocks`` blocks of one file) for a large batch."""
    ranges = [BlockRange(file.source, file.described, 0, -(-file.described["size"] // block), block) for file in files]
    total = sum(file.described["size"] for file in files)
    task_map = _counting_map(context, total, driver_bytes, startup_bytes)
    if task_map is None:
        return {blocks.source.root: count_block_newlines(blocks) for blocks in ranges}
    parts = [part for blocks in ranges for part in blocks.split(task_blocks)]
    counted = task_map(count_block_newlines, parts) if parts else []
    by_file: dict[str, list[np.ndarray]] = {blocks.source.root: [np.zeros(0, dtype=np.int64)] for blocks in ranges}
    for part, counts in zip(parts, counted):
        by_file[part.source.root].append(counts)
    return {path: np.concatenate(counts) for path, counts in by_file.items()}


def _whole_file(file: _PlannedFile) -> list[dict]:
    """The one slice of a compressed JSONL file (none when it is empty): its lines are known only
    once it is decompressed, where it is read."""
    if not file.described["size"]:
        return []
    return [
        {
            **file.described,
            "format": "jsonl",
            "compression": file.compression,
            "first_line": 1,
            "from": 0,
            "skip": 0,
            "to": file.described["size"],
            "lines": None,
        }
    ]


def _counting_map(context: PlanContext | None, size: int, driver_bytes: int, startup_bytes: int) -> TaskMap | None:
    """The context's task map when it is to count an input's newlines, or None when the driver counts
    them itself: always without a map; for an input of at most ``driver_bytes``; and, while the map
    must first start Ray (``context.map_ready`` is False), for one of at most ``startup_bytes``."""
    if context is None or context.task_map is None:
        return None
    return None if size <= (driver_bytes if context.map_ready else startup_bytes) else context.task_map


def input_storage(path: str | Storage) -> Storage:
    """The Storage of one input location; InputError for a location that cannot be used."""
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


def detect_format(source: Storage) -> tuple[str, str | None]:
    """("parquet" or "jsonl", the codec of a compressed JSONL file or None), from the suffix, else
    from the first bytes.  A gzip or zstd file is compressed JSONL when its name says so
    (``.jsonl.gz``, ``.jsonl.zst``); InputError for one whose name does not, for any other
    compression, for UTF-16/32 text (whatever its name) and for a file whose format cannot be told."""
    path = source.display_root
    lower = path.lower()
    head = source.read_bytes(source.root, 0, 10)
    named = next((codec for suffix, codec in _CODEC_SUFFIXES if lower.endswith(suffix)), None)
    for magic, kind, tool in _COMPRESSED_MAGIC:
        if head.startswith(magic) and (kind != "bzip2" or _BZIP2_BLOCK.fullmatch(head[3:])):
            return "jsonl", _readable_codec(path, kind, tool, named)
    if named and head:
        raise InputError(
            f"input {path} is named as {named}-compressed but is not (it does not start with the "
            f"{named} magic bytes): rename it without its compression suffix, or compress it"
        )
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        raise InputError(
            f"input {path} is UTF-16 or UTF-32 text (it starts with that byte order mark): "
            "convert it to UTF-8, for example with iconv -t UTF-8"
        )
    if lower.endswith(".parquet") or head[:4] == _PARQUET_MAGIC:
        return "parquet", None
    if named or lower.endswith(_JSONL_SUFFIXES) or head.removeprefix(_BOM).lstrip()[:1] in (b"{", b""):
        return "jsonl", None
    raise InputError(
        f"cannot tell the format of {path}: name it .jsonl (one JSON object per line), .jsonl.gz, .jsonl.zst "
        "or .parquet"
    )


def _readable_codec(path: str, kind: str, tool: str, named: str | None) -> str:
    """The codec of a compressed file that is read as compressed JSONL; InputError for another."""
    name = path.lower().rsplit("/", 1)[-1]
    parquet = name.endswith(".parquet") or ".parquet." in name  # Parquet compresses inside the file
    if named == kind and not parquet:
        return kind
    suffix = next((suffix for suffix, codec in _CODEC_SUFFIXES if codec == kind), None)
    if suffix is None or parquet:
        raise InputError(
            f"input {path} is {kind}-compressed: decompress it first (for example with {tool}) "
            "and pass the .jsonl or .parquet file (JSONL may also be gzip- or zstd-compressed, "
            "named .jsonl.gz or .jsonl.zst; Parquet compresses inside the file)"
        )
    raise InputError(
        f"input {path} is {kind}-compressed: name it .jsonl{suffix} to have it read as {kind}-compressed "
        f"JSONL, or decompress it first (for example with {tool})"
    )


def _plan_sizes(block: int | None, task_blocks: int | None, driver_bytes: int | None) -> tuple[int, int, int, int]:
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

    def split(self, blocks_per_part: int) -> list[BlockRange]:
        return [
            BlockRange(self.source, self.described, first, min(first + blocks_per_part, self.end), self.block)
            for first in range(self.first, self.end, blocks_per_part)
        ]

    def __str__(self) -> str:
        size = self.described["size"]
        return (
            f"blocks {self.first}..{self.end - 1} (bytes {self.first * self.block:,} to "
            f"{min(self.end * self.block, size):,}) of {self.source.display_root}"
        )


def count_block_newlines(blocks: BlockRange) -> np.ndarray:
    """The newlines in each block of ``blocks`` (int64, one count per block), reading only those
    blocks.  Runs in a counting task or on the driver; raises InputError naming the blocks when they
    cannot be read, or when the file changed since planning began."""
    check_unchanged(blocks.described, blocks.source)  # its message names the file and says what to do
    try:
        counts = np.zeros(blocks.end - blocks.first, dtype=np.int64)
        per_read = max(1, _COUNT_READ // blocks.block)  # a few large reads, not one per small block
        buffer = np.empty(per_read * blocks.block, dtype=np.uint8)  # reused: fresh memory per read faults
        with blocks.source.open_input(blocks.source.root) as handle:
            for first in range(blocks.first, blocks.end, per_read):
                last = min(first + per_read, blocks.end)
                data = buffer[: _read_into(handle, first * blocks.block, buffer[: (last - first) * blocks.block])]
                for k in range(first, last):
                    at = (k - first) * blocks.block
                    # numpy: faster than bytes.count, and the comparison releases the GIL (docs/benchmarks.md)
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


def _lines(counts: np.ndarray, size: int, ends_with_newline: bool) -> int:
    """A plain JSONL file's lines from its newlines per block (a last line may lack its newline)."""
    return int(counts.sum()) + (0 if ends_with_newline or size == 0 else 1)


def _cut_jsonl(counts: np.ndarray, size: int, ends_with_newline: bool, lines_per_slice: int, block: int) -> list[dict]:
    """Slice specs of ``lines_per_slice`` lines each (fewer where that many lines would be more
    than ``MAX_SLICE_BYTES``: ``_slice_ends``), from the newlines counted in each block.

    Slice k starts after newline number k * lines_per_slice (1-based; the file's start for k = 0),
    which lies in the block where before[b] < mark <= before[b + 1]; the spec says to read from that
    block's start and pass ``skip`` newlines.  It ends after ``lines`` more newlines, read up to the
    end of the block holding the last of them, or at the end of the file for the last slice.
    """
    before = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))  # newlines before each block
    lines = _lines(counts, size, ends_with_newline)
    if not lines:
        return []
    marks = np.asarray(_slice_ends(before, lines, lines_per_slice, max(1, MAX_SLICE_BYTES // block)), dtype=np.int64)
    mark_blocks = np.searchsorted(before, marks, side="left") - 1
    starts = [(0, 0)] + [(int(b) * block, int(m - before[b])) for b, m in zip(mark_blocks, marks)]
    ends = [min(size, (int(b) + 1) * block) for b in mark_blocks] + [size]
    firsts = [0, *marks.tolist()]
    return [
        {
            "format": "jsonl",
            "first_line": 1 + firsts[k],
            "from": start,
            "skip": skip,
            "to": end,
            "lines": firsts[k + 1] - firsts[k] if k < len(marks) else None,
        }
        for k, ((start, skip), end) in enumerate(zip(starts, ends))
    ]


def _slice_ends(before: np.ndarray, lines: int, lines_per_slice: int, max_blocks: int) -> list[int]:
    """The newlines (counted from 1) that end each slice but the last: every ``lines_per_slice``
    lines, or sooner where a slice would read more than ``max_blocks`` blocks (``MAX_SLICE_BYTES``),
    so that a shard's input is bounded by bytes whatever its records' sizes; at least one line each."""
    blocks = len(before) - 1
    even = np.arange(1, -(-lines // lines_per_slice), dtype=np.int64) * lines_per_slice
    even_blocks = np.searchsorted(before, even, side="left") - 1  # the block holding each end
    spans = np.append(even_blocks, blocks - 1) - np.concatenate(([0], even_blocks)) + 1  # blocks each slice reads
    if spans.max() <= max_blocks:  # the common case: no slice too large, cut by lines alone
        return even.tolist()
    ends: list[int] = []
    mark = 0
    while True:
        start_block = int(np.searchsorted(before, mark, side="left")) - 1 if mark else 0
        reach = start_block + max_blocks  # the slice may read blocks start_block .. reach - 1
        within = lines if reach >= blocks else int(before[reach])
        end = max(mark + 1, min(mark + lines_per_slice, within))
        if end >= lines:
            return ends
        ends.append(end)
        mark = end


def _parquet_rows(source: Storage, field: str) -> tuple[int, int]:
    """(rows, uncompressed bytes) of a Parquet input, after checking that the payload column exists."""
    path = source.display_root
    parquet_file = open_parquet(source)
    names = parquet_file.schema_arrow.names
    if field not in names:
        raise InputError(f"Parquet input {path} has no column {field!r} (its columns: {', '.join(names)})")
    for name in ("id", field):
        if names.count(name) > 1:
            raise InputError(
                f"Parquet input {path} has {names.count(name)} columns named {name!r}: "
                "keep exactly one and write the file again"
            )
    metadata = parquet_file.metadata
    check_row_groups(metadata, path, ("id", field))
    return metadata.num_rows, sum(metadata.row_group(k).total_byte_size for k in range(metadata.num_row_groups))


def decoded_bytes(metadata, group: int, columns: Sequence[str]) -> int:
    """The bytes row group ``group`` of a Parquet file decompresses to in the top-level
    ``columns``, as its footer gives them (read before any page is)."""
    row_group = metadata.row_group(group)
    total = 0
    for k in range(row_group.num_columns):
        chunk = row_group.column(k)
        root = chunk.path_in_schema.split(".", 1)[0]
        total += chunk.total_uncompressed_size if root in columns else 0
    return total


def check_row_groups(metadata, path: str, columns: Sequence[str]) -> None:
    """InputError when a row group of several rows decompresses to more than
    ``MAX_ROW_GROUP_BYTES`` in ``columns`` (a worker reads a row group whole); a row group of one
    row that large is its record's error instead (``parquet.read_parquet``)."""
    for group in range(metadata.num_row_groups):
        rows, size = metadata.row_group(group).num_rows, decoded_bytes(metadata, group, columns)
        if rows > 1 and size > MAX_ROW_GROUP_BYTES:
            fitting = max(1, rows * MAX_ROW_GROUP_BYTES // size // 2)
            suggested = int(str(fitting)[0]) * 10 ** (len(str(fitting)) - 1)  # one significant digit
            raise InputError(
                f"Parquet input {path}: row group {group + 1} of {metadata.num_row_groups} holds {rows:,} rows "
                f"that decompress to {size:,} bytes, more than the {MAX_ROW_GROUP_BYTES:,} "
                f"({MAX_ROW_GROUP_BYTES >> 20} MiB) a row group may take (a worker reads it whole): write the "
                f"file again with smaller row groups, for example pyarrow.parquet.write_table(table, path, "
                f"row_group_size={suggested:_})"
            )


def _rows_within(most_bytes: int, rows: int, size: int) -> int:
    """Rows of a Parquet file (``rows`` of ``size`` uncompressed bytes in all) that hold about
    ``most_bytes``: a Parquet slice is capped by bytes on the file's average row."""
    return max(1, most_bytes * rows // max(1, size))


def _cut_rows(total: int, rows_per_slice: int) -> list[dict]:
    """Row ranges of ``rows_per_slice`` rows each."""
    return [
        {"format": "parquet", "start_row": start, "end_row": min(start + rows_per_slice, total)}
        for start in range(0, total, rows_per_slice)
    ]


def open_parquet(source: Storage):
    """A pyarrow ParquetFile, or an InputError if the file is not readable Parquet."""
    try:
        return pq.ParquetFile(source.open_input(source.root))
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise InputError(f"cannot read {source.display_root} as Parquet: {exc}") from None


def load_slice(spec: dict, source: Storage | None = None) -> LoadedSlice:
    """Read one slice planned by ``plan_slices`` once, with its fingerprint: the readers take the
    result instead of a spec, so that a shard reads its JSONL slice a single time.

    source: the input's Storage (carries object-store credentials to workers); default: the one
            ``spec["path"]`` names, reached with this process's environment.

    A JSONL slice is read in chunks, and a line longer than ``lines.MAX_LINE_BYTES`` is dropped as it
    is read (``LoadedSlice.oversized``).  A compressed JSONL file's slice (the whole file) is
    decompressed here, by pyarrow's codec; its fingerprint is that of the compressed bytes.  Raises
    InputError if the file changed since it was planned, or does not decompress.
    """
    source = source or input_storage(spec["path"])
    if spec["format"] == "parquet":
        return LoadedSlice(spec, None, slice_fingerprint(spec, source))
    if spec.get("compression"):
        raw = _whole_file_bytes(spec, source)
        cut = cut_lines(_decompressed_chunks(raw, spec))
        return LoadedSlice(spec, cut.data, _fingerprint(raw), cut.oversized)
    cut = _cut_slice(spec, source)
    return LoadedSlice(spec, cut.data, cut.digest, cut.oversized)


def _whole_file_bytes(spec: dict, source: Storage) -> bytes:
    """Every byte of the file (a compressed file's one slice); InputError if it changed."""
    check_unchanged(spec, source)
    return source.read_bytes(source.root)


def _decompressed_chunks(raw: bytes, spec: dict) -> Iterator[bytes]:
    """A compressed file's content, ``CHUNK`` bytes at a time, through pyarrow's codec; InputError
    as soon as it passes ``MAX_DECOMPRESSED_BYTES`` or ``MAX_DECOMPRESSED_LINES``."""
    stream = _decompressing(raw, spec)
    size = lines = 0
    while chunk := _next_chunk(stream, spec):
        size, lines = size + len(chunk), lines + chunk.count(b"\n")
        if size > MAX_DECOMPRESSED_BYTES or lines > MAX_DECOMPRESSED_LINES:
            raise InputError(
                f"input file {spec['path']} decompresses to more than {_decompressed_limit(size, lines)}, the most "
                "one compressed file may hold (it is one shard, read by one worker): split it into parts, for "
                "example with zcat FILE | split -l 1000000 -d --additional-suffix=.jsonl - part- and gzip each"
            )
        yield chunk


def _decompressing(raw: bytes, spec: dict):
    try:
        return pa.CompressedInputStream(pa.BufferReader(raw), spec["compression"])
    except Exception as error:
        raise _not_decompressed(spec, error) from None


def _next_chunk(stream, spec: dict) -> bytes:
    try:
        return stream.read(CHUNK)
    except Exception as error:  # a truncated or damaged stream: pyarrow raises several types
        raise _not_decompressed(spec, error) from None


def _not_decompressed(spec: dict, error: Exception) -> InputError:
    return InputError(
        f"cannot decompress input file {spec['path']} ({spec['compression']}): {error}; "
        "check the file (for example with gzip -t or zstd -t)"
    )


def _decompressed_limit(size: int, lines: int) -> str:
    if size > MAX_DECOMPRESSED_BYTES:
        return f"{MAX_DECOMPRESSED_BYTES:,} bytes ({MAX_DECOMPRESSED_BYTES >> 20:,} MiB)"
    return f"{MAX_DECOMPRESSED_LINES:,} lines (blank ones included)"


def _cut_slice(spec: dict, source: Storage) -> Cut:
    """A JSONL slice: its planned byte range [from, to) read ``CHUNK`` bytes at a time, cut just
    after the ``skip``-th newline and ``lines`` newlines further (or at the end, for the last slice).
    InputError if the file changed since planning."""
    check_unchanged(spec, source)
    with source.open_input(source.root) as handle:
        chunks = (handle.read_at(min(CHUNK, spec["to"] - at), at) for at in range(spec["from"], spec["to"], CHUNK))
        cut = cut_lines(chunks, spec["skip"], spec["lines"])
    if not cut.complete:  # only when the content changed behind the same size and time
        raise InputError(
            f"input file {spec['path']} changed during the run (bytes {spec['from']:,} to "
            f"{spec['to']:,} no longer hold the lines planned); run it again once it no longer changes"
        )
    return cut


def check_unchanged(spec: dict, source: Storage) -> None:
    """InputError when the file's size or modification time differ from the plan's: it changed
    during the run, and slices read before and after would mix two contents."""
    if _stat_input(source) != (spec["size"], spec["mtime_ns"]):
        raise InputError(
            f"input file {spec['path']} changed during the run (its size or modification time "
            "differ from when the batch was planned); run it again once it no longer changes"
        )


# What locates a slice's bytes in this plan but not its place in the input: the file's size and
# time (an append changes them), the byte range read and the line or row count (the last slice's
# grows with an append).  Left out of a slice's identity, where its checksum decides instead.
_READ_HINTS = ("size", "mtime_ns", "from", "skip", "to", "lines", "end_row")


def slice_identity(spec: dict) -> dict:
    """A slice's identity (``Shard.identity``): its file, format and first line or row.  A committed
    shard of the same identity is reused when its ``slice_fingerprint`` is unchanged, so appending
    lines to a file reuses every slice whose bytes stay the same.  A frame's file is named by its
    content, which its slices' checksums check already: the identity leaves the name out
    (``frames.frame_neutral``), so that a frame with some rows changed reuses the other slices."""
    return frame_neutral({key: value for key, value in spec.items() if key not in _READ_HINTS})


def slice_fingerprint(spec: dict, source: Storage | None = None) -> str:
    """A checksum of the bytes a slice reads: the slice's byte range of a JSONL file (a compressed
    file's compressed bytes), or the column
    chunks of the Parquet row groups that hold its rows.  Workers record it with each shard, and a
    rerun reuses a shard only when the fingerprint of its slice is unchanged, so content changed
    behind an unchanged size and modification time (cp -p, rsync -t, a restored backup) is seen."""
    source = source or input_storage(spec["path"])
    if spec["format"] == "jsonl":
        return (
            _fingerprint(_whole_file_bytes(spec, source))
            if spec.get("compression")
            else _cut_slice(spec, source).digest
        )
    digest = hashlib.sha256()
    check_unchanged(spec, source)
    metadata = open_parquet(source).metadata
    digest.update(f"{spec['start_row']}:{spec['end_row']}".encode())
    with source.open_input(source.root) as handle:
        for group in overlapping_row_groups(metadata, spec["start_row"], spec["end_row"])[0]:
            for k in range(metadata.row_group(group).num_columns):
                chunk = metadata.row_group(group).column(k)
                offset = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                digest.update(handle.read_at(chunk.total_compressed_size, offset))
    return digest.hexdigest()[:32]


def _fingerprint(data: bytes) -> str:
    """SHA-256 (hardware-accelerated on common CPUs, faster than blake2b: docs/benchmarks.md) of a JSONL
    slice's bytes."""
    return hashlib.sha256(data).hexdigest()[:32]


def overlapping_row_groups(metadata, start: int, end: int) -> tuple[list[int], int | None]:
    """The row groups holding rows [start, end), and the first row of the first of them."""
    groups, group_start, first = [], 0, None
    for index in range(metadata.num_row_groups):
        group_end = group_start + metadata.row_group(index).num_rows
        if group_start < end and group_end > start:
            groups.append(index)
            first = group_start if first is None else first
        group_start = group_end
    return groups, first
