"""A large height split across tasks: every process's peak memory, the object store's spills, and a
kill during a split column resumed from its bucketed save.

    python benchmarks/palago_split_memory.py --height 12 --n 50 --cpus 8
    python benchmarks/palago_split_memory.py --height 12 --n 50 --cpus 8 --kill-after-save
    python benchmarks/palago_split_memory.py --height 12 --n 48 --cpus 8 --object-store 300e6 --skip-serial

1. The height's sweep in one fresh process (count_height): its CPU time, state-steps, peak states
   and peak resident memory (VmHWM) beyond what the process held before the sweep (the
   interpreter, numpy, numba's kernels): the height's own peak.
2. The same height on a private local Ray of --cpus CPUs, started as a run starts it
   (pipeline/runner.py's RaySession: pipeline/local_ray.py's object store size and spill folder,
   the spill folder under a temporary folder of this benchmark): one Ray task sweeps it as a
   shard's task does (jobs/palago_transfer.py, sweep_height with the shard's nested tasks and a
   checkpoint saved every --interval seconds in a temporary folder).  Every 0.2 s the benchmark
   reads VmHWM and the name of every process below that run's driver (Ray's workers show the task
   they run) and the bytes in the spill folder.  It prints the largest peaks against the bound
   1.5 x (the height's own peak / --cpus) + the interpreter, and checks the counts against (1).
3. With --kill-after-save: the run of (2) is killed (SIGKILL to its process group, Ray with it)
   once a split save is committed, then run again; the second run resumes from the save (its
   state-steps resumed are printed) and its counts are checked against (1).

Figures only: nothing is asserted but equal counts.  The machine is shared; run at nice 10.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2**30

_SERIAL = """
import json, sys, numpy as np
from batchenum.jobs.palago_transfer import ShardCost
from batchenum.solvers.palago.transfer import count_height
height, n = int(sys.argv[1]), int(sys.argv[2])
count_height(3, 10)  # the kernels compiled or loaded before the mark
stats = np.zeros(2, np.int64)
with ShardCost() as cost:
    counts = count_height(height, n, stats=stats)
print(json.dumps({**cost.stats(), "peak_states": int(stats[0]), "state_steps": int(stats[1]),
                  "counts": [str(x) for x in counts]}))
"""

# The driver of the split run: a private Ray as a run starts it, and one task that sweeps the height
# as the transfer job's shard does.  argv: height, n, cpus, checkpoint folder, save interval, task states.
_SPLIT = """
import json, os, sys, time
import numpy as np
from batchenum.pipeline.runner import RaySession

height, n, cpus, folder, interval = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
task_states = int(sys.argv[6]) if sys.argv[6] != "default" else None
session = RaySession(None, cpus)
session.connect()  # before Ray is imported here: it sets Ray's token first
import ray

class CountedTasks:  # the shard's nested tasks, noting the most a phase had (names end "part t/k")

    def __init__(self, tasks):
        self.tasks, self.cpus, self.most = tasks, tasks.cpus, 0

    def submit(self, fn, *args, returns=1, name=""):
        self.most = max(self.most, int(name.rsplit("/", 1)[1]))
        return self.tasks.submit(fn, *args, returns=returns, name=name)

    def get(self, handles):
        return self.tasks.get(handles)

@ray.remote(num_cpus=1, max_retries=0)
def sweep(height, n, folder, interval, task_states):
    from batchenum.jobs.palago_transfer import ShardCost, resumed_stats, sweep_height
    from batchenum.pipeline.checkpoint import Checkpoint
    from batchenum.pipeline.job import Shard
    from batchenum.pipeline.runner import _NestedTasks
    from batchenum.pipeline.storage import Storage

    tasks = CountedTasks(_NestedTasks(f"palago h{height:03d}", 0))
    checkpoint = Checkpoint(Storage.at(folder), Shard(f"h{height:03d}", {"height": height, "max_n": n}), {"bench": "split"})
    resume = checkpoint.load()
    resumed = resumed_stats(resume) if resume is not None else np.zeros(2, np.int64)
    stats = np.zeros(2, np.int64)
    with ShardCost() as cost:
        counts = sweep_height(height, n, stats=stats, tasks=tasks, parts=tasks.cpus, resume=resume,
                              checkpoint=checkpoint, save_every=interval, task_states=task_states)
    checkpoint.clear()
    return {**cost.stats(), "pid": os.getpid(), "tasks": tasks.most, "state_steps": int(stats[1]),
            "state_steps_resumed": int(resumed[1]), "counts": [str(x) for x in counts]}

