"""Object storage for real: every run here reads and writes s3:// on a real S3-compatible server
(moto's standalone server, over HTTP on 127.0.0.1, a subprocess stopped by pid).  Nothing in
boto or pyarrow is patched.  Tables from S3 must equal those of a serial run on a local disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import PUBLISHED, cli, cli_command, cli_s3, objects, read_s3, reused, s3_fs, wait_until

from batchenum.pipeline.inputs.plan import load_slice, plan_slices
from batchenum.pipeline.job import PlanContext
from batchenum.pipeline.runner import RaySession
from batchenum.pipeline.table_commit import GUARD_FILE, MANIFEST_FILE

pytestmark = pytest.mark.slow


def assert_no_secret_in_metadata(s3_server: dict, prefix: str) -> None:
    fs = s3_fs(s3_server)
    for path in objects(s3_server, prefix):
        if path.endswith(MANIFEST_FILE):  # the run's identity names the input, never a credential
            text = fs.open_input_stream(path).read().decode()
            assert s3_server["AWS_SECRET_ACCESS_KEY"] not in text and s3_server["AWS_ACCESS_KEY_ID"] not in text
        if path.endswith(".parquet") and not path.endswith(GUARD_FILE):
            metadata = pq.read_schema(path, filesystem=fs).metadata or {}
            text = b" ".join(k + b"=" + v for k, v in metadata.items()).decode()
            assert s3_server["AWS_SECRET_ACCESS_KEY"] not in text and s3_server["AWS_ACCESS_KEY_ID"] not in text


@pytest.mark.parametrize(
    "job,field,generate",
    [
        ("dungeons", "grid", ("--count", "2500", "--height", "9", "--width", "11", "--seed", "3")),
        ("nonary", "doors", ("--count", "300", "--rooms", "4", "--doors", "10", "--seed", "5")),
    ],
)
def test_batch_from_and_to_s3_matches_a_local_serial_run(s3_server, new_bucket, tmp_path, job, field, generate):
    local_input = tmp_path / f"{job}.jsonl"
    cli("generate", job, *generate, "--out", str(local_input))
    with open(local_input, "a", encoding="utf-8") as handle:  # one rejected record, one unreadable line
        handle.write(json.dumps({"id": "bad", field: 7}) + "\nnot json\n")
    s3_input = f"s3://{new_bucket}/in/{job}.jsonl"
    s3_fs(s3_server).open_output_stream(s3_input[len("s3://") :]).write(local_input.read_bytes())

    local = cli(
        "run",
        job,
        "--input",
        str(local_input),
        "--records-per-shard",
        "700",
        "--out",
        str(tmp_path / "local"),
        "--serial",
    )
    remote = cli_s3(
        s3_server,
        "run",
        job,
        "--input",
        s3_input,
        "--records-per-shard",
        "700",
        "--workers",
        "2",
        "--out",
        f"s3://{new_bucket}/run",
    )
    assert remote.stdout.splitlines()[0] == local.stdout.splitlines()[0]  # read N, answered A, rejected R
    assert f"tables in s3://{new_bucket}/run/{job}" in remote.stdout
    assert not (tmp_path / "s3:").exists() and not os.path.exists("s3:")
    for table in ("answers", "errors"):
        expected = pd.read_parquet(tmp_path / "local" / job / table)
        found = read_s3(s3_server, f"s3://{new_bucket}/run/{job}/{table}")
        assert set(found["file"]) == {s3_input} and set(expected["file"]) == {str(local_input)}  # the record's file
        pd.testing.assert_frame_equal(found.drop(columns="file"), expected.drop(columns="file"))
    assert_no_secret_in_metadata(s3_server, new_bucket)


def test_palago_counts_and_catalogue_on_s3_match_local(s3_server, new_bucket, tmp_path):
    args = ("run", "palago", "--max-n", "14", "--catalogue-max-n", "12", "--shards", "6")
    cli(*args, "--out", str(tmp_path), "--serial")
    cli_s3(s3_server, *args, "--workers", "2", "--out", f"s3://{new_bucket}/run")
    expected = pd.read_parquet(tmp_path / "palago" / "creature_counts.parquet")
    pd.testing.assert_frame_equal(read_s3(s3_server, f"s3://{new_bucket}/run/palago/creature_counts.parquet"), expected)
    local_catalogue = pd.read_parquet(tmp_path / "palago" / "creatures").sort_values("key").reset_index(drop=True)
    remote_catalogue = read_s3(s3_server, f"s3://{new_bucket}/run/palago/creatures").sort_values("key")
    pd.testing.assert_frame_equal(remote_catalogue.reset_index(drop=True), local_catalogue)
    names = objects(s3_server, f"{new_bucket}/run/palago")
    assert f"{new_bucket}/run/palago/creatures/part-00000.parquet" in names
    assert f"{new_bucket}/run/palago/creature_counts.md" in names
    table = cli_s3(s3_server, "table", "--out", f"s3://{new_bucket}/run")
    assert table.stdout.split()[-9] == "14"  # the last row, n = 14
    gallery = cli_s3(
        s3_server,
        "palago",
        "gallery",
        "--n",
        "12",
        "--from",
        f"s3://{new_bucket}/run",
        "--out",
        str(tmp_path / "pictures"),
    )
    assert "81 of 81 creatures of size 12" in gallery.stdout


def test_driver_killed_against_s3_then_rerun_reuses_committed_shards(s3_server, new_bucket):
    out = f"s3://{new_bucket}/run"
    args = cli_command("run", "palago", "--max-n", "21", "--shards", "24", "--serial", "--out", out)
    driver = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **s3_server})
    shard_prefix = f"{new_bucket}/run/palago/_shards/partial_counts"
    wait_until(lambda: len(objects(s3_server, shard_prefix)) >= 3, "3 shards were committed", 600, driver)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=60)
    committed = len(objects(s3_server, shard_prefix))
    assert 3 <= committed < 24
    assert f"{committed}/24 shards committed" in cli_s3(s3_server, "status", "--out", out).stdout
    rerun = cli_s3(s3_server, "run", "palago", "--max-n", "21", "--shards", "24", "--serial", "--out", out)
    assert reused(rerun) >= committed
    counts = read_s3(s3_server, f"{out}/palago/creature_counts.parquet")
    assert counts.free.tolist() == PUBLISHED[PUBLISHED.n <= 21].free.tolist()


def test_a_store_emptied_during_a_run_is_named_as_lost_files_not_a_takeover(s3_server, new_bucket):
    """Issue 48: an S3-compatible store restarted empty mid-run was reported as "lease was taken
    over ... Committed shards are kept", both untrue; the rerun then computes everything."""
    out = f"s3://{new_bucket}/run"
    args = ("run", "palago", "--max-n", "21", "--shards", "24", "--serial", "--out", out)
    driver = subprocess.Popen(
        cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **s3_server}
    )
    try:
        shard_prefix = f"{new_bucket}/run/palago/_shards/partial_counts"
        wait_until(lambda: len(objects(s3_server, shard_prefix)) >= 2, "2 shards were committed", 600, driver)
        s3_fs(s3_server).delete_dir_contents(f"{new_bucket}/run")  # the store's contents lost
        _, err = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("batchenum: error: the store lost this run's files: _lease.json and _plan.json are gone "), (
        err
    )
    assert f"from the job folder {out}/palago, which the run held" in last
    assert "taken over" not in err and "Committed shards are kept" not in err
    rerun = cli_s3(s3_server, *args)
    # a shard whose commit had passed the lease check as the store emptied still lands (the check
    # and the write are two requests); it is whole and the run's own, so the rerun may reuse it
    assert reused(rerun) <= 1
    counts = read_s3(s3_server, f"{out}/palago/creature_counts.parquet")
    assert counts.free.tolist() == PUBLISHED[PUBLISHED.n <= 21].free.tolist()


