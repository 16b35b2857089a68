"""Inputs as datasets: a folder, a glob or several --input values, on a disk and on S3, of JSONL
parts (some gzip, one zstd) or Parquet parts, give the rows one concatenated file gives; each
record is named by (file, line); reuse holds per file; bad values are errors naming them."""

from __future__ import annotations

import gzip
import json
import os
import re

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from helpers import cli

import batchenum
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.inputs import plan_slices, resolve_inputs
from batchenum.pipeline.job import PlanContext

PARTS = 40
RECORDS = 1_000
# A few records that every reader rejects: a bad grid, a wrong type, no grid, not JSON (named by its
# position, as its reason is: ``as_one_file`` turns those into positions in the whole batch).
BAD = {
    37: {"id": "bad-grid", "grid": ["@7"]},
    205: {"id": "bad-type", "grid": 7},
    512: {"id": "no-grid"},
    900: "not json",
}


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> list[bytes]:
    """RECORDS JSONL lines from ``batchenum generate dungeons``, a few replaced by bad records."""
    path = tmp_path_factory.mktemp("generated") / "dungeons.jsonl"
    cli(
        "generate",
        "dungeons",
        "--count",
        str(RECORDS),
        "--height",
        "1-12",
        "--width",
        "1-12",
        "--seed",
        "22",
        "--out",
        str(path),
    )
    lines = path.read_bytes().splitlines(keepends=True)
    for k, bad in BAD.items():
        lines[k] = (bad if isinstance(bad, str) else json.dumps(bad)).encode() + b"\n"
    return lines


def split(lines: list[bytes], parts: int) -> list[list[bytes]]:
    """Consecutive pieces of uneven sizes (part k gets about 2k+1 shares), none empty."""
    shares = [2 * k + 1 for k in range(parts)]
    cuts = [0] + [round(len(lines) * sum(shares[: k + 1]) / sum(shares)) for k in range(parts)]
    return [lines[cuts[k] : cuts[k + 1]] for k in range(parts)]


def write_jsonl_parts(folder, lines: list[bytes], parts: int = PARTS) -> list[tuple[str, int]]:
    """``parts`` files: every fifth gzip, part 7 zstd, the rest plain; plus files a reader must
    skip.  Returns (name, lines) per part in name order."""
    folder.mkdir(parents=True)
    written = []
    for k, piece in enumerate(split(lines, parts)):
        data = b"".join(piece)
        if k == 7:
            name = f"part-{k:05d}.jsonl.zst"
            with pa.CompressedOutputStream(str(folder / name), "zstd") as stream:
                stream.write(data)
        elif k % 5 == 0:
            name = f"part-{k:05d}.jsonl.gz"
            (folder / name).write_bytes(gzip.compress(data))
        else:
            name = f"part-{k:05d}.jsonl"
            (folder / name).write_bytes(data)
        written.append((name, len(piece)))
    (folder / "_SUCCESS").write_bytes(b"")  # what Spark leaves: skipped, as are hidden files
    (folder / ".part-00001.jsonl.crc").write_bytes(b"\x00\x01crc")
    return written


def write_parquet_parts(folder, lines: list[bytes], parts: int) -> list[tuple[str, int]]:
    """The good records as Parquet parts (several row groups each); (name, rows) per part."""
    folder.mkdir(parents=True)
    records = [json.loads(line) for line in lines if line.startswith(b"{") and b'"bad-' not in line]
    records = [r for r in records if "grid" in r]
    written = []
    for k, piece in enumerate(split(records, parts)):
        name = f"part-{k:03d}.parquet"
        pq.write_table(
            pa.table({"id": [r["id"] for r in piece], "grid": [r["grid"] for r in piece]}),
            folder / name,
            row_group_size=7,
        )
        written.append((name, len(piece)))
    return written


def tables(result) -> dict[str, pd.DataFrame]:
    return {name: result.tables[name].to_pandas() for name in ("answers", "errors")}


