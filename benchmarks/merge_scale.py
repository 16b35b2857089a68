"""Merging a keyed table whose shards overlap, against DuckDB over the same shard files.

    python benchmarks/merge_scale.py                      # 1/10 of the issue's size: 50 x 100,000 rows
    python benchmarks/merge_scale.py --rows 1000000       # the issue's size: 50 x 10^6 rows
    python benchmarks/merge_scale.py --rows 1000000 --shards 500 --out /big/disk --no-duckdb   # 10x

A synthetic job of ``--shards`` shards, shard k emitting ``--rows`` rows of (int64 key, string
payload): the keys k*rows/2 .. k*rows/2 + rows - 1 in a random order, so consecutive shards overlap by
half, and a payload naming the key and the shard (``k000000000123s004``).  The run (a private local
Ray of ``--workers`` CPUs, shards in Ray workers) computes the shards, then merges the table by
partition (pipeline/table_merge.py).  Printed:

- the merge's wall time (from the progress line "merging shard outputs" to the commit);
- the driver's peak RSS during the merge (VmHWM, reset when the merge starts) and over the run;
- each Ray worker's peak RSS during the merge (reset at the same moment), the largest first;
- the rows emitted and the distinct rows written, checked exactly: the count, the keys rising
  strictly through the parts, and each key's payload naming the first shard in plan order that
  emitted it;
- DuckDB's ``SELECT DISTINCT ON (key) key, payload ... ORDER BY key`` over the same shard files,
  copied to one Parquet file (zstd), with as many threads as the run has workers and a memory limit
  of 3 GB (beyond it DuckDB spills to disk), timed in a fresh process, and its peak RSS; then the
  ratio (``--no-duckdb``: not run);
- the disk: the least free space on the output folder's file system during the run (the run is
  stopped, as Ctrl-C stops it, if it falls below ``--min-free-gb``), the largest size the job's
  folder reached (shard files, the merge's parts, the table), the shard files' and the table's
  bytes, and the most the private Ray's object store spilled to disk (its spill folder, made in the
  output folder).

Figures, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psutil

from batchenum.pipeline.job import Column, Job, PlanContext, Shard, ShardResult, TableSpec


class Overlapping(Job):
    """``shards`` shards of ``rows`` rows each, consecutive shards overlapping by half."""

    name = "overlapping"
    version = "1"
    tables = (
        TableSpec(
            "rows", (Column("key", "int64"), Column("payload", "string", distinct=True)), key=("key",), sort=("key",)
        ),
    )

    def __init__(self, shards: int, rows: int):
        self.shards, self.rows = shards, rows

    def extra_params(self) -> dict:
        return {"shards": self.shards, "rows": self.rows}

    def plan(self, context: PlanContext) -> list[Shard]:
        return [Shard(f"s{k:03d}", {"k": k}) for k in range(self.shards)]

    def run_shard(self, shard: Shard, context=None) -> ShardResult:
        k = shard.spec["k"]
        keys = k * (self.rows // 2) + np.random.default_rng(k).permutation(self.rows).astype(np.int64)
        payload = np.char.add(np.char.add("k", np.char.zfill(keys.astype(str), 12)), f"s{k:03d}")
        return ShardResult({"rows": {"key": keys, "payload": payload}})


def _hwm(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        found = [int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM")]
    return found[0] if found else 0  # a process exiting has no memory left to show


def _reset_hwm(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def _workers() -> list[psutil.Process]:
    """This driver's Ray workers: the processes below the raylet it started named ray:: (a task's
    name, or IDLE), not Ray's agents."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            name = child.name()
            if name.startswith("ray::") and not name.startswith(("ray::Dashboard", "ray::RuntimeEnv")):
                found.append(child)
        except psutil.Error:
            continue
    return found


