"""A height's sweep split across Ray tasks: concurrency on a 16-CPU cluster, and what n = 56 needs.

    python benchmarks/palago_split.py --max-n 36 --cpus 16         # (a) and (b)
    python benchmarks/palago_split.py --skip-run --project-n 56    # (b) only
    python benchmarks/palago_split.py --skip-projection --code /path/to/main   # (a) with other code
    python benchmarks/palago_split.py --task-cost                  # (c) only

(a) Starts a `ray start --head --num-cpus C` cluster of its own (its own temp dir and token, at
nice 10, stopped by pid at the end), runs ``batchenum run palago --max-n N --method transfer`` on
it, reads every task's execution from ``ray.timeline()`` and prints the median number of tasks
running at once over the run (time-weighted, from the first task's start to the last one's end),
two ways: every task executing, and only tasks holding a CPU (a height's task is not counted while
it waits for its column's pieces: Ray gives its CPU to them).  Then it checks the table against
the committed ``results/transfer/palago`` rows, as integers.  On this 2-core machine 16 CPUs are
16 logical CPUs: the figure shows the work keeps them occupied, not that it runs faster.

(b) Sweeps every height at --measure-n in this process, one step at a time, and records each
step's states processed and CPU time and how its states fall into signature buckets (the largest
bucket's share for a given number of tasks, for a phase of that one step).  Then it projects a run
at --project-n on --project-cpus CPUs: work grows by --growth per tile (docs/palago_transfer.md:
CPU time 1.43 to 1.55 per tile, states 1.44), every step is cut into tasks of at least
PIECE_STATES states (phases as the split makes them), and the wall time is the longer of the total
work over the CPUs and the slowest height's critical path (per step: its largest task).  The
symmetric shards are the mirror sweep, whole, and each rotation group's search in the plan's
pieces (jobs/palago_transfer.py, rotation_parts): their projection is printed beside, from the
figures of docs/palago_transfer.md.

(c) With --task-cost: pieces of a phase of height 10's largest column advanced by direct calls and
as Ray tasks returning 1, 4 or 16 buckets (a private local Ray of one CPU): a nested task's cost.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from cluster_parallelism import stop_cluster  # noqa: E402  (this folder is on sys.path)

from batchenum.jobs.palago_transfer import rotation_group_seconds, rotation_parts  # noqa: E402
from batchenum.solvers.palago.transfer import (
    _NO_SPARE,
    PHASE_STATE_STEPS,
    PIECE_STATES,
    _bucket_of,
    _sweep_steps,  # noqa: E402
    _SweepState,
    max_height,
)

TASK_NAME = re.compile(r"^task::palago (h\d+)( column (\d+) rows (\d+)-(\d+) part)?")


# ------------------------------------------------------------------------------ (a) concurrency


def run_on_cluster(max_n: int, cpus: int, code: str) -> tuple[list[dict], str, float]:
    """Run the transfer job (the checkout ``code``) on a private `ray start` cluster of ``cpus``
    CPUs; return its timeline events, the output folder and the CLI's wall seconds."""
    temp_dir = f"/tmp/bs{os.getpid()}"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "PYTHONPATH": code}
    out = tempfile.mkdtemp(prefix="bench-split-")
    try:  # a head that failed to start may still have left processes: the finally stops them too
        head = subprocess.run(
            [
                "nice",
                "-n",
                "10",
                sys.executable,
                "-m",
                "ray.scripts.scripts",
                "start",
                "--head",
                "--num-cpus",
                str(cpus),
                "--temp-dir",
                temp_dir,
                "--port",
                "0",
                "--include-dashboard",
                "false",
                "--disable-usage-stats",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=code,
        )
        if head.returncode:
            raise SystemExit(head.stderr)
        address = re.search(r"ray start --address='([^']+)'", head.stdout + head.stderr).group(1)
        started = time.monotonic()
        run = subprocess.run(
            [
                "nice",
                "-n",
                "10",
                sys.executable,
                "-m",
                "batchenum",
                "run",
                "palago",
                "--max-n",
                str(max_n),
                "--method",
                "transfer",
                "--out",
                out,
                "--address",
                address,
                "--quiet",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=code,
        )  # python -m: cwd first
        wall = time.monotonic() - started
        if run.returncode:
            raise SystemExit(run.stderr)
        events = subprocess.run(
            [sys.executable, "-c", _TIMELINE, address], capture_output=True, text=True, env=env, check=True
        ).stdout
        import json

        return json.loads(events), out, wall
    finally:
        stop_cluster(temp_dir)


# A driver of its own reads the cluster's task events (every job's) once they have reached the GCS.
_TIMELINE = """
import json, sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
time.sleep(3)
print(json.dumps(ray.timeline()))
"""


def executions(events: list[dict]) -> list[dict]:
    """Each named task of the run with its execution: [{name, span: (start, end), run: (start, end)}]
    in seconds.  A task's "task::<name>" event spans its time on a worker; the "task:execute"
    event on the same worker inside it is the execution."""
    execute: dict[str, list[tuple[float, float]]] = {}
    for event in events:
        if event.get("cat") == "task:execute":
            execute.setdefault(event["tid"], []).append((event["ts"] / 1e6, (event["ts"] + event["dur"]) / 1e6))
    tasks = []
    for event in events:
        if not event.get("cat", "").startswith("task::palago"):
            continue
        start, end = event["ts"] / 1e6, (event["ts"] + event["dur"]) / 1e6
        inside = [(a, b) for a, b in execute.get(event["tid"], []) if start - 1e-3 <= a and b <= end + 1e-3]
        if inside:
            tasks.append(
                {
                    "name": event["cat"][len("task::") :],
                    "span": (start, end),
                    "run": (min(a for a, _ in inside), max(b for _, b in inside)),
                }
            )
    return tasks


def busy_intervals(tasks: list[dict]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(every task's execution, the executions of tasks holding a CPU): a height's task minus,
    for each of its split phases, the time from its first piece's start on a worker to its last
    piece's end (it waits in ray.get then, its CPU lent to the pieces)."""
    waits: dict[tuple, list[float]] = {}
    for task in tasks:
        found = TASK_NAME.match("task::" + task["name"])
        if found and found.group(2):
            window = waits.setdefault((found.group(1), found.group(3), found.group(4)), [np.inf, -np.inf])  # a phase
            window[0], window[1] = min(window[0], task["span"][0]), max(window[1], task["run"][1])
    every, holding = [], []
    for task in tasks:
        every.append(task["run"])
        found = TASK_NAME.match("task::" + task["name"])
        gaps = sorted(
            (a, b)
            for (height, _, _), (a, b) in waits.items()
            if found and not found.group(2) and height == found.group(1)
        )
        start, end = task["run"]
        for a, b in gaps:
            if a > start:
                holding.append((start, min(a, end)))
            start = max(start, b)
        if start < end:
            holding.append((start, end))
    return every, holding


def concurrency(intervals: list[tuple[float, float]], cap: int | None = None) -> tuple[float, float, float, float]:
    """(time-weighted median, mean and max of the number of intervals open at once, duration)
    from the first start to the last end; ``cap``: counts above it are taken as it."""
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    durations: dict[int, float] = {}
    running, last = 0, points[0][0]
    for at, step in points:
        level = min(running, cap) if cap else running
        durations[level] = durations.get(level, 0.0) + at - last
        running, last = running + step, at
    total = sum(durations.values())
    seen, median = 0.0, 0
    for level in sorted(durations):
        seen += durations[level]
        if seen >= total / 2:
            median = level
            break
    mean = sum(level * d for level, d in durations.items()) / total
    return median, mean, max(level for level, d in durations.items() if d > 0), total


def table_matches_committed(out: str, max_n: int) -> str:
    import pandas as pd

    ours = pd.read_parquet(os.path.join(out, "palago", "creature_counts.parquet")).set_index("n").map(int)
    committed = pd.read_parquet(os.path.join(HERE, "results", "transfer", "palago", "creature_counts.parquet"))
    committed = committed.set_index("n").map(int).loc[1:max_n]
    same = ours.index.equals(committed.index) and (ours[committed.columns] == committed).all().all()
    return f"equal to results/transfer/palago rows 1..{max_n}" if same else "DIFFERENT from results/transfer/palago"


def part_a(max_n: int, cpus: int, code: str) -> None:
    events, out, wall = run_on_cluster(max_n, cpus, code)
    tasks = executions(events)
    pieces = sum(1 for task in tasks if " column " in task["name"])
    every, holding = busy_intervals(tasks)
    print(
        f"(a) n = {max_n} on a {cpus}-CPU Ray cluster ({code}): {len(tasks)} tasks ({pieces} pieces of split "
        f"columns, {len(tasks) - pieces} shards), CLI wall {wall:.1f} s"
    )
    median, mean, most, span = concurrency(every)
    print(f"    every task executing:  median {median}, mean {mean:.1f}, max {most} at once over {span:.1f} s")
    median, mean, most, span = concurrency(holding, cap=cpus)
    print(f"    tasks holding a CPU:   median {median}, mean {mean:.1f}, max {most} at once over {span:.1f} s")
    runs = sorted(task["run"][1] - task["run"][0] for task in tasks if " column " in task["name"])
    around = sorted(
        (task["span"][1] - task["span"][0]) - (task["run"][1] - task["run"][0])
        for task in tasks
        if " column " in task["name"]
    )
    if runs:
        print(
            f"    pieces: median {1e3 * runs[len(runs) // 2]:.0f} ms executing, median "
            f"{1e3 * around[len(around) // 2]:.0f} ms on their worker around it (arguments in, buckets out)"
        )
    print(f"    table: {table_matches_committed(out, max_n)}")
    subprocess.run(["rm", "-rf", out])


# ------------------------------------------------------------------------------- (b) projection


def step_profile(max_n: int, bucket_counts: tuple[int, ...]) -> list[dict]:
    """Every height's sweep at ``max_n``, one step at a time: the height, column, states before the
    step, states processed, CPU seconds, and for each number of tasks k in ``bucket_counts`` the
    largest signature bucket's share of the step's states (a phase of that one step)."""
    steps = []
    for height in range(1, max_height(max_n) + 1):
        sweep = (height, max_n, True, 3)
        state = _SweepState.start(max_n)
        data, count, step, spare = state.data, state.count, 0, _NO_SPARE
        done = (state.done_w, state.done_p, state.done_f)
        while count > 0:
            j = step % height
            shares = {}
            data = (data[0][:count], data[1])  # buffers sized to the states
            if height > 1:
                for k in bucket_counts:
                    bucket = np.zeros(count, np.int64)
                    _bucket_of(data[0], count, height, j, j + 1, k, bucket)
                    shares[k] = float(np.bincount(bucket, minlength=k).max() / count)
            stats = np.zeros(2, np.int64)
            started, rows = time.process_time(), count
            data, count, step, spare = _sweep_steps(sweep, stats, done, data, count, step, step + 1, spare)
            steps.append(
                {
                    "height": height,
                    "column": (step - 1) // height,
                    "states": rows,
                    "processed": int(stats[1]),
                    "cpu": time.process_time() - started,
                    "shares": shares,
                }
            )
    return steps


def part_b(measure_n: int, project_n: int, project_cpus: int, growth: float, state_growth: float) -> None:
    from batchenum.solvers.palago.transfer import count_height

    count_height(2, 8)  # compile or load the kernels outside the timings
    bucket_counts = (16, 64, 256, 1024)
    profile = step_profile(measure_n, bucket_counts)
    cpu = sum(p["cpu"] for p in profile)
    processed = sum(p["processed"] for p in profile)
    tiles = project_n - measure_n
    work_scale, state_scale = growth**tiles, state_growth**tiles
    print(
        f"(b) measured at n = {measure_n}: heights {cpu:.1f} CPU s, {processed:,} states processed, "
        f"{cpu / processed * 1e6:.2f} us per state-step"
    )
    total = cpu * work_scale
    print(
        f"    n = {project_n}: heights {total / 3600:.1f} CPU-h ({growth} per tile), {processed * state_scale:.2e} "
        f"state-steps ({state_growth} per tile), {cpu / processed * work_scale / state_scale * 1e6:.2f} us each"
    )
    # Each step's work at n = project_n: its states processed times the mean cost, times work_scale.  A split step's
    # slowest task holds the largest bucket's share, measured at the nearest k for a one-step phase;
    # a phase of s > 1 steps has s - 1 signature rows fewer, each at most doubling its largest class
    # (an estimate: 2^(s-1) times the one-step share).  Unsplit steps run whole, in the shard.
    by_height: dict[int, float] = {}
    largest = (0.0, None)
    for p in profile:
        states = p["states"] * state_scale
        tasks = max(1, min(project_cpus, int(states // PIECE_STATES)))
        work = p["processed"] * cpu / processed * work_scale  # the mean cost: a step's own time is mostly noise
        if tasks < 2 or not p["shares"]:
            slowest, detail = work, (p["height"], 1, None, 1.0)
        else:
            k = min(bucket_counts, key=lambda x: abs(np.log(x) - np.log(tasks)))
            phase = max(1, -(-PHASE_STATE_STEPS * tasks // int(states)))
            share = min(1.0, p["shares"][k] * 2 ** (phase - 1))
            slowest, detail = work * max(share, 1 / tasks), (p["height"], tasks, k, share)
        by_height[p["height"]] = by_height.get(p["height"], 0.0) + slowest
        largest = max(largest, (slowest, detail), key=lambda x: x[0])
    path_height = max(by_height, key=by_height.get)
    heights_wall = max(total / project_cpus, by_height[path_height])
    height, tasks, k, share = largest[1]
    print(
        f"    largest task: {largest[0]:.1f} s, {largest[0] / total:.1e} of the heights' work (a step of "
        f"h{height:03d} in {tasks} tasks, the largest holding {share:.3f} of its states"
        + (f", measured with {k} buckets at n = {measure_n})" if k else ")")
    )
    print(
        f"    critical path h{path_height:03d}: {by_height[path_height] / 60:.1f} min (its steps' largest tasks "
        f"added up); work / {project_cpus} CPUs: {total / project_cpus / 60:.1f} min"
    )
    print(f"    heights on {project_cpus} CPUs: about {heights_wall / 60:.0f} min of wall time")
    # the symmetric shards (docs/palago_transfer.md, "What n = 56 and n = 60 need"): the mirror
    # sweep, 9.9 CPU s at n = 50, 1.40 per tile, whole; each rotation group's search, the largest
    # 4.0 CPU s at n = 48 (the six 11.6 s), 1.73 per tile, in the plan's pieces (the largest of 8
    # pieces measured at 1.18-1.25 times their mean at n = 46: 1.25 here)
    mirror = 9.9 * 1.40 ** (project_n - 50)
    rotation = rotation_group_seconds(project_n)
    pieces = rotation_parts(project_n)
    symmetric = mirror + 2.9 * rotation
    largest_symmetric = max(mirror, rotation * min(1.0, 1.25 / pieces))
    whole = max(heights_wall, largest_symmetric)
    print(
        f"    symmetric counts (rotation groups in {pieces} piece{'s' if pieces > 1 else ''} each): about "
        f"{symmetric / 3600:.2f} CPU-h, the largest shard {largest_symmetric / 60:.1f} min, so the whole run "
        f"takes about {whole / 60:.0f} min; the largest task's share of all the work: "
        f"{max(largest[0], largest_symmetric) / (symmetric + total):.1e}"
    )


# ------------------------------------------------------------------------------ (c) task cost


def part_c(max_n: int, height: int = 10, rounds: int = 3) -> None:
    """One phase of a height's largest column cut into pieces of about PIECE_STATES states, each
    piece advanced by a direct call and as a Ray task (a private local Ray of one CPU, one task after
    another) returning 1, 4 or 16 buckets: what a nested task costs beside its sweep."""
    import ray

    from batchenum.solvers.palago.transfer import _sweep_columns, advance_piece, next_phase, split_generation

    sweep, state = (height, max_n, True, 3), _SweepState.start(max_n)
    largest = None
    while state.count > 0:
        done = (state.done_w, state.done_p, state.done_f)
        data, count, c, _ = _sweep_columns(sweep, np.zeros(2, np.int64), done, state.data, state.count, state.c, 1)
        state = _SweepState(
            data, count=count, c=c, done_w=state.done_w, done_p=state.done_p, done_f=state.done_f, stats=state.stats
        )
        if largest is None or state.count > largest.count:
            largest = _SweepState(
                (data[0][:count].copy(), data[1].copy()),
                count=count,
                c=c,
                done_w=done[0],
                done_p=done[1],
                done_f=done[2],
                stats=state.stats,
            )
    live = largest.generation_rows()
    tasks = live.rows // PIECE_STATES
    steps = next_phase(height, height, live.rows, tasks)
    following = next_phase(height, steps[1], live.rows, tasks)
    pieces = split_generation(live, tasks, height, steps)
    print(
        f"(c) h{height:03d} at n = {max_n}, column {largest.c}: {live.rows:,} states in {tasks} pieces, rows "
        f"{steps[0]}-{steps[1] - 1}"
    )

    def timed(run) -> float:
        run()  # compile, start the worker
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            run()
            times.append((time.perf_counter() - started) / tasks)
        return sorted(times)[len(times) // 2]

    direct = timed(lambda: [advance_piece(sweep, largest.c, steps, following, 16, piece) for piece in pieces])
    print(f"    direct call: {1e3 * direct:.1f} ms a piece")
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        task = ray.remote(num_cpus=1)(advance_piece)
        refs = [ray.put(piece) for piece in pieces]
        for buckets in (1, 4, 16):

            def run(buckets=buckets):
                ray.get(
                    [
                        task.options(num_returns=buckets + 1).remote(sweep, largest.c, steps, following, buckets, ref)[
                            0
                        ]
                        for ref in refs
                    ]
                )

            print(f"    Ray task, {buckets:2d} buckets: {1e3 * timed(run):.1f} ms a piece")
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-n", type=int, default=36, help="size of the cluster run (default 36)")
    parser.add_argument("--cpus", type=int, default=16, help="logical CPUs of the cluster (default 16)")
    parser.add_argument("--skip-run", action="store_true", help="only the projection (b)")
    parser.add_argument("--code", default=HERE, help="the checkout the cluster run uses (default: this one)")
    parser.add_argument("--skip-projection", action="store_true", help="only the cluster run (a)")
    parser.add_argument("--task-cost", action="store_true", help="only (c): a piece as a direct call and as a Ray task")
    parser.add_argument("--measure-n", type=int, default=36, help="size the per-state costs are measured at")
    parser.add_argument("--project-n", type=int, default=56, help="size of the projected run (default 56)")
    parser.add_argument("--project-cpus", type=int, default=1000, help="CPUs of the projected run (default 1000)")
    parser.add_argument("--growth", type=float, default=1.5, help="heights' CPU time per tile (default 1.5)")
    parser.add_argument("--state-growth", type=float, default=1.44, help="states per tile (default 1.44)")
    args = parser.parse_args()
    if args.task_cost:
        part_c(args.measure_n)
        return
    if not args.skip_run:
        part_a(args.max_n, args.cpus, args.code)
    if not args.skip_projection:
        part_b(args.measure_n, args.project_n, args.project_cpus, args.growth, args.state_growth)


if __name__ == "__main__":
    main()
