"""Kills and storage outages survived by one dungeon batch on S3: prints the figures.

    python benchmarks/faults_soak.py [--records 40000] [--kills 10] [--outages 3] [--seed 1] [--serial]

Starts moto's S3 server and the fault proxy (tests/fault_proxy.py) on 127.0.0.1, runs one batch
killed (whole process group, SIGKILL) after 2-8 new shard commits each time, some runs meeting a
storage outage first (refused, stalled, cut, in turn), then once to the end; prints the kills and
outages survived, the time the store was out, the commits between kills, the last run's reuse and
whether every record is accounted for and the tables equal a clean serial run's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import pandas as pd  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
from batch_scale import wait_for_endpoint  # noqa: E402  (this folder is first on sys.path)
from fault_proxy import FaultProxy  # noqa: E402
from helpers import free_port  # noqa: E402
from soak import cli_command, soak  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--per-shard", type=int, default=200)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--outages", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--window",
        type=float,
        default=1.0,
        help="seconds each killed run pauses between a shard's answers and errors (0: none)",
    )
    parser.add_argument("--serial", action="store_true", help="the runs compute in the driver, without Ray")
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(
        ["moto_server", "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_endpoint(f"http://127.0.0.1:{port}")
        with tempfile.TemporaryDirectory() as scratch:
            _soak(Path(scratch), port, args)
    finally:
        server.kill()
        server.wait()


def _soak(scratch: Path, port: int, args: argparse.Namespace) -> None:
    aws = {"AWS_ACCESS_KEY_ID": "soak", "AWS_SECRET_ACCESS_KEY": "soak-secret", "AWS_REGION": "us-east-1"}
    fs = pafs.S3FileSystem(
        endpoint_override=f"http://127.0.0.1:{port}",
        region="us-east-1",
        access_key="soak",
        secret_key="soak-secret",
        allow_bucket_creation=True,
    )
    fs.create_dir("soak")
    batch = scratch / "batch.jsonl"
    subprocess.run(
        cli_command(
            "generate",
            "dungeons",
            "--count",
            str(args.records),
            "--height",
            "7",
            "--width",
            "9",
            "--seed",
            "11",
            "--out",
            str(batch),
        ),
        check=True,
        capture_output=True,
    )
    with open(batch, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "bad", "grid": 7}) + "\nnot json\n")
    with fs.open_output_stream("soak/in/batch.jsonl") as handle:
        handle.write(batch.read_bytes())
    subprocess.run(
        cli_command(
            "run",
            "dungeons",
            "--input",
            str(batch),
            "--records-per-shard",
            str(args.per_shard),
            "--serial",
            "--quiet",
            "--out",
            str(scratch / "clean"),
        ),
        check=True,
        capture_output=True,
    )
    with FaultProxy(port) as proxy:
        env = {**os.environ, **aws, "AWS_ENDPOINT_URL": proxy.endpoint}
        command = cli_command(
            "run",
            "dungeons",
            "--input",
            "s3://soak/in/batch.jsonl",
            "--records-per-shard",
            str(args.per_shard),
            *(["--serial"] if args.serial else ["--workers", "2"]),
            "--storage-timeout",
            "60",
            "--quiet",
            "--out",
            "s3://soak/run",
        )
        shards = -(-(args.records + 2) // args.per_shard)
        figures = soak(
            command,
            env,
            proxy,
            fs,
            "soak/run/dungeons/_shards/answers",
            shards,
            args.kills,
            args.outages,
            args.seed,
            window=args.window,
        )
    same, rows, lines = True, 0, []
    for table in ("answers", "errors"):
        expected = pd.read_parquet(scratch / "clean" / "dungeons" / table).drop(columns="file")
        found = pd.read_parquet(f"soak/run/dungeons/{table}", filesystem=fs).drop(columns="file")
        same = same and found.equals(expected)
        rows += len(found)
        lines += found["line"].tolist()
    once = sorted(lines) == list(range(1, args.records + 3))
    print(f"records:               {args.records + 2} in, {rows} accounted for (answers + errors)")
    print(f"each in exactly one table: {once}")
    print(f"kills between a shard's answers and errors: {figures.window_kills} (pause {args.window:g} s there)")
    print(f"kills survived:        {figures.kills} (whole process group, SIGKILL)")
    print(f"outages survived:      {figures.outages} ({', '.join(('refuse', 'stall', 'cut')[: figures.outages])})")
    print(f"time the store was out: {figures.outage_seconds:.0f} s")
    print(f"commits between kills: {figures.commits_between_kills}")
    print(f"last run:              {figures.final_seconds:.1f} s, {figures.final_reused} shards reused")
    print(f"whole soak:            {figures.total_seconds:.1f} s")
    print(f"tables equal a clean serial run: {same}")


if __name__ == "__main__":
    main()
