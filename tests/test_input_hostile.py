"""Hostile input is bounded (issue 35 item 5): symlink loops, files reached twice, names that are
not UTF-8, gzip bombs, blank-line floods and maximal records, each run for real (real links, real
gzip streams, the real CLI in a child process) within a time limit, and its peak resident memory
(``os.wait4``, through a small launcher) held under the bounds below."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchenum.pipeline.errors import InputError
from batchenum.pipeline.inputs import resolve_inputs
from batchenum.pipeline.inputs.plan import MAX_DECOMPRESSED_BYTES, MAX_DECOMPRESSED_LINES

MB = 1 << 20
# Peak resident memory of the CLI refusing an input, or reading a small batch: well below what the
# hostile inputs cost before (2.6 GB and more); a bare `batchenum run --serial` takes about 200 MB.
REFUSAL_PEAK = 600 * MB


# Runs a command and prints its peak RSS in KiB (os.wait4).  A child forked from pytest itself would
# count pytest's own peak as its own (Linux keeps the high-water mark of the image before exec),
# hence this small launcher, whose children start from its few MB.
_LAUNCHER = (
    "import os, subprocess, sys; child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
    "_, status, usage = os.wait4(child.pid, 0); print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)"
)


def measured(*args: str, timeout: float = 120, python: bool = False) -> tuple[int, str, int]:
    """(exit status, standard error, peak resident bytes) of ``batchenum ARGS`` (``python ARGS``
    when ``python``) in a child process, killed (its whole group) if it outlives ``timeout`` seconds."""
    command = [sys.executable, *args] if python else [sys.executable, "-m", "batchenum", *args]
    with tempfile.TemporaryFile() as stderr:
        launcher = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, *command],
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
            text=True,
        )
        try:
            printed, _ = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.communicate()
            raise AssertionError(f"{' '.join(args)} did not end within {timeout} s") from None
        stderr.seek(0)
        status, peak_kib = printed.split()
        return int(status), stderr.read().decode(errors="replace"), int(peak_kib) * 1024


def records(count: int, prefix: str = "r") -> str:
    return "".join(json.dumps({"id": f"{prefix}{k}", "grid": ["@.$"]}) + "\n" for k in range(count))


# ------------------------------------------------------------------------------ links and names


def test_a_symlink_loop_stops_at_once_naming_the_link(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(497))
    (batch / "self").symlink_to(".")
    (batch / "again").symlink_to(".")  # two loops: 2^k paths at depth k, where pyarrow listed for ever
    with pytest.raises(InputError) as caught:
        resolve_inputs(str(batch))
    message = str(caught.value)
    assert f"{batch}/again (the same as {batch})" in message and f"{batch}/self (the same as {batch})" in message
    assert "Every file is read once: remove those links" in message
    status, stderr, peak = measured(
        "run", "dungeons", "--input", str(batch), "--out", str(tmp_path / "out"), "--serial", "--quiet", timeout=60
    )
    assert status == 1 and "a second time, through links" in stderr and "Traceback" not in stderr
    assert peak < REFUSAL_PEAK, f"{peak / MB:.0f} MB"
    assert not (tmp_path / "out" / "dungeons" / "answers").exists()


def test_a_file_reached_twice_is_named_with_the_path_it_repeats(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(5))
    (batch / "b.jsonl").symlink_to("a.jsonl")
    os.link(batch / "a.jsonl", batch / "c.jsonl")  # a hard link is the same file too
    with pytest.raises(InputError, match="reaches 2 files or folders a second time") as caught:
        resolve_inputs(str(batch))
    assert f"{batch}/b.jsonl (the same as {batch}/a.jsonl)" in str(caught.value)
    assert f"{batch}/c.jsonl (the same as {batch}/a.jsonl)" in str(caught.value)
    # The same file named by two values under two paths
    (tmp_path / "elsewhere.jsonl").symlink_to(batch / "a.jsonl")
    with pytest.raises(InputError, match=f"{tmp_path}/elsewhere.jsonl \\(the same as {batch}/a.jsonl\\)"):
        resolve_inputs([str(batch / "a.jsonl"), str(tmp_path / "elsewhere.jsonl")])


def test_two_links_to_one_folder_are_refused_and_a_link_to_another_file_is_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.jsonl").write_text(records(3, "x"))
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(2))
    (batch / "x.jsonl").symlink_to(outside / "x.jsonl")  # a file elsewhere, reached once: read
    assert [source.display_root for source in resolve_inputs(str(batch))] == [f"{batch}/a.jsonl", f"{batch}/x.jsonl"]
    (batch / "one").symlink_to(outside)
    (batch / "two").symlink_to(outside)
    with pytest.raises(InputError, match=f"{batch}/two \\(the same as {batch}/one\\)"):
        resolve_inputs(str(batch))


def test_a_glob_refuses_a_loop_it_could_enter_and_ignores_one_it_cannot(tmp_path):
    base = tmp_path / "base"
    (base / "parts").mkdir(parents=True)
    (base / "parts" / "p1.jsonl").write_text(records(2))
    (base / "parts" / "self").symlink_to(".")
    with pytest.raises(InputError, match=f"{base}/parts/self \\(the same as {base}/parts\\)"):
        resolve_inputs(str(base / "**" / "*.jsonl"))
    (base / "loop").symlink_to(".")
    assert [s.display_root for s in resolve_inputs(str(base / "parts" / "p*.jsonl"))] == [f"{base}/parts/p1.jsonl"]
    assert [s.display_root for s in resolve_inputs(str(base / "par*" / "p*.jsonl"))] == [f"{base}/parts/p1.jsonl"]


def test_a_name_that_is_not_utf8_is_named_by_its_bytes(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(2))
    bad = os.path.join(os.fsencode(batch), b"caf\xe9.jsonl")
    with open(bad, "wb") as handle:
        handle.write(records(1).encode())
    expected = repr(bad)  # b'/tmp/.../batch/caf\xe9.jsonl'
    with pytest.raises(InputError) as caught:
        resolve_inputs(str(batch))
    assert expected in str(caught.value) and "is a name that is not UTF-8; rename it" in str(caught.value)
    with pytest.raises(InputError, match="is a name that is not UTF-8"):
        resolve_inputs(os.fsdecode(bad))  # named on its own, as a shell passes it
    status, stderr, _ = measured(
        "run", "dungeons", "--input", str(batch), "--out", str(tmp_path / "out"), "--serial", "--quiet", timeout=60
    )
    assert status == 1 and expected in stderr and "codec can't" not in stderr
    os.remove(bad)
    os.makedirs(os.path.join(os.fsencode(batch), b"_hidden\xe9"))  # skipped names are never read: no error
    assert len(resolve_inputs(str(batch))) == 1


# ------------------------------------------------------------------ compressed files and blank lines


def gzip_of(path: Path, piece: bytes, total: int) -> Path:
    """A real gzip stream of ``piece`` repeated up to ``total`` bytes, written 16 MiB at a time."""
    block = piece * max(1, (16 * MB) // len(piece))
    with gzip.open(path, "wb", compresslevel=6) as handle:
        for _ in range(max(1, total // len(block))):
            handle.write(block)
    return path


def test_a_gzip_bomb_of_newlines_stops_at_the_line_limit_with_bounded_memory(tmp_path):
    bomb = gzip_of(tmp_path / "bomb.jsonl.gz", b"\n", 256 * MB)  # about 260 KB of gzip
    assert bomb.stat().st_size < 400_000
    status, stderr, peak = measured(
        "run", "dungeons", "--input", str(bomb), "--out", str(tmp_path / "out"), "--serial", "--quiet", timeout=120
    )
    assert status == 1, stderr
    assert f"input file {bomb} decompresses to more than {MAX_DECOMPRESSED_LINES:,} lines" in stderr
    assert "split it into parts" in stderr and "Traceback" not in stderr
    assert peak < REFUSAL_PEAK, f"{peak / MB:.0f} MB"


def test_a_gzip_of_tiny_records_stops_at_the_line_limit(tmp_path):
    tiny = gzip_of(tmp_path / "tiny.jsonl.gz", records(1, "t").encode(), 400 * 10**6)  # about 1 MB of gzip
    status, stderr, peak = measured(
        "run", "dungeons", "--input", str(tiny), "--out", str(tmp_path / "out"), "--serial", "--quiet", timeout=120
    )
    assert status == 1 and f"decompresses to more than {MAX_DECOMPRESSED_LINES:,} lines" in stderr, stderr
    assert peak < REFUSAL_PEAK, f"{peak / MB:.0f} MB"


def test_a_gzip_of_long_lines_stops_at_the_byte_limit(tmp_path):
    line = json.dumps({"id": "wide", "grid": ["." * 1000] * 1000}).encode() + b"\n"  # a maximal dungeon
    wide = gzip_of(tmp_path / "wide.jsonl.gz", line, MAX_DECOMPRESSED_BYTES + 32 * MB)
    status, stderr, peak = measured(
        "run", "dungeons", "--input", str(wide), "--out", str(tmp_path / "out"), "--serial", "--quiet", timeout=120
    )
    assert status == 1, stderr
    assert f"decompresses to more than {MAX_DECOMPRESSED_BYTES:,} bytes ({MAX_DECOMPRESSED_BYTES >> 20} MiB)" in stderr
    assert peak < REFUSAL_PEAK + MAX_DECOMPRESSED_BYTES, f"{peak / MB:.0f} MB"  # it holds what it read


def test_blank_lines_keep_their_numbers_and_cost_no_memory_per_line(tmp_path):
    """A few records between millions of blank and whitespace-only lines, plain (33 million lines)
    and gzip (just under the line limit): every record read, under its own line number."""
    import pandas as pd

    flood = b"\n" * (7 << 20) + b" \r\n" * (1 << 20)
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(b"".join(records(1, f"r{k}-").encode() + flood for k in range(4)))
    packed = tmp_path / "packed.jsonl.gz"
    packed.write_bytes(gzip.compress(b"\n" * (3 << 20) + records(1, "g").encode() + b"\t\n" * 1000, 6))
    lines_per_record = 1 + (8 << 20)
    for batch, expected in (
        (plain, {f"r{k}-0": 1 + k * lines_per_record for k in range(4)}),
        (packed, {"g0": 1 + (3 << 20)}),
    ):
        out = tmp_path / f"out-{batch.name}"
        status, stderr, peak = measured(
            "run", "dungeons", "--input", str(batch), "--out", str(out), "--serial", "--quiet", timeout=300
        )
        assert status == 0, stderr
        answers = pd.read_parquet(out / "dungeons" / "answers")
        assert dict(zip(answers.id, answers.line)) == expected
        assert not os.path.exists(out / "dungeons" / "errors") or pd.read_parquet(out / "dungeons" / "errors").empty
        assert peak < REFUSAL_PEAK, f"{batch.name}: {peak / MB:.0f} MB"


# ----------------------------------------------------------------------------- a shard's bytes


def maximal_dungeons(count: int) -> list[bytes]:
    """``count`` JSONL lines of 1,000 x 1,000 dungeons (about 1 MB each, the --max-cells default)."""
    grid = ["@" + "." * 999] + ["." * 1000] * 999
    return [json.dumps({"id": f"m{k}", "grid": grid}).encode() + b"\n" for k in range(count)]


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_a_shard_reads_at_most_max_slice_bytes_whatever_its_record_count(tmp_path):
    from batchenum.pipeline.inputs import read_records
    from batchenum.pipeline.inputs.plan import MAX_SLICE_BYTES, SliceSize, plan_slices

    lines = maximal_dungeons(300)  # 300 MB: the 25,000-record minimum once made this one shard
    batch = tmp_path / "maximal.jsonl"
    batch.write_bytes(b"".join(lines))
    for size in (SliceSize(25_000, 2), 1_000):
        specs = plan_slices(str(batch), "grid", size)
        assert len(specs) == 3 and all(spec["to"] - spec["from"] <= MAX_SLICE_BYTES for spec in specs)
        assert [spec["first_line"] for spec in specs] == [
            1,
            1 + specs[0]["lines"],
            1 + specs[0]["lines"] + specs[1]["lines"],
        ]
    read = [read_records(spec, "grid", pa.list_(pa.string())) for spec in specs]
    assert [line for records in read for line in records.positions.tolist()] == list(range(1, 301))
    assert [i for records in read for i in records.ids.to_pylist()] == [f"m{k}" for k in range(300)]

    table = pa.table({"id": [f"m{k}" for k in range(300)], "grid": [json.loads(line)["grid"] for line in lines]})
    pq.write_table(table, tmp_path / "maximal.parquet", row_group_size=10, use_dictionary=False)  # footer: its bytes
    specs = plan_slices(str(tmp_path / "maximal.parquet"), "grid", SliceSize(25_000, 2))
    assert len(specs) == 3 and [spec["end_row"] - spec["start_row"] for spec in specs] == [133, 133, 34]


def test_reading_the_largest_shard_of_maximal_records_is_bounded(tmp_path):
    from batchenum.pipeline.inputs.plan import MAX_SLICE_BYTES, SliceSize, plan_slices

    batch = tmp_path / "maximal.jsonl"
    batch.write_bytes(b"".join(maximal_dungeons(200)))
    spec = max(plan_slices(str(batch), "grid", SliceSize(25_000, 2)), key=lambda spec: spec["to"] - spec["from"])
    code = (
        "import json, sys, pyarrow as pa; from batchenum.pipeline.inputs import read_records; "
        "records = read_records(json.loads(sys.argv[1]), 'grid', pa.list_(pa.string())); "
        "sys.exit(0 if len(records.ids) == json.loads(sys.argv[1])['lines'] else 3)"
    )
    status, stderr, peak = measured("-c", code, json.dumps(spec), python=True)
    assert status == 0, stderr
    # the slice's bytes, its records as Arrow strings and the reader's buffers: a few times the slice
    assert peak < REFUSAL_PEAK + 4 * MAX_SLICE_BYTES, f"{peak / MB:.0f} MB"


# ------------------------------------------------------------------------- Parquet bombs (issue 48)

# Writes a zstd Parquet file whose row groups each hold ROWS records of an id of SIZE bytes (one
# byte repeated: a few KB compressed) and a one-cell grid, GROUPS times, in a child process so
# that pytest's own memory stays small.  Statistics and dictionaries off: they would cost seconds.
_PARQUET_BOMB = """
import sys, pyarrow as pa, pyarrow.parquet as pq
size, rows, groups, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
offsets = pa.array([k * size for k in range(rows + 1)], pa.int32()).buffers()[1]
ids = pa.Array.from_buffers(pa.string(), rows, [None, offsets, pa.py_buffer(b"a" * (size * rows))])
table = pa.table({"id": ids, "grid": pa.array([["@"]] * rows)})
options = dict(compression="zstd", compression_level=1, use_dictionary=False, write_statistics=False)
with pq.ParquetWriter(path, table.schema, **options) as writer:
    for _ in range(groups):
        writer.write_table(table, row_group_size=rows)