started = time.monotonic()
result = ray.get(sweep.remote(height, n, folder, interval, task_states))
result["wall"] = time.monotonic() - started
print(json.dumps(result), flush=True)
session.close()
"""


def serial(height: int, n: int) -> dict:
    run = subprocess.run(
        ["nice", "-n", "10", sys.executable, "-c", _SERIAL, str(height), str(n)],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


def process_tree(root: int) -> set[int]:
    from batchenum.pipeline.local_ray import process_tree as tree

    return tree([root])


MEMORY_FIELDS = ("VmHWM", "RssAnon", "RssFile", "RssShmem")


def read_process(pid: int) -> tuple[dict[str, int], str] | None:
    """({VmHWM, RssAnon, RssFile, RssShmem: bytes}, the process's name as ps shows it, on one line:
    Ray's workers name their task), or None."""
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = {
                line.split(":")[0]: int(line.split()[1]) * 1024
                for line in status
                if line.split(":")[0] in MEMORY_FIELDS
            }
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            name = " ".join(cmdline.read().replace(b"\0", b" ").decode(errors="replace").split())
        return fields, name
    except (OSError, ValueError):
        return None


def folder_bytes(folder: str) -> int:
    total = 0
    for path in glob.glob(os.path.join(folder, "**"), recursive=True):
        try:
            total += os.path.getsize(path) if os.path.isfile(path) else 0
        except OSError:
            pass
    return total


class Watch:
    """Peaks read while a run lives, per process: VmHWM (the kernel's high-water mark, which counts
    the object store's shared pages a process has touched: a Ray worker that read or wrote many
    objects counts most of the store), and, sampled, the process's own memory: RssAnon (its private
    pages) + RssFile (the interpreter's and libraries' mapped files), without RssShmem (the object
    store's pages, shared by every process and counted once on the machine, in /dev/shm).  And the
    bytes in the spill folder."""

    def __init__(self) -> None:
        self.hwm: dict[int, int] = {}
        self.own: dict[int, tuple[int, int, str]] = {}  # pid: (RssAnon + RssFile, RssAnon, name then)
        self.shared: dict[int, int] = {}  # pid: RssShmem at most
        self.spilled = 0

    def poll(self, root: int, spill: str) -> None:
        for pid in process_tree(root):
            found = read_process(pid)
            if found is None or "VmHWM" not in found[0]:
                continue
            fields, name = found
            self.hwm[pid] = max(self.hwm.get(pid, 0), fields["VmHWM"])
            own = fields.get("RssAnon", 0) + fields.get("RssFile", 0)
            if own > self.own.get(pid, (0, 0, ""))[0]:
                self.own[pid] = (own, fields.get("RssAnon", 0), name)
            self.shared[pid] = max(self.shared.get(pid, 0), fields.get("RssShmem", 0))
        self.spilled = max(self.spilled, folder_bytes(spill))

    def merged(self, other: Watch) -> Watch:
        both = Watch()
        for watch in (self, other):
            for pid, value in watch.hwm.items():
                both.hwm[pid] = max(both.hwm.get(pid, 0), value)
            for pid, own in watch.own.items():
                both.own[pid] = max(both.own.get(pid, (0, 0, "")), own)
            for pid, value in watch.shared.items():
                both.shared[pid] = max(both.shared.get(pid, 0), value)
        both.spilled = max(self.spilled, other.spilled)
        return both

    def largest_own(self) -> int:
        return max((own for own, _, _ in self.own.values()), default=0)


def committed_counts(height: int, n: int) -> list[str] | None:
    """The height's fixed counts of sizes 1..n from the committed table's partial counts
    (results/transfer/palago, n <= 56: a count of size s <= n is the same whatever max_n swept it),
    as decimal strings; None when the table does not reach n."""
    import pandas as pd

    rows = pd.read_parquet(os.path.join(HERE, "results", "transfer", "palago", "partial_counts.parquet"))
    rows = rows[(rows["shard"] == f"h{height:03d}") & (rows["n"] <= n)].sort_values("n")
    return [str(int(x)) for x in rows["count"]] if len(rows) == n else None


def split_saved(folder: str) -> bool:
    """Whether a split save (an index naming parts) is committed in the checkpoint folder."""
    from batchenum.jobs.palago_transfer import BucketIndex

    for path in glob.glob(os.path.join(folder, "_checkpoints", "*.ckpt")):
        with open(path, "rb") as handle:
            data = handle.read().partition(b"\n")[2]
        if data and BucketIndex.holds(data):
            return True
    return False


def split_run(args, folder: str, spill: str, kill_after_save: bool) -> tuple[dict | None, Watch]:
    """One run of the split driver; killed once a split save is committed if asked."""
    env = {**os.environ, "BATCHENUM_RAY_SPILL_DIR": spill}
    if args.object_store:
        env["BATCHENUM_RAY_OBJECT_STORE"] = str(int(float(args.object_store)))
    command = [sys.executable, "-c", _SPLIT, str(args.height), str(args.n), str(args.cpus), folder, str(args.interval)]
    command.append(str(args.task_states or "default"))
    run = subprocess.Popen(
        ["nice", "-n", "10", *command],
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(folder, "split-run.log"), "a"),
        text=True,
        env=env,
        cwd=HERE,
        start_new_session=True,
    )
    watch = Watch()
    while run.poll() is None:
        watch.poll(run.pid, spill)
        if kill_after_save and split_saved(folder):
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            return None, watch
        time.sleep(0.2)
    out = run.stdout.read() if run.stdout else ""
    if run.returncode:
        with open(os.path.join(folder, "split-run.log")) as log:
            raise SystemExit(f"the split run failed (status {run.returncode}):\n{log.read()[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]), watch


def saved_index(folder: str) -> str:
    """What the split save in the checkpoint folder holds, in words."""
    from batchenum.jobs.palago_transfer import BucketIndex

    for path in glob.glob(os.path.join(folder, "_checkpoints", "*.ckpt")):
        with open(path, "rb") as handle:
            index = BucketIndex.from_bytes(handle.read().partition(b"\n")[2])
        return f"column {index.c}, {index.rows:,} states in {len(index.names)} parts"
    return "no save"


def report_peaks(args, watch: Watch, when: str) -> None:
    top = sorted(watch.own.items(), key=lambda item: -item[1][0])
    print(
        f"  peaks {when}: spill folder at most {watch.spilled / 2**20:,.1f} MiB; object store pages one "
        f"process touched at most {max(watch.shared.values(), default=0) / GIB:.3f} GiB"
    )
    print("  own memory (RssAnon + RssFile) at most, of it RssAnon, VmHWM (with the store's pages)")
    for pid, (own, anon, name) in top[: args.top]:
        print(f"  {own / GIB:7.3f} {anon / GIB:7.3f} {watch.hwm.get(pid, 0) / GIB:7.3f} GiB  pid {pid:>7}  {name[:90]}")


def report(args, whole: dict | None, result: dict, watch: Watch) -> None:
    print(
        f"  wall {result['wall']:.0f} s, {result['tasks']} tasks a phase at most; the height's process (pid "
        f"{result['pid']}): VmHWM {result.get('peak_rss_bytes', 0) / GIB:.3f} GiB, "
        f"{result.get('start_rss_bytes', 0) / GIB:.3f} GiB at its start, CPU {result['cpu_ms'] / 1000:.1f} s"
    )
    report_peaks(args, watch, "of the runs")
    if whole is not None:
        own = whole["peak_rss_bytes"] - whole["start_rss_bytes"]
        interpreters = [("a plain interpreter", whole["start_rss_bytes"])]
        if args.worker_interpreter:
            interpreters.append(("a Ray worker's, with the kernels", args.worker_interpreter))
        for label, interpreter in interpreters:
            bound = 1.5 * own / result["tasks"] + interpreter
            largest = watch.largest_own()
            print(
                f"  bound with {label} ({interpreter / GIB:.3f} GiB): 1.5 x {own / GIB:.3f} / {result['tasks']} + "
                f"{interpreter / GIB:.3f} = {bound / GIB:.3f} GiB; the largest process's own memory "
                f"{largest / GIB:.3f} GiB ({largest / bound:.2f} of it); its VmHWM "
                f"{max(watch.hwm.values(), default=0) / GIB:.3f} GiB"
            )
        equal = result["counts"] == whole["counts"] if whole["counts"] is not None else "not computed"
        print(
            f"  counts equal to the serial sweep's: {equal}; state-steps {result['state_steps']:,} "
            f"(serial {whole['state_steps']:,}), resumed {result['state_steps_resumed']:,}"
        )
    committed = committed_counts(args.height, args.n)
    if committed is not None:
        print(f"  counts equal to the committed table's partial counts: {result['counts'][1:] == committed}")


def worker_interpreter(args) -> int:
    """The largest own memory (RssAnon + RssFile) of a process in a split run too small to hold
    anything (h010 at n = 36: pieces of about 1 MB): a Ray worker's interpreter with the kernels."""
    import copy

    small = copy.copy(args)
    small.height, small.n, small.object_store = 10, 36, None
    with (
        tempfile.TemporaryDirectory(prefix="bench-split-ckpt-") as folder,
        tempfile.TemporaryDirectory(prefix="bench-split-spill-") as spill,
    ):
        _, watch = split_run(small, folder, spill, kill_after_save=False)
    return watch.largest_own()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--height", type=int, default=12)
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--cpus", type=int, default=8, help="the private Ray's CPUs (tasks a phase: at least)")
    parser.add_argument("--task-states", type=int, help="the most states a task advances (default: TASK_STATES)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between saves (default 30)")
    parser.add_argument("--object-store", help="the object store's bytes (BATCHENUM_RAY_OBJECT_STORE)")
    parser.add_argument("--kill-after-save", action="store_true", help="kill the run at its first split save, rerun")
    parser.add_argument(
        "--skip-serial", action="store_true", help="no serial sweep (the counts checked against the table's)"
    )
    parser.add_argument(
        "--serial", help="the serial sweep's figures instead: PEAK_RSS_BYTES,START_RSS_BYTES,STATE_STEPS"
    )
    parser.add_argument("--top", type=int, default=6, help="processes listed (default 6)")
    parser.add_argument("--skip-baseline", action="store_true", help="no small run for a Ray worker's interpreter")
    args = parser.parse_args()
    args.worker_interpreter = 0

    whole = None
    if args.serial:
        peak, start, steps = (int(x) for x in args.serial.split(","))
        whole = {"peak_rss_bytes": peak, "start_rss_bytes": start, "state_steps": steps, "counts": None}
    elif not args.skip_serial:
        whole = serial(args.height, args.n)
        own = whole["peak_rss_bytes"] - whole["start_rss_bytes"]
        print(
            f"serial h{args.height:03d} n = {args.n}: CPU {whole['cpu_ms'] / 1000:.1f} s, "
            f"{whole['state_steps']:,} state-steps, peak {whole['peak_states']:,} states, "
            f"peak RSS {whole['peak_rss_bytes'] / GIB:.3f} GiB ({own / GIB:.3f} GiB beyond the "
            f"{whole['start_rss_bytes'] / GIB:.3f} GiB at its start)",
            flush=True,
        )
    if not args.skip_baseline:
        args.worker_interpreter = worker_interpreter(args)
        print(
            f"a Ray worker's own memory with the kernels loaded, pieces of about 1 MB: "
            f"{args.worker_interpreter / GIB:.3f} GiB",
            flush=True,
        )
    with (
        tempfile.TemporaryDirectory(prefix="bench-split-ckpt-") as folder,
        tempfile.TemporaryDirectory(prefix="bench-split-spill-") as spill,
    ):
        killed = Watch()
        if args.kill_after_save:
            _, killed = split_run(args, folder, spill, kill_after_save=True)
            print(f"killed after a split save: {saved_index(folder)}, {folder_bytes(folder) / 2**20:,.1f} MiB on disk")
            sys.stdout.flush()
            report_peaks(args, killed, "before the kill")
        result, watch = split_run(args, folder, spill, kill_after_save=False)
        assert result is not None
        print(
            f"split h{args.height:03d} n = {args.n} on {args.cpus} CPUs" + (", resumed" if args.kill_after_save else "")
        )
        report(args, whole, result, killed.merged(watch))


if __name__ == "__main__":
    main()