def test_damaged_object_is_detected_and_recomputed(s3_server, new_bucket):
    out = f"s3://{new_bucket}/run"
    args = ("run", "palago", "--max-n", "13", "--shards", "4", "--serial", "--out", out)
    cli_s3(s3_server, *args)
    fs = s3_fs(s3_server)
    table = f"{new_bucket}/run/palago/creature_counts.parquet"
    before = fs.open_input_file(table).readall()
    victim = f"{new_bucket}/run/palago/_shards/partial_counts/s0002.parquet"
    data = bytearray(fs.open_input_file(victim).readall())
    data[8:40] = b"\0" * 32  # inside the first data page
    with fs.open_output_stream(victim) as handle:
        handle.write(bytes(data))
    rerun = cli_s3(s3_server, *args)
    assert "shard s0002 will be recomputed" in rerun.stderr
    assert "(3 reused, 1 recomputed: damaged or stale)" in rerun.stdout
    assert fs.open_input_file(table).readall() == before


def test_a_missing_shard_object_is_recomputed_and_a_prefix_in_its_place_is_named(s3_server, new_bucket):
    """On an object store a shard file is read without asking first what is there: a missing one
    is computed again, and objects below its name (a "folder") are refused by name."""
    out = f"s3://{new_bucket}/run"
    args = ("run", "palago", "--max-n", "13", "--shards", "4", "--serial", "--out", out)
    cli_s3(s3_server, *args)
    fs = s3_fs(s3_server)
    victim = f"{new_bucket}/run/palago/_shards/partial_counts/s0001.parquet"
    fs.delete_file(victim)
    assert "3/4 shards committed" in cli_s3(s3_server, "status", "--out", out).stdout
    assert "(3 reused)" in cli_s3(s3_server, *args).stdout
    fs.delete_file(victim)
    with fs.open_output_stream(f"{victim}/someone-else.txt") as handle:
        handle.write(b"not ours")
    refused = cli_s3(s3_server, *args, expect=1)
    assert f"s3://{victim} is a folder where a shard file belongs" in refused.stderr


