"""One input line has a bounded memory cost: a JSONL line longer than MAX_LINE_BYTES is dropped as
it is read, rejected with its length, and every other record of its slice is read as before."""

from __future__ import annotations

import gzip
import hashlib
import json
import tracemalloc

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from batchenum.pipeline.inputs import plan_slices, read_records
from batchenum.pipeline.inputs.lines import CHUNK, MAX_LINE_BYTES, cut_lines

GRID = pa.list_(pa.string())


def reference_cut(data: bytes, skip: int, lines: int | None, limit: int) -> tuple[bytes, dict[int, int], bytes]:
    """The slice by splitting the whole stream at once: (its bytes with long lines emptied, the
    long lines' {offset: length}, its bytes as they are)."""
    pieces = data.split(b"\n")
    kept = pieces[skip:] if lines is None else pieces[skip : skip + lines]
    ending = b"" if lines is None else b"\n"
    oversized = {k: len(line) for k, line in enumerate(kept) if len(line) > limit}
    emptied = [b"" if k in oversized else line for k, line in enumerate(kept)]
    return b"\n".join(emptied) + ending, oversized, b"\n".join(kept) + ending


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = sorted({0, len(data), *[c % (len(data) + 1) for c in cuts]})
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


lines_of = st.lists(st.integers(0, 12), min_size=0, max_size=12).map(
    lambda lengths: b"\n".join(bytes([97 + k % 26]) * n for k, n in enumerate(lengths)) + b"\n"
)


@settings(max_examples=400, deadline=None)
@given(
    lines_of,
    st.lists(st.integers(0, 200), max_size=6),
    st.integers(0, 4),
    st.integers(0, 8),
    st.booleans(),
    st.integers(0, 10),
)
def test_cut_matches_splitting_the_whole_stream(data, cuts, skip, lines, to_end, limit):
    if to_end:
        data += b"x" * (limit % 3)  # the last slice of a file: its last line may lack a newline
    newline_count = data.count(b"\n")
    skip = min(skip, newline_count)
    wanted = None if to_end or newline_count == skip else max(1, min(lines, newline_count - skip))
    cut = cut_lines(chunked(data, cuts), skip, wanted, limit)
    expected, oversized, original = reference_cut(data, skip, wanted, limit)
    assert cut.complete
    assert (cut.data, cut.oversized) == (expected, oversized)
    assert cut.digest == hashlib.sha256(original).hexdigest()[:32]


def test_a_stream_shorter_than_planned_is_incomplete():
    assert not cut_lines([b"a\nb\n"], skip=1, lines=3).complete
    assert not cut_lines([b"a\n"], skip=2).complete


def record_lines(count: int) -> list[bytes]:
    return [json.dumps({"id": f"r{k}", "grid": ["@.", "$."]}).encode() for k in range(count)]


def huge_line(size: int) -> bytes:
    return b'{"id": "huge", "grid": ["' + b"." * size + b'"]}'


def read_with_peak(path, per_slice: int):
    """Every slice's records, and the peak of Python-allocated memory while reading them."""
    tracemalloc.start()
    try:
        parts = [read_records(spec, "grid", GRID) for spec in plan_slices(str(path), "grid", per_slice)]
        return parts, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_line_past_the_limit_is_rejected_with_bounded_memory(tmp_path):
    size = 5 * MAX_LINE_BYTES
    lines = record_lines(6)
    lines[3] = huge_line(size)
    path = tmp_path / "batch.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    parts, peak = read_with_peak(path, per_slice=4)
    accepted = [line for part in parts for line in part.positions.tolist()]
    rejected = [
        (line, reason)
        for part in parts
        for line, reason in zip(part.rejected.positions.tolist(), part.rejected.reasons)
    ]
    assert accepted == [1, 2, 3, 5, 6]
    assert [line for line, _ in rejected] == [4]
    assert f"{size + len(huge_line(0)):,} bytes long" in rejected[0][1]
    assert f"{MAX_LINE_BYTES:,} bytes" in rejected[0][1]
    assert peak < MAX_LINE_BYTES + 3 * CHUNK < size  # the line itself was never held


def test_a_long_line_in_a_gzip_file_is_dropped_as_it_is_decompressed(tmp_path):
    lines = record_lines(3) + [huge_line(3 * MAX_LINE_BYTES)]
    path = tmp_path / "batch.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines), compresslevel=1))
    parts, peak = read_with_peak(path, per_slice=10)
    assert [part.positions.tolist() for part in parts] == [[1, 2, 3]]
    assert parts[0].rejected.positions.tolist() == [4]
    assert peak < MAX_LINE_BYTES + 3 * CHUNK


def test_a_line_at_the_limit_is_read(tmp_path):
    line = huge_line(0)
    line = line[:-3] + b"." * (MAX_LINE_BYTES - len(line)) + line[-3:]
    assert len(line) == MAX_LINE_BYTES
    path = tmp_path / "batch.jsonl"
    path.write_bytes(line + b"\n" + record_lines(1)[0] + b"\n")
    (part,) = [read_records(spec, "grid", GRID) for spec in plan_slices(str(path), "grid", 10)]
    assert part.ids.to_pylist() == ["huge", "r0"] and not len(part.rejected.positions)


def test_a_dungeon_batch_accounts_for_the_long_line(tmp_path):
    import batchenum

    lines = [json.dumps({"id": f"d{k}", "grid": ["@.$"]}).encode() for k in range(5)]
    lines[2] = huge_line(MAX_LINE_BYTES)
    path = tmp_path / "batch.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = batchenum.run("dungeons", input=str(path), out=str(tmp_path / "out"), serial=True)
    answers, errors = result.tables["answers"].to_pandas(), result.tables["errors"].to_pandas()
    assert answers["line"].tolist() == [1, 2, 4, 5] and answers["gold"].tolist() == [1] * 4
    assert errors["line"].tolist() == [3] and "bytes long" in errors["error"].iloc[0]
