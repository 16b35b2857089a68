"""A two-node Ray cluster whose second node has a disk of its own, built on one machine: the second
node's raylet runs in a private mount namespace with a tmpfs mounted over the output folder, so its
workers write where the driver never sees.  A local --out must be refused before anything is
computed; object storage must work, with the credentials reaching the second node only through the
run itself (its raylet has no AWS variables)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import clusters
import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from helpers import assert_exit, cli, cli_command

pytestmark = pytest.mark.slow


def _mount_namespaces_work() -> str | None:
    """None when this machine can give a process a private mount namespace, else why not."""
    if shutil.which("unshare") is None:
        return "the unshare command is not installed"
    if os.geteuid() != 0:
        return "private mount namespaces need root"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare -m failed: {probe.stderr.strip()}"


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    reason = _mount_namespaces_work()
    if reason:
        pytest.skip(f"no node-local disk can be imitated here: {reason}")
    private = tmp_path_factory.mktemp("node_local")  # the second node sees an empty tmpfs here
    temp_dir = f"/tmp/bn{os.getpid()}"
    env = {k: v for k, v in clusters.token_env().items() if not k.startswith("AWS_")}  # no S3 on the nodes
    try:
        address = clusters.start_head(temp_dir, env, "--num-cpus", "1", "--include-dashboard", "false")
        joined = " ".join(clusters.ray_start("--address", address, "--num-cpus", "1", *clusters.node_ports()))
        second = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "bash", "-c", f"mount -t tmpfs tmpfs {private} && {joined}"],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
        assert_exit(second, 0)
        clusters.wait_for_nodes(address, env, 2)
        yield {"address": address, "env": env, "private": private}
    finally:
        clusters.stop(temp_dir)


def _dungeons(tmp_path: Path) -> Path:
    path = tmp_path / "dungeons.jsonl"
    cli("generate", "dungeons", "--count", "4000", "--height", "8", "--width", "8", "--seed", "7", "--out", str(path))
    return path


def test_local_out_on_node_local_disks_is_refused_before_computing(two_nodes, tmp_path):
    dungeons = _dungeons(tmp_path)
    out = two_nodes["private"] / "runs"
    result = subprocess.run(
        cli_command(
            "run",
            "dungeons",
            "--input",
            str(dungeons),
            "--records-per-shard",
            "500",
            "--out",
            str(out),
            "--address",
            two_nodes["address"],
        ),
        capture_output=True,
        text=True,
        timeout=600,
        env=two_nodes["env"],
    )
    assert_exit(result, 1)
    message = result.stderr.strip().splitlines()[-1]
    assert f"does not see --out {out / 'dungeons'}" in message
    assert "Ray node" in message  # names the node
    assert "every node mounts at the same path" in message and "--out s3://" in message
    assert "Nothing was computed" in message
    assert not (out / "dungeons" / "_shards").exists()
    assert "read 4000" not in result.stdout


@pytest.mark.parametrize("plan", [{}, {"BATCHENUM_TEST_PLAN": "4096,2,0"}], ids=["driver-counts", "tasks-count"])
def test_local_input_a_node_cannot_see_is_refused(two_nodes, tmp_path, plan):
    hidden = two_nodes["private"] / "in"
    hidden.mkdir(exist_ok=True)
    shutil.copy(_dungeons(tmp_path), hidden / "d.jsonl")
    result = subprocess.run(  # refused before any counting task looks for the file
        cli_command(
            "run",
            "dungeons",
            "--input",
            str(hidden / "d.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--address",
            two_nodes["address"],
        ),
        capture_output=True,
        text=True,
        timeout=600,
        env={**two_nodes["env"], **plan},
    )
    assert_exit(result, 1)
    message = result.stderr.strip().splitlines()[-1]
    assert f"does not see --input {hidden / 'd.jsonl'}" in message  # --out, shared by both nodes, is fine


def test_object_storage_on_node_local_disks_gives_the_local_tables(two_nodes, s3_server, new_bucket, tmp_path):
    dungeons = _dungeons(tmp_path)
    fs = pafs.S3FileSystem(
        endpoint_override=s3_server["AWS_ENDPOINT_URL"],
        region="us-east-1",
        access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"],
    )
    with fs.open_output_stream(f"{new_bucket}/in/d.jsonl") as handle:
        handle.write(dungeons.read_bytes())
    local = cli(
        "run",
        "dungeons",
        "--input",
        str(dungeons),
        "--records-per-shard",
        "250",
        "--serial",
        "--out",
        str(tmp_path / "local"),
    )
    env = {**two_nodes["env"], **s3_server, "BATCHENUM_TEST_PLAN": "65536,2,0"}  # lines counted by tasks too
    result = subprocess.run(
        cli_command(
            "run",
            "dungeons",
            "--input",
            f"s3://{new_bucket}/in/d.jsonl",
            "--records-per-shard",
            "250",
            "--out",
            f"s3://{new_bucket}/run",
            "--address",
            two_nodes["address"],
        ),
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert_exit(result, 0)
    assert f"tasks on the Ray cluster at {two_nodes['address']}" in result.stderr
    assert (
        result.stdout.splitlines()[0]
        == local.stdout.splitlines()[0]
        == "dungeons: read 4000, answered 4000, rejected 0"
    )
    assert s3_server["AWS_SECRET_ACCESS_KEY"] not in result.stdout + result.stderr
    for table in ("answers", "errors"):
        found = pq.read_table(f"{new_bucket}/run/dungeons/{table}", filesystem=fs).to_pandas()
        expected = pd.read_parquet(tmp_path / "local" / "dungeons" / table)
        # the same records, read from s3:// by one run and from a local file by the other
        pd.testing.assert_frame_equal(found.drop(columns="file"), expected.drop(columns="file"))
    # both nodes computed shards: the second one reached S3 with what the run gave it
    shard_files = fs.get_file_info(pafs.FileSelector(f"{new_bucket}/run/dungeons/_shards/answers"))
    nodes = {
        re.search(
            r"Ray node (\w+)", pq.read_schema(info.path, filesystem=fs).metadata[b"batchenum.stats"].decode()
        ).group(1)
        for info in shard_files
    }
    assert len(nodes) == 2
