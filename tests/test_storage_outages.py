"""Storage outages for real: a fault-injecting TCP proxy (tests/fault_proxy.py) between the pipeline
and the test S3 server refuses connections, stalls, cuts transfers and throttles, for set periods.
An outage shorter than --storage-timeout costs only the wait and the tables are exact; a longer one
is one message naming the store and the operation, and a rerun reuses every committed shard."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fault_proxy import FAULTS, FaultProxy
from helpers import PUBLISHED, assert_exit, cli_command, cli_s3, objects, read_s3, reused, wait_until

from batchenum.pipeline.storage import Storage, StorageUnavailableError

pytestmark = pytest.mark.slow
OUTAGE = 8  # seconds a fault of a run lasts at most, if the run is not seen waiting for storage before


@pytest.fixture
def proxy(s3_server):
    with FaultProxy(int(s3_server["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])) as running:
        yield running


def through(s3_server: dict, proxy: FaultProxy) -> dict:
    """The test server's AWS environment, pointed at the proxy."""
    return {**s3_server, "AWS_ENDPOINT_URL": proxy.endpoint}


@pytest.mark.parametrize("kind", FAULTS)
def test_every_storage_operation_waits_out_a_short_fault(s3_server, new_bucket, proxy, monkeypatch, kind):
    for name, value in through(s3_server, proxy).items():
        monkeypatch.setenv(name, value)
    store = Storage.at(f"s3://{new_bucket}/run", timeout=60)
    table = pa.table({"k": pa.array(range(300_000), pa.int64())})
    store.write_atomic(store.join("t.parquet"), lambda local: pq.write_table(table, local))
    proxy.fault(kind, seconds=6)
    started = time.monotonic()
    store.write_text(store.join("x.json"), "x")  # an upload
    with store.open_input(store.join("t.parquet")) as handle:  # reads, resumed after a cut
        assert pq.ParquetFile(handle).read().equals(table)
    assert store.list_files() == [f"{new_bucket}/run/t.parquet", f"{new_bucket}/run/x.json"]
    store.delete_file(store.join("x.json"))
    assert not store.exists(store.join("x.json"))
    assert time.monotonic() - started < 60


def test_past_the_bound_an_operation_fails_naming_the_store_and_the_operation(
    s3_server, new_bucket, proxy, monkeypatch
):
    for name, value in through(s3_server, proxy).items():
        monkeypatch.setenv(name, value)
    store = Storage.at(f"s3://{new_bucket}/run", timeout=3)
    proxy.fault("refuse")
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as raised:
        store.write_text(store.join("x.json"), "x")
    assert time.monotonic() - started < 30
    message = str(raised.value)
    assert f"storage s3://{new_bucket}/run did not answer" in message and "--storage-timeout 3" in message
    assert f"uploading s3://{new_bucket}/run/x.json" in message and "run the same command again" in message
    assert s3_server["AWS_SECRET_ACCESS_KEY"] not in message


def palago_over(
    proxy: FaultProxy, s3_server: dict, bucket: str, *extra: str, stderr=subprocess.PIPE
) -> subprocess.Popen:
    args = cli_command("run", "palago", "--max-n", "21", "--shards", "24", "--out", f"s3://{bucket}/run", *extra)
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **through(s3_server, proxy)}
    )


def shards_committed(s3_server: dict, bucket: str) -> int:
    return len(objects(s3_server, f"{bucket}/run/palago/_shards/partial_counts"))


def wait_for_shards(s3_server: dict, bucket: str, count: int, process: subprocess.Popen, timeout: float = 600) -> None:
    wait_until(lambda: shards_committed(s3_server, bucket) >= count, f"{count} shards were committed", timeout, process)


def test_outages_shorter_than_the_bound_cost_only_the_wait(s3_server, new_bucket, proxy, tmp_path):
    """One of each fault during one run on Ray workers, each after another shard was committed and
    held until the run says it is waiting for storage (at most OUTAGE seconds: a stalled request
    may just wait): the run ends exact, and said it was waiting for storage."""
    log = tmp_path / "stderr.log"
    with open(log, "w") as stderr:
        driver = palago_over(proxy, s3_server, new_bucket, "--workers", "2", "--storage-timeout", "60", stderr=stderr)
    try:
        for number, kind in enumerate(FAULTS):
            wait_for_shards(s3_server, new_bucket, 2 + number, driver)  # each fault after another commit
            waits = log.read_text().count("waiting for storage")
            proxy.fault(kind)
            with contextlib.suppress(AssertionError):  # not said within OUTAGE: healed all the same
                wait_until(
                    lambda waits=waits: log.read_text().count("waiting for storage") > waits,
                    "the run waited",
                    OUTAGE,
                    driver,
                )
            proxy.heal()
        driver.communicate(timeout=900)
    finally:
        driver.kill()
    err = log.read_text()
    assert_exit(driver, 0, stderr=err)
    assert shards_committed(s3_server, new_bucket) == 24 and [kind for kind, _ in proxy.injected] == list(FAULTS)
    assert "waiting for storage" in err and "Traceback" not in err
    counts = read_s3(s3_server, f"s3://{new_bucket}/run/palago/creature_counts.parquet")
    assert counts.free.tolist() == PUBLISHED[PUBLISHED.n <= 21].free.tolist()


def test_an_outage_past_the_bound_is_one_message_and_the_rerun_reuses_every_shard(s3_server, new_bucket, proxy):
    driver = palago_over(proxy, s3_server, new_bucket, "--serial", "--storage-timeout", "4")
    try:
        wait_for_shards(s3_server, new_bucket, 3, driver)
        proxy.fault("refuse")
        started = time.monotonic()
        out, err = driver.communicate(timeout=120)
    finally:
        driver.kill()
    waited = time.monotonic() - started
    proxy.heal()
    assert_exit(driver, 1)
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"batchenum: error: storage s3://{new_bucket}/run/palago did not answer for"), last
    assert "--storage-timeout 4" in last and "Every shard committed before is kept" in last
    assert waited < 60
    kept = shards_committed(s3_server, new_bucket)
    rerun = cli_s3(
        through(s3_server, proxy),
        "run",
        "palago",
        "--max-n",
        "21",
        "--shards",
        "24",
        "--serial",
        "--out",
        f"s3://{new_bucket}/run",
    )
    assert reused(rerun) >= kept >= 3
    counts = read_s3(s3_server, f"s3://{new_bucket}/run/palago/creature_counts.parquet")
    assert counts.free.tolist() == PUBLISHED[PUBLISHED.n <= 21].free.tolist()