def as_one_file(frames: dict[str, pd.DataFrame], parts: list[tuple[str, int]], where: str) -> dict[str, pd.DataFrame]:
    """The tables of a run over ``parts`` (in ``where``), with each record's (file, line) turned into
    its line in the parts concatenated, and the reasons' positions with it: what one file gives."""
    offsets, before = {}, 0
    for name, count in parts:
        offsets[f"{where}/{name}"] = before
        before += count
    out = {}
    for table, frame in frames.items():
        assert set(frame["file"]) <= set(offsets), f"{table}: files {set(frame['file']) - set(offsets)}"
        frame = frame.copy()
        frame["line"] = frame["line"] + frame["file"].map(offsets).astype("int64")
        if "error" in frame and len(frame):
            frame["error"] = [
                f"{reason.split()[0]} {line}:{reason.split(':', 1)[1]}"
                for reason, line in zip(frame["error"], frame["line"])
            ]
            frame["id"] = [
                f"{name.split()[0]} {line}" if re.fullmatch(r"(line|row) \d+", name) else name
                for name, line in zip(frame["id"], frame["line"])
            ]
        out[table] = frame.drop(columns="file").sort_values("line").reset_index(drop=True)
    return out


def assert_same_rows(found: dict[str, pd.DataFrame], expected: dict[str, pd.DataFrame]) -> None:
    for table in ("answers", "errors"):
        pd.testing.assert_frame_equal(found[table], expected[table].drop(columns="file", errors="ignore"))


@pytest.fixture(scope="module")
def one_file(lines, tmp_path_factory) -> dict[str, pd.DataFrame]:
    """The tables of the concatenated file, the reference every dataset run is compared with."""
    folder = tmp_path_factory.mktemp("one")
    path = folder / "all.jsonl"
    path.write_bytes(b"".join(lines))
    frames = tables(
        batchenum.run("dungeons", input=str(path), out=str(folder / "out"), serial=True, records_per_shard=97)
    )
    assert set(frames["answers"]["file"]) == {str(path)}  # one file: the file column is constant
    assert len(frames["answers"]) + len(frames["errors"]) == RECORDS and len(frames["errors"]) == len(BAD)
    return frames


