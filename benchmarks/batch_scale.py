"""A dungeon batch at scale: driver memory against batch size, and object storage against a disk.

    python benchmarks/batch_scale.py --memory 100000,1000000,5000000
    python benchmarks/batch_scale.py --s3 1000000          # needs moto[server] (the test extra)
    python benchmarks/batch_scale.py --finish 100000,1000000,5000000

--memory runs ``batchenum run dungeons --workers 2 --no-head-start`` on generated 16x16 batches and
prints the driver's peak RSS (VmHWM, polled from /proc while it runs; the workers are separate
processes), so the ratio between the largest and the smallest batch shows whether the driver's
memory depends on the batch.  --s3 runs the same batch with --input and --out on a local
S3-compatible server (moto, on 127.0.0.1) and on a local disk, one after the other, and prints both
throughputs.  --finish runs each batch once (default slicing, --workers 2), then times the finish
alone in a fresh driver process (Ray connected and its workers started first, not timed: in a run
they have just computed the shards): the check of every shard's footer, the final parts, the
manifest; it prints the driver's seconds, the bytes it read (``rchar`` of /proc/self/io: every
read call, files and sockets) and its peak RSS, alternating between the finish as it is
("takeover": shards of ``TAKEOVER_ROWS`` rows or more become parts as they are, smaller ones are
written anew by Ray tasks) and the finish before it ("rewrite": every part written anew by Ray
tasks).  Figures, not assertions: compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

GRID = 16


def generate(count: int, path: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "batchenum",
            "generate",
            "dungeons",
            "--count",
            str(count),
            "--height",
            str(GRID),
            "--width",
            str(GRID),
            "--seed",
            "1",
            "--out",
            path,
        ],
        check=True,
        capture_output=True,
    )


def run_cli(args: list[str], env: dict | None = None) -> tuple[float, int, str]:
    """(wall seconds, driver peak RSS in bytes, stdout) of one CLI run."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "batchenum", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    peak = 0
    while process.poll() is None:
        peak = max(peak, _vm_hwm(process.pid))
        time.sleep(0.1)
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"batchenum {' '.join(args)} failed ({process.returncode}):\n{err}")
    return time.perf_counter() - started, peak, out


def _vm_hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory(counts: list[int], folder: str) -> None:
    print(f"driver peak RSS, {GRID}x{GRID} dungeons, --workers 2 --no-head-start")
    peaks = {}
    for count in counts:
        path = os.path.join(folder, f"d{count}.jsonl")
        generate(count, path)
        seconds, peak, _ = run_cli(
            [
                "run",
                "dungeons",
                "--input",
                path,
                "--workers",
                "2",
                "--no-head-start",
                "--quiet",
                "--out",
                os.path.join(folder, f"out{count}"),
            ]
        )
        peaks[count] = peak
        print(
            f"  {count:>10,} records  {seconds:7.1f} s  {count / seconds:>10,.0f}/s  driver peak {peak / 2**20:7.0f} MB",
            flush=True,
        )
        os.remove(path)
    smallest, largest = min(peaks), max(peaks)
    print(f"  peak at {largest:,} / peak at {smallest:,}: {peaks[largest] / peaks[smallest]:.2f}")


def finish(counts: list[int], folder: str, rounds: int) -> None:
    print(f"the finish alone, {GRID}x{GRID} dungeons, Ray with 2 CPUs connected first (driver figures)")
    figures: dict[tuple[int, str], list[dict]] = {}
    for count in counts:
        path = os.path.join(folder, f"d{count}.jsonl")
        out = os.path.join(folder, f"out{count}")
        generate(count, path)
        run_cli(["run", "dungeons", "--input", path, "--workers", "2", "--quiet", "--out", out])  # (not timed)
        for _ in range(rounds):
            for mode in _FINISHES:
                figures.setdefault((count, mode), []).append(_finish_once(path, out, mode))
        for mode in _FINISHES:
            runs = figures[(count, mode)]
            best = min(runs, key=lambda figure: figure["seconds"])
            times = ", ".join(f"{r['seconds']:.2f}" for r in runs)
            print(
                f"  {count:>10,} records  {mode:<8}  {times} s"
                f"  read {best['read'] / 1e6:8.1f} MB  peak RSS {best['peak'] / 2**20:6.0f} MB",
                flush=True,
            )
        os.remove(path)
    smallest, largest = min(counts), max(counts)
    for mode in _FINISHES:
        low, high = (min(figures[(c, mode)], key=lambda f: f["seconds"]) for c in (smallest, largest))
        print(
            f"  {mode}: {largest:,} against {smallest:,}: time {high['seconds'] / low['seconds']:.2f}x, "
            f"read {high['read'] / max(1, low['read']):.2f}x, peak RSS {high['peak'] / low['peak']:.2f}x"
        )


_FINISHES = ("takeover", "rewrite")


