"""Shard tasks in flight against the cluster's CPUs.

    python benchmarks/cluster_parallelism.py --cpus 16 --max-n 24

Starts a `ray start --head --num-cpus C` cluster of its own (its own temp dir and token, stopped by
pid at the end), runs ``batchenum run palago --max-n N --address ...`` on it with the default plan,
and prints the number of shards planned and the most shards that ran at once, read from the start
and end times every shard records with its files.  On this 2-core machine a 16-CPU cluster is 16
logical CPUs: the figure shows the pipeline keeps them all busy, not that they run faster.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile

import pyarrow.parquet as pq

from batchenum.pipeline.local_ray import process_tree


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpus", type=int, default=16, help="logical CPUs of the cluster (default 16)")
    parser.add_argument("--max-n", type=int, default=24, help="Palago size (default 24)")
    args = parser.parse_args()
    temp_dir = f"/tmp/bp{os.getpid()}"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    address = start_cluster(args.cpus, temp_dir, env)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-parallel-") as out:
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "batchenum",
                    "run",
                    "palago",
                    "--max-n",
                    str(args.max_n),
                    "--out",
                    out,
                    "--address",
                    address,
                    "--quiet",
                ],
                capture_output=True,
                text=True,
                env=env,
            )
            if run.returncode:
                raise SystemExit(run.stderr)
            intervals = []
            for path in glob.glob(os.path.join(out, "palago", "_shards", "partial_counts", "*.parquet")):
                stats = json.loads(pq.read_schema(path).metadata[b"batchenum.stats"])
                intervals.append((stats["committed_at"] - stats["seconds"], stats["committed_at"]))
            print(
                f"cluster CPUs {args.cpus}: {len(intervals)} shards planned, at most {most_at_once(intervals)} "
                f"running at once (n = {args.max_n})"
            )
            print("   ", run.stdout.strip().splitlines()[-1])
    finally:
        stop_cluster(temp_dir)


def start_cluster(cpus: int, temp_dir: str, env: dict[str, str]) -> str:
    """Start a one-node Ray cluster of ``cpus`` CPUs in ``temp_dir``, no dashboard; its address."""
    head = subprocess.run(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus", str(cpus)]
        + ["--temp-dir", temp_dir, "--port", "0", "--include-dashboard", "false", "--disable-usage-stats"],
        capture_output=True,
        text=True,
        env=env,
    )
    if head.returncode:
        raise SystemExit(head.stderr)
    found = re.search(r"ray start --address='([^']+)'", head.stdout + head.stderr)
    if found is None:
        raise SystemExit(f"ray start printed no address:\n{head.stdout}")
    return found.group(1)


def stop_cluster(temp_dir: str) -> None:
    """Kill the Ray cluster started with ``--temp-dir temp_dir`` (its processes name the folder; its
    workers do not, so the whole tree goes; its client server, which ``ray start`` leaves to init,
    names its address) and delete the folder."""
    owned = subprocess.run(["pgrep", "-f", _cluster_pattern(temp_dir)], capture_output=True, text=True).stdout.split()
    for pid in process_tree(int(pid) for pid in owned if int(pid) != os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["rm", "-rf", temp_dir])


def _cluster_pattern(temp_dir: str) -> str:
    """A pattern for the command lines of the cluster's processes: its folder, or its address."""
    try:
        with open(os.path.join(temp_dir, "ray_current_cluster")) as handle:
            return f"{re.escape(temp_dir)}|--address={re.escape(handle.read().strip())}"
    except OSError:
        return re.escape(temp_dir)


if __name__ == "__main__":
    main()