def test_a_folder_of_jsonl_parts_some_compressed_gives_the_rows_of_one_file(lines, one_file, tmp_path):
    parts = write_jsonl_parts(tmp_path / "parts", lines)
    result = batchenum.run(
        "dungeons", input=str(tmp_path / "parts"), out=str(tmp_path / "out"), serial=True, records_per_shard=9
    )
    frames = tables(result)
    assert_same_rows(as_one_file(frames, parts, str(tmp_path / "parts")), one_file)
    # every part's records carry its name, compressed ones too (one shard each, whatever their size)
    assert sorted(set(frames["answers"]["file"]) | set(frames["errors"]["file"])) == [
        str(tmp_path / "parts" / name) for name, _ in parts
    ]
    compressed = [name for name, _ in parts if name.endswith((".gz", ".zst"))]
    plain_shards = sum(-(-count // 9) for name, count in parts if name not in compressed)
    assert result.shards == plain_shards + len(compressed)


def test_parquet_parts_from_a_list_and_a_glob_give_the_rows_of_one_parquet_file(lines, tmp_path):
    parts = write_parquet_parts(tmp_path / "pq", lines, 6)
    whole = pd.concat([pd.read_parquet(tmp_path / "pq" / name) for name, _ in parts])
    pq.write_table(pa.Table.from_pandas(whole, preserve_index=False), tmp_path / "all.parquet", row_group_size=50)
    expected = tables(
        batchenum.run(
            "dungeons",
            input=str(tmp_path / "all.parquet"),
            out=str(tmp_path / "one"),
            serial=True,
            records_per_shard=40,
        )
    )
    # a list of values (the Python API's several --input): a glob for the later parts, then the first
    found = tables(
        batchenum.run(
            "dungeons",
            input=[str(tmp_path / "pq" / "part-00[1-9].parquet"), tmp_path / "pq" / "part-000.parquet"],
            out=str(tmp_path / "out"),
            serial=True,
            records_per_shard=40,
        )
    )
    assert_same_rows(as_one_file(found, parts, str(tmp_path / "pq")), expected)
    assert len(found["answers"]) == sum(count for _, count in parts) and found["errors"].empty


def test_folders_and_globs_on_s3_give_the_rows_of_one_file(
    lines, one_file, tmp_path, s3_server, new_bucket, monkeypatch
):
    for name, value in s3_server.items():
        monkeypatch.setenv(name, value)
    parts = write_jsonl_parts(tmp_path / "parts", lines)
    fs = pafs.S3FileSystem(
        endpoint_override=s3_server["AWS_ENDPOINT_URL"],
        region="us-east-1",
        access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"],
    )
    pafs.copy_files(
        str(tmp_path / "parts"),
        f"{new_bucket}/in/parts",
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=fs,
    )
    where = f"s3://{new_bucket}/in/parts"
    frames = tables(
        batchenum.run("dungeons", input=where + "/", out=f"s3://{new_bucket}/run", serial=True, records_per_shard=50)
    )
    assert_same_rows(as_one_file(frames, parts, where), one_file)
    # a glob over the bucket, and two values: the same files, the same rows
    chosen = [name for name, _ in parts if name.endswith(".gz")]
    values = [f"s3://{new_bucket}/in/**/*.gz", f"s3://{new_bucket}/in/parts/part-00007.jsonl.zst"]
    assert [f.display_root for f in resolve_inputs(values)] == sorted(
        [f"{where}/{name}" for name in chosen] + [f"{where}/part-00007.jsonl.zst"]
    )
    pq_parts = write_parquet_parts(tmp_path / "pq", lines, 5)
    pafs.copy_files(
        str(tmp_path / "pq"), f"{new_bucket}/in/pq", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs
    )
    remote = tables(
        batchenum.run(
            "dungeons", input=f"s3://{new_bucket}/in/pq", out=f"s3://{new_bucket}/pq", serial=True, records_per_shard=40
        )
    )
    local = tables(
        batchenum.run(
            "dungeons", input=str(tmp_path / "pq"), out=str(tmp_path / "pq-out"), serial=True, records_per_shard=40
        )
    )
    assert_same_rows(
        as_one_file(remote, pq_parts, f"s3://{new_bucket}/in/pq"), as_one_file(local, pq_parts, str(tmp_path / "pq"))
    )


def test_a_changed_file_recomputes_its_own_shards_only(lines, tmp_path):
    folder = tmp_path / "parts"
    write_jsonl_parts(folder, lines[:120], parts=6)  # part 0 gzip, 5 gzip, the rest plain
    out = str(tmp_path / "out")

    def run(where=out):
        return batchenum.run("dungeons", input=str(folder), out=where, serial=True, records_per_shard=10)

    first = run()
    again = run()
    assert again.reused == first.shards and not again.recomputed
    # same size and time, other content, in one plain part (cp -p, rsync -t): its one shard is recomputed
    plain = folder / "part-00003.jsonl"
    data, stat = plain.read_bytes(), os.stat(plain)
    old = data.splitlines()[0]
    new = json.dumps({"id": json.loads(old)["id"], "grid": ["@"]}, separators=(",", ":")).encode()
    assert len(new) <= len(old) and new != old
    plain.write_bytes(data.replace(old, new.ljust(len(old)), 1))
    os.utime(plain, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = run()
    assert changed.recomputed == ["f0003-s00000"] and changed.reused == first.shards - 1
    # a compressed part rewritten with one record more: only its one shard is computed again
    gz = folder / "part-00005.jsonl.gz"
    content = gzip.decompress(gz.read_bytes()) + b'{"id": "extra", "grid": ["@$"]}\n'
    gz.write_bytes(gzip.compress(content))
    grown = run()
    assert grown.reused == first.shards - 1 and grown.shards == first.shards
    fresh = run(str(tmp_path / "fresh"))
    for table in ("answers", "errors"):
        pd.testing.assert_frame_equal(grown.tables[table].to_pandas(), fresh.tables[table].to_pandas())
    answers = grown.tables["answers"].to_pandas().set_index(["file", "line"])
    assert answers.loc[(str(plain), 1), "gold"] == 0
    assert answers.loc[(str(gz), len(content.splitlines())), "id"] == "extra"


def test_resolve_skips_hidden_and_underscore_names_but_not_a_file_named_alone(tmp_path):
    (tmp_path / "d" / "_temporary").mkdir(parents=True)
    (tmp_path / "d" / "sub").mkdir()
    for name in ("b.jsonl", "a.jsonl", "_SUCCESS", ".a.jsonl.crc", "_temporary/x.jsonl", "sub/c.jsonl"):
        (tmp_path / "d" / name).write_text("")
    found = [f.display_root for f in resolve_inputs(str(tmp_path / "d"))]
    assert found == [str(tmp_path / "d" / n) for n in ("a.jsonl", "b.jsonl", "sub/c.jsonl")]
    assert [f.display_root for f in resolve_inputs(str(tmp_path / "d" / "_SUCCESS"))] == [
        str(tmp_path / "d" / "_SUCCESS")
    ]
    assert [f.display_root for f in resolve_inputs(str(tmp_path / "d" / "**" / "c.jsonl"))] == [
        str(tmp_path / "d" / "sub" / "c.jsonl")
    ]
    with pytest.raises(InputError, match="no input given"):
        resolve_inputs([])


# ------------------------------------------------------------------------- through the real CLI


def test_several_values_globs_and_input_again_through_the_cli(lines, tmp_path):
    parts = write_jsonl_parts(tmp_path / "parts", lines)
    folder = tmp_path / "parts"
    # the shell expands an unquoted glob into several values after one --input; --input again adds more
    done = cli(
        "run",
        "dungeons",
        "--input",
        str(folder / "part-0000[0-4]*"),
        str(folder / "part-00005.jsonl.gz"),
        "--input",
        str(folder / "part-0003*"),
        "--out",
        str(tmp_path / "out"),
        "--serial",
        "--json",
    )
    report = json.loads(done.stdout)
    chosen = [(n, c) for n, c in parts if n[:10] in {f"part-0000{k}" for k in range(6)} or n.startswith("part-0003")]
    assert report["totals"]["records"] == sum(count for _, count in chosen)
    assert report["params"]["input"] == sorted(
        [str(folder / "part-0000[0-4]*"), str(folder / "part-00005.jsonl.gz"), str(folder / "part-0003*")]
    )
    files = set(pd.read_parquet(report["tables"]["answers"]["path"])["file"]) | set(
        pd.read_parquet(report["tables"]["errors"]["path"])["file"]
    )
    assert sorted(files) == [str(folder / name) for name, _ in chosen]


def test_bad_input_values_are_errors_naming_them_through_the_cli(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "a", "grid": ["@"]}\n')
    pq.write_table(pa.table({"id": ["b"], "grid": [["@"]]}), tmp_path / "b.parquet")
    (tmp_path / "empty").mkdir()
    cases = [
        (
            [str(tmp_path / "a.jsonl"), str(tmp_path / "missing.jsonl")],
            f"input file {tmp_path / 'missing.jsonl'} does not exist",
        ),
        ([str(tmp_path / "*.csv")], f"input {tmp_path / '*.csv'} matches no file"),
        ([str(tmp_path / "empty")], f"input folder {tmp_path / 'empty'} holds no files"),
        (
            [str(tmp_path / "a.jsonl"), str(tmp_path / "*.jsonl")],
            f"input file {tmp_path / 'a.jsonl'} is named twice (by {tmp_path / 'a.jsonl'} and by {tmp_path / '*.jsonl'})",
        ),
        (
            [str(tmp_path / "a.jsonl"), str(tmp_path / "b.parquet")],
            f"the input mixes JSONL ({tmp_path / 'a.jsonl'}) and Parquet ({tmp_path / 'b.parquet'})",
        ),
    ]
    for number, (values, message) in enumerate(cases):
        status = 2 if number < 3 else 1  # an input naming no file is a usage mistake; the rest stop the run
        done = cli("run", "dungeons", "--input", *values, "--out", str(tmp_path / "out"), "--serial", expect=status)
        assert f"batchenum: error: {message}" in done.stderr, (values, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_large_batch_of_files_is_counted_by_tasks_of_one_file_each(lines, tmp_path):
    parts = write_jsonl_parts(tmp_path / "parts", lines, parts=8)
    counted = []

    def watching_map(fn, items):  # runs the tasks here, noting what each one was given
        counted.extend(items)
        return [fn(item) for item in items]

    by_driver = plan_slices(str(tmp_path / "parts"), "grid", 30, block=512)
    by_tasks = plan_slices(
        str(tmp_path / "parts"),
        "grid",
        30,
        PlanContext(task_map=watching_map),
        block=512,
        task_blocks=3,
        driver_bytes=0,
    )
    assert by_tasks == by_driver
    plain = {str(tmp_path / "parts" / name) for name, _ in parts if name.endswith(".jsonl")}
    assert {blocks.source.display_root for blocks in counted} == plain  # compressed files are not counted
    assert all(blocks.end - blocks.first <= 3 for blocks in counted)
    assert sum(blocks.end - blocks.first for blocks in counted) == sum(-(-os.path.getsize(p) // 512) for p in plain)
