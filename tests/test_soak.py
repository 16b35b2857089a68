"""The soak in the suite: one dungeon batch on S3, through the fault proxy, survives 10 random
whole-group SIGKILLs of the driver and 3 storage outages, then runs to the end; its tables equal a
clean serial run's and hold every record in exactly one table (benchmarks/faults_soak.py prints the
figures, and runs the same on Ray workers).  Each killed run pauses between a shard's answers and
its errors, so that most kills land between the two, and after the fifth kill one committed record
of the input changes (same size): a later run rewrites its committed shard, answers then errors.  The driver computes here (--serial): ten private Rays starting on a
shared two-core machine took the soak from about 2 to 10 minutes, and Ray workers' kills are the
subject of tests/test_faults.py."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from fault_proxy import FaultProxy
from helpers import assert_exit, cli, cli_command, read_s3, s3_fs
from soak import soak

pytestmark = pytest.mark.slow

RECORDS, PER_SHARD = 6_000, 100  # 61 shards (with the two bad lines): room for 10 kills, each after 2+ commits
SHARDS = -(-(RECORDS + 2) // PER_SHARD)
CHANGED_LINE = 150  # in the second shard, committed by the first run (a serial run goes in plan order)


def test_ten_kills_and_three_outages_during_one_batch_on_s3_end_as_a_clean_serial_run(s3_server, new_bucket, tmp_path):
    batch = tmp_path / "batch.jsonl"
    cli(
        "generate",
        "dungeons",
        "--count",
        str(RECORDS),
        "--height",
        "7",
        "--width",
        "9",
        "--seed",
        "11",
        "--out",
        str(batch),
    )
    with open(batch, "a", encoding="utf-8") as handle:  # a rejected record and an unreadable line
        handle.write(json.dumps({"id": "bad", "grid": 7}) + "\nnot json\n")
    fs = s3_fs(s3_server)
    with fs.open_output_stream(f"{new_bucket}/in/batch.jsonl") as handle:
        handle.write(batch.read_bytes())

    def change_a_committed_record(kill: int) -> None:
        if kill != 4:
            return
        lines = batch.read_bytes().splitlines(keepends=True)
        lines[CHANGED_LINE - 1] = b"not json".ljust(len(lines[CHANGED_LINE - 1]) - 1) + b"\n"  # the same size
        batch.write_bytes(b"".join(lines))
        with fs.open_output_stream(f"{new_bucket}/in/batch.jsonl") as handle:
            handle.write(batch.read_bytes())

    with FaultProxy(int(s3_server["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])) as proxy:
        env = {**os.environ, **s3_server, "AWS_ENDPOINT_URL": proxy.endpoint}
        command = cli_command(
            "run",
            "dungeons",
            "--input",
            f"s3://{new_bucket}/in/batch.jsonl",
            "--records-per-shard",
            str(PER_SHARD),
            "--serial",
            "--storage-timeout",
            "60",
            "--out",
            f"s3://{new_bucket}/run",
        )
        figures = soak(
            command,
            env,
            proxy,
            fs,
            f"{new_bucket}/run/dungeons/_shards/answers",
            SHARDS,
            kills=10,
            outages=3,
            outage=2.0,
            window=0.5,  # each shard pauses between its two tables, so that kills land there too
            on_kill=change_a_committed_record,
        )
    clean = cli(
        "run",
        "dungeons",
        "--input",
        str(batch),
        "--records-per-shard",
        str(PER_SHARD),
        "--serial",
        "--out",
        str(tmp_path / "clean"),
    )
    assert figures.kills == 10 and figures.outages == 3
    assert figures.window_kills >= 3, figures  # kills between a shard's answers and its errors
    assert all(count >= 2 for count in figures.commits_between_kills)  # every resume made progress
    for table in ("answers", "errors"):
        expected = pd.read_parquet(tmp_path / "clean" / "dungeons" / table)
        found = read_s3(s3_server, f"s3://{new_bucket}/run/dungeons/{table}")
        # the same records, read from a local file by one run and from s3:// by the other
        pd.testing.assert_frame_equal(found.drop(columns="file"), expected.drop(columns="file"))
    answers = read_s3(s3_server, f"s3://{new_bucket}/run/dungeons/answers")
    errors = read_s3(s3_server, f"s3://{new_bucket}/run/dungeons/errors")
    assert len(answers) + len(errors) == RECORDS + 2  # every record accounted for
    assert sorted([*answers["line"], *errors["line"]]) == list(range(1, RECORDS + 3))  # each in exactly one table
    assert CHANGED_LINE in set(errors["line"])  # the changed record: its shard was rewritten
    assert_exit(clean, 0)
