"""``batchenum warm``: compile every numba kernel the jobs use, here or on every node of a cluster.

numba compiles a kernel on its first call in a process and keeps the machine code in its cache
(``__pycache__`` beside the installed package, or ``NUMBA_CACHE_DIR``), so a node's first run pays
the compiles once.  ``warm`` pays them before a run: it runs each job's shard code on a few tiny
records in a scratch folder, which calls every kernel a real shard calls.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time

from batchenum.pipeline.cli import Command
from batchenum.pipeline.job import PlanContext

__all__ = ["warm_kernels", "COMMANDS"]


def warm_kernels() -> tuple[str, dict[str, float]]:
    """Compile (or load from the cache) every kernel the jobs use in this process; returns this
    host's name and the seconds each job's kernels took."""
    from batchenum.jobs.dungeons import DungeonJob
    from batchenum.jobs.nonary import NonaryJob
    from batchenum.jobs.palago import PalagoJob
    from batchenum.jobs.palago_transfer import PalagoTransferJob
    from batchenum.pipeline.store import write_batch
    from batchenum.solvers.dungeon import generate as dungeons
    from batchenum.solvers.nonary import generate as door_graphs
    from batchenum.solvers.palago.symmetric import symmetric_counts

    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="batchenum-warm-") as folder:
        dungeon_file, nonary_file = os.path.join(folder, "d.jsonl"), os.path.join(folder, "n.jsonl")
        write_batch(dungeon_file, "grid", [f"d{k}" for k in range(8)], dungeons(8, 6, 6, 0), None)
        write_batch(nonary_file, "doors", [f"g{k}" for k in range(8)], door_graphs(8, 4, 8, 0), None)
        warmers = {
            "palago": lambda: _run_every_shard(PalagoJob(10, catalogue_max_n=10, shards=1)),
            "palago transfer": lambda: (_run_every_shard(PalagoTransferJob(8)), symmetric_counts(8), _split_sweep()),
            "dungeons": lambda: _run_every_shard(DungeonJob(dungeon_file)),
            "nonary": lambda: _run_every_shard(NonaryJob(nonary_file)),
        }
        for name, warm in warmers.items():
            started = time.perf_counter()
            warm()
            seconds[name] = round(time.perf_counter() - started, 2)
    return socket.gethostname(), seconds


def _split_sweep() -> None:
    """The kernels of a height split across tasks (merge, buckets), which run_shard uses only on Ray."""
    from batchenum.pipeline.tasks import InProcessTasks
    from batchenum.solvers.palago.transfer import count_height

    count_height(4, 12, tasks=InProcessTasks(), parts=2, piece_states=2)


def _run_every_shard(job) -> None:
    for shard in job.plan(PlanContext()):
        job.run_shard(shard)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", metavar="A",
                        help="warm every node of this Ray cluster (default: $RAY_ADDRESS; neither: this machine)")


def _warm(args: argparse.Namespace) -> int:
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not address:
        host, seconds = warm_kernels()
        print(_line(host, seconds))
        return 0
    from batchenum.pipeline.runner import RaySession

    session = RaySession(address, None)
    try:
        for host, seconds in session.on_every_node(warm_kernels):
            print(_line(host, seconds))
    finally:
        session.close()
    return 0


def _line(host: str, seconds: dict[str, float]) -> str:
    return f"warm: {host}: " + ", ".join(f"{name} {value:.1f} s" for name, value in seconds.items())


COMMANDS = [Command(("warm",), "compile every kernel the jobs use (numba), here or on every node of --address",
                    _add_arguments, _warm)]
