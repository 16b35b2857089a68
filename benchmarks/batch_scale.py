"""A dungeon batch at scale: driver memory against batch size, and object storage against a disk.

    python benchmarks/batch_scale.py --memory 100000,1000000,5000000
    python benchmarks/batch_scale.py --s3 1000000          # needs moto[server] (the test extra)

--memory runs ``batchenum run dungeons --workers 2 --no-head-start`` on generated 16x16 batches and
prints the driver's peak RSS (VmHWM, polled from /proc while it runs; the workers are separate
processes), so the ratio between the largest and the smallest batch shows whether the driver's
memory depends on the batch.  --s3 runs the same batch with --input and --out on a local
S3-compatible server (moto, on 127.0.0.1) and on a local disk, one after the other, and prints both
throughputs.  Figures, not assertions: compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
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
    subprocess.run([sys.executable, "-m", "batchenum", "generate", "dungeons", "--count", str(count), "--height",
                    str(GRID), "--width", str(GRID), "--seed", "1", "--out", path], check=True, capture_output=True)


def run_cli(args: list[str], env: dict | None = None) -> tuple[float, int, str]:
    """(wall seconds, driver peak RSS in bytes, stdout) of one CLI run."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "batchenum", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, **(env or {})})
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
        seconds, peak, _ = run_cli(["run", "dungeons", "--input", path, "--workers", "2", "--no-head-start",
                                    "--quiet", "--out", os.path.join(folder, f"out{count}")])
        peaks[count] = peak
        print(f"  {count:>10,} records  {seconds:7.1f} s  {count / seconds:>10,.0f}/s  driver peak {peak / 2**20:7.0f} MB",
              flush=True)
        os.remove(path)
    smallest, largest = min(peaks), max(peaks)
    print(f"  peak at {largest:,} / peak at {smallest:,}: {peaks[largest] / peaks[smallest]:.2f}")


def s3_against_disk(count: int, folder: str) -> None:
    port = _free_port()
    server = subprocess.Popen([shutil.which("moto_server") or "moto_server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _wait_for(endpoint)
        env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_REGION": "us-east-1"}
        import pyarrow.fs as pafs

        s3 = pafs.S3FileSystem(endpoint_override=endpoint, access_key="bench", secret_key="bench", region="us-east-1",
                               allow_bucket_creation=True)
        s3.create_dir("bench")
        path = os.path.join(folder, "d.jsonl")
        generate(count, path)
        pafs.copy_files(path, "bench/in/d.jsonl", destination_filesystem=s3)
        print(f"{count:,} {GRID}x{GRID} dungeons, --workers 2, input and output on each kind of storage")
        local, _, _ = run_cli(["run", "dungeons", "--input", path, "--workers", "2", "--quiet",
                               "--out", os.path.join(folder, "out")])
        remote, _, out = run_cli(["run", "dungeons", "--input", "s3://bench/in/d.jsonl", "--workers", "2", "--quiet",
                                  "--out", "s3://bench/out"], env)
        print(f"  local disk  {local:7.1f} s  {count / local:>10,.0f} dungeons/s")
        print(f"  s3 (moto)   {remote:7.1f} s  {count / remote:>10,.0f} dungeons/s   ({remote / local:.2f}x the disk time)")
        print("   ", out.strip().splitlines()[0])
    finally:
        server.kill()
        server.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(endpoint: str) -> None:
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
    args = parser.parse_args()
    if not args.memory and not args.s3:
        parser.error("give --memory and/or --s3")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        if args.memory:
            memory([int(c) for c in args.memory.split(",")], folder)
        if args.s3:
            s3_against_disk(args.s3, folder)


if __name__ == "__main__":
    main()
