"""Every table read by the five readers a data engineer reaches for (pandas, pyarrow.dataset,
DuckDB, polars, Ray Data) gives the same rows and the same column types; a whole job folder fails
loudly in each of them; and every line of the README's "Reading the tables" section runs."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from helpers import REPO

import batchenum
from batchenum.pipeline.shard_store import SHARDS_DIR
from batchenum.pipeline.storage import Storage
from batchenum.pipeline.table_commit import GUARD_FILE, read_manifest

# (job folder, table, the table's path below it, a column whose values identify a row)
TABLES = [
    ("dungeons", "answers", "answers", "line"),
    ("dungeons", "errors", "errors", "line"),
    ("palago", "creatures", "creatures", "key"),
    ("palago", "creature_counts", "creature_counts.parquet", "n"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> pathlib.Path:
    """A dungeon batch with rejected records and a Palago catalogue, written by real runs."""
    root = tmp_path_factory.mktemp("readers")
    batch = root / "dungeons.jsonl"
    _generate(batch)
    lines = batch.read_text().splitlines(keepends=True)
    batch.write_text("".join(lines[:50]) + "not json\n" + '{"id": "x", "grid": 7}\n' + "".join(lines[50:]))
    batchenum.run("dungeons", input=str(batch), out=str(root / "runs"), records_per_shard=200, serial=True)
    batchenum.run("palago", max_n=10, catalogue_max_n=10, out=str(root / "runs"), serial=True)
    return root


def _generate(path: pathlib.Path) -> None:
    from batchenum.jobs.cli import main

    assert (
        main(
            [
                "generate",
                "dungeons",
                "--count",
                "600",
                "--height",
                "8",
                "--width",
                "8",
                "--seed",
                "3",
                "--out",
                str(path),
            ]
        )
        == 0
    )


def _arrow(table: pa.Table, key: str) -> pa.Table:
    """A reader's answer in one comparable form: strings as ``string``, rows in ``key`` order."""
    fields = [
        pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type) else f.type)
        for f in table.schema
    ]
    return table.cast(pa.schema(fields)).sort_by(key).replace_schema_metadata(None)


def _read_all(path: pathlib.Path, ray) -> dict[str, pa.Table]:
    glob = str(path / "*.parquet") if path.is_dir() else str(path)
    return {
        "pandas": pa.Table.from_pandas(pd.read_parquet(path, page_checksum_verification=True), preserve_index=False),
        "pyarrow.dataset": ds.dataset(path).to_table(),
        "duckdb": duckdb.sql(f"FROM '{glob}'").to_arrow_table(),
        "polars": pl.read_parquet(glob).to_arrow(),
        "ray.data": pa.concat_tables(ray.get(ray.data.read_parquet(str(path)).to_arrow_refs())),
    }


@pytest.mark.parametrize("job, table, where, key", TABLES, ids=[t[1] for t in TABLES])
def test_every_reader_returns_the_same_rows_and_types(runs, ray_session, job, table, where, key):
    import ray.data  # noqa: F401  (Ray Data from the installed ray)

    path = runs / "runs" / job / where
    answers = {reader: _arrow(read, key) for reader, read in _read_all(path, ray_session).items()}
    manifest = read_manifest(Storage.at(str(runs / "runs" / job)))
    expected = answers.pop("pyarrow.dataset")
    assert expected.num_rows == manifest["tables"][table]["rows"] > 0
    assert all(f.type in (pa.int64(), pa.string()) for f in expected.schema), expected.schema
    for reader, read in answers.items():
        assert read.schema == expected.schema, (reader, read.schema)
        assert read.equals(expected), reader


def test_the_catalogues_n_is_an_integer_column_in_every_reader(runs, ray_session):
    for reader, read in _read_all(runs / "runs" / "palago" / "creatures", ray_session).items():
        assert read.schema.field("n").type == pa.int64(), reader