"""


def parquet_bomb(path: Path, size: int, rows: int, groups: int) -> Path:
    subprocess.run([sys.executable, "-c", _PARQUET_BOMB, str(size), str(rows), str(groups), str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    """The issue's bomb: 8 rows, each alone in its row group, each holding a 256 MiB id."""
    return parquet_bomb(tmp_path_factory.mktemp("bomb") / "bomb.parquet", 256 * MB, 1, 8)


def test_a_parquet_bomb_is_one_error_row_per_record_never_read(bomb, tmp_path):
    import pandas as pd

    from batchenum.pipeline.inputs.plan import MAX_RECORD_BYTES

    assert bomb.stat().st_size < 100_000  # 68 KB of zstd for 2 GiB of ids
    out = tmp_path / "out"
    status, stderr, peak = measured("run", "dungeons", "--input", str(bomb), "--out", str(out), "--serial", timeout=120)
    assert status == 0, stderr
    assert "Traceback" not in stderr and "terminate called" not in stderr
    assert peak < REFUSAL_PEAK, f"{peak / MB:.0f} MB"  # 240 MB measured; 3.6 GB and SIGABRT before
    errors = pd.read_parquet(out / "dungeons" / "errors")
    assert errors.line.tolist() == list(range(1, 9)) and errors.id.tolist() == [f"row {k}" for k in range(1, 9)]
    assert errors.error[0].startswith(f"row 1: the record decodes to {256 * MB + 71:,} bytes, more than the ")
    assert errors.error[0].endswith(f"{MAX_RECORD_BYTES:,} (32 MiB) a record may take")


