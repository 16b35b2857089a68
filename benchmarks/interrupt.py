"""Seconds from Ctrl-C (SIGINT) to the driver's exit, for a run on a Ray cluster with shards in
flight: the figure issue 23 asks to keep within about 2 s.

    python benchmarks/interrupt.py [--repeat 3] [--max-n 26]

Starts a one-node cluster of its own (token auth, private temp dir and ports), runs
`batchenum run palago --address ...` against it, sends SIGINT once every CPU has a shard, and
prints each run's seconds to exit, the phases the driver reported, and the exit status.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import clusters  # noqa: E402  (the tests' real-cluster helpers)


def interrupt_once(address: str, env: dict, max_n: int, out: str) -> tuple[float, int, str]:
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "palago",
            "--max-n",
            str(max_n),
            "--shards",
            "64",
            "--address",
            address,
            "--out",
            out,
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines = []
    for line in driver.stderr:  # wait until shards run on the cluster
        lines.append(line)
        if re.search(r"\d+/\d+ shards", line):
            break
    time.sleep(3.0)
    sent = time.monotonic()
    driver.send_signal(signal.SIGINT)
    rest = driver.stderr.read()
    code = driver.wait()
    return time.monotonic() - sent, code, rest.strip().splitlines()[-1] if rest.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-n", type=int, default=26)
    args = parser.parse_args()
    temp_dir, env = tempfile.mkdtemp(prefix="bi", dir="/tmp"), clusters.token_env()
    try:
        address = clusters.start_head(temp_dir, env, "--num-cpus", "2", "--include-dashboard", "false")
        for k in range(args.repeat):
            seconds, code, last = interrupt_once(address, env, args.max_n, os.path.join(temp_dir, f"out{k}"))
            print(f"run {k + 1}: {seconds:.2f} s from SIGINT to exit, status {code}: {last}", flush=True)
    finally:
        clusters.stop(temp_dir)


if __name__ == "__main__":
    main()