class WorkerPeaks:
    """Each Ray worker's peak RSS since ``start`` (its VmHWM reset then), polled until ``stop``: the
    private Ray stops with the run, so the peaks are read while it lives."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> None:
        for worker in _workers():
            _reset_hwm(worker.pid)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done.wait(0.2):
            for worker in _workers():
                try:
                    self.peaks[worker.pid] = max(self.peaks.get(worker.pid, 0), _hwm(worker.pid))
                except OSError:
                    continue

    def stop(self) -> list[int]:
        self.done.set()
        self.thread.join()
        return sorted((peak >> 20 for peak in self.peaks.values()), reverse=True)


def _folder_bytes(folder: str) -> int:
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):  # a temporary file renamed or removed meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total


class DiskWatch:
    """The least free space on ``out``'s file system, the most bytes in the job folder and in the
    spill folder, polled every 2 s until ``stop``; below ``min_free`` bytes free, the run is stopped
    by a SIGINT to this process (the run stops as at Ctrl-C)."""

    def __init__(self, out: str, spill: str, min_free: int) -> None:
        self.out, self.spill, self.min_free = out, spill, min_free
        self.least_free = shutil.disk_usage(out).free
        self.most_job = self.most_spill = 0
        self.stopped_run = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done.wait(2.0):
            free = shutil.disk_usage(self.out).free
            self.least_free = min(self.least_free, free)
            self.most_job = max(self.most_job, _folder_bytes(os.path.join(self.out, "overlapping")))
            self.most_spill = max(self.most_spill, _folder_bytes(self.spill))
            if free < self.min_free and not self.stopped_run:
                self.stopped_run = True
                os.kill(os.getpid(), signal.SIGINT)

    def stop(self) -> dict:
        self.done.set()
        self.thread.join()
        return {
            "disk_free_least_gb": round(self.least_free / 2**30, 1),
            "job_folder_most_mb": self.most_job >> 20,
            "ray_spilled_most_mb": self.most_spill >> 20,
        }


def run_merge(out: str, shards: int, rows: int, workers: int) -> dict:
    import resource

    from batchenum.pipeline.execute import RunOptions, run_job
    from batchenum.pipeline.progress import Progress

    marks: dict[str, float] = {}
    stages: list[tuple[float, str]] = []  # seconds into the merge, progress line
    peaks = WorkerPeaks()

    class Marked(Progress):
        def stage(self, text: str) -> None:
            if text.startswith("merging shard outputs"):
                marks["merge"] = time.monotonic()
                _reset_hwm(os.getpid())
                peaks.start()
            if "merge" in marks:
                stages.append((round(time.monotonic() - marks["merge"], 1), text[:70]))
            super().stage(text)

    options = RunOptions(out=out, workers=workers, head_start=False)
    result = run_job(Overlapping(shards, rows), options, Marked("overlapping", stream=io.StringIO()))
    merge_seconds = time.monotonic() - marks["merge"]
    return {
        "merge_seconds": round(merge_seconds, 1),
        "driver_peak_in_merge_mb": _hwm(os.getpid()) >> 20,
        "driver_peak_in_run_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
        "worker_peaks_in_merge_mb": peaks.stop(),
        "rows_written": len(result.tables["rows"]),
        "parts": len(result.tables["rows"].paths),
        "stages": stages,
    }


def check(out: str, shards: int, rows: int) -> dict:
    """The table read back part by part: distinct count, keys rising, each payload's shard the first."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    folder = os.path.join(out, "overlapping", "rows")
    half, count, last = rows // 2, 0, -1
    for name in sorted(os.listdir(folder)):
        table = pq.read_table(os.path.join(folder, name))
        keys = table.column("key").to_numpy()
        assert keys[0] > last and (np.diff(keys) > 0).all(), f"{name}: keys do not rise"
        first_shard = np.maximum(keys // half - 1, 0)
        named = pc.cast(pc.utf8_slice_codeunits(table.column("payload"), 14, 17), "int64").to_numpy()
        assert (named == first_shard).all(), f"{name}: a payload is not the first shard's"
        count, last = count + len(keys), keys[-1]
    expected = (shards + 1) * half
    assert count == expected, f"{count} rows, expected {expected}"
    return {"distinct_checked": count, "emitted": shards * rows}


DUCKDB = """
import sys, time, resource, duckdb
files, target, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = duckdb.connect()
con.execute(f"SET threads = {threads}")
con.execute("SET memory_limit = '3GB'")  # out of core beyond it, as the issue's figures ask
start = time.monotonic()
con.execute(f"COPY (SELECT DISTINCT ON (key) key, payload FROM read_parquet('{files}') ORDER BY key) "
            f"TO '{target}' (FORMAT parquet, COMPRESSION zstd)")
print(round(time.monotonic() - start, 1), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10)
"""


def duckdb_figures(out: str, workers: int) -> dict:
    files = os.path.join(out, "overlapping", "_shards", "rows", "*.parquet")
    target = os.path.join(out, "duckdb.parquet")
    found = subprocess.run(
        [sys.executable, "-c", DUCKDB, files, target, str(workers)], check=True, capture_output=True, text=True
    )
    seconds, peak = found.stdout.split()[-2:]  # after any progress DuckDB prints
    import pyarrow.parquet as pq

    return {
        "duckdb_seconds": float(seconds),
        "duckdb_peak_mb": int(peak),
        "duckdb_rows": pq.read_metadata(target).num_rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--rows", type=int, default=100_000, help="rows each shard emits (the issue: 10^6)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None, help="where the scratch folder goes (default: the temporary folder)")
    parser.add_argument("--no-duckdb", action="store_true", help="skip DuckDB (at 10x it spills for long)")
    parser.add_argument("--min-free-gb", type=float, default=30.0, help="stop the run below this much free disk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="merge-scale-", dir=args.out) as out:
        spill = os.path.join(out, "spill")
        os.makedirs(spill)
        os.environ["BATCHENUM_RAY_SPILL_DIR"] = spill  # the private Ray spills there, so it is measured
        disk = DiskWatch(out, spill, int(args.min_free_gb * 2**30))
        started = time.monotonic()
        try:
            figures = run_merge(out, args.shards, args.rows, args.workers)
        finally:
            figures_disk = disk.stop()
        figures["run_seconds"] = round(time.monotonic() - started, 1)
        figures.update(figures_disk)
        figures["shard_files_mb"] = _folder_bytes(os.path.join(out, "overlapping", "_shards")) >> 20
        figures["table_mb"] = _folder_bytes(os.path.join(out, "overlapping", "rows")) >> 20
        figures.update(check(out, args.shards, args.rows))
        if not args.no_duckdb:
            figures.update(duckdb_figures(out, args.workers))
            figures["ratio_to_duckdb"] = round(figures["merge_seconds"] / figures["duckdb_seconds"], 2)
        print(json.dumps({"shards": args.shards, "rows_per_shard": args.rows, **figures}, indent=1))


if __name__ == "__main__":
    main()