def test_a_parquet_row_group_over_the_cap_refuses_the_file_before_reading(tmp_path):
    from batchenum.pipeline.inputs.plan import MAX_ROW_GROUP_BYTES

    wide = parquet_bomb(tmp_path / "wide.parquet", 100 * MB, 3, 1)  # 300 MiB in one row group
    status, stderr, peak = measured(
        "run", "dungeons", "--input", str(wide), "--out", str(tmp_path / "out"), "--serial", "--quiet", timeout=120
    )
    assert status == 1, stderr
    assert f"Parquet input {wide}: row group 1 of 1 holds 3 rows that decompress to " in stderr
    assert f"more than the {MAX_ROW_GROUP_BYTES:,} (256 MiB) a row group may take" in stderr
    assert "row_group_size=1" in stderr and "Traceback" not in stderr
    assert peak < REFUSAL_PEAK, f"{peak / MB:.0f} MB"


def test_a_record_over_the_cap_in_a_shared_row_group_is_rejected_and_its_neighbours_kept(tmp_path):
    from batchenum.pipeline.inputs import plan_slices, read_records

    path = tmp_path / "mixed.parquet"
    ids = ["small", "x" * (40 * MB), "after"]
    pq.write_table(pa.table({"id": ids, "grid": [["@"], ["@"], ["@$"]]}), path, use_dictionary=False)
    (spec,) = plan_slices(str(path), "grid", 10)
    read = read_records(spec, "grid", pa.list_(pa.string()))
    assert read.ids.to_pylist() == ["small", "after"] and read.positions.tolist() == [1, 3]
    assert read.rejected.positions.tolist() == [2] and read.rejected.names == ["row 2"]
    assert read.rejected.reasons[0].startswith(f"row 2: the record decodes to {40 * MB + 13:,} bytes")