def test_unusable_out_location_is_one_clear_message(s3_server, tmp_path):
    result = cli_s3(
        s3_server, "run", "palago", "--max-n", "5", "--serial", "--out", "s3://no-such-bucket-here/x", expect=1
    )
    assert result.stderr.strip().splitlines()[-1].startswith("batchenum: error: --out: cannot write to s3://no-such")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = cli_s3(s3_server, "run", "palago", "--max-n", "5", "--serial", "--out", str(blocker), expect=1)
    assert "--out" in result.stderr and "not a folder" in result.stderr
    result = cli_s3(s3_server, "run", "palago", "--max-n", "5", "--serial", "--out", "", expect=1)
    assert "--out: an empty location" in result.stderr


def test_s3_jsonl_is_planned_by_counting_tasks(s3_server, new_bucket, ray_session, monkeypatch):
    for name, value in s3_server.items():
        monkeypatch.setenv(name, value)  # the driver's AWS variables, captured into the Storage
    data = "".join(json.dumps({"id": f"r{k}", "grid": ["@" + "$" * (k % 7)]}) + "\n" for k in range(2000)).encode()
    s3_fs(s3_server).open_output_stream(f"{new_bucket}/in/batch.jsonl").write(data + b'{"id": "tail"}')
    uri = f"s3://{new_bucket}/in/batch.jsonl"
    calls = []

    def counting_map(fn, items):  # the real map, watched
        calls.append(len(items))
        return RaySession(None, None).map(fn, items)

    by_tasks = plan_slices(
        uri, "grid", 300, PlanContext(task_map=counting_map), block=2048, task_blocks=4, driver_bytes=0
    )
    assert calls and calls[0] > 1
    assert by_tasks == plan_slices(uri, "grid", 300, block=2048)
    slices = [load_slice(spec).data for spec in by_tasks]
    assert b"".join(slices) == data + b'{"id": "tail"}'
    assert [len(part.splitlines()) for part in slices] == [300] * 6 + [201]


def test_a_run_sees_the_saves_a_shard_commits_on_s3_once_each(s3_server, new_bucket, monkeypatch):
    import time

    from batchenum.pipeline.checkpoint import Checkpoint, SaveWatch
    from batchenum.pipeline.job import Shard
    from batchenum.pipeline.storage import Storage

    for name, value in s3_server.items():
        monkeypatch.setenv(name, value)
    folder = Storage.at(f"s3://{new_bucket}/run/palago")
    watch = SaveWatch(folder, since=time.time() - 1)
    assert watch.new_saves() == []  # no _checkpoints prefix yet: nothing, no error
    checkpoint = Checkpoint(folder, Shard("h012"), {"code": "1"})
    checkpoint.save(b"state", "column 4")
    assert [(s["shard"], s["progress"]) for s in watch.new_saves()] == [("h012", "column 4")]
    assert watch.new_saves() == []
    checkpoint.save(b"a larger state", "column 5")
    assert [s["progress"] for s in watch.new_saves()] == ["column 5"]
