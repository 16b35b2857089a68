"""What planning a JSONL batch costs the driver: newlines counted by the driver against by Ray tasks.

    python benchmarks/batch_plan.py --lines 1000000,100000000

For each size, writes a JSONL file of short lines (``{"id":"r1","grid":["."]}``) to a temporary
folder (deleted afterwards), then plans it twice with ``plan_slices`` (25,000 lines per slice):
once counted by the driver itself (what every input cost before issue 10 item 3, and what an input
of at most ``DRIVER_BYTES`` still costs), once by counting tasks on a private local Ray started
beforehand (its start-up is not counted).  Prints the driver's CPU seconds (``time.process_time``
of this process: Ray's threads in the driver included) and wall seconds, each the best of
``--repeat`` plans (the first task plan also pays for sending the function to the workers), and
the number of counting tasks.  Both plans must be equal.  Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from batchenum.pipeline.inputs import plan_slices
from batchenum.pipeline.job import PlanContext
from batchenum.pipeline.runner import RaySession

LINE = b'{"id":"r1","grid":["."]}\n'
PER_SLICE = 25_000


def write_lines(path: str, count: int) -> None:
    chunk = LINE * 100_000
    with open(path, "wb") as handle:
        for _ in range(count // 100_000):
            handle.write(chunk)
        handle.write(LINE * (count % 100_000))


def timed_plan(path: str, task_map, repeat: int) -> tuple[list[dict], float, float]:
    """(plan, driver CPU s, wall s), the best of ``repeat`` plans; task_map None counts in this process."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        plan = plan_slices(
            path, "grid", PER_SLICE, PlanContext(task_map=task_map), driver_bytes=0 if task_map else None
        )
        best_cpu, best_wall = min(best_cpu, time.process_time() - cpu), min(best_wall, time.perf_counter() - wall)
    return plan, best_cpu, best_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="1000000,100000000", help="comma-separated line counts")
    parser.add_argument("--workers", type=int, default=None, help="CPUs of the local Ray (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="plans per figure, the best kept (default 3)")
    args = parser.parse_args()
    ray = RaySession(None, args.workers)
    print(f"starting a local Ray: {ray.connect()}")
    tasks = []

    def counting_map(fn, items):
        tasks.append(len(items))
        return ray.map(fn, items)

    print(
        f"{'lines':>12} {'MB':>8} {'slices':>7} | {'driver count: CPU s':>20} {'wall s':>7} | "
        f"{'task count: driver CPU s':>24} {'wall s':>7} {'tasks':>6}"
    )
    folder = tempfile.mkdtemp(prefix="batch-plan-", dir="/tmp")
    try:
        for count in (int(n) for n in args.lines.split(",")):
            path = os.path.join(folder, f"batch-{count}.jsonl")
            write_lines(path, count)
            by_driver, driver_cpu, driver_wall = timed_plan(path, None, args.repeat)
            tasks.clear()
            by_tasks, task_cpu, task_wall = timed_plan(path, counting_map, args.repeat)
            assert by_tasks == by_driver, "the two plans differ"
            print(
                f"{count:>12,} {os.path.getsize(path) / 1e6:>8,.0f} {len(by_tasks):>7,} | {driver_cpu:>20.3f} "
                f"{driver_wall:>7.2f} | {task_cpu:>24.3f} {task_wall:>7.2f} {tasks[-1]:>6}",
                flush=True,
            )
            os.remove(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        ray.close()


if __name__ == "__main__":
    main()