def _finish_once(path: str, out: str, mode: str, tries: int = 3) -> dict:
    """The figures of one finish in a fresh driver; a private Ray that fails to start on a loaded
    machine ("timed out during startup") is tried again."""
    for _ in range(tries):
        done = subprocess.run(
            [sys.executable, __file__, "--finish-only", path, out, mode], capture_output=True, text=True
        )
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
    raise SystemExit(f"the finish failed {tries} times:\n{done.stderr}")


def finish_only(path: str, out: str, mode: str) -> None:
    """One finish of the committed run in ``out`` (a child process of ``finish``); prints one JSON line."""
    from batchenum.jobs.dungeons import DungeonJob
    from batchenum.pipeline import execute, table_commit
    from batchenum.pipeline.codeversion import code_version
    from batchenum.pipeline.parquet_format import Provenance
    from batchenum.pipeline.progress import Progress
    from batchenum.pipeline.runner import Executor
    from batchenum.pipeline.shard_store import ShardStore
    from batchenum.pipeline.storage import Storage

    job = DungeonJob(path)
    store = ShardStore(Storage.at(out), job, Provenance(job.name, code_version(job), job.params()))
    options = execute.RunOptions(out=out, workers=2, head_start=False)
    with Executor(options.execution(), Progress(job.name, quiet=True).stage) as executor:
        executor.ray.connect()
        executor.ray.map(_warm, [0, 1])  # workers up and importing, as after the run's own shards
        shards = job.plan(executor.plan_context())
        read_before, started = _rchar(), time.perf_counter()
        _, rows, shard_rows, _ = execute._check_complete(job, store, shards, {})
        ids = [shard.id for shard in shards]
        staged = table_commit.StagedTables(store)
        if mode == "rewrite":
            table_commit.TAKEOVER_ROWS = 1 << 62  # no shard is large enough: every part written anew
        for name in job.streamed_tables:
            execute._stage_streamed(staged, executor, name, ids, shard_rows[name])
        staged.commit({"job": job.name, "run_id": staged.run_id})
        seconds, read = time.perf_counter() - started, _rchar() - read_before
    print(json.dumps({"seconds": seconds, "read": read, "peak": _vm_hwm(os.getpid()), "rows": rows}))


def _warm(_: int) -> None:
    import batchenum.jobs.dungeons  # noqa: F401  (the job a part task unpickles, and its kernels)
    import batchenum.pipeline.table_commit  # noqa: F401


def _rchar() -> int:
    with open("/proc/self/io") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("rchar:"))


def s3_against_disk(count: int, folder: str) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [shutil.which("moto_server") or "moto_server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        wait_for_endpoint(endpoint)
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
        }
        import pyarrow.fs as pafs

        s3 = pafs.S3FileSystem(
            endpoint_override=endpoint,
            access_key="bench",
            secret_key="bench",
            region="us-east-1",
            allow_bucket_creation=True,
        )
        s3.create_dir("bench")
        path = os.path.join(folder, "d.jsonl")
        generate(count, path)
        pafs.copy_files(path, "bench/in/d.jsonl", destination_filesystem=s3)
        print(f"{count:,} {GRID}x{GRID} dungeons, --workers 2, input and output on each kind of storage")
        local, _, _ = run_cli(
            ["run", "dungeons", "--input", path, "--workers", "2", "--quiet", "--out", os.path.join(folder, "out")]
        )
        remote, _, out = run_cli(
            [
                "run",
                "dungeons",
                "--input",
                "s3://bench/in/d.jsonl",
                "--workers",
                "2",
                "--quiet",
                "--out",
                "s3://bench/out",
            ],
            env,
        )
        print(f"  local disk  {local:7.1f} s  {count / local:>10,.0f} dungeons/s")
        print(
            f"  s3 (moto)   {remote:7.1f} s  {count / remote:>10,.0f} dungeons/s   ({remote / local:.2f}x the disk time)"
        )
        print("   ", out.strip().splitlines()[0])
    finally:
        server.kill()
        server.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_endpoint(endpoint: str) -> None:
    """Wait (up to 60 s) until an HTTP server answers at ``endpoint`` (also used by faults_soak.py)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2).close()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory", help="comma-separated batch sizes for the driver memory figures")
    parser.add_argument("--s3", type=int, help="batch size for the S3 against disk figures")
    parser.add_argument("--finish", help="comma-separated batch sizes for the figures of the finish alone")
    parser.add_argument("--rounds", type=int, default=2, help="finishes per batch size and mode (default 2)")
    parser.add_argument("--finish-only", nargs=3, metavar=("INPUT", "OUT", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.finish_only:
        finish_only(*args.finish_only)
        return
    if not args.memory and not args.s3 and not args.finish:
        parser.error("give --memory, --s3 and/or --finish")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        if args.memory:
            memory([int(c) for c in args.memory.split(",")], folder)
        if args.s3:
            s3_against_disk(args.s3, folder)
        if args.finish:
            finish([int(c) for c in args.finish.split(",")], folder, args.rounds)


if __name__ == "__main__":
    main()
