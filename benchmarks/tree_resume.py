"""A search-tree run killed half way and finished on another cluster size (docs/jobs.md, "How the
tree is split"): self-avoiding walks (examples/walks.py) on a private Ray of ``--first`` CPUs,
the driver's whole process group killed (SIGKILL) once ``--kill-at`` of the shards are committed,
then the same run on ``--then`` CPUs, or with ``--then-nodes K`` on a cluster of K ``ray start``
nodes of one CPU each (a head and K - 1 workers joining it, this machine's cores shared), all of
them in a private PID namespace (``unshare -p``: they end with it, none outlives the benchmark),
the driver outside.  Prints what was committed at the kill, what the rerun reused and computed
(and on how many nodes), the work lost (nodes of shards started but not committed, at most the
shards in flight times the budget), and checks the tables against a ``--serial`` run.
``python benchmarks/tree_resume.py --n 14 --budget 50000 [--then-nodes 3]`` (the cluster needs root
for the namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

from walks import Walks  # noqa: E402

import batchenum  # noqa: E402
from batchenum.pipeline.storage import TMP_MARK  # noqa: E402

RUN = """
import sys, time
sys.path.insert(0, {examples!r})
import batchenum
from walks import Walks

started = time.monotonic()
import os
result = batchenum.run(Walks, n={n}, budget={budget}, out={out!r}, head_start=False, {where})
print(result.shards, result.reused, round(time.monotonic() - started, 1))
"""

# Run inside the private PID namespace (its init is the bash that runs this): start the nodes, each
# with ports of its own (they share this machine's network), wait until all joined, say the address,
# and hold the cluster until stdin closes.  The driver runs outside: a run's lease checks the pid of
# the run before it, which a process inside the namespace cannot see.
CLUSTER = """
import re, socket, subprocess, sys, time

NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port")


def ports(options):
    sockets = [socket.socket() for _ in options]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    chosen = [item for option, sock in zip(options, sockets) for item in (option, str(sock.getsockname()[1]))]
    for sock in sockets:
        sock.close()
    return chosen


def ray_start(*args):
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--num-cpus", "1", "--disable-usage-stats", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise SystemExit(done.stdout + done.stderr)
    return done.stdout + done.stderr


started = time.monotonic()
said = ray_start("--head", "--temp-dir", {temp_dir!r}, "--include-dashboard", "false",
                 *ports(NODE_PORTS + ("--port", "--ray-client-server-port")))
address = re.search(r"ray start --address='([^']+)'", said).group(1)
for _ in range({nodes} - 1):
    ray_start("--address", address, *ports(NODE_PORTS))
import ray

ray.init(address=address, logging_level="ERROR")
while sum(node["Alive"] for node in ray.nodes()) < {nodes}:
    time.sleep(0.5)
ray.shutdown()
print(address, round(time.monotonic() - started, 1), flush=True)
sys.stdin.read()
"""


@contextmanager
def cluster(nodes: int, temp_dir: str, env: dict) -> Iterator[tuple[str, float]]:
    """A cluster of ``nodes`` nodes of one CPU, all in a private PID namespace: its address and the
    seconds it took to start.  It ends with the namespace, when its script's stdin closes."""
    # bash is the namespace's init (it reaps the daemons `ray start` leaves); --kill-child ends the
    # namespace if unshare itself is stopped
    namespace = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "-c", '"$@"; exit $?', "-"]
    code = CLUSTER.format(temp_dir=temp_dir, nodes=nodes)
    process = subprocess.Popen(
        [*namespace, sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        said = (process.stdout.readline() if process.stdout else "").split()
        if len(said) != 2:
            raise SystemExit("the cluster did not start")
        yield said[0], float(said[1])
    finally:
        if process.stdin:
            process.stdin.close()
        process.wait(120)


def committed(folder: Path) -> set[str]:
    shards = folder / "_shards" / "partial"
    return (
        {name.removesuffix(".parquet") for name in os.listdir(shards) if TMP_MARK not in name}
        if shards.is_dir()
        else set()
    )


def recorded(folder: Path, shard: str) -> dict:
    """The stats a committed shard recorded with its file (where and when it ran)."""
    metadata = pq.read_schema(folder / "_shards" / "partial" / f"{shard}.parquet").metadata
    return json.loads(metadata[b"batchenum.stats"])


def run(args, out: str, workers: int, env: dict | None = None) -> subprocess.Popen:
    """The run on a private Ray of ``workers`` CPUs, or on the cluster at ``env``'s RAY_ADDRESS."""
    where = "address=os.environ['RAY_ADDRESS']" if env else f"workers={workers}"
    code = RUN.format(examples=str(REPO / "examples"), n=args.n, budget=args.budget, out=out, where=where)
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True, env=env
    )


def finish(args, out: str) -> tuple[str, str, str, str]:
    """The rerun, on ``--then`` CPUs or a cluster of ``--then-nodes``: shards, reused, seconds and
    where it ran."""
    if not args.then_nodes:
        return (*_output(run(args, out, args.then)), f"{args.then} CPUs")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    with cluster(args.then_nodes, f"{out}-ray", env) as (address, seconds):
        where = f"a cluster of {args.then_nodes} nodes of 1 CPU (up in {seconds} s)"
        return (*_output(run(args, out, 0, {**env, "RAY_ADDRESS": address})), where)


def _output(process: subprocess.Popen) -> tuple[str, str, str]:
    said = (process.stdout.read() if process.stdout else "").split()
    if process.wait():
        raise SystemExit("the rerun failed")
    shards, reused, seconds = said[-3:]
    return shards, reused, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=14)
    parser.add_argument("--budget", type=int, default=50_000)
    parser.add_argument("--first", type=int, default=2)
    parser.add_argument("--then", type=int, default=3)
    parser.add_argument("--then-nodes", type=int, default=0, help="finish on a cluster of this many nodes instead")
    parser.add_argument("--kill-at", type=int, default=60, help="shards committed when the first run is killed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out, job_folder = f"{scratch}/out", Path(scratch) / "out" / "walks"
        first = run(args, out, args.first)
        started = time.monotonic()
        while first.poll() is None and len(committed(job_folder)) < args.kill_at:
            time.sleep(0.1)
        if first.poll() is not None:
            raise SystemExit("the first run finished before the kill: raise --n or lower --kill-at")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        at_kill = committed(job_folder)
        print(f"killed after {time.monotonic() - started:.1f} s with {len(at_kill)} shards committed")
        shards, reused, seconds, where = finish(args, out)
        partial = pd.read_parquet(job_folder / "partial")
        computed = partial[~partial.shard.isin(at_kill)]
        if int(reused) != len(at_kill):
            raise SystemExit(f"the rerun reused {reused} shards of the {len(at_kill)} committed")
        ran_on = {recorded(job_folder, shard)["node"] for shard in computed.shard}
        print(
            f"rerun on {where}: {shards} shards, {reused} reused (of {len(at_kill)} committed), "
            f"{len(computed)} computed in {seconds} s on {len(ran_on)} nodes"
        )
        serial = batchenum.run(Walks, n=args.n, budget=args.budget, out=f"{scratch}/serial", serial=True)
        for name in ("counts.parquet", "partial"):  # partial: a folder of parts
            pd.testing.assert_frame_equal(
                pd.read_parquet(job_folder / name), pd.read_parquet(f"{serial.location}/{name}")
            )
        print(
            f"tables equal the serial run's ({serial.summary}); a kill loses at most the shards in flight, "
            f"each at most {args.budget:,} nodes"
        )


if __name__ == "__main__":
    main()