@pytest.mark.parametrize("job", ["dungeons", "palago"])
def test_a_whole_job_folder_fails_loudly_in_every_reader(runs, ray_session, job):
    folder = runs / "runs" / job
    attempts = {
        "pandas": lambda: pd.read_parquet(folder),
        "pyarrow.dataset": lambda: ds.dataset(folder).to_table(),
        "duckdb": lambda: duckdb.sql(f"FROM '{folder}/**/*.parquet'").to_arrow_table(),
        "polars": lambda: pl.read_parquet(f"{folder}/**/*.parquet"),
        "ray.data": lambda: ray_session.data.read_parquet(str(folder)).count(),
    }
    for reader, attempt in attempts.items():
        with pytest.raises(Exception) as raised:
            attempt()
        assert GUARD_FILE in str(raised.value) or "magic bytes" in str(raised.value) or "PAR1" in str(raised.value), (
            reader,
            raised.value,
        )


def test_the_shard_store_is_outside_every_tables_folder(runs):
    for job, _, where, _ in TABLES:
        path = runs / "runs" / job / where
        files = list(path.rglob("*")) if path.is_dir() else [path]
        assert files and not any(SHARDS_DIR in f.parts for f in files)
    assert (runs / "runs" / "dungeons" / SHARDS_DIR).is_dir()


def _readme_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Reading the tables") :]
    section = section[: section.index("\n## ", 3)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_every_line_of_the_readme_reading_section_runs(runs, ray_session, capsys):
    blocks = _readme_blocks()
    assert len(blocks) == 3 and all("runs/" in block for block in blocks)
    (runs / "results" / "palago").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "results" / "palago" / "creature_counts.parquet", runs / "results" / "palago")
    with _cwd(runs):
        for block in blocks:
            exec(compile(block, "README.md", "exec"), {})  # noqa: S102 (our own README)
    printed = capsys.readouterr().out
    assert "count_star()" in printed and "free" in printed


@contextlib.contextmanager
def _cwd(path: pathlib.Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _cluster_doc_block() -> str:
    text = (REPO / "docs" / "cluster.md").read_text()
    section = text[text.index("## Reading results from object storage") :]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return block


def test_every_reader_gives_the_same_tables_from_s3(runs, ray_session, s3_server, new_bucket, monkeypatch, capsys):
    import pyarrow.fs as pafs

    for name, value in s3_server.items():
        monkeypatch.setenv(name, value)
    s3 = pafs.S3FileSystem(
        endpoint_override=s3_server["AWS_ENDPOINT_URL"],
        region="us-east-1",
        access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"],
    )
    pafs.copy_files(
        str(runs / "runs"), f"{new_bucket}/runs", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3
    )
    polars_options = {
        "aws_endpoint_url": s3_server["AWS_ENDPOINT_URL"],
        "aws_allow_http": "true",
        "aws_access_key_id": s3_server["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": s3_server["AWS_SECRET_ACCESS_KEY"],
        "aws_region": "us-east-1",
    }
    for job, table, where, key in TABLES:
        local = _arrow(ds.dataset(runs / "runs" / job / where).to_table(), key)
        uri = f"s3://{new_bucket}/runs/{job}/{where}"
        glob = uri + "/*.parquet" if (runs / "runs" / job / where).is_dir() else uri
        dataset = ds.dataset(uri)  # noqa: F841  (DuckDB scans the Python variable named in its query)
        reads = {
            "pandas": pa.Table.from_pandas(pd.read_parquet(uri, page_checksum_verification=True), preserve_index=False),
            "pyarrow.dataset": ds.dataset(uri).to_table(),
            "duckdb": duckdb.sql("FROM dataset").to_arrow_table(),
            "polars": pl.read_parquet(glob, storage_options=polars_options).to_arrow(),
            "ray.data": pa.concat_tables(
                ray_session.get(ray_session.data.read_parquet(uri, filesystem=s3).to_arrow_refs())
            ),
        }
        for reader, read in reads.items():
            read = _arrow(read, key)
            assert read.schema == local.schema, (table, reader, read.schema)
            assert read.equals(local), (table, reader)
    block = _cluster_doc_block().replace("s3://my-bucket/", f"s3://{new_bucket}/")
    exec(compile(block, "docs/cluster.md", "exec"), {})  # noqa: S102 (our own docs)
    rows = len(ds.dataset(runs / "runs" / "dungeons" / "answers").to_table())
    assert f"{rows}" in capsys.readouterr().out
